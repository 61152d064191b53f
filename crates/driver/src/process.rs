//! The process driver: each sandbox is an `openshell-supervisor` process on this host, which
//! isolates its agent (own uid, namespaces, cgroup, Landlock, seccomp, egress proxy).
//! A gateway that is not root gives each sandbox a user namespace too, its uid from the
//! user's subordinate ids and its cgroup under the subtree delegated to the user
//! (`openshell_isolation::userns`); without them it refuses every start, saying what is missing.
//!
//! Supervisors run in their own process group, so they outlive a gateway crash. Nothing about
//! them is kept in memory: each holds its sandbox's run lock (`run/ID`, naming its pid and
//! start time; see `run_lock.rs`), so a start, stop or removal finds one sandbox's supervisor
//! by reading one file, and two starts of a sandbox never both spawn one. The reconciler's
//! list, and a stop whose run file is missing or names no live supervisor while its lock is
//! held (a gateway that died between the spawn and the write), scan /proc for our state
//! directory in supervisors' arguments; supervisors from before run locks are named in their
//! run files at start-up, from that scan. A sandbox's uid is held by its supervisor's lock on
//! a file under `uids/`, its processes by its cgroup. Its files are where [`Layout`] says: the
//! log in the state directory, the workdir under the sandbox root, on the sandbox's own disk
//! ([`openshell_disk`]), mounted before its supervisor starts.
//!
//! A supervisor is spawned with posix_spawn, never a fork of the gateway, or claimed from the
//! supervisors a root gateway prepares ahead (`pool.rs`); either way its locks reach it with
//! its claim on its standard input (`claim.rs`).

use std::ffi::OsString;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, kill, killpg};
use nix::unistd::Pid;
use openshell_disk::{Disks, Shortage};
use openshell_isolation::cgroup::{Limits, SandboxCgroup};
use openshell_isolation::uids::{self, UidRange};
use openshell_isolation::userns::{self, Subids};
use tokio::process::Command;
use uuid::Uuid;

use crate::claim::{self, Spawned};
use crate::layout::{Layout, owned_dir};
use crate::pool::{self, Pool};
use crate::run_lock::{Named, Probe, RunLock};
use crate::{DiskBackend, DiskSettings, DiskUsage, Driver, DriverError, ProxySettings, StartSpec, binary, files};

/// Environment variables the supervisor (and so the main command) may inherit; everything
/// else, such as a database URL with a password, stays with the gateway.
const PASSED_ENV: &[&str] = &["PATH", "HOME", "LANG", "LC_ALL", "TERM", "TZ", "RUST_LOG"];

pub struct ProcessDriver {
    supervisor: PathBuf,
    layout: Layout,
    /// Between TERM and KILL, for the supervisor stopping its main command.
    grace: Duration,
    /// Where agents' uids come from.
    uids: UidRange,
    proxy: ProxySettings,
    disks: Arc<Disks>,
    /// How many supervisors and disks (of this size) to prepare ahead (0: none), the limits
    /// their cgroups are made with, and once the gateway serves, the pool.
    pool_size: usize,
    pool_disk_bytes: u64,
    pool_limits: Limits,
    pool: std::sync::OnceLock<Pool>,
}

/// The gateway's variables a supervisor is given.
fn passed_env() -> Vec<(String, String)> {
    PASSED_ENV.iter().filter_map(|k| Some((k.to_string(), std::env::var(k).ok()?))).collect()
}

fn err(what: impl std::fmt::Display, e: impl std::fmt::Display) -> DriverError {
    DriverError(format!("{what}: {e}"))
}

impl ProcessDriver {
    /// `supervisor` is the `openshell-supervisor` binary; `layout` says where sandboxes keep
    /// their logs and workdirs. `grace` is how long a main command gets between TERM and KILL.
    pub fn new(
        supervisor: PathBuf,
        layout: Layout,
        grace: Duration,
        uids: UidRange,
        proxy: ProxySettings,
    ) -> Result<ProcessDriver, DriverError> {
        if !supervisor.is_file() {
            return Err(DriverError(format!(
                "supervisor binary not found at {} (build it with `cargo build -p openshell-supervisor`, or pass --supervisor-bin)",
                supervisor.display()
            )));
        }
        uids.check_unused().map_err(|e| DriverError(e.to_string()))?;
        if let Some(mount) = openshell_isolation::cgroup::slow_migration() {
            tracing::warn!(
                "each sandbox start waits milliseconds for the kernel to move its first process into its cgroup; \
                 `mount -o remount,favordynmods {}` as root removes the wait (docs/sandbox.md#start-up-time)",
                mount.display()
            );
        }
        let disks = Arc::new(Disks::new(&layout.disks(), DiskSettings::default()).map_err(|e| DriverError(e.0))?);
        let driver = ProcessDriver {
            supervisor,
            layout,
            grace,
            uids,
            proxy,
            disks,
            pool_size: 0,
            pool_disk_bytes: 0,
            pool_limits: Limits::default(),
            pool: Default::default(),
        };
        driver.adopt()?;
        Ok(driver)
    }

    /// Names in their run files the supervisors that hold no run lock (started by a gateway
    /// from before run locks), so a start, stop or removal finds them without a scan.
    fn adopt(&self) -> Result<(), DriverError> {
        for (id, p) in self.supervisors() {
            if let Some(run) = RunLock::take(&self.layout, id)?
                && run.named()? != Some(p.named())
            {
                tracing::info!(sandbox = %id, pid = p.pid.as_raw(), "supervisor without a run lock: naming it in its run file");
                run.write(Some(p.named()))?;
            }
        }
        Ok(())
    }

    /// The same driver preparing `n` supervisors, their cgroups with `limits` and `n` disks of
    /// `disk_bytes`, ahead of their sandboxes once the gateway serves (see pool.rs). A pooled
    /// init is cloned before its uid is known, so only a root gateway, whose sandboxes need no
    /// user namespace, keeps a pool.
    pub fn with_pool(mut self, n: usize, disk_bytes: u64, limits: Limits) -> Result<ProcessDriver, DriverError> {
        if n > pool::MAX {
            return Err(DriverError(format!("--sandbox-pool {n}: at most {}", pool::MAX)));
        }
        if n > 0 && !nix::unistd::geteuid().is_root() {
            return Err(DriverError(
                "--sandbox-pool needs a root gateway: a gateway that is not root gives each sandbox a user namespace, \
                 made for its uid at its start"
                    .into(),
            ));
        }
        self.pool_size = n;
        self.pool_disk_bytes = disk_bytes;
        self.pool_limits = limits;
        Ok(self)
    }

    /// The same driver with sandboxes' disks kept as `settings` say (the default: images as
    /// root, tmpfs otherwise, the default limits).
    pub fn with_disks(mut self, settings: DiskSettings) -> Result<ProcessDriver, DriverError> {
        self.disks = Arc::new(Disks::new(&self.layout.disks(), settings).map_err(|e| DriverError(e.0))?);
        Ok(self)
    }

    /// How this host isolates sandboxes: as root, or (not root) each in a user namespace
    /// from this user's subordinate ids. What is missing for either is an error, never a
    /// sandbox with less isolation.
    fn check_host() -> Result<Host, DriverError> {
        if !nix::unistd::geteuid().is_root() {
            return userns::check_host().map(Host::Rootless).map_err(|e| DriverError(e.to_string()));
        }
        SandboxCgroup::of(Uuid::nil()).map_err(|e| DriverError(e.to_string()))?;
        Ok(Host::Root)
    }

    /// A sandbox's cgroup, wherever this gateway's sandboxes have theirs.
    fn cgroup_of(id: Uuid) -> Result<SandboxCgroup, openshell_isolation::IsolationError> {
        if nix::unistd::geteuid().is_root() {
            SandboxCgroup::of(id)
        } else {
            SandboxCgroup::delegated(id, nix::unistd::geteuid().as_raw())
        }
    }

    /// Supervisor processes of this state directory, by sandbox id, from every process's
    /// arguments: O(processes on the host), for the reconciler and the fallbacks only.
    fn supervisors(&self) -> Vec<(Uuid, Proc)> {
        pids().filter_map(|pid| Some((self.sandbox_of(pid)?, Proc::get(pid)?))).collect()
    }

    /// The sandbox whose supervisor runs at `pid`, if one of ours does. A supervisor is known
    /// by its arguments (`--state-dir` ours, `--sandbox-id`), whatever its binary is named,
    /// and runs as the gateway's user: an agent can give a process any arguments, never that
    /// user, so it cannot pose as a sibling's supervisor (to be signalled for it, or to keep a
    /// dead sibling looking alive to the reconciler).
    fn sandbox_of(&self, pid: Pid) -> Option<Uuid> {
        let raw = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
        let args: Vec<&[u8]> = raw.split(|b| *b == 0).collect();
        let value = |flag: &[u8]| args.iter().position(|a| *a == flag).and_then(|i| args.get(i + 1)).copied();
        if value(b"--state-dir") != Some(self.layout.state_dir().as_os_str().as_encoded_bytes()) || !ours(pid) {
            return None;
        }
        // A pooled supervisor names no sandbox until claimed (pool.rs).
        value(b"--sandbox-id")
            .and_then(|v| std::str::from_utf8(v).ok())
            .and_then(|v| v.parse().ok())
            .filter(|id| *id != pool::UNCLAIMED)
    }

    /// The supervisor a run file names, if it lives and is this sandbox's.
    fn named_supervisor(&self, id: Uuid, named: Option<Named>) -> Option<Proc> {
        let (pid, start) = named?;
        let p = Proc { pid: Pid::from_raw(pid), start };
        (p.alive() && self.sandbox_of(p.pid) == Some(id)).then_some(p)
    }

    /// The sandbox's supervisors: the one its run file names; none when its lock is free and
    /// the file names none alive; a scan when the lock is held but the file names nothing
    /// usable (a gateway died between the spawn and the write), or when there is no run file
    /// (a sandbox never started here, or a stray the reconciler's scan found). Fails closed
    /// on a run file it cannot read.
    fn supervisors_of(&self, id: Uuid) -> Result<Vec<Proc>, DriverError> {
        let scan = || self.supervisors().into_iter().filter(|(s, _)| *s == id).map(|(_, p)| p).collect();
        Ok(match RunLock::probe(&self.layout, id)? {
            Probe::Missing => scan(),
            Probe::Free(named) => self.named_supervisor(id, named).into_iter().collect(),
            Probe::Held(named) => match self.named_supervisor(id, named) {
                Some(p) => vec![p],
                None => scan(),
            },
        })
    }
}

/// Checks that any user may pass through every folder above `dir` (the agent's uid reaches its
/// working directory through them, and a non-root gateway cannot make it the owner of any).
fn passable(dir: &Path) -> Result<(), DriverError> {
    use std::os::unix::fs::MetadataExt;
    for p in dir.ancestors() {
        let m = std::fs::metadata(p).map_err(|e| err(p.display(), e))?;
        if m.mode() & 0o001 == 0 {
            return Err(DriverError(format!(
                "a sandbox's uid cannot pass through {} (mode {:o}) to its working directory: give others \
                 passage (chmod o+x), or choose another --state-dir",
                p.display(),
                m.mode() & 0o7777
            )));
        }
    }
    Ok(())
}

/// How sandboxes are isolated on this host.
enum Host {
    /// The gateway is root: uids from `--sandbox-uid-range`, cgroups under `openshell/`.
    Root,
    /// The gateway is not root: a user namespace per sandbox, uids from these subordinate ids.
    Rootless(Subids),
}

/// Whether `pid`'s real and effective uids are this process's. Read from `status`: a
/// supervisor is not dumpable, so its /proc folder is owned by root whoever runs it.
fn ours(pid: Pid) -> bool {
    let me = nix::unistd::geteuid().as_raw();
    std::fs::read_to_string(format!("/proc/{pid}/status")).is_ok_and(|status| {
        status
            .lines()
            .find_map(|l| l.strip_prefix("Uid:"))
            .is_some_and(|ids| ids.split_whitespace().take(2).all(|u| u.parse() == Ok(me)))
    })
}

/// Every process id in /proc.
fn pids() -> impl Iterator<Item = Pid> {
    std::fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| e.file_name().to_str().and_then(|s| s.parse::<i32>().ok()).map(Pid::from_raw))
}

/// A process as first seen: its pid and start time, so a later signal never reaches an
/// unrelated process that was given the same pid.
#[derive(Clone, Copy, Debug, PartialEq)]
struct Proc {
    pid: Pid,
    start: u64,
}

impl Proc {
    /// The process now at `pid`, if it runs (not a zombie).
    fn get(pid: Pid) -> Option<Proc> {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
        // Fields after the command name: state is the first, start time the twentieth.
        let rest = &stat[stat.rfind(')')? + 1..];
        let fields: Vec<&str> = rest.split_whitespace().collect();
        if fields.first() == Some(&"Z") {
            return None;
        }
        Some(Proc { pid, start: fields.get(19)?.parse().ok()? })
    }

    fn named(self) -> Named {
        (self.pid.as_raw(), self.start)
    }

    fn alive(self) -> bool {
        Proc::get(self.pid) == Some(self)
    }

    fn signal(self, signal: Signal) {
        if self.alive() {
            let _ = kill(self.pid, signal);
        }
    }

    /// SIGKILL to its whole process group (the supervisor leads its own).
    fn kill_group(self) {
        if self.alive() {
            let _ = killpg(self.pid, Signal::SIGKILL);
        }
    }
}

#[async_trait::async_trait]
impl Driver for ProcessDriver {
    fn name(&self) -> &'static str {
        "process"
    }

    fn serving(&self, endpoint: &str) {
        if self.pool_size > 0 {
            self.pool.get_or_init(|| {
                Pool::new(pool::Settings {
                    supervisor: self.supervisor.clone(),
                    state_dir: self.layout.state_dir().to_path_buf(),
                    gateway: endpoint.into(),
                    env: passed_env(),
                    size: self.pool_size,
                    disks: self.disks.clone(),
                    disk_bytes: self.pool_disk_bytes,
                    limits: self.pool_limits,
                    layout: self.layout.clone(),
                    uids: self.uids,
                })
            });
        }
    }

    async fn start(&self, spec: StartSpec) -> Result<(), DriverError> {
        if let Some(image) = &spec.image {
            return Err(DriverError(format!("the process driver runs no image ({image}); use --driver container")));
        }
        // Held: a supervisor of this sandbox runs (or another start is spawning one).
        let ahead = self.pool.get().and_then(Pool::take_run).and_then(|r| r.claim(&self.layout, spec.id));
        let Some(run) = ahead.map_or_else(|| RunLock::take(&self.layout, spec.id), |r| Ok(Some(r)))? else {
            return Ok(());
        };
        // Free, yet naming a live supervisor: one from before run locks (see `adopt`).
        if self.named_supervisor(spec.id, run.named()?).is_some() {
            return Ok(());
        }
        let host = Self::check_host()?;
        self.disks.check_host().map_err(|e| DriverError(e.0))?;
        // The agent passes through the sandbox root to its own folder, lists nothing, and
        // never reaches the state directory.
        if let Some(spare) = self.pool.get().and_then(Pool::take_spare) {
            self.layout.move_spare(spare, spec.id);
        }
        self.layout.prepare(spec.id, self.disks.settings().backend != openshell_disk::Backend::Image)?;
        let dir = self.layout.sandbox_dir(spec.id);
        if let Host::Rootless(_) = host {
            passable(&dir)?;
        }
        let started = self.spawn(&spec, host, &dir, &run).await;
        drop(run);
        if started.is_err() {
            // A start that failed holds no disk: it is unmounted and kept with its files.
            let _ = files::release_disk(&self.disks, &self.layout, spec.id).await;
        }
        started
    }

    async fn stop(&self, id: Uuid, grace: Duration) -> Result<(), DriverError> {
        self.stop_workload(id, grace).await?;
        files::release_disk(&self.disks, &self.layout, id).await
    }

    async fn list(&self) -> Result<Vec<Uuid>, DriverError> {
        let mut ids: Vec<Uuid> = self.supervisors().into_iter().map(|(id, _)| id).collect();
        ids.sort();
        ids.dedup();
        Ok(ids)
    }

    fn room(&self, disk_bytes: Option<u64>) -> Result<(), Shortage> {
        self.disks.room(disk_bytes)
    }

    async fn remove(&self, id: Uuid) -> Result<(), DriverError> {
        let still_runs = || DriverError(format!("sandbox {id} still runs: stop it before removing its files"));
        // Locked while its files go, so no start spawns a supervisor among them.
        let run = match RunLock::take_existing(&self.layout, id)? {
            Ok(run) if self.named_supervisor(id, run.named()?).is_some() => return Err(still_runs()),
            Ok(run) => Some(run),
            Err(Probe::Held(_)) => return Err(still_runs()),
            Err(_) => None,
        };
        files::remove(&self.disks, &self.layout, id).await?;
        run.map_or(Ok(()), RunLock::remove)
    }

    fn with_files(&self) -> Vec<Uuid> {
        files::with_files(&self.disks, &self.layout)
    }

    fn disk_usage(&self) -> Option<(DiskBackend, DiskUsage)> {
        Some((self.disks.settings().backend, self.disks.usage()))
    }
}

impl ProcessDriver {
    /// Starts the sandbox's supervisor (its folder made) and hands it its credential, then
    /// makes the sandbox's disk while the supervisor loads and connects, and tells it the
    /// files are in place. `run` is the sandbox's run lock, taken: the supervisor holds it on
    /// its descriptor 4 and the file names it once spawned.
    async fn spawn(&self, spec: &StartSpec, host: Host, dir: &Path, run: &RunLock) -> Result<(), DriverError> {
        let range = match &host {
            Host::Root => self.uids,
            Host::Rootless(sub) => sub.uids,
        };
        let ahead = self.pool.get().filter(|_| matches!(host, Host::Root)).and_then(Pool::take_lease);
        let lease = match ahead {
            Some(lease) => lease,
            None => uids::allocate(&self.layout.uids(), range).map_err(|e| DriverError(e.to_string()))?,
        };
        let work = self.layout.workdir(spec.id);
        let log = self.layout.open_log(spec.id)?;
        let args = self.arguments(spec, &host, lease.uid, work.clone(), spec.start_data.is_some());
        // The uid lock and the run lock, held by the supervisor for as long as it lives.
        let locks = [lease.file.as_raw_fd(), run.fd()];
        let pooled = match (&host, self.pool.get()) {
            (Host::Root, Some(pool)) => {
                let fds = [locks[0], locks[1], log.as_raw_fd()];
                let claimed: Option<Vec<String>> = args.iter().map(|a| a.to_str().map(String::from)).collect();
                match claimed {
                    Some(claimed) => pool.claim(&spec.gateway, &claimed, dir, fds).await,
                    None => None,
                }
            }
            _ => None,
        };
        let Spawned { child, mut input } = match pooled {
            Some(p) => p,
            None => {
                // Checked when spawned: a pooled one was, when the pool spawned it.
                let supervisor = binary::trusted(&self.supervisor)?;
                let log2 = log.try_clone().map_err(|e| err("supervisor log", e))?;
                let mut cmd = Command::new(supervisor);
                cmd.args(&args)
                    .env_clear()
                    .envs(passed_env())
                    // Not the state directory: the sandbox's init inherits this.
                    .current_dir(dir)
                    .stdout(log)
                    .stderr(log2)
                    // Its own process group: the gateway's signals do not reach it, and it
                    // outlives a gateway crash until the reconciler decides.
                    .process_group(0);
                claim::spawn(cmd, locks).await?
            }
        };
        let uid = lease.uid;
        drop(lease);
        // Reap it whenever it exits, so it never lingers as a zombie.
        let pid = child.id();
        let mut child = child;
        tokio::spawn(async move {
            let _ = child.wait().await;
        });
        // Should this fail, the lock is still held, by the supervisor: a later look falls back
        // to the scan.
        let named = pid.and_then(|pid| Proc::get(Pid::from_raw(pid as i32))).map(Proc::named);
        let recorded = run.write(named);
        // The credential (and the creator's variables) go through its input: never in argv,
        // the supervisor's environment or a file.
        let mut handoff = spec.handoff();
        let written = claim::hand_off(&mut input, &handoff).await;
        handoff.fill(0);
        written.map_err(|e| DriverError(format!("hand credential to supervisor: {e}")))?;
        // A failure from here drops the input before the last line: the supervisor exits.
        let prepared = self.pool.get().and_then(|p| p.take_disk(spec.disk_bytes));
        files::make_disk(&self.disks, &self.layout, spec, prepared).await?;
        // Without root, the sandbox's init gives it to the agent from inside its namespace.
        if let Host::Root = host {
            std::os::unix::fs::chown(&work, Some(uid), Some(uid)).map_err(|e| err(work.display(), e))?;
        }
        claim::files_in_place(input, spec.start_data.as_deref())
            .await
            .map_err(|e| DriverError(format!("start the supervisor: {e}")))?;
        recorded
    }

    /// The supervisor's arguments for `spec`, run as `uid` in `work`.
    fn arguments(&self, spec: &StartSpec, host: &Host, uid: u32, work: PathBuf, data: bool) -> Vec<OsString> {
        let mut args: Vec<OsString> = vec![
            "--claim".into(),
            "--sandbox-id".into(),
            spec.id.to_string().into(),
            "--state-dir".into(),
            self.layout.state_dir().into(),
            "--name".into(),
            spec.name.clone().into(),
            "--gateway".into(),
            spec.gateway.clone().into(),
            "--grace".into(),
            self.grace.as_secs().max(1).to_string().into(),
            "--uid".into(),
            uid.to_string().into(),
            "--workdir".into(),
            work.into(),
        ];
        if let Host::Rootless(sub) = host {
            args.extend(["--gid".into(), sub.gid_of(uid).to_string().into(), "--userns".into()]);
        }
        if data {
            args.push("--start-data".into());
        }
        args.extend(
            files::supervisor_flags(self.disks.settings().backend, spec.disk_bytes).into_iter().map(Into::into),
        );
        args.extend(limit_args(&spec.limits).into_iter().map(Into::into));
        if let Some(ca) = &self.proxy.extra_ca {
            args.extend(["--proxy-extra-ca".into(), ca.into()]);
        }
        for (host, ip) in &self.proxy.resolve {
            args.extend(["--proxy-resolve".into(), format!("{host}={ip}").into()]);
        }
        args.push("--".into());
        args.extend(spec.command.iter().map(Into::into));
        args
    }

    /// Stops the supervisor (TERM, then KILL after `grace`) and whatever is left in its cgroup.
    async fn stop_workload(&self, id: Uuid, grace: Duration) -> Result<(), DriverError> {
        let supervisors = self.supervisors_of(id)?;
        for p in &supervisors {
            p.signal(Signal::SIGTERM);
        }
        // The supervisor gives its main command `grace` after TERM; allow a little more.
        let deadline = Instant::now() + grace + Duration::from_secs(2);
        while supervisors.iter().any(|p| p.alive()) && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        for p in &supervisors {
            if p.alive() {
                tracing::warn!(sandbox = %id, pid = p.pid.as_raw(), "supervisor ignored TERM; killing its process group");
                p.kill_group();
            }
        }
        // Whatever the sandbox started is in its cgroup, whatever it did to its supervisor.
        if let Ok(cgroup) = Self::cgroup_of(id) {
            let cleaned = tokio::task::spawn_blocking(move || cgroup.remove()).await;
            if let Ok(Err(e)) = cleaned {
                return Err(DriverError(format!("sandbox {id}: {e}")));
            }
        }
        // Its files stay for the record, out of reach of a later sandbox given the same uid:
        // root takes them back; a non-root gateway (which cannot) closes the folder above them.
        let work = self.layout.workdir(id);
        if std::fs::symlink_metadata(&work).is_ok_and(|m| m.is_dir()) {
            if nix::unistd::geteuid().is_root() {
                let _ = std::os::unix::fs::chown(&work, Some(0), Some(0));
            } else {
                owned_dir(&self.layout.sandbox_dir(id), 0o700)?;
            }
        }
        let deadline = Instant::now() + Duration::from_secs(5);
        while supervisors.iter().any(|p| p.alive()) {
            if Instant::now() > deadline {
                return Err(DriverError(format!("sandbox {id}: supervisor still running after KILL")));
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        Ok(())
    }
}

/// A supervisor's flags for `limits` (each one set).
pub(crate) fn limit_args(limits: &Limits) -> Vec<String> {
    let flags = [
        ("--cpu-millis", limits.cpu_millis.map(u64::from)),
        ("--memory-bytes", limits.memory_bytes),
        ("--pids", limits.pids),
    ];
    flags.into_iter().filter_map(|(flag, v)| Some([flag.to_string(), v?.to_string()])).flatten().collect()
}
