//! How the process driver starts a supervisor and hands it what it holds for it: spawned with
//! a Unix socket for its standard input, it first reads its claim there (one byte, its uid lock
//! and run lock attached; crates/supervisor/src/claim.rs), then its credential, and last the
//! word that its files are in place (so it loads and connects while its disk is made).
//! Passing the locks this way, rather than placing them in a pre-exec hook, lets the standard
//! library spawn it with posix_spawn instead of forking the whole gateway.

use std::os::fd::{AsFd, AsRawFd, RawFd};
use std::process::Stdio;

use nix::sys::socket::{ControlMessage, MsgFlags, sendmsg};
use tokio::io::AsyncWriteExt;
use tokio::net::UnixStream;
use tokio::process::{Child, Command};

use crate::DriverError;

/// A supervisor's process and the driver's end of its standard input.
pub struct Spawned {
    pub child: Child,
    pub input: UnixStream,
}

/// Spawns `cmd` (no pre-exec hook: posix_spawn, never a fork of the gateway) with a Unix
/// socket for standard input, and sends the claim: `locks` (uid lock, run lock) attached to one
/// byte.
pub async fn spawn(cmd: Command, locks: [RawFd; 2]) -> Result<Spawned, DriverError> {
    let Spawned { child, input } = spawn_with_input(cmd)?;
    input
        .async_io(tokio::io::Interest::WRITABLE, || {
            let iov = [std::io::IoSlice::new(b"C")];
            sendmsg::<()>(
                input.as_fd().as_raw_fd(),
                &iov,
                &[ControlMessage::ScmRights(&locks)],
                MsgFlags::empty(),
                None,
            )
            .map_err(std::io::Error::from)
        })
        .await
        .map_err(|e| DriverError(format!("hand the supervisor its locks: {e}")))?;
    Ok(Spawned { child, input })
}

/// Spawns `cmd` (no pre-exec hook: posix_spawn) with a Unix socket for standard input.
pub fn spawn_with_input(mut cmd: Command) -> Result<Spawned, DriverError> {
    let fail = |what: &str, e: std::io::Error| DriverError(format!("{what}: {e}"));
    let (ours, theirs) = std::os::unix::net::UnixStream::pair().map_err(|e| fail("a socket pair", e))?;
    cmd.stdin(Stdio::from(std::os::fd::OwnedFd::from(theirs)));
    let child = cmd.spawn().map_err(|e| fail("spawn supervisor", e))?;
    ours.set_nonblocking(true).map_err(|e| fail("supervisor socket", e))?;
    let input = UnixStream::from_std(ours).map_err(|e| fail("supervisor socket", e))?;
    Ok(Spawned { child, input })
}

/// Writes the credential hand-off after the claim.
pub async fn hand_off(input: &mut UnixStream, handoff: &[u8]) -> std::io::Result<()> {
    input.write_all(handoff).await
}

/// Tells the supervisor the sandbox's files are in place (its disk mounted), which it waits
/// for before it uses them, with what it starts with (`data`, one line of JSON; without it the
/// supervisor asks the gateway), and closes the input. Dropping the input instead abandons the
/// start: the supervisor exits with nothing of the sandbox run.
pub async fn files_in_place(mut input: UnixStream, data: Option<&str>) -> std::io::Result<()> {
    let line = match data {
        Some(data) if !data.contains('\n') => format!("start {data}\n"),
        _ => "start\n".to_string(),
    };
    input.write_all(line.as_bytes()).await?;
    input.shutdown().await
}
