//! A sandbox's life after its admission (sql/lifecycle.sql, sql/limits.sql): READY, its exit,
//! an error, stopping a subtree deepest first, and what the reconciler and the files'
//! retention read.

use tokio_postgres::Row;
use uuid::Uuid;

use crate::row::{FromRow, RowExt, all, first};
use crate::{Error, LiveRow, Phase, PhaseChange, Principal, StopItem, Store, queries};

impl Store {
    /// Marks the subtree STOPPING (and DELETED where already stopped, for a delete);
    /// returns it deepest first.
    pub async fn begin_stop(&self, caller: &Principal, reference: &str, delete: bool) -> Result<Vec<StopItem>, Error> {
        all(&self.call(&queries::BEGIN_STOP, &[caller, &reference, &delete]).await?)
    }

    /// The gateway stops a subtree on its own account.
    pub async fn system_stop(&self, id: Uuid, reason: &str) -> Result<Vec<StopItem>, Error> {
        all(&self.call(&queries::SYSTEM_STOP, &[&id, &reason]).await?)
    }

    /// The workload is gone: STOPPING becomes STOPPED (DELETED if a delete asked).
    /// None when there was nothing to finish.
    pub async fn finish_stop(&self, id: Uuid) -> Result<Option<Phase>, Error> {
        let rows = self.call(&queries::FINISH_STOP, &[&id]).await?;
        match rows.first() {
            Some(r) => r.col::<_, Option<Phase>>("phase"),
            None => Ok(None),
        }
    }

    /// Live children of a sandbox (a parent's workload is stopped only when this is 0).
    pub async fn live_children(&self, id: Uuid) -> Result<i64, Error> {
        self.value(&queries::LIVE_CHILDREN, &[&id]).await
    }

    /// The main command of the sandbox whose live credential hashes to `credential_hash` runs
    /// in its isolation (what was applied is recorded with it): READY. The credential is
    /// checked in the same call (sql/supervisor.sql); UNAUTHENTICATED if it is not live.
    /// Returns the columns the change moved, as written (see [`PhaseChange`]).
    pub async fn supervisor_ready(
        &self,
        credential_hash: &[u8; 32],
        isolation: &serde_json::Value,
    ) -> Result<PhaseChange, Error> {
        let rows = self.call(&queries::SUPERVISOR_READY, &[&credential_hash.as_slice(), isolation]).await?;
        let r = first(&rows, "supervisor_ready")?;
        Ok(PhaseChange {
            id: r.col("id")?,
            phase: r.col("phase")?,
            phase_reason: r.col("phase_reason")?,
            isolation: r.col("isolation")?,
            policy_version: r.col("policy_version")?,
            exit_code: r.col("exit_code")?,
            updated_at: r.col("updated_at")?,
        })
    }

    pub async fn record_exit(&self, id: Uuid, exit_code: i32) -> Result<(), Error> {
        self.call(&queries::RECORD_EXIT, &[&id, &exit_code]).await?;
        Ok(())
    }

    pub async fn mark_error(&self, id: Uuid, reason: &str) -> Result<(), Error> {
        self.call(&queries::MARK_ERROR, &[&id, &reason]).await?;
        Ok(())
    }

    /// Every sandbox of this runner that may have a workload (PROVISIONING, READY, STOPPING).
    pub async fn live_rows(&self, runner: &str) -> Result<Vec<LiveRow>, Error> {
        let rows = self.call(&queries::LIVE_ROWS, &[&runner]).await?;
        rows.iter()
            .map(|r| {
                Ok(LiveRow {
                    id: r.col("id")?,
                    name: r.col("name")?,
                    phase: r.col("phase")?,
                    depth: r.col("depth")?,
                    age: std::time::Duration::from_secs_f64(r.col::<_, f64>("age")?.max(0.0)),
                })
            })
            .collect()
    }

    /// Of the sandboxes whose files this gateway's host still has, those whose files must go:
    /// no live row names them, or they stopped longer than `keep` ago (see `expired_files`).
    pub async fn expired_files(&self, ids: &[Uuid], keep: std::time::Duration) -> Result<Vec<Uuid>, Error> {
        let keep = keep.as_secs_f64();
        let rows = self.call(&queries::EXPIRED_FILES, &[&ids, &keep]).await?;
        rows.iter().map(|r| r.col("id")).collect()
    }
}

impl FromRow for StopItem {
    fn from_row(r: &Row) -> Result<StopItem, Error> {
        Ok(StopItem {
            id: r.col("id")?,
            name: r.col("name")?,
            depth: r.col("depth")?,
            phase: r.col("phase")?,
            runner: r.col("runner")?,
        })
    }
}
