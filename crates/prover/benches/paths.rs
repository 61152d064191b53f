//! Where a proof's time goes, beside the floors measured in the same run:
//! - a cache hit keyed by stored versions (what the gateway uses) against one keyed by
//!   both policies' hashes, and the candidate's hash alone (which the gateway computes once
//!   per create anyway, to store the policy);
//! - the union shapes proved by z3 alone (the fast path off) against the fast path, and
//!   what reaching z3 costs before any solving (a context and a solver).
//!
//! Run: `cargo bench -p openshell-prover --bench paths [-- FILTER]`.

mod common;

use std::time::{Duration, Instant};

use openshell_prover::{BoundaryId, Budget, CacheKey, Prover, StoredPolicy, Verdict, check_by_z3_only, check_uncached};

use common::{Bench, boundary, split_boundary, within};

fn main() {
    let bench = Bench::from_args();
    let deadline = || Instant::now() + Duration::from_secs(60);
    let is_within = |v: &Verdict| v.is_within();
    let (b, w) = (boundary(50), within(50));

    let hash = bench.measure("50 rules, candidate hash", 1000, None, || w.hash(), |_| true);
    let prover = Prover::new(Duration::from_secs(60));
    prover.check(&b, &w);
    bench.measure("50 rules, cache hit (hash keys)", 1000, Some(&hash), || prover.check(&b, &w), is_within);
    let key = CacheKey {
        boundary: BoundaryId::Stored {
            parent: Some(StoredPolicy { sandbox: [7; 16], version: 3, hash: b.hash() }),
            global_version: 0,
        },
        candidate: w.hash(),
    };
    let budget = Budget::new(deadline());
    prover.check_keyed(key, &b, &w, &budget);
    bench.measure(
        "50 rules, cache hit (stored versions)",
        10_000,
        Some(&hash),
        || prover.cached_verdict(&key),
        |v| v.as_ref().is_some_and(Verdict::is_within),
    );

    let context = bench.measure(
        "z3 context and solver, nothing solved",
        100,
        None,
        || {
            let mut cfg = z3::Config::new();
            cfg.set_model_generation(true);
            z3::with_z3_config(&cfg, || drop(z3::Solver::new()))
        },
        |_| true,
    );
    for n in [1, 10] {
        let (s, w) = (split_boundary(n), within(n));
        let fast = bench.measure(
            &format!("{n} rules, within by union (fast path)"),
            100,
            Some(&context),
            || check_uncached(&s, &w, deadline()),
            is_within,
        );
        let label = format!("{n} rules, within by union (z3 only)");
        if bench.wants(&label) {
            bench.measure(&label, 20, Some(&fast), || check_by_z3_only(&s, &w, deadline()), is_within);
        }
    }
}
