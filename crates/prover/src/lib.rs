//! Proves with z3 that a candidate policy fits inside a boundary policy.
//!
//! [`Prover::check`] answers [`Verdict::Within`] only when every access the candidate allows
//! (by `openshell_policy`'s matcher) the boundary allows too. An [`Verdict::Exceeds`]
//! counterexample is replayed through the matcher against both policies before it is
//! returned. [`boundary`] builds what a child must fit in from its parent and the global
//! maximum. Each check makes its own z3 context on the calling thread, so a [`Prover`] is
//! `Send + Sync` and fits `tokio::task::spawn_blocking`.

mod addresses;
mod approx;
mod automaton;
mod boundary;
mod budget;
mod cache;
mod cover;
mod encode;
mod hint;
pub mod limits;
mod network;
mod queries;
mod replay;
mod sections;
mod verdict;

use std::time::{Duration, Instant};

use openshell_policy::{Access, HttpRequest, NetworkRequest, Policy};

pub use boundary::boundary;
pub use budget::Budget;
pub use verdict::{Counterexample, Section, Verdict};

/// The checker: a per-check timeout and a verdict cache keyed by the two policy hashes.
pub struct Prover {
    timeout: Duration,
    cache: cache::VerdictCache,
}

impl Prover {
    pub fn new(timeout: Duration) -> Self {
        Prover { timeout, cache: cache::VerdictCache::default() }
    }

    /// Is everything `candidate` allows also allowed by `boundary`?
    pub fn check(&self, boundary: &Policy, candidate: &Policy) -> Verdict {
        self.check_within(boundary, candidate, &Budget::new(Instant::now() + self.timeout))
    }

    /// [`Prover::check`] that also stops when `budget` is spent (its deadline, or a cancel
    /// from another thread), whichever comes first with this prover's own timeout.
    pub fn check_within(&self, boundary: &Policy, candidate: &Policy, budget: &Budget) -> Verdict {
        let key = (boundary.hash(), candidate.hash());
        if let Some(v) = self.cache.get(&key) {
            return v;
        }
        let budget = budget.capped(Instant::now() + self.timeout);
        let verdict = check_budgeted(boundary, candidate, &budget);
        // A timeout may pass on a quieter machine; every other answer is a fact.
        if !matches!(verdict, Verdict::Inconclusive(_)) {
            self.cache.insert(key, verdict.clone());
        }
        verdict
    }

    /// Verdicts currently cached.
    pub fn cached(&self) -> usize {
        self.cache.len()
    }
}

/// One check without the cache: sizes, then the cheap exact sections, then the network,
/// once per class of resolved addresses, on the widened candidate and narrowed boundary
/// ([`approx`]).
pub fn check_uncached(boundary: &Policy, candidate: &Policy, deadline: Instant) -> Verdict {
    check_budgeted(boundary, candidate, &Budget::new(deadline))
}

/// [`check_uncached`] under a [`Budget`]: stops with `Inconclusive` when it is spent.
pub fn check_budgeted(boundary: &Policy, candidate: &Policy, budget: &Budget) -> Verdict {
    if let Some(reason) = too_large("candidate", candidate).or_else(|| too_large("boundary", boundary)) {
        return Verdict::Unsupported(reason);
    }
    let query_classes = queries::classes(boundary, candidate);
    let exact_query = query_classes.is_some();
    let wide = match approx::widen_candidate(candidate, boundary, exact_query) {
        Ok(a) => a,
        Err(reason) => return Verdict::Unsupported(reason),
    };
    let narrow = approx::narrow_boundary(boundary, &wide.policy, exact_query);
    let exact = sections::landlock(boundary, candidate)
        .or_else(|| sections::process(boundary, candidate))
        .or_else(|| sections::filesystem(boundary, candidate));
    if let Some(e) = exact {
        return replayed(
            boundary,
            candidate,
            Counterexample {
                access: e.access.to_string(),
                hint: e.hint,
                section: e.section,
                request: e.access,
                candidate_rule: None,
                boundary_rule: None,
            },
        );
    }
    let classes = match addresses::classes(&narrow.policy, &wide.policy) {
        Ok(c) => c,
        Err(reason) => return Verdict::Unsupported(reason),
    };
    let query_classes = query_classes.unwrap_or_else(|| vec![queries::Query::new()]);
    if classes.len() * query_classes.len() > limits::MAX_NETWORK_CHECKS {
        return Verdict::Unsupported(format!(
            "allowed_ips and query split requests into {} x {} classes; the prover's limit is {} checks",
            classes.len(),
            query_classes.len(),
            limits::MAX_NETWORK_CHECKS
        ));
    }
    let runs = classes.iter().flat_map(|a| query_classes.iter().map(move |q| (*a, q)));
    for (addr, query) in runs {
        if budget.spent() {
            return Verdict::Inconclusive(budget.reason());
        }
        let b = queries::at(&addresses::at(&narrow.policy, addr), query);
        let c = queries::at(&addresses::at(&wide.policy, addr), query);
        // The network section makes its own z3 context when it needs one: fresh per check,
        // so nothing z3 leaks across threads or checks.
        match network::find_excess(&b, &c, budget) {
            Ok(None) => continue,
            Ok(Some(req)) => {
                let http = req.http.map(|h| HttpRequest { query: query.clone(), ..h });
                let found = replay::disagreeing(boundary, candidate, NetworkRequest { addr, http, ..req });
                let Some(req) = found else {
                    let mut notes: Vec<String> = wide.notes.iter().chain(&narrow.notes).cloned().collect();
                    notes.dedup();
                    if notes.is_empty() {
                        return Verdict::Inconclusive(
                            "internal error: a network counterexample did not replay through the matcher".into(),
                        );
                    }
                    return Verdict::Unsupported(format!(
                        "not decided: the prover approximates {} and found no request that shows an excess",
                        notes.join(", ")
                    ));
                };
                let h = hint::network(boundary, candidate, &req);
                let access = Access::Network(req);
                return replayed(
                    boundary,
                    candidate,
                    Counterexample {
                        access: access.to_string(),
                        hint: h.text,
                        section: Section::Network,
                        request: access,
                        candidate_rule: h.candidate_rule,
                        boundary_rule: h.boundary_rule,
                    },
                );
            }
            Err(reason) => return Verdict::Inconclusive(reason),
        }
    }
    Verdict::Within
}

/// Reports a counterexample only if the matcher agrees with it on both policies.
fn replayed(boundary: &Policy, candidate: &Policy, cx: Counterexample) -> Verdict {
    if candidate.allows(&cx.request) && !boundary.allows(&cx.request) {
        Verdict::Exceeds(cx)
    } else {
        Verdict::Inconclusive(format!(
            "internal error: counterexample `{}` did not replay through the matcher",
            cx.access
        ))
    }
}

fn too_large(which: &str, p: &Policy) -> Option<String> {
    let nps = p.network_policies.values();
    let endpoints: usize = nps.clone().map(|np| np.endpoints.len()).sum();
    let binaries: usize = nps.clone().map(|np| np.binaries.len()).sum();
    let rules: usize = nps.flat_map(|np| &np.endpoints).map(|e| e.rules.len() + e.deny_rules.len()).sum();
    let over = |n: usize, max: usize, what: &str| {
        (n > max).then(|| format!("{which} has {n} {what}; the prover's limit is {max}"))
    };
    over(endpoints, limits::MAX_ENDPOINTS, "endpoints")
        .or_else(|| over(binaries, limits::MAX_BINARIES, "program globs"))
        .or_else(|| over(rules, limits::MAX_L7_RULES, "HTTP rules"))
}

#[cfg(test)]
mod send_sync {
    #[test]
    fn prover_is_send_and_sync() {
        fn assert<T: Send + Sync>() {}
        assert::<super::Prover>();
        assert::<super::Verdict>();
    }
}
