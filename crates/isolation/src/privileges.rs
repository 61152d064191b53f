//! Dropping every privilege before the agent runs: supplementary groups, the capability
//! bounding and ambient sets, then the uid and gid (which empties the remaining capability
//! sets), and `no_new_privs` so no setuid binary or file capability gives any back.

use nix::unistd::{Gid, Uid, setgroups, setresgid, setresuid};

use crate::IsolationError;

fn last_cap() -> u32 {
    std::fs::read_to_string("/proc/sys/kernel/cap_last_cap").ok().and_then(|s| s.trim().parse().ok()).unwrap_or(63)
}

/// Empties the capability bounding set: no exec of this process or of its children gains a
/// capability back. It keeps the capabilities it has. The sandbox's init does this before its
/// spec arrives, so that each of its agents' [`drop_to`] finds it done: every drop is a new
/// set of credentials, about 2 µs each.
pub fn drop_bounding_set() -> Result<(), IsolationError> {
    for cap in 0..=last_cap() {
        // SAFETY: prctl with integer arguments.
        let held = unsafe { libc::prctl(libc::PR_CAPBSET_READ, cap as libc::c_ulong, 0, 0, 0) };
        // SAFETY: as above.
        if held > 0 && unsafe { libc::prctl(libc::PR_CAPBSET_DROP, cap as libc::c_ulong, 0, 0, 0) } != 0 {
            let e = nix::Error::last();
            if e != nix::Error::EINVAL {
                return Err(IsolationError(format!("dropping the capability bounding set: {e}")));
            }
        }
    }
    Ok(())
}

/// Becomes `uid`/`gid` for good. Call in the process that will exec the agent.
pub fn drop_to(uid: u32, gid: u32) -> Result<(), IsolationError> {
    if uid == 0 || gid == 0 {
        return Err(IsolationError("refusing to run an agent as root".into()));
    }
    let err = |what: &str, e: nix::Error| IsolationError(format!("{what}: {e}"));
    // The bounding set needs CAP_SETPCAP to shrink, so before the uid changes.
    drop_bounding_set()?;
    // SAFETY: prctl with integer arguments.
    if unsafe { libc::prctl(libc::PR_CAP_AMBIENT, libc::PR_CAP_AMBIENT_CLEAR_ALL as libc::c_ulong, 0, 0, 0) } != 0 {
        return Err(err("clearing ambient capabilities", nix::Error::last()));
    }
    setgroups(&[]).map_err(|e| err("setgroups", e))?;
    let (u, g) = (Uid::from_raw(uid), Gid::from_raw(gid));
    setresgid(g, g, g).map_err(|e| err("setresgid", e))?;
    setresuid(u, u, u).map_err(|e| err("setresuid", e))?;
    nix::sys::prctl::set_no_new_privs().map_err(|e| err("PR_SET_NO_NEW_PRIVS", e))?;
    // Verify rather than trust: the ids stuck and no capability is left.
    if nix::unistd::getuid() != u || nix::unistd::geteuid() != u || nix::unistd::getegid() != g {
        return Err(IsolationError("the uid or gid did not change".into()));
    }
    let status =
        std::fs::read_to_string("/proc/self/status").map_err(|e| IsolationError::io("/proc/self/status", e))?;
    for key in ["CapEff:", "CapPrm:", "CapBnd:", "CapAmb:"] {
        let value = status.lines().find_map(|l| l.strip_prefix(key)).map(str::trim);
        if value.is_none_or(|v| !v.trim_start_matches('0').is_empty()) {
            return Err(IsolationError(format!("capabilities left after dropping privileges: {key} {value:?}")));
        }
    }
    Ok(())
}
