//! Supervisors prepared ahead of their sandboxes (`--sandbox-pool N`, a root gateway only).
//!
//! A pooled supervisor is the supervisor binary loaded, its connection to the gateway open and
//! its sandbox's init already cloned into new namespaces, in a cgroup made ahead, and waiting
//! for a spec; it holds nothing of any sandbox: no uid, limit, folder, disk or credential.
//! Beside them the pool keeps as many disks of the default size made ahead
//! (`openshell_disk::Prepared`, mounted nowhere), which a start of that size takes instead of
//! making one, as many sandboxes' folders (`Layout::make_spare`) and run files
//! (`RunLock::spare`), which a start renames to its id instead of making them, and as many
//! uids leased, which a start takes. A start claims one instead of spawning: the claim
//! carries the arguments a cold start would have had, its folder, its uid and run locks and
//! its log (crates/supervisor/src/pool.rs), and from there the start is a cold one's, step
//! for step, so it isolates as a cold start does. An idle gateway holds at most N such
//! processes and no sandbox. A pooled supervisor whose driver goes away reads the end of its
//! input and exits, its init with it.

use std::os::fd::{AsFd, AsRawFd, RawFd};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use nix::sys::socket::{ControlMessage, MsgFlags, sendmsg};
use openshell_disk::{Disks, Prepared};
use tokio::io::AsyncReadExt;
use tokio::process::Command;

use crate::DriverError;
use crate::claim::{self, Spawned};
use crate::layout::{Layout, Spare};
use crate::run_lock::RunLock;
use openshell_isolation::cgroup::{Limits, SpareCgroup};
use openshell_isolation::uids::{self, UidLease, UidRange};

/// The id a pooled supervisor's arguments name until it is claimed (the driver's scans skip it).
pub const UNCLAIMED: uuid::Uuid = uuid::Uuid::nil();
/// How long a claimed supervisor may take to answer before the start goes cold.
const ANSWER: Duration = Duration::from_secs(2);
/// A replacement starts this long after a claim, off the claimed sandbox's start.
const REFILL_AFTER: Duration = Duration::from_millis(50);
/// How often a refill removes the cgroups made ahead left empty (`SpareCgroup::remove_stale`,
/// whose cost grows with the pooled sandboxes running).
const SWEEP_EVERY: Duration = Duration::from_secs(60);
/// A cgroup made ahead younger than this may be one a pooled supervisor is still making.
const SPARE_SETTLED: Duration = Duration::from_secs(1);
/// The largest pool a gateway keeps.
pub const MAX: usize = 64;

/// The pooled supervisors of one driver.
#[derive(Clone)]
pub struct Pool {
    inner: Arc<Inner>,
}

struct Inner {
    supervisor: PathBuf,
    state_dir: PathBuf,
    gateway: String,
    env: Vec<(String, String)>,
    size: usize,
    idle: Mutex<Vec<Spawned>>,
    /// The sandboxes' disks, and the size of those made ahead.
    disks: Arc<Disks>,
    disk_bytes: u64,
    /// The limits the pooled supervisors' cgroups are made with.
    limits: Limits,
    prepared: Mutex<Vec<Prepared>>,
    /// Where sandboxes' folders go, and those made ahead.
    layout: Layout,
    spares: Mutex<Vec<Spare>>,
    /// Run files made ahead (`RunLock::spare`), and uids leased ahead from `uids`.
    runs: Mutex<Vec<RunLock>>,
    uids: UidRange,
    leases: Mutex<Vec<UidLease>>,
    /// One refill at a time.
    filling: tokio::sync::Mutex<()>,
    /// When a refill last removed the cgroups made ahead left empty.
    swept: Mutex<Option<std::time::Instant>>,
}

impl Drop for Inner {
    /// The folders made ahead go with the pool (a gateway that dies leaves them to the next
    /// one's start, see `Layout::remove_spares`).
    fn drop(&mut self) {
        for spare in self.spares.get_mut().unwrap_or_else(|p| p.into_inner()).drain(..) {
            spare.remove();
        }
        for run in self.runs.get_mut().unwrap_or_else(|p| p.into_inner()).drain(..) {
            let _ = run.remove();
        }
    }
}

/// What a pool is made of.
pub struct Settings {
    pub supervisor: PathBuf,
    pub state_dir: PathBuf,
    /// Where its supervisors connect.
    pub gateway: String,
    pub env: Vec<(String, String)>,
    pub size: usize,
    pub disks: Arc<Disks>,
    /// The size of the disks made ahead (the gateway's default).
    pub disk_bytes: u64,
    /// The limits the cgroups made ahead get (the gateway's defaults; a claim sets what its
    /// sandbox's change).
    pub limits: Limits,
    pub layout: Layout,
    /// Where the uids leased ahead come from (a root gateway's `--sandbox-uid-range`).
    pub uids: UidRange,
}

impl Pool {
    /// A pool as `settings` say, filled in the background (needs a runtime).
    pub fn new(settings: Settings) -> Pool {
        let Settings { supervisor, state_dir, gateway, env, size, disks, disk_bytes, limits, layout, uids } = settings;
        // A previous gateway's, made ahead for starts that never came.
        layout.remove_spares();
        let inner = Inner {
            supervisor,
            state_dir,
            gateway,
            env,
            size,
            idle: Mutex::default(),
            disks,
            disk_bytes,
            limits,
            prepared: Mutex::default(),
            layout,
            spares: Mutex::default(),
            runs: Mutex::default(),
            uids,
            leases: Mutex::default(),
            filling: tokio::sync::Mutex::const_new(()),
            swept: Mutex::default(),
        };
        let pool = Pool { inner: Arc::new(inner) };
        pool.refill(Duration::ZERO);
        pool
    }

    /// A pooled supervisor claimed for a start with `args` (a cold start's, after the
    /// binary), `dir` (its folder) and `fds` (uid lock, run lock, log), once it has taken its
    /// sandbox's id; `None` (the start goes cold) when none is ready or it did not answer.
    pub async fn claim(&self, gateway: &str, args: &[String], dir: &Path, fds: [RawFd; 3]) -> Option<Spawned> {
        // Connected elsewhere: a cold start's supervisor connects where the start says.
        if gateway != self.inner.gateway {
            return None;
        }
        let taken = self.inner.idle.lock().unwrap_or_else(|p| p.into_inner()).pop();
        self.refill(REFILL_AFTER);
        let mut pooled = taken?;
        let claim = serde_json::json!({ "args": args, "dir": dir.to_str()? });
        let answered = async {
            send(&pooled.input, &claim, &fds).await?;
            let mut answer = [0u8; 1];
            pooled.input.read_exact(&mut answer).await
        };
        match tokio::time::timeout(ANSWER, answered).await {
            Ok(Ok(_)) => Some(pooled),
            outcome => {
                tracing::warn!(?outcome, "a pooled supervisor did not take its claim; starting one cold");
                let _ = pooled.child.start_kill();
                // Its init dies with it, leaving its cgroup made ahead: the next refill sweeps.
                *self.inner.swept.lock().unwrap_or_else(|p| p.into_inner()) = None;
                self.refill(REFILL_AFTER);
                None
            }
        }
    }

    /// A disk made ahead for a start whose disk is `bytes`, if one of that size is ready.
    pub fn take_disk(&self, bytes: u64) -> Option<Prepared> {
        if bytes != self.inner.disk_bytes {
            return None;
        }
        take(&self.inner.prepared, || self.refill(REFILL_AFTER))
    }

    /// A sandbox's folders made ahead, if one is ready.
    pub fn take_spare(&self) -> Option<Spare> {
        take(&self.inner.spares, || self.refill(REFILL_AFTER))
    }

    /// A run file made ahead, if one is ready.
    pub fn take_run(&self) -> Option<RunLock> {
        take(&self.inner.runs, || self.refill(REFILL_AFTER))
    }

    /// A uid leased ahead, if one is ready.
    pub fn take_lease(&self) -> Option<UidLease> {
        take(&self.inner.leases, || self.refill(REFILL_AFTER))
    }

    /// Tops the pool up to its size after `delay`, in the background: supervisors first, then
    /// folders, run files and uids, then disks.
    fn refill(&self, delay: Duration) {
        let pool = self.clone();
        tokio::spawn(async move {
            tokio::time::sleep(delay).await;
            let _one = pool.inner.filling.lock().await;
            // The cgroups made ahead that processes which died left empty (any gateway's).
            let sweep = {
                let mut swept = pool.inner.swept.lock().unwrap_or_else(|p| p.into_inner());
                let due = swept.is_none_or(|at| at.elapsed() >= SWEEP_EVERY);
                if due {
                    *swept = Some(std::time::Instant::now());
                }
                due
            };
            if sweep {
                let _ = tokio::task::spawn_blocking(|| SpareCgroup::remove_stale(SPARE_SETTLED)).await;
            }
            let inner = &pool.inner;
            loop {
                let missing = {
                    let mut idle = inner.idle.lock().unwrap_or_else(|p| p.into_inner());
                    idle.retain_mut(|s| matches!(s.child.try_wait(), Ok(None)));
                    idle.len() < inner.size
                };
                if !missing {
                    break;
                }
                match pool.spawn() {
                    Ok(s) => inner.idle.lock().unwrap_or_else(|p| p.into_inner()).push(s),
                    Err(e) => return tracing::warn!("starting a pooled supervisor: {e}"),
                }
            }
            while inner.spares.lock().unwrap_or_else(|p| p.into_inner()).len() < inner.size {
                let layout = inner.layout.clone();
                match tokio::task::spawn_blocking(move || layout.make_spare()).await {
                    Ok(Ok(spare)) => inner.spares.lock().unwrap_or_else(|p| p.into_inner()).push(spare),
                    Ok(Err(e)) => return tracing::warn!("making a sandbox's folders ahead: {e}"),
                    Err(e) => return tracing::warn!("making a sandbox's folders ahead: {e}"),
                }
            }
            while inner.runs.lock().unwrap_or_else(|p| p.into_inner()).len() < inner.size {
                let layout = inner.layout.clone();
                match tokio::task::spawn_blocking(move || RunLock::spare(&layout)).await {
                    Ok(Ok(run)) => inner.runs.lock().unwrap_or_else(|p| p.into_inner()).push(run),
                    Ok(Err(e)) => return tracing::warn!("making a run file ahead: {e}"),
                    Err(e) => return tracing::warn!("making a run file ahead: {e}"),
                }
            }
            while inner.leases.lock().unwrap_or_else(|p| p.into_inner()).len() < inner.size {
                let (dir, range) = (inner.layout.uids(), inner.uids);
                match tokio::task::spawn_blocking(move || uids::allocate(&dir, range)).await {
                    Ok(Ok(lease)) => inner.leases.lock().unwrap_or_else(|p| p.into_inner()).push(lease),
                    Ok(Err(e)) => return tracing::warn!("leasing a uid ahead: {e}"),
                    Err(e) => return tracing::warn!("leasing a uid ahead: {e}"),
                }
            }
            while inner.prepared.lock().unwrap_or_else(|p| p.into_inner()).len() < inner.size {
                let (disks, bytes) = (inner.disks.clone(), inner.disk_bytes);
                match tokio::task::spawn_blocking(move || disks.prepare(bytes)).await {
                    Ok(Ok(Some(disk))) => inner.prepared.lock().unwrap_or_else(|p| p.into_inner()).push(disk),
                    // Disks that are not images: nothing to make ahead.
                    Ok(Ok(None)) => return,
                    Ok(Err(e)) => return tracing::warn!("making a disk ahead: {e}"),
                    Err(e) => return tracing::warn!("making a disk ahead: {e}"),
                }
            }
        });
    }

    fn spawn(&self) -> Result<Spawned, DriverError> {
        let inner = &self.inner;
        // Checked as a cold start's is, now: a claim starts nothing else.
        let mut cmd = Command::new(crate::binary::trusted(&inner.supervisor)?);
        cmd.arg("--pooled")
            .arg("--state-dir")
            .arg(&inner.state_dir)
            .arg("--sandbox-id")
            .arg(UNCLAIMED.to_string())
            .arg("--gateway")
            .arg(&inner.gateway)
            .args(crate::process::limit_args(&inner.limits))
            .env_clear()
            .envs(inner.env.iter().map(|(k, v)| (k, v)))
            .current_dir("/")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .process_group(0);
        claim::spawn_with_input(cmd)
    }
}

/// One of `made`, if any; a taken one is made again (`refill`).
fn take<T>(made: &Mutex<Vec<T>>, refill: impl FnOnce()) -> Option<T> {
    let taken = made.lock().unwrap_or_else(|p| p.into_inner()).pop();
    if taken.is_some() {
        refill();
    }
    taken
}

/// Sends a claim (crates/supervisor/src/pool.rs): its length, its JSON, `fds` attached.
async fn send(input: &tokio::net::UnixStream, claim: &serde_json::Value, fds: &[RawFd]) -> std::io::Result<()> {
    let body = claim.to_string();
    let mut bytes = u32::try_from(body.len()).map_err(std::io::Error::other)?.to_be_bytes().to_vec();
    bytes.extend_from_slice(body.as_bytes());
    let sent = input
        .async_io(tokio::io::Interest::WRITABLE, || {
            let iov = [std::io::IoSlice::new(&bytes)];
            sendmsg::<()>(input.as_fd().as_raw_fd(), &iov, &[ControlMessage::ScmRights(fds)], MsgFlags::empty(), None)
                .map_err(std::io::Error::from)
        })
        .await?;
    if sent != bytes.len() {
        return Err(std::io::Error::other(format!("the claim went out short ({sent} of {} bytes)", bytes.len())));
    }
    Ok(())
}
