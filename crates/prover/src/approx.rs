//! The new policy fields, brought into what the network encoders model. The candidate is
//! widened and the boundary narrowed, field by field, so that "the widened candidate fits
//! in the narrowed boundary" implies "the candidate fits in the boundary": a `Within` stays
//! sound. Fields without a sound widening make the candidate `Unsupported`, naming them.
//!
//! - Enforced endpoints of other protocols, credential rewriting/signing/binding and
//!   `allow_encoded_slash`: candidate Unsupported; boundary: opaque endpoints dropped (they
//!   allow nothing through the matcher), the rest kept (the matcher does not read them).
//! - `tls`: ignored on both sides (the matcher does not read it).
//! - `allowed_ips`: exact, by address classes ([`crate::addresses`]).
//! - `query`: exact, by query classes ([`crate::queries`]); beyond their limits the
//!   candidate loses allow-rule queries and query deny rules (wider), the boundary loses
//!   query allow rules and deny-rule queries (narrower).
//! - Endpoint `path`: folded into the HTTP rules, exact when each rule's path and the
//!   endpoint's nest; otherwise removed from the candidate, and the boundary endpoint
//!   dropped.
//! - Hostless endpoints: a candidate one becomes one copy per host glob of the boundary
//!   and one for a host none matches; a boundary one, one copy per candidate host.
//! - `network_middlewares`: ignored in the candidate (they only block); boundary endpoints
//!   whose host a fail-closed middleware may select are dropped.
//!
//! A candidate endpoint that the boundary holds verbatim, for a superset of its programs,
//! is left out of the widened candidate rather than widened: it is within whatever its
//! fields mean. Every approximation is noted; a counterexample found on the approximations
//! that does not replay on the real policies then means "not decided": `Unsupported`,
//! naming them.

use openshell_policy::glob::Domain;
use openshell_policy::{
    ANY_METHOD, Binary, Endpoint, EndpointOptions, Enforcement, L7Match, L7Rule, OnError, Policy, Protocol,
};

/// A policy in the modelled shape, and the fields approximated to get it.
pub struct Approx {
    pub policy: Policy,
    pub notes: Vec<String>,
}

/// The candidate widened; `Err` names a field that has no sound widening. Endpoints the
/// boundary has verbatim (see [`verbatim`]) are left out instead of widened.
pub fn widen_candidate(c: &Policy, boundary: &Policy, exact_query: bool) -> Result<Approx, String> {
    let mut notes = Vec::new();
    let mut out = c.clone();
    if !out.network_middlewares.is_empty() {
        out.network_middlewares.clear();
        notes.push("network_middlewares (they only block; ignored)".into());
    }
    // Only a hostless endpoint needs the boundary's hosts: worked out at the first one.
    let mut split: Option<(Vec<String>, Option<String>)> = None;
    for (key, np) in out.network_policies.iter_mut() {
        let mut widened = Vec::with_capacity(np.endpoints.len());
        for (i, mut ep) in std::mem::take(&mut np.endpoints).into_iter().enumerate() {
            let at = format!("network_policies.{key}.endpoints[{i}]");
            if !ep.is_opaque() && needs_widening(&ep, exact_query) && verbatim(&ep, &np.binaries, boundary) {
                continue;
            }
            if ep.options.credential_binding.is_some() {
                return Err(format!(
                    "{at}.credential_binding: there are no provider credentials here to bind, so the proxy \
                     allows nothing through this endpoint; leave it out"
                ));
            }
            if ep.is_opaque() {
                let what = match ep.protocol {
                    Protocol::Rest => ep.options.credential_fields().join(", "),
                    _ => format!("protocol `{}` under `enforce`", ep.protocol.as_str()),
                };
                return Err(format!(
                    "{at}: {what} is decided by a handler the prover cannot model; use `audit` (L4 \
                     authority) or leave it out"
                ));
            }
            if let Some(f) = ep.options.credential_fields().first() {
                return Err(format!("{at}.{f}: credential handling is not something the prover can check"));
            }
            if ep.options.allow_encoded_slash {
                return Err(format!(
                    "{at}.allow_encoded_slash: the prover does not model how the proxy canonicalizes encoded slashes"
                ));
            }
            if ep.path.is_some() && !fold_path(&mut ep) {
                ep.path = None;
                notes.push(format!("{at}.path"));
            }
            if ep.is_enforced_rest() && !exact_query {
                for (j, r) in ep.rules.iter_mut().enumerate() {
                    if !r.allow.query.is_empty() {
                        r.allow.query.clear();
                        notes.push(format!("{at}.rules[{j}].allow.query"));
                    }
                }
                let before = ep.deny_rules.len();
                ep.deny_rules.retain(|d| d.query.is_empty());
                if ep.deny_rules.len() != before {
                    notes.push(format!("{at}.deny_rules[].query"));
                }
            }
            strip_unread(&mut ep);
            // Any host: split hosts by the boundary's host globs. A host none of them matches
            // is treated by the boundary like `fresh` (only its hostless endpoints, which
            // ignore the host, can allow it), so one copy per glob and one for `fresh` are
            // within exactly when the endpoint is.
            if ep.host.is_empty() {
                let (others, fresh) = split.get_or_insert_with(|| host_split(boundary));
                let Some(fresh) = &fresh else {
                    return Err(format!("{at}.allowed_ips: an endpoint without `host` could not be split by host"));
                };
                for h in others.iter().chain([fresh]) {
                    widened.push(Endpoint { host: h.clone(), ..ep.clone() });
                }
                continue;
            }
            widened.push(ep);
        }
        widened.sort();
        widened.dedup();
        np.endpoints = widened;
    }
    Ok(Approx { policy: out, notes })
}

/// Folds an endpoint `path` into HTTP rules the encoders model: L4 on a path is enforced
/// rest allowing any method there (raw traffic is on no path); an enforced rest endpoint's
/// allow rules (presets spelled out) take the narrower of their path and the endpoint's.
/// `false`, and the endpoint unchanged, when a rule's path and the endpoint's are not
/// comparable.
fn fold_path(ep: &mut Endpoint) -> bool {
    let Some(path) = ep.path.clone() else {
        return true;
    };
    if ep.is_l4() {
        *ep = Endpoint {
            protocol: Protocol::Rest,
            enforcement: Enforcement::Enforce,
            access: None,
            rules: vec![L7Rule { allow: L7Match::http(ANY_METHOD, path) }],
            deny_rules: vec![],
            path: None,
            ..ep.clone()
        };
        return true;
    }
    if !ep.is_enforced_rest() {
        return false;
    }
    let allows = crate::rules::allows(ep);
    let mut rules = Vec::with_capacity(allows.len());
    for m in allows {
        let Some(p) = crate::boundary::narrower(Domain::UrlPath, &m.path, &path) else {
            return false;
        };
        rules.push(L7Rule { allow: L7Match { path: p, ..m.clone() } });
    }
    rules.sort();
    rules.dedup();
    ep.access = None;
    ep.rules = rules;
    ep.path = None;
    true
}

/// The boundary's host globs (endpoints and middleware selectors), and a host none of them
/// matches (`None` if a few tries all matched one).
fn host_split(boundary: &Policy) -> (Vec<String>, Option<String>) {
    let mut globs: Vec<String> = boundary
        .network_policies
        .values()
        .flat_map(|np| &np.endpoints)
        .map(|e| e.host.clone())
        .chain(
            boundary
                .network_middlewares
                .values()
                .flat_map(|m| m.endpoints.include.iter().chain(&m.endpoints.exclude).cloned()),
        )
        .filter(|h| !h.is_empty())
        .collect();
    globs.sort();
    globs.dedup();
    let fresh = (0..8)
        .map(|n| format!("any-host.unmatched{n}.invalid"))
        .find(|h| !globs.iter().any(|g| openshell_policy::glob::Glob::host(g).is_ok_and(|g| g.matches(h))));
    (globs, fresh)
}

fn has_query(ep: &Endpoint) -> bool {
    ep.is_enforced_rest()
        && (ep.rules.iter().any(|r| !r.allow.query.is_empty()) || ep.deny_rules.iter().any(|d| !d.query.is_empty()))
}

/// Whether the endpoint has a field the encoders do not model exactly (or, for credential
/// handling, at all: a verbatim copy of the boundary's is still within).
fn needs_widening(ep: &Endpoint, exact_query: bool) -> bool {
    ep.host.is_empty()
        || ep.path.is_some()
        || (!exact_query && has_query(ep))
        || !ep.options.credential_fields().is_empty()
        || ep.options.allow_encoded_slash
}

/// Whether the boundary has this very endpoint in a rule that lists every one of `bins`
/// (the same strings), and no fail-closed middleware that may select its host: then the
/// boundary allows everything the endpoint allows those programs, whatever its fields mean.
fn verbatim(ep: &Endpoint, bins: &[Binary], boundary: &Policy) -> bool {
    let blocked = boundary.network_middlewares.values().any(|m| {
        m.on_error == OnError::FailClosed
            && (ep.host.is_empty()
                || m.endpoints.include.iter().any(|g| crate::network::hosts_may_overlap(g, &ep.host)))
    });
    !blocked
        && boundary
            .network_policies
            .values()
            .any(|np| bins.iter().all(|b| np.binaries.contains(b)) && np.endpoints.contains(ep))
}

/// The boundary narrowed: what the prover cannot model allows less or nothing.
pub fn narrow_boundary(b: &Policy, candidate: &Policy, exact_query: bool) -> Approx {
    let has_query = |ep: &Endpoint| !exact_query && has_query(ep);
    // Only a hostless endpoint needs the candidate's hosts: gathered at the first one.
    let mut candidate_hosts: Option<Vec<String>> = None;
    let mut notes = Vec::new();
    let mut out = b.clone();
    let blocking: Vec<String> = out
        .network_middlewares
        .values()
        .filter(|m| m.on_error == OnError::FailClosed)
        .flat_map(|m| m.endpoints.include.clone())
        .collect();
    out.network_middlewares.clear();
    let blocked = |host: &str| blocking.iter().any(|g| crate::network::hosts_may_overlap(g, host));
    for (key, np) in out.network_policies.iter_mut() {
        let mut kept = Vec::with_capacity(np.endpoints.len());
        for (i, mut ep) in std::mem::take(&mut np.endpoints).into_iter().enumerate() {
            let at = format!("boundary network_policies.{key}.endpoints[{i}]");
            // Opaque endpoints allow nothing through the matcher: dropping them is exact.
            if ep.is_opaque() {
                continue;
            }
            // Any host: one copy per host glob of the candidate is all a candidate request
            // can reach, and each copy is inside the endpoint.
            if ep.host.is_empty() {
                for h in candidate_hosts.get_or_insert_with(|| hosts_of(candidate)).iter() {
                    let mut copy = ep.clone();
                    copy.host = h.clone();
                    if !blocked(&copy.host) && fold_path(&mut copy) && !has_query(&copy) {
                        strip_unread(&mut copy);
                        kept.push(copy);
                    }
                }
                if ep.path.is_some() || has_query(&ep) {
                    notes.push(format!("{at} (no host; path or query)"));
                }
                continue;
            }
            if blocked(&ep.host) {
                notes.push(format!("{at} (a fail-closed middleware may select its host)"));
                continue;
            }
            if ep.path.is_some() && !fold_path(&mut ep) {
                notes.push(format!("{at}.path"));
                continue;
            }
            if ep.is_enforced_rest() && !exact_query {
                let before = ep.rules.len();
                ep.rules.retain(|r| r.allow.query.is_empty());
                if ep.rules.len() != before {
                    notes.push(format!("{at}.rules[].allow.query"));
                }
                if ep.access.is_none() && ep.rules.is_empty() {
                    continue;
                }
                for (j, d) in ep.deny_rules.iter_mut().enumerate() {
                    if !d.query.is_empty() {
                        d.query.clear();
                        notes.push(format!("{at}.deny_rules[{j}].query"));
                    }
                }
                ep.deny_rules.sort();
                ep.deny_rules.dedup();
            }
            strip_unread(&mut ep);
            kept.push(ep);
        }
        kept.sort();
        kept.dedup();
        np.endpoints = kept;
    }
    out.network_policies.retain(|_, np| !np.endpoints.is_empty());
    Approx { policy: out, notes }
}

/// The policy's host globs, each once.
fn hosts_of(p: &Policy) -> Vec<String> {
    let mut hosts: Vec<String> = p
        .network_policies
        .values()
        .flat_map(|np| &np.endpoints)
        .map(|e| e.host.clone())
        .filter(|h| !h.is_empty())
        .collect();
    hosts.sort();
    hosts.dedup();
    hosts
}

/// Clears what the matcher never reads on a modelled endpoint (TLS mode, options, and the
/// rules of an L4 endpoint), so the encoders see one shape per meaning.
fn strip_unread(ep: &mut Endpoint) {
    ep.tls = Default::default();
    ep.options = EndpointOptions::default();
    if ep.is_l4() {
        ep.protocol = Protocol::Tcp;
        ep.enforcement = Enforcement::Audit;
        ep.access = None;
        ep.rules.clear();
        ep.deny_rules.clear();
    }
}
