//! Keeping the embedded cluster up while the gateway runs: a postmaster that died (an OOM
//! kill, a crash) is started again on the same port, where PostgreSQL's crash recovery
//! replays the WAL, so nothing committed is lost and the pool reconnects to the same URL.

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::{EmbeddedPostgres, Error};

/// How long after a failed check the postmaster is looked at again before it counts as dead.
const CONFIRM: Duration = Duration::from_millis(50);

/// How the cluster is watched and restarted.
#[derive(Debug, Clone, Copy)]
pub struct Restarts {
    /// How often the postmaster is checked (a read of postmaster.pid and a signal 0).
    pub check: Duration,
    /// Failed starts in a row, within one outage, before [`supervise`] gives up.
    pub max_failures: u32,
    /// The longest wait between two failed starts (it doubles from 200 ms up to this).
    pub max_backoff: Duration,
}

impl Default for Restarts {
    fn default() -> Restarts {
        Restarts { check: Duration::from_millis(250), max_failures: 8, max_backoff: Duration::from_secs(5) }
    }
}

/// Watches `pg` forever and restarts it when it dies, logging one line when it is found dead
/// and one when it serves again. Returns only when `max_failures` starts in a row failed: the
/// caller then stops the gateway with a non-zero exit, so a service manager sees it.
pub async fn supervise(pg: Arc<EmbeddedPostgres>, restarts: Restarts) -> Error {
    loop {
        tokio::time::sleep(restarts.check).await;
        if pg.is_running() {
            continue;
        }
        // A second look: postmaster.pid is rewritten while a server starts.
        tokio::time::sleep(CONFIRM).await;
        if pg.is_running() {
            continue;
        }
        let died = Instant::now();
        tracing::error!(
            dir = %pg.data.display(),
            "the embedded PostgreSQL server died; restarting it (crash recovery runs at its start)"
        );
        let mut backoff = Duration::from_millis(200);
        let mut failures = 0;
        loop {
            let p = pg.clone();
            let started = tokio::task::spawn_blocking(move || p.restart())
                .await
                .unwrap_or_else(|e| Err(Error(format!("restart task: {e}"))));
            match started {
                Ok(()) => {
                    tracing::warn!(
                        after_ms = died.elapsed().as_millis() as u64,
                        attempts = failures + 1,
                        "the embedded PostgreSQL server runs again"
                    );
                    break;
                }
                // Right after a kill, the old server's backends may still hold its shared
                // memory for a moment ("pre-existing shared memory block is still in use").
                // Something else started it meanwhile (pg_ctl refuses a second server).
                Err(_) if pg.is_running() => break,
                Err(e) => {
                    failures += 1;
                    tracing::debug!(failures, "restarting the embedded PostgreSQL server: {e}");
                    if failures >= restarts.max_failures {
                        return Error(format!(
                            "the embedded PostgreSQL server died and {failures} starts in a row failed over {:.1} s; \
                             last: {}",
                            died.elapsed().as_secs_f64(),
                            e.0
                        ));
                    }
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(restarts.max_backoff);
                }
            }
        }
    }
}
