//! Admissions under one parent take turns within this process.
//!
//! Two admissions under the same parent update the same counter rows (the tree's and the
//! parent's); under SERIALIZABLE the second fails with 40001 once the first commits, and is
//! run again. Queueing them here first turns that wasted work into a wait. Nothing here is
//! authoritative: admissions from other gateways, or under other parents of the tree, are
//! still serialized by the database alone, as before.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use tokio::sync::{Mutex as Queue, OwnedMutexGuard};
use uuid::Uuid;

/// One FIFO queue per parent with an admission in flight.
#[derive(Default)]
pub(crate) struct Turns {
    queues: Mutex<HashMap<Uuid, Arc<Queue<()>>>>,
}

/// Held while an admission under `parent` runs; the next one in line starts when it drops.
pub(crate) struct Turn {
    turns: Arc<Turns>,
    parent: Uuid,
    guard: Option<OwnedMutexGuard<()>>,
}

impl Turns {
    /// Waits until no other admission under `parent` runs in this process.
    pub(crate) async fn take(self: &Arc<Self>, parent: Uuid) -> Turn {
        let queue = {
            let mut queues = self.queues.lock().unwrap_or_else(|p| p.into_inner());
            queues.entry(parent).or_default().clone()
        };
        let guard = queue.lock_owned().await;
        Turn { turns: self.clone(), parent, guard: Some(guard) }
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.queues.lock().unwrap().len()
    }
}

impl Drop for Turn {
    fn drop(&mut self) {
        drop(self.guard.take());
        // The last one out removes the queue (the map holds one reference, each waiter one).
        let mut queues = self.turns.queues.lock().unwrap_or_else(|p| p.into_inner());
        if queues.get(&self.parent).is_some_and(|q| Arc::strong_count(q) == 1) {
            queues.remove(&self.parent);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn one_parent_runs_one_at_a_time_others_in_parallel_and_queues_are_removed() {
        let turns = Arc::new(Turns::default());
        let (a, b) = (Uuid::new_v4(), Uuid::new_v4());
        let running = Arc::new([AtomicUsize::new(0), AtomicUsize::new(0)]);
        let most = Arc::new([AtomicUsize::new(0), AtomicUsize::new(0)]);
        let tasks: Vec<_> = (0..40)
            .map(|i| {
                let (turns, running, most) = (turns.clone(), running.clone(), most.clone());
                let (parent, k) = if i % 2 == 0 { (a, 0) } else { (b, 1) };
                tokio::spawn(async move {
                    let _turn = turns.take(parent).await;
                    let now = running[k].fetch_add(1, Ordering::SeqCst) + 1;
                    most[k].fetch_max(now, Ordering::SeqCst);
                    tokio::time::sleep(std::time::Duration::from_millis(2)).await;
                    running[k].fetch_sub(1, Ordering::SeqCst);
                })
            })
            .collect();
        let started = std::time::Instant::now();
        for t in tasks {
            t.await.unwrap();
        }
        assert_eq!(most[0].load(Ordering::SeqCst), 1, "one at a time under a");
        assert_eq!(most[1].load(Ordering::SeqCst), 1, "one at a time under b");
        // 20 turns of 2 ms per parent, the two parents side by side.
        assert!(started.elapsed() < std::time::Duration::from_millis(80 * 2), "{:?}", started.elapsed());
        assert_eq!(turns.len(), 0, "no queue left behind");
    }
}
