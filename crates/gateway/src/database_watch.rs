//! The database's outages as the gateway lives through them: the embedded cluster is
//! restarted when it dies (crates/embedded-postgres/src/supervise.rs), and the background
//! loops stay quiet while the store has already logged the outage (crates/store/src/health.rs).

use std::sync::Arc;

use openshell_embedded_postgres::{EmbeddedPostgres, Restarts};
use openshell_store::{Code, Error};
use tokio::sync::watch;

use crate::Gateway;

impl Gateway {
    /// Logs a background loop's failed pass, unless it is the database outage the store
    /// logged once already: a loop retrying every second must not log every second.
    pub(crate) fn loop_failed(&self, what: &str, e: &Error) {
        if e.code == Code::Unavailable && self.store.health().is_down() {
            tracing::debug!("{what}: {e}");
        } else {
            tracing::warn!("{what}: {e}");
        }
    }
}

/// Supervises the embedded cluster in the background. The receiver gets the reason once
/// restarting it failed for good: the gateway must then stop and exit non-zero.
pub(crate) fn watch_embedded(
    pg: Arc<EmbeddedPostgres>,
    restarts: Restarts,
) -> (tokio::task::JoinHandle<()>, watch::Receiver<Option<String>>) {
    let (tx, rx) = watch::channel(None);
    let task = tokio::spawn(async move {
        // Not logged here: the gateway exits with this reason, which prints it once.
        let failed = openshell_embedded_postgres::supervise(pg, restarts).await;
        let _ = tx.send(Some(failed.to_string()));
    });
    (task, rx)
}
