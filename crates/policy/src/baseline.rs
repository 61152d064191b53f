//! The filesystem paths a sandbox gets besides what its policy lists, and the ones it
//! cannot get.
//!
//! Upstream OpenShell adds baseline paths to every policy that has a network rule (its
//! proxy mode, `enrich_proto_baseline_paths` in `openshell-sandbox`), so that a policy with
//! only `network_policies` still runs programs: read-only [`READ_ONLY`], read-write
//! [`READ_WRITE`]. A path the policy already grants keeps its mode (a read-only `/tmp`
//! stays read-only). Here the gateway adds them when it stores a sandbox's policy, so they
//! are part of the policy every proof, `policy get` and `policy.local` see; the supervisor
//! skips those absent at start and reports them as skipped in the sandbox's status.
//!
//! The runtime gives every sandbox fresh [`PRIVATE_MOUNTS`]: a path beneath them names
//! nothing of the host's, so [`Policy::private_paths`] lists them for a warning.

use crate::Policy;

/// Read-only baseline paths (upstream's `PROXY_BASELINE_READ_ONLY`).
pub const READ_ONLY: &[&str] = &["/usr", "/lib", "/etc", "/app", "/var/log", "/proc", "/dev/urandom"];
/// Read-write baseline paths (upstream's `PROXY_BASELINE_READ_WRITE`). `/tmp` is the
/// sandbox's own tmpfs here, never the host's.
pub const READ_WRITE: &[&str] = &["/tmp"];
/// Folders the sandbox gets an empty tmpfs of its own at: the host's contents there are
/// out of its sight.
pub const PRIVATE_MOUNTS: &[&str] = &["/tmp", "/dev/shm"];

impl Policy {
    /// Whether upstream adds the baseline to this policy: it has a network rule.
    pub fn gets_baseline(&self) -> bool {
        !self.network_policies.is_empty()
    }

    /// This policy with the baseline paths it does not grant yet, when it has a network
    /// rule; otherwise unchanged. Applying it twice changes nothing.
    pub fn with_baseline(&self) -> Policy {
        let mut out = self.clone();
        if !self.gets_baseline() {
            return out;
        }
        let fs = &mut out.filesystem_policy;
        for p in READ_ONLY {
            if !has(&fs.read_only, p) && !has(&fs.read_write, p) {
                fs.read_only.push(p.to_string());
            }
        }
        for p in READ_WRITE {
            if !has(&fs.read_only, p) && !has(&fs.read_write, p) {
                fs.read_write.push(p.to_string());
            }
        }
        fs.read_only.sort();
        fs.read_write.sort();
        out
    }

    /// This policy as the next version of a running sandbox whose policy is `current`:
    /// filesystem rules are fixed at start, so each baseline path `current` grants and this
    /// policy does not is kept, in `current`'s mode. (Without it, a policy written as the
    /// sandbox's author wrote it, without the baseline, could never be set.) It never adds
    /// what `current` does not already grant.
    pub fn keeping_baseline_of(&self, current: &Policy) -> Policy {
        let mut out = self.clone();
        let (fs, cur) = (&mut out.filesystem_policy, &current.filesystem_policy);
        for p in READ_ONLY.iter().chain(READ_WRITE) {
            if has(&fs.read_only, p) || has(&fs.read_write, p) {
                continue;
            }
            if has(&cur.read_write, p) {
                fs.read_write.push(p.to_string());
            } else if has(&cur.read_only, p) {
                fs.read_only.push(p.to_string());
            }
        }
        fs.read_only.sort();
        fs.read_write.sort();
        out
    }

    /// Granted paths strictly beneath a private mount, with the list naming each
    /// (`filesystem_policy.read_write`): the sandbox's own empty tmpfs is there, so they
    /// name nothing at start and are skipped.
    pub fn private_paths(&self) -> Vec<(String, String)> {
        let fs = &self.filesystem_policy;
        let lists = [("read_only", &fs.read_only), ("read_write", &fs.read_write)];
        let mut out = Vec::new();
        for (field, list) in lists {
            for p in list {
                if PRIVATE_MOUNTS.iter().any(|m| p.strip_prefix(m).is_some_and(|rest| rest.starts_with('/'))) {
                    out.push((format!("filesystem_policy.{field}"), p.clone()));
                }
            }
        }
        out
    }
}

fn has(list: &[String], path: &str) -> bool {
    list.iter().any(|p| p == path)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(yaml: &str) -> Policy {
        Policy::from_yaml(yaml).unwrap()
    }

    const NET: &str = "network_policies: {r: {endpoints: [{host: a.example.com, port: 443}]}}\n";

    #[test]
    fn added_only_with_a_network_rule_and_never_twice() {
        let plain = p("version: 1\nfilesystem_policy: {read_only: [/srv]}\n");
        assert_eq!(plain.with_baseline(), plain);
        let net = p(&format!("version: 1\n{NET}"));
        let b = net.with_baseline();
        let fs = &b.filesystem_policy;
        assert_eq!(fs.read_only, ["/app", "/dev/urandom", "/etc", "/lib", "/proc", "/usr", "/var/log"]);
        assert_eq!(fs.read_write, ["/tmp"]);
        assert!(fs.include_workdir, "no filesystem_policy: the working directory, as upstream");
        assert_eq!(b.with_baseline(), b);
        assert_eq!(b.network_policies, net.network_policies);
    }

    #[test]
    fn a_granted_path_keeps_its_mode() {
        let b = p(&format!("version: 1\nfilesystem_policy: {{read_only: [/tmp], read_write: [/etc]}}\n{NET}"))
            .with_baseline();
        assert!(b.filesystem_policy.read_only.contains(&"/tmp".to_string()));
        assert!(!b.filesystem_policy.read_write.contains(&"/tmp".to_string()));
        assert!(b.filesystem_policy.read_write.contains(&"/etc".to_string()));
        assert!(!b.filesystem_policy.read_only.contains(&"/etc".to_string()));
    }

    #[test]
    fn a_write_keeps_what_the_running_sandbox_has_and_adds_nothing_else() {
        let current = p(&format!("version: 1\n{NET}")).with_baseline();
        let written = p(&format!("version: 1\nfilesystem_policy: {{include_workdir: true}}\n{NET}"));
        assert_eq!(written.keeping_baseline_of(&current).filesystem_policy, current.filesystem_policy);
        let none = p("version: 1\nfilesystem_policy: {read_only: [/srv]}\n");
        let kept =
            p(&format!("version: 1\nfilesystem_policy: {{read_only: [/srv]}}\n{NET}")).keeping_baseline_of(&none);
        assert_eq!(kept.filesystem_policy, none.filesystem_policy);
    }

    #[test]
    fn paths_beneath_private_mounts_are_named() {
        let x = p(
            "version: 1\nfilesystem_policy: {read_only: [/tmp, /tmpfoo, /tmp/tools/bin], read_write: [/dev/shm/x]}\n",
        );
        assert_eq!(
            x.private_paths(),
            [
                ("filesystem_policy.read_only".to_string(), "/tmp/tools/bin".to_string()),
                ("filesystem_policy.read_write".to_string(), "/dev/shm/x".to_string()),
            ]
        );
    }
}
