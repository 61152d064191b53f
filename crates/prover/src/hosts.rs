//! Host globs indexed by their literal tail, so that finding the globs that may contain, or
//! share a host with, a given one reads a few buckets instead of every glob.
//!
//! A glob's bucket is its labels right of its last wildcard label (`*.svc.example.com`:
//! `svc.example.com`; a literal host is its own bucket; an empty host, which only an
//! endpoint with `allowed_ips` has and which matches any host, the empty bucket). Every
//! host a glob matches ends in its bucket, label by label, so two globs that share a host
//! have buckets one of which ends the other. Buckets are keyed by their labels in reverse
//! (`com.example.svc`): the buckets that end a given one are its prefixes at dots, and those
//! that end in it are one range.

use std::collections::BTreeMap;
use std::ops::Bound;

/// The labels of a host glob right of its last wildcard label.
fn bucket(host: &str) -> &str {
    match host.rfind('*') {
        None => host,
        Some(i) => host[i..].find('.').map_or("", |j| &host[i + j + 1..]),
    }
}

/// A host's labels in reverse order: `api.example.com` is `com.example.api`.
fn reversed(host: &str) -> String {
    let mut out = String::with_capacity(host.len());
    for (i, label) in host.rsplit('.').enumerate() {
        if i > 0 {
            out.push('.');
        }
        out.push_str(label);
    }
    out
}

/// Items (indices the caller gives) by the bucket of their host glob.
#[derive(Default)]
pub struct HostIndex {
    buckets: BTreeMap<String, Vec<usize>>,
}

impl HostIndex {
    pub fn insert(&mut self, host: &str, item: usize) {
        self.buckets.entry(reversed(bucket(host))).or_default().push(item);
    }

    /// Items whose host glob may contain or match `host`: their bucket ends `host`'s (the
    /// empty bucket ends every one).
    pub fn containing(&self, host: &str) -> Vec<usize> {
        let mut out = Vec::new();
        let mut add = |key: &str| {
            if let Some(v) = self.buckets.get(key) {
                out.extend(v);
            }
        };
        add("");
        let key = reversed(bucket(host));
        for (i, c) in key.char_indices() {
            if c == '.' {
                add(&key[..i]);
            }
        }
        if !key.is_empty() {
            add(&key);
        }
        out
    }

    /// Items whose host glob may share a host with `host`: [`HostIndex::containing`] and the
    /// narrower ones, whose bucket ends in `host`'s (`**.a.example.com` beside
    /// `**.example.com`); every item for an empty `host`. No item that shares a host is
    /// missed; some returned may share none.
    pub fn meeting(&self, host: &str) -> Vec<usize> {
        let mut out = self.containing(host);
        let key = reversed(bucket(host));
        let below = if key.is_empty() { String::new() } else { format!("{key}.") };
        for (k, v) in self.buckets.range::<str, _>((Bound::Included(below.as_str()), Bound::Unbounded)) {
            if !k.starts_with(&below) {
                break;
            }
            if !k.is_empty() {
                out.extend(v);
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use openshell_policy::glob::Domain;

    use super::*;
    use crate::automaton::{Found, Globs};

    const GLOBS: &[&str] = &[
        "a.example.com",
        "x.a.example.com",
        "*.example.com",
        "**.example.com",
        "**.a.example.com",
        "a*.example.com",
        "*.*.example.com",
        "x.*.a.example.com",
        "*.example.org",
        "example.com",
        "",
    ];

    /// Nothing that shares a host with a glob, or contains it, is ever left out (decided
    /// exactly by the glob automata; the empty host matches every host).
    #[test]
    fn no_meeting_glob_is_missed() {
        let mut index = HostIndex::default();
        for (i, g) in GLOBS.iter().enumerate() {
            index.insert(g, i);
        }
        let mut globs = Globs::default();
        let ids: Vec<Option<u32>> =
            GLOBS.iter().map(|g| (!g.is_empty()).then(|| globs.id(Domain::Host, g).unwrap())).collect();
        for (i, inner) in GLOBS.iter().enumerate() {
            let (meeting, containing) = (index.meeting(inner), index.containing(inner));
            for (j, outer) in GLOBS.iter().enumerate() {
                let (shared, contains) = match (ids[i], ids[j]) {
                    (Some(x), Some(y)) => (
                        globs.find(Domain::Host, &[&[x], &[y]], |m| m[0] && m[1]) != Found::Nothing,
                        globs.covered(Domain::Host, x, &[y]) != Some(false),
                    ),
                    (_, None) => (true, true),
                    (None, Some(_)) => (true, false),
                };
                assert!(!shared || meeting.contains(&j), "{outer:?} meets {inner:?}");
                assert!(!contains || containing.contains(&j), "{outer:?} contains {inner:?}");
            }
            assert!(meeting.contains(&i) && containing.contains(&i));
        }
        assert_eq!(index.meeting("").len(), GLOBS.len());
        // Tails that end neither one another are not read at all.
        assert!(!index.meeting("**.example.com").contains(&8));
        assert!(!index.containing("**.example.com").contains(&1));
    }
}
