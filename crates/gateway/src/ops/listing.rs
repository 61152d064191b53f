//! Listings a user pages through: their sandboxes, and the audit log.

use openshell_store::{AuditEntry, AuditFilter, Error, Principal, Sandbox};

use super::page::{Page, PageRequest};
use crate::{Gateway, input};

/// Which audit entries to list (every field optional).
#[derive(Default)]
pub struct AuditQuery {
    pub sandbox: Option<String>,
    pub user: Option<String>,
    /// RFC 3339 instants, as the caller wrote them.
    pub since: String,
    pub until: String,
    pub refusals_only: bool,
}

/// A sandbox page token: its creation (microseconds) and id, the listing's order.
fn sandbox_key(s: &Sandbox) -> String {
    format!("{}.{}", s.created_at.timestamp_micros(), s.id)
}

fn parse_sandbox_key(t: &str) -> Option<(chrono::DateTime<chrono::Utc>, uuid::Uuid)> {
    let (micros, id) = t.split_once('.')?;
    Some((chrono::DateTime::from_timestamp_micros(micros.parse().ok()?)?, id.parse().ok()?))
}

impl Gateway {
    /// The caller's sandboxes (every user's with `all`, for an admin), a page at a time.
    pub async fn list_sandboxes(
        &self,
        caller: &Principal,
        all: bool,
        page: PageRequest,
    ) -> Result<Page<Sandbox>, Error> {
        let (fetch, after) = page.bounds(parse_sandbox_key)?;
        let rows = self.store.list_sandboxes(caller, all, after, fetch).await?;
        Ok(page.page(rows, sandbox_key))
    }

    /// Audit entries the caller may read, newest first, a page at a time.
    pub async fn list_audit(
        &self,
        caller: &Principal,
        q: AuditQuery,
        page: PageRequest,
    ) -> Result<Page<AuditEntry>, Error> {
        let (fetch, before_id) = page.bounds(|t| t.parse::<i64>().ok())?;
        if let Some(s) = &q.sandbox {
            input::reference("sandbox", s)?;
        }
        let filter = AuditFilter {
            sandbox: q.sandbox,
            user: q.user,
            since: input::optional_time("since", &q.since)?,
            until: input::optional_time("until", &q.until)?,
            refusals_only: q.refusals_only,
            before_id,
            limit: fetch,
        };
        let rows = self.store.audit(caller, &filter).await?;
        Ok(page.page(rows, |a| a.id.to_string()))
    }
}
