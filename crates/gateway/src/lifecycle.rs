//! Stopping (deepest first), supervisor reports, and the reconciler that finishes what a
//! crash interrupted.

use std::collections::{BTreeMap, HashSet};

use openshell_store::{Error, Principal, Sandbox, StopItem};
use uuid::Uuid;

use crate::Gateway;

impl Gateway {
    /// Stops (or deletes) a sandbox and its subtree: one transaction marks them all, then
    /// each level is stopped, deepest first, before the level above it.
    pub async fn stop(&self, caller: &Principal, reference: &str, delete: bool) -> Result<Vec<Sandbox>, Error> {
        crate::input::reference("sandbox", reference)?;
        let items = self.store.begin_stop(caller, reference, delete).await?;
        self.drain(items).await
    }

    /// Stops the workloads of a marked subtree, level by level from the deepest, and
    /// records each as STOPPED once its workload is gone.
    pub(crate) async fn drain(&self, items: Vec<StopItem>) -> Result<Vec<Sandbox>, Error> {
        let mut levels: BTreeMap<i32, Vec<StopItem>> = BTreeMap::new();
        for item in items {
            levels.entry(item.depth).or_default().push(item);
        }
        let mut stopped = Vec::new();
        for (_, level) in levels.into_iter().rev() {
            let results = futures::future::join_all(level.iter().map(|item| async move {
                self.driver
                    .stop(item.id, self.settings.stop_grace)
                    .await
                    .map_err(|e| Error::unavailable(format!("driver could not stop {}: {e}", item.name)))?;
                if item.phase == "STOPPING" {
                    self.store.finish_stop(item.id).await?;
                }
                self.store.sandbox_by_id(item.id).await
            }))
            .await;
            for r in results {
                stopped.push(r?);
            }
        }
        Ok(stopped)
    }

    /// A supervisor connected with its credential: the sandbox is READY.
    pub async fn supervisor_connected(&self, id: Uuid) -> Result<Sandbox, Error> {
        self.store.mark_ready(id).await?;
        self.store.sandbox_by_id(id).await
    }

    /// The main command exited: record it, then stop the sandbox and its subtree.
    pub async fn supervisor_exited(&self, id: Uuid, exit_code: i32) -> Result<(), Error> {
        self.store.record_exit(id, exit_code).await?;
        let gw = self.clone();
        // The supervisor is waiting for this answer before it exits; stop in the background.
        tokio::spawn(async move {
            let reason = format!("main command exited with code {exit_code}");
            match gw.store.system_stop(id, &reason).await {
                Ok(items) => {
                    if let Err(e) = gw.drain(items).await {
                        tracing::warn!(sandbox = %id, "stopping after exit: {e}");
                    }
                }
                Err(e) => tracing::warn!(sandbox = %id, "stopping after exit: {e}"),
            }
        });
        Ok(())
    }

    /// One pass of the reconciler: kill workloads with no live row, finish interrupted
    /// stops, and fail sandboxes whose workload is gone (stopping their subtrees).
    pub async fn reconcile(&self) -> Result<(), Error> {
        let rows = self.store.live_rows(&self.settings.runner).await?;
        let running: HashSet<Uuid> = self
            .driver
            .list()
            .await
            .map_err(|e| Error::unavailable(format!("driver list: {e}")))?
            .into_iter()
            .collect();
        let live: HashSet<Uuid> = rows.iter().map(|r| r.id).collect();
        for orphan in running.iter().filter(|id| !live.contains(id)) {
            tracing::warn!(sandbox = %orphan, "workload with no live row: stopping it");
            if let Err(e) = self.driver.stop(*orphan, self.settings.stop_grace).await {
                tracing::error!(sandbox = %orphan, "could not stop orphan: {e}");
            }
        }
        let stopping: Vec<StopItem> = rows
            .iter()
            .filter(|r| r.phase == "STOPPING")
            .map(|r| StopItem { id: r.id, name: r.id.to_string(), depth: r.depth, phase: r.phase.clone() })
            .collect();
        if !stopping.is_empty() {
            tracing::info!(count = stopping.len(), "finishing interrupted stops");
            self.drain(stopping).await?;
        }
        for row in &rows {
            let lost = match row.phase.as_str() {
                "PROVISIONING" => row.age > self.settings.provision_timeout && !running.contains(&row.id),
                "READY" => !running.contains(&row.id) && row.age > self.settings.reconcile_grace,
                _ => false,
            };
            if lost {
                let reason = if row.phase == "READY" {
                    "the workload is gone (supervisor died without reporting)"
                } else {
                    "the workload never started (the gateway stopped before starting it, or the driver failed)"
                };
                tracing::warn!(sandbox = %row.id, phase = %row.phase, "{reason}");
                self.store.mark_error(row.id, reason).await?;
                let items = self.store.system_stop(row.id, reason).await?;
                self.drain(items).await?;
            }
        }
        Ok(())
    }

    /// Runs the reconciler now and then every `reconcile_interval`, forever.
    pub async fn reconcile_forever(self) {
        loop {
            if let Err(e) = self.reconcile().await {
                tracing::warn!("reconcile: {e}");
            }
            tokio::time::sleep(self.settings.reconcile_interval).await;
        }
    }
}
