//! Changes pushed from the database instead of polled: one LISTEN session per gateway
//! ([`Gateway::listen_forever`], crates/store/src/changes.rs) fans each notification out to
//! whoever in this process waits on that sandbox: its supervisor's policy stream
//! (ops/supervisor.rs), its proposal long-polls (ops/proposals.rs) and watches of its phase
//! (ops/sandboxes.rs). With no waiter a
//! notification costs a map lookup; an idle sandbox costs nothing.
//!
//! Fail safe: a notification reaches only a session that was listening at the commit, so
//! whenever the LISTEN session is (re)opened every waiter is woken to read again, as if
//! everything had changed. Waiters read the database after subscribing ([`Subscription::mark`]
//! then read), so a change that commits between their read and their wait still wakes them.

use std::collections::HashMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use openshell_store::Change;
use tokio::sync::watch;
use uuid::Uuid;

use crate::Gateway;

/// What changed about one sandbox, as counters: a waiter compares the one it cares about.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Counts {
    pub policy: u64,
    pub proposal: u64,
    pub phase: u64,
}

/// Which counter a waiter waits on.
#[derive(Debug, Clone, Copy)]
pub enum Kind {
    Policy,
    Proposal,
    Phase,
}

impl Counts {
    fn of(&self, kind: Kind) -> u64 {
        match kind {
            Kind::Policy => self.policy,
            Kind::Proposal => self.proposal,
            Kind::Phase => self.phase,
        }
    }

    fn everything(&mut self) {
        self.policy += 1;
        self.proposal += 1;
        self.phase += 1;
    }
}

/// The gateway's waiters, by sandbox.
#[derive(Default)]
pub struct Changes {
    sandboxes: Mutex<HashMap<Uuid, watch::Sender<Counts>>>,
    /// Shutting down: every waiter is told, and no new one waits.
    closed: AtomicBool,
    /// Whether the LISTEN session is open now, and how many times it was (re)opened.
    listening: AtomicBool,
    opened: AtomicU64,
}

/// The gateway is shutting down: stop waiting.
#[derive(Debug)]
pub struct Closed;

impl Changes {
    /// Waits on one sandbox's changes, from now on.
    pub fn sandbox(self: &std::sync::Arc<Self>, id: Uuid) -> Subscription {
        let rx = match self.sandboxes.lock() {
            Ok(mut m) if !self.closed.load(Ordering::Acquire) => {
                Some(m.entry(id).or_insert_with(|| watch::channel(Counts::default()).0).subscribe())
            }
            _ => None,
        };
        let last = rx.as_ref().map(|r| *r.borrow()).unwrap_or_default();
        Subscription { rx, last, id, hub: self.clone() }
    }

    /// A notification: wakes the sandbox's waiters, if any; anything unknown wakes all.
    pub fn saw(&self, change: &Change) {
        let Ok(m) = self.sandboxes.lock() else { return };
        let Some(id) = change.sandbox() else {
            drop(m);
            return self.everything();
        };
        if let Some(tx) = m.get(&id) {
            tx.send_modify(|c| match change {
                Change::Policy { .. } => c.policy += 1,
                Change::Proposal { .. } => c.proposal += 1,
                Change::Phase { .. } => c.phase += 1,
                Change::Unknown => c.everything(),
            });
        }
    }

    /// Every waiter reads again: what committed while no LISTEN session was open was told to
    /// no one.
    pub fn everything(&self) {
        if let Ok(m) = self.sandboxes.lock() {
            for tx in m.values() {
                tx.send_modify(Counts::everything);
            }
        }
    }

    /// Ends every wait (the gateway is shutting down; supervisors reopen their streams at the
    /// next gateway).
    pub fn close_all(&self) {
        self.closed.store(true, Ordering::Release);
        if let Ok(mut m) = self.sandboxes.lock() {
            m.clear();
        }
    }

    /// Sandboxes waited on now.
    pub fn waited_on(&self) -> usize {
        self.sandboxes.lock().map(|m| m.len()).unwrap_or(0)
    }

    /// Whether the LISTEN session is open, and how many times it was opened.
    pub fn listening(&self) -> (bool, u64) {
        (self.listening.load(Ordering::Relaxed), self.opened.load(Ordering::Relaxed))
    }
}

/// One waiter on one sandbox; dropping it forgets the sandbox once no one waits on it.
pub struct Subscription {
    rx: Option<watch::Receiver<Counts>>,
    last: Counts,
    id: Uuid,
    hub: std::sync::Arc<Changes>,
}

impl Subscription {
    /// Marks every change so far as seen: call it before reading the database, so that a
    /// change committed after the read wakes [`Subscription::changed`].
    pub fn mark(&mut self) {
        if let Some(rx) = self.rx.as_mut() {
            self.last = *rx.borrow_and_update();
        }
    }

    /// Returns once `kind` changed (or everything may have) since the last mark; Err when
    /// the gateway is shutting down.
    pub async fn changed(&mut self, kind: Kind) -> Result<(), Closed> {
        let Some(rx) = self.rx.as_mut() else { return Err(Closed) };
        loop {
            if rx.borrow_and_update().of(kind) != self.last.of(kind) {
                return Ok(());
            }
            rx.changed().await.map_err(|_| Closed)?;
        }
    }
}

impl Drop for Subscription {
    fn drop(&mut self) {
        let Ok(mut m) = self.hub.sandboxes.lock() else { return };
        self.rx = None;
        if m.get(&self.id).is_some_and(|tx| tx.receiver_count() == 0) {
            m.remove(&self.id);
        }
    }
}

/// Back-off between attempts to open the LISTEN session.
const FIRST_RETRY: Duration = Duration::from_millis(100);
const LAST_RETRY: Duration = Duration::from_secs(5);

impl Gateway {
    /// Keeps one LISTEN session open, forever, and fans its notifications out. Each time it
    /// opens (the first time too), every waiter reads again.
    pub async fn listen_forever(self) {
        let mut retry = FIRST_RETRY;
        loop {
            match self.store.listen().await {
                Ok(mut listener) => {
                    let opened = self.changes.opened.fetch_add(1, Ordering::Relaxed);
                    self.changes.listening.store(true, Ordering::Relaxed);
                    if opened > 0 {
                        tracing::info!(backend = listener.backend_pid(), "listening for changes again");
                    }
                    self.changes.everything();
                    retry = FIRST_RETRY;
                    while let Some(change) = listener.next().await {
                        self.changes.saw(&change);
                    }
                    self.changes.listening.store(false, Ordering::Relaxed);
                    tracing::warn!("the database's LISTEN session ended; reopening it (then every waiter reads again)");
                }
                Err(e) => self.loop_failed("opening the LISTEN session", &e),
            }
            tokio::time::sleep(retry).await;
            retry = (retry * 2).min(LAST_RETRY);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use openshell_store::Change;

    use super::{Changes, Kind};

    async fn soon<F: std::future::Future>(f: F) -> Option<F::Output> {
        tokio::time::timeout(Duration::from_millis(200), f).await.ok()
    }

    #[tokio::test]
    async fn a_change_wakes_only_its_sandbox_and_kind_and_a_reopen_wakes_all() {
        let hub = Arc::new(Changes::default());
        let (a, b) = (uuid::Uuid::new_v4(), uuid::Uuid::new_v4());
        let mut sa = hub.sandbox(a);
        let mut sb = hub.sandbox(b);
        sa.mark();
        sb.mark();
        hub.saw(&Change::Policy { sandbox: a, version: 2 });
        assert!(soon(sa.changed(Kind::Policy)).await.is_some_and(|r| r.is_ok()));
        assert!(soon(sa.changed(Kind::Proposal)).await.is_none(), "a policy change is not a proposal's");
        assert!(soon(sb.changed(Kind::Policy)).await.is_none(), "another sandbox's change");
        // Seen until marked again: a change between mark and wait is never lost.
        assert!(soon(sa.changed(Kind::Policy)).await.is_some());
        sa.mark();
        assert!(soon(sa.changed(Kind::Policy)).await.is_none());
        hub.everything();
        assert!(soon(sb.changed(Kind::Proposal)).await.is_some());
        assert!(soon(sa.changed(Kind::Policy)).await.is_some());
        // Unknown payloads wake everyone too.
        sb.mark();
        hub.saw(&Change::Unknown);
        assert!(soon(sb.changed(Kind::Phase)).await.is_some());
        // Forgotten when no one waits; closing ends waits.
        drop(sa);
        assert_eq!(hub.waited_on(), 1);
        sb.mark();
        hub.close_all();
        assert!(soon(sb.changed(Kind::Policy)).await.is_some_and(|r| r.is_err()));
        assert!(hub.sandbox(a).changed(Kind::Policy).await.is_err());
    }
}
