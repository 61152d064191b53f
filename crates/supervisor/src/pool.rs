//! A supervisor prepared ahead of its sandbox (`--pooled`; the process driver's pool on a root
//! gateway, crates/driver/src/pool.rs). It opens its connection to the gateway, makes its
//! sandbox's CA, clones its sandbox's init into new namespaces (the init waits for a spec, as
//! every init does) and moves it into a cgroup made ahead (`SpareCgroup`), then
//! waits on its standard input, a Unix socket, for its claim: a 4-byte big-endian length, that
//! many bytes of JSON `{"args": [...], "dir": "..."}`, and three descriptors attached, its uid
//! lock, its run lock and its log. The arguments are those a cold start gets; from the claim
//! on, the start is a cold one's (the credential, environment and `start` line follow).
//!
//! Until claimed, its arguments name the nil id; it writes its sandbox's id over them (see
//! [`show_id`]), so the driver finds it by its arguments as any other, and says so with one
//! byte back before the driver hands it the credential.

use std::io::Read;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::path::PathBuf;
use std::time::Duration;

use clap::Parser;
use nix::unistd::Pid;

use openshell_isolation::cgroup::SpareCgroup;

use crate::sandbox::{Sandbox, StartError};

/// The id a pooled supervisor's arguments name until it is claimed.
pub const UNCLAIMED: &str = "00000000-0000-0000-0000-000000000000";
/// The largest claim accepted.
const MAX_CLAIM: usize = 64 * 1024;

/// A pooled supervisor's own arguments, before its claim.
#[derive(Parser, Debug)]
#[command(name = "openshell-supervisor")]
struct PoolArgs {
    #[arg(long)]
    pooled: bool,
    #[arg(long)]
    state_dir: PathBuf,
    #[arg(long)]
    sandbox_id: String,
    #[arg(long)]
    gateway: String,
    /// The limits its cgroup is made with (the gateway's defaults; a claim sets what its
    /// sandbox's change).
    #[command(flatten)]
    limits: crate::LimitFlags,
}

#[derive(serde::Deserialize)]
struct Claim {
    args: Vec<String>,
    dir: PathBuf,
}

/// What a pooled supervisor made before its claim.
#[derive(Default)]
pub struct Prepared {
    /// Its init, cloned into new namespaces, and the supervisor's end of its channel.
    pub init: Option<(Pid, OwnedFd)>,
    /// Its init's cgroup, made ahead where the host allows (see `SpareCgroup`).
    pub cgroup: Option<SpareCgroup>,
    /// Its connection to the gateway (no credential yet), once open.
    pub gateway: Option<tokio::task::JoinHandle<Option<openshell_client::Client>>>,
    /// Its sandbox's CA and trust bundle.
    pub ca: Option<tokio::task::JoinHandle<Result<crate::egress::Ca, String>>>,
}

/// Whether this process runs pooled: started as `openshell-supervisor --pooled ...`.
pub fn is_pooled() -> bool {
    std::env::args_os().nth(1).is_some_and(|a| a == "--pooled")
}

/// Holds descriptors 3 and 4, where the claim's locks go, with /dev/null until then, so
/// that nothing opened before the claim (the runtime's, the connection's) takes them.
pub fn hold_lock_descriptors() -> Result<(), String> {
    // Above 4 (the first open may be 3), and that first one closed before 3 is taken.
    let null = std::fs::File::open("/dev/null")
        .and_then(|f| Ok(nix::fcntl::fcntl(&f, nix::fcntl::FcntlArg::F_DUPFD_CLOEXEC(5))?))
        // SAFETY: fcntl just made this descriptor, ours alone.
        .map(|fd| unsafe { OwnedFd::from_raw_fd(fd) })
        .map_err(|e| format!("/dev/null: {e}"))?;
    for fd in [3, 4] {
        // SAFETY: dup3 onto descriptor numbers nothing in this process holds yet.
        if unsafe { libc::dup3(null.as_raw_fd(), fd, libc::O_CLOEXEC) } < 0 {
            return Err(format!("holding descriptor {fd}: {}", std::io::Error::last_os_error()));
        }
    }
    Ok(())
}

/// Prepares, then waits for the claim; returns the arguments claimed (a cold start's, after
/// the binary) and what was prepared. `None` when the driver went away unclaimed.
pub fn prepare_and_wait(runtime: &tokio::runtime::Runtime) -> Result<Option<(Vec<String>, Prepared)>, String> {
    let own = PoolArgs::try_parse().map_err(|e| e.to_string())?;
    if own.sandbox_id != UNCLAIMED {
        return Err(format!("a pooled supervisor names {UNCLAIMED} as its sandbox until claimed"));
    }
    nix::sys::prctl::set_dumpable(false).map_err(|e| format!("prctl(PR_SET_DUMPABLE): {e}"))?;
    let endpoint = openshell_client::Endpoint::parse(&own.gateway)
        .map_err(|e| format!("--gateway: {e}"))?
        .timeout(Duration::from_secs(30));
    // A gateway that does not answer yet is connected to at the first call instead.
    let gateway = runtime.spawn(async move { endpoint.connect(None).await.ok() });
    let ca = runtime.spawn_blocking(crate::egress::make_ca);
    let init = Sandbox::clone_init(None).map_err(|e| match e {
        StartError::Setup(reason) | StartError::Command(reason) => reason,
    })?;
    // The init joins its cgroup now, not at the claim; one that cannot be made ahead is made
    // then, as a cold start's is.
    let cgroup = SpareCgroup::make(init.0.as_raw(), &own.limits.limits()).unwrap_or_else(|e| {
        tracing::warn!("making a sandbox's cgroup ahead: {e}");
        None
    });
    match receive(&own.state_dir) {
        Ok(Some(args)) => Ok(Some((args, Prepared { init: Some(init), cgroup, gateway: Some(gateway), ca: Some(ca) }))),
        // Unclaimed or refused, this process exits: its init first, so its spare cgroup goes.
        unclaimed => {
            Sandbox::kill_init(init.0);
            drop(cgroup);
            unclaimed.map(|_| None)
        }
    }
}

/// Reads the claim from standard input and puts its descriptors in place: the uid lock on 3,
/// the run lock on 4 (both close-on-exec), the log on 1 and 2. Shows the sandbox's id in this
/// process's arguments and answers. `None` when the input ended unclaimed.
fn receive(state_dir: &std::path::Path) -> Result<Option<Vec<String>>, String> {
    let mut len = [0u8; 4];
    let (got, fds) = crate::claim::read_with_descriptors(&mut len)?;
    if got == 0 {
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
    if fds.len() != 3 {
        return Err(format!("the claim carried {} descriptors, not 3", fds.len()));
    }
    // The locks where a cold supervisor has them; the log is the init's and the main command's
    // output too (sent with the spec), so not close-on-exec.
    crate::claim::place(fds, &[(0, 3, true), (1, 4, true), (2, 1, false), (2, 2, false)])?;
    let value = |flag: &str| claim.args.iter().position(|a| a == flag).and_then(|i| claim.args.get(i + 1));
    if value("--state-dir").map(PathBuf::from).as_deref() != Some(state_dir) {
        return Err("the claim is for another state directory".into());
    }
    let id = value("--sandbox-id").ok_or("the claim's arguments name no --sandbox-id")?;
    std::env::set_current_dir(&claim.dir).map_err(|e| format!("entering {}: {e}", claim.dir.display()))?;
    show_id(id)?;
    // Claimed: the driver names this process in the run file, then sends the credential.
    nix::unistd::write(&*stdin, b"!").map_err(|e| format!("answering the claim: {e}"))?;
    Ok(Some(claim.args))
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
    // stack at exec; nothing else refers to them (the standard library copies the arguments
    // when asked for them, and clap has parsed its copy).
    let area = unsafe { std::slice::from_raw_parts_mut(start as *mut u8, end.saturating_sub(start)) };
    let at = area
        .windows(needle.len())
        .position(|w| w == needle.as_slice())
        .ok_or("this process's arguments hold no unclaimed --sandbox-id")?;
    let from = at + b"--sandbox-id\0".len();
    area[from..from + id.len()].copy_from_slice(id.as_bytes());
    Ok(())
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
