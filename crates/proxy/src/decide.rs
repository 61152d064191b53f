//! Every allow or deny, decided by the policy crate's one matcher
//! ([`Policy::network_rule_for`]). When it denies, the same matcher, asked about widened
//! copies of the policy, tells what was missing: a rule for the program, for the host, for
//! the port, or for the method and path.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};

use openshell_policy::glob::Domain;
use openshell_policy::{
    AccessPreset, Endpoint, Enforcement, HttpRequest, IpNet, NetworkRequest, Policy, Protocol, RuleRef,
};
use serde::Serialize;

use crate::identity::Caller;

/// One allow or deny, as sent to [`crate::Config::decisions`] and logged.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Decision {
    /// The calling program; `None` when it could not be identified.
    pub program: Option<String>,
    pub pid: Option<u32>,
    pub host: String,
    pub port: u16,
    /// `None` for a raw (tunnelled) connection.
    pub method: Option<String>,
    /// The canonical path, without query.
    pub path: Option<String>,
    pub verdict: Verdict,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case", tag = "verdict")]
pub enum Verdict {
    /// The policy allowed it through this rule.
    Allow {
        rule: RuleRef,
    },
    /// A request for `policy.local` / `openshell.local`, handed to the supervisor's handler.
    VirtualHost,
    Deny {
        reason: Reason,
    },
}

/// Why a request was refused.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case", tag = "missing", content = "detail")]
pub enum Reason {
    /// The calling program could not be identified from the kernel.
    Identity(String),
    /// No rule lists the program or one of its ancestors.
    Program,
    /// Rules list the program, but none of them names the host.
    Host,
    /// Rules name the host for the program, but not on this port.
    Port,
    /// Rules cover the host and port, but not this method and path.
    MethodPath,
    /// Rules cover the host and port only for protocols the proxy does not tunnel raw.
    RawTraffic,
    /// The host is no name a policy can name (an IPv6 literal, a bad character).
    HostName,
    /// The path cannot be put in one unambiguous form (`..`, `//`, an encoded `/`).
    PathForm,
    /// The request inside a tunnel names another host than the tunnel.
    HostMismatch,
    /// The name did not resolve.
    Resolve(String),
    /// Every address of the host is one the proxy never connects to.
    Blocked(String),
    /// Rules name the host only with `allowed_ips`, and none of its addresses is inside.
    Address(String),
}

impl fmt::Display for Reason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Reason::Identity(e) => write!(f, "the calling program could not be identified: {e}"),
            Reason::Program => f.write_str("no rule lists this program or its ancestors"),
            Reason::Host => f.write_str("no rule for this program names this host"),
            Reason::Port => f.write_str("no rule for this program and host names this port"),
            Reason::MethodPath => f.write_str("no rule for this host and port allows this method and path"),
            Reason::RawTraffic => {
                f.write_str("this host and port are allowed only for protocols the proxy does not tunnel")
            }
            Reason::HostName => f.write_str("the host is not a name a policy can allow"),
            Reason::PathForm => {
                f.write_str("the path has no unambiguous form (dot or empty segments, encoded separators)")
            }
            Reason::HostMismatch => f.write_str("the request names another host than its tunnel"),
            Reason::Resolve(e) => write!(f, "the host did not resolve: {e}"),
            Reason::Blocked(a) => write!(f, "the host resolves only to addresses the proxy never connects to: {a}"),
            Reason::Address(a) => write!(f, "the host resolves only to addresses outside the rules' allowed_ips: {a}"),
        }
    }
}

impl Reason {
    /// A short code naming what was missing.
    pub fn code(&self) -> &'static str {
        match self {
            Reason::Identity(_) => "identity",
            Reason::Program => "program",
            Reason::Host => "host",
            Reason::Port => "port",
            Reason::MethodPath => "method_path",
            Reason::RawTraffic => "raw_traffic",
            Reason::HostName => "host_name",
            Reason::PathForm => "path_form",
            Reason::HostMismatch => "host_mismatch",
            Reason::Resolve(_) => "resolve",
            Reason::Blocked(_) => "blocked_address",
            Reason::Address(_) => "allowed_ips",
        }
    }
}

/// Whether the policy could allow this request at some address: the question asked before a
/// name is resolved, so a name no rule could allow is never looked up (no DNS lookups as a
/// side channel). On a deny, says what was missing.
pub(crate) fn decide(
    policy: &Policy,
    caller: &Caller,
    host: &str,
    port: u16,
    http: Option<HttpRequest>,
) -> Result<RuleRef, Reason> {
    decide_at(&any_address(policy), caller, host, port, http, Some(ANY))
}

/// The addresses among `addrs` the policy allows this request to, and the rule that allows
/// the first: the matcher decides each resolved address, so `allowed_ips` holds on what the
/// proxy connects to, never on the name.
fn decide_addrs(
    policy: &Policy,
    caller: &Caller,
    host: &str,
    port: u16,
    http: Option<HttpRequest>,
    addrs: &[SocketAddr],
) -> Result<(RuleRef, Vec<SocketAddr>), Reason> {
    let mut rule = None;
    let mut allowed = Vec::new();
    for a in addrs {
        if let Ok(r) = decide_at(policy, caller, host, port, http.clone(), Some(a.ip().to_canonical())) {
            rule.get_or_insert(r);
            allowed.push(*a);
        }
    }
    match rule {
        Some(rule) => Ok((rule, allowed)),
        None => {
            // Allowed at some address (asked before resolving), so `allowed_ips` refused these.
            decide(policy, caller, host, port, http)?;
            let list: Vec<String> = addrs.iter().map(|a| a.ip().to_string()).collect();
            Err(Reason::Address(list.join(", ")))
        }
    }
}

/// An address inside every `allowed_ips` of [`any_address`]'s policy.
const ANY: IpAddr = IpAddr::V4(Ipv4Addr::UNSPECIFIED);

/// The policy with each `allowed_ips` widened to every IPv4 address, so that [`ANY`] stands for
/// "some address".
fn any_address(policy: &Policy) -> Policy {
    let all = IpNet { addr: ANY, prefix: 0 };
    widen(policy, |ep| {
        Some(Endpoint { allowed_ips: if ep.allowed_ips.is_empty() { Vec::new() } else { vec![all] }, ..ep.clone() })
    })
}

/// Decides a request whole: first at no particular address (rules without `allowed_ips`);
/// failing that, whether some address could be allowed, before `resolve` is called; then at
/// each resolved address. `Ok((rule, None))`: allowed whatever the name resolves to;
/// `Ok((rule, Some(addrs)))`: allowed only at these.
pub(crate) async fn decide_resolved(
    policy: &Policy,
    caller: &Caller,
    host: &str,
    port: u16,
    http: Option<HttpRequest>,
    resolve: impl Future<Output = Result<Vec<SocketAddr>, Reason>>,
) -> Result<(RuleRef, Option<Vec<SocketAddr>>), Reason> {
    if let Ok(rule) = decide_at(policy, caller, host, port, http.clone(), None) {
        return Ok((rule, None));
    }
    decide(policy, caller, host, port, http.clone())?;
    let addrs = resolve.await?;
    decide_addrs(policy, caller, host, port, http, &addrs).map(|(rule, only)| (rule, Some(only)))
}

/// Asks the matcher about one address; on a deny, says what was missing.
fn decide_at(
    policy: &Policy,
    caller: &Caller,
    host: &str,
    port: u16,
    http: Option<HttpRequest>,
    addr: Option<IpAddr>,
) -> Result<RuleRef, Reason> {
    if !Domain::Host.contains(host) {
        return Err(Reason::HostName);
    }
    let want_http = http.is_some();
    let req = NetworkRequest { addr, ..request(caller, host, port, http) };
    if let Some(rule) = policy.network_rule_for(&req) {
        return Ok(rule);
    }
    // Widen one dimension at a time, narrowest question first; the first widened policy
    // that still refuses names the missing piece.
    let raw = NetworkRequest { http: None, ..req };
    let any_endpoint = widen(policy, |_| Some(l4(host.to_string(), vec![port])));
    if any_endpoint.network_rule_for(&raw).is_none() {
        return Err(Reason::Program);
    }
    let any_port =
        widen(policy, |ep| Some(Endpoint { allowed_ips: ep.allowed_ips.clone(), ..l4(ep.host.clone(), vec![port]) }));
    if any_port.network_rule_for(&raw).is_none() {
        return Err(Reason::Host);
    }
    let any_protocol = widen(policy, |ep| {
        Some(Endpoint { allowed_ips: ep.allowed_ips.clone(), ..l4(ep.host.clone(), ep.ports.clone()) })
    });
    if any_protocol.network_rule_for(&raw).is_none() {
        return Err(Reason::Port);
    }
    Err(if want_http { Reason::MethodPath } else { Reason::RawTraffic })
}

/// Whether an enforced `rest` endpoint could allow some request from this program to this
/// host and port: then a CONNECT is terminated and each request inside is decided.
pub(crate) fn may_inspect(policy: &Policy, caller: &Caller, host: &str, port: u16) -> bool {
    let any_request = widen(&any_address(policy), |ep| {
        ep.is_enforced_rest().then(|| Endpoint {
            access: Some(AccessPreset::Full),
            rules: Vec::new(),
            deny_rules: Vec::new(),
            ..ep.clone()
        })
    });
    let probe = HttpRequest { method: "GET".into(), path: "/".into(), ..Default::default() };
    let req = NetworkRequest { addr: Some(ANY), ..request(caller, host, port, Some(probe)) };
    any_request.network_rule_for(&req).is_some()
}

fn request(caller: &Caller, host: &str, port: u16, http: Option<HttpRequest>) -> NetworkRequest {
    NetworkRequest {
        program: caller.program.clone(),
        ancestors: caller.ancestors.clone(),
        host: host.to_string(),
        port,
        http,
        ..Default::default()
    }
}

/// The policy with every endpoint replaced by `f(endpoint)` (dropped when `None`).
fn widen(policy: &Policy, f: impl Fn(&Endpoint) -> Option<Endpoint>) -> Policy {
    let mut out = Policy { network_policies: policy.network_policies.clone(), ..Policy::default() };
    for np in out.network_policies.values_mut() {
        // A rule without endpoints still lists its programs.
        if np.endpoints.is_empty() {
            np.endpoints.push(l4(String::new(), Vec::new()));
        }
        np.endpoints = np.endpoints.iter().filter_map(&f).collect();
    }
    out
}

/// An endpoint with L4 authority on these hosts and ports.
fn l4(host: String, ports: Vec<u16>) -> Endpoint {
    Endpoint {
        host,
        ports,
        protocol: Protocol::Tcp,
        enforcement: Enforcement::Enforce,
        access: None,
        rules: Vec::new(),
        deny_rules: Vec::new(),
        ..Default::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const POLICY: &str = r#"
version: 1
network_policies:
  api:
    endpoints:
      - host: api.example.com
        port: 443
        protocol: rest
        enforcement: enforce
        rules:
          - allow: { method: GET, path: "/repos/**" }
        deny_rules: [{ method: "*", path: "/repos/*/secret" }]
      - { host: raw.example.com, port: 22 }
      - { host: mcp.example.com, port: 443, protocol: mcp, enforcement: enforce }
    binaries: [{ path: /usr/bin/curl }]
"#;

    fn curl() -> Caller {
        Caller { program: "/usr/bin/curl".into(), ancestors: vec!["/bin/bash".into()], pid: 1, ..Default::default() }
    }

    fn get(path: &str) -> Option<HttpRequest> {
        Some(HttpRequest { method: "GET".into(), path: path.into(), ..Default::default() })
    }

    #[test]
    fn reasons_name_what_was_missing() {
        let p = Policy::from_yaml(POLICY).unwrap();
        let c = curl();
        assert_eq!(decide(&p, &c, "api.example.com", 443, get("/repos/x")).unwrap().rule, "api");
        assert_eq!(decide(&p, &c, "api.example.com", 443, get("/repos/x/secret")), Err(Reason::MethodPath));
        assert_eq!(decide(&p, &c, "api.example.com", 443, get("/users")), Err(Reason::MethodPath));
        assert_eq!(decide(&p, &c, "api.example.com", 443, None), Err(Reason::RawTraffic));
        assert_eq!(decide(&p, &c, "api.example.com", 80, get("/repos/x")), Err(Reason::Port));
        assert_eq!(decide(&p, &c, "other.example.com", 443, get("/")), Err(Reason::Host));
        assert_eq!(decide(&p, &c, "raw.example.com", 22, None).unwrap().rule, "api");
        assert_eq!(decide(&p, &c, "mcp.example.com", 443, None), Err(Reason::RawTraffic));
        assert_eq!(decide(&p, &c, "::1", 443, None), Err(Reason::HostName));
        let py = Caller { program: "/usr/bin/python3".into(), ancestors: vec![], pid: 1, ..Default::default() };
        assert_eq!(decide(&p, &py, "api.example.com", 443, get("/repos/x")), Err(Reason::Program));
        let child = Caller {
            program: "/usr/bin/python3".into(),
            ancestors: vec!["/usr/bin/curl".into()],
            pid: 1,
            ..Default::default()
        };
        assert!(decide(&p, &child, "api.example.com", 443, get("/repos/x")).is_ok());
    }

    #[test]
    fn inspection_only_where_rest_rules_could_allow() {
        let p = Policy::from_yaml(POLICY).unwrap();
        let c = curl();
        assert!(may_inspect(&p, &c, "api.example.com", 443));
        assert!(!may_inspect(&p, &c, "api.example.com", 80));
        assert!(!may_inspect(&p, &c, "mcp.example.com", 443));
        assert!(!may_inspect(&p, &c, "raw.example.com", 22));
        let py = Caller { program: "/usr/bin/python3".into(), ancestors: vec![], pid: 1, ..Default::default() };
        assert!(!may_inspect(&p, &py, "api.example.com", 443));
    }
}
