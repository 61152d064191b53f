//! Whether the database answers, as the store's calls see it: one log line when it stops
//! answering and one when it answers again (not one per failed call), and the counts the
//! gateway's metrics read (outages, serialization retries).

use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use tokio_postgres::error::SqlState;

/// How long a killed postmaster's orphaned backends may still answer on old connections.
const ORPHAN_GRACE: std::time::Duration = std::time::Duration::from_secs(5);

/// Shared by every clone of one store.
#[derive(Debug, Default)]
pub struct Health {
    down_since: Mutex<Option<Instant>>,
    outages: AtomicU64,
    retries: AtomicU64,
}

/// What one call's outcome says about the database.
pub(crate) enum Seen {
    /// It answered (a result or a refusal) on a connection made at this instant.
    Answered(Instant),
    /// It could not be reached, or it is shutting down or recovering; what failed.
    Unreachable(String),
}

impl Health {
    /// Records a call's outcome, logging the transitions.
    pub(crate) fn saw(&self, seen: Seen) {
        let mut down = self.down_since.lock().unwrap_or_else(|p| p.into_inner());
        match (seen, down.as_ref()) {
            // A connection older than the outage proves nothing at first: the backends of a
            // killed postmaster answer until they notice it is gone. After a grace they are
            // gone, so an old connection's answer (a blip that only failed new connections)
            // ends the outage too.
            (Seen::Answered(made), Some(since)) if made >= *since || since.elapsed() >= ORPHAN_GRACE => {
                tracing::warn!(after_ms = since.elapsed().as_millis() as u64, "the database answers again");
                *down = None;
            }
            (Seen::Unreachable(why), None) => {
                self.outages.fetch_add(1, Ordering::Relaxed);
                tracing::error!(
                    "the database stopped answering ({why}); calls are refused UNAVAILABLE until it is back"
                );
                *down = Some(Instant::now());
            }
            _ => {}
        }
    }

    pub(crate) fn retried(&self) {
        self.retries.fetch_add(1, Ordering::Relaxed);
    }

    /// Whether the last call found the database unreachable.
    pub fn is_down(&self) -> bool {
        self.down_since.lock().map(|d| d.is_some()).unwrap_or(true)
    }

    /// Outages seen since start (each a run of unreachable calls ended by an answer).
    pub fn outages(&self) -> u64 {
        self.outages.load(Ordering::Relaxed)
    }

    /// Serialization failures retried since start.
    pub fn serialization_retries(&self) -> u64 {
        self.retries.load(Ordering::Relaxed)
    }
}

/// Whether a database error means it cannot serve now (rather than a refusal or a bug):
/// no connection, a connection lost, a server shutting down, starting or recovering, or one
/// that is (now) a read-only standby: after a failover the primary is elsewhere.
pub(crate) fn unreachable(e: &tokio_postgres::Error) -> bool {
    match e.code() {
        None => true,
        Some(c) => {
            let class = &c.code()[..2];
            class == "08"
                || class == "57" && *c != SqlState::QUERY_CANCELED
                || *c == SqlState::READ_ONLY_SQL_TRANSACTION
        }
    }
}
