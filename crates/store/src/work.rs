//! Work in running sandboxes as the database sees it: who may exec in or read files of which
//! sandbox, the exec count and idle timer of each, and the idle tool children to stop.

use uuid::Uuid;

use crate::{Error, Kind, Principal, StopItem, Store, stop_item};

impl Store {
    /// Starts an exec in the running sandbox `reference` names, if the caller may work in it
    /// (a sandbox only in its own children of `kind`, a user in any of theirs): counts it as
    /// running, which holds off the idle stop until [`Store::exec_end`].
    pub async fn exec_begin(&self, caller: &Principal, reference: &str, kind: Option<Kind>) -> Result<Uuid, Error> {
        let rows = self
            .call("SELECT exec_begin(p_caller => $1, p_ref => $2, p_kind => $3)", &[caller, &reference, &kind])
            .await?;
        Ok(rows[0].get(0))
    }

    /// An exec started with [`Store::exec_begin`] ended: the idle timer restarts.
    pub async fn exec_end(&self, id: Uuid) -> Result<(), Error> {
        self.call("SELECT exec_end(p_id => $1)", &[&id]).await?;
        Ok(())
    }

    /// At start: the execs this runner's gateway relayed before it restarted are gone.
    pub async fn execs_reset(&self, runner: &str) -> Result<i32, Error> {
        let rows = self.call("SELECT execs_reset(p_runner => $1)", &[&runner]).await?;
        Ok(rows[0].get(0))
    }

    /// Tool children of this runner whose idle period has passed.
    pub async fn idle_tools(&self, runner: &str) -> Result<Vec<Uuid>, Error> {
        let rows = self.call("SELECT idle_tools(p_runner => $1)", &[&runner]).await?;
        Ok(rows.iter().map(|r| r.get(0)).collect())
    }

    /// Marks an idle tool child STOPPING (audited, reason idle) if it still is idle; what to
    /// stop, or nothing.
    pub async fn stop_idle(&self, id: Uuid) -> Result<Vec<StopItem>, Error> {
        let rows = self.call("SELECT id, name, depth, phase, runner FROM stop_idle(p_id => $1)", &[&id]).await?;
        Ok(rows.iter().map(stop_item).collect())
    }

    /// The running agent sandbox whose files the caller may read (never a tool child).
    pub async fn file_target(&self, caller: &Principal, reference: &str) -> Result<Uuid, Error> {
        let rows = self.call("SELECT file_target(p_caller => $1, p_ref => $2)", &[caller, &reference]).await?;
        Ok(rows[0].get(0))
    }
}
