//! A tree's grant (sql/grants.sql): its user creates, reads, changes and revokes it, lists
//! the history, and reads what is used and what remains from any sandbox of the tree.

use chrono::{DateTime, Utc};
use serde::Serialize;
use tokio_postgres::Row;
use uuid::Uuid;

use crate::row::{FromRow, RowExt, all};
use crate::{Code, Error, Grant, GrantChange, GrantState, GrantValues, Kind, Principal, Store, queries};

/// The grant over a sandbox's tree, seen from that sandbox.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct GrantStatus {
    pub grant_id: i64,
    pub root_id: Uuid,
    pub root_name: String,
    /// The sandbox the counts are about (the caller's own for a sandbox caller).
    pub sandbox_id: Uuid,
    pub sandbox_name: String,
    pub sandbox_kind: Kind,
    pub state: GrantState,
    pub max_depth: i32,
    pub max_breadth: i32,
    pub max_total: i32,
    pub expires_at: DateTime<Utc>,
    pub program: String,
    pub depth: i32,
    pub live_children: i32,
    pub live_total: i32,
    pub remaining_depth: i32,
    pub remaining_breadth: i32,
    pub remaining_total: i32,
}

impl Store {
    pub async fn create_grant(&self, caller: &Principal, root: &str, g: &GrantValues) -> Result<Grant, Error> {
        let rows = self
            .call(
                &queries::GRANT_CREATE,
                &[
                    caller,
                    &root,
                    &g.max_depth,
                    &g.max_breadth,
                    &g.max_total,
                    &g.expires_at,
                    &g.program,
                    &g.tool_idle_seconds,
                    &g.program_resolved,
                    &g.rate.calls,
                    &g.rate.period_s,
                ],
            )
            .await?;
        one_grant(&rows)
    }

    pub async fn grant(&self, caller: &Principal, root: &str) -> Result<Grant, Error> {
        one_grant(&self.call(&queries::GRANT_CURRENT, &[caller, &root]).await?)
    }

    pub async fn update_grant(&self, caller: &Principal, root: &str, c: &GrantChange) -> Result<Grant, Error> {
        let (program, resolved) = c.program.as_ref().map(|(p, r)| (p, r)).unzip();
        let rows = self
            .call(
                &queries::GRANT_UPDATE,
                &[
                    caller,
                    &root,
                    &c.max_depth,
                    &c.max_breadth,
                    &c.max_total,
                    &c.expires_at,
                    &program,
                    &c.tool_idle_seconds,
                    &resolved,
                    &c.rate.map(|r| r.calls),
                    &c.rate.map(|r| r.period_s),
                ],
            )
            .await?;
        one_grant(&rows)
    }

    pub async fn revoke_grant(&self, caller: &Principal, root: &str) -> Result<Grant, Error> {
        one_grant(&self.call(&queries::GRANT_REVOKE, &[caller, &root]).await?)
    }

    /// Every grant of the caller's trees, or one tree's history when `root` is given.
    pub async fn list_grants(&self, caller: &Principal, root: Option<&str>) -> Result<Vec<Grant>, Error> {
        all(&self.call(&queries::GRANT_LIST, &[caller, &root]).await?)
    }

    /// The grant of `reference`'s tree (a sandbox caller: its own when `reference` is None).
    pub async fn grant_status(&self, caller: &Principal, reference: Option<&str>) -> Result<GrantStatus, Error> {
        let rows = self.call(&queries::GRANT_STATUS, &[caller, &reference]).await?;
        let r = rows.first().ok_or_else(|| Error::new(Code::NotFound, "no grant"))?;
        Ok(GrantStatus {
            grant_id: r.col("grant_id")?,
            root_id: r.col("root_id")?,
            root_name: r.col("root_name")?,
            sandbox_id: r.col("sandbox_id")?,
            sandbox_name: r.col("sandbox_name")?,
            sandbox_kind: r.col("sandbox_kind")?,
            state: r.col("state")?,
            max_depth: r.col("max_depth")?,
            max_breadth: r.col("max_breadth")?,
            max_total: r.col("max_total")?,
            expires_at: r.col("expires_at")?,
            program: r.col("program")?,
            depth: r.col("depth")?,
            live_children: r.col("live_children")?,
            live_total: r.col("live_total")?,
            remaining_depth: r.col("remaining_depth")?,
            remaining_breadth: r.col("remaining_breadth")?,
            remaining_total: r.col("remaining_total")?,
        })
    }
}

fn one_grant(rows: &[Row]) -> Result<Grant, Error> {
    Grant::from_row(rows.first().ok_or_else(|| Error::new(Code::NotFound, "no grant"))?)
}
