//! Where a driver keeps each sandbox's files: its log in the gateway's state directory (0700,
//! the gateway's alone) and its working directory and CA bundle under the sandbox root (0711:
//! each agent passes through to its own folder and can list nothing).
//!
//! ```text
//! STATE/sandboxes/ID/supervisor.log   0700 folders, 0600 file
//! STATE/disks/                        0700: the sandboxes' disk images (openshell_disk)
//! STATE/run/ID                        0700 folder, 0600 file: the run lock its supervisor
//!                                     holds, naming it (crates/driver/src/run_lock.rs)
//! ROOT/ID/                            0711, the sandbox's own filesystem mounted here while it
//!                                     runs (0700 once a non-root gateway stops it)
//! ROOT/ID/ca-bundle.pem               0644, written by the supervisor
//! ROOT/ID/work/                       0700, the agent's uid
//! ROOT/ID/tmp/                        1777, the agent's /tmp
//! ROOT/.spare-*, STATE/sandboxes/.spare-*  a pool's folders made ahead, renamed to a
//!                                     sandbox's id when it claims them (Layout::make_spare)
//! ```
//!
//! Gateways before this layout kept everything under `STATE/sandboxes/ID`, which forced the
//! state directory open to 0711; [`Layout::migrate`] moves what they left.

use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use uuid::Uuid;

use crate::DriverError;

/// The state directory and the sandbox root of one gateway.
#[derive(Debug, Clone)]
pub struct Layout {
    state_dir: PathBuf,
    sandbox_root: PathBuf,
}

fn err(what: impl std::fmt::Display, e: impl std::fmt::Display) -> DriverError {
    DriverError(format!("{what}: {e}"))
}

/// `DIR-suffix` beside `dir` (`/var/lib/openshell` gives `/var/lib/openshell-sandboxes`):
/// the default place of the folders other uids must reach, outside the 0700 state directory.
pub fn beside(dir: &Path, suffix: &str) -> PathBuf {
    let name = dir.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_else(|| "openshell".into());
    dir.with_file_name(format!("{name}-{suffix}"))
}

/// Creates (or fixes) a folder owned by the gateway's user with `mode`, refusing a symlink in
/// its place and a folder another user owns (it could swap what is inside).
pub fn owned_dir(path: &Path, mode: u32) -> Result<(), DriverError> {
    match std::fs::symlink_metadata(path) {
        Ok(m) if m.file_type().is_symlink() => return Err(DriverError(format!("{} is a symlink", path.display()))),
        Ok(m) if !m.is_dir() => return Err(DriverError(format!("{} is not a folder", path.display()))),
        Ok(m) if m.uid() != nix::unistd::geteuid().as_raw() => {
            return Err(DriverError(format!(
                "{} belongs to uid {}, not to the gateway's user ({}): remove it or choose another folder",
                path.display(),
                m.uid(),
                nix::unistd::geteuid()
            )));
        }
        Ok(_) => {}
        Err(_) => match std::fs::create_dir(path) {
            // Made meanwhile by a concurrent start: checked as any folder found there.
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => return owned_dir(path, mode),
            r => r.map_err(|e| err(path.display(), e))?,
        },
    }
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).map_err(|e| err(path.display(), e))
}

/// The `supervisor.log` in a log folder, for appending (0600, never through a symlink).
fn log_in(dir: &Path) -> Result<std::fs::File, DriverError> {
    let path = dir.join("supervisor.log");
    std::fs::OpenOptions::new()
        .append(true)
        .create(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW)
        .open(&path)
        .map_err(|e| err(path.display(), e))
}

/// How the names of spare folders and run files begin (never a sandbox id).
pub(crate) const SPARE: &str = ".spare-";

/// A sandbox's folders made ahead ([`Layout::make_spare`]).
pub struct Spare {
    folder: PathBuf,
    log: PathBuf,
}

impl Spare {
    /// Removes both folders (when no start took them).
    pub fn remove(&self) {
        let _ = std::fs::remove_dir_all(&self.folder);
        let _ = std::fs::remove_dir_all(&self.log);
    }
}

impl Layout {
    /// The folders of a gateway whose state directory is `state_dir` (which exists) and whose
    /// sandboxes live under `sandbox_root` (made here, 0711, when missing).
    pub fn new(state_dir: &Path, sandbox_root: &Path) -> Result<Layout, DriverError> {
        let state_dir = std::fs::canonicalize(state_dir)
            .map_err(|e| DriverError(format!("state directory {}: {e}", state_dir.display())))?;
        owned_dir(sandbox_root, 0o711).map_err(|e| DriverError(format!("sandbox root: {e}")))?;
        let sandbox_root = std::fs::canonicalize(sandbox_root).map_err(|e| err(sandbox_root.display(), e))?;
        if sandbox_root.starts_with(&state_dir) || state_dir.starts_with(&sandbox_root) {
            return Err(DriverError(format!(
                "the sandbox root {} and the state directory {} must not contain each other: the state \
                 directory is closed to every other uid, the sandbox root lets each agent reach its folder",
                sandbox_root.display(),
                state_dir.display()
            )));
        }
        Ok(Layout { state_dir, sandbox_root })
    }

    /// With the default sandbox root, `STATE-sandboxes` beside the state directory.
    pub fn beside(state_dir: &Path) -> Result<Layout, DriverError> {
        let state = std::fs::canonicalize(state_dir)
            .map_err(|e| DriverError(format!("state directory {}: {e}", state_dir.display())))?;
        Layout::new(&state, &beside(&state, "sandboxes"))
    }

    pub fn state_dir(&self) -> &Path {
        &self.state_dir
    }

    pub fn sandbox_root(&self) -> &Path {
        &self.sandbox_root
    }

    /// The uid lock files.
    pub fn uids(&self) -> PathBuf {
        self.state_dir.join("uids")
    }

    /// The sandboxes' run locks (see `run_lock.rs`), in the state directory.
    pub fn run_dir(&self) -> PathBuf {
        self.state_dir.join("run")
    }

    /// A sandbox's run lock: held by its supervisor for its life, naming its pid and start
    /// time; removed with the sandbox's files.
    pub fn run_file(&self, id: Uuid) -> PathBuf {
        self.run_dir().join(id.to_string())
    }

    /// The sandboxes' disk images (see `openshell_disk`), in the state directory.
    pub fn disks(&self) -> PathBuf {
        self.state_dir.join("disks")
    }

    /// The folder of a sandbox's log, in the state directory.
    pub fn log_dir(&self, id: Uuid) -> PathBuf {
        self.state_dir.join("sandboxes").join(id.to_string())
    }

    /// The sandbox's folder in the sandbox root (its CA bundle, its workdir).
    pub fn sandbox_dir(&self, id: Uuid) -> PathBuf {
        self.sandbox_root.join(id.to_string())
    }

    /// The agent's working directory (its HOME).
    pub fn workdir(&self, id: Uuid) -> PathBuf {
        self.sandbox_dir(id).join("work")
    }

    /// Makes a sandbox's folders: its log folder (0700), its folder in the sandbox root (0711)
    /// and, with `workdir`, its workdir (0700; the caller gives it to the agent's uid). A disk
    /// image mounted over the folder brings its own workdir: one made here would lie hidden
    /// beneath it, an inode allocated for nothing on every start.
    pub fn prepare(&self, id: Uuid, workdir: bool) -> Result<(), DriverError> {
        owned_dir(&self.state_dir.join("sandboxes"), 0o700)?;
        owned_dir(&self.log_dir(id), 0o700)?;
        owned_dir(&self.sandbox_root, 0o711)?;
        owned_dir(&self.sandbox_dir(id), 0o711)?;
        if !workdir {
            return Ok(());
        }
        // Created here, so the gateway's user owns it; a stopped sandbox's workdir (given
        // back to root, or left to a subordinate uid) is only checked to be a folder.
        let work = self.workdir(id);
        match std::fs::symlink_metadata(&work) {
            Ok(m) if m.is_dir() => Ok(()),
            Ok(_) => Err(DriverError(format!("{} is not a folder", work.display()))),
            Err(_) => {
                std::fs::create_dir(&work).map_err(|e| err(work.display(), e))?;
                std::fs::set_permissions(&work, std::fs::Permissions::from_mode(0o700))
                    .map_err(|e| err(work.display(), e))
            }
        }
    }

    /// The sandbox's log, for appending (0600, never through a symlink).
    pub fn open_log(&self, id: Uuid) -> Result<std::fs::File, DriverError> {
        log_in(&self.log_dir(id))
    }

    /// A sandbox's folders made ahead, under names no sandbox has (for a pooled start, see
    /// [`Layout::move_spare`]): its folder in the sandbox root (0711) and its log folder (0700)
    /// with an empty `supervisor.log` (0600). Nothing of any sandbox is in them.
    pub fn make_spare(&self) -> Result<Spare, DriverError> {
        let name = format!("{SPARE}{}", Uuid::new_v4());
        owned_dir(&self.state_dir.join("sandboxes"), 0o700)?;
        let spare = Spare { folder: self.sandbox_root.join(&name), log: self.state_dir.join("sandboxes").join(&name) };
        let made = (|| {
            for (dir, mode) in [(&spare.folder, 0o711), (&spare.log, 0o700)] {
                std::fs::create_dir(dir).map_err(|e| err(dir.display(), e))?;
                std::fs::set_permissions(dir, std::fs::Permissions::from_mode(mode))
                    .map_err(|e| err(dir.display(), e))?;
            }
            log_in(&spare.log).map(drop)
        })();
        match made {
            Ok(()) => Ok(spare),
            Err(e) => {
                spare.remove();
                Err(e)
            }
        }
    }

    /// Moves `spare`'s folders into place as `id`'s, each where none is yet (a rename: no
    /// inode is made while a sandbox starts, where a filesystem without a journal scans past
    /// every recently deleted one for each). What could not move is removed; [`Layout::prepare`]
    /// then checks the folders as it would any and makes what is missing.
    pub fn move_spare(&self, spare: Spare, id: Uuid) {
        let noreplace = nix::fcntl::RenameFlags::RENAME_NOREPLACE;
        let at = nix::fcntl::AT_FDCWD;
        for (from, to) in [(&spare.folder, self.sandbox_dir(id)), (&spare.log, self.log_dir(id))] {
            if nix::fcntl::renameat2(at, from.as_path(), at, to.as_path(), noreplace).is_err() {
                let _ = std::fs::remove_dir_all(from);
            }
        }
    }

    /// Removes the spare folders and run files a gateway left (it stopped with its pool's).
    pub fn remove_spares(&self) {
        for dir in [self.sandbox_root.clone(), self.state_dir.join("sandboxes"), self.run_dir()] {
            let entries = std::fs::read_dir(&dir).into_iter().flatten().flatten();
            for e in entries.filter(|e| e.file_name().to_str().is_some_and(|n| n.starts_with(SPARE))) {
                let _ = match e.file_type() {
                    Ok(t) if t.is_dir() => std::fs::remove_dir_all(e.path()),
                    _ => std::fs::remove_file(e.path()),
                };
            }
        }
    }

    /// Sandboxes an older gateway left in the old layout (a workdir under
    /// `STATE/sandboxes/ID`).
    pub fn old_layout(&self) -> Vec<Uuid> {
        let mut ids: Vec<Uuid> = std::fs::read_dir(self.state_dir.join("sandboxes"))
            .into_iter()
            .flatten()
            .flatten()
            .filter_map(|e| e.file_name().to_str()?.parse().ok())
            .filter(|id| {
                let old = self.log_dir(*id);
                ["work", "ca-bundle.pem"].iter().any(|f| std::fs::symlink_metadata(old.join(f)).is_ok())
            })
            .collect();
        ids.sort();
        ids
    }

    /// Moves the sandboxes of the old layout to the sandbox root (`running`: the sandboxes
    /// whose workloads run now). A running one is refused, naming it: its agent works in
    /// its folder under the state directory, which is about to close to it.
    pub fn migrate(&self, running: &[Uuid]) -> Result<usize, DriverError> {
        let old = self.old_layout();
        let live: Vec<String> = old.iter().filter(|id| running.contains(id)).map(Uuid::to_string).collect();
        if !live.is_empty() {
            return Err(DriverError(format!(
                "sandboxes started by an older gateway still run with their working directories in the state \
                 directory {}, which this version closes to every other uid (0700): {}. Stop them first (with the \
                 older gateway, or `openshell sandbox stop`), then start this one again",
                self.state_dir.display(),
                live.join(", ")
            )));
        }
        for id in &old {
            let (from, to) = (self.log_dir(*id), self.sandbox_dir(*id));
            let mode = std::fs::symlink_metadata(&from).map_err(|e| err(from.display(), e))?.mode() & 0o7777;
            // Keeps whether the folder was still passable (0711) or closed after a stop (0700).
            owned_dir(&to, if mode & 0o001 != 0 { 0o711 } else { 0o700 })?;
            for name in ["work", "ca-bundle.pem"] {
                let (a, b) = (from.join(name), to.join(name));
                if std::fs::symlink_metadata(&a).is_err() {
                    continue;
                }
                if std::fs::symlink_metadata(&b).is_ok() {
                    return Err(DriverError(format!(
                        "{} and {} both exist: move one away, then start again",
                        a.display(),
                        b.display()
                    )));
                }
                std::fs::rename(&a, &b).map_err(|e| {
                    DriverError(format!(
                        "moving {} to {} ({e}): the sandbox root must be on the state directory's file \
                         system, or move it by hand",
                        a.display(),
                        b.display()
                    ))
                })?;
            }
        }
        // Every log folder closes, and the folder holding them (0711 before).
        let logs = self.state_dir.join("sandboxes");
        if std::fs::symlink_metadata(&logs).is_ok() {
            owned_dir(&logs, 0o700)?;
            for e in std::fs::read_dir(&logs).map_err(|e| err(logs.display(), e))?.flatten() {
                if e.file_type().is_ok_and(|t| t.is_dir()) {
                    owned_dir(&e.path(), 0o700)?;
                }
            }
        }
        if !old.is_empty() {
            tracing::info!(count = old.len(), root = %self.sandbox_root.display(), "moved sandboxes' folders out of the state directory");
        }
        Ok(old.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn beside_names_a_sibling() {
        assert_eq!(beside(Path::new("/var/lib/openshell"), "sandboxes"), Path::new("/var/lib/openshell-sandboxes"));
        assert_eq!(beside(Path::new("/a/b/state"), "postgres"), Path::new("/a/b/state-postgres"));
    }

    fn tmp() -> PathBuf {
        let d = std::env::temp_dir().join(format!("layout-test-{}", Uuid::new_v4()));
        std::fs::create_dir_all(d.join("state")).unwrap();
        d
    }

    #[test]
    fn a_root_inside_the_state_directory_is_refused() {
        let d = tmp();
        let e = Layout::new(&d.join("state"), &d.join("state/sb")).unwrap_err();
        assert!(e.0.contains("must not contain each other"), "{e}");
        let _ = std::fs::remove_dir_all(d);
    }

    #[test]
    fn a_symlinked_root_is_refused() {
        let d = tmp();
        std::os::unix::fs::symlink("/", d.join("sb")).unwrap();
        let e = Layout::new(&d.join("state"), &d.join("sb")).unwrap_err();
        assert!(e.0.contains("is a symlink"), "{e}");
        let _ = std::fs::remove_dir_all(d);
    }

    #[test]
    fn the_old_layout_moves_unless_its_sandbox_runs() {
        let d = tmp();
        let layout = Layout::new(&d.join("state"), &d.join("sb")).unwrap();
        let (stopped, live) = (Uuid::new_v4(), Uuid::new_v4());
        for id in [stopped, live] {
            let old = layout.log_dir(id);
            std::fs::create_dir_all(old.join("work")).unwrap();
            std::fs::write(old.join("work/file"), id.to_string()).unwrap();
            std::fs::write(old.join("supervisor.log"), "log").unwrap();
        }
        std::fs::set_permissions(layout.log_dir(stopped), std::fs::Permissions::from_mode(0o700)).unwrap();
        let e = layout.migrate(&[live]).unwrap_err();
        assert!(e.0.contains(&live.to_string()) && !e.0.contains(&stopped.to_string()), "{e}");
        assert!(layout.log_dir(stopped).join("work").exists(), "a refusal moves nothing");

        assert_eq!(layout.migrate(&[]).unwrap(), 2);
        assert_eq!(std::fs::read_to_string(layout.workdir(stopped).join("file")).unwrap(), stopped.to_string());
        assert!(!layout.log_dir(stopped).join("work").exists());
        assert!(layout.log_dir(stopped).join("supervisor.log").exists(), "the log stays");
        let mode = |p: PathBuf| std::fs::metadata(p).unwrap().mode() & 0o7777;
        assert_eq!(mode(layout.sandbox_dir(stopped)), 0o700, "a closed folder stays closed");
        assert_eq!(mode(layout.log_dir(live)), 0o700);
        assert!(layout.old_layout().is_empty());
        assert_eq!(layout.migrate(&[]).unwrap(), 0, "idempotent");
        let _ = std::fs::remove_dir_all(d);
    }

    #[test]
    fn spare_folders_move_into_place_only_where_there_is_none() {
        let d = tmp();
        let layout = Layout::new(&d.join("state"), &d.join("sb")).unwrap();
        let mode = |p: PathBuf| std::fs::metadata(p).unwrap().mode() & 0o7777;
        let spares = |layout: &Layout| {
            let names =
                |dir: PathBuf| std::fs::read_dir(dir).unwrap().flatten().map(|e| e.file_name()).collect::<Vec<_>>();
            let mut all = names(layout.sandbox_root().to_path_buf());
            all.extend(names(layout.state_dir().join("sandboxes")));
            all.into_iter().filter(|n| n.to_string_lossy().starts_with(SPARE)).count()
        };
        let id = Uuid::new_v4();
        layout.move_spare(layout.make_spare().unwrap(), id);
        assert_eq!(mode(layout.sandbox_dir(id)), 0o711);
        assert_eq!(mode(layout.log_dir(id)), 0o700);
        assert_eq!(mode(layout.log_dir(id).join("supervisor.log")), 0o600);
        assert_eq!(spares(&layout), 0, "both moved");
        layout.prepare(id, true).unwrap();
        std::fs::write(layout.log_dir(id).join("supervisor.log"), "kept").unwrap();

        // Onto a sandbox whose folders exist: nothing of them is replaced, the spare goes.
        layout.move_spare(layout.make_spare().unwrap(), id);
        assert_eq!(std::fs::read_to_string(layout.log_dir(id).join("supervisor.log")).unwrap(), "kept");
        assert!(layout.workdir(id).is_dir(), "the folder that was there stays");
        assert_eq!(spares(&layout), 0, "the spare that could not move is removed");

        // A gateway that stopped left two: the next one's start removes them.
        let _left = (layout.make_spare().unwrap(), layout.make_spare().unwrap());
        assert_eq!(spares(&layout), 4);
        layout.remove_spares();
        assert_eq!(spares(&layout), 0);
        assert!(layout.sandbox_dir(id).is_dir() && layout.log_dir(id).is_dir(), "sandboxes' folders stay");
        let _ = std::fs::remove_dir_all(d);
    }
}
