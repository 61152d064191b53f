//! Idle stop of tool children: the timer lives in the database (`exec_begin`/`exec_end`
//! restart it, the grant sets its period); this loop asks which tool children of this
//! gateway's runner are due and stops each through the normal cascade.

use std::time::Duration;

use crate::Gateway;

/// How often the database is asked for idle tool children: the stop comes at most this
/// late after the period (one indexed read per pass).
pub const CHECK_INTERVAL: Duration = Duration::from_secs(1);

impl Gateway {
    /// One pass: stops every tool child whose idle period has passed. `stop_idle` checks
    /// again in the transaction that marks it, so an exec that just started keeps it.
    pub async fn stop_idle_tools(&self) -> Result<usize, openshell_store::Error> {
        let mut stopped = 0;
        for id in self.store.idle_tools(&self.settings.runner).await? {
            let items = self.store.stop_idle(id).await?;
            if items.is_empty() {
                continue;
            }
            tracing::info!(sandbox = %id, "tool child idle: stopping it");
            if let Err(e) = self.drain(items).await {
                tracing::warn!(sandbox = %id, "stopping an idle tool child: {e}");
            }
            stopped += 1;
        }
        Ok(stopped)
    }

    /// Runs [`Gateway::stop_idle_tools`] every [`CHECK_INTERVAL`], forever.
    pub async fn idle_forever(self) {
        loop {
            match self.stop_idle_tools().await {
                Ok(n) => self.metrics.idle_stopped(n),
                Err(e) => self.loop_failed("idle stop", &e),
            }
            tokio::time::sleep(CHECK_INTERVAL).await;
        }
    }
}
