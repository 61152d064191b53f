//! The reconciler: the lifecycle loop that finishes what a crash interrupted (orphan
//! workloads, interrupted stops, lost sandboxes) and removes the files no live sandbox needs.
//! The idle stop of tool children is the other loop (idle.rs).

use std::collections::HashSet;

use openshell_store::{Error, Phase, StopItem};
use uuid::Uuid;

use crate::Gateway;

impl Gateway {
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
