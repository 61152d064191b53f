//! Prover latency by shape: p50/p99 for 1, 10, 50 and 200 rules, within and exceeding,
//! covered by single boundary endpoints or only by their union, each beside the floor of a
//! trivially equal pair of the same size measured in the same run (`p50/ref`, `p99/ref`),
//! and a cache hit keyed by both policies' hashes. Plain std timing, uncached checks.
//!
//! Run: `cargo bench -p openshell-prover --bench prover [-- FILTER]` (rows whose label
//! contains FILTER). Targets (issue 18, release build, quiet machine): p99 under 10 ms at
//! up to 50 rules, under 50 ms at 200. This file uses only API the prover had before its
//! union path, so `scripts/bench-prover.sh --before REF` runs it on older code too, for a
//! before/after table; `benches/paths.rs` measures the rest (cache keys, z3 alone).

mod common;

use std::time::{Duration, Instant};

use openshell_policy::Policy;
use openshell_prover::{Prover, Verdict, check_uncached};

use common::{Bench, boundary, exceeding, split_boundary, within};

fn main() {
    let bench = Bench::from_args();
    let deadline = || Instant::now() + Duration::from_secs(60);
    let is_within = |v: &Verdict| v.is_within();
    let is_exceeds = |v: &Verdict| matches!(v, Verdict::Exceeds(_));
    for n in [1, 10, 50, 200] {
        let iters = if n == 200 { 30 } else { 100 };
        let (b, w, x, s) = (boundary(n), within(n), exceeding(n), split_boundary(n));
        let rows = ["within", "exceeding", "within by union", "exceeding by union"].map(|r| format!("{n} rules, {r}"));
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
    }
    let label = "50 rules, cache hit (hash keys)";
    if bench.wants(label) {
        let prover = Prover::new(Duration::from_secs(60));
        let (b, w) = (boundary(50), within(50));
        prover.check(&b, &w);
        bench.measure(label, 1000, None, || prover.check(&b, &w), is_within);
    }
}
