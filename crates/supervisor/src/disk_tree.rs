//! The sandbox's disk handed to its init as a descriptor. The init is cloned into its mount
//! namespace while the driver still makes the disk, so the driver's mount may not be in that
//! namespace: the supervisor clones the mount into a detached tree (`open_tree`), and the init
//! attaches it at the same path in its own namespace (`move_mount`), unless the mount reached
//! it already (a host whose root mount is shared propagates it).

use std::os::fd::OwnedFd;
use std::path::Path;

pub use openshell_disk::tree::detach;

/// Attaches the detached `tree` at `path` in this process's mount namespace, unless a
/// filesystem is mounted there already (the mount was made before this namespace, or
/// propagated into it); then checks that one is.
pub fn attach(tree: Option<&OwnedFd>, path: &Path) -> std::io::Result<()> {
    if let (false, Some(tree)) = (mounted(path)?, tree) {
        openshell_disk::tree::attach(tree, path)?;
    }
    if mounted(path)? { Ok(()) } else { Err(std::io::Error::other("no filesystem is mounted there")) }
}

/// Whether a filesystem is mounted at `path` (its device differs from its parent's).
fn mounted(path: &Path) -> std::io::Result<bool> {
    use std::os::unix::fs::MetadataExt;
    let above = path.parent().unwrap_or(path);
    Ok(std::fs::symlink_metadata(path)?.dev() != std::fs::symlink_metadata(above)?.dev())
}

#[cfg(test)]
mod tests {
    use super::*;
    use nix::mount::{MntFlags, MsFlags, mount, umount2};
    use nix::sys::socket::{AddressFamily, SockFlag, SockType, socketpair};
    use std::os::fd::{AsFd, AsRawFd};

    /// A mount made after a mount namespace was cloned reaches it through the tree, and only
    /// it: the host's folder is left as it was. Needs root, as the suite runs.
    #[test]
    fn a_tree_detached_on_the_host_attaches_in_a_namespace_made_before_the_mount() {
        let dir = std::env::temp_dir().join(format!("openshell-disk-tree-{}", std::process::id()));
        let at = dir.join("sandbox");
        std::fs::create_dir_all(&at).unwrap();
        let none: Option<&str> = None;
        let (ours, theirs) = socketpair(AddressFamily::Unix, SockType::Datagram, None, SockFlag::empty()).unwrap();
        // SAFETY: the child makes system calls and allocates (glibc's fork resets the
        // allocator's locks), then exits without returning.
        let child = match unsafe { nix::unistd::fork() }.unwrap() {
            nix::unistd::ForkResult::Child => {
                // Bounded, should the parent fail before it sends the tree.
                let wait = nix::sys::time::TimeVal::new(10, 0);
                let _ = nix::sys::socket::setsockopt(&theirs, nix::sys::socket::sockopt::ReceiveTimeout, &wait);
                let attached = (|| -> Result<bool, String> {
                    nix::sched::unshare(nix::sched::CloneFlags::CLONE_NEWNS).map_err(|e| e.to_string())?;
                    mount(none, "/", none, MsFlags::MS_REC | MsFlags::MS_PRIVATE, none).map_err(|e| e.to_string())?;
                    crate::protocol::send(theirs.as_fd(), &"ready", &[]).map_err(|e| e.to_string())?;
                    let (_, fds): (String, _) = crate::protocol::recv(theirs.as_fd()).map_err(|e| e.to_string())?;
                    attach(fds.first(), &at).map_err(|e| e.to_string())?;
                    Ok(at.join("marker").exists())
                })();
                // No output: another test thread may have held stderr's lock at the fork.
                std::process::exit(match attached {
                    Ok(true) => 0,
                    Ok(false) => 2,
                    Err(_) => 1,
                })
            }
            nix::unistd::ForkResult::Parent { child } => child,
        };
        let _: (String, _) = crate::protocol::recv(ours.as_fd()).unwrap();
        // The disk is mounted on the host only now, after the namespace was made.
        mount(Some("tmpfs"), &at, Some("tmpfs"), MsFlags::empty(), none).unwrap();
        std::fs::write(at.join("marker"), b"on the disk").unwrap();
        let tree = detach(&at).unwrap();
        umount2(&at, MntFlags::MNT_DETACH).unwrap();
        assert!(attach(None, &at).is_err(), "nothing is mounted on the host any more");
        crate::protocol::send(ours.as_fd(), &"tree", &[tree.as_raw_fd()]).unwrap();
        let status = nix::sys::wait::waitpid(child, None).unwrap();
        assert_eq!(status, nix::sys::wait::WaitStatus::Exited(child, 0), "the namespace sees the disk");
        assert!(!at.join("marker").exists(), "the host's folder stays empty");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
