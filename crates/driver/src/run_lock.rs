//! A sandbox's run lock, `STATE/run/ID` ([`Layout::run_file`]): its supervisor holds a lock on
//! it for its whole life (the driver takes it before the spawn and hands it over on
//! descriptor 4), and the file names that supervisor (pid and start time). One sandbox's
//! supervisor is then found by reading one file, not every process on the host, and two
//! starts of one sandbox cannot both spawn one: the second finds the lock held.
//!
//! The lock is an open file description lock (`F_OFD_SETLK`, whole file, write): like
//! `flock` it belongs to the open file and so passes to the supervisor with the descriptor,
//! but unlike `flock` it can be tested without taking it (`F_OFD_GETLK`), so looking for a
//! supervisor never makes a concurrent start believe one runs.

use std::fs::File;
use std::io::{Read, Seek, Write};
use std::os::fd::AsRawFd;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::PathBuf;

use uuid::Uuid;

use crate::DriverError;
use crate::layout::{Layout, SPARE, owned_dir};

/// A supervisor as the file names it: pid and start time (clock ticks after boot, as in
/// /proc/PID/stat), checked by the caller against the live process.
pub type Named = (i32, u64);

/// A sandbox's run file, locked by this driver (before a spawn, or to remove it).
pub struct RunLock {
    file: File,
    path: PathBuf,
}

/// What a look at a sandbox's run file found.
pub enum Probe {
    /// No run file: no supervisor of this sandbox runs (see [`Layout::run_file`]).
    Missing,
    /// The lock is free; the file may still name a supervisor a gateway before run locks
    /// started (adopted at start-up), which holds no lock.
    Free(Option<Named>),
    /// A supervisor holds it (or a start is spawning one).
    Held(Option<Named>),
}

fn err(path: &std::path::Path, what: &str, e: impl std::fmt::Display) -> DriverError {
    DriverError(format!("sandbox run lock {}: {what}: {e}", path.display()))
}

fn open(path: &std::path::Path, create: bool) -> std::io::Result<File> {
    std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(create)
        .truncate(false)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(path)
}

fn whole_file(kind: libc::c_int) -> libc::flock {
    // SAFETY: flock is plain data; zero is a valid value of each field (l_pid must be 0).
    let mut l: libc::flock = unsafe { std::mem::zeroed() };
    l.l_type = kind as libc::c_short;
    l.l_whence = libc::SEEK_SET as libc::c_short;
    l
}

/// Whether the lock was taken (false: another open file holds it).
fn try_lock(file: &File) -> std::io::Result<bool> {
    let mut l = whole_file(libc::F_WRLCK);
    // SAFETY: fcntl on a descriptor we own with a valid flock.
    if unsafe { libc::fcntl(file.as_raw_fd(), libc::F_OFD_SETLK, &mut l) } == 0 {
        return Ok(true);
    }
    let e = std::io::Error::last_os_error();
    match e.raw_os_error() {
        Some(libc::EAGAIN) | Some(libc::EACCES) => Ok(false),
        _ => Err(e),
    }
}

/// Whether another open file holds the lock, without taking it.
fn held(file: &File) -> std::io::Result<bool> {
    let mut l = whole_file(libc::F_WRLCK);
    // SAFETY: fcntl on a descriptor we own with a valid flock.
    if unsafe { libc::fcntl(file.as_raw_fd(), libc::F_OFD_GETLK, &mut l) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(l.l_type != libc::F_UNLCK as libc::c_short)
}

/// The supervisor the file names: its first line, `PID START`.
fn named(file: &File) -> std::io::Result<Option<Named>> {
    let mut text = String::new();
    let mut f = file;
    f.rewind()?;
    f.take(128).read_to_string(&mut text)?;
    let Some((line, _)) = text.split_once('\n') else { return Ok(None) };
    let mut it = line.split(' ');
    Ok(match (it.next().and_then(|p| p.parse().ok()), it.next().and_then(|s| s.parse().ok()), it.next()) {
        (Some(pid), Some(start), None) if pid > 0 => Some((pid, start)),
        _ => None,
    })
}

impl RunLock {
    /// Takes the sandbox's run lock, making its file: `None` when it is held (a supervisor of
    /// this sandbox runs, or another start is spawning one).
    pub fn take(layout: &Layout, id: Uuid) -> Result<Option<RunLock>, DriverError> {
        owned_dir(&layout.run_dir(), 0o700)?;
        let path = layout.run_file(id);
        // A removal unlinks the file under its lock: a lock on a file no longer at `path`
        // excludes nobody, so take it again on the new one.
        for _ in 0..3 {
            let file = open(&path, true).map_err(|e| err(&path, "open", e))?;
            if !try_lock(&file).map_err(|e| err(&path, "lock", e))? {
                return Ok(None);
            }
            let ours = file.metadata().map_err(|e| err(&path, "stat", e))?;
            match std::fs::symlink_metadata(&path) {
                Ok(m) if m.dev() == ours.dev() && m.ino() == ours.ino() => return Ok(Some(RunLock { file, path })),
                _ => continue,
            }
        }
        Err(err(&path, "lock", "the file was replaced three times while locking it"))
    }

    /// A run file made ahead and locked, under a spare name in the run folder: a pooled start
    /// renames it to its sandbox's ([`RunLock::claim`]) instead of making one then.
    pub fn spare(layout: &Layout) -> Result<RunLock, DriverError> {
        owned_dir(&layout.run_dir(), 0o700)?;
        let path = layout.run_dir().join(format!("{SPARE}{}", Uuid::new_v4()));
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(&path)
            .map_err(|e| err(&path, "create", e))?;
        let spare = RunLock { file, path };
        if !try_lock(&spare.file).map_err(|e| err(&spare.path, "lock", e))? {
            let _ = spare.remove();
            return Err(DriverError("a run file made ahead was locked by another".into()));
        }
        Ok(spare)
    }

    /// This spare as `id`'s run lock, held: renamed to the sandbox's run file unless that
    /// exists (a supervisor of the sandbox runs, or its start did), which [`RunLock::take`]
    /// then decides. `None` removes the spare.
    pub fn claim(self, layout: &Layout, id: Uuid) -> Option<RunLock> {
        let to = layout.run_file(id);
        let (at, noreplace) = (nix::fcntl::AT_FDCWD, nix::fcntl::RenameFlags::RENAME_NOREPLACE);
        match nix::fcntl::renameat2(at, self.path.as_path(), at, to.as_path(), noreplace) {
            Ok(()) => Some(RunLock { file: self.file, path: to }),
            Err(_) => {
                let _ = self.remove();
                None
            }
        }
    }

    /// Takes the lock of an existing run file (`Ok(Err(probe))` when it is missing or held).
    pub fn take_existing(layout: &Layout, id: Uuid) -> Result<Result<RunLock, Probe>, DriverError> {
        let path = layout.run_file(id);
        let file = match open(&path, false) {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Err(Probe::Missing)),
            Err(e) => return Err(err(&path, "open", e)),
        };
        if !try_lock(&file).map_err(|e| err(&path, "lock", e))? {
            return Ok(Err(Probe::Held(named(&file).map_err(|e| err(&path, "read", e))?)));
        }
        Ok(Ok(RunLock { file, path }))
    }

    /// Looks at the sandbox's run file without taking its lock.
    pub fn probe(layout: &Layout, id: Uuid) -> Result<Probe, DriverError> {
        let path = layout.run_file(id);
        let file = match open(&path, false) {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Probe::Missing),
            Err(e) => return Err(err(&path, "open", e)),
        };
        let named = named(&file).map_err(|e| err(&path, "read", e))?;
        Ok(if held(&file).map_err(|e| err(&path, "lock", e))? { Probe::Held(named) } else { Probe::Free(named) })
    }

    /// The descriptor a supervisor inherits (as its descriptor 4) to hold the lock.
    pub fn fd(&self) -> std::os::fd::RawFd {
        self.file.as_raw_fd()
    }

    pub fn named(&self) -> Result<Option<Named>, DriverError> {
        named(&self.file).map_err(|e| err(&self.path, "read", e))
    }

    /// Names the supervisor (`None`: nothing, its start failed).
    pub fn write(&self, supervisor: Option<Named>) -> Result<(), DriverError> {
        let line = supervisor.map(|(pid, start)| format!("{pid} {start}\n")).unwrap_or_default();
        let mut f = &self.file;
        f.rewind()
            .and_then(|_| f.write_all(line.as_bytes()))
            .and_then(|_| self.file.set_len(line.len() as u64))
            .map_err(|e| err(&self.path, "write", e))
    }

    /// Removes the file, still locked: a start that opened it before finds it replaced once it
    /// has the lock, and takes the lock of a new one.
    pub fn remove(self) -> Result<(), DriverError> {
        match std::fs::remove_file(&self.path) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(err(&self.path, "remove", e)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn layout() -> (PathBuf, Layout) {
        let d = std::env::temp_dir().join(format!("run-lock-test-{}", Uuid::new_v4()));
        std::fs::create_dir_all(d.join("state")).unwrap();
        let layout = Layout::new(&d.join("state"), &d.join("sandboxes")).unwrap();
        (d, layout)
    }

    #[test]
    fn a_spare_run_file_becomes_a_sandboxs_lock_only_where_it_has_none() {
        let (d, layout) = layout();
        let (a, b) = (Uuid::new_v4(), Uuid::new_v4());
        // Claimed: the sandbox's run file, its lock held by the claim. Made ahead in the gateway,
        // it reaches no process the gateway starts meanwhile (a pooled supervisor, its init).
        let spare = RunLock::spare(&layout).unwrap();
        // SAFETY: fcntl on a descriptor the spare owns.
        let flags = unsafe { libc::fcntl(spare.fd(), libc::F_GETFD) };
        assert!(flags >= 0 && flags & libc::FD_CLOEXEC != 0, "a spare run file is close-on-exec");
        let run = spare.claim(&layout, a).expect("a has no run file");
        assert!(matches!(RunLock::probe(&layout, a).unwrap(), Probe::Held(None)));
        assert!(RunLock::take(&layout, a).unwrap().is_none(), "a second start of a spawns nothing");
        drop(run);
        // Where a run file exists, the spare replaces nothing and goes.
        let held = RunLock::take(&layout, b).unwrap().expect("b's lock");
        assert!(RunLock::spare(&layout).unwrap().claim(&layout, b).is_none());
        assert!(RunLock::take(&layout, b).unwrap().is_none(), "b's lock is still the first start's");
        drop(held);
        // Left behind by a gateway that stopped: removed with the spare folders.
        let _left = RunLock::spare(&layout).unwrap();
        layout.remove_spares();
        let names: Vec<String> = std::fs::read_dir(layout.run_dir())
            .unwrap()
            .flatten()
            .filter_map(|e| e.file_name().into_string().ok())
            .collect();
        assert!(names.iter().all(|n| !n.starts_with(SPARE)), "{names:?}");
        assert_eq!(names.len(), 2, "a's and b's run files: {names:?}");
        let _ = std::fs::remove_dir_all(d);
    }
}
