//! Supervisors started ahead of their sandboxes (`--warm-supervisors N`), and the claim that
//! hands any supervisor what the driver holds for it.
//!
//! A warm supervisor is the supervisor binary loaded and waiting on its standard input, a
//! Unix socket; it holds nothing of any sandbox: no uid, cgroup, namespace, folder or
//! credential. A start claims one instead of spawning: the claim carries the arguments a cold
//! start would have had, its folder, its uid and run locks and its log, and from there the
//! start is a cold one's, step for step (crates/supervisor/src/claim.rs). So it isolates as a
//! cold start does, and an idle gateway holds at most N loaded processes, no sandbox. A warm
//! supervisor whose driver goes away reads the end of its input and exits.

use std::os::fd::{AsFd, AsRawFd, RawFd};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use nix::sys::socket::{ControlMessage, MsgFlags, sendmsg};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::UnixStream;
use tokio::process::{Child, Command};

use crate::DriverError;

/// The id a warm supervisor's arguments name until it is claimed (the driver's scans skip it).
pub const UNCLAIMED: uuid::Uuid = uuid::Uuid::nil();
/// How long a claimed warm supervisor may take to answer before the start goes cold.
const ANSWER: Duration = Duration::from_secs(2);
/// A replacement starts this long after a claim, off the claimed sandbox's start.
const REFILL_AFTER: Duration = Duration::from_millis(100);

/// A supervisor's process and the driver's end of its standard input.
pub struct Spawned {
    pub child: Child,
    pub input: UnixStream,
}

/// The warm supervisors of one driver.
#[derive(Clone)]
pub struct Pool {
    inner: Arc<Inner>,
}

struct Inner {
    supervisor: PathBuf,
    state_dir: PathBuf,
    env: Vec<(String, String)>,
    size: usize,
    idle: Mutex<Vec<Spawned>>,
}

impl Pool {
    /// A pool of `size` (0: none) warm `supervisor`s of `state_dir`, with the environment
    /// `env` a cold start passes; filled once a runtime runs.
    pub fn new(supervisor: PathBuf, state_dir: PathBuf, env: Vec<(String, String)>, size: usize) -> Pool {
        let pool = Pool { inner: Arc::new(Inner { supervisor, state_dir, env, size, idle: Mutex::default() }) };
        if size > 0 && tokio::runtime::Handle::try_current().is_ok() {
            pool.refill(Duration::ZERO);
        }
        pool
    }

    /// A warm supervisor claimed for a start with `args` (a cold start's, after the binary),
    /// `dir` (its working directory) and `fds` (uid lock, run lock, log), once it has taken
    /// its sandbox's id; `None` (the start goes cold) when none is warm or it did not answer.
    pub async fn claim(&self, args: &[String], dir: &Path, fds: [RawFd; 3]) -> Option<Spawned> {
        if self.inner.size == 0 {
            return None;
        }
        let taken = self.inner.idle.lock().unwrap_or_else(|p| p.into_inner()).pop();
        self.refill(REFILL_AFTER);
        let mut warm = taken?;
        let claim = serde_json::json!({ "args": args, "dir": dir.to_str()? });
        let answered = async {
            send(&warm.input, &claim, &fds).await?;
            let mut answer = [0u8; 1];
            warm.input.read_exact(&mut answer).await
        };
        match tokio::time::timeout(ANSWER, answered).await {
            Ok(Ok(_)) => Some(warm),
            outcome => {
                tracing::warn!(?outcome, "a warm supervisor did not take its claim; starting one cold");
                let _ = warm.child.start_kill();
                None
            }
        }
    }

    /// Starts warm supervisors up to the pool's size after `delay`, in the background.
    fn refill(&self, delay: Duration) {
        let pool = self.clone();
        tokio::spawn(async move {
            tokio::time::sleep(delay).await;
            loop {
                let missing = {
                    let mut idle = pool.inner.idle.lock().unwrap_or_else(|p| p.into_inner());
                    idle.retain_mut(|w| matches!(w.child.try_wait(), Ok(None)));
                    idle.len() < pool.inner.size
                };
                if !missing {
                    return;
                }
                match pool.spawn() {
                    Ok(w) => pool.inner.idle.lock().unwrap_or_else(|p| p.into_inner()).push(w),
                    Err(e) => return tracing::warn!("starting a warm supervisor: {e}"),
                }
            }
        });
    }

    fn spawn(&self) -> Result<Spawned, DriverError> {
        let inner = &self.inner;
        let mut cmd = Command::new(&inner.supervisor);
        cmd.arg("--warm")
            .arg("--state-dir")
            .arg(&inner.state_dir)
            .arg("--sandbox-id")
            .arg(UNCLAIMED.to_string())
            .env_clear()
            .envs(inner.env.iter().map(|(k, v)| (k, v)))
            .current_dir("/")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .process_group(0);
        spawn_with_input(cmd)
    }
}

/// Spawns `cmd` (no pre-exec hook: the standard library then uses posix_spawn, never a fork
/// of the gateway) with a Unix socket for standard input, and returns the other end.
pub fn spawn_with_input(mut cmd: Command) -> Result<Spawned, DriverError> {
    let (ours, theirs) =
        std::os::unix::net::UnixStream::pair().map_err(|e| DriverError(format!("a socket pair: {e}")))?;
    cmd.stdin(Stdio::from(std::os::fd::OwnedFd::from(theirs)));
    let child = cmd.spawn().map_err(|e| DriverError(format!("spawn supervisor: {e}")))?;
    ours.set_nonblocking(true).map_err(|e| DriverError(format!("supervisor socket: {e}")))?;
    let input = UnixStream::from_std(ours).map_err(|e| DriverError(format!("supervisor socket: {e}")))?;
    Ok(Spawned { child, input })
}

/// Sends a claim (crates/supervisor/src/claim.rs): its length, its JSON, `fds` attached.
pub async fn send(input: &UnixStream, claim: &serde_json::Value, fds: &[RawFd]) -> std::io::Result<()> {
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

/// Writes the credential hand-off after the claim and closes the input.
pub async fn hand_off(mut input: UnixStream, handoff: &[u8]) -> std::io::Result<()> {
    input.write_all(handoff).await?;
    input.shutdown().await
}
