//! Stopping (deepest first), supervisor reports, and the reconciler that finishes what a
//! crash interrupted and removes the files no live sandbox needs.

use std::collections::{BTreeMap, HashSet};

use openshell_proto::v1 as pb;
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

    async fn remove_files(&self, id: Uuid) {
        match self.driver.remove(id).await {
            Ok(()) => tracing::info!(sandbox = %id, "removed the sandbox's files"),
            Err(e) => tracing::warn!(sandbox = %id, "removing the sandbox's files: {e}"),
        }
    }

    /// A supervisor connected with its credential: the sandbox is READY, and the supervisor
    /// learns the policy it enforces and what that policy was proved within.
    pub async fn supervisor_connected(&self, caller: &Principal, id: Uuid) -> Result<pb::ConnectResponse, Error> {
        self.store.mark_ready(id).await?;
        self.metrics.ready(id);
        let target = self.store.policy_target(caller, &id.to_string()).await?;
        let mut boundaries: Vec<serde_json::Value> = Vec::new();
        let paths = |doc: &serde_json::Value| {
            let fs = &doc["filesystem_policy"];
            serde_json::json!({"read_only": fs["read_only"], "read_write": fs["read_write"]})
        };
        if let Some(parent) = &target.parent {
            boundaries.push(paths(&parent.policy));
        }
        if let (_, Some(global)) = self.store.global_max().await? {
            boundaries.push(paths(&global));
        }
        Ok(pb::ConnectResponse {
            sandbox_id: target.id.to_string(),
            name: target.name,
            policy_json: target.policy.to_string(),
            policy_version: target.version,
            boundaries_json: serde_json::Value::from(boundaries).to_string(),
        })
    }

    /// The main command exited, or the sandbox failed (`error`): record it, then stop the
    /// sandbox and its subtree.
    pub async fn supervisor_exited(&self, id: Uuid, exit_code: i32, error: &str) -> Result<(), Error> {
        self.store.record_exit(id, exit_code).await?;
        if !error.is_empty() {
            let reason: String = error.chars().take(1000).collect();
            self.store.mark_error(id, &reason).await?;
        }
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
    /// stops, and fail sandboxes whose workload is gone (stopping their subtrees). A failure
    /// on one sandbox is logged and the pass goes on.
    pub async fn reconcile(&self) -> Result<(), Error> {
        // Workloads first, rows second: a row is committed before its workload starts, so
        // every workload listed here has its row in the read that follows.
        let running: HashSet<Uuid> = self
            .driver
            .list()
            .await
            .map_err(|e| Error::unavailable(format!("driver list: {e}")))?
            .into_iter()
            .collect();
        let rows = self.store.live_rows(&self.settings.runner).await?;
        let live: HashSet<Uuid> = rows.iter().map(|r| r.id).collect();
        for orphan in running.iter().filter(|id| !live.contains(id)) {
            tracing::warn!(sandbox = %orphan, "workload with no live row: stopping it");
            self.metrics.reconciled("orphan_stopped", 1);
            if let Err(e) = self.driver.stop(*orphan, self.settings.stop_grace).await {
                tracing::error!(sandbox = %orphan, "could not stop orphan: {e}");
            }
        }
        let stopping: Vec<StopItem> = rows
            .iter()
            .filter(|r| r.phase == Phase::Stopping)
            .map(|r| StopItem {
                id: r.id,
                name: r.name.clone(),
                depth: r.depth,
                phase: r.phase,
                runner: self.settings.runner.clone(),
            })
            .collect();
        self.metrics.reconciled("stop_finished", stopping.len());
        if !stopping.is_empty()
            && let Err(e) = self.drain(stopping).await
        {
            tracing::warn!("finishing interrupted stops: {e}");
        }
        for row in &rows {
            let lost = match row.phase {
                Phase::Provisioning => row.age > self.settings.provision_timeout && !running.contains(&row.id),
                Phase::Ready => !running.contains(&row.id) && row.age > self.settings.reconcile_grace,
                _ => false,
            };
            if !lost {
                continue;
            }
            let reason = if row.phase == Phase::Ready {
                "the workload is gone (supervisor died without reporting)"
            } else {
                "the workload never started (the gateway stopped before starting it, or the driver failed)"
            };
            tracing::warn!(sandbox = %row.id, phase = %row.phase, "{reason}");
            self.metrics.reconciled("lost_failed", 1);
            // One transaction fails it and marks its descendants STOPPING; then stop them.
            let stopped = async {
                self.store.mark_error(row.id, reason).await?;
                let items = self.store.system_stop(row.id, reason).await?;
                self.drain(items).await
            };
            if let Err(e) = stopped.await {
                tracing::warn!(sandbox = %row.id, "failing a lost sandbox: {e}");
            }
        }
        // Files no live row names (deleted, stopped past the retention, or left by a crash).
        let with_files = self.driver.with_files();
        if !with_files.is_empty() {
            for id in self.store.expired_files(&with_files, self.settings.keep_stopped_files).await? {
                self.remove_files(id).await;
            }
        }
        Ok(())
    }

    /// Runs the reconciler now and then every `reconcile_interval`, forever.
    pub async fn reconcile_forever(self) {
        loop {
            if let Err(e) = self.reconcile().await {
                self.loop_failed("reconcile", &e);
            }
            tokio::time::sleep(self.settings.reconcile_interval).await;
        }
    }
}
