//! The sandbox's init: process 1 of its PID namespace, in its own mount, network, IPC and UTS
//! namespaces (and user namespace, for a non-root gateway), still root there. It gives the sandbox a fresh /proc, a private /tmp, a
//! loopback-only network with the proxy's listener on it, then starts the main command
//! under the sandbox's uid, Landlock and seccomp, reaps orphans, forwards TERM, and reports
//! the main command's exit. When it exits the kernel kills everything left in the namespace.

use std::collections::HashMap;
use std::ffi::CString;
use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddrV4, TcpListener};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};

use nix::mount::{MsFlags, mount};
use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
use nix::sys::signal::{SigSet, Signal, kill};
use nix::sys::signalfd::{SfdFlags, SignalFd};
use nix::sys::wait::{WaitPidFlag, WaitStatus, waitpid};
use nix::unistd::{ForkResult, Pid, fork};
use openshell_isolation::filesystem::Prepared;
use openshell_isolation::{IsolationError, privileges, seccomp};

use crate::identity;
use crate::protocol::{self, Disk, Spec, ToInit, ToSupervisor};

/// The descriptor the supervisor hands its end of the socket pair on.
pub const CHANNEL_FD: i32 = 3;

/// Entry point of `openshell-supervisor __init`; never returns.
pub fn main() -> ! {
    // SAFETY: the supervisor placed our end of the socket pair here before exec.
    let channel = unsafe { OwnedFd::from_raw_fd(CHANNEL_FD) };
    let code = match run(channel.as_fd()) {
        Ok(()) => 0,
        Err(InitError::Setup(reason)) => {
            let _ = protocol::send(channel.as_fd(), &ToSupervisor::Failed { reason }, &[]);
            1
        }
        Err(InitError::Command(reason)) => {
            let _ = protocol::send(channel.as_fd(), &ToSupervisor::CommandFailed { reason }, &[]);
            1
        }
    };
    std::process::exit(code)
}

/// Entry point of `openshell-supervisor __init-userns`: the init of a non-root gateway's
/// sandbox, cloned into a new user namespace that has no maps yet, so with no capability
/// since its exec. It asks the supervisor to write the maps, then execs itself as `__init`:
/// root of its namespace by then, the exec gives it that namespace's capabilities (and no
/// other). Never returns.
pub fn remap() -> ! {
    // SAFETY: the supervisor placed our end of the socket pair here before exec; it stays
    // open across the exec below (not close-on-exec).
    let channel = unsafe { OwnedFd::from_raw_fd(CHANNEL_FD) };
    let step = || -> Result<std::convert::Infallible, String> {
        if std::process::id() != 1 {
            return Err("init must be process 1 of a new PID namespace".into());
        }
        protocol::send(channel.as_fd(), &ToSupervisor::AwaitingMap, &[])
            .map_err(|e| format!("asking for the user namespace's maps: {e}"))?;
        match protocol::recv::<ToInit>(channel.as_fd()) {
            Ok((ToInit::Mapped, _)) => {}
            Ok(_) => return Err("the supervisor sent something else than the maps".into()),
            Err(e) => return Err(format!("waiting for the user namespace's maps: {e}")),
        }
        if !nix::unistd::getuid().is_root() || nix::unistd::getgid().as_raw() != 0 {
            return Err("the user namespace's maps do not make the init its root".into());
        }
        let exe = CString::new("/proc/self/exe").expect("static");
        let argv = [CString::new("openshell-supervisor").expect("static"), CString::new("__init").expect("static")];
        let env: [CString; 0] = [];
        let e = nix::unistd::execve(&exe, &argv, &env).unwrap_err();
        Err(format!("re-executing the init as its namespace's root: {e}"))
    };
    let reason = match step() {
        Ok(never) => match never {},
        Err(reason) => reason,
    };
    let _ = protocol::send(channel.as_fd(), &ToSupervisor::Failed { reason }, &[]);
    std::process::exit(1)
}

/// Why the init gave up: its own set-up, or the main command that would not start.
enum InitError {
    Setup(String),
    Command(String),
}

impl From<String> for InitError {
    fn from(reason: String) -> InitError {
        InitError::Setup(reason)
    }
}

fn run(channel: BorrowedFd<'_>) -> Result<(), InitError> {
    if std::process::id() != 1 {
        return Err(InitError::Setup("init must be process 1 of a new PID namespace".into()));
    }
    // The channel to the supervisor stays the init's: no agent or exec inherits it.
    nix::fcntl::fcntl(channel, nix::fcntl::FcntlArg::F_SETFD(nix::fcntl::FdFlag::FD_CLOEXEC))
        .map_err(|e| format!("closing the channel on exec: {e}"))?;
    // An exec that gained capabilities (the second of a non-root gateway's init) cleared it.
    nix::sys::prctl::set_pdeathsig(Signal::SIGKILL).map_err(|e| format!("pdeathsig: {e}"))?;
    // Nothing the init starts may gain a capability by exec; done while no spec is here yet.
    privileges::drop_bounding_set().map_err(|e| e.to_string())?;
    // So is what of the sandbox's view needs no spec (a pooled init's before its claim).
    let diag = unshared_view().map_err(|e| e.to_string())?;
    let (spec, attached): (Spec, _) = protocol::recv(channel).map_err(|e| format!("reading the sandbox spec: {e}"))?;
    // The supervisor's log comes first: the init's output and the main command's (an init
    // cloned ahead of its sandbox has /dev/null until now).
    let mut attached = attached.into_iter();
    let log = attached.next().ok_or_else(|| "the spec came without the sandbox's log".to_string())?;
    for fd in [1, 2] {
        // SAFETY: dup2 onto the standard descriptors, which this process owns.
        if unsafe { libc::dup2(log.as_raw_fd(), fd) } < 0 {
            return Err(format!("the sandbox's log on {fd}: {}", std::io::Error::last_os_error()).into());
        }
    }
    drop(log);
    // The disk the driver mounted comes next, as a detached tree (crates/supervisor/src/disk_tree.rs).
    let disk = attached.next();
    let listener = namespaces(&spec, disk).map_err(|e| e.to_string())?;
    let identity = identity::in_init(diag).map_err(|e| format!("the proxy's caller identity: {e}"))?;
    let (identity_sock, supervisor_end) = identity::pair().map_err(|e| format!("identity socket pair: {e}"))?;
    protocol::send(channel, &ToSupervisor::Listening, &[listener.as_raw_fd(), supervisor_end.as_raw_fd()])
        .map_err(|e| format!("handing the proxy listener to the supervisor: {e}"))?;
    drop((listener, supervisor_end));

    let filters = seccomp::agent_filters().map_err(|e| e.to_string())?;
    let mut signals = SigSet::empty();
    for s in [Signal::SIGCHLD, Signal::SIGTERM, Signal::SIGINT, Signal::SIGHUP] {
        signals.add(s);
    }
    signals.thread_block().map_err(|e| format!("blocking signals: {e}"))?;
    let stdio = [0, 1, 2].map(|fd| unsafe { BorrowedFd::borrow_raw(fd) }.try_clone_to_owned());
    let stdio = stdio.into_iter().collect::<Result<Vec<_>, _>>().map_err(|e| format!("stdio: {e}"))?;
    // The filesystem rules are the sandbox's set-up (a path escaping its boundary, say); what
    // fails after the fork is the main command's own.
    let prepared = spec.fs.prepare().map_err(|e| e.to_string())?;
    let (main_pid, started) = start(&spec, prepared, &filters, &signals, None, &stdio).map_err(InitError::Command)?;
    drop(stdio);
    let ToSupervisor::Started { landlock, skipped } = started else {
        return Err(InitError::Command("it reported no start".into()));
    };
    let _ = protocol::send(channel, &ToSupervisor::Started { landlock, skipped }, &[]);

    let sigfd = SignalFd::with_flags(&signals, SfdFlags::SFD_CLOEXEC).map_err(|e| format!("signalfd: {e}"))?;
    let mut execs: HashMap<Pid, u64> = HashMap::new();
    loop {
        let mut fds = [
            PollFd::new(sigfd.as_fd(), PollFlags::POLLIN),
            PollFd::new(channel, PollFlags::POLLIN),
            PollFd::new(identity_sock.as_fd(), PollFlags::POLLIN),
        ];
        match poll(&mut fds, PollTimeout::NONE) {
            Ok(_) => {}
            Err(nix::errno::Errno::EINTR) => continue,
            Err(e) => return Err(InitError::Setup(format!("poll: {e}"))),
        }
        let (signal_ready, channel_ready) = (ready(&fds[0]), ready(&fds[1]));
        if fds[2].revents().is_some_and(|r| r.contains(PollFlags::POLLIN)) {
            identity::answer(&identity, identity_sock.as_fd());
        }
        if signal_ready {
            let Ok(Some(info)) = sigfd.read_signal() else { continue };
            if info.ssi_signo as i32 != Signal::SIGCHLD as i32 {
                // Every process of the sandbox gets the signal; we stay to report the exit.
                let _ = kill(Pid::from_raw(-1), Signal::SIGTERM);
                continue;
            }
            // Reap every exited process: orphans of the sandbox land here too.
            while let Ok(status) = waitpid(None, Some(WaitPidFlag::WNOHANG)) {
                let (pid, code) = match status {
                    WaitStatus::StillAlive => break,
                    WaitStatus::Exited(pid, code) => (pid, code),
                    WaitStatus::Signaled(pid, sig, _) => (pid, 128 + sig as i32),
                    _ => continue,
                };
                if pid == main_pid {
                    let _ = protocol::send(channel, &ToSupervisor::Exited { code }, &[]);
                    return Ok(());
                }
                if let Some(id) = execs.remove(&pid) {
                    let _ = protocol::send(channel, &ToSupervisor::ExecExited { id, code, error: None }, &[]);
                }
            }
        }
        if channel_ready {
            match protocol::recv::<ToInit>(channel) {
                Ok((ToInit::Exec { id, command, env, workdir }, fds)) => {
                    let mut exec_spec = Spec { command, ..spec.clone() };
                    exec_spec.env.extend(env);
                    if let Some(w) = workdir {
                        exec_spec.workdir = w;
                    }
                    match fds.len() {
                        3 => match exec_spec
                            .fs
                            .prepare()
                            .map_err(|e| e.to_string())
                            .and_then(|p| start(&exec_spec, p, &filters, &signals, Some(id), &fds))
                        {
                            Ok((pid, _)) => {
                                execs.insert(pid, id);
                            }
                            Err(error) => {
                                let msg = ToSupervisor::ExecExited { id, code: 127, error: Some(error) };
                                let _ = protocol::send(channel, &msg, &[]);
                            }
                        },
                        n => {
                            let msg = ToSupervisor::ExecExited {
                                id,
                                code: 127,
                                error: Some(format!("{n} stdio descriptors")),
                            };
                            let _ = protocol::send(channel, &msg, &[]);
                        }
                    }
                }
                Ok((ToInit::Open { path, max_bytes, .. }, mut fds)) if fds.len() == 1 => {
                    crate::files::open_as_agent(&spec, fds.remove(0), &path, max_bytes);
                }
                Ok((ToInit::Open { .. }, _)) => tracing_free_log("a file request without its reply socket"),
                Ok((ToInit::Mapped, _)) => tracing_free_log("maps announced after the start"),
                Ok((ToInit::Kill { id }, _)) => {
                    if let Some((pid, _)) = execs.iter().find(|(_, e)| **e == id) {
                        let _ = kill(Pid::from_raw(-pid.as_raw()), Signal::SIGKILL);
                    }
                }
                // The supervisor is gone: so is the sandbox (our exit ends the namespace).
                Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => {
                    return Err(InitError::Setup("the supervisor went away".into()));
                }
                Err(e) => tracing_free_log(&format!("a message from the supervisor: {e}")),
            }
        }
    }
}

fn ready(fd: &PollFd<'_>) -> bool {
    fd.revents().is_some_and(|r| r.intersects(PollFlags::POLLIN | PollFlags::POLLHUP | PollFlags::POLLERR))
}

/// The init has no logger; its stderr is the sandbox's log.
fn tracing_free_log(message: &str) {
    eprintln!("openshell-supervisor init: {message}");
}

/// Forks a process that becomes the agent and execs `spec.command` on `stdio`; returns its
/// pid once the exec happened, and what it reported (Landlock) before it.
fn start(
    spec: &Spec,
    prepared: Prepared,
    filters: &[seccompiler::BpfProgram],
    signals: &SigSet,
    exec: Option<u64>,
    stdio: &[OwnedFd],
) -> Result<(Pid, ToSupervisor), String> {
    let (report_r, report_w) =
        nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).map_err(|e| format!("report pipe: {e}"))?;
    // SAFETY: this process is single-threaded, so the child may do anything before exec.
    let pid = match unsafe { fork() }.map_err(|e| format!("fork: {e}"))? {
        ForkResult::Child => {
            drop(report_r);
            let reason = agent(spec, prepared, filters, signals, &report_w, exec.is_some().then_some(stdio));
            let _ = write_line(&report_w, &ToSupervisor::Failed { reason });
            // SAFETY: leave at once, without running the parent's exit handlers.
            unsafe { libc::_exit(127) }
        }
        ForkResult::Parent { child } => child,
    };
    drop(report_w);
    // The pipe closes at exec: what the child wrote before is its report.
    let mut text = String::new();
    let _ = std::fs::File::from(report_r).take(protocol::MAX_MESSAGE as u64).read_to_string(&mut text);
    let mut started = None;
    for line in text.lines() {
        match serde_json::from_str::<ToSupervisor>(line) {
            Ok(ToSupervisor::Failed { reason }) => return Err(reason),
            Ok(m @ ToSupervisor::Started { .. }) => started = Some(m),
            _ => {}
        }
    }
    Ok((pid, started.ok_or("the command did not start")?))
}

/// What of the sandbox's own view is the same for every sandbox: mounts that propagate
/// nowhere (a mount made on the host later reaches it only as the disk's detached tree,
/// disk_tree.rs), a /proc of this PID namespace, loopback up, and a sock_diag socket of this
/// network namespace for the proxy (returned).
fn unshared_view() -> Result<OwnedFd, IsolationError> {
    let err = |what: &str, e: nix::Error| IsolationError(format!("{what}: {e}"));
    let none: Option<&str> = None;
    // Nothing mounted here propagates back to the host.
    mount(none, "/", none, MsFlags::MS_REC | MsFlags::MS_PRIVATE, none).map_err(|e| err("making / private", e))?;
    let hidden = MsFlags::MS_NOSUID | MsFlags::MS_NODEV | MsFlags::MS_NOEXEC;
    mount(Some("proc"), "/proc", Some("proc"), hidden, none).map_err(|e| err("mounting /proc", e))?;
    loopback_up()?;
    use nix::sys::socket::{AddressFamily, SockFlag, SockProtocol, SockType, socket};
    socket(AddressFamily::Netlink, SockType::Raw, SockFlag::SOCK_CLOEXEC, SockProtocol::NetlinkSockDiag)
        .map_err(|e| err("a sock_diag socket for the proxy", e))
}

/// The rest of the sandbox's own view (after [`unshared_view`]): its own filesystem (the
/// driver's mounted image, or a tmpfs made here) with its working directory its uid's and its
/// /tmp, private mounts, a host name, and the proxy's listener on loopback.
fn namespaces(spec: &Spec, disk: Option<OwnedFd>) -> Result<TcpListener, IsolationError> {
    let err = |what: &str, e: nix::Error| IsolationError(format!("{what}: {e}"));
    let none: Option<&str> = None;
    let sandbox_dir = spec.workdir.parent().unwrap_or(&spec.workdir).to_path_buf();
    // The driver's disk, there before anything of the sandbox is: never its host folder below.
    if spec.disk == Disk::Mounted {
        crate::disk_tree::attach(disk.as_ref(), &sandbox_dir)
            .and_then(|()| std::env::set_current_dir(&sandbox_dir))
            .map_err(|e| IsolationError(format!("the sandbox's disk at {}: {e}", sandbox_dir.display())))?;
    }
    // The runtime's own paths (the workdir, the CA bundle) may lie under a folder that gets a
    // filesystem of its own here: hold them open now and bind them back at the same path
    // afterwards. A workdir on a tmpfs made here is a new one.
    let fresh_workdir = matches!(spec.disk, Disk::Tmpfs(_));
    let keep: Vec<(std::path::PathBuf, OwnedFd)> = std::iter::once(&spec.workdir)
        .filter(|_| !fresh_workdir)
        .chain(spec.fs.runtime_read.iter())
        .map(|p| {
            nix::fcntl::open(p, nix::fcntl::OFlag::O_PATH | nix::fcntl::OFlag::O_CLOEXEC, nix::sys::stat::Mode::empty())
                .map(|fd| (p.clone(), fd))
                .map_err(|e| err(&p.display().to_string(), e))
        })
        .collect::<Result<_, _>>()?;
    if let Disk::Tmpfs(bytes) = spec.disk {
        let opts = format!("size={bytes},mode=0711");
        mount(Some("tmpfs"), &sandbox_dir, Some("tmpfs"), MsFlags::MS_NOSUID | MsFlags::MS_NODEV, Some(opts.as_str()))
            .map_err(|e| err(&format!("mounting the sandbox's disk (a tmpfs) at {}", sandbox_dir.display()), e))?;
        rebind(&keep, &sandbox_dir)?;
        for (dir, mode) in [(spec.workdir.clone(), 0o700), (sandbox_dir.join("tmp"), 0o1777)] {
            std::fs::create_dir(&dir)
                .and_then(|()| std::fs::set_permissions(&dir, std::os::unix::fs::PermissionsExt::from_mode(mode)))
                .map_err(|e| IsolationError(format!("{}: {e}", dir.display())))?;
        }
    }
    // A root driver made it the agent's already; a non-root driver cannot, its init can (the
    // folder's owner, the gateway's user, is this namespace's root). Not through a symlink.
    if spec.chown_workdir || fresh_workdir {
        std::os::unix::fs::lchown(&spec.workdir, Some(spec.uid), Some(spec.gid))
            .map_err(|e| IsolationError(format!("giving the workdir {} to the agent: {e}", spec.workdir.display())))?;
    }
    // /tmp is the sandbox's own `tmp/`, bounded with its workdir (a private tmpfs when the
    // sandbox has no filesystem of its own); /dev/shm a private tmpfs.
    let tmp_opts = format!("size={},mode=1777", spec.tmp_bytes);
    // A policy path beneath these names nothing at start: the gateway warns at create.
    for &dir in openshell_policy::baseline::PRIVATE_MOUNTS {
        if !std::path::Path::new(dir).is_dir() {
            continue;
        }
        if dir == "/tmp" && spec.disk != Disk::Unbounded {
            let own = sandbox_dir.join("tmp");
            mount(Some(&own), dir, none, MsFlags::MS_BIND, none)
                .map_err(|e| err(&format!("binding {} at /tmp", own.display()), e))?;
        } else {
            mount(Some("tmpfs"), dir, Some("tmpfs"), MsFlags::MS_NOSUID | MsFlags::MS_NODEV, Some(tmp_opts.as_str()))
                .map_err(|e| err(&format!("mounting a private {dir}"), e))?;
        }
        rebind(&keep, std::path::Path::new(dir))?;
    }
    nix::unistd::sethostname(&spec.hostname).map_err(|e| err("sethostname", e))?;
    TcpListener::bind(SocketAddrV4::new(Ipv4Addr::LOCALHOST, spec.proxy_port))
        .map_err(|e| IsolationError(format!("binding the proxy inside the sandbox: {e}")))
}

/// Binds each kept path beneath `under` (just covered by a new mount) back at its path.
fn rebind(keep: &[(std::path::PathBuf, OwnedFd)], under: &std::path::Path) -> Result<(), IsolationError> {
    for (path, fd) in keep.iter().filter(|(p, _)| p.starts_with(under) && p != under) {
        let is_dir =
            path.is_dir() || std::fs::metadata(format!("/proc/self/fd/{}", fd.as_raw_fd())).is_ok_and(|m| m.is_dir());
        if is_dir {
            std::fs::create_dir_all(path)
        } else {
            path.parent().map(std::fs::create_dir_all).unwrap_or(Ok(())).and_then(|_| std::fs::write(path, b""))
        }
        .map_err(|e| IsolationError(format!("{}: {e}", path.display())))?;
        let source = format!("/proc/self/fd/{}", fd.as_raw_fd());
        mount(Some(source.as_str()), path, None::<&str>, MsFlags::MS_BIND, None::<&str>)
            .map_err(|e| IsolationError(format!("binding {} back into {}: {e}", path.display(), under.display())))?;
    }
    Ok(())
}

fn loopback_up() -> Result<(), IsolationError> {
    let fail = |e: std::io::Error| IsolationError(format!("bringing up loopback: {e}"));
    let sock = std::net::UdpSocket::bind("0.0.0.0:0").map_err(fail)?;
    // SAFETY: ifreq is plain data; the ioctls read and write only it.
    unsafe {
        let mut req: libc::ifreq = std::mem::zeroed();
        for (d, s) in req.ifr_name.iter_mut().zip(b"lo\0") {
            *d = *s as libc::c_char;
        }
        if libc::ioctl(sock.as_raw_fd(), libc::SIOCGIFFLAGS, &mut req) < 0 {
            return Err(fail(std::io::Error::last_os_error()));
        }
        req.ifr_ifru.ifru_flags |= libc::IFF_UP as libc::c_short;
        if libc::ioctl(sock.as_raw_fd(), libc::SIOCSIFFLAGS, &req) < 0 {
            return Err(fail(std::io::Error::last_os_error()));
        }
    }
    Ok(())
}

fn write_line(fd: &OwnedFd, msg: &ToSupervisor) -> std::io::Result<()> {
    let mut line = serde_json::to_vec(msg).map_err(std::io::Error::other)?;
    line.push(b'\n');
    std::fs::File::from(fd.try_clone()?).write_all(&line)
}

/// In the forked child: become the agent and exec the main command. Returns only on failure.
fn agent(
    spec: &Spec,
    prepared: Prepared,
    filters: &[seccompiler::BpfProgram],
    signals: &SigSet,
    report: &OwnedFd,
    stdio: Option<&[OwnedFd]>,
) -> String {
    let step = || -> Result<std::convert::Infallible, String> {
        nix::unistd::setsid().map_err(|e| format!("setsid: {e}"))?;
        signals.thread_unblock().map_err(|e| format!("unblocking signals: {e}"))?;
        nix::sys::prctl::set_pdeathsig(Signal::SIGKILL).map_err(|e| format!("pdeathsig: {e}"))?;
        match stdio {
            // An exec runs on the pipes its caller streams through.
            Some([stdin, stdout, stderr]) => {
                nix::unistd::dup2_stdin(stdin).map_err(|e| format!("stdin: {e}"))?;
                nix::unistd::dup2_stdout(stdout).map_err(|e| format!("stdout: {e}"))?;
                nix::unistd::dup2_stderr(stderr).map_err(|e| format!("stderr: {e}"))?;
            }
            // The main command reads nothing: the supervisor's stdin was the credential pipe.
            _ => {
                let null = std::fs::File::open("/dev/null").map_err(|e| format!("/dev/null: {e}"))?;
                nix::unistd::dup2_stdin(null).map_err(|e| format!("stdin: {e}"))?;
            }
        }
        let skipped = prepared.skipped.clone();
        if let Some(n) = spec.nproc {
            let limit = libc::rlimit { rlim_cur: n, rlim_max: n };
            // SAFETY: setrlimit reads the struct we pass.
            if unsafe { libc::setrlimit(libc::RLIMIT_NPROC, &limit) } != 0 {
                return Err(format!("RLIMIT_NPROC: {}", std::io::Error::last_os_error()));
            }
        }
        privileges::drop_to(spec.uid, spec.gid).map_err(|e| e.to_string())?;
        // As the agent, not as root: a working directory it could not enter is refused.
        std::env::set_current_dir(&spec.workdir).map_err(|e| format!("workdir {}: {e}", spec.workdir.display()))?;
        let landlock = prepared.restrict_self().map_err(|e| e.to_string())?;
        write_line(report, &ToSupervisor::Started { landlock, skipped }).map_err(|e| format!("report: {e}"))?;
        seccomp::apply(filters).map_err(|e| e.to_string())?;
        let cstr = |s: &str| CString::new(s).map_err(|_| format!("{s:?} contains a NUL byte"));
        let argv = spec.command.iter().map(|a| cstr(a)).collect::<Result<Vec<_>, _>>()?;
        let env = spec.env.iter().map(|(k, v)| cstr(&format!("{k}={v}"))).collect::<Result<Vec<_>, _>>()?;
        let program = argv.first().ok_or("empty command")?;
        // execvpe searches the PATH of this process: make it the agent's.
        if let Some((_, path)) = spec.env.iter().find(|(k, _)| k == "PATH") {
            // SAFETY: single-threaded child before exec.
            unsafe { std::env::set_var("PATH", path) };
        }
        let e = nix::unistd::execvpe(program, &argv, &env).unwrap_err();
        Err(exec_failure(&spec.command[0], spec.env.iter().find(|(k, _)| k == "PATH").map(|(_, v)| v.as_str()), e))
    };
    match step() {
        Ok(never) => match never {},
        Err(reason) => reason,
    }
}

/// Why `program` did not start, naming the file the kernel refused (searched in `path` as
/// execvpe does): "EACCES on /usr/bin/sleep (...)". Runs as the agent under its Landlock, which
/// does not hide a file's existence from stat.
fn exec_failure(program: &str, path: Option<&str>, e: nix::errno::Errno) -> String {
    let file = if program.contains('/') {
        Some(program.to_string())
    } else {
        path.unwrap_or_default()
            .split(':')
            .filter(|d| !d.is_empty())
            .map(|d| format!("{}/{program}", d.trim_end_matches('/')))
            .find(|f| std::fs::metadata(f).is_ok_and(|m| m.is_file()))
    };
    let why = match e {
        nix::errno::Errno::EACCES => {
            "permission denied: the policy's filesystem_policy must let the sandbox read it and what it loads"
        }
        e => e.desc(),
    };
    match file {
        Some(f) => format!("{e:?} on {f} ({why})"),
        None => format!("{e:?}: {program} is not in PATH ({})", path.unwrap_or_default()),
    }
}
