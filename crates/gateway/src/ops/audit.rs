//! The audit log: its receipts, a page at a time, as the caller may read them; and its hash
//! chains, verified and their heads exported (admins only; the rule and the walk live in
//! sql/audit.sql).

use openshell_store::{AuditEntry, AuditFilter, ChainHead, ChainStatus, Error, Principal};

use super::page::{Page, PageRequest};
use crate::{Gateway, input};

/// Heads a caller may pass back to be checked, at most.
pub const MAX_HEADS: usize = 100_000;

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

impl Gateway {
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

    /// Every chain walked; the heads given must still be links of theirs.
    pub async fn verify_audit(&self, caller: &Principal, heads: Vec<ChainHead>) -> Result<Vec<ChainStatus>, Error> {
        if heads.len() > MAX_HEADS {
            return Err(Error::invalid("heads", format!("at most {MAX_HEADS} heads, got {}", heads.len())));
        }
        for (i, h) in heads.iter().enumerate() {
            if h.chain.is_empty() || h.chain.len() > 64 {
                return Err(Error::invalid(&format!("heads[{i}].chain"), "1 to 64 characters"));
            }
            if h.seq < 1 {
                return Err(Error::invalid(&format!("heads[{i}].seq"), "must be at least 1"));
            }
            if h.head.len() != 64 || !h.head.bytes().all(|b| b.is_ascii_hexdigit()) {
                return Err(Error::invalid(&format!("heads[{i}].head"), "64 hex digits (a SHA-256)"));
            }
        }
        self.store.verify_audit(caller, &heads).await
    }

    /// The chains' heads, a page at a time in chain order.
    pub async fn audit_heads(&self, caller: &Principal, page: PageRequest) -> Result<Page<ChainHead>, Error> {
        let (fetch, after) = page.bounds(|t| (t.len() <= 64).then(|| t.to_string()))?;
        let rows = self.store.audit_heads(caller, after.as_deref(), fetch).await?;
        Ok(page.page(rows, |h| h.chain.clone()))
    }
}
