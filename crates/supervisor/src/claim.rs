//! How a supervisor the process driver started gets what the driver holds for it
//! (crates/driver/src/claim.rs): its standard input is a Unix socket, and the first byte on it
//! carries two descriptors, its uid lock and its run lock; the credential and the environment
//! follow (`read_handoff` in main.rs). The driver passes them this way, rather than placing
//! them before the exec, so that it can spawn the supervisor without forking the gateway.

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

use nix::sys::socket::{ControlMessageOwned, MsgFlags, recvmsg};

/// Reads the claim from standard input and puts the uid lock on descriptor 3 and the run lock
/// on 4, both close-on-exec (where a supervisor started otherwise inherits them).
pub fn receive() -> Result<(), String> {
    let mut byte = [0u8; 1];
    let (got, fds) = read_with_descriptors(&mut byte)?;
    if got != 1 || fds.len() != 2 {
        return Err(format!(
            "the claim on stdin carried {got} byte(s) and {} descriptor(s), not 1 and 2; the supervisor is started by \
             the gateway's driver",
            fds.len()
        ));
    }
    place(fds, &[(0, 3, true), (1, 4, true)])
}

/// Reads into `buf` from standard input (one message) with the descriptors attached to it
/// (at most 3, close-on-exec); returns how many bytes came.
pub fn read_with_descriptors(buf: &mut [u8]) -> Result<(usize, Vec<OwnedFd>), String> {
    let mut space = nix::cmsg_space!([RawFd; 3]);
    let mut iov = [std::io::IoSliceMut::new(buf)];
    let msg = recvmsg::<()>(0, &mut iov, Some(&mut space), MsgFlags::MSG_CMSG_CLOEXEC)
        .map_err(|e| format!("reading the claim on stdin: {e}"))?;
    let mut fds = Vec::new();
    for c in msg.cmsgs().map_err(|e| format!("reading the claim's descriptors: {e}"))? {
        if let ControlMessageOwned::ScmRights(received) = c {
            // SAFETY: the kernel just gave us these descriptors.
            fds.extend(received.into_iter().map(|f| unsafe { OwnedFd::from_raw_fd(f) }));
        }
    }
    Ok((msg.bytes, fds))
}

/// Puts received descriptors at the numbers this process keeps for them: for each
/// `(i, to, cloexec)`, `fds[i]` on descriptor `to`.
pub fn place(fds: Vec<OwnedFd>, at: &[(usize, RawFd, bool)]) -> Result<(), String> {
    // Above the highest target first, so no move overwrites another's source (the kernel may
    // have given them the very numbers they go to).
    let above = at.iter().map(|(_, to, _)| to + 1).max().unwrap_or(0);
    let moved = fds
        .iter()
        .map(|fd| {
            // SAFETY: fcntl just made this descriptor, ours alone.
            nix::fcntl::fcntl(fd, nix::fcntl::FcntlArg::F_DUPFD_CLOEXEC(above))
                .map(|f| unsafe { OwnedFd::from_raw_fd(f) })
        })
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| format!("moving the claimed descriptors: {e}"))?;
    // The originals close before their numbers are taken.
    drop(fds);
    for &(i, to, cloexec) in at {
        let fd = moved.get(i).ok_or_else(|| format!("no claimed descriptor {i}"))?;
        let flags = if cloexec { libc::O_CLOEXEC } else { 0 };
        // SAFETY: dup3 on descriptor numbers: `to` is one this process keeps for what it is
        // handed, and `fd` is above it.
        if unsafe { libc::dup3(fd.as_raw_fd(), to, flags) } < 0 {
            return Err(format!("placing a claimed descriptor on {to}: {}", std::io::Error::last_os_error()));
        }
    }
    Ok(())
}
