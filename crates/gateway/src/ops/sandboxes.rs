//! Reading sandboxes and their trees, listing a user's sandboxes a page at a time, and
//! following a sandbox's phase.

use std::sync::Arc;
use std::time::Duration;

use futures::Stream;
use openshell_store::{Denial, Error, GrantStatus, PhaseChange, Principal, Sandbox};

use super::page::{Page, PageRequest};
use crate::changes::{Kind, Subscription};
use crate::{Gateway, input};

/// How often a watch reads the sandbox's row while the LISTEN session is down (no change is
/// pushed then).
const WATCH_INTERVAL: Duration = Duration::from_millis(25);
/// How often a watch reads again while phase changes are pushed (crates/gateway/src/changes.rs).
const WATCH_SAFETY: Duration = Duration::from_secs(1);

/// The parent a child request means: a sandbox's children are always its own, so a sandbox
/// that leaves the parent out (`""`) means itself; a user must name one. Whether the caller
/// may create under the parent it names is the database's rule (`admit_child`), not this.
pub(crate) fn child_parent(caller: &Principal, requested: &str) -> Result<String, Error> {
    match caller {
        Principal::Sandbox { id, .. } if requested.is_empty() => Ok(id.to_string()),
        Principal::Sandbox { .. } => Ok(requested.to_string()),
        Principal::User { .. } if requested.is_empty() => {
            Err(Error::invalid("parent", "required: the sandbox to create the child under"))
        }
        Principal::User { .. } => {
            input::reference("parent", requested)?;
            Ok(requested.to_string())
        }
    }
}

/// A sandbox page token: its creation (microseconds) and id, the listing's order.
fn sandbox_key(s: &Sandbox) -> String {
    format!("{}.{}", s.created_at.timestamp_micros(), s.id)
}

fn parse_sandbox_key(t: &str) -> Option<(chrono::DateTime<chrono::Utc>, uuid::Uuid)> {
    let (micros, id) = t.split_once('.')?;
    Some((chrono::DateTime::from_timestamp_micros(micros.parse().ok()?)?, id.parse().ok()?))
}

impl Gateway {
    /// The caller's sandboxes (every user's with `all`, for an admin), a page at a time.
    pub async fn list_sandboxes(
        &self,
        caller: &Principal,
        all: bool,
        page: PageRequest,
    ) -> Result<Page<Sandbox>, Error> {
        let (fetch, after) = page.bounds(parse_sandbox_key)?;
        let rows = self.store.list_sandboxes(caller, all, after, fetch).await?;
        Ok(page.page(rows, sandbox_key))
    }

    pub async fn get_sandbox(&self, caller: &Principal, reference: &str) -> Result<Sandbox, Error> {
        input::reference("sandbox", reference)?;
        self.store.sandbox(caller, reference).await
    }

    /// A sandbox and its descendants in tree order; a sandbox caller's own when `reference`
    /// is None.
    pub async fn list_children(&self, caller: &Principal, reference: Option<&str>) -> Result<Vec<Sandbox>, Error> {
        let own;
        let reference = match (reference, caller) {
            (Some(r), _) => r,
            (None, Principal::Sandbox { id, .. }) => {
                own = id.to_string();
                &own
            }
            (None, Principal::User { .. }) => return Err(Error::invalid("sandbox", "required: a sandbox name or id")),
        };
        input::reference("sandbox", reference)?;
        self.store.tree(caller, reference).await
    }

    /// The grant over a sandbox's tree with what is used and what remains (read-only; a
    /// sandbox caller reads its own tree's when `reference` is None).
    pub async fn grant_status(&self, caller: &Principal, reference: Option<&str>) -> Result<GrantStatus, Error> {
        if let Some(r) = reference {
            input::reference("sandbox", r)?;
        } else if caller.is_user() {
            return Err(Error::invalid("sandbox", "required: a sandbox name or id"));
        }
        self.store.grant_status(caller, reference).await
    }

    /// A sandbox's latest network denials, newest first (`limit` 0 for 50, at most 1000).
    pub async fn list_denials(&self, caller: &Principal, reference: &str, limit: i32) -> Result<Vec<Denial>, Error> {
        input::reference("sandbox", reference)?;
        if !(0..=1000).contains(&limit) {
            return Err(Error::invalid("limit", "1 to 1000 (0 means 50)"));
        }
        let limit = if limit == 0 { 50 } else { limit };
        self.store.denials(caller, reference, limit).await
    }

    /// [`Gateway::watch`] for a caller-chosen timeout (0 for the provisioning timeout plus a
    /// margin, at most an hour); refused at once when the caller may not see the sandbox.
    pub async fn watch_sandbox(
        &self,
        caller: Principal,
        reference: String,
        timeout_seconds: u32,
    ) -> Result<impl Stream<Item = Result<Sandbox, Error>> + Send + 'static, Error> {
        if timeout_seconds > 3600 {
            return Err(Error::invalid("timeout_seconds", "at most 3600"));
        }
        let deadline = match timeout_seconds {
            0 => self.settings.provision_timeout + Duration::from_secs(5),
            s => Duration::from_secs(s.into()),
        };
        let mut start = self.watching(&reference);
        let s = self.get_sandbox(&caller, &reference).await?;
        // Read after the subscriptions, the check is also the first item (of an id: a name's
        // sandbox is subscribed to only after the read, so the watch reads again).
        if start.pushed.is_some() {
            start.pending = Some(s);
        }
        Ok(self.follow(caller, reference, deadline, start))
    }

    /// The sandbox as the caller may see it now, then each time its phase changes, ending
    /// after a phase it does not leave on its own (READY, ERROR, STOPPING, STOPPED, DELETED)
    /// or at `deadline`.
    pub fn watch(
        &self,
        caller: Principal,
        reference: String,
        deadline: Duration,
    ) -> impl Stream<Item = Result<Sandbox, Error>> + Send + 'static {
        let start = self.watching(&reference);
        self.follow(caller, reference, deadline, start)
    }

    /// A watch subscribed to this gateway's phase changes, and to the sandbox's NOTIFYs when
    /// `reference` is its id (a name may have no sandbox yet): a read after this misses no
    /// change.
    fn watching(&self, reference: &str) -> Watching {
        Watching {
            pending: None,
            last: None,
            local: self.phases.subscribe(),
            pushed: id_of(reference).map(|id| self.changes.sandbox(id)),
            wait: false,
        }
    }

    fn follow(
        &self,
        caller: Principal,
        reference: String,
        deadline: Duration,
        start: Watching,
    ) -> impl Stream<Item = Result<Sandbox, Error>> + Send + 'static {
        let gw = self.clone();
        let end = tokio::time::Instant::now() + deadline;
        futures::stream::unfold(Some(start), move |state| {
            let gw = gw.clone();
            let caller = caller.clone();
            let reference = reference.clone();
            async move {
                let Watching { mut pending, mut last, mut local, mut pushed, mut wait } = state?;
                loop {
                    let woke = match wait {
                        true => wake(&gw, &mut pushed, &mut local, end).await?,
                        false => Woke::First,
                    };
                    wait = true;
                    let s = match pending.take() {
                        // Read after the subscriptions were made.
                        Some(s) => s,
                        None => {
                            // A NOTIFY while this gateway writes a phase: most likely that
                            // write's, whose answer is on its way (phases.rs).
                            if woke == Woke::Pushed && gw.phases.in_flight() {
                                let _ = tokio::time::timeout(WATCH_INTERVAL, local.changed()).await;
                            }
                            let change = local.borrow_and_update().clone();
                            let foreign = change.as_ref().zip(last.as_ref()).is_some_and(|(c, l)| c.id != l.id);
                            match written(change.as_deref(), last.as_ref()) {
                                Some(s) => s,
                                // Another sandbox's, and every change of this one is pushed.
                                None if woke == Woke::Here
                                    && foreign
                                    && pushed.is_some()
                                    && gw.changes.listening().0 =>
                                {
                                    continue;
                                }
                                None => {
                                    // Marked seen before the read: a change after it wakes the wait.
                                    if let Some(p) = pushed.as_mut() {
                                        p.mark();
                                    }
                                    match gw.get_sandbox(&caller, &reference).await {
                                        Ok(s) => s,
                                        Err(e) => return Some((Err(e), None)),
                                    }
                                }
                            }
                        }
                    };
                    // A name's sandbox: wait on its phase NOTIFY too (a change made through
                    // another gateway) from the first read on, and read once more, as the
                    // subscription came after that read.
                    if pushed.is_none() {
                        pushed = Some(gw.changes.sandbox(s.id));
                        wait = false;
                        continue;
                    }
                    // A watch ends at a phase the sandbox does not leave on its own.
                    if last.as_ref().map(|l| l.phase) != Some(s.phase) {
                        let settled = s.phase.is_settled();
                        last = Some(s.clone());
                        let next = (!settled).then_some(Watching { pending, last, local, pushed, wait });
                        return Some((Ok(s), next));
                    }
                }
            }
        })
    }
}

/// Why a watch looks at its sandbox.
#[derive(Clone, Copy, PartialEq)]
enum Woke {
    /// Nothing sent yet, or a name's sandbox just subscribed to.
    First,
    /// Its NOTIFY: a phase change committed, through any gateway.
    Pushed,
    /// A phase change this gateway wrote, maybe another sandbox's.
    Here,
    /// The safety timer, or the poll while no change is pushed.
    Timer,
}

/// Waits for a change of the watched sandbox; None past `end`.
async fn wake(
    gw: &Gateway,
    pushed: &mut Option<Subscription>,
    local: &mut PhaseReceiver,
    end: tokio::time::Instant,
) -> Option<Woke> {
    let now = tokio::time::Instant::now();
    if now >= end {
        return None;
    }
    // With the LISTEN session open every phase change is pushed, so the read again on a timer
    // is only a safety net; without it, poll.
    let every = if gw.changes.listening().0 { WATCH_SAFETY } else { WATCH_INTERVAL };
    let push = async {
        // Shutting down (Err) wakes nothing: the timer still ends the wait.
        if let Some(p) = pushed.as_mut()
            && p.changed(Kind::Phase).await.is_ok()
        {
            return;
        }
        std::future::pending::<()>().await
    };
    Some(tokio::select! {
        _ = push => Woke::Pushed,
        _ = local.changed() => Woke::Here,
        _ = tokio::time::sleep(every.min(end - now)) => Woke::Timer,
    })
}

/// The sandbox as a phase change this gateway wrote left it, when that change is newer than
/// `last` (the same sandbox, its policy not moved since): the write's answer is the row as it
/// is now, so nothing needs reading. Any such change ends a watch (READY, ERROR, STOPPING,
/// STOPPED, DELETED), so one older than a change made elsewhere is still a state the sandbox
/// was in when the watch ends on it.
fn written(change: Option<&PhaseChange>, last: Option<&Sandbox>) -> Option<Sandbox> {
    let (change, last) = (change?, last?);
    (change.updated_at > last.updated_at).then(|| change.applied_to(last)).flatten()
}

/// The sandbox id a reference names, told from a name as the database tells it
/// (`resolve_sandbox`, sql/auth.sql): the hyphenated form only, since a name may be 32 hex
/// digits.
fn id_of(reference: &str) -> Option<uuid::Uuid> {
    (reference.len() == 36).then(|| reference.parse().ok()).flatten()
}

type PhaseReceiver = tokio::sync::watch::Receiver<Option<Arc<PhaseChange>>>;

/// Where a watch stands between the phases it sends.
struct Watching {
    /// The sandbox as read before the watch's first item, to send without reading it again.
    pending: Option<Sandbox>,
    /// The sandbox as last sent.
    last: Option<Sandbox>,
    /// Phase changes this gateway wrote (see [`Gateway::phases`]).
    local: PhaseReceiver,
    /// The sandbox's NOTIFYs, once its id is known.
    pushed: Option<Subscription>,
    /// What was last read or sent is current: wait for a change before looking again.
    wait: bool,
}

#[cfg(test)]
mod tests {
    use super::{id_of, written};
    use chrono::{Duration, Utc};
    use openshell_store::{Kind, Phase, PhaseChange, Sandbox};
    use uuid::Uuid;

    fn provisioning() -> Sandbox {
        let (id, at) = (Uuid::new_v4(), Utc::now());
        Sandbox {
            id,
            name: "lead".into(),
            owner: "alice".into(),
            parent_id: None,
            parent_name: None,
            root_id: id,
            root_name: "lead".into(),
            depth: 0,
            kind: Kind::Agent,
            phase: Phase::Provisioning,
            phase_reason: String::new(),
            command: vec!["sleep".into()],
            policy_version: 1,
            policy_hash: "ab".into(),
            exit_code: None,
            template: serde_json::json!({}),
            isolation: None,
            created_by: "alice".into(),
            created_at: at,
            updated_at: at,
        }
    }

    fn ready(s: &Sandbox, after: Duration) -> PhaseChange {
        PhaseChange {
            id: s.id,
            phase: Phase::Ready,
            phase_reason: "main command running".into(),
            isolation: Some(serde_json::json!({"landlock": "enforced"})),
            policy_version: s.policy_version,
            exit_code: None,
            updated_at: s.updated_at + after,
        }
    }

    #[test]
    fn a_watch_takes_only_a_newer_write_of_its_own_sandbox_without_reading() {
        let last = provisioning();
        let newer = written(Some(&ready(&last, Duration::milliseconds(3))), Some(&last)).expect("a newer write");
        assert_eq!((newer.phase, newer.isolation.is_some(), newer.name.as_str()), (Phase::Ready, true, "lead"));
        // An older write (the row moved on since), another sandbox's, one after a policy
        // change, or nothing read yet: read the row.
        assert_eq!(written(Some(&ready(&last, Duration::zero())), Some(&last)), None);
        let other = provisioning();
        assert_eq!(written(Some(&ready(&other, Duration::milliseconds(3))), Some(&last)), None);
        let moved = PhaseChange { policy_version: 2, ..ready(&last, Duration::milliseconds(3)) };
        assert_eq!(written(Some(&moved), Some(&last)), None);
        assert_eq!(written(Some(&ready(&last, Duration::milliseconds(3))), None), None);
        assert_eq!(written(None, Some(&last)), None);
    }

    #[test]
    fn only_the_hyphenated_form_is_an_id() {
        let id = "01a2428c-a70a-79d1-88ac-cc945e04145d";
        assert_eq!(id_of(id).map(|u| u.to_string()).as_deref(), Some(id));
        assert_eq!(id_of(&id.to_uppercase()).map(|u| u.to_string()).as_deref(), Some(id));
        for name in ["01a2428ca70a79d188accc945e04145d", "{01a2428c-a70a-79d1-88ac-cc945e04145d}", "lead", ""] {
            assert_eq!(id_of(name), None, "{name} is a name");
        }
    }
}
