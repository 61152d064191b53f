//! Turning a request found on the approximated policies into one the real policies
//! disagree on. The approximations drop query constraints, so the request may need a
//! query: one that satisfies a candidate allow rule's query, and perhaps triggers a
//! boundary deny rule's query or falls outside a boundary allow rule's. A few such query
//! maps are built from the rules' own globs and each is checked by the matcher.

use std::collections::BTreeMap;

use openshell_policy::value_glob;
use openshell_policy::{Access, HttpRequest, L7Match, NetworkRequest, Policy, ValueMatcher, l7_matches};

use crate::limits::MAX_QUERY_TRIES;

type Query = BTreeMap<String, Vec<String>>;

/// The request itself if the real policies disagree on it, or it with a query that makes
/// them, or `None`.
pub fn disagreeing(boundary: &Policy, candidate: &Policy, req: NetworkRequest) -> Option<NetworkRequest> {
    let differs = |r: &NetworkRequest| {
        let a = Access::Network(r.clone());
        candidate.allows(&a) && !boundary.allows(&a)
    };
    if differs(&req) {
        return Some(req);
    }
    let http = req.http.clone()?;
    let wants = rules_for(candidate, &http, false);
    let denies = rules_for(boundary, &http, true);
    let avoids = rules_for(boundary, &http, false);
    let mut tries: Vec<Query> = Vec::new();
    for want in wants.iter().map(|m| Some(*m)).chain([None]) {
        let base = want.map(|m| sample(&m.query, 0)).unwrap_or_default();
        let alt = want.map(|m| sample(&m.query, 1)).unwrap_or_default();
        tries.push(base.clone());
        tries.push(alt.clone());
        for d in &denies {
            tries.push(merged(&base, &sample(&d.query, 0)));
        }
        for a in &avoids {
            // A value the boundary rule's matcher refuses, under a key it needs.
            for (k, m) in &a.query {
                let mut q = alt.clone();
                let v = q.entry(k.clone()).or_default();
                if v.is_empty() {
                    v.push(outside(m));
                }
                tries.push(q);
            }
        }
    }
    tries.into_iter().take(MAX_QUERY_TRIES).find_map(|q| {
        let r = NetworkRequest { http: Some(HttpRequest { query: q, ..http.clone() }), ..req.clone() };
        differs(&r).then_some(r)
    })
}

/// Allow (or deny) rules with a query, of enforced rest endpoints, whose method and path
/// match the request.
fn rules_for<'a>(p: &'a Policy, http: &HttpRequest, deny: bool) -> Vec<&'a L7Match> {
    let mut out = Vec::new();
    for ep in p.network_policies.values().flat_map(|np| &np.endpoints).filter(|e| e.is_enforced_rest()) {
        let rules = if deny { crate::rules::denies(ep) } else { crate::rules::allows(ep) };
        out.extend(rules.into_iter().filter(|m| !m.query.is_empty() && l7_matches(m, http)));
    }
    out
}

/// One value per key: the `n`-th variant of the first glob's sample.
fn sample(q: &BTreeMap<String, ValueMatcher>, n: usize) -> Query {
    q.iter()
        .map(|(k, m)| {
            let g = m.globs().first().map(String::as_str).unwrap_or("");
            let v = if n == 0 || !g.contains('*') {
                value_glob::sample(g)
            } else {
                g.replacen('*', "9z", 1).replace('*', "")
            };
            (k.clone(), vec![v])
        })
        .collect()
}

fn merged(a: &Query, b: &Query) -> Query {
    let mut out = a.clone();
    for (k, vs) in b {
        out.entry(k.clone()).or_default().extend(vs.iter().cloned());
    }
    out
}

/// A value no glob of the matcher matches, when a short search finds one.
fn outside(m: &ValueMatcher) -> String {
    ["", "0", "zz", "~"].iter().map(|s| s.to_string()).find(|s| !m.matches(s)).unwrap_or_default()
}
