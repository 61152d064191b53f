//! The one matcher: decides whether a policy allows a concrete access. The supervisor's proxy
//! enforces with it and the prover replays every counterexample through it.
//!
//! Network: a request is allowed when some named rule lists its program (or an ancestor) and
//! has an endpoint that allows it. An endpoint allows a request when the host and port match
//! and either it has L4 authority (`tcp`, or not `enforce`), or it is an enforced `rest`
//! endpoint whose allow rules match the method and path and none of whose deny rules do
//! (deny wins). GET also allows HEAD. Enforced endpoints of other protocols (`mcp`) are
//! decided by their own handler: this matcher allows nothing through them.
//!
//! Also: an endpoint with `allowed_ips` matches only when the request carries its resolved
//! address and it lies in one of the networks (a hostless one then matches any host); an
//! endpoint `path` limits the endpoint to HTTP requests on it; allow rules with `query`
//! need every listed key present with all its values matching, deny rules with `query`
//! trigger when some value of every listed key matches. Loopback and link-local addresses
//! are never allowed, nor are hosts a fail-closed middleware selects (this proxy runs no
//! middleware). Whatever this matcher cannot evaluate allows nothing.

use std::collections::BTreeMap;
use std::fmt;
use std::net::IpAddr;

use serde::{Deserialize, Serialize};

use crate::glob::{Domain, Glob};
use crate::model::{ANY_METHOD, Endpoint, L7Match, LandlockCompatibility, OnError, Policy};

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct HttpRequest {
    /// Upper-case HTTP method as sent.
    pub method: String,
    /// The URL path without query or fragment, normalized by the caller.
    pub path: String,
    /// The query string, percent-decoded (see [`crate::decode_query`]): each key with its
    /// values in the order sent.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub query: BTreeMap<String, Vec<String>>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct NetworkRequest {
    /// The program that opened the connection (absolute path, kernel-resolved).
    pub program: String,
    /// Its ancestor programs, nearest first.
    #[serde(default)]
    pub ancestors: Vec<String>,
    pub host: String,
    pub port: u16,
    /// The HTTP request, when the connection carries one the proxy has parsed; `None` asks
    /// for raw traffic, which only L4 authority grants.
    pub http: Option<HttpRequest>,
    /// The address the proxy resolved `host` to and would connect to; `None` when not
    /// known, and then no `allowed_ips` endpoint matches.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub addr: Option<IpAddr>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FileMode {
    Read,
    Write,
}

/// Something a sandboxed agent may try to do.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "kind")]
pub enum Access {
    Network(NetworkRequest),
    /// A file at an absolute, normalized path.
    File {
        mode: FileMode,
        path: String,
    },
    /// The sandbox's working directory, wherever it is.
    Workdir {
        mode: FileMode,
    },
    /// Running the agent as this user and group.
    RunAs {
        user: String,
        group: String,
    },
    /// Starting on a kernel without Landlock.
    WithoutLandlock,
}

/// Which endpoint of which named rule allowed a network request.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RuleRef {
    /// The key in `network_policies`.
    pub rule: String,
    pub endpoint: usize,
}

impl Policy {
    /// Whether this policy allows the access.
    pub fn allows(&self, access: &Access) -> bool {
        match access {
            Access::Network(req) => self.network_rule_for(req).is_some(),
            Access::File { mode, path } => self.allows_file(*mode, path),
            Access::Workdir { mode } => self.filesystem_policy.include_workdir || self.allows_file(*mode, "/"),
            Access::RunAs { user, group } => *user == self.process.run_as_user && *group == self.process.run_as_group,
            Access::WithoutLandlock => self.landlock.compatibility == LandlockCompatibility::BestEffort,
        }
    }

    /// The first rule (in key order) that allows a network request.
    pub fn network_rule_for(&self, req: &NetworkRequest) -> Option<RuleRef> {
        let host = normalize_host(&req.host)?;
        if req.addr.is_some_and(|a| crate::ip::is_blocked(&a)) || self.middleware_blocks(&host) {
            return None;
        }
        let programs: Vec<&str> =
            std::iter::once(req.program.as_str()).chain(req.ancestors.iter().map(String::as_str)).collect();
        for (key, np) in &self.network_policies {
            let program_ok = np
                .binaries
                .iter()
                .any(|b| Glob::path(&b.path, Domain::Program).is_ok_and(|g| programs.iter().any(|p| g.matches(p))));
            if !program_ok {
                continue;
            }
            for (i, ep) in np.endpoints.iter().enumerate() {
                if endpoint_allows_at(ep, &host, req.port, req.addr.as_ref(), req.http.as_ref()) {
                    return Some(RuleRef { rule: key.clone(), endpoint: i });
                }
            }
        }
        None
    }

    /// Whether a middleware that fails closed selects the host: this proxy runs none.
    pub fn middleware_blocks(&self, host: &str) -> bool {
        let hit = |globs: &[String]| globs.iter().any(|g| Glob::host(g).is_ok_and(|g| g.matches(host)));
        self.network_middlewares
            .values()
            .any(|m| m.on_error == OnError::FailClosed && hit(&m.endpoints.include) && !hit(&m.endpoints.exclude))
    }

    /// A path is readable beneath any listed path and writable beneath a `read_write` one.
    pub fn allows_file(&self, mode: FileMode, path: &str) -> bool {
        let fs = &self.filesystem_policy;
        let beneath = |root: &String| is_beneath(path, root);
        fs.read_write.iter().any(beneath) || (mode == FileMode::Read && fs.read_only.iter().any(beneath))
    }
}

/// Lower-cases a host and drops one trailing dot; `None` when it is no valid host name.
pub(crate) fn normalize_host(host: &str) -> Option<String> {
    let h = host.strip_suffix('.').unwrap_or(host).to_ascii_lowercase();
    Domain::Host.contains(&h).then_some(h)
}

/// Whether `path` equals `root` or lies beneath it (by whole segments).
pub fn is_beneath(path: &str, root: &str) -> bool {
    if root == "/" {
        return path.starts_with('/');
    }
    path.strip_prefix(root).is_some_and(|rest| rest.is_empty() || rest.starts_with('/'))
}

/// Whether one endpoint allows a request to an already-normalized host whose address is
/// not known (so endpoints with `allowed_ips` never do).
pub fn endpoint_allows(ep: &Endpoint, host: &str, port: u16, http: Option<&HttpRequest>) -> bool {
    endpoint_allows_at(ep, host, port, None, http)
}

/// Whether one endpoint allows a request to an already-normalized host at `addr`.
pub fn endpoint_allows_at(
    ep: &Endpoint,
    host: &str,
    port: u16,
    addr: Option<&IpAddr>,
    http: Option<&HttpRequest>,
) -> bool {
    if !ep.ports.contains(&port) {
        return false;
    }
    if !ep.allowed_ips.is_empty() && !addr.is_some_and(|a| ep.allowed_ips.iter().any(|n| n.contains(a))) {
        return false;
    }
    // A hostless endpoint exists only with `allowed_ips` (validation), checked above.
    let host_ok = if ep.host.is_empty() {
        !ep.allowed_ips.is_empty()
    } else {
        Glob::host(&ep.host).is_ok_and(|g| g.matches(host))
    };
    if !host_ok {
        return false;
    }
    if let Some(p) = &ep.path {
        let on_path = http
            .is_some_and(|h| is_method(&h.method) && Glob::path(p, Domain::UrlPath).is_ok_and(|g| g.matches(&h.path)));
        if !on_path {
            return false;
        }
    }
    if ep.is_l4() {
        return true;
    }
    if !ep.is_enforced_rest() || ep.is_opaque() {
        return false;
    }
    let Some(http) = http else {
        return false;
    };
    if !is_method(&http.method) || !Domain::UrlPath.contains(&http.path) {
        return false;
    }
    let allowed = match ep.access {
        Some(preset) => preset.methods().is_none_or(|ms| ms.iter().any(|m| method_matches(m, &http.method))),
        None => ep.rules.iter().any(|r| l7_matches(&r.allow, http) && query_allows(&r.allow, http)),
    };
    allowed && !ep.deny_rules.iter().any(|d| l7_matches(d, http) && query_denies(d, http))
}

/// Methods the matcher accepts at all: an upper-case letter, then upper-case letters, `-`,
/// `_`, at most 32 in all.
pub fn is_method(m: &str) -> bool {
    (1..=32).contains(&m.len())
        && m.as_bytes()[0].is_ascii_uppercase()
        && m.bytes().all(|c| c.is_ascii_uppercase() || c == b'-' || c == b'_')
}

/// A rule method matches itself, `*` matches all, GET also matches HEAD.
pub fn method_matches(rule: &str, method: &str) -> bool {
    rule == ANY_METHOD || rule == method || (rule == "GET" && method == "HEAD")
}

/// A rule's method and path match the request (its query aside: [`query_allows`],
/// [`query_denies`]).
pub fn l7_matches(m: &L7Match, http: &HttpRequest) -> bool {
    method_matches(&m.method, &http.method) && Glob::path(&m.path, Domain::UrlPath).is_ok_and(|g| g.matches(&http.path))
}

/// An allow rule's query: every listed key present, all of its values matching.
pub fn query_allows(m: &L7Match, http: &HttpRequest) -> bool {
    m.query
        .iter()
        .all(|(k, matcher)| http.query.get(k).is_some_and(|vs| !vs.is_empty() && vs.iter().all(|v| matcher.matches(v))))
}

/// A deny rule's query: every listed key has some value matching (no keys: always).
pub fn query_denies(m: &L7Match, http: &HttpRequest) -> bool {
    m.query.iter().all(|(k, matcher)| http.query.get(k).is_some_and(|vs| vs.iter().any(|v| matcher.matches(v))))
}

impl fmt::Display for FileMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            FileMode::Read => "read",
            FileMode::Write => "write",
        })
    }
}

impl fmt::Display for Access {
    /// One line a person reads: `program /usr/bin/curl -> api.github.com:443 POST /x`,
    /// `write /etc/passwd`, `run as user root group root`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Access::Network(r) => {
                write!(f, "program {} -> {}:{}", r.program, r.host, r.port)?;
                if let Some(a) = r.addr {
                    write!(f, " (address {a})")?;
                }
                match &r.http {
                    Some(h) => {
                        write!(f, " {} {}", h.method, h.path)?;
                        let pairs: Vec<String> =
                            h.query.iter().flat_map(|(k, vs)| vs.iter().map(move |v| format!("{k}={v}"))).collect();
                        if !pairs.is_empty() {
                            write!(f, "?{}", pairs.join("&"))?;
                        }
                        Ok(())
                    }
                    None => write!(f, " (raw traffic)"),
                }
            }
            Access::File { mode, path } => write!(f, "{mode} {path}"),
            Access::Workdir { mode } => write!(f, "{mode} the working directory"),
            Access::RunAs { user, group } => write!(f, "run as user {user} group {group}"),
            Access::WithoutLandlock => write!(f, "run without Landlock"),
        }
    }
}
