//! Proof work is bounded: the deadline is checked inside the checker's own loops and a
//! cancelled check stops, on adversarial policies (many endpoints x many free-text methods).

use std::time::{Duration, Instant};

use openshell_policy::Policy;
use openshell_prover::{Budget, Verdict, check_budgeted, check_uncached};

/// A boundary of `n` hosts whose `m` free-text methods are split over two endpoints per
/// host, and a candidate with one endpoint per host asking for all `m` on a narrower path:
/// within, but only by a union of boundary endpoints, so no fast path settles it and z3
/// must prove every endpoint.
pub fn adversarial(n: usize, m: usize) -> (Policy, Policy) {
    let rules = |methods: std::ops::Range<usize>, path: &str| -> String {
        methods
            .map(|k| format!("{{allow: {{method: '{}', path: '{path}'}}}}", method(k)))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let mut b = String::from("version: 1\nnetwork_policies:\n");
    let mut c = b.clone();
    for i in 0..n {
        for (half, range) in [("a", 0..m / 2), ("b", m / 2..m)] {
            b.push_str(&format!(
                "  r{i}{half}:\n    endpoints:\n      - {{host: '*.h{i}.example.com', port: 443, protocol: rest, enforcement: enforce, rules: [{}]}}\n    binaries: [{{path: '/usr/bin/*'}}]\n",
                rules(range, "/a/**")
            ));
        }
        c.push_str(&format!(
            "  r{i}:\n    endpoints:\n      - {{host: 'x.h{i}.example.com', port: 443, protocol: rest, enforcement: enforce, rules: [{}]}}\n    binaries: [{{path: '/usr/bin/python3'}}]\n",
            rules(0..m, "/a/*/b/**")
        ));
    }
    (Policy::from_yaml(&b).unwrap(), Policy::from_yaml(&c).unwrap())
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

#[test]
#[ignore]
fn measure() {
    for (n, m) in [(4, 8), (16, 16), (64, 32), (200, 20)] {
        let (b, c) = adversarial(n, m);
        let t = Instant::now();
        let v = check_uncached(&b, &c, Instant::now() + Duration::from_secs(60));
        println!("{n}x{m}: {:?} {:?}", t.elapsed(), v);
    }
}

/// Stopping is measured against the same check run without a limit: with a budget of a
/// small fraction of that, the check must stop long before the full run would have ended.
#[test]
fn the_deadline_stops_the_check_inside_its_loops() {
    let (b, c) = adversarial(64, 32);
    let t = Instant::now();
    assert_eq!(check_uncached(&b, &c, Instant::now() + Duration::from_secs(120)), Verdict::Within);
    let full = t.elapsed();
    let limit = full / 20;
    let t = Instant::now();
    let v = check_budgeted(&b, &c, &Budget::new(Instant::now() + limit));
    let stopped = t.elapsed();
    assert!(matches!(&v, Verdict::Inconclusive(r) if r.contains("timed out")), "{v:?}");
    assert!(stopped < full / 2, "stopped after {stopped:?}; the full check takes {full:?}");
}

#[test]
fn a_cancelled_check_stops_from_another_thread() {
    let (b, c) = adversarial(64, 32);
    let t = Instant::now();
    assert_eq!(check_uncached(&b, &c, Instant::now() + Duration::from_secs(120)), Verdict::Within);
    let full = t.elapsed();
    let budget = Budget::new(Instant::now() + Duration::from_secs(120));
    let canceller = {
        let budget = budget.clone();
        std::thread::spawn(move || {
            std::thread::sleep(full / 20);
            budget.cancel();
        })
    };
    let t = Instant::now();
    let v = check_budgeted(&b, &c, &budget);
    let stopped = t.elapsed();
    canceller.join().unwrap();
    assert!(matches!(&v, Verdict::Inconclusive(r) if r.contains("cancelled")), "{v:?}");
    assert!(stopped < full / 2, "stopped after {stopped:?}; the full check takes {full:?}");
}
