//! Semantic validation: turns a parsed [`PolicyDoc`] into a normalized [`Policy`], or says
//! which field is wrong and why (paths in the same form serde_path_to_error prints).

use std::collections::BTreeMap;

use crate::PolicyError;
use crate::document::{EndpointDoc, MatchDoc, NetworkPolicyDoc, PolicyDoc};
use crate::glob::{Domain, Glob};
use crate::limits::*;
use crate::model::*;

type Result<T> = std::result::Result<T, PolicyError>;

fn err(path: impl Into<String>, reason: impl Into<String>) -> PolicyError {
    PolicyError { path: path.into(), reason: reason.into() }
}

fn bounded<T>(path: &str, items: &[T], max: usize, what: &str) -> Result<()> {
    if items.len() > max {
        return Err(err(path, format!("{} {what}; the limit is {max}", items.len())));
    }
    Ok(())
}

pub fn policy(doc: PolicyDoc) -> Result<Policy> {
    if doc.version != 1 {
        return Err(err("version", format!("unsupported version {}; only 1 exists", doc.version)));
    }
    let filesystem_policy = match doc.filesystem_policy {
        None => FilesystemPolicy::default(),
        Some(fs) => FilesystemPolicy {
            include_workdir: fs.include_workdir.unwrap_or(false),
            read_only: fs_paths("filesystem_policy.read_only", fs.read_only)?,
            read_write: fs_paths("filesystem_policy.read_write", fs.read_write)?,
        },
    };
    let landlock = Landlock { compatibility: doc.landlock.and_then(|l| l.compatibility).unwrap_or_default() };
    let process = doc.process.map_or(Ok(Process::default()), |p| {
        Ok::<_, PolicyError>(Process {
            run_as_user: account("process.run_as_user", p.run_as_user)?,
            run_as_group: account("process.run_as_group", p.run_as_group)?,
        })
    })?;
    let docs = doc.network_policies.unwrap_or_default();
    if docs.len() > MAX_NETWORK_POLICIES {
        return Err(err("network_policies", format!("{} rules; the limit is {MAX_NETWORK_POLICIES}", docs.len())));
    }
    let mut network_policies = BTreeMap::new();
    let mut total_endpoints = 0;
    for (key, np) in docs {
        let path = format!("network_policies.{key}");
        let np = network_policy(&path, &key, np)?;
        total_endpoints += np.endpoints.len();
        if total_endpoints > MAX_ENDPOINTS_TOTAL {
            return Err(err(path, format!("more than {MAX_ENDPOINTS_TOTAL} endpoints in the whole policy")));
        }
        network_policies.insert(key, np);
    }
    Ok(Policy { version: 1, filesystem_policy, landlock, process, network_policies })
}

fn fs_paths(path: &str, list: Option<Vec<String>>) -> Result<Vec<String>> {
    let list = list.unwrap_or_default();
    bounded(path, &list, MAX_FILESYSTEM_PATHS, "paths")?;
    let mut out = Vec::with_capacity(list.len());
    for (i, p) in list.into_iter().enumerate() {
        out.push(fs_path(&format!("{path}[{i}]"), &p)?);
    }
    out.sort();
    out.dedup();
    Ok(out)
}

/// A filesystem path: absolute, normalized, no globs (Landlock grants whole subtrees).
fn fs_path(path: &str, p: &str) -> Result<String> {
    if !p.starts_with('/') {
        return Err(err(path, format!("`{p}` must be an absolute path")));
    }
    if p.len() > MAX_FILESYSTEM_PATH_LEN {
        return Err(err(path, format!("path is {} bytes; the limit is {MAX_FILESYSTEM_PATH_LEN}", p.len())));
    }
    if p.contains('\0') {
        return Err(err(path, "path contains a NUL byte"));
    }
    if p.contains(['*', '?', '[', '{']) {
        return Err(err(path, format!("`{p}`: filesystem paths are not globs; everything beneath a path is granted")));
    }
    let trimmed = if p.len() > 1 { p.trim_end_matches('/') } else { p };
    let trimmed = if trimmed.is_empty() { "/" } else { trimmed };
    if trimmed.len() > 1 {
        for seg in trimmed[1..].split('/') {
            if seg.is_empty() || seg == "." || seg == ".." {
                return Err(err(path, format!("`{p}` is not normalized (empty, `.` or `..` segment)")));
            }
        }
    }
    Ok(trimmed.to_string())
}

/// A user or group: a POSIX-style name or a numeric id, never root.
fn account(path: &str, name: Option<String>) -> Result<String> {
    let Some(name) = name else {
        return Ok(DEFAULT_RUN_AS.into());
    };
    let numeric = !name.is_empty() && name.len() <= 10 && name.bytes().all(|c| c.is_ascii_digit());
    let named = (1..=32).contains(&name.len())
        && name.bytes().next().is_some_and(|c| c.is_ascii_lowercase() || c == b'_')
        && name.bytes().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == b'_' || c == b'-');
    if !numeric && !named {
        return Err(err(
            path,
            format!("`{name}` is not a user or group name (`[a-z_][a-z0-9_-]*`, at most 32) or numeric id"),
        ));
    }
    if numeric && name.parse::<u64>().ok() == Some(0) || name == "root" {
        return Err(err(path, "sandboxes never run as root"));
    }
    Ok(name)
}

fn network_policy(path: &str, key: &str, np: NetworkPolicyDoc) -> Result<NetworkPolicy> {
    let name_ok = (1..=MAX_NAME_LEN).contains(&key.len())
        && key.bytes().all(|c| c.is_ascii_alphanumeric() || matches!(c, b'_' | b'-' | b'.'));
    if !name_ok {
        return Err(err(path, format!("rule name `{key}` must be 1 to {MAX_NAME_LEN} of `[A-Za-z0-9_.-]`")));
    }
    let name = match np.name {
        None => key.to_string(),
        Some(n) if n.is_empty() || n.len() > MAX_NAME_LEN || n.chars().any(char::is_control) => {
            return Err(err(format!("{path}.name"), format!("must be 1 to {MAX_NAME_LEN} printable characters")));
        }
        Some(n) => n,
    };
    let eps = np.endpoints.unwrap_or_default();
    bounded(&format!("{path}.endpoints"), &eps, MAX_ENDPOINTS_PER_POLICY, "endpoints")?;
    let mut endpoints = Vec::with_capacity(eps.len());
    for (i, ep) in eps.into_iter().enumerate() {
        endpoints.push(endpoint(&format!("{path}.endpoints[{i}]"), ep)?);
    }
    endpoints.sort();
    endpoints.dedup();
    let bins = np.binaries.unwrap_or_default();
    bounded(&format!("{path}.binaries"), &bins, MAX_BINARIES_PER_POLICY, "binaries")?;
    let mut binaries = Vec::with_capacity(bins.len());
    for (i, b) in bins.into_iter().enumerate() {
        let p = format!("{path}.binaries[{i}].path");
        Glob::path(&b.path, Domain::Program).map_err(|r| err(&p, r))?;
        binaries.push(Binary { path: b.path });
    }
    binaries.sort();
    binaries.dedup();
    Ok(NetworkPolicy { name, endpoints, binaries })
}

fn endpoint(path: &str, ep: EndpointDoc) -> Result<Endpoint> {
    Glob::host(&ep.host).map_err(|r| err(format!("{path}.host"), r))?;
    let host = ep.host.to_ascii_lowercase();

    let ports = match (ep.port, ep.ports) {
        (Some(_), Some(_)) => {
            return Err(err(path, "give `port` or `ports`, not both"));
        }
        (None, None) => return Err(err(path, "`port` or `ports` is required")),
        (Some(p), None) => vec![port(&format!("{path}.port"), p)?],
        (None, Some(list)) => {
            if list.is_empty() {
                return Err(err(format!("{path}.ports"), "must list at least one port"));
            }
            bounded(&format!("{path}.ports"), &list, MAX_PORTS_PER_ENDPOINT, "ports")?;
            let mut out = Vec::with_capacity(list.len());
            for (i, p) in list.into_iter().enumerate() {
                out.push(port(&format!("{path}.ports[{i}]"), p)?);
            }
            out.sort();
            out.dedup();
            out
        }
    };

    let protocol = match ep.protocol.as_deref() {
        None | Some("") | Some("tcp") => Protocol::Tcp,
        Some("rest") => Protocol::Rest,
        Some(other) => {
            let ok = (1..=32).contains(&other.len())
                && other.as_bytes()[0].is_ascii_lowercase()
                && other.bytes().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == b'_' || c == b'-');
            if !ok {
                return Err(err(
                    format!("{path}.protocol"),
                    format!("`{other}` is not a protocol name (tcp, rest, mcp, ...)"),
                ));
            }
            Protocol::Other(other.to_string())
        }
    };
    let enforcement = ep.enforcement.unwrap_or_default();

    let has_l7 = ep.access.is_some() || ep.rules.is_some() || ep.deny_rules.is_some();
    if has_l7 && protocol != Protocol::Rest {
        return Err(err(
            path,
            format!(
                "`access`, `rules` and `deny_rules` need `protocol: rest` (this endpoint is {})",
                protocol.as_str()
            ),
        ));
    }
    if ep.access.is_some() && ep.rules.is_some() {
        return Err(err(path, "give `access` or `rules`, not both"));
    }
    if protocol == Protocol::Rest && enforcement == Enforcement::Enforce && ep.access.is_none() && ep.rules.is_none() {
        return Err(err(path, "an enforced rest endpoint needs `access` or `rules` (otherwise it allows nothing)"));
    }
    let mut rules = Vec::new();
    if let Some(list) = ep.rules {
        if list.is_empty() {
            return Err(err(
                format!("{path}.rules"),
                "must not be empty (an endpoint that allows nothing is better left out)",
            ));
        }
        bounded(&format!("{path}.rules"), &list, MAX_RULES_PER_ENDPOINT, "rules")?;
        for (i, r) in list.into_iter().enumerate() {
            rules.push(L7Rule { allow: l7_match(&format!("{path}.rules[{i}].allow"), r.allow)? });
        }
    }
    rules.sort();
    rules.dedup();
    let mut deny_rules = Vec::new();
    if let Some(list) = ep.deny_rules {
        bounded(&format!("{path}.deny_rules"), &list, MAX_RULES_PER_ENDPOINT, "deny rules")?;
        for (i, r) in list.into_iter().enumerate() {
            deny_rules.push(l7_match(&format!("{path}.deny_rules[{i}]"), r)?);
        }
    }
    deny_rules.sort();
    deny_rules.dedup();
    Ok(Endpoint { host, ports, protocol, enforcement, access: ep.access, rules, deny_rules })
}

fn port(path: &str, p: i64) -> Result<u16> {
    match u16::try_from(p) {
        Ok(p) if p >= 1 => Ok(p),
        _ => Err(err(path, format!("port {p} is outside 1..=65535"))),
    }
}

fn l7_match(path: &str, m: MatchDoc) -> Result<L7Match> {
    let Some(method) = m.method else {
        return Err(err(format!("{path}.method"), "is required (`*` for any method)"));
    };
    let method = if method == ANY_METHOD {
        method
    } else {
        let ok = (1..=32).contains(&method.len())
            && method.as_bytes()[0].is_ascii_alphabetic()
            && method.bytes().all(|c| c.is_ascii_alphabetic() || c == b'_' || c == b'-');
        if !ok {
            return Err(err(
                format!("{path}.method"),
                format!("`{method}` is not an HTTP method (letters, `-`, `_`; or `*`)"),
            ));
        }
        method.to_ascii_uppercase()
    };
    let glob = m.path.unwrap_or_else(|| ANY_PATH.to_string());
    Glob::path(&glob, Domain::UrlPath).map_err(|r| err(format!("{path}.path"), r))?;
    Ok(L7Match { method, path: glob })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fs_path_normalizes_trailing_slash() {
        assert_eq!(fs_path("p", "/tmp/").unwrap(), "/tmp");
        assert_eq!(fs_path("p", "/").unwrap(), "/");
        assert!(fs_path("p", "/a//b").is_err());
        assert!(fs_path("p", "/a/../b").is_err());
        assert!(fs_path("p", "tmp").is_err());
        assert!(fs_path("p", "/tmp/*").is_err());
    }

    #[test]
    fn accounts() {
        assert_eq!(account("p", None).unwrap(), "sandbox");
        assert_eq!(account("p", Some("1000".into())).unwrap(), "1000");
        for bad in ["root", "0", "00", "Bob", "", "a b"] {
            assert!(account("p", Some(bad.into())).is_err(), "{bad}");
        }
    }
}
