//! Messages between the supervisor and its sandbox's init, one JSON datagram each, over a
//! unix socket pair. The init sends the proxy's listening socket (made inside the sandbox's
//! network namespace) as an `SCM_RIGHTS` attachment of [`ToSupervisor::Listening`].
//! For a non-root gateway the init first asks for its user namespace's maps
//! ([`ToSupervisor::AwaitingMap`], [`ToInit::Mapped`]) before it reads its spec.

use std::io::IoSlice;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::path::PathBuf;

use nix::sys::socket::{ControlMessage, ControlMessageOwned, MsgFlags, recvmsg, sendmsg};
use openshell_isolation::filesystem::{FsRules, LandlockReport};
use serde::{Deserialize, Serialize};

/// Largest message either side accepts.
pub const MAX_MESSAGE: usize = 256 * 1024;

/// What the init needs to set up the sandbox and start its main command.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Spec {
    pub uid: u32,
    pub gid: u32,
    pub workdir: PathBuf,
    pub command: Vec<String>,
    pub env: Vec<(String, String)>,
    pub fs: FsRules,
    pub hostname: String,
    /// Where the proxy listens inside the sandbox (127.0.0.1:port).
    pub proxy_port: u16,
    /// Size of the sandbox's private /tmp.
    pub tmp_bytes: u64,
    /// Most processes and threads the agent's uid may have (`RLIMIT_NPROC`): the sandbox's
    /// process limit where its cgroup also holds the supervisor (a container), so a fork
    /// bomb cannot starve the supervisor. The uid is the sandbox's alone.
    #[serde(default)]
    pub nproc: Option<u64>,
    /// The init gives the workdir to the agent's ids (a non-root driver cannot; the
    /// gateway's user, who owns it, is root of the sandbox's user namespace).
    #[serde(default)]
    pub chown_workdir: bool,
    /// The sandbox's own filesystem, at the workdir's parent folder.
    pub disk: Disk,
}

/// Where the sandbox's working directory and /tmp are kept.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Disk {
    /// Its own filesystem is mounted at the sandbox's folder already (the driver's image):
    /// the init binds its `tmp/` at /tmp.
    Mounted,
    /// The init mounts a tmpfs of this many bytes there first (charged to the sandbox's
    /// memory), with `work/` and `tmp/` in it.
    Tmpfs(u64),
    /// None of its own (benchmarks of what the disk costs): /tmp is a private tmpfs.
    Unbounded,
}

#[derive(Debug, Serialize, Deserialize)]
pub enum ToSupervisor {
    /// The init of a non-root gateway's sandbox runs in its new user namespace and waits for
    /// the supervisor to write its maps.
    AwaitingMap,
    /// The proxy's listener is attached, then the supervisor's end of the socket pair on
    /// which the init tells who opened a proxy connection (see `identity`).
    Listening,
    /// The main command was exec'd under these restrictions.
    Started { landlock: LandlockReport, skipped: Vec<String> },
    /// Setting up the sandbox failed; nothing of the main command runs.
    Failed { reason: String },
    /// The sandbox was set up but its main command could not start (as the agent: say
    /// `EACCES on /usr/bin/sleep`); nothing of it runs.
    CommandFailed { reason: String },
    /// The main command exited (code, or 128 + signal).
    Exited { code: i32 },
    /// An exec ended (code, or 128 + signal), or could not start (`error`).
    ExecExited { id: u64, code: i32, error: Option<String> },
}

/// Work the supervisor hands the init after the start.
#[derive(Debug, Serialize, Deserialize)]
pub enum ToInit {
    /// The user namespace's maps are written (answers [`ToSupervisor::AwaitingMap`]).
    Mapped,
    /// Run a command like the main command (same uid, Landlock, seccomp, namespaces) in a
    /// process group of its own, on the attached stdin, stdout and stderr.
    Exec { id: u64, command: Vec<String>, env: Vec<(String, String)>, workdir: Option<PathBuf> },
    /// Kill an exec's process group.
    Kill { id: u64 },
    /// Open a file as the agent could (see `files`) and answer on the attached socket.
    Open { id: u64, path: String, max_bytes: u64 },
}

pub fn send<T: Serialize>(fd: BorrowedFd<'_>, msg: &T, attach: &[RawFd]) -> std::io::Result<()> {
    let bytes = serde_json::to_vec(msg).map_err(std::io::Error::other)?;
    let cmsgs: Vec<ControlMessage> =
        if attach.is_empty() { Vec::new() } else { vec![ControlMessage::ScmRights(attach)] };
    sendmsg::<()>(fd.as_raw_fd(), &[IoSlice::new(&bytes)], &cmsgs, MsgFlags::empty(), None)?;
    Ok(())
}

/// Receives one message and the descriptors attached to it.
pub fn recv<T: for<'de> Deserialize<'de>>(fd: BorrowedFd<'_>) -> std::io::Result<(T, Vec<OwnedFd>)> {
    let mut buf = vec![0u8; MAX_MESSAGE];
    let mut space = nix::cmsg_space!([RawFd; 4]);
    let (len, attached) = {
        let mut iov = [std::io::IoSliceMut::new(&mut buf)];
        let msg = recvmsg::<()>(fd.as_raw_fd(), &mut iov, Some(&mut space), MsgFlags::MSG_CMSG_CLOEXEC)?;
        let mut attached = Vec::new();
        for c in msg.cmsgs()? {
            if let ControlMessageOwned::ScmRights(fds) = c {
                // SAFETY: the kernel just gave us these descriptors.
                attached.extend(fds.into_iter().map(|f| unsafe { OwnedFd::from_raw_fd(f) }));
            }
        }
        (msg.bytes, attached)
    };
    if len == 0 {
        return Err(std::io::Error::new(std::io::ErrorKind::UnexpectedEof, "the other side closed"));
    }
    let value = serde_json::from_slice(&buf[..len]).map_err(std::io::Error::other)?;
    Ok((value, attached))
}
