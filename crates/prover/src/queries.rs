//! `query`, decided exactly when the rules allow it: a query only matters through, per
//! key, which kinds of values it carries, a kind being the set of the key's matchers a
//! value satisfies. The kinds that exist come from the glob automata ([`crate::automaton`]),
//! each with an example value; every distinct outcome of the rules' query conditions over
//! a choice of kinds per key (or the key absent) is one class, and the network check runs
//! once per class on policies whose rules no longer have queries: the rules whose
//! condition holds in the class kept, the others gone. `None` when the classes cannot be
//! enumerated within the limits; the caller then falls back to [`crate::approx`].

use std::borrow::Cow;
use std::collections::BTreeMap;

use openshell_policy::glob::Domain;
use openshell_policy::{HttpRequest, L7Match, Policy, ValueMatcher, query_allows, query_denies};

use crate::automaton::Globs;
use crate::limits::{MAX_QUERY_CLASSES, MAX_QUERY_KINDS};

pub type Query = BTreeMap<String, Vec<String>>;

/// Rules (allow and deny) of enforced rest endpoints that carry a query.
fn query_rules(p: &Policy) -> impl Iterator<Item = &L7Match> {
    p.network_policies
        .values()
        .flat_map(|np| &np.endpoints)
        .filter(|e| e.is_enforced_rest())
        .flat_map(|e| e.rules.iter().map(|r| &r.allow).chain(&e.deny_rules))
        .filter(|m| !m.query.is_empty())
}

/// One representative query per class; a single empty query when no rule has one.
pub fn classes(a: &Policy, b: &Policy) -> Option<Vec<Query>> {
    let mut by_key: BTreeMap<&str, Vec<&ValueMatcher>> = BTreeMap::new();
    for m in query_rules(a).chain(query_rules(b)) {
        for (k, v) in &m.query {
            let list = by_key.entry(k).or_default();
            if !list.contains(&v) {
                list.push(v);
            }
        }
    }
    let mut out: Vec<Query> = vec![Query::new()];
    for (key, matchers) in by_key {
        let options = key_options(&matchers)?;
        let mut next = Vec::with_capacity(out.len() * options.len());
        for q in &out {
            for values in &options {
                let mut q = q.clone();
                if !values.is_empty() {
                    q.insert(key.to_string(), values.clone());
                }
                next.push(q);
            }
        }
        if next.len() > MAX_QUERY_CLASSES {
            return None;
        }
        out = next;
    }
    Some(out)
}

/// The value lists worth trying for one key: absent (empty), and one list per distinct
/// outcome of "all values match m" / "some value matches m" over the key's matchers.
fn key_options(matchers: &[&ValueMatcher]) -> Option<Vec<Vec<String>>> {
    let kinds = kinds(matchers)?;
    if kinds.len() > MAX_QUERY_KINDS {
        return None;
    }
    let mut seen: Vec<Vec<(bool, bool)>> = Vec::new();
    let mut options = vec![vec![]];
    for subset in 1u32..(1 << kinds.len()) {
        let present: Vec<&(Vec<bool>, String)> =
            kinds.iter().enumerate().filter(|(i, _)| subset & (1 << i) != 0).map(|(_, k)| k).collect();
        let outcome: Vec<(bool, bool)> = (0..matchers.len())
            .map(|m| (present.iter().all(|(v, _)| v[m]), present.iter().any(|(v, _)| v[m])))
            .collect();
        if !seen.contains(&outcome) {
            seen.push(outcome);
            options.push(present.iter().map(|(_, s)| s.clone()).collect());
        }
    }
    Some(options)
}

/// Every realizable "which matchers match" vector, with an example value. Value globs
/// (`*` crosses everything) are searched as one-segment program-path globs: when no
/// literal holds `/` (or a byte outside that domain), a value with `/` behaves like one
/// with another non-literal byte instead, so no kind is lost; each example is re-checked
/// by the matcher's own value matching.
fn kinds(matchers: &[&ValueMatcher]) -> Option<Vec<(Vec<bool>, String)>> {
    let mut globs = Globs::default();
    // Group 0 is the search's subject (it prunes on it): every one-segment value.
    let mut groups: Vec<Vec<u32>> = vec![vec![globs.id(Domain::Program, "/*")?]];
    for m in matchers {
        let mut ids = Vec::new();
        for g in m.globs() {
            if g.bytes().any(|c| c == b'/' || (c != b'*' && !Domain::Program.has_char(c))) {
                return None;
            }
            let mut collapsed = String::with_capacity(g.len());
            for c in g.chars() {
                if !(c == '*' && collapsed.ends_with('*')) {
                    collapsed.push(c);
                }
            }
            ids.push(globs.id(Domain::Program, &format!("/{collapsed}"))?);
        }
        groups.push(ids);
    }
    let refs: Vec<&[u32]> = groups.iter().map(Vec::as_slice).collect();
    let found = globs.kinds(Domain::Program, &refs, |m| m[0])?;
    let mut out = Vec::with_capacity(found.len());
    for (vector, path) in found {
        let vector = vector[1..].to_vec();
        let value = path.strip_prefix('/')?.to_string();
        let real: Vec<bool> = matchers.iter().map(|m| m.matches(&value)).collect();
        if real != vector {
            return None;
        }
        out.push((vector, value));
    }
    Some(out)
}

/// The policy as it acts on requests carrying query `q`: allow rules whose query condition
/// holds lose it, the others are gone; deny rules likewise. An enforced rest endpoint left
/// without a way to allow anything is gone. A policy without query rules is returned as
/// it is.
pub fn at<'p>(p: &'p Policy, q: &Query) -> Cow<'p, Policy> {
    if query_rules(p).next().is_none() {
        return Cow::Borrowed(p);
    }
    let http = HttpRequest { query: q.clone(), ..HttpRequest::default() };
    let mut out = p.clone();
    for np in out.network_policies.values_mut() {
        np.endpoints.retain_mut(|e| {
            if !e.is_enforced_rest() {
                return true;
            }
            e.rules.retain(|r| query_allows(&r.allow, &http));
            e.rules.iter_mut().for_each(|r| r.allow.query.clear());
            e.deny_rules.retain(|d| query_denies(d, &http));
            e.deny_rules.iter_mut().for_each(|d| d.query.clear());
            e.rules.sort();
            e.rules.dedup();
            e.deny_rules.sort();
            e.deny_rules.dedup();
            e.access.is_some() || !e.rules.is_empty()
        });
    }
    out.network_policies.retain(|_, np| !np.endpoints.is_empty());
    Cow::Owned(out)
}
