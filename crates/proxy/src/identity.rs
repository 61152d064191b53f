//! Who opened a connection, from the kernel: the socket's row in the sandbox namespace's TCP
//! table gives its inode, the one process holding that inode gives the program, and its
//! parents (while they are sandbox processes) give the ancestors. Nothing the caller says
//! is used.

use std::collections::HashSet;
use std::fs::File;
use std::io::{self, BufReader};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use procfs::FromBufReadSI;
use procfs::net::TcpNetEntries;
use procfs::process::{FDTarget, Process};
use serde::{Deserialize, Serialize};

use crate::sock_diag::SockDiag;

/// At most this many ancestors are read.
const MAX_ANCESTORS: usize = 64;

/// The program behind a connection.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Caller {
    /// `/proc/<pid>/exe`, as the kernel resolves it.
    pub program: String,
    /// The parents' programs, nearest first.
    pub ancestors: Vec<String>,
    pub pid: u32,
}

/// Tells who opened a connection accepted by the proxy.
pub trait Identify: Send + Sync {
    /// `peer` is the connection's remote address (the caller's socket), `local` the proxy's.
    fn identify(&self, peer: SocketAddr, local: SocketAddr) -> Result<Caller, String>;
}

type PidSource = dyn Fn() -> io::Result<Vec<u32>> + Send + Sync;

/// [`Identify`] from `/proc`: the TCP tables of the sandbox's network namespace and the
/// sandbox's processes (e.g. its `cgroup.procs`).
#[derive(Clone)]
pub struct ProcIdentity {
    proc_root: PathBuf,
    tcp: PathBuf,
    tcp6: PathBuf,
    /// When set, sockets are looked up through netlink instead of the tables.
    diag: Option<Arc<SockDiag>>,
    pids: Arc<PidSource>,
}

impl ProcIdentity {
    /// `tcp` and `tcp6` are the namespace's tables (`/proc/<pid>/net/tcp{,6}` of any process
    /// in it); `pids` lists the processes that may own a connection.
    pub fn new(
        tcp: impl Into<PathBuf>,
        tcp6: impl Into<PathBuf>,
        pids: impl Fn() -> io::Result<Vec<u32>> + Send + Sync + 'static,
    ) -> ProcIdentity {
        ProcIdentity {
            proc_root: PathBuf::from("/proc"),
            tcp: tcp.into(),
            tcp6: tcp6.into(),
            diag: None,
            pids: Arc::new(pids),
        }
    }

    /// Looks sockets up with one `NETLINK_SOCK_DIAG` query in the network namespace `netns`
    /// (`/proc/<pid>/ns/net`) instead of reading the TCP tables, which costs milliseconds
    /// per read on a host with many sockets. Needs `CAP_SYS_ADMIN` to enter the namespace.
    pub fn with_sock_diag(mut self, netns: impl AsRef<Path>) -> io::Result<ProcIdentity> {
        self.diag = Some(Arc::new(SockDiag::open_in(netns.as_ref())?));
        Ok(self)
    }

    /// Looks sockets up through `socket`, a `NETLINK_SOCK_DIAG` socket made inside the
    /// sandbox's network namespace (by a process there), which answers for that namespace
    /// without this process entering it.
    pub fn with_sock_diag_socket(mut self, socket: std::os::fd::OwnedFd) -> io::Result<ProcIdentity> {
        self.diag = Some(Arc::new(SockDiag::from_socket(socket)?));
        Ok(self)
    }

    /// The identity of connections made in the network namespace of process `pid` (any
    /// sandbox process), by sock_diag, owned by one of `pids`.
    pub fn for_namespace_of(
        pid: u32,
        pids: impl Fn() -> io::Result<Vec<u32>> + Send + Sync + 'static,
    ) -> io::Result<ProcIdentity> {
        let (tcp, tcp6) = namespace_tables(pid);
        ProcIdentity::new(tcp, tcp6, pids).with_sock_diag(Path::new("/proc").join(pid.to_string()).join("ns/net"))
    }

    /// Reads the candidate pids from a cgroup's `cgroup.procs`.
    pub fn cgroup_procs(path: impl Into<PathBuf>) -> impl Fn() -> io::Result<Vec<u32>> + Send + Sync + 'static {
        let path = path.into();
        move || {
            let text = std::fs::read_to_string(&path)?;
            text.lines()
                .map(|l| l.trim().parse::<u32>().map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e)))
                .collect()
        }
    }

    /// Every process visible in `/proc` (for tests and hosts without a cgroup per sandbox).
    pub fn all_pids() -> io::Result<Vec<u32>> {
        let mut pids = Vec::new();
        for entry in std::fs::read_dir("/proc")? {
            if let Some(pid) = entry?.file_name().to_str().and_then(|n| n.parse().ok()) {
                pids.push(pid);
            }
        }
        Ok(pids)
    }

    fn socket_inode(&self, peer: SocketAddr, local: SocketAddr) -> Result<u64, String> {
        let (peer, local) = (canonical(peer), canonical(local));
        if let Some(diag) = &self.diag {
            return match diag.inode(peer, local)? {
                None => Err(format!("no socket {peer} -> {local} in the namespace")),
                Some(0) => Err(format!("socket {peer} -> {local} has no owner (closed)")),
                Some(inode) => Ok(u64::from(inode)),
            };
        }
        // Each read costs the kernel a walk of its whole socket hash, so read `tcp6` only when
        // needed: an IPv6 caller is only there; an IPv4 caller is in `tcp` unless its socket
        // is IPv6 (v4-mapped), so look there second.
        let tables: &[&PathBuf] = if peer.is_ipv4() { &[&self.tcp, &self.tcp6] } else { &[&self.tcp6] };
        let mut found = Vec::new();
        for table in tables {
            let file = File::open(table).map_err(|e| format!("reading {}: {e}", table.display()))?;
            let rows = TcpNetEntries::from_buf_read(BufReader::new(file), procfs::current_system_info())
                .map_err(|e| format!("reading {}: {e}", table.display()))?;
            found.extend(
                rows.0
                    .into_iter()
                    .filter(|r| canonical(r.local_address) == peer && canonical(r.remote_address) == local)
                    .map(|r| r.inode),
            );
            if !found.is_empty() {
                break;
            }
        }
        match found.as_slice() {
            [] => Err(format!("no socket {peer} -> {local} in the namespace")),
            [0] => Err(format!("socket {peer} -> {local} has no owner (closed)")),
            [inode] => Ok(*inode),
            _ => Err(format!("several sockets {peer} -> {local}")),
        }
    }

    fn owner(&self, inode: u64, candidates: &HashSet<u32>) -> Result<u32, String> {
        let mut owners = Vec::new();
        for &pid in candidates {
            // A process that exited since it was listed holds nothing.
            let proc = match Process::new_with_root(self.proc_root.join(pid.to_string())) {
                Ok(p) => p,
                Err(procfs::ProcError::NotFound(_)) => continue,
                Err(e) => return Err(format!("reading process {pid}: {e}")),
            };
            let fds = match proc.fd() {
                Ok(fds) => fds,
                Err(procfs::ProcError::NotFound(_)) => continue,
                Err(e) => return Err(format!("reading the descriptors of {pid}: {e}")),
            };
            for fd in fds {
                match fd {
                    Ok(fd) if matches!(fd.target, FDTarget::Socket(i) if i == inode) => {
                        owners.push(pid);
                        break;
                    }
                    Ok(_) | Err(procfs::ProcError::NotFound(_)) => {}
                    Err(e) => return Err(format!("reading the descriptors of {pid}: {e}")),
                }
            }
        }
        match owners.as_slice() {
            [] => Err(format!("no sandbox process holds socket inode {inode}")),
            [pid] => Ok(*pid),
            _ => Err(format!("several processes hold socket inode {inode}: {owners:?}")),
        }
    }

    fn exe(&self, pid: u32) -> Result<(String, u32), String> {
        let proc = Process::new_with_root(self.proc_root.join(pid.to_string()))
            .map_err(|e| format!("reading process {pid}: {e}"))?;
        let exe = proc.exe().map_err(|e| format!("reading the program of {pid}: {e}"))?;
        let exe = exe.to_str().ok_or_else(|| format!("the program of {pid} is not UTF-8"))?;
        if exe.ends_with(" (deleted)") {
            return Err(format!("the program of {pid} was deleted"));
        }
        let ppid = proc.stat().map_err(|e| format!("reading the parent of {pid}: {e}"))?.ppid;
        Ok((exe.to_string(), u32::try_from(ppid).unwrap_or(0)))
    }
}

impl Identify for ProcIdentity {
    fn identify(&self, peer: SocketAddr, local: SocketAddr) -> Result<Caller, String> {
        let inode = self.socket_inode(peer, local)?;
        let candidates: HashSet<u32> =
            (self.pids)().map_err(|e| format!("listing the sandbox processes: {e}"))?.into_iter().collect();
        let pid = self.owner(inode, &candidates)?;
        let (program, mut parent) = self.exe(pid)?;
        let mut ancestors = Vec::new();
        while parent != 0 && candidates.contains(&parent) && ancestors.len() < MAX_ANCESTORS {
            let (exe, next) = self.exe(parent)?;
            ancestors.push(exe);
            parent = next;
        }
        Ok(Caller { program, ancestors, pid })
    }
}

/// IPv4-mapped IPv6 addresses as plain IPv4 (a dual-stack socket shows them in `tcp6`).
fn canonical(a: SocketAddr) -> SocketAddr {
    SocketAddr::new(a.ip().to_canonical(), a.port())
}

/// The TCP tables of the network namespace process `pid` is in.
pub fn namespace_tables(pid: u32) -> (PathBuf, PathBuf) {
    let net = Path::new("/proc").join(pid.to_string()).join("net");
    (net.join("tcp"), net.join("tcp6"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn own() -> ProcIdentity {
        ProcIdentity::new("/proc/self/net/tcp", "/proc/self/net/tcp6", || Ok(vec![std::process::id()]))
    }

    fn own_by_netlink() -> ProcIdentity {
        own().with_sock_diag("/proc/self/ns/net").unwrap()
    }

    /// A socket made as a sandbox's init makes it and hands it over.
    fn own_by_handed_socket() -> ProcIdentity {
        use nix::sys::socket::{AddressFamily, SockFlag, SockProtocol, SockType, socket};
        let fd = socket(AddressFamily::Netlink, SockType::Raw, SockFlag::SOCK_CLOEXEC, SockProtocol::NetlinkSockDiag)
            .unwrap();
        own().with_sock_diag_socket(fd).unwrap()
    }

    #[test]
    fn identifies_its_own_socket() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let client = std::net::TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (_server, peer) = listener.accept().unwrap();
        for id in [own(), own_by_netlink(), own_by_handed_socket()] {
            let caller = id.identify(peer, listener.local_addr().unwrap()).unwrap();
            assert_eq!(caller.pid, std::process::id());
            let me = std::fs::read_link("/proc/self/exe").unwrap();
            assert_eq!(caller.program, me.to_str().unwrap());
            // Only this process is a candidate: no ancestors.
            assert!(caller.ancestors.is_empty());
        }
        drop(client);
    }

    #[test]
    fn identifies_ipv6_and_dual_stack_connections() {
        // A dual-stack listener sees an IPv4 client as ::ffff:127.0.0.1, in `tcp6`.
        let Ok(listener) = std::net::TcpListener::bind("[::]:0") else { return };
        let port = listener.local_addr().unwrap().port();
        for client in [format!("127.0.0.1:{port}"), format!("[::1]:{port}")] {
            let Ok(_c) = std::net::TcpStream::connect(&client) else { continue };
            let (server, peer) = listener.accept().unwrap();
            for id in [own(), own_by_netlink()] {
                let caller = id.identify(peer, server.local_addr().unwrap()).unwrap();
                assert_eq!(caller.pid, std::process::id(), "{client}");
            }
        }
    }

    #[test]
    fn refuses_a_socket_shared_with_another_process() {
        // An agent could hand its connection to another program; then who is calling is
        // unknown, whichever program is allowed.
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let client = std::net::TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (_server, peer) = listener.accept().unwrap();
        let shared = std::os::fd::OwnedFd::from(client.try_clone().unwrap());
        let mut child = std::process::Command::new("sleep").arg("10").stdin(shared).spawn().unwrap();
        let child_pid = child.id();
        let me = std::process::id();
        for id in [
            ProcIdentity::new("/proc/self/net/tcp", "/proc/self/net/tcp6", move || Ok(vec![me, child_pid])),
            own_by_netlink(),
        ] {
            let id = ProcIdentity { pids: Arc::new(move || Ok(vec![me, child_pid])), ..id };
            let err = id.identify(peer, listener.local_addr().unwrap()).unwrap_err();
            assert!(err.contains("several processes"), "{err}");
        }
        child.kill().unwrap();
        child.wait().unwrap();
    }

    #[test]
    fn refuses_unknown_sockets_and_foreign_owners() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let local = listener.local_addr().unwrap();
        for id in [own(), own_by_netlink()] {
            let err = id.identify("127.0.0.1:1".parse().unwrap(), local).unwrap_err();
            assert!(err.contains("no socket"), "{err}");
        }
        let _client = std::net::TcpStream::connect(local).unwrap();
        let (_server, peer) = listener.accept().unwrap();
        let none = ProcIdentity::new("/proc/self/net/tcp", "/proc/self/net/tcp6", || Ok(vec![]));
        let err = none.identify(peer, local).unwrap_err();
        assert!(err.contains("no sandbox process"), "{err}");
        let broken = ProcIdentity::new("/nonexistent/tcp", "/nonexistent/tcp6", || Ok(vec![std::process::id()]));
        assert!(broken.identify(peer, local).is_err());
    }
}
