//! The sandbox's init: process 1 of its PID namespace, in its own mount, network, IPC and UTS
//! namespaces, still root there. It gives the sandbox a fresh /proc, a private /tmp, a
//! loopback-only network with the proxy's listener on it, then starts the main command
//! under the sandbox's uid, Landlock and seccomp, reaps orphans, forwards TERM, and reports
//! the main command's exit. When it exits the kernel kills everything left in the namespace.

use std::ffi::CString;
use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddrV4, TcpListener};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};

use nix::mount::{MsFlags, mount};
use nix::sys::signal::{SigSet, Signal, kill};
use nix::sys::wait::{WaitPidFlag, WaitStatus, waitpid};
use nix::unistd::{ForkResult, Pid, fork};
use openshell_isolation::filesystem::Prepared;
use openshell_isolation::{IsolationError, privileges, seccomp};

use crate::protocol::{self, Spec, ToSupervisor};

/// The descriptor the supervisor hands its end of the socket pair on.
pub const CHANNEL_FD: i32 = 3;

/// Entry point of `openshell-supervisor __init`; never returns.
pub fn main() -> ! {
    // SAFETY: the supervisor placed our end of the socket pair here before exec.
    let channel = unsafe { OwnedFd::from_raw_fd(CHANNEL_FD) };
    let code = match run(channel.as_fd()) {
        Ok(()) => 0,
        Err(reason) => {
            let _ = protocol::send(channel.as_fd(), &ToSupervisor::Failed { reason }, None);
            1
        }
    };
    std::process::exit(code)
}

fn run(channel: BorrowedFd<'_>) -> Result<(), String> {
    if std::process::id() != 1 {
        return Err("init must be process 1 of a new PID namespace".into());
    }
    let (spec, _): (Spec, _) = protocol::recv(channel).map_err(|e| format!("reading the sandbox spec: {e}"))?;
    let listener = namespaces(&spec).map_err(|e| e.to_string())?;
    protocol::send(channel, &ToSupervisor::Listening, Some(listener.as_raw_fd()))
        .map_err(|e| format!("handing the proxy listener to the supervisor: {e}"))?;
    drop(listener);

    let prepared = spec.fs.prepare().map_err(|e| e.to_string())?;
    let filters = seccomp::agent_filters().map_err(|e| e.to_string())?;
    let mut signals = SigSet::empty();
    for s in [Signal::SIGCHLD, Signal::SIGTERM, Signal::SIGINT, Signal::SIGHUP] {
        signals.add(s);
    }
    signals.thread_block().map_err(|e| format!("blocking signals: {e}"))?;
    let (report_r, report_w) =
        nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).map_err(|e| format!("report pipe: {e}"))?;

    // SAFETY: this process is single-threaded, so the child may do anything before exec.
    let main_pid = match unsafe { fork() }.map_err(|e| format!("fork: {e}"))? {
        ForkResult::Child => {
            drop(report_r);
            let reason = agent(&spec, prepared, &filters, &signals, &report_w);
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
    let started = started.ok_or("the main command did not start")?;
    let _ = protocol::send(channel, &started, None);

    loop {
        match signals.wait().map_err(|e| format!("waiting for signals: {e}"))? {
            Signal::SIGCHLD => {
                // Reap every exited process: orphans of the sandbox land here.
                while let Ok(status) = waitpid(None, Some(WaitPidFlag::WNOHANG)) {
                    let code = match status {
                        WaitStatus::StillAlive => break,
                        WaitStatus::Exited(pid, code) if pid == main_pid => code,
                        WaitStatus::Signaled(pid, sig, _) if pid == main_pid => 128 + sig as i32,
                        _ => continue,
                    };
                    let _ = protocol::send(channel, &ToSupervisor::Exited { code }, None);
                    return Ok(());
                }
            }
            // Every process of the sandbox gets the signal; we stay to report the exit.
            _ => {
                let _ = kill(Pid::from_raw(-1), Signal::SIGTERM);
            }
        }
    }
}

/// The sandbox's own view: private mounts, a /proc of this PID namespace, a private /tmp,
/// a host name, loopback up and the proxy's listener on it.
fn namespaces(spec: &Spec) -> Result<TcpListener, IsolationError> {
    let err = |what: &str, e: nix::Error| IsolationError(format!("{what}: {e}"));
    let none: Option<&str> = None;
    // Nothing mounted here propagates back to the host.
    mount(none, "/", none, MsFlags::MS_REC | MsFlags::MS_PRIVATE, none).map_err(|e| err("making / private", e))?;
    let hidden = MsFlags::MS_NOSUID | MsFlags::MS_NODEV | MsFlags::MS_NOEXEC;
    mount(Some("proc"), "/proc", Some("proc"), hidden, none).map_err(|e| err("mounting /proc", e))?;
    // The runtime's own paths (the workdir, the CA bundle) may lie under a folder that gets a
    // private tmpfs: hold them open now and bind them back at the same path afterwards.
    let keep: Vec<(std::path::PathBuf, OwnedFd)> = std::iter::once(&spec.workdir)
        .chain(spec.fs.runtime_read.iter())
        .map(|p| {
            nix::fcntl::open(p, nix::fcntl::OFlag::O_PATH | nix::fcntl::OFlag::O_CLOEXEC, nix::sys::stat::Mode::empty())
                .map(|fd| (p.clone(), fd))
                .map_err(|e| err(&p.display().to_string(), e))
        })
        .collect::<Result<_, _>>()?;
    let tmp_opts = format!("size={},mode=1777", spec.tmp_bytes);
    for dir in ["/tmp", "/dev/shm"] {
        if !std::path::Path::new(dir).is_dir() {
            continue;
        }
        mount(Some("tmpfs"), dir, Some("tmpfs"), MsFlags::MS_NOSUID | MsFlags::MS_NODEV, Some(tmp_opts.as_str()))
            .map_err(|e| err(&format!("mounting a private {dir}"), e))?;
        for (path, fd) in keep.iter().filter(|(p, _)| p.starts_with(dir)) {
            let is_dir = path.is_dir()
                || std::fs::metadata(format!("/proc/self/fd/{}", fd.as_raw_fd())).is_ok_and(|m| m.is_dir());
            if is_dir {
                std::fs::create_dir_all(path)
            } else {
                path.parent().map(std::fs::create_dir_all).unwrap_or(Ok(())).and_then(|_| std::fs::write(path, b""))
            }
            .map_err(|e| IsolationError(format!("{}: {e}", path.display())))?;
            let source = format!("/proc/self/fd/{}", fd.as_raw_fd());
            mount(Some(source.as_str()), path, none, MsFlags::MS_BIND, none)
                .map_err(|e| err(&format!("binding {} into the private {dir}", path.display()), e))?;
        }
    }
    nix::unistd::sethostname(&spec.hostname).map_err(|e| err("sethostname", e))?;
    loopback_up()?;
    TcpListener::bind(SocketAddrV4::new(Ipv4Addr::LOCALHOST, spec.proxy_port))
        .map_err(|e| IsolationError(format!("binding the proxy inside the sandbox: {e}")))
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
) -> String {
    let step = || -> Result<std::convert::Infallible, String> {
        nix::unistd::setsid().map_err(|e| format!("setsid: {e}"))?;
        signals.thread_unblock().map_err(|e| format!("unblocking signals: {e}"))?;
        nix::sys::prctl::set_pdeathsig(Signal::SIGKILL).map_err(|e| format!("pdeathsig: {e}"))?;
        // Standard input is nothing: the supervisor's was the credential pipe.
        let null = std::fs::File::open("/dev/null").map_err(|e| format!("/dev/null: {e}"))?;
        nix::unistd::dup2_stdin(null).map_err(|e| format!("stdin: {e}"))?;
        std::env::set_current_dir(&spec.workdir).map_err(|e| format!("workdir {}: {e}", spec.workdir.display()))?;
        let skipped = prepared.skipped.clone();
        privileges::drop_to(spec.uid, spec.gid).map_err(|e| e.to_string())?;
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
        Err(format!("cannot start {}: {e}", spec.command[0]))
    };
    match step() {
        Ok(never) => match never {},
        Err(reason) => reason,
    }
}
