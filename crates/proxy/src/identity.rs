//! Who holds a connection, from the kernel: the socket's row in the sandbox namespace's TCP
//! table gives its inode, the processes holding that inode give the program, and its parents
//! (while they are sandbox processes) give the ancestors. Nothing the caller says is used.
//!
//! The proxy asks when it accepts a connection and again for each request ([`Caller::still_holds`]):
//! a request is the program's only while exactly one process holds the socket, the one that
//! held it at accept, on the same descriptors, running the same program image.

use std::collections::HashSet;
use std::fmt;
use std::fs::File;
use std::future::Future;
use std::io::{self, BufReader, Read};
use std::net::SocketAddr;
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::Arc;

use nix::dir::Dir;
use nix::errno::Errno;
use nix::fcntl::{OFlag, openat, readlinkat};
use nix::sys::stat::Mode;
use procfs::net::TcpNetEntries;
use procfs::{FromBufReadSI, FromRead};
use serde::{Deserialize, Serialize};

use crate::sock_diag::SockDiag;

/// At most this many ancestors are read.
const MAX_ANCESTORS: usize = 64;
/// At most this many holders are named in a refusal.
const MAX_NAMED: usize = 8;
/// `O_CLOEXEC` in the octal `flags:` of `/proc/<pid>/fdinfo/<fd>`.
const O_CLOEXEC: u32 = 0o2_000_000;

/// The program behind a connection: the one process holding its socket.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Caller {
    /// `/proc/<pid>/exe`, as the kernel resolves it.
    pub program: String,
    /// The parents' programs, nearest first.
    pub ancestors: Vec<String>,
    pub pid: u32,
    /// When the process started (clock ticks after boot): another process that reuses the pid
    /// differs.
    pub started: u64,
    /// Where the process's stack and arguments begin: placed afresh by every exec (ASLR), so
    /// an exec differs even when it runs the same program again.
    pub image: [u64; 2],
    /// The process's descriptors that refer to the socket, ascending.
    pub fds: Vec<u32>,
    /// Some of those descriptors are not close-on-exec: a program the process starts would
    /// inherit the socket.
    pub inheritable: bool,
}

/// A process found holding a socket.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Holder {
    pub pid: u32,
    pub program: String,
}

/// Why a connection's program is not known; names the processes found holding it, if any.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Unidentified {
    pub reason: String,
    /// Set when several processes hold the socket (at most [`MAX_NAMED`]).
    pub holders: Vec<Holder>,
}

impl Unidentified {
    pub fn new(reason: impl Into<String>) -> Unidentified {
        Unidentified { reason: reason.into(), holders: Vec::new() }
    }
}

impl From<String> for Unidentified {
    fn from(reason: String) -> Unidentified {
        Unidentified::new(reason)
    }
}

impl fmt::Display for Unidentified {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.reason)
    }
}

impl Caller {
    /// Whether `now` (who holds the connection as a request arrives) is still this caller
    /// (who held it at accept): the same process, not exec'd since, on the same descriptors.
    /// Err says what changed; the request is then no program's.
    pub fn still_holds(&self, now: &Caller) -> Result<(), String> {
        if (now.pid, now.started) != (self.pid, self.started) {
            return Err(format!(
                "the connection changed hands since it was accepted: process {} ({}) opened it, process {} ({}) holds it now",
                self.pid, self.program, now.pid, now.program
            ));
        }
        if now.program != self.program || now.image != self.image {
            return Err(format!(
                "process {} started another program since it opened the connection: {} then, {} now",
                self.pid, self.program, now.program
            ));
        }
        if now.fds != self.fds {
            return Err(format!(
                "process {} ({}) holds the connection on other descriptors than when it opened it \
                 ({:?} then, {:?} now): it was passed on and back",
                self.pid, self.program, self.fds, now.fds
            ));
        }
        Ok(())
    }
}

/// What [`Identify::identify`] returns: the answer, once the kernel has been asked.
pub type Identifying<'a> = Pin<Box<dyn Future<Output = Result<Caller, Unidentified>> + Send + 'a>>;

/// Tells who holds a connection accepted by the proxy.
pub trait Identify: Send + Sync {
    /// `peer` is the connection's remote address (the caller's socket), `local` the proxy's.
    /// Asked on every request, so a source that waits on another process (the sandbox's
    /// init) waits on the proxy's own runtime rather than on a blocking thread.
    fn identify(&self, peer: SocketAddr, local: SocketAddr) -> Identifying<'_>;
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
        // An ownerless row (inode 0) is a closed socket, such as an earlier connection on the
        // same addresses in TIME_WAIT: loopback reuses those (`tcp_tw_reuse`), so it can sit
        // beside the live one. No process holds it, so it cannot be the caller. The table is
        // read in chunks, not atomically, so a socket that moves in the kernel's hash between
        // two reads shows twice: the same inode twice is one socket.
        let mut live: Vec<u64> = found.iter().copied().filter(|&i| i != 0).collect();
        live.sort_unstable();
        live.dedup();
        match (live.as_slice(), found.is_empty()) {
            (_, true) => Err(format!("no socket {peer} -> {local} in the namespace")),
            ([], false) => Err(format!("socket {peer} -> {local} has no owner (closed)")),
            ([inode], false) => Ok(*inode),
            _ => Err(format!("several sockets {peer} -> {local}")),
        }
    }

    /// Every candidate process holding socket `inode`, with the descriptors it holds it on.
    ///
    /// This runs for every request, over every sandbox process, so it costs one `readlinkat`
    /// per descriptor and nothing else. A descriptor closed while it is read holds nothing;
    /// any other error refuses, since a descriptor that cannot be read may be the socket.
    fn holders(&self, inode: u64, candidates: &HashSet<u32>) -> Result<Vec<(u32, Vec<u32>)>, String> {
        let target = format!("socket:[{inode}]");
        let mut holders = Vec::new();
        for &pid in candidates {
            let path = self.proc_root.join(pid.to_string()).join("fd");
            let mut dir = match Dir::open(&path, OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC, Mode::empty())
            {
                Ok(d) => d,
                // A process that exited since it was listed holds nothing.
                Err(Errno::ENOENT | Errno::ESRCH) => continue,
                Err(e) => return Err(format!("reading the descriptors of {pid}: {e}")),
            };
            let mut fds = Vec::new();
            for entry in dir.iter() {
                let entry = entry.map_err(|e| format!("reading the descriptors of {pid}: {e}"))?;
                // `.` and `..` are the only names that are not descriptor numbers.
                if let Some(fd) = entry.file_name().to_str().ok().and_then(|n| n.parse::<u32>().ok()) {
                    fds.push(fd);
                }
            }
            let mut on = Vec::new();
            for fd in fds {
                match readlinkat(&dir, fd.to_string().as_str()) {
                    Ok(link) if link.as_encoded_bytes() == target.as_bytes() => on.push(fd),
                    Ok(_) | Err(Errno::ENOENT) => {}
                    Err(e) => return Err(format!("reading descriptor {fd} of {pid}: {e}")),
                }
            }
            if !on.is_empty() {
                on.sort_unstable();
                holders.push((pid, on));
            }
        }
        holders.sort_unstable();
        Ok(holders)
    }

    /// The program of `pid`, and its parent's pid.
    fn exe(&self, pid: u32) -> Result<(String, u32), String> {
        let proc = ProcDir::open(&self.proc_root, pid)?;
        Ok((proc.program()?, proc.stat()?.ppid))
    }

    /// Who holds `inode`, when exactly one candidate process does.
    fn holder(&self, inode: u64, candidates: &HashSet<u32>) -> Result<Caller, Unidentified> {
        let holders = self.holders(inode, candidates)?;
        let (pid, fds) = match holders.as_slice() {
            [] => {
                return Err(Unidentified::new(format!(
                    "no sandbox process holds socket inode {inode} (closed, or in flight in a message)"
                )));
            }
            [(pid, fds)] => (*pid, fds.clone()),
            several => {
                let named: Vec<Holder> = several
                    .iter()
                    .take(MAX_NAMED)
                    .map(|(pid, _)| Holder {
                        pid: *pid,
                        program: self.exe(*pid).map(|(p, _)| p).unwrap_or_else(|e| format!("unknown ({e})")),
                    })
                    .collect();
                let list: Vec<String> = named.iter().map(|h| format!("process {} ({})", h.pid, h.program)).collect();
                return Err(Unidentified {
                    reason: format!("{} processes hold the connection: {}", several.len(), list.join(", ")),
                    holders: named,
                });
            }
        };
        let proc = ProcDir::open(&self.proc_root, pid)?;
        let program = proc.program()?;
        let stat = proc.stat()?;
        let mut inheritable = false;
        for &fd in &fds {
            inheritable |= !proc.close_on_exec(fd)?;
        }
        let mut caller = Caller {
            program,
            ancestors: Vec::new(),
            pid,
            started: stat.starttime,
            image: [stat.startstack, stat.arg_start],
            fds,
            inheritable,
        };
        let mut parent = stat.ppid;
        while parent != 0 && candidates.contains(&parent) && caller.ancestors.len() < MAX_ANCESTORS {
            let (exe, next) = self.exe(parent)?;
            caller.ancestors.push(exe);
            parent = next;
        }
        Ok(caller)
    }
}

/// `/proc/<pid>` held open, so that each read names the same process even if the pid is
/// reused meanwhile; each file is one open and one read, since a request pays for all of them.
struct ProcDir {
    dir: OwnedFd,
    pid: u32,
}

/// What a request needs of `/proc/<pid>/stat`.
struct Stat {
    ppid: u32,
    starttime: u64,
    startstack: u64,
    arg_start: u64,
}

impl ProcDir {
    fn open(root: &Path, pid: u32) -> Result<ProcDir, String> {
        let path = root.join(pid.to_string());
        let dir = nix::fcntl::open(&path, OFlag::O_PATH | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC, Mode::empty())
            .map_err(|e| format!("reading process {pid}: {e}"))?;
        Ok(ProcDir { dir, pid })
    }

    /// `exe`, refused when it is not UTF-8 or was deleted (it may be replaced).
    fn program(&self) -> Result<String, String> {
        let pid = self.pid;
        let exe = readlinkat(&self.dir, "exe").map_err(|e| format!("reading the program of {pid}: {e}"))?;
        let exe = exe.into_string().map_err(|_| format!("the program of {pid} is not UTF-8"))?;
        if exe.ends_with(" (deleted)") {
            return Err(format!("the program of {pid} was deleted"));
        }
        Ok(exe)
    }

    /// A file of the process, whole: these are a few hundred bytes, one read.
    fn read(&self, name: &str) -> Result<Vec<u8>, String> {
        let pid = self.pid;
        let fd = openat(&self.dir, name, OFlag::O_RDONLY | OFlag::O_CLOEXEC, Mode::empty())
            .map_err(|e| format!("reading {name} of {pid}: {e}"))?;
        let mut buf = vec![0u8; 4096];
        let n = File::from(fd).read(&mut buf).map_err(|e| format!("reading {name} of {pid}: {e}"))?;
        if n == buf.len() {
            return Err(format!("{name} of {pid} is longer than {} bytes", buf.len()));
        }
        buf.truncate(n);
        Ok(buf)
    }

    fn stat(&self) -> Result<Stat, String> {
        let pid = self.pid;
        let stat = procfs::process::Stat::from_read(self.read("stat")?.as_slice())
            .map_err(|e| format!("reading process {pid}: {e}"))?;
        Ok(Stat {
            ppid: u32::try_from(stat.ppid).unwrap_or(0),
            starttime: stat.starttime,
            startstack: stat.startstack,
            arg_start: stat.arg_start.unwrap_or(0),
        })
    }

    /// Whether descriptor `fd` closes on exec (`flags:` in its fdinfo, octal).
    fn close_on_exec(&self, fd: u32) -> Result<bool, String> {
        let (pid, name) = (self.pid, format!("fdinfo/{fd}"));
        let text = self.read(&name)?;
        let flags = String::from_utf8_lossy(&text)
            .lines()
            .find_map(|l| l.strip_prefix("flags:").and_then(|v| u32::from_str_radix(v.trim(), 8).ok()))
            .ok_or_else(|| format!("{name} of {pid} has no flags line"))?;
        Ok(flags & O_CLOEXEC != 0)
    }
}

impl ProcIdentity {
    /// Who holds the connection `peer` -> `local` now, read on this thread.
    pub fn identify_now(&self, peer: SocketAddr, local: SocketAddr) -> Result<Caller, Unidentified> {
        let inode = self.socket_inode(peer, local)?;
        let candidates: HashSet<u32> =
            (self.pids)().map_err(|e| format!("listing the sandbox processes: {e}"))?.into_iter().collect();
        self.holder(inode, &candidates)
    }
}

/// Reads `/proc` on a blocking thread.
impl Identify for ProcIdentity {
    fn identify(&self, peer: SocketAddr, local: SocketAddr) -> Identifying<'_> {
        let me = self.clone();
        Box::pin(async move {
            tokio::task::spawn_blocking(move || me.identify_now(peer, local))
                .await
                .unwrap_or_else(|e| Err(Unidentified::new(format!("identifying failed: {e}"))))
        })
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
    use std::os::fd::OwnedFd;
    use std::process::{Child, Command, Stdio};
    use std::time::{Duration, Instant};

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

    /// These candidates, by netlink.
    fn among(pids: Vec<u32>) -> ProcIdentity {
        ProcIdentity { pids: Arc::new(move || Ok(pids.clone())), ..own_by_netlink() }
    }

    /// A connection to a fresh listener: (client, peer, local).
    fn connection() -> (std::net::TcpStream, SocketAddr, SocketAddr, std::net::TcpStream) {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let client = std::net::TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (server, peer) = listener.accept().unwrap();
        (client, peer, listener.local_addr().unwrap(), server)
    }

    /// `sh -c script` holding `socket` as its standard input (this process keeps no copy).
    fn shell_holding(socket: std::net::TcpStream, script: &str) -> Child {
        Command::new("/bin/sh").args(["-c", script]).stdin(Stdio::from(OwnedFd::from(socket))).spawn().unwrap()
    }

    /// Asks until `f` holds for what `id` says (a child needs a moment to start or exec).
    fn until(id: &ProcIdentity, peer: SocketAddr, local: SocketAddr, f: impl Fn(&Caller) -> bool) -> Caller {
        let start = Instant::now();
        loop {
            if let Ok(c) = id.identify_now(peer, local)
                && f(&c)
            {
                return c;
            }
            assert!(start.elapsed() < Duration::from_secs(10), "{:?}", id.identify_now(peer, local));
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    #[test]
    fn identifies_its_own_socket() {
        let (client, peer, local, _server) = connection();
        for id in [own(), own_by_netlink(), own_by_handed_socket()] {
            let caller = id.identify_now(peer, local).unwrap();
            assert_eq!(caller.pid, std::process::id());
            let me = std::fs::read_link("/proc/self/exe").unwrap();
            assert_eq!(caller.program, me.to_str().unwrap());
            // Only this process is a candidate: no ancestors.
            assert!(caller.ancestors.is_empty());
            use std::os::fd::AsRawFd;
            assert_eq!(caller.fds, [client.as_raw_fd() as u32]);
            assert!(caller.started > 0 && caller.image[0] > 0, "{caller:?}");
            assert!(!caller.inheritable, "Rust makes sockets close-on-exec");
            assert_eq!(caller.still_holds(&id.identify_now(peer, local).unwrap()), Ok(()));
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
                let caller = id.identify_now(peer, server.local_addr().unwrap()).unwrap();
                assert_eq!(caller.pid, std::process::id(), "{client}");
            }
        }
    }

    #[test]
    fn refuses_a_socket_shared_with_another_process_naming_each() {
        // An agent could hand its connection to another program; then who is calling is
        // unknown, whichever program is allowed.
        let (client, peer, local, _server) = connection();
        let mut child = shell_holding(client.try_clone().unwrap(), "exec sleep 10");
        let (me, pid) = (std::process::id(), child.id());
        let tables = ProcIdentity::new("/proc/self/net/tcp", "/proc/self/net/tcp6", || Ok(vec![]));
        for id in [ProcIdentity { pids: Arc::new(move || Ok(vec![me, pid])), ..tables }, among(vec![me, pid])] {
            let sleep = until(&among(vec![pid]), peer, local, |c| c.program.ends_with("sleep")).program;
            let err = id.identify_now(peer, local).unwrap_err();
            assert!(err.reason.starts_with("2 processes hold the connection"), "{err}");
            let named: Vec<(u32, &str)> = err.holders.iter().map(|h| (h.pid, h.program.as_str())).collect();
            let mut want = vec![(me, std::fs::read_link("/proc/self/exe").unwrap().to_str().unwrap().to_string())];
            want.push((pid, sleep));
            want.sort();
            let want: Vec<(u32, &str)> = want.iter().map(|(p, s)| (*p, s.as_str())).collect();
            assert_eq!(named, want, "{err}");
        }
        child.kill().unwrap();
        child.wait().unwrap();
    }

    #[test]
    fn a_descriptor_that_stays_open_across_exec_is_inheritable() {
        let (client, peer, local, _server) = connection();
        let mut child = Command::new("sleep").arg("10").stdin(Stdio::from(OwnedFd::from(client))).spawn().unwrap();
        let held = until(&among(vec![child.id()]), peer, local, |c| c.program.ends_with("sleep"));
        assert_eq!((held.fds.as_slice(), held.inheritable), (&[0][..], true), "{held:?}");
        child.kill().unwrap();
        child.wait().unwrap();
    }

    #[test]
    fn a_socket_passed_on_or_exec_d_with_is_no_longer_its_openers() {
        // The shell opens (holds) the connection, then execs into another program.
        let (client, peer, local, _server) = connection();
        // (`<&-`: the shell's own children do not hold it too.)
        let mut child = shell_holding(client, "sleep 0.5 <&-; exec sleep 10");
        let id = among(vec![child.id()]);
        let opened = until(&id, peer, local, |c| c.program.ends_with("sh") || c.program.ends_with("dash"));
        let now = until(&id, peer, local, |c| c.program.ends_with("sleep"));
        let err = opened.still_holds(&now).unwrap_err();
        assert!(err.contains("started another program") && err.contains(&now.program), "{err}");
        child.kill().unwrap();
        child.wait().unwrap();

        // An exec of the same program is a new image too (ASLR places its stack afresh).
        let aslr = std::fs::read_to_string("/proc/sys/kernel/randomize_va_space").is_ok_and(|v| v.trim() != "0");
        let (client, peer, local, _server) = connection();
        let mut child = shell_holding(client, "sleep 0.5 <&-; exec /bin/sh -c 'sleep 10 <&-; :'");
        let id = among(vec![child.id()]);
        let opened = until(&id, peer, local, |_| true);
        let now = until(&id, peer, local, |c| c.image != opened.image || !aslr);
        assert_eq!(now.program, opened.program);
        if aslr {
            let err = opened.still_holds(&now).unwrap_err();
            assert!(err.contains("started another program"), "{err}");
        }
        child.kill().unwrap();
        child.wait().unwrap();

        // Another process holding it (the opener handed it over and left).
        let other = Caller { pid: opened.pid + 1, ..opened.clone() };
        let err = opened.still_holds(&other).unwrap_err();
        assert!(err.starts_with("the connection changed hands"), "{err}");
        // The same pid, a later process.
        let reused = Caller { started: opened.started + 1, ..opened.clone() };
        assert!(opened.still_holds(&reused).unwrap_err().starts_with("the connection changed hands"));
        // Passed away and received back on another descriptor.
        let back = Caller { fds: vec![opened.fds[0] + 7], ..opened.clone() };
        assert!(opened.still_holds(&back).unwrap_err().contains("passed on and back"));
        // Its parents may change (a parent exited): still the same holder.
        let orphaned = Caller { ancestors: vec![], ..opened.clone() };
        assert_eq!(opened.still_holds(&orphaned), Ok(()));
    }

    #[test]
    fn a_closed_or_twice_read_socket_on_the_same_addresses_is_not_a_second_owner() {
        // Loopback reuses the addresses of a connection in TIME_WAIT, so its ownerless row can
        // sit beside the live one; the live one is the caller, and alone it still is not.
        let (_client, peer, local, _server) = connection();
        let table = std::fs::read_to_string("/proc/self/net/tcp").unwrap();
        let mut lines = table.lines();
        let header = lines.next().unwrap();
        let port = |a: SocketAddr| format!(":{:04X}", a.port());
        let row = lines.find(|l| l.split_whitespace().nth(1).is_some_and(|a| a.ends_with(&port(peer)))).unwrap();
        let mut closed: Vec<&str> = row.split_whitespace().collect();
        (closed[3], closed[9]) = ("06", "0");
        let dir = std::env::temp_dir().join(format!("identity-tw-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let write = |name: &str, rows: &[&str]| {
            let path = dir.join(name);
            std::fs::write(&path, format!("{header}\n{}\n", rows.join("\n"))).unwrap();
            path
        };
        let closed = closed.join(" ");
        let both = write("both", &[&closed, row]);
        let caller =
            ProcIdentity::new(&both, "/nonexistent", || Ok(vec![std::process::id()])).identify_now(peer, local);
        assert_eq!(caller.map(|c| c.pid), Ok(std::process::id()));
        let only = write("only", &[&closed]);
        let err = ProcIdentity::new(&only, "/nonexistent", || Ok(vec![std::process::id()]))
            .identify_now(peer, local)
            .unwrap_err();
        assert!(err.reason.contains("no owner"), "{err}");

        // The table is not read atomically, so one socket can show twice: still one caller.
        // Two live inodes on the same addresses are two sockets, and that is refused.
        let twice = write("twice", &[row, row]);
        let caller =
            ProcIdentity::new(&twice, "/nonexistent", || Ok(vec![std::process::id()])).identify_now(peer, local);
        assert_eq!(caller.map(|c| c.pid), Ok(std::process::id()));
        let mut other: Vec<&str> = row.split_whitespace().collect();
        let inode = format!("{}1", other[9]);
        other[9] = &inode;
        let other = other.join(" ");
        let two = write("two", &[row, &other]);
        let err = ProcIdentity::new(&two, "/nonexistent", || Ok(vec![std::process::id()]))
            .identify_now(peer, local)
            .unwrap_err();
        assert!(err.reason.contains("several sockets"), "{err}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn refuses_unknown_sockets_and_foreign_owners() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let local = listener.local_addr().unwrap();
        for id in [own(), own_by_netlink()] {
            let err = id.identify_now("127.0.0.1:1".parse().unwrap(), local).unwrap_err();
            assert!(err.reason.contains("no socket"), "{err}");
        }
        let _client = std::net::TcpStream::connect(local).unwrap();
        let (_server, peer) = listener.accept().unwrap();
        let none = ProcIdentity::new("/proc/self/net/tcp", "/proc/self/net/tcp6", || Ok(vec![]));
        let err = none.identify_now(peer, local).unwrap_err();
        assert!(err.reason.contains("no sandbox process"), "{err}");
        let broken = ProcIdentity::new("/nonexistent/tcp", "/nonexistent/tcp6", || Ok(vec![std::process::id()]));
        assert!(broken.identify_now(peer, local).is_err());
    }

    /// A descriptor that cannot be read may be the socket, so it refuses, never skips: the
    /// scan reads a `/proc` laid out by hand, where pid 7's descriptor 4 is not a link.
    #[test]
    fn a_descriptor_that_cannot_be_read_refuses() {
        let root = std::env::temp_dir().join(format!("identity-unreadable-{}", std::process::id()));
        let fd = root.join("7/fd");
        std::fs::create_dir_all(&fd).unwrap();
        std::os::unix::fs::symlink("socket:[99]", fd.join("3")).unwrap();
        let id = ProcIdentity { proc_root: root.clone(), ..own() };
        let candidates: HashSet<u32> = [7, 8].into();
        // Pid 8 exited (no directory): it holds nothing. Pid 7 holds 99 on descriptor 3.
        assert_eq!(id.holders(99, &candidates).unwrap(), vec![(7, vec![3])]);
        std::fs::write(fd.join("4"), "").unwrap();
        let err = id.holders(99, &candidates).unwrap_err();
        assert!(err.contains("descriptor 4 of 7"), "{err}");
        std::fs::remove_dir_all(&root).unwrap();
    }
}
