//! A mounted filesystem as a detached tree: copied from where it is mounted (`open_tree`) and
//! attached elsewhere, or in another mount namespace (`move_mount`). A detached tree keeps its
//! filesystem mounted until it is attached or its last descriptor closes.

use std::ffi::CString;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

fn c_path(path: &Path) -> std::io::Result<CString> {
    CString::new(path.as_os_str().as_bytes()).map_err(std::io::Error::other)
}

/// A detached copy of the mount at `path` (its flags kept), closed on exec.
pub fn detach(path: &Path) -> std::io::Result<OwnedFd> {
    let c = c_path(path)?;
    let flags = libc::OPEN_TREE_CLONE | libc::OPEN_TREE_CLOEXEC as libc::c_uint;
    // SAFETY: open_tree reads the NUL-terminated path and returns a new descriptor or -1.
    let fd = unsafe { libc::syscall(libc::SYS_open_tree, libc::AT_FDCWD, c.as_ptr(), flags) };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: the kernel just gave us this descriptor, owned by no one else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as i32) })
}

/// Attaches the detached `tree` at `path`, in this process's mount namespace.
pub fn attach(tree: &OwnedFd, path: &Path) -> std::io::Result<()> {
    let c = c_path(path)?;
    let empty = CString::default();
    // SAFETY: move_mount reads the two NUL-terminated paths; the descriptor is ours.
    let r = unsafe {
        libc::syscall(
            libc::SYS_move_mount,
            tree.as_raw_fd(),
            empty.as_ptr(),
            libc::AT_FDCWD,
            c.as_ptr(),
            libc::MOVE_MOUNT_F_EMPTY_PATH,
        )
    };
    if r < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}
