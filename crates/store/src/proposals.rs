//! Policy proposals: network rules a sandbox asks for itself, decided by its user (sql/proposals.sql).

use chrono::{DateTime, Utc};
use serde::Serialize;
use tokio_postgres::Row;
use uuid::Uuid;

use crate::{Code, Error, Principal, Store};

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

impl From<&Row> for Proposal {
    fn from(r: &Row) -> Proposal {
        Proposal {
            id: r.get("id"),
            sandbox_id: r.get("sandbox_id"),
            sandbox_name: r.get("sandbox_name"),
            state: r.get("state"),
            rules: r.get("rules"),
            reason: r.get("reason"),
            created_at: r.get("created_at"),
            expires_at: r.get("expires_at"),
            decided_at: r.get("decided_at"),
            decided_by: r.get("decided_by"),
            decision_reason: r.get("decision_reason"),
            policy_version: r.get("policy_version"),
            superseded_by: r.get("superseded_by"),
        }
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
    rows.first().map(Proposal::from).ok_or_else(|| Error::new(Code::NotFound, "proposal not found"))
}

impl Store {
    /// A sandbox proposes rules for its own policy.
    pub async fn propose(&self, sandbox: Uuid, p: &NewProposal<'_>) -> Result<Proposal, Error> {
        let rows = self
            .call(
                "SELECT * FROM proposal_create(p_sandbox => $1, p_program => $2, p_rules => $3, p_reason => $4, \
                        p_ttl_seconds => $5)",
                &[&sandbox, &p.program, p.rules, &p.reason, &p.ttl_seconds],
            )
            .await?;
        one(&rows)
    }

    /// One of a sandbox's own proposals.
    pub async fn own_proposal(&self, sandbox: Uuid, id: i64) -> Result<Proposal, Error> {
        one(&self.call("SELECT * FROM proposal_get_own(p_sandbox => $1, p_id => $2)", &[&sandbox, &id]).await?)
    }

    /// Proposals a user decides on, newest first.
    pub async fn proposals(
        &self,
        caller: &Principal,
        sandbox: Option<&str>,
        state: Option<&str>,
        limit: i32,
    ) -> Result<Vec<Proposal>, Error> {
        let rows = self
            .call(
                "SELECT * FROM proposal_list(p_caller => $1, p_ref => $2, p_state => $3, p_limit => $4)",
                &[caller, &sandbox, &state, &limit],
            )
            .await?;
        Ok(rows.iter().map(Proposal::from).collect())
    }

    /// A pending proposal the user may decide on (what an approval merges and proves).
    pub async fn pending_proposal(&self, caller: &Principal, id: i64) -> Result<Proposal, Error> {
        one(&self.call("SELECT * FROM proposal_pending(p_caller => $1, p_id => $2)", &[caller, &id]).await?)
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
        let rows = self
            .call(
                "SELECT * FROM proposal_approve(p_caller => $1, p_id => $2, p_keys => $3, p_document => $4, \
                        p_hash => $5, p_proof => $6)",
                &[caller, &id, &keys, document, &hash.as_slice(), proof],
            )
            .await?;
        one(&rows)
    }

    pub async fn reject_proposal(&self, caller: &Principal, id: i64, reason: &str) -> Result<Proposal, Error> {
        one(&self
            .call("SELECT * FROM proposal_reject(p_caller => $1, p_id => $2, p_reason => $3)", &[caller, &id, &reason])
            .await?)
    }
}
