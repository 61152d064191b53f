//! When a check must stop: its deadline passed, or whoever asked for it gave up. Checked
//! inside the checker's own loops (the fast path's searches and the z3 loop), so a check
//! that runs out stops where it is instead of finishing in its thread.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// A check's deadline and cancel flag; clones share the flag.
#[derive(Debug, Clone)]
pub struct Budget {
    deadline: Instant,
    cancelled: Arc<AtomicBool>,
}

impl Budget {
    pub fn new(deadline: Instant) -> Budget {
        Budget { deadline, cancelled: Arc::default() }
    }

    /// The same cancel flag with the earlier of the two deadlines.
    pub fn capped(&self, deadline: Instant) -> Budget {
        Budget { deadline: self.deadline.min(deadline), cancelled: self.cancelled.clone() }
    }

    /// Stops the check (from any thread) at its next look at the budget.
    pub fn cancel(&self) {
        self.cancelled.store(true, Ordering::Relaxed);
    }

    pub fn cancelled(&self) -> bool {
        self.cancelled.load(Ordering::Relaxed)
    }

    /// Whether the check must stop now.
    pub fn spent(&self) -> bool {
        self.cancelled() || Instant::now() >= self.deadline
    }

    pub fn remaining(&self) -> Duration {
        if self.cancelled() { Duration::ZERO } else { self.deadline.saturating_duration_since(Instant::now()) }
    }

    /// Why a spent check stopped, for its verdict.
    pub fn reason(&self) -> String {
        if self.cancelled() { "the check was cancelled".into() } else { "timed out in the network check".into() }
    }
}
