//! Who holds a proxy connection (asked when it is accepted and for each request on it),
//! answered by the sandbox's init: it sees the sandbox's
//! processes as they are (its own PID namespace's /proc) and may read their descriptors (it
//! holds the capabilities of the sandbox's user namespace, or is root), where a non-root
//! supervisor may not read an agent's `/proc/PID/fd`. The init finds the socket through a
//! `NETLINK_SOCK_DIAG` socket of the sandbox's network namespace and the processes holding
//! it through `/proc`, with the proxy crate's [`ProcIdentity`]; nothing the caller says is
//! used.
//!
//! One request and one reply per `SOCK_SEQPACKET` message, numbered, so a reply that comes
//! after its request timed out is never taken for the next one's.

use std::net::SocketAddr;
use std::os::fd::{AsRawFd, BorrowedFd, OwnedFd};
use std::time::Duration;

use nix::fcntl::{FcntlArg, OFlag, fcntl};
use nix::sys::socket::{MsgFlags, recv, send};
use openshell_proxy::{Caller, Identify, Identifying, ProcIdentity, Unidentified};
use serde::{Deserialize, Serialize};
use tokio::io::unix::AsyncFd;

/// How long the supervisor waits for the init's answer (the proxy gives up later).
const ANSWER_TIMEOUT: Duration = Duration::from_secs(3);
const MAX: usize = 64 * 1024;

#[derive(Debug, Serialize, Deserialize)]
struct Request {
    id: u64,
    peer: SocketAddr,
    local: SocketAddr,
}

#[derive(Debug, Serialize, Deserialize)]
struct Reply {
    id: u64,
    caller: Result<Caller, Unidentified>,
}

/// The pair's two ends: the init's and the supervisor's.
pub fn pair() -> nix::Result<(OwnedFd, OwnedFd)> {
    use nix::sys::socket::{AddressFamily, SockFlag, SockType, socketpair};
    socketpair(AddressFamily::Unix, SockType::SeqPacket, None, SockFlag::SOCK_CLOEXEC)
}

/// The init's identity of its sandbox: its namespace's sockets, through `diag`, held by the
/// processes its /proc shows (all of them the sandbox's).
pub fn in_init(diag: OwnedFd) -> std::io::Result<ProcIdentity> {
    ProcIdentity::new("/proc/net/tcp", "/proc/net/tcp6", ProcIdentity::all_pids).with_sock_diag_socket(diag)
}

/// Init side: answers one request waiting on `sock`.
pub fn answer(identity: &ProcIdentity, sock: BorrowedFd<'_>) {
    let mut buf = vec![0u8; MAX];
    let Ok(n) = recv(sock.as_raw_fd(), &mut buf, MsgFlags::MSG_DONTWAIT) else { return };
    let Ok(req) = serde_json::from_slice::<Request>(&buf[..n]) else { return };
    let reply = Reply { id: req.id, caller: identity.identify_now(req.peer, req.local) };
    if let Ok(bytes) = serde_json::to_vec(&reply) {
        let _ = send(sock.as_raw_fd(), &bytes, MsgFlags::MSG_DONTWAIT);
    }
}

/// Supervisor side: [`Identify`] by asking the init, waiting on the proxy's runtime (one
/// request in flight at a time).
pub struct FromInit {
    sock: tokio::sync::Mutex<(AsyncFd<OwnedFd>, u64)>,
}

impl FromInit {
    /// Must be made on a tokio runtime, which then waits for the init's answers.
    pub fn new(sock: OwnedFd) -> std::io::Result<FromInit> {
        let flags = fcntl(&sock, FcntlArg::F_GETFL)?;
        fcntl(&sock, FcntlArg::F_SETFL(OFlag::from_bits_retain(flags) | OFlag::O_NONBLOCK))?;
        // SAFETY: an OwnedFd is open and names the same socket for as long as it is owned,
        // here by the AsyncFd.
        let sock = unsafe { AsyncFd::register(sock) }?;
        Ok(FromInit { sock: tokio::sync::Mutex::new((sock, 0)) })
    }

    async fn ask(&self, peer: SocketAddr, local: SocketAddr) -> Result<Caller, Unidentified> {
        let fail = |e: String| Unidentified::new(e);
        let mut guard = self.sock.lock().await;
        guard.1 += 1;
        let id = guard.1;
        let bytes = serde_json::to_vec(&Request { id, peer, local }).map_err(|e| fail(e.to_string()))?;
        let sock = &guard.0;
        loop {
            let mut ready = sock.writable().await.map_err(|e| fail(format!("asking the sandbox init: {e}")))?;
            match ready.try_io(|fd| send(fd.as_raw_fd(), &bytes, MsgFlags::empty()).map_err(Into::into)) {
                Ok(sent) => break sent.map(drop).map_err(|e| fail(format!("asking the sandbox init: {e}")))?,
                Err(_would_block) => continue,
            };
        }
        let mut buf = vec![0u8; MAX];
        loop {
            let mut ready = sock.readable().await.map_err(|e| fail(format!("the sandbox init did not answer: {e}")))?;
            let n = match ready.try_io(|fd| recv(fd.as_raw_fd(), &mut buf, MsgFlags::empty()).map_err(Into::into)) {
                Ok(n) => n.map_err(|e| fail(format!("the sandbox init did not answer: {e}")))?,
                Err(_would_block) => continue,
            };
            if n == 0 {
                return Err(fail("the sandbox init is gone".into()));
            }
            let reply: Reply =
                serde_json::from_slice(&buf[..n]).map_err(|e| fail(format!("the sandbox init's answer: {e}")))?;
            // An answer to an earlier request that timed out: skip it.
            if reply.id == id {
                return reply.caller;
            }
        }
    }
}

impl Identify for FromInit {
    fn identify(&self, peer: SocketAddr, local: SocketAddr) -> Identifying<'_> {
        Box::pin(async move {
            match tokio::time::timeout(ANSWER_TIMEOUT, self.ask(peer, local)).await {
                Ok(r) => r,
                Err(_) => Err(Unidentified::new(format!("the sandbox init did not answer within {ANSWER_TIMEOUT:?}"))),
            }
        })
    }
}
