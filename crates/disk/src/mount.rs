//! Mounting a sandbox's image at its folder, and what the filesystem holds once mounted.

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;

use nix::mount::{MntFlags, MsFlags};

use crate::{DiskError, loopdev};

/// The agent's working directory (its HOME) inside the sandbox's filesystem.
pub const WORK: &str = "work";
/// The agent's /tmp inside the sandbox's filesystem (the sandbox's init binds it at /tmp).
pub const TMP: &str = "tmp";

fn err(what: impl std::fmt::Display, e: impl std::fmt::Display) -> DiskError {
    DiskError(format!("{what}: {e}"))
}

/// Mounts `image` at `at` (an empty folder) through a loop device: no device files, no
/// set-uid programs, no access times. Then lays it out for a sandbox whose agent is `uid`:
/// the root 0711 (agents pass through, list nothing), `work/` 0700 the agent's, `tmp/` 1777.
pub fn mount(image: &Path, at: &Path, uid: Option<u32>) -> Result<(), DiskError> {
    if is_mounted(at) {
        return Err(DiskError(format!("{} already has a filesystem mounted", at.display())));
    }
    let device = loopdev::attach(image)?;
    let flags = MsFlags::MS_NODEV | MsFlags::MS_NOSUID | MsFlags::MS_NOATIME;
    nix::mount::mount(Some(&device.path), at, Some("ext4"), flags, Some("noinit_itable"))
        .map_err(|e| err(format!("mounting {} ({}) at {}", image.display(), device.path.display(), at.display()), e))?;
    // The mount holds the device now; ours closes, and the device detaches with the unmount.
    drop(device);
    let laid = lay_out(at, uid);
    if laid.is_err() {
        let _ = unmount(at);
    }
    laid
}

fn lay_out(at: &Path, uid: Option<u32>) -> Result<(), DiskError> {
    std::fs::set_permissions(at, std::fs::Permissions::from_mode(0o711)).map_err(|e| err(at.display(), e))?;
    let _ = std::fs::remove_dir(at.join("lost+found"));
    for (name, mode) in [(WORK, 0o700), (TMP, 0o1777)] {
        let dir = at.join(name);
        match std::fs::create_dir(&dir) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(err(dir.display(), e)),
        }
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(mode)).map_err(|e| err(dir.display(), e))?;
    }
    if let Some(uid) = uid {
        let work = at.join(WORK);
        std::os::unix::fs::lchown(&work, Some(uid), Some(uid)).map_err(|e| err(work.display(), e))?;
    }
    Ok(())
}

/// Whether a filesystem is mounted at `at` (its device differs from its parent's).
pub fn is_mounted(at: &Path) -> bool {
    let (Ok(here), Some(Ok(above))) = (std::fs::symlink_metadata(at), at.parent().map(std::fs::symlink_metadata))
    else {
        return false;
    };
    here.is_dir() && here.dev() != above.dev()
}

/// Unmounts the filesystem at `at`, if one is mounted; one still in use (it should not be: the
/// sandbox's processes are gone) is detached now and released when its last user goes.
pub fn unmount(at: &Path) -> Result<(), DiskError> {
    if !is_mounted(at) {
        return Ok(());
    }
    match nix::mount::umount2(at, MntFlags::UMOUNT_NOFOLLOW) {
        Ok(()) => Ok(()),
        Err(nix::errno::Errno::EBUSY) => {
            tracing::warn!(path = %at.display(), "a sandbox's filesystem is still in use: detaching it");
            nix::mount::umount2(at, MntFlags::MNT_DETACH | MntFlags::UMOUNT_NOFOLLOW)
                .map_err(|e| err(format!("detaching {}", at.display()), e))
        }
        Err(nix::errno::Errno::EINVAL) => Ok(()),
        Err(e) => Err(err(format!("unmounting {}", at.display()), e)),
    }
}
