//! The supervisor's side of the sandbox: its cgroup, the init started in new namespaces, and
//! the channel over which the init reports.

use std::ffi::CString;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::time::Duration;

use nix::sched::CloneFlags;
use nix::sys::signal::{Signal, kill};
use nix::sys::socket::{AddressFamily, SockFlag, SockType, socketpair};
use nix::sys::wait::{WaitStatus, waitpid};
use nix::unistd::Pid;
use openshell_isolation::cgroup::{Limits, SandboxCgroup, SpareCgroup};
use openshell_isolation::userns::IdMap;

use crate::init::CHANNEL_FD;
use crate::protocol::{self, Spec, ToInit, ToSupervisor};

/// A started sandbox: its init, cgroup and report channel.
pub struct Sandbox {
    pub init: Pid,
    pub cgroup: SandboxCgroup,
    channel: OwnedFd,
    /// The proxy's listener, inside the sandbox's network namespace.
    pub listener: Option<std::net::TcpListener>,
    /// Where the init answers who opened a proxy connection.
    pub identity: Option<OwnedFd>,
    pub started: ToSupervisor,
}

/// Why a sandbox did not start.
#[derive(Debug)]
pub enum StartError {
    /// Its isolation could not be set up.
    Setup(String),
    /// It was set up, but its main command could not start (the init's reason).
    Command(String),
}

impl From<String> for StartError {
    fn from(reason: String) -> StartError {
        StartError::Setup(reason)
    }
}

/// How long the init may take to set up before the start is refused.
const SETUP_TIMEOUT: Duration = Duration::from_secs(20);

/// A sandbox being started: its cgroup made, its init cloned into new namespaces (and
/// re-executing itself), and moved into the cgroup by a thread of its own (a move may wait
/// for an RCU grace period, milliseconds), all while the supervisor waits for the gateway; a
/// pooled init is in its cgroup already (`SpareCgroup`). Nothing of the sandbox runs yet: the init waits for its spec.
pub struct Starting {
    init: Pid,
    cgroup: SandboxCgroup,
    ours: OwnedFd,
    userns: Option<IdMap>,
    joined: Joined,
}

enum Joined {
    Thread(std::thread::JoinHandle<Result<(), String>>),
    Done(Result<(), String>),
}

impl Sandbox {
    /// Creates the cgroup and starts the init in new PID, mount, network, IPC and UTS
    /// namespaces, joining it to the cgroup in the background; [`Starting::finish`] completes
    /// the start. Any failure leaves nothing running.
    /// With `container_cgroup`, the cgroup is the container's own (see
    /// [`SandboxCgroup::container`]). With `userns` (a non-root gateway), the init also gets
    /// a new user namespace with those ids mapped, and the cgroup is under the subtree
    /// delegated to this user ([`SandboxCgroup::delegated`]).
    /// An init `cloned` ahead (a pooled supervisor's, see pool.rs) is used instead of a new one,
    /// and its cgroup made ahead, `spare`, becomes the sandbox's.
    /// Call it from the main thread: the init's parent-death signal fires when the thread
    /// that cloned it ends.
    pub fn spawn(
        id: uuid::Uuid,
        container_cgroup: bool,
        userns: Option<IdMap>,
        limits: &Limits,
        cloned: Option<(Pid, OwnedFd)>,
        spare: Option<SpareCgroup>,
    ) -> Result<Starting, StartError> {
        let made = match (container_cgroup, userns) {
            (true, _) => SandboxCgroup::container(),
            (false, Some(_)) => SandboxCgroup::delegated(id, nix::unistd::getuid().as_raw()),
            (false, None) => SandboxCgroup::of(id),
        };
        // A cgroup made ahead holds its init already: nothing to join.
        let claimed = spare.map(|s| {
            s.claim(id, limits).inspect_err(|e| {
                tracing::warn!("the cgroup made ahead: {e}; making the sandbox's as a cold start does");
            })
        });
        let (made, ahead) = match claimed {
            Some(Ok(cgroup)) => (Ok(cgroup), true),
            _ => (made.and_then(|cgroup| cgroup.create(limits).map(|()| cgroup)), false),
        };
        let cgroup = match made {
            Ok(cgroup) => cgroup,
            Err(e) => {
                if let Some((init, _)) = cloned {
                    Self::kill_init(init);
                }
                return Err(StartError::Setup(e.to_string()));
            }
        };
        let cloned = match cloned {
            Some(c) => Ok(c),
            None => Self::clone_init(userns),
        };
        let (init, ours) = match cloned {
            Ok(c) => c,
            Err(e) => {
                let _ = cgroup.remove();
                return Err(e);
            }
        };
        let mover = cgroup.clone();
        let joined = match ahead {
            true => Joined::Done(Ok(())),
            false => match std::thread::Builder::new()
                .name("cgroup-join".into())
                .spawn(move || mover.join(init.as_raw()).map_err(|e| e.to_string()))
            {
                Ok(t) => Joined::Thread(t),
                Err(_) => Joined::Done(cgroup.join(init.as_raw()).map_err(|e| e.to_string())),
            },
        };
        Ok(Starting { init, cgroup, ours, userns, joined })
    }

    /// Ends an init that was handed nothing (its start was abandoned).
    pub fn kill_init(init: Pid) {
        let _ = kill(init, Signal::SIGKILL);
        let _ = waitpid(init, None);
    }

    /// Clones the init into new namespaces, where it waits for its spec; returns its pid and
    /// the supervisor's end of its channel.
    pub fn clone_init(userns: Option<IdMap>) -> Result<(Pid, OwnedFd), StartError> {
        let (ours, theirs) = socketpair(AddressFamily::Unix, SockType::Datagram, None, SockFlag::SOCK_CLOEXEC)
            .map_err(|e| format!("socketpair: {e}"))?;
        let exe = CString::new("/proc/self/exe").expect("static");
        let arg0 = CString::new("openshell-supervisor").expect("static");
        // Without root, the init starts with no capability (its namespace has no maps yet):
        // `__init-userns` waits for them and execs `__init` as the namespace's root.
        let arg1 = CString::new(if userns.is_some() { "__init-userns" } else { "__init" }).expect("static");
        let argv = [arg0.as_ptr(), arg1.as_ptr(), std::ptr::null()];
        let envp = [std::ptr::null()];
        let theirs_raw = theirs.as_raw_fd();
        // The init's standard input is /dev/null, not the supervisor's (the driver's socket
        // the credential came through): nothing of that channel enters the sandbox.
        let null = std::fs::File::open("/dev/null").map_err(|e| format!("/dev/null: {e}"))?;
        let null_raw = null.as_raw_fd();
        let mut stack = vec![0u8; 64 * 1024];
        // The child shares this process's memory until its exec, and this thread waits for that
        // (as posix_spawn does): no copy of the page tables, which would also hold the memory
        // map's lock while the gateway's answer is awaited on the other thread.
        let mut flags = CloneFlags::CLONE_VM
            | CloneFlags::CLONE_VFORK
            | CloneFlags::CLONE_NEWPID
            | CloneFlags::CLONE_NEWNS
            | CloneFlags::CLONE_NEWNET
            | CloneFlags::CLONE_NEWIPC
            | CloneFlags::CLONE_NEWUTS;
        if userns.is_some() {
            flags |= CloneFlags::CLONE_NEWUSER;
        }
        // No handler of ours may run in the child while it shares our memory: every signal is
        // blocked across the clone, and the child resets handled ones before it restores the
        // mask for its exec.
        // SAFETY: sigset_t is plain data, filled by sigfillset before use.
        let (all, mut before) = unsafe {
            let mut all: libc::sigset_t = std::mem::zeroed();
            libc::sigfillset(&mut all);
            (all, std::mem::zeroed::<libc::sigset_t>())
        };
        // SAFETY: both sets are valid; this changes only the calling thread's mask.
        unsafe { libc::pthread_sigmask(libc::SIG_SETMASK, &all, &mut before) };
        // SAFETY: the child only makes async-signal-safe calls (sigaction, pthread_sigmask,
        // prctl, dup2, execve, _exit) on values prepared before the clone, which stay alive:
        // this thread is suspended until the child execs or exits. It is cloned from the main
        // thread, whose exit is the supervisor's: the parent-death signal then fires with it.
        let init = unsafe {
            nix::sched::clone(
                Box::new(|| {
                    for sig in 1..65 {
                        let mut old: libc::sigaction = std::mem::zeroed();
                        if libc::sigaction(sig, std::ptr::null(), &mut old) == 0
                            && old.sa_sigaction != libc::SIG_DFL
                            && old.sa_sigaction != libc::SIG_IGN
                        {
                            let mut default: libc::sigaction = std::mem::zeroed();
                            default.sa_sigaction = libc::SIG_DFL;
                            libc::sigaction(sig, &default, std::ptr::null_mut());
                        }
                    }
                    libc::pthread_sigmask(libc::SIG_SETMASK, &before, std::ptr::null_mut());
                    libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong);
                    if libc::dup2(null_raw, 0) < 0 || libc::dup2(theirs_raw, CHANNEL_FD) < 0 {
                        libc::_exit(126);
                    }
                    libc::execve(exe.as_ptr(), argv.as_ptr(), envp.as_ptr());
                    libc::_exit(127)
                }),
                &mut stack,
                flags,
                Some(libc::SIGCHLD),
            )
        };
        // SAFETY: restores this thread's own mask.
        unsafe { libc::pthread_sigmask(libc::SIG_SETMASK, &before, std::ptr::null_mut()) };
        let init = init.map_err(|e| format!("starting the sandbox init in new namespaces: {e}"))?;
        drop((theirs, null));
        Ok((init, ours))
    }
}

impl Starting {
    /// Ends the start: nothing of it is left (the gateway refused the sandbox).
    pub fn abort(self) {
        let _ = kill(self.init, Signal::SIGKILL);
        let _ = waitpid(self.init, None);
        if let Joined::Thread(t) = self.joined {
            let _ = t.join();
        }
        let _ = self.cgroup.remove();
    }

    /// Once the init is in the cgroup, hands it `spec` (and the sandbox's disk as a detached
    /// tree, see disk_tree.rs) and waits until the main command was exec'd. Any failure
    /// leaves nothing running.
    pub fn finish(self, spec: &Spec, disk: Option<OwnedFd>) -> Result<Sandbox, StartError> {
        let Starting { init, cgroup, ours, userns, joined } = self;
        let joined = match joined {
            Joined::Thread(t) => t.join().unwrap_or_else(|_| Err("the cgroup join failed".into())),
            Joined::Done(r) => r,
        };
        // Inside the cgroup before the init reads its spec: nothing of the sandbox runs outside.
        let started =
            joined.map_err(StartError::Setup).and_then(|()| Sandbox::handshake(init, &ours, userns, spec, disk));
        match started {
            Ok((listener, identity, started)) => {
                Ok(Sandbox { init, cgroup, channel: ours, listener, identity, started })
            }
            Err(e) => {
                let _ = kill(init, Signal::SIGKILL);
                let _ = waitpid(init, None);
                let _ = cgroup.remove();
                Err(e)
            }
        }
    }
}

impl Sandbox {
    #[allow(clippy::type_complexity)]
    fn handshake(
        init: Pid,
        ours: &OwnedFd,
        userns: Option<IdMap>,
        spec: &Spec,
        disk: Option<OwnedFd>,
    ) -> Result<(Option<std::net::TcpListener>, Option<OwnedFd>, ToSupervisor), StartError> {
        let fail = |reason: StartError| Err(reason);
        let fail_setup = |reason: String| fail(StartError::Setup(reason));
        let timeout = nix::sys::time::TimeVal::new(SETUP_TIMEOUT.as_secs() as i64, 0);
        let _ = nix::sys::socket::setsockopt(ours, nix::sys::socket::sockopt::ReceiveTimeout, &timeout);
        if let Some(ids) = userns {
            // After its exec (so its /proc files are its own and its memory is not ours).
            match protocol::recv::<ToSupervisor>(ours.as_fd()) {
                Ok((ToSupervisor::AwaitingMap, _)) => {}
                Ok((ToSupervisor::Failed { reason }, _)) => return fail_setup(reason),
                Ok((other, _)) => return fail_setup(format!("the sandbox init sent {other:?} before its maps")),
                Err(e) => return fail_setup(format!("the sandbox init did not ask for its user namespace maps: {e}")),
            }
            if let Err(e) = openshell_isolation::userns::write_maps(init.as_raw(), ids) {
                return fail_setup(format!("mapping the sandbox's user namespace: {e}"));
            }
            if let Err(e) = protocol::send(ours.as_fd(), &ToInit::Mapped, &[]) {
                return fail_setup(format!("telling the sandbox init its maps are written: {e}"));
            }
        }
        // The init's output is the supervisor's log (an init cloned ahead of its sandbox has
        // none before), then the disk.
        let attach: Vec<_> = std::iter::once(2).chain(disk.iter().map(AsRawFd::as_raw_fd)).collect();
        if let Err(e) = protocol::send(ours.as_fd(), spec, &attach) {
            return fail_setup(format!("sending the sandbox spec: {e}"));
        }
        drop(disk);
        let (mut listener, mut identity) = (None, None);
        loop {
            match protocol::recv::<ToSupervisor>(ours.as_fd()) {
                Ok((ToSupervisor::Listening, fds)) => {
                    let mut fds = fds.into_iter();
                    listener = fds.next().map(std::net::TcpListener::from);
                    identity = fds.next();
                }
                Ok((ToSupervisor::Failed { reason }, _)) => return fail_setup(reason),
                Ok((ToSupervisor::CommandFailed { reason }, _)) => return fail(StartError::Command(reason)),
                Ok((m @ ToSupervisor::Started { .. }, _)) => {
                    let none = nix::sys::time::TimeVal::new(0, 0);
                    let _ = nix::sys::socket::setsockopt(ours, nix::sys::socket::sockopt::ReceiveTimeout, &none);
                    return Ok((listener, identity, m));
                }
                Ok((ToSupervisor::Exited { code }, _)) => {
                    return fail_setup(format!("the main command exited at once ({code})"));
                }
                Ok((ToSupervisor::ExecExited { .. }, _)) => {
                    return fail_setup("an exec reported before the start".into());
                }
                Ok((ToSupervisor::AwaitingMap, _)) => {
                    return fail_setup("the sandbox init asked for maps twice".into());
                }
                Err(e) => return fail_setup(format!("the sandbox init did not finish its set-up: {e}")),
            }
        }
    }

    /// The init's channel, for async use (after the start, nothing the init sends carries a
    /// descriptor), and a task that waits for the init to end with its exit code.
    pub fn split(&mut self) -> std::io::Result<(Channel, tokio::task::JoinHandle<i32>)> {
        let fd = self.channel.try_clone()?;
        let sock = std::os::unix::net::UnixDatagram::from(fd);
        sock.set_nonblocking(true)?;
        let channel = Channel { sock: tokio::net::UnixDatagram::from_std(sock)? };
        let init = self.init;
        let reaped = tokio::task::spawn_blocking(move || match waitpid(init, None) {
            Ok(WaitStatus::Exited(_, c)) => c,
            Ok(WaitStatus::Signaled(_, s, _)) => 128 + s as i32,
            _ => 255,
        });
        Ok((channel, reaped))
    }
}

/// The supervisor's end of the channel to the init.
pub struct Channel {
    sock: tokio::net::UnixDatagram,
}

impl Channel {
    pub async fn send(&self, msg: &ToInit, fds: &[std::os::fd::RawFd]) -> std::io::Result<()> {
        self.sock.async_io(tokio::io::Interest::WRITABLE, || protocol::send(self.sock.as_fd(), msg, fds)).await
    }

    pub async fn recv(&self) -> std::io::Result<ToSupervisor> {
        let mut buf = vec![0u8; protocol::MAX_MESSAGE];
        let n = self.sock.recv(&mut buf).await?;
        if n == 0 {
            return Err(std::io::Error::new(std::io::ErrorKind::UnexpectedEof, "the init closed its channel"));
        }
        serde_json::from_slice(&buf[..n]).map_err(std::io::Error::other)
    }
}
