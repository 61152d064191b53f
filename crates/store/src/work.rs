//! Work in running sandboxes as the database sees it (sql/work.sql): who may exec in or read
//! files of which sandbox, the exec count and idle timer of each, and the idle tool children
//! to stop.

use uuid::Uuid;

use crate::row::{RowExt, all};
use crate::{Error, Kind, Principal, StopItem, Store, queries};

impl Store {
    /// The running sandbox `reference` names, if the caller may work in it (exec, files): a
    /// sandbox only in its own children of `kind`, a user in any of theirs.
    pub async fn work_target(&self, caller: &Principal, reference: &str, kind: Option<Kind>) -> Result<Uuid, Error> {
        self.value(&queries::WORK_TARGET, &[caller, &reference, &kind]).await
    }

    /// Starts an exec in the running sandbox `reference` names, if the caller may work in it
    /// (a sandbox only in its own children of `kind`, a user in any of theirs): counts it as
    /// running, which holds off the idle stop until [`Store::exec_end`].
    pub async fn exec_begin(&self, caller: &Principal, reference: &str, kind: Option<Kind>) -> Result<Uuid, Error> {
        self.value(&queries::EXEC_BEGIN, &[caller, &reference, &kind]).await
    }

    /// An exec started with [`Store::exec_begin`] ended: the idle timer restarts.
    pub async fn exec_end(&self, id: Uuid) -> Result<(), Error> {
        self.call(&queries::EXEC_END, &[&id]).await?;
        Ok(())
    }

    /// At start: the execs this runner's gateway relayed before it restarted are gone.
    pub async fn execs_reset(&self, runner: &str) -> Result<i32, Error> {
        self.value(&queries::EXECS_RESET, &[&runner]).await
    }

    /// Tool children of this runner whose idle period has passed.
    pub async fn idle_tools(&self, runner: &str) -> Result<Vec<Uuid>, Error> {
        let rows = self.call(&queries::IDLE_TOOLS, &[&runner]).await?;
        rows.iter().map(|r| r.col(0)).collect()
    }

    /// Marks an idle tool child STOPPING (audited, reason idle) if it still is idle; what to
    /// stop, or nothing.
    pub async fn stop_idle(&self, id: Uuid) -> Result<Vec<StopItem>, Error> {
        all(&self.call(&queries::STOP_IDLE, &[&id]).await?)
    }

    /// The running agent sandbox whose files the caller may read (never a tool child).
    pub async fn file_target(&self, caller: &Principal, reference: &str) -> Result<Uuid, Error> {
        self.value(&queries::FILE_TARGET, &[caller, &reference]).await
    }
}
