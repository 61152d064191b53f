//! The audit log (sql/audit.sql): the receipt of a refused create, the entries a caller may
//! read, and the log's hash chains (verifying them and exporting their heads).

use chrono::{DateTime, Utc};

use crate::row::{RowExt, all};
use crate::{AuditEntry, Error, Principal, Store, queries};

/// Filters of an audit listing.
#[derive(Debug, Clone, Default)]
pub struct AuditFilter {
    pub sandbox: Option<String>,
    pub user: Option<String>,
    pub since: Option<DateTime<Utc>>,
    pub until: Option<DateTime<Utc>>,
    pub refusals_only: bool,
    pub before_id: Option<i64>,
    pub limit: i64,
}

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
    /// Commits the receipt of a refused create.
    pub async fn record_refusal(
        &self,
        caller: &Principal,
        action: &str,
        target: &str,
        request_id: Option<&str>,
        refusal: &Error,
    ) -> Result<(), Error> {
        self.call(
            &queries::RECORD_REFUSAL,
            &[caller, &action, &target, &request_id, &refusal.code.as_str(), &refusal.message, &refusal.details],
        )
        .await?;
        Ok(())
    }

    /// The audit entries the caller may read (who may read what is decided in SQL).
    pub async fn audit(&self, caller: &Principal, f: &AuditFilter) -> Result<Vec<AuditEntry>, Error> {
        all(&self
            .call(
                &queries::AUDIT_LIST,
                &[caller, &f.sandbox, &f.user, &f.since, &f.until, &f.refusals_only, &f.before_id, &f.limit],
            )
            .await?)
    }

    /// Walks every chain (admins only); `heads` (exported earlier) must still be links of theirs.
    pub async fn verify_audit(&self, caller: &Principal, heads: &[ChainHead]) -> Result<Vec<ChainStatus>, Error> {
        let heads: serde_json::Value =
            heads.iter().map(|h| serde_json::json!({"chain": h.chain, "seq": h.seq, "head": h.head})).collect();
        let rows = self.read(&queries::AUDIT_VERIFY, &[caller, &heads]).await?;
        rows.iter()
            .map(|r| {
                Ok(ChainStatus {
                    chain: r.col("chain")?,
                    receipts: r.col::<_, Option<i64>>("receipts")?.unwrap_or(0),
                    head_seq: r.col::<_, Option<i64>>("head_seq")?.unwrap_or(0),
                    head_hash: r.col::<_, Option<String>>("head_hash")?.unwrap_or_default(),
                    broken_seq: r.col("broken_seq")?,
                    broken_id: r.col("broken_id")?,
                    problem: r.col("problem")?,
                    detail: r.col("detail")?,
                })
            })
            .collect()
    }

    /// The chains' heads in chain order, `limit` after the chain `after` (admins only).
    pub async fn audit_heads(
        &self,
        caller: &Principal,
        after: Option<&str>,
        limit: i64,
    ) -> Result<Vec<ChainHead>, Error> {
        let rows = self.read(&queries::AUDIT_HEADS, &[caller, &after, &limit]).await?;
        rows.iter()
            .map(|r| {
                Ok(ChainHead {
                    chain: r.col("chain")?,
                    seq: r.col("seq")?,
                    head: r.col("head")?,
                    at: Some(r.col("at")?),
                })
            })
            .collect()
    }
}
