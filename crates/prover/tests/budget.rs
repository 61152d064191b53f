//! Proof work is bounded: the deadline is checked inside the checker's own loops and a
//! cancelled check stops, on adversarial policies (many endpoints x many free-text
//! methods), both where the solver-free paths decide and where only z3 can.

use std::time::{Duration, Instant};

use openshell_policy::Policy;
use openshell_prover::{Budget, NEEDS_Z3, Verdict, check_budgeted, check_uncached, check_without_z3};

/// A boundary of `n` hosts whose `m` free-text methods are spread over `parts` endpoints
/// per host, and a candidate with one endpoint per host asking for all `m` on a narrower
/// path: within, but only by a union of boundary endpoints.
fn spread(n: usize, m: usize, parts: usize) -> (Policy, Policy) {
    let rules = |methods: std::ops::Range<usize>, path: &str| -> String {
        methods
            .map(|k| format!("{{allow: {{method: '{}', path: '{path}'}}}}", method(k)))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let mut b = String::from("version: 1\nnetwork_policies:\n");
    let mut c = b.clone();
    for i in 0..n {
        // At most 33 endpoints per named rule (the schema allows 64).
        for (k, chunk) in (0..parts).collect::<Vec<_>>().chunks(33).enumerate() {
            let mut eps = String::new();
            for &p in chunk {
                eps.push_str(&format!(
                    "      - {{host: '*.h{i}.example.com', port: 443, protocol: rest, enforcement: enforce, rules: [{}]}}\n",
                    rules(p * m / parts..(p + 1) * m / parts, "/a/**")
                ));
            }
            b.push_str(&format!("  r{i}_{k}:\n    endpoints:\n{eps}    binaries: [{{path: '/usr/bin/*'}}]\n"));
        }
        c.push_str(&format!(
            "  r{i}:\n    endpoints:\n      - {{host: 'x.h{i}.example.com', port: 443, protocol: rest, enforcement: enforce, rules: [{}]}}\n    binaries: [{{path: '/usr/bin/python3'}}]\n",
            rules(0..m, "/a/*/b/**")
        ));
    }
    (Policy::from_yaml(&b).unwrap(), Policy::from_yaml(&c).unwrap())
}

/// Two boundary endpoints per host: the solver-free paths decide it, cell by cell.
pub fn adversarial(n: usize, m: usize) -> (Policy, Policy) {
    spread(n, m, 2)
}

/// One boundary endpoint per method, more of them per host than the cells sort (64): only
/// z3 decides it.
pub fn adversarial_for_z3(n: usize) -> (Policy, Policy) {
    spread(n, 66, 66)
}

/// A free-text method name for `k`: letters only (XA, XB, ..., XBA, ...).
fn method(mut k: usize) -> String {
    let mut s = String::from("X");
    loop {
        s.push((b'A' + (k % 26) as u8) as char);
        k /= 26;
        if k == 0 {
            return s;
        }
    }
}

fn shapes() -> [(&'static str, (Policy, Policy)); 2] {
    [("fast paths", adversarial(64, 32)), ("z3", adversarial_for_z3(4))]
}

/// The shapes below reach the paths they are named for.
#[test]
fn each_shape_reaches_its_path() {
    let far = || Instant::now() + Duration::from_secs(120);
    let [(_, (b, c)), (_, (bz, cz))] = shapes();
    assert_eq!(check_without_z3(&b, &c, far()), Verdict::Within);
    let v = check_without_z3(&bz, &cz, far());
    assert!(matches!(&v, Verdict::Inconclusive(r) if r.contains(NEEDS_Z3)), "{v:?}");
    assert_eq!(check_uncached(&bz, &cz, far()), Verdict::Within);
}

/// Stopping is measured against the same check run without a limit: with a budget of a
/// small fraction of that, the check must stop long before the full run would have ended.
#[test]
fn the_deadline_stops_the_check_inside_its_loops() {
    for (path, (b, c)) in shapes() {
        let t = Instant::now();
        assert_eq!(check_uncached(&b, &c, Instant::now() + Duration::from_secs(120)), Verdict::Within, "{path}");
        let full = t.elapsed();
        let limit = full / 20;
        let t = Instant::now();
        let v = check_budgeted(&b, &c, &Budget::new(Instant::now() + limit));
        let stopped = t.elapsed();
        assert!(matches!(&v, Verdict::Inconclusive(r) if r.contains("timed out")), "{path}: {v:?}");
        assert!(stopped < full / 2, "{path}: stopped after {stopped:?}; the full check takes {full:?}");
    }
}

/// Timed from the cancel itself, so a canceller thread the scheduler wakes late does not
/// count against the check; one woken after the check ended (it was Within) tries again.
#[test]
fn a_cancelled_check_stops_from_another_thread() {
    for (path, (b, c)) in shapes() {
        let t = Instant::now();
        assert_eq!(check_uncached(&b, &c, Instant::now() + Duration::from_secs(120)), Verdict::Within, "{path}");
        let full = t.elapsed();
        let mut late = 0;
        loop {
            let budget = Budget::new(Instant::now() + Duration::from_secs(120));
            let canceller = {
                let budget = budget.clone();
                std::thread::spawn(move || {
                    std::thread::sleep(full / 20);
                    budget.cancel();
                    Instant::now()
                })
            };
            let v = check_budgeted(&b, &c, &budget);
            let ended = Instant::now();
            let cancelled = canceller.join().unwrap();
            if v == Verdict::Within && cancelled >= ended && late < 5 {
                late += 1;
                continue;
            }
            assert!(matches!(&v, Verdict::Inconclusive(r) if r.contains("cancelled")), "{path}: {v:?}");
            let reacted = ended.saturating_duration_since(cancelled);
            assert!(reacted < full / 2, "{path}: stopped {reacted:?} after the cancel; the full check takes {full:?}");
            break;
        }
    }
}
