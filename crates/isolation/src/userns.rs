//! Sandboxes of a gateway that is not root: each in a new user namespace, whose ids are
//! mapped by the setuid helpers `newuidmap`/`newgidmap` from the gateway user's subordinate
//! ranges (`/etc/subuid`, `/etc/subgid`).
//!
//! A sandbox's map has two entries: its namespace's root is the gateway's own uid and gid (the
//! init, trusted code, needs capabilities in the namespace to set it up, and only there), and
//! the agent's uid and gid are one subordinate id each, mapped to the same number inside, held
//! by a lock like a root gateway's uids. The agent so never runs as the gateway's uid, and two
//! live sandboxes never share a host uid. [`check_host`] says what is missing when any of this
//! cannot be had; nothing falls back to less isolation.

use std::os::unix::fs::MetadataExt;
use std::path::PathBuf;
use std::process::Command;

use crate::IsolationError;
use crate::cgroup::SandboxCgroup;
use crate::uids::UidRange;

/// This gateway user's subordinate ids: agent uid `u` has gid `gid_first + (u - uids.first)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Subids {
    pub uids: UidRange,
    pub gid_first: u32,
}

impl Subids {
    /// The gid paired with an agent uid from [`Subids::uids`].
    pub fn gid_of(&self, uid: u32) -> u32 {
        self.gid_first + (uid - self.uids.first)
    }
}

/// The first range of `user` (by name or number) in a subordinate-id file's text.
fn range_in(text: &str, name: &str, id: u32) -> Option<UidRange> {
    text.lines().find_map(|line| {
        let mut f = line.trim().split(':');
        let (who, first, count) = (f.next()?, f.next()?, f.next()?);
        if who != name && who != id.to_string() {
            return None;
        }
        let (first, count): (u32, u32) = (first.parse().ok()?, count.parse().ok()?);
        // Root's id and the top of the id space are never a sandbox's.
        (first > 0 && count > 0 && first.checked_add(count).is_some_and(|end| end < u32::MAX - 1))
            .then_some(UidRange { first, count })
    })
}

fn subordinate(file: &str, name: &str, id: u32) -> Result<UidRange, IsolationError> {
    let text = std::fs::read_to_string(file).map_err(|e| {
        IsolationError(format!("{file}: {e}: a non-root gateway needs subordinate ids for {name} ({id}) there"))
    })?;
    range_in(&text, name, id).ok_or_else(|| {
        IsolationError(format!(
            "{file} has no range for the gateway's user {name} ({id}) (as root: usermod --add-subuids \
             1000000000-1000065535 --add-subgids 1000000000-1000065535 {name})"
        ))
    })
}

/// Where a setuid helper is: `/usr/bin` (Debian's `uidmap`), else a folder of `PATH`.
pub fn helper(name: &str) -> Result<PathBuf, IsolationError> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    let dirs = std::iter::once(PathBuf::from("/usr/bin")).chain(std::env::split_paths(&path));
    for dir in dirs {
        let p = dir.join(name);
        if let Ok(m) = std::fs::metadata(&p) {
            // It must be root's and setuid, or it cannot write another user's map.
            if m.is_file() && m.uid() == 0 && m.mode() & 0o4000 != 0 && m.mode() & 0o022 == 0 {
                return Ok(p);
            }
        }
    }
    Err(IsolationError(format!(
        "{name} not found (a setuid-root program in /usr/bin or on PATH): a non-root gateway needs it to map \
         each sandbox's uids (install the package uidmap)"
    )))
}

fn number(path: &str) -> Option<i64> {
    std::fs::read_to_string(path).ok()?.trim().parse().ok()
}

/// Everything a non-root gateway needs before it starts a sandbox, checked: user namespaces
/// the kernel lets it make, `newuidmap` and `newgidmap`, its subordinate ids (outside every
/// account) and a cgroup subtree delegated to it. The error names each thing missing.
pub fn check_host() -> Result<Subids, IsolationError> {
    let uid = nix::unistd::getuid().as_raw();
    let name = nix::unistd::User::from_uid(nix::unistd::Uid::from_raw(uid))
        .ok()
        .flatten()
        .map(|u| u.name)
        .unwrap_or_else(|| uid.to_string());
    let mut missing = Vec::new();
    if number("/proc/sys/user/max_user_namespaces").is_some_and(|n| n <= 0) {
        missing.push("user namespaces: /proc/sys/user/max_user_namespaces is 0".to_string());
    }
    if number("/proc/sys/kernel/unprivileged_userns_clone") == Some(0) {
        missing.push("user namespaces: kernel.unprivileged_userns_clone is 0".to_string());
    }
    if number("/proc/sys/kernel/apparmor_restrict_unprivileged_userns") == Some(1) {
        missing.push("user namespaces: kernel.apparmor_restrict_unprivileged_userns is 1".to_string());
    }
    for h in ["newuidmap", "newgidmap"] {
        if let Err(e) = helper(h) {
            missing.push(e.0);
        }
    }
    let uids = subordinate("/etc/subuid", &name, uid).map_err(|e| missing.push(e.0)).ok();
    let gids = subordinate("/etc/subgid", &name, uid).map_err(|e| missing.push(e.0)).ok();
    if let Err(e) = SandboxCgroup::check_delegation(uid) {
        missing.push(e.0);
    }
    if !missing.is_empty() {
        return Err(IsolationError(format!(
            "the gateway runs as {name} ({uid}), not root, so each sandbox needs a user namespace of its own, \
             and this host lacks: {}",
            missing.join("; ")
        )));
    }
    let (uids, gids) = (uids.expect("checked"), gids.expect("checked"));
    let uids = UidRange { first: uids.first, count: uids.count.min(gids.count) };
    uids.check_unused()?;
    UidRange { first: gids.first, count: uids.count }.check_unused()?;
    Ok(Subids { uids, gid_first: gids.first })
}

/// The agent's host ids, mapped to the same numbers inside its sandbox's user namespace.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct IdMap {
    pub uid: u32,
    pub gid: u32,
}

/// Writes the maps of the user namespace process `pid` is in: root inside is this process's
/// uid and gid, the agent's ids are themselves.
pub fn write_maps(pid: i32, agent: IdMap) -> Result<(), IsolationError> {
    let (me, my_gid) = (nix::unistd::getuid().as_raw(), nix::unistd::getgid().as_raw());
    for (helper_name, own, id) in [("newuidmap", me, agent.uid), ("newgidmap", my_gid, agent.gid)] {
        let program = helper(helper_name)?;
        let out = Command::new(&program)
            .args([
                pid.to_string(),
                "0".into(),
                own.to_string(),
                "1".into(),
                id.to_string(),
                id.to_string(),
                "1".into(),
            ])
            .env_clear()
            .output()
            .map_err(|e| IsolationError(format!("{}: {e}", program.display())))?;
        if !out.status.success() {
            return Err(IsolationError(format!(
                "{helper_name} {pid} 0 {own} 1 {id} {id} 1 failed ({}): {}",
                out.status,
                String::from_utf8_lossy(&out.stderr).trim()
            )));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_are_found_by_name_or_number_and_bad_ones_refused() {
        let text = "alice:100000:65536\n1001:200000:10\nbob:0:10\ncarol:4294967200:1000\n";
        assert_eq!(range_in(text, "alice", 7), Some(UidRange { first: 100000, count: 65536 }));
        assert_eq!(range_in(text, "dave", 1001), Some(UidRange { first: 200000, count: 10 }));
        assert_eq!(range_in(text, "bob", 5), None, "a range starting at root");
        assert_eq!(range_in(text, "carol", 6), None, "a range reaching the top of the id space");
        assert_eq!(range_in(text, "erin", 8), None);
    }

    #[test]
    fn an_agent_gid_pairs_with_its_uid() {
        let s = Subids { uids: UidRange { first: 1000, count: 10 }, gid_first: 5000 };
        assert_eq!(s.gid_of(1003), 5003);
    }
}
