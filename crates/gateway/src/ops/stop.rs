//! Stopping and deleting: a sandbox and its subtree are marked in one transaction, then
//! stopped level by level, deepest first, so children always stop before their parent.

use std::collections::BTreeMap;

use openshell_store::{Error, Phase, Principal, Sandbox, StopItem};
use uuid::Uuid;

use crate::Gateway;

impl Gateway {
    /// Stops (or deletes) a sandbox and its subtree: one transaction marks them all, then
    /// each level is stopped, deepest first, before the level above it.
    pub async fn stop(&self, caller: &Principal, reference: &str, delete: bool) -> Result<Vec<Sandbox>, Error> {
        let marked = async {
            crate::input::reference("sandbox", reference)?;
            self.store.begin_stop(caller, reference, delete).await
        }
        .await;
        let action = if delete { "sandbox.delete" } else { "sandbox.stop" };
        let items = self.receipt_on_refusal(caller, action, reference, None, marked).await?;
        self.drain(items).await
    }

    /// Stops the workloads of a marked subtree, level by level from the deepest, and
    /// records each as STOPPED once its workload is gone. A sandbox run by another gateway
    /// is left STOPPING for that gateway's reconciler, and a parent waits (STOPPING) while
    /// any child is still live: children always stop first.
    pub(crate) async fn drain(&self, items: Vec<StopItem>) -> Result<Vec<Sandbox>, Error> {
        let mut levels: BTreeMap<i32, Vec<StopItem>> = BTreeMap::new();
        for item in items {
            levels.entry(item.depth).or_default().push(item);
        }
        let mut stopped = Vec::new();
        for (_, level) in levels.into_iter().rev() {
            let results = futures::future::join_all(level.iter().map(|item| self.stop_one(item))).await;
            for r in results {
                stopped.push(r?);
            }
        }
        Ok(stopped)
    }

    async fn stop_one(&self, item: &StopItem) -> Result<Sandbox, Error> {
        let ours = item.runner == self.settings.runner;
        if ours && (item.phase != Phase::Stopping || self.store.live_children(item.id).await? == 0) {
            self.driver
                .stop(item.id, self.settings.stop_grace)
                .await
                .map_err(|e| Error::unavailable(format!("driver could not stop {}: {e}", item.name)))?;
            if item.phase == Phase::Stopping {
                self.store.finish_stop(item.id).await?;
            }
        }
        let sandbox = self.store.sandbox_by_id(item.id).await?;
        // A delete takes the sandbox's files with it (the reconciler retries what fails here).
        if ours && sandbox.phase == Phase::Deleted {
            self.remove_files(item.id).await;
        }
        Ok(sandbox)
    }

    pub(crate) async fn remove_files(&self, id: Uuid) {
        match self.driver.remove(id).await {
            Ok(()) => tracing::info!(sandbox = %id, "removed the sandbox's files"),
            Err(e) => tracing::warn!(sandbox = %id, "removing the sandbox's files: {e}"),
        }
    }
}
