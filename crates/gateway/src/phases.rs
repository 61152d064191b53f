//! Phase changes this gateway writes, told to its own watches at once: the change as written
//! (a watch of that sandbox then needs no read), and whether one is still being written.
//!
//! A write's NOTIFY often reaches this gateway's LISTEN session before the write's own
//! answer, so a watch woken by the NOTIFY while a write is in flight here waits briefly for
//! that answer instead of reading the row (crates/gateway/src/ops/sandboxes.rs).

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use openshell_store::PhaseChange;
use tokio::sync::watch;

#[derive(Debug)]
pub(crate) struct Phases {
    /// The last change written here, or None (read again).
    tx: watch::Sender<Option<Arc<PhaseChange>>>,
    /// Phase writes of this gateway not answered yet.
    writing: AtomicUsize,
}

impl Default for Phases {
    fn default() -> Phases {
        Phases { tx: watch::Sender::new(None), writing: AtomicUsize::new(0) }
    }
}

/// A phase write in flight, until dropped.
pub(crate) struct Writing<'a>(&'a Phases);

impl Drop for Writing<'_> {
    fn drop(&mut self) {
        self.0.writing.fetch_sub(1, Ordering::AcqRel);
    }
}

impl Phases {
    pub(crate) fn subscribe(&self) -> watch::Receiver<Option<Arc<PhaseChange>>> {
        self.tx.subscribe()
    }

    /// Wakes the watches: the change as written, or None when they should read.
    pub(crate) fn changed(&self, change: Option<PhaseChange>) {
        self.tx.send_replace(change.map(Arc::new));
    }

    /// Marks a phase write in flight; tell its answer with [`Phases::changed`] before the
    /// guard drops.
    pub(crate) fn writing(&self) -> Writing<'_> {
        self.writing.fetch_add(1, Ordering::AcqRel);
        Writing(self)
    }

    pub(crate) fn in_flight(&self) -> bool {
        self.writing.load(Ordering::Acquire) > 0
    }
}
