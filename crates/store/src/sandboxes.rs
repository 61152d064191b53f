//! Reading sandboxes as their caller may see them (sql/sandboxes.sql): one by reference or
//! id, a user's list, and a subtree.

use chrono::{DateTime, Utc};
use uuid::Uuid;

use crate::row::{FromRow, all};
use crate::{Code, Error, Principal, Sandbox, Store, queries};

impl Store {
    pub async fn sandbox(&self, caller: &Principal, reference: &str) -> Result<Sandbox, Error> {
        let rows = self.call(&queries::SANDBOX_GET, &[caller, &reference]).await?;
        let r = rows.first().ok_or_else(|| Error::new(Code::NotFound, format!("sandbox {reference} not found")))?;
        Sandbox::from_row(r)
    }

    /// A sandbox by id, for the gateway's own use (no authorization).
    pub async fn sandbox_by_id(&self, id: Uuid) -> Result<Sandbox, Error> {
        let rows = self.call(&queries::SANDBOX_BY_ID, &[&id]).await?;
        let r = rows.first().ok_or_else(|| Error::new(Code::NotFound, format!("sandbox {id} not found")))?;
        Sandbox::from_row(r)
    }

    /// A user's sandboxes (an admin's: everyone's), newest first; `after` is the last
    /// (created_at, id) of the previous page.
    pub async fn list_sandboxes(
        &self,
        user: &Principal,
        include_stopped: bool,
        after: Option<(DateTime<Utc>, Uuid)>,
        limit: i64,
    ) -> Result<Vec<Sandbox>, Error> {
        let (after_at, after_id) = after.map_or((None, None), |(a, i)| (Some(a), Some(i)));
        all(&self.call(&queries::SANDBOX_LIST, &[user, &include_stopped, &after_at, &after_id, &limit]).await?)
    }

    /// A sandbox and its descendants, in tree order.
    pub async fn tree(&self, caller: &Principal, reference: &str) -> Result<Vec<Sandbox>, Error> {
        all(&self.call(&queries::SANDBOX_SUBTREE, &[caller, &reference]).await?)
    }
}
