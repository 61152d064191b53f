//! The hint for a network counterexample: the candidate rule that admits it and what the
//! nearest boundary rule lacks ("boundary rule github_api allows GET, HEAD, OPTIONS only on
//! api.github.com").

use openshell_policy::glob::{Domain, Glob};
use openshell_policy::{Endpoint, NetworkPolicy, NetworkRequest, Policy};

pub struct NetworkHint {
    pub text: String,
    pub candidate_rule: Option<String>,
    pub boundary_rule: Option<String>,
}

pub fn network(boundary: &Policy, candidate: &Policy, req: &NetworkRequest) -> NetworkHint {
    let cand = candidate.network_rule_for(req);
    let cand_text = match &cand {
        Some(r) => {
            let ep = &candidate.network_policies[&r.rule].endpoints[r.endpoint];
            format!("candidate rule {} ({}) allows it", r.rule, describe(ep))
        }
        None => "the candidate allows it".into(),
    };
    let host = req.host.to_ascii_lowercase();
    let program = |np: &NetworkPolicy| {
        np.binaries.iter().any(|b| Glob::path(&b.path, Domain::Program).is_ok_and(|g| g.matches(&req.program)))
    };
    let host_ok = |ep: &Endpoint| {
        (ep.host.is_empty() && !ep.allowed_ips.is_empty()) || Glob::host(&ep.host).is_ok_and(|g| g.matches(&host))
    };
    if boundary.middleware_blocks(&host) {
        return NetworkHint {
            text: format!(
                "{cand_text}; a boundary middleware that fails closed selects {host}, so the boundary allows \
                 nothing there"
            ),
            candidate_rule: cand.map(|r| r.rule),
            boundary_rule: None,
        };
    }
    // Score: host matters most, then port, then program.
    let nearest =
        boundary.network_policies.iter().flat_map(|(k, np)| np.endpoints.iter().map(move |ep| (k, np, ep))).max_by_key(
            |(_, np, ep)| {
                4 * u8::from(host_ok(ep)) + 2 * u8::from(ep.ports.contains(&req.port)) + u8::from(program(np))
            },
        );
    let Some((key, np, ep)) = nearest else {
        return NetworkHint {
            text: format!("{cand_text}; the boundary allows no network access"),
            candidate_rule: cand.map(|r| r.rule),
            boundary_rule: None,
        };
    };
    let lacks = if !host_ok(ep) {
        format!("allows host {}, not {}", ep.host, host)
    } else if !ep.ports.contains(&req.port) {
        format!("allows {} only on port(s) {}", ep.host, ports(ep))
    } else if !program(np) {
        let names: Vec<&str> = np.binaries.iter().take(3).map(|b| b.path.as_str()).collect();
        if names.is_empty() {
            "lists no program".to_string()
        } else {
            format!("does not list program {} (it lists {})", req.program, names.join(", "))
        }
    } else if !ep.allowed_ips.is_empty() && !req.addr.is_some_and(|a| ep.allowed_ips.iter().any(|n| n.contains(&a))) {
        let nets: Vec<String> = ep.allowed_ips.iter().take(4).map(ToString::to_string).collect();
        let addr = req.addr.map_or("an unknown address".to_string(), |a| a.to_string());
        format!("allows only addresses in {}, not {addr}", nets.join(", "))
    } else if ep.path.as_ref().is_some_and(|p| {
        req.http.as_ref().is_none_or(|h| !Glob::path(p, Domain::UrlPath).is_ok_and(|g| g.matches(&h.path)))
    }) {
        format!("allows only HTTP on path {}", ep.path.as_deref().unwrap_or_default())
    } else if req.http.is_none() {
        format!("allows only inspected HTTP on {} (rest, enforce), not raw traffic", ep.host)
    } else if ep.is_opaque() {
        format!("is a {} endpoint the prover does not model", ep.protocol.as_str())
    } else {
        format!("allows {} only on {}", l7_summary(ep), ep.host)
    };
    NetworkHint {
        text: format!("{cand_text}; boundary rule {key} {lacks}"),
        candidate_rule: cand.map(|r| r.rule),
        boundary_rule: Some(key.clone()),
    }
}

fn ports(ep: &Endpoint) -> String {
    let v: Vec<String> = ep.ports.iter().map(u16::to_string).collect();
    v.join(", ")
}

fn describe(ep: &Endpoint) -> String {
    if ep.is_l4() {
        format!("{}:{} any traffic", ep.host, ports(ep))
    } else {
        format!("{}:{} {}", ep.host, ports(ep), l7_summary(ep))
    }
}

fn l7_summary(ep: &Endpoint) -> String {
    let allow = match (ep.access, ep.rules.as_slice()) {
        (Some(p), _) => match p.methods() {
            Some(ms) => ms.join(", "),
            None => "any method".into(),
        },
        (None, rules) => {
            let v: Vec<String> = rules.iter().take(4).map(|r| format!("{} {}", r.allow.method, r.allow.path)).collect();
            let more = if rules.len() > 4 { ", ..." } else { "" };
            format!("{}{more}", v.join(", "))
        }
    };
    if ep.deny_rules.is_empty() {
        allow
    } else {
        let d: Vec<String> = ep.deny_rules.iter().take(3).map(|r| format!("{} {}", r.method, r.path)).collect();
        format!("{allow} (denying {})", d.join(", "))
    }
}
