//! A tree's grant as a caller may read it: limits, what is used and what remains.

use chrono::{DateTime, Utc};
use serde::Serialize;
use uuid::Uuid;

use crate::{Error, GrantState, Kind, Principal, Store};

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
    /// The grant of `reference`'s tree (a sandbox caller: its own when `reference` is None).
    pub async fn grant_status(&self, caller: &Principal, reference: Option<&str>) -> Result<GrantStatus, Error> {
        let rows = self.call("SELECT * FROM grant_status(p_caller => $1, p_ref => $2)", &[caller, &reference]).await?;
        let r = rows.first().ok_or_else(|| Error::new(crate::Code::NotFound, "no grant"))?;
        Ok(GrantStatus {
            grant_id: r.get("grant_id"),
            root_id: r.get("root_id"),
            root_name: r.get("root_name"),
            sandbox_id: r.get("sandbox_id"),
            sandbox_name: r.get("sandbox_name"),
            sandbox_kind: r.get("sandbox_kind"),
            state: r.get("state"),
            max_depth: r.get("max_depth"),
            max_breadth: r.get("max_breadth"),
            max_total: r.get("max_total"),
            expires_at: r.get("expires_at"),
            program: r.get("program"),
            depth: r.get("depth"),
            live_children: r.get("live_children"),
            live_total: r.get("live_total"),
            remaining_depth: r.get("remaining_depth"),
            remaining_breadth: r.get("remaining_breadth"),
            remaining_total: r.get("remaining_total"),
        })
    }
}
