//! A sandbox's files on this host, for both real drivers: its disk (made and mounted at its
//! folder before its supervisor starts, unmounted when it stops) and, once removed, nothing:
//! not its disk, its folder in the sandbox root or its log folder in the state directory.
//!
//! Disk work is blocking (a file copy, ioctls, mount(2)): it runs off the async threads.

use std::path::Path;
use std::sync::Arc;

use openshell_disk::{Backend, Disks, Prepared};
use uuid::Uuid;

use crate::layout::Layout;
use crate::{DriverError, StartSpec};

fn blocking_err(e: tokio::task::JoinError) -> DriverError {
    DriverError(format!("disk task: {e}"))
}

/// The flags that tell a sandbox's supervisor where its disk is (see `openshell-supervisor --help`).
pub fn supervisor_flags(backend: Backend, disk_bytes: u64) -> Vec<String> {
    match backend {
        Backend::Image => vec!["--tmp-on-disk".into()],
        Backend::Memory => vec!["--disk-tmpfs".into(), disk_bytes.to_string()],
        Backend::Unbounded => Vec::new(),
    }
}

/// Makes the sandbox's disk (after the room check under the disks' lock) and mounts it at its
/// folder, laid out: `work/` (the caller gives it to the agent's uid) and `tmp/`. A disk made
/// ahead (`prepared`, of the sandbox's size) is taken instead when it can be.
pub async fn make_disk(
    disks: &Arc<Disks>,
    layout: &Layout,
    spec: &StartSpec,
    prepared: Option<Prepared>,
) -> Result<(), DriverError> {
    let (disks, id, bytes, at) = (disks.clone(), spec.id, spec.disk_bytes, layout.sandbox_dir(spec.id));
    tokio::task::spawn_blocking(move || {
        if let Some(prepared) = prepared {
            match disks.take(prepared, id, &at) {
                Ok(()) => return Ok(()),
                Err(e) => tracing::warn!(sandbox = %id, "a disk made ahead could not be taken; making one: {e}"),
            }
        }
        disks.create(id, bytes)?;
        let mounted = disks.mount(id, &at, None);
        if mounted.is_err() {
            let _ = disks.remove(id, &at);
        }
        mounted
    })
    .await
    .map_err(blocking_err)?
    .map_err(|e| DriverError(format!("the sandbox's disk: {e}")))
}

/// A stopped sandbox's disk: unmounted, its image kept until its files are removed.
pub async fn release_disk(disks: &Arc<Disks>, layout: &Layout, id: Uuid) -> Result<(), DriverError> {
    let (disks, at) = (disks.clone(), layout.sandbox_dir(id));
    tokio::task::spawn_blocking(move || disks.release(id, &at))
        .await
        .map_err(blocking_err)?
        .map_err(|e| DriverError(format!("sandbox {id}'s disk: {e}")))
}

/// Removes everything of a sandbox whose workload is gone: its disk, its folder and its log.
pub async fn remove(disks: &Arc<Disks>, layout: &Layout, id: Uuid) -> Result<(), DriverError> {
    let (disks, layout) = (disks.clone(), layout.clone());
    tokio::task::spawn_blocking(move || {
        let dir = layout.sandbox_dir(id);
        disks.remove(id, &dir).map_err(|e| DriverError(format!("sandbox {id}'s disk: {e}")))?;
        // Never descend into a filesystem still mounted there (the unmount above failed).
        if openshell_disk::mount::is_mounted(&dir) {
            return Err(DriverError(format!("{} is still mounted", dir.display())));
        }
        remove_tree(&dir)?;
        remove_tree(&layout.log_dir(id))
    })
    .await
    .map_err(blocking_err)?
}

/// `remove_dir_all` (it never follows a symlink out), where a missing folder is fine.
fn remove_tree(dir: &Path) -> Result<(), DriverError> {
    match std::fs::remove_dir_all(dir) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(DriverError(format!(
            "removing {}: {e}{}",
            dir.display(),
            if nix::unistd::geteuid().is_root() {
                ""
            } else {
                " (files an agent's uid owns from before its disk was a tmpfs: remove them as root)"
            }
        ))),
    }
}

/// Every sandbox with files here: a disk, a folder in the sandbox root, a log folder or a run
/// file.
pub fn with_files(disks: &Disks, layout: &Layout) -> Vec<Uuid> {
    let ids_in = |dir: &Path| -> Vec<Uuid> {
        std::fs::read_dir(dir)
            .into_iter()
            .flatten()
            .flatten()
            .filter_map(|e| e.file_name().to_str()?.parse().ok())
            .collect()
    };
    let mut ids = disks.ids();
    ids.extend(ids_in(layout.sandbox_root()));
    ids.extend(ids_in(&layout.state_dir().join("sandboxes")));
    // A start refused before it made any folder leaves only its run file.
    ids.extend(ids_in(&layout.run_dir()));
    ids.sort();
    ids.dedup();
    ids
}
