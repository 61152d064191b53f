//! Policy proposals: network rules a sandbox asks for itself, decided by its user (sql/proposals.sql).

use chrono::{DateTime, Utc};
use serde::Serialize;
use tokio_postgres::Row;
use uuid::Uuid;

use crate::row::{FromRow, RowExt, all};
use crate::{Code, Error, Principal, Store, queries};

/// One proposal as `proposal_view` shows it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Proposal {
    pub id: i64,
    pub sandbox_id: Uuid,
    pub sandbox_name: String,
    pub state: String,
    /// The proposed `network_policies` entries (canonical JSON object).
    pub rules: serde_json::Value,
    pub reason: String,
    pub created_at: DateTime<Utc>,
    pub expires_at: DateTime<Utc>,
    pub decided_at: Option<DateTime<Utc>>,
    pub decided_by: Option<String>,
    pub decision_reason: Option<String>,
    pub policy_version: Option<i32>,
    pub superseded_by: Option<i64>,
}

impl FromRow for Proposal {
    fn from_row(r: &Row) -> Result<Proposal, Error> {
        Ok(Proposal {
            id: r.col("id")?,
            sandbox_id: r.col("sandbox_id")?,
            sandbox_name: r.col("sandbox_name")?,
            state: r.col("state")?,
            rules: r.col("rules")?,
            reason: r.col("reason")?,
            created_at: r.col("created_at")?,
            expires_at: r.col("expires_at")?,
            decided_at: r.col("decided_at")?,
            decided_by: r.col("decided_by")?,
            decision_reason: r.col("decision_reason")?,
            policy_version: r.col("policy_version")?,
            superseded_by: r.col("superseded_by")?,
        })
    }
}

/// A new proposal from a sandbox, for itself.
pub struct NewProposal<'a> {
    pub rules: &'a serde_json::Value,
    pub reason: &'a str,
    /// The program inside the sandbox that sent it, when the supervisor named one.
    pub program: Option<&'a str>,
    pub ttl_seconds: i32,
}

fn one(rows: &[Row]) -> Result<Proposal, Error> {
    Proposal::from_row(rows.first().ok_or_else(|| Error::new(Code::NotFound, "proposal not found"))?)
}

impl Store {
    /// A sandbox proposes rules for its own policy.
    pub async fn propose(&self, sandbox: Uuid, p: &NewProposal<'_>) -> Result<Proposal, Error> {
        let rows =
            self.call(&queries::PROPOSAL_CREATE, &[&sandbox, &p.program, p.rules, &p.reason, &p.ttl_seconds]).await?;
        one(&rows)
    }

    /// One of a sandbox's own proposals.
    pub async fn own_proposal(&self, sandbox: Uuid, id: i64) -> Result<Proposal, Error> {
        one(&self.call(&queries::PROPOSAL_GET_OWN, &[&sandbox, &id]).await?)
    }

    /// Proposals a user decides on, newest first.
    pub async fn proposals(
        &self,
        caller: &Principal,
        sandbox: Option<&str>,
        state: Option<&str>,
        limit: i32,
    ) -> Result<Vec<Proposal>, Error> {
        let rows = self.call(&queries::PROPOSAL_LIST, &[caller, &sandbox, &state, &limit]).await?;
        all(&rows)
    }

    /// A pending proposal the user may decide on (what an approval merges and proves).
    pub async fn pending_proposal(&self, caller: &Principal, id: i64) -> Result<Proposal, Error> {
        one(&self.call(&queries::PROPOSAL_PENDING, &[caller, &id]).await?)
    }

    /// Approves: `document` (the current policy plus the proposal's rules under `keys`, in
    /// the proposal's key order) becomes the next version, re-checked against `proof`.
    pub async fn approve_proposal(
        &self,
        caller: &Principal,
        id: i64,
        keys: &[String],
        document: &serde_json::Value,
        hash: &[u8; 32],
        proof: &serde_json::Value,
    ) -> Result<Proposal, Error> {
        let rows =
            self.call(&queries::PROPOSAL_APPROVE, &[caller, &id, &keys, document, &hash.as_slice(), proof]).await?;
        one(&rows)
    }

    pub async fn reject_proposal(&self, caller: &Principal, id: i64, reason: &str) -> Result<Proposal, Error> {
        one(&self.call(&queries::PROPOSAL_REJECT, &[caller, &id, &reason]).await?)
    }
}
