//! Supervisors prepared ahead of their sandboxes (`--sandbox-pool N`, a root gateway only).
//!
//! A pooled supervisor is the supervisor binary loaded, its connection to the gateway open and
//! its sandbox's init already cloned into new namespaces and waiting for a spec; it holds
//! nothing of any sandbox: no uid, cgroup, folder, disk or credential. A start claims one
//! instead of spawning: the claim carries the arguments a cold start would have had, its
//! folder, its uid and run locks and its log (crates/supervisor/src/pool.rs), and from there
//! the start is a cold one's, step for step, so it isolates as a cold start does. An idle
//! gateway holds at most N such processes and no sandbox. A pooled supervisor whose driver
//! goes away reads the end of its input and exits, its init with it.

use std::os::fd::{AsFd, AsRawFd, RawFd};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use nix::sys::socket::{ControlMessage, MsgFlags, sendmsg};
use tokio::io::AsyncReadExt;
use tokio::process::Command;

use crate::DriverError;
use crate::claim::{self, Spawned};

/// The id a pooled supervisor's arguments name until it is claimed (the driver's scans skip it).
pub const UNCLAIMED: uuid::Uuid = uuid::Uuid::nil();
/// How long a claimed supervisor may take to answer before the start goes cold.
const ANSWER: Duration = Duration::from_secs(2);
/// A replacement starts this long after a claim, off the claimed sandbox's start.
const REFILL_AFTER: Duration = Duration::from_millis(50);
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
}

impl Pool {
    /// A pool of `size` `supervisor`s of `state_dir` that connect to `gateway`, with the
    /// environment `env` a cold start passes; filled in the background (needs a runtime).
    pub fn new(
        supervisor: PathBuf,
        state_dir: PathBuf,
        gateway: String,
        env: Vec<(String, String)>,
        size: usize,
    ) -> Pool {
        let inner = Inner { supervisor, state_dir, gateway, env, size, idle: Mutex::default() };
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
        let taken = self.lock().pop();
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
                None
            }
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<Spawned>> {
        self.inner.idle.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Starts pooled supervisors up to the pool's size after `delay`, in the background.
    fn refill(&self, delay: Duration) {
        let pool = self.clone();
        tokio::spawn(async move {
            tokio::time::sleep(delay).await;
            loop {
                let missing = {
                    let mut idle = pool.lock();
                    idle.retain_mut(|s| matches!(s.child.try_wait(), Ok(None)));
                    idle.len() < pool.inner.size
                };
                if !missing {
                    return;
                }
                match pool.spawn() {
                    Ok(s) => pool.lock().push(s),
                    Err(e) => return tracing::warn!("starting a pooled supervisor: {e}"),
                }
            }
        });
    }

    fn spawn(&self) -> Result<Spawned, DriverError> {
        let inner = &self.inner;
        let mut cmd = Command::new(&inner.supervisor);
        cmd.arg("--pooled")
            .arg("--state-dir")
            .arg(&inner.state_dir)
            .arg("--sandbox-id")
            .arg(UNCLAIMED.to_string())
            .arg("--gateway")
            .arg(&inner.gateway)
            .env_clear()
            .envs(inner.env.iter().map(|(k, v)| (k, v)))
            .current_dir("/")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .process_group(0);
        claim::spawn_with_input(cmd)
    }
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
