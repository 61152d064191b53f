//! The audit log's hash chains (sql/audit.sql): verifying them and exporting their heads.

use chrono::{DateTime, Utc};

use crate::{Error, Principal, Store};

/// One chain's result of a verification.
#[derive(Debug, Clone)]
pub struct ChainStatus {
    pub chain: String,
    pub receipts: i64,
    pub head_seq: i64,
    pub head_hash: String,
    /// The first broken link: its place and receipt id, the problem and what it means.
    pub broken_seq: Option<i64>,
    pub broken_id: Option<i64>,
    pub problem: Option<String>,
    pub detail: Option<String>,
}

/// A chain's last link.
#[derive(Debug, Clone)]
pub struct ChainHead {
    pub chain: String,
    pub seq: i64,
    pub head: String,
    /// When its last receipt was written (unknown for a head passed back to be checked).
    pub at: Option<DateTime<Utc>>,
}

impl Store {
    /// Walks every chain (admins only); `heads` (exported earlier) must still be links of theirs.
    pub async fn verify_audit(&self, caller: &Principal, heads: &[ChainHead]) -> Result<Vec<ChainStatus>, Error> {
        let heads: serde_json::Value =
            heads.iter().map(|h| serde_json::json!({"chain": h.chain, "seq": h.seq, "head": h.head})).collect();
        let rows = self.read("SELECT * FROM audit_verify(p_caller => $1, p_heads => $2)", &[caller, &heads]).await?;
        Ok(rows
            .iter()
            .map(|r| ChainStatus {
                chain: r.get("chain"),
                receipts: r.get::<_, Option<i64>>("receipts").unwrap_or(0),
                head_seq: r.get::<_, Option<i64>>("head_seq").unwrap_or(0),
                head_hash: r.get::<_, Option<String>>("head_hash").unwrap_or_default(),
                broken_seq: r.get("broken_seq"),
                broken_id: r.get("broken_id"),
                problem: r.get("problem"),
                detail: r.get("detail"),
            })
            .collect())
    }

    /// The chains' heads in chain order, `limit` after the chain `after` (admins only).
    pub async fn audit_heads(
        &self,
        caller: &Principal,
        after: Option<&str>,
        limit: i64,
    ) -> Result<Vec<ChainHead>, Error> {
        let rows = self
            .read("SELECT * FROM audit_heads(p_caller => $1, p_after => $2, p_limit => $3)", &[caller, &after, &limit])
            .await?;
        Ok(rows
            .iter()
            .map(|r| ChainHead { chain: r.get("chain"), seq: r.get("seq"), head: r.get("head"), at: Some(r.get("at")) })
            .collect())
    }
}
