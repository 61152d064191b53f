//! A cgroup per sandbox: its resource limits, the processes in it, and kill-all.
//!
//! Each sandbox gets `openshell/<id>` in every hierarchy it uses. On a pure cgroup v2 host
//! that is one folder under `/sys/fs/cgroup`; on a hybrid host the limits live in the v1
//! `pids`, `memory` and `cpu` hierarchies, and kill-all uses the unified tree's `cgroup.kill`
//! when it is mounted, or the v1 freezer otherwise. The paths follow from the sandbox id
//! alone, so the driver finds a sandbox's cgroup after its supervisor is gone (a pooled
//! sandbox's unified folder keeps the name it was made ahead with, [`SpareCgroup`]: the driver
//! kills through the freezer there). A non-root gateway's sandboxes live in the subtree root
//! delegated to its user instead ([`SandboxCgroup::delegated`]).
//!
//! Inside a container ([`SandboxCgroup::container`]) the sandbox's cgroup is the container's
//! own, made and limited by the container engine: the supervisor checks the limits it was
//! given are the ones in force, and kill-all spares only the supervisor itself.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use uuid::Uuid;

use crate::IsolationError;

const ROOT: &str = "/sys/fs/cgroup";
const GROUP: &str = "openshell";

/// Processes a container's cgroup holds beyond its sandbox's limit: the supervisor's own
/// threads (the agent's limit is then its uid's `RLIMIT_NPROC`).
pub const SUPERVISOR_PIDS: u64 = 64;

/// Why a non-root gateway cannot place its sandboxes on a host whose cgroups under `root` lack
/// the v1 controllers (a cgroup v2-only host): which are missing, and what the operator can do.
/// Non-root sandboxes on a delegated v2 subtree are not built yet (untestable on the hybrid
/// hosts this project runs on), so the refusal says so rather than half-working.
pub fn no_v1_controllers(root: &Path) -> String {
    let missing: Vec<String> =
        DELEGATED.iter().map(|c| root.join(c)).filter(|d| !d.is_dir()).map(|d| d.display().to_string()).collect();
    let v2 = root.join("cgroup.controllers").exists();
    format!(
        "a non-root gateway's sandboxes need the cgroup v1 controllers {} (each sandbox's limits, and kill-all \
         through the freezer, in a subtree root delegates to this user); this host {} and lacks {}. Non-root \
         sandboxes on a cgroup v2-only host are not supported yet. Either run the gateway as root (its sandboxes' \
         cgroups are then made under {}/{GROUP}), or boot the host with the hybrid hierarchy \
         (`systemd.unified_cgroup_hierarchy=0` on the kernel command line) and, as root, delegate the v1 \
         controllers: for c in {}; do mkdir -p {}/$c/{GROUP}-UID && chown UID {}/$c/{GROUP}-UID; done",
        DELEGATED.join(", "),
        if v2 {
            format!("mounts only the unified cgroup v2 hierarchy at {}", root.display())
        } else {
            format!("mounts no cgroup v1 hierarchy under {}", root.display())
        },
        if missing.is_empty() { "none of them as folders it can use".to_string() } else { missing.join(", ") },
        root.display(),
        DELEGATED.join(" "),
        root.display(),
        root.display(),
    )
}

/// The cgroup v2 mount that lacks `favordynmods`, if the host has one: every sandbox start then
/// waits for an RCU grace period (5-20 ms seen on the project's hosts) when its first process
/// moves into its cgroup. The lock a move takes is shared by every hierarchy, v1 ones
/// included, so remounting this one with `favordynmods` removes the wait, at the cost of a
/// slightly slower fork and exit for every process on the host (docs/sandbox.md).
pub fn slow_migration() -> Option<PathBuf> {
    slow_migration_in(&std::fs::read_to_string("/proc/self/mounts").ok()?)
}

/// [`slow_migration`] on the text of a mounts table.
fn slow_migration_in(mounts: &str) -> Option<PathBuf> {
    mounts.lines().find_map(|line| {
        let f: Vec<&str> = line.split_whitespace().collect();
        match f.as_slice() {
            [_, target, "cgroup2", options, ..] if !options.split(',').any(|o| o == "favordynmods") => {
                Some(PathBuf::from(target.replace("\\040", " ")))
            }
            _ => None,
        }
    })
}

/// The resources one sandbox may use; `None` leaves that resource unlimited.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Limits {
    /// CPU time in thousandths of a CPU (1500 = one and a half CPUs).
    pub cpu_millis: Option<u32>,
    pub memory_bytes: Option<u64>,
    pub pids: Option<u64>,
}

#[derive(Debug, Clone)]
enum Layout {
    /// cgroup v2 only: one folder with every controller.
    Unified,
    /// v1 controllers, and a v2 tree (without controllers) for `cgroup.kill` when mounted.
    Hybrid { unified: Option<PathBuf> },
    /// The cgroup this process is in, mounted at the root by a container engine (v2 when
    /// `v2`, else one v1 hierarchy per controller); its limits are the engine's.
    Container { v2: bool },
}

/// One sandbox's cgroup (its folders in each hierarchy).
#[derive(Debug, Clone)]
pub struct SandboxCgroup {
    layout: Layout,
    /// The folder of this gateway's sandboxes in each hierarchy.
    group: String,
    id: String,
    /// The name of its folder in the unified tree, when not `id`: a spare's ([`SpareCgroup`]).
    unified_name: Option<String>,
}

/// How the names of spares begin (see [`SpareCgroup`]).
const SPARE: &str = ".spare-";

/// The controllers a non-root gateway's delegated subtree must have (the freezer kills).
const DELEGATED: [&str; 4] = ["pids", "memory", "cpu", "freezer"];

fn read(path: &Path) -> Result<String, IsolationError> {
    std::fs::read_to_string(path).map_err(|e| IsolationError::io(path.display(), e))
}

fn write(path: &Path, value: &str) -> Result<(), IsolationError> {
    std::fs::write(path, value).map_err(|e| IsolationError::io(format!("writing {value:?} to {}", path.display()), e))
}

impl SandboxCgroup {
    /// The cgroup of sandbox `id` on this host (nothing is created yet).
    pub fn of(id: Uuid) -> Result<SandboxCgroup, IsolationError> {
        let root = Path::new(ROOT);
        let layout = if root.join("cgroup.controllers").exists() {
            Layout::Unified
        } else if root.join("pids").join("cgroup.procs").exists() && root.join("memory").join("cgroup.procs").exists() {
            let unified = root.join("unified");
            Layout::Hybrid { unified: unified.join("cgroup.procs").exists().then_some(unified) }
        } else {
            return Err(IsolationError(format!(
                "no usable cgroup hierarchy under {ROOT} (need cgroup v2, or the v1 pids and memory controllers)"
            )));
        };
        Ok(SandboxCgroup { layout, group: GROUP.into(), id: id.to_string(), unified_name: None })
    }

    /// The folder a root of cgroups delegates to the non-root user `uid` in each hierarchy
    /// (`openshell-UID`).
    fn delegated_group(uid: u32) -> String {
        format!("{GROUP}-{uid}")
    }

    /// The cgroup of sandbox `id` of a non-root gateway running as `uid`: under the subtree
    /// an operator delegated to it (see [`SandboxCgroup::check_delegation`]). Kill-all uses the
    /// v1 freezer, since the unified tree moves a process only within a subtree its mover
    /// owns from their common ancestor down.
    pub fn delegated(id: Uuid, uid: u32) -> Result<SandboxCgroup, IsolationError> {
        let cg = SandboxCgroup::of(id)?;
        match cg.layout {
            Layout::Hybrid { .. } => Ok(SandboxCgroup {
                layout: Layout::Hybrid { unified: None },
                group: Self::delegated_group(uid),
                id: id.to_string(),
                unified_name: None,
            }),
            _ => Err(IsolationError(no_v1_controllers(Path::new(ROOT)))),
        }
    }

    /// Checks that every controller a sandbox needs has a folder delegated to `uid`: made by
    /// root, owned and writable by `uid`. The error says which are missing and how to make them.
    pub fn check_delegation(uid: u32) -> Result<(), IsolationError> {
        use std::os::unix::fs::MetadataExt;
        SandboxCgroup::delegated(Uuid::nil(), uid)?;
        let group = Self::delegated_group(uid);
        let missing: Vec<String> = DELEGATED
            .iter()
            .map(|c| Path::new(ROOT).join(c).join(&group))
            .filter(|d| !std::fs::metadata(d).is_ok_and(|m| m.is_dir() && m.uid() == uid && m.mode() & 0o200 != 0))
            .map(|d| d.display().to_string())
            .collect();
        if missing.is_empty() {
            return Ok(());
        }
        Err(IsolationError(format!(
            "no cgroup subtree delegated to uid {uid}: {} missing or not owned by it (as root: for c in {}; do \
             mkdir -p {ROOT}/$c/{group} && chown {uid} {ROOT}/$c/{group}; done)",
            missing.join(", "),
            DELEGATED.join(" ")
        )))
    }

    /// The cgroup of the container this process runs in, as its engine mounted it: the
    /// sandbox shares it with its supervisor, and the engine set its limits.
    pub fn container() -> Result<SandboxCgroup, IsolationError> {
        let root = Path::new(ROOT);
        let v2 = root.join("cgroup.controllers").exists();
        let v1 = root.join("pids").join("cgroup.procs").exists() && root.join("memory").join("cgroup.procs").exists();
        if !(v2 || v1) {
            return Err(IsolationError(format!(
                "no container cgroup mounted under {ROOT} (need cgroup v2, or the v1 pids and memory controllers)"
            )));
        }
        Ok(SandboxCgroup {
            layout: Layout::Container { v2 },
            group: String::new(),
            id: String::new(),
            unified_name: None,
        })
    }

    /// Every folder of this sandbox, the one holding `cgroup.procs` for listing first.
    fn dirs(&self) -> Vec<PathBuf> {
        let root = Path::new(ROOT);
        match &self.layout {
            Layout::Container { v2: true } => vec![root.to_path_buf()],
            Layout::Container { v2: false } => ["pids", "memory", "cpu", "freezer"]
                .iter()
                .map(|c| root.join(c))
                .filter(|h| h.join("cgroup.procs").exists())
                .collect(),
            Layout::Unified => vec![root.join(&self.group).join(&self.id)],
            Layout::Hybrid { unified } => {
                let mut dirs: Vec<PathBuf> = ["pids", "memory", "cpu", "freezer"]
                    .iter()
                    .map(|c| root.join(c))
                    .filter(|h| h.join("cgroup.procs").exists())
                    .map(|h| h.join(&self.group).join(&self.id))
                    .collect();
                let name = self.unified_name.as_ref().unwrap_or(&self.id);
                dirs.extend(unified.iter().map(|u| u.join(&self.group).join(name)));
                dirs
            }
        }
    }

    fn controller_dir(&self, controller: &str) -> PathBuf {
        match &self.layout {
            Layout::Container { v2: true } => Path::new(ROOT).to_path_buf(),
            Layout::Container { v2: false } => Path::new(ROOT).join(controller),
            Layout::Unified => Path::new(ROOT).join(&self.group).join(&self.id),
            Layout::Hybrid { .. } => Path::new(ROOT).join(controller).join(&self.group).join(&self.id),
        }
    }

    /// Creates the folders and sets the limits. Fails when a limit cannot be set: a sandbox
    /// never runs with less confinement than it was given.
    pub fn create(&self, limits: &Limits) -> Result<(), IsolationError> {
        if let Layout::Container { v2 } = self.layout {
            return self.check_container(limits, v2);
        }
        if let Layout::Unified = self.layout {
            // Controllers must be enabled from the root down to our folder.
            let parent = Path::new(ROOT).join(&self.group);
            std::fs::create_dir_all(&parent).map_err(|e| IsolationError::io(parent.display(), e))?;
            for dir in [Path::new(ROOT), parent.as_path()] {
                let control = dir.join("cgroup.subtree_control");
                if read(&control)?.split_whitespace().count() < 3 {
                    write(&control, "+pids +memory +cpu")?;
                }
            }
        }
        self.make_dirs()?;
        self.set_limits(limits, &Limits::default())
    }

    /// Makes the folders that are not there yet.
    fn make_dirs(&self) -> Result<(), IsolationError> {
        for dir in self.dirs() {
            std::fs::create_dir_all(&dir)
                .map_err(|e| IsolationError::io(format!("creating cgroup {}", dir.display()), e))?;
        }
        Ok(())
    }

    /// Sets each of `limits` that differs from what the folders have, `set` (`None`: no limit,
    /// as a new folder has).
    fn set_limits(&self, limits: &Limits, set: &Limits) -> Result<(), IsolationError> {
        let unified = matches!(self.layout, Layout::Unified);
        let value = |n: Option<u64>, none: &str| n.map_or_else(|| none.to_string(), |n| n.to_string());
        if limits.pids != set.pids {
            write(&self.controller_dir("pids").join("pids.max"), &value(limits.pids, "max"))?;
        }
        if limits.memory_bytes != set.memory_bytes {
            let memory = self.controller_dir("memory");
            if unified {
                write(&memory.join("memory.max"), &value(limits.memory_bytes, "max"))?;
                // No swap: the limit is the limit.
                let swap = memory.join("memory.swap.max");
                if swap.exists() {
                    write(&swap, "0")?;
                }
            } else {
                let mut files = vec![memory.join("memory.limit_in_bytes")];
                let memsw = memory.join("memory.memsw.limit_in_bytes");
                if memsw.exists() {
                    files.push(memsw);
                }
                // Memory and swap together may never be limited below memory alone: a lower
                // limit goes on the memory first, a higher one on both together first.
                if limits.memory_bytes.unwrap_or(u64::MAX) > set.memory_bytes.unwrap_or(u64::MAX) {
                    files.reverse();
                }
                for file in files {
                    write(&file, &value(limits.memory_bytes, "-1"))?;
                }
            }
        }
        if limits.cpu_millis != set.cpu_millis {
            let cpu = self.controller_dir("cpu");
            let period: u64 = 100_000;
            let quota = limits.cpu_millis.map(|millis| (u64::from(millis) * period / 1000).max(1000));
            if unified {
                write(&cpu.join("cpu.max"), &format!("{} {period}", value(quota, "max")))?;
            } else {
                write(&cpu.join("cpu.cfs_period_us"), &period.to_string())?;
                write(&cpu.join("cpu.cfs_quota_us"), &value(quota, "-1"))?;
            }
        }
        Ok(())
    }

    /// A container's limits are set by its engine: refuse to run when the pids or memory
    /// limit in force is not the sandbox's (larger, or none at all).
    fn check_container(&self, limits: &Limits, v2: bool) -> Result<(), IsolationError> {
        let number = |file: PathBuf| -> Result<Option<u64>, IsolationError> {
            let text = read(&file)?;
            let t = text.trim();
            Ok(if t == "max" {
                None
            } else {
                Some(t.parse().map_err(|_| IsolationError(format!("{}: {t:?}", file.display())))?)
            })
        };
        let mut checks = vec![];
        if let Some(n) = limits.pids {
            checks.push(("pids", n + SUPERVISOR_PIDS, self.controller_dir("pids").join("pids.max")));
        }
        if let Some(bytes) = limits.memory_bytes {
            let file = if v2 { "memory.max" } else { "memory.limit_in_bytes" };
            checks.push(("memory", bytes, self.controller_dir("memory").join(file)));
        }
        for (what, want, file) in checks {
            match number(file.clone())? {
                Some(have) if have <= want => {}
                have => {
                    return Err(IsolationError(format!(
                        "the container's {what} limit is {} ({}), not the sandbox's {want}: the engine did not apply it",
                        have.map_or("unlimited".into(), |h| h.to_string()),
                        file.display()
                    )));
                }
            }
        }
        Ok(())
    }

    /// Moves a process (and so everything it starts later) into every folder.
    pub fn join(&self, pid: i32) -> Result<(), IsolationError> {
        if let Layout::Container { .. } = self.layout {
            // Started by this process inside the container: it is in the cgroup already.
            return Ok(());
        }
        for dir in self.dirs() {
            write(&dir.join("cgroup.procs"), &pid.to_string())?;
        }
        Ok(())
    }

    /// The processes in the sandbox now (host pids; in a container, the container's pids
    /// without this process, the supervisor).
    pub fn pids(&self) -> Vec<i32> {
        let me = std::process::id() as i32;
        let own = matches!(self.layout, Layout::Container { .. });
        std::fs::read_to_string(self.procs_path())
            .map(|s| s.lines().filter_map(|l| l.trim().parse().ok()).filter(|p| !own || *p != me).collect())
            .unwrap_or_default()
    }

    /// The file listing the sandbox's processes (host pids).
    pub fn procs_path(&self) -> PathBuf {
        self.dirs().into_iter().next().unwrap_or_default().join("cgroup.procs")
    }

    /// Whether the folders exist (the sandbox was started and not yet cleaned up).
    pub fn exists(&self) -> bool {
        self.dirs().first().is_some_and(|d| d.exists())
    }

    /// How many times the kernel's OOM killer has killed a process here.
    pub fn oom_kills(&self) -> u64 {
        let memory = self.controller_dir("memory");
        let (file, key) = match self.layout {
            Layout::Unified | Layout::Container { v2: true } => ("memory.events", "oom_kill"),
            Layout::Container { v2: false } => ("memory.oom_control", "oom_kill"),
            Layout::Hybrid { .. } => ("memory.oom_control", "oom_kill"),
        };
        std::fs::read_to_string(memory.join(file))
            .ok()
            // `oom_kill N`; `oom_kill_disable` does not parse as a number after the key.
            .and_then(|s| s.lines().find_map(|l| l.strip_prefix(key)?.trim().parse().ok()))
            .unwrap_or(0)
    }

    /// Kills every process in the sandbox and waits (bounded) until none is left. Nothing
    /// inside can escape this: a process cannot leave its cgroup without privileges it lacks.
    pub fn kill_all(&self) -> Result<(), IsolationError> {
        if !self.exists() {
            return Ok(());
        }
        let kill_file = match &self.layout {
            // The supervisor shares the container's cgroup: signal everyone but itself.
            Layout::Container { .. } => None,
            Layout::Unified => Some(self.dirs()[0].join("cgroup.kill")),
            Layout::Hybrid { unified: Some(_) } => self.dirs().last().map(|d| d.join("cgroup.kill")),
            Layout::Hybrid { unified: None } => None,
        };
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            let pids = self.pids();
            if pids.is_empty() {
                return Ok(());
            }
            match &kill_file {
                Some(f) if f.exists() => write(f, "1")?,
                None if matches!(self.layout, Layout::Container { .. }) => {
                    for pid in pids.iter() {
                        let _ =
                            nix::sys::signal::kill(nix::unistd::Pid::from_raw(*pid), nix::sys::signal::Signal::SIGKILL);
                    }
                }
                // Freeze so nothing forks between listing and killing, kill, thaw.
                _ => {
                    let state = self.controller_dir("freezer").join("freezer.state");
                    let _ = write(&state, "FROZEN");
                    for pid in self.pids() {
                        let _ =
                            nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), nix::sys::signal::Signal::SIGKILL);
                    }
                    let _ = write(&state, "THAWED");
                }
            }
            if Instant::now() > deadline {
                return Err(IsolationError(format!(
                    "sandbox {}: processes still in its cgroup after kill: {pids:?}",
                    self.id
                )));
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Kills what is left and removes the folders.
    pub fn remove(&self) -> Result<(), IsolationError> {
        self.kill_all()?;
        if let Layout::Container { .. } = self.layout {
            // The engine's folders: it removes them with the container.
            return Ok(());
        }
        for dir in self.dirs() {
            let deadline = Instant::now() + Duration::from_secs(2);
            loop {
                match std::fs::remove_dir(&dir) {
                    Ok(()) => break,
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => break,
                    // EBUSY while the last exiting process is being released.
                    Err(_) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(10)),
                    Err(e) => return Err(IsolationError::io(format!("removing cgroup {}", dir.display()), e)),
                }
            }
        }
        Ok(())
    }

    /// Sandbox ids that have cgroup folders on this host.
    pub fn present() -> Vec<Uuid> {
        let Ok(any) = SandboxCgroup::of(Uuid::nil()) else { return Vec::new() };
        let Some(first) = any.dirs().into_iter().next() else { return Vec::new() };
        let parent = first.parent().map(Path::to_path_buf).unwrap_or_default();
        std::fs::read_dir(parent)
            .into_iter()
            .flatten()
            .flatten()
            .filter_map(|e| e.file_name().to_str()?.parse().ok())
            .collect()
    }
}

/// A sandbox's cgroup made before its sandbox is known, with its init already in every
/// folder (a pooled supervisor's, crates/supervisor/src/pool.rs) and the limits most
/// sandboxes get, under a spare name, `openshell/.spare-RANDOM`. A claim moves no process:
/// cgroup v1 renames a folder with its processes, so the v1 folders become the sandbox's id
/// and the claim sets what its limits change; cgroup v2 refuses a rename, so the unified
/// tree's folder (which only kills, `cgroup.kill`) keeps its spare name for the sandbox's life.
/// Only a root gateway's hybrid layout has one. [`SpareCgroup::remove_stale`] removes the
/// spares left empty by processes that died.
#[derive(Debug)]
pub struct SpareCgroup {
    /// `None` once claimed.
    spare: Option<SandboxCgroup>,
    /// The limits set ahead.
    limits: Limits,
}

impl SpareCgroup {
    /// Makes a spare with `limits` and moves `init` into it; `None` on a layout without v1
    /// folders to rename (cgroup v2 only).
    pub fn make(init: i32, limits: &Limits) -> Result<Option<SpareCgroup>, IsolationError> {
        let Layout::Hybrid { unified } = SandboxCgroup::of(Uuid::nil())?.layout else { return Ok(None) };
        let name = format!("{SPARE}{}", Uuid::new_v4().simple());
        let cgroup =
            SandboxCgroup { layout: Layout::Hybrid { unified }, group: GROUP.into(), id: name, unified_name: None };
        let made = cgroup.create(limits).and_then(|()| cgroup.join(init));
        let spare = SpareCgroup { spare: Some(cgroup), limits: *limits };
        made.map(|()| Some(spare))
    }

    /// Sandbox `id`'s cgroup, its init in it: the spare's v1 folders renamed to `id`, and
    /// what of `limits` differs from the spare's set.
    pub fn claim(mut self, id: Uuid, limits: &Limits) -> Result<SandboxCgroup, IsolationError> {
        let spare = self.spare.take().ok_or_else(|| IsolationError("the spare cgroup was claimed".into()))?;
        let mut cgroup = SandboxCgroup::of(id)?;
        if let Layout::Hybrid { unified: Some(_) } = cgroup.layout {
            cgroup.unified_name = Some(spare.id.clone());
        }
        let renamed = spare.dirs().into_iter().zip(cgroup.dirs()).filter(|(from, to)| from != to);
        for (from, to) in renamed {
            if let Err(e) = std::fs::rename(&from, &to) {
                self.spare = Some(spare);
                return Err(IsolationError::io(format!("renaming cgroup {} to {}", from.display(), to.display()), e));
            }
        }
        cgroup.set_limits(limits, &self.limits)?;
        Ok(cgroup)
    }

    /// Removes the spares no process is in (one whose supervisor died unclaimed, the unified
    /// folder of a pooled sandbox whose supervisor was killed) that are older than `settled`:
    /// a younger one may be a spare being made, not yet joined. Those in use stay (EBUSY). Its
    /// cost grows with the pooled sandboxes running, so call it now and then.
    pub fn remove_stale(settled: Duration) {
        let Ok(any) = SandboxCgroup::of(Uuid::nil()) else { return };
        let Layout::Hybrid { .. } = any.layout else { return };
        for group in any.dirs().iter().filter_map(|d| d.parent()) {
            for entry in std::fs::read_dir(group).into_iter().flatten().flatten() {
                let spare = entry.file_name().to_str().is_some_and(|n| n.starts_with(SPARE));
                let made = entry.metadata().and_then(|m| m.modified()).map(|t| t.elapsed().unwrap_or_default());
                if spare && made.is_ok_and(|age| age >= settled) {
                    let _ = std::fs::remove_dir(entry.path());
                }
            }
        }
    }
}

impl Drop for SpareCgroup {
    /// An unclaimed spare goes, once: a folder still holding its init (alive, or killed and
    /// not yet released) stays for [`SpareCgroup::remove_stale`].
    fn drop(&mut self) {
        for dir in self.spare.iter().flat_map(SandboxCgroup::dirs) {
            let _ = std::fs::remove_dir(dir);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cgroup2_mount_without_favordynmods_is_named() {
        let hybrid = "cgroup /sys/fs/cgroup/cpu cgroup rw,relatime,cpu 0 0\n\
                      cgroup2 /sys/fs/cgroup/unified cgroup2 rw,relatime 0 0\n";
        assert_eq!(slow_migration_in(hybrid), Some(PathBuf::from("/sys/fs/cgroup/unified")));
        let fast = "cgroup2 /sys/fs/cgroup cgroup2 rw,nosuid,favordynmods,memory_recursiveprot 0 0\n";
        assert_eq!(slow_migration_in(fast), None);
        assert_eq!(slow_migration_in("cgroup /sys/fs/cgroup/cpu cgroup rw,cpu 0 0\n"), None, "no v2 mount");
        assert_eq!(
            slow_migration_in("cgroup2 /a\\040b cgroup2 rw 0 0\n"),
            Some(PathBuf::from("/a b")),
            "mounts escapes spaces"
        );
    }

    /// A cgroup v2-only host as a folder: the refusal names each missing v1 controller's
    /// folder, the v2 mount, and both ways out.
    #[test]
    fn a_v2_only_host_is_refused_naming_what_is_missing_and_what_to_do() {
        let root = std::env::temp_dir().join(format!("cgroup-v2-only-{}", uuid::Uuid::new_v4()));
        std::fs::create_dir_all(root.join("cpu")).unwrap();
        std::fs::write(root.join("cgroup.controllers"), "cpu memory pids\n").unwrap();
        let m = super::no_v1_controllers(&root);
        for c in ["pids", "memory", "freezer"] {
            assert!(m.contains(&root.join(c).display().to_string()), "{c} missing from: {m}");
        }
        assert!(!m.contains(&format!("{}, ", root.join("cpu").display())), "cpu is there: {m}");
        assert!(m.contains("only the unified cgroup v2 hierarchy"), "{m}");
        assert!(m.contains("run the gateway as root") && m.contains("systemd.unified_cgroup_hierarchy=0"), "{m}");
        assert!(m.contains("chown UID"), "{m}");
        let _ = std::fs::remove_dir_all(root);
    }
}
