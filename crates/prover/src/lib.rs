//! Proves with z3 that a candidate policy fits inside a boundary policy.
//!
//! [`Prover::check`] answers [`Verdict::Within`] only when every access the candidate allows
//! (by `openshell_policy`'s matcher) the boundary allows too. An [`Verdict::Exceeds`]
//! counterexample is replayed through the matcher against both policies before it is
//! returned. [`boundary`] builds what a child must fit in from its parent and the global
//! maximum. Most checks never reach z3: exact solver-free paths decide what they can (a
//! single boundary endpoint, or a union of them cell by cell) and z3 decides the rest.
//! Each z3 check makes its own context on the calling thread, so a [`Prover`] is
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
mod hosts;
pub mod limits;
mod network;
mod queries;
mod replay;
mod rules;
mod sections;
mod verdict;

use std::sync::Arc;
use std::time::{Duration, Instant};

use openshell_policy::{Access, HttpRequest, NetworkRequest, Policy};

pub use boundary::boundary;
pub use budget::Budget;
pub use cache::{BoundaryId, CacheKey, StoredPolicy};
pub use verdict::{Counterexample, Section, Verdict};

use network::Solve;

/// The checker: a per-check timeout, a verdict cache (see [`CacheKey`]) and the boundaries
/// built from stored versions (see [`Prover::boundary_of`]).
pub struct Prover {
    timeout: Duration,
    cache: cache::VerdictCache,
    boundaries: cache::BoundaryCache,
}

impl Prover {
    pub fn new(timeout: Duration) -> Self {
        Prover { timeout, cache: cache::VerdictCache::default(), boundaries: cache::BoundaryCache::default() }
    }

    /// The boundary named `id`, which `build` makes (from the stored documents `id` names)
    /// only when no proof since it was last built needed it: a parent version's boundary is
    /// parsed and intersected with the global maximum once, not once per child. Only
    /// [`BoundaryId::Stored`] ids are kept.
    pub fn boundary_of<E>(&self, id: BoundaryId, build: impl FnOnce() -> Result<Policy, E>) -> Result<Arc<Policy>, E> {
        self.boundaries.get_or_build(id, build)
    }

    /// Boundaries currently kept.
    pub fn boundaries_kept(&self) -> usize {
        self.boundaries.len()
    }

    /// Is everything `candidate` allows also allowed by `boundary`?
    pub fn check(&self, boundary: &Policy, candidate: &Policy) -> Verdict {
        self.check_within(boundary, candidate, &Budget::new(Instant::now() + self.timeout))
    }

    /// [`Prover::check`] that also stops when `budget` is spent (its deadline, or a cancel
    /// from another thread), whichever comes first with this prover's own timeout. Cached
    /// under both policies' hashes.
    pub fn check_within(&self, boundary: &Policy, candidate: &Policy, budget: &Budget) -> Verdict {
        self.check_keyed(CacheKey::hashes(boundary, candidate), boundary, candidate, budget)
    }

    /// [`Prover::check_within`] cached under `key`, which the caller vouches names exactly
    /// these two policies (see [`BoundaryId::Stored`]): no policy is hashed here.
    pub fn check_keyed(&self, key: CacheKey, boundary: &Policy, candidate: &Policy, budget: &Budget) -> Verdict {
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

    /// The verdict cached under `key`, if any: a lookup, no proof and no policy at hand.
    pub fn cached_verdict(&self, key: &CacheKey) -> Option<Verdict> {
        self.cache.get(key)
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
    check_by(boundary, candidate, budget, Solve::FastFirst)
}

/// [`check_uncached`] with the solver-free network paths off: every candidate endpoint goes
/// to z3. Slow; for the differential tests, which hold the fast paths to z3's answers.
#[doc(hidden)]
pub fn check_by_z3_only(boundary: &Policy, candidate: &Policy, deadline: Instant) -> Verdict {
    check_by(boundary, candidate, &Budget::new(deadline), Solve::Z3Only)
}

/// [`check_uncached`] without z3: what only z3 could decide is `Inconclusive` with a reason
/// containing [`NEEDS_Z3`]. For the differential tests, which check what the fast paths
/// decide on their own.
#[doc(hidden)]
pub fn check_without_z3(boundary: &Policy, candidate: &Policy, deadline: Instant) -> Verdict {
    check_by(boundary, candidate, &Budget::new(deadline), Solve::FastOnly)
}

#[doc(hidden)]
pub use network::NEEDS_Z3;

fn check_by(boundary: &Policy, candidate: &Policy, budget: &Budget, solve_by: Solve) -> Verdict {
    if let Some(reason) = too_large("candidate", candidate)
        .or_else(|| too_large("boundary", boundary))
        .or_else(|| non_ascii_program("candidate", candidate))
        .or_else(|| non_ascii_program("boundary", boundary))
    {
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
        let (b_at, c_at) = (addresses::at(&narrow.policy, addr), addresses::at(&wide.policy, addr));
        let (b, c) = (queries::at(&b_at, query), queries::at(&c_at, query));
        // The network section makes its own z3 context when it needs one: fresh per check,
        // so nothing z3 leaks across threads or checks.
        match network::find_excess(&b, &c, budget, solve_by) {
            Ok(None) => continue,
            Ok(Some(req)) => {
                let in_class = |req: NetworkRequest| {
                    let http = req.http.map(|h| HttpRequest { query: query.clone(), ..h });
                    replay::disagreeing(boundary, candidate, NetworkRequest { addr, http, ..req })
                };
                let mut found = in_class(req);
                // A fast-path example of the widened candidate can fall where an approximated
                // field (a middleware, say) blocks it; z3 may still find one elsewhere that
                // the matcher confirms. Only then is the excess left unshown.
                if found.is_none() && solve_by == Solve::FastFirst {
                    match network::find_excess(&b, &c, budget, Solve::Z3Only) {
                        Ok(Some(req)) => found = in_class(req),
                        Ok(None) => {}
                        Err(reason) => return Verdict::Inconclusive(reason),
                    }
                }
                if found.is_none() && solve_by == Solve::FastOnly {
                    return Verdict::Inconclusive(format!("an example that did not replay, {NEEDS_Z3}"));
                }
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

/// Program globs may hold non-ASCII characters (upstream matches `/usr/bin/é*`), but the
/// prover's alphabet is ASCII (`Domain::char_ranges`): a policy with one is not proved.
fn non_ascii_program(which: &str, p: &Policy) -> Option<String> {
    p.network_policies.iter().find_map(|(key, np)| {
        np.binaries.iter().position(|b| !b.path.is_ascii()).map(|i| {
            format!(
                "{which} network_policies.{key}.binaries[{i}].path `{}` has a non-ASCII character; the prover \
                 models ASCII program paths only",
                np.binaries[i].path
            )
        })
    })
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
