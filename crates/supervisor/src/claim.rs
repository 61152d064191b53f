//! How a supervisor the process driver started gets what the driver holds for it
//! (crates/driver/src/claim.rs): its standard input is a Unix socket, and the first byte on it
//! carries two descriptors, its uid lock and its run lock; the credential and the environment
//! follow (`read_handoff` in main.rs), and last the line that says the sandbox's files are in
//! place ([`files_in_place`]). The driver passes them this way, rather than placing
//! them before the exec, so that it can spawn the supervisor without forking the gateway.

use std::io::{BufRead, Read};
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

/// The driver's last line on stdin: the sandbox's files (its disk) are in place.
const FILES_IN_PLACE: &str = "start";

/// The longest last line accepted (the gateway bounds the policy it carries well below).
const MAX_START_LINE: u64 = 4 << 20;

/// What the last line may bring (`--start-data`): what a connect answers, read by the gateway
/// for this supervisor's credential while the driver started it.
#[derive(Debug, PartialEq, serde::Deserialize)]
pub struct StartData {
    policy_version: i32,
    policy: String,
    boundaries: String,
}

impl StartData {
    /// The connect's answer this stands for, for the sandbox `sandbox_id` named `name`.
    pub fn into_response(self, sandbox_id: String, name: String) -> openshell_proto::v1::ConnectResponse {
        openshell_proto::v1::ConnectResponse {
            sandbox_id,
            name,
            policy_json: self.policy,
            policy_version: self.policy_version,
            boundaries_json: self.boundaries,
        }
    }
}

/// Waits for the driver's last line, which it sends once the sandbox's disk is mounted (it
/// makes it while this supervisor loads), with what the supervisor starts with when the
/// gateway read it. Input that ends before it means the driver abandoned the start: nothing of
/// the sandbox runs.
pub fn files_in_place() -> Result<Option<StartData>, String> {
    let mut line = String::new();
    std::io::stdin()
        .lock()
        .take(MAX_START_LINE)
        .read_line(&mut line)
        .map_err(|e| format!("waiting for the sandbox's files: {e}"))?;
    if line.len() as u64 == MAX_START_LINE {
        return Err(format!("the driver's last line is longer than {MAX_START_LINE} bytes"));
    }
    start_line(&line)
}

/// Reads the last line: [`FILES_IN_PLACE`] alone, or followed by a space and the start data as
/// one JSON object.
fn start_line(line: &str) -> Result<Option<StartData>, String> {
    let abandoned = || "the driver abandoned the start before the sandbox's files were in place".to_string();
    let rest = line.strip_suffix('\n').ok_or_else(abandoned)?.strip_prefix(FILES_IN_PLACE).ok_or_else(abandoned)?;
    if rest.is_empty() {
        return Ok(None);
    }
    let data = rest.strip_prefix(' ').ok_or_else(abandoned)?;
    serde_json::from_str(data)
        .map(Some)
        .map_err(|e| format!("the start line's data is not what a connect answers: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_last_line_alone_brings_nothing_and_with_data_brings_it() {
        assert_eq!(start_line("start\n"), Ok(None));
        let data = start_line("start {\"policy_version\":3,\"policy\":\"{}\",\"boundaries\":\"[]\"}\n").unwrap();
        assert_eq!(data, Some(StartData { policy_version: 3, policy: "{}".into(), boundaries: "[]".into() }));
    }

    #[test]
    fn input_cut_short_or_not_the_last_line_abandons_the_start() {
        // Cut at the length bound, or closed early: no newline, so not the driver's last line.
        for line in ["", "sta", "start", "start {\"policy_version\":3", "started\n", "stop\n", "start\t{}\n"] {
            let e = start_line(line).unwrap_err();
            assert!(e.contains("abandoned"), "{line:?}: {e}");
        }
    }

    #[test]
    fn data_that_is_not_a_connect_answer_is_refused_by_name() {
        for line in
            ["start {}\n", "start {\"policy_version\":\"3\",\"policy\":\"{}\",\"boundaries\":\"[]\"}\n", "start [\n"]
        {
            let e = start_line(line).unwrap_err();
            assert!(e.contains("not what a connect answers"), "{line:?}: {e}");
        }
    }
}
