//! How the process driver hands a supervisor what it holds for it (crates/driver/src/claim.rs
//! writes it). Its standard input is a Unix socket; the first message on it is the claim:
//! a 4-byte big-endian length, then that many bytes of JSON, with descriptors attached. The
//! credential and the environment follow (`read_handoff` in main.rs).
//!
//! - A supervisor started for its sandbox (`--claim`) gets `{}` and two descriptors: its uid
//!   lock and its run lock. Passing them, rather than having them inherited, lets the driver
//!   spawn it without forking the gateway.
//! - A warm supervisor (`--warm`), started before its sandbox existed so that a start does
//!   not wait for the binary to load, gets `{"args": [...], "dir": "..."}`, the same two
//!   locks and its log. Its arguments then name the nil id; it writes its sandbox's id over
//!   them (see [`show_id`]), so the driver finds it by its arguments as any other, and says
//!   so with one byte back before the driver hands it the credential.

use std::io::Read;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

use nix::sys::socket::{ControlMessageOwned, MsgFlags, recvmsg};

/// The id a warm supervisor's arguments name until it is claimed.
pub const UNCLAIMED: &str = "00000000-0000-0000-0000-000000000000";
/// The largest claim accepted.
const MAX_CLAIM: usize = 64 * 1024;

/// What a warm supervisor's claim adds: the arguments it runs with and its folder.
#[derive(serde::Deserialize, Default)]
struct Claim {
    args: Option<Vec<String>>,
    dir: Option<std::path::PathBuf>,
}

/// Reads the claim from standard input and puts its descriptors in place: the uid lock on 3,
/// the run lock on 4 (both close-on-exec), and a warm supervisor's log on 1 and 2. Returns a
/// warm supervisor's arguments, after showing its sandbox's id in them. `None` when a warm
/// supervisor's driver went away unclaimed.
pub fn receive(warm: bool) -> Result<Option<Vec<String>>, String> {
    let mut len = [0u8; 4];
    let mut space = nix::cmsg_space!([RawFd; 3]);
    let (got, fds) = {
        let mut iov = [std::io::IoSliceMut::new(&mut len)];
        let msg = recvmsg::<()>(0, &mut iov, Some(&mut space), MsgFlags::MSG_CMSG_CLOEXEC)
            .map_err(|e| format!("reading the claim on stdin: {e}"))?;
        let mut fds = Vec::new();
        for c in msg.cmsgs().map_err(|e| format!("reading the claim's descriptors: {e}"))? {
            if let ControlMessageOwned::ScmRights(received) = c {
                // SAFETY: the kernel just gave us these descriptors.
                fds.extend(received.into_iter().map(|f| unsafe { OwnedFd::from_raw_fd(f) }));
            }
        }
        (msg.bytes, fds)
    };
    if got == 0 && warm {
        return Ok(None);
    }
    // SAFETY: descriptor 0 lives for the process; ManuallyDrop keeps it open.
    let mut stdin = std::mem::ManuallyDrop::new(unsafe { std::fs::File::from_raw_fd(0) });
    stdin.read_exact(&mut len[got..]).map_err(|e| format!("reading the claim's length: {e}"))?;
    let n = u32::from_be_bytes(len) as usize;
    if n > MAX_CLAIM {
        return Err(format!("a claim of {n} bytes (at most {MAX_CLAIM})"));
    }
    let mut body = vec![0u8; n];
    stdin.read_exact(&mut body).map_err(|e| format!("reading the claim: {e}"))?;
    let claim: Claim = serde_json::from_slice(&body).map_err(|e| format!("the claim is not JSON: {e}"))?;
    let expected = if warm { 3 } else { 2 };
    if fds.len() != expected {
        return Err(format!("the claim carried {} descriptors, not {expected}", fds.len()));
    }
    // Above 4 first, so no descriptor's move overwrites another's (the kernel may have given
    // them the very numbers they go to).
    let moved = fds
        .iter()
        // SAFETY: fcntl just made this descriptor, ours alone.
        .map(|fd| {
            nix::fcntl::fcntl(fd, nix::fcntl::FcntlArg::F_DUPFD_CLOEXEC(5)).map(|f| unsafe { OwnedFd::from_raw_fd(f) })
        })
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| format!("moving the claimed descriptors: {e}"))?;
    // The originals close before their numbers are taken.
    drop(fds);
    let fds = moved;
    let place = |fd: &OwnedFd, to: RawFd, flags: libc::c_int| {
        // SAFETY: dup3 on descriptor numbers: `to` is one this process keeps for what it is
        // handed, and `fd` is above it.
        if unsafe { libc::dup3(fd.as_raw_fd(), to, flags) } < 0 {
            return Err(format!("placing a claimed descriptor on {to}: {}", std::io::Error::last_os_error()));
        }
        Ok(())
    };
    place(&fds[0], 3, libc::O_CLOEXEC)?;
    place(&fds[1], 4, libc::O_CLOEXEC)?;
    if !warm {
        return Ok(None);
    }
    // The log is the init's and the main command's stderr too: not close-on-exec.
    place(&fds[2], 1, 0)?;
    place(&fds[2], 2, 0)?;
    let (Some(args), Some(dir)) = (claim.args, claim.dir) else {
        return Err("a warm supervisor's claim names no arguments or folder".into());
    };
    let id = args
        .iter()
        .position(|a| a == "--sandbox-id")
        .and_then(|i| args.get(i + 1))
        .ok_or("the claim's arguments name no --sandbox-id")?;
    std::env::set_current_dir(&dir).map_err(|e| format!("entering {}: {e}", dir.display()))?;
    show_id(id)?;
    // Claimed: the driver names this process in the run file, then sends the credential.
    nix::unistd::write(&*stdin, b"!").map_err(|e| format!("answering the claim: {e}"))?;
    Ok(Some(args))
}

/// Writes `id` over [`UNCLAIMED`] in this process's arguments, as /proc shows them (the
/// memory between `arg_start` and `arg_end` of /proc/self/stat; PostgreSQL sets its process
/// titles the same way). The id has the placeholder's length, so nothing else moves.
fn show_id(id: &str) -> Result<(), String> {
    if id.len() != UNCLAIMED.len() || id.parse::<uuid::Uuid>().is_err() {
        return Err(format!("the claimed sandbox id {id:?} is not a hyphenated uuid"));
    }
    let stat = std::fs::read_to_string("/proc/self/stat").map_err(|e| format!("/proc/self/stat: {e}"))?;
    // Fields after the command name's closing parenthesis start at field 3; the arguments are
    // fields 48 and 49.
    let fields: Vec<&str> =
        stat.rsplit_once(')').map(|(_, rest)| rest.split_whitespace().collect()).unwrap_or_default();
    let field = |n: usize| fields.get(n - 3).and_then(|f| f.parse::<usize>().ok());
    let (Some(start), Some(end)) = (field(48), field(49)) else {
        return Err("/proc/self/stat names no argument area".into());
    };
    let needle = [b"--sandbox-id\0".as_slice(), UNCLAIMED.as_bytes(), b"\0"].concat();
    // SAFETY: the kernel placed this process's argument strings in [start, end) of its own
    // stack at exec, and nothing else refers to them while this single-threaded process reads
    // and writes them here (the standard library copies arguments when asked for them).
    let area = unsafe { std::slice::from_raw_parts_mut(start as *mut u8, end.saturating_sub(start)) };
    let at = area
        .windows(needle.len())
        .position(|w| w == needle.as_slice())
        .ok_or("this process's arguments hold no unclaimed --sandbox-id")?;
    let from = at + b"--sandbox-id\0".len();
    area[from..from + id.len()].copy_from_slice(id.as_bytes());
    Ok(())
}

/// Whether this process runs warm: started as `openshell-supervisor --warm ...`.
pub fn is_warm() -> bool {
    std::env::args_os().nth(1).is_some_and(|a| a == "--warm")
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_claimed_id_must_be_a_hyphenated_uuid() {
        assert!(super::show_id("not-an-id").unwrap_err().contains("not a hyphenated uuid"));
        assert!(super::show_id("0123456789abcdef0123456789abcdef").is_err());
    }

    #[test]
    fn the_placeholder_must_be_in_the_arguments() {
        // The test binary was not started with an unclaimed --sandbox-id.
        let e = super::show_id("01234567-89ab-cdef-0123-456789abcdef").unwrap_err();
        assert!(e.contains("no unclaimed --sandbox-id"), "{e}");
    }

    #[test]
    fn the_argument_area_is_found() {
        let stat = std::fs::read_to_string("/proc/self/stat").unwrap();
        let (_, rest) = stat.rsplit_once(')').unwrap();
        let fields: Vec<&str> = rest.split_whitespace().collect();
        let start: usize = fields[48 - 3].parse().unwrap();
        let end: usize = fields[49 - 3].parse().unwrap();
        let cmdline = std::fs::read("/proc/self/cmdline").unwrap();
        assert_eq!(end - start, cmdline.len());
    }
}
