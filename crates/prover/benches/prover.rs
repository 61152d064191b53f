//! Prover latency by shape: p50/p99 for 1, 10, 50 and 200 rules, within and exceeding,
//! covered by single boundary endpoints or only by their union, and the boundary a child
//! of such a parent gets under a global maximum of the same size (built on every proof
//! that is not a cache hit), each beside the floor of a trivially equal pair of the same
//! size measured in the same run (`p50/ref`, `p99/ref`); and a cache hit at 50 rules,
//! keyed by stored versions (what the gateway does) and by both policies' hashes. Plain
//! std timing, uncached checks.
//!
//! Run: `cargo bench -p openshell-prover --bench prover [-- FILTER]` (rows whose label
//! contains FILTER). Targets (issue 18, release build, quiet machine): p99 under 10 ms at
//! up to 50 rules, under 50 ms at 200; a cache hit in microseconds. This file uses only
//! API main's prover has, so `scripts/bench-prover.sh --before REF` runs it on older code
//! too, for a before/after table; `benches/paths.rs` measures the rest (z3 alone).

mod common;

use std::time::{Duration, Instant};

use openshell_policy::Policy;
use openshell_prover::{BoundaryId, Budget, CacheKey, Prover, StoredPolicy, Verdict, check_uncached};

use common::{Bench, boundary, exceeding, split_boundary, within};

fn main() {
    let bench = Bench::from_args();
    let deadline = || Instant::now() + Duration::from_secs(60);
    let is_within = |v: &Verdict| v.is_within();
    let is_exceeds = |v: &Verdict| matches!(v, Verdict::Exceeds(_));
    let mut floor50 = None;
    for n in [1, 10, 50, 200] {
        let iters = if n == 200 { 30 } else { 100 };
        let (b, w, x, s) = (boundary(n), within(n), exceeding(n), split_boundary(n));
        let rows = ["within", "exceeding", "within by union", "exceeding by union", "boundary under a global max"]
            .map(|r| format!("{n} rules, {r}"));
        let floor_label = format!("{n} rules, equal pair (floor)");
        // The floor runs whenever a row of its size does: every ratio needs it.
        if !bench.wants(&floor_label) && !rows.iter().any(|r| bench.wants(r)) {
            continue;
        }
        let floor = bench.measure(&floor_label, iters, None, || check_uncached(&b, &b, deadline()), is_within);
        type Expect = fn(&Verdict) -> bool;
        let cases: [(&Policy, &Policy, Expect); 4] =
            [(&b, &w, is_within), (&b, &x, is_exceeds), (&s, &w, is_within), (&s, &x, is_exceeds)];
        for (label, (bound, cand, expect)) in rows.iter().zip(cases) {
            if bench.wants(label) {
                bench.measure(label, iters, Some(&floor), || check_uncached(bound, cand, deadline()), expect);
            }
        }
        // The parent `b` under a global maximum `s` (the same endpoints, split in two).
        if bench.wants(&rows[4]) {
            let has_network = |p: &Policy| !p.network_policies.is_empty();
            bench.measure(&rows[4], iters, Some(&floor), || openshell_prover::boundary(&b, Some(&s)), has_network);
        }
        if n == 50 {
            floor50 = Some(floor);
        }
    }
    let (b, w) = (boundary(50), within(50));
    let floor_label = "50 rules, equal pair (floor)";
    let hits = ["50 rules, cache hit (stored versions)", "50 rules, cache hit (hash keys)"];
    if !hits.iter().any(|h| bench.wants(h)) {
        return;
    }
    let floor = match floor50 {
        Some(f) => f,
        None => bench.measure(floor_label, 100, None, || check_uncached(&b, &b, deadline()), is_within),
    };
    let prover = Prover::new(Duration::from_secs(60));
    // What the gateway does on a create: the key names the parent's stored policy version
    // and the global maximum's version; the candidate's hash is computed once per create
    // anyway, to store the policy, so the hit is the lookup alone.
    let key = CacheKey {
        boundary: BoundaryId::Stored {
            parent: Some(StoredPolicy { sandbox: [7; 16], version: 3, hash: [9; 32] }),
            global_version: 2,
        },
        candidate: w.hash(),
    };
    prover.check_keyed(key, &b, &w, &Budget::new(deadline()));
    if bench.wants(hits[0]) {
        let hit = || prover.cached_verdict(&key);
        bench.measure(hits[0], 10_000, Some(&floor), hit, |v| v.as_ref().is_some_and(Verdict::is_within));
    }
    if bench.wants(hits[1]) {
        prover.check(&b, &w);
        bench.measure(hits[1], 1000, Some(&floor), || prover.check(&b, &w), is_within);
    }
}
