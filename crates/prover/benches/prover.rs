//! Prover latency: p50/p99 for 10, 50 and 200 rules, within and exceeding, next to the
//! floor of a trivially equal pair, and the cost of a cache hit. Plain std timing.
//! Run: cargo bench -p openshell-prover

use std::time::{Duration, Instant};

use openshell_policy::Policy;
use openshell_prover::{Prover, Verdict, check_uncached};

fn policy(rules: usize, host: impl Fn(usize) -> String, post: &str, get: &str, bin: &str) -> Policy {
    let mut y = String::from("version: 1\nnetwork_policies:\n");
    for i in 0..rules {
        y.push_str(&format!(
            "  r{i}:\n    endpoints:\n      - {{host: '{}', port: 443, protocol: rest, enforcement: enforce, rules: [{{allow: {{method: GET, path: '{get}'}}}}, {{allow: {{method: POST, path: '{post}'}}}}]}}\n    binaries: [{{path: '{bin}'}}]\n",
            host(i)
        ));
    }
    Policy::from_yaml(&y).unwrap()
}

fn boundary(n: usize) -> Policy {
    policy(n, |i| format!("*.svc{i}.example.com"), "/api/*/items", "/api/**", "/usr/bin/*")
}

fn within(n: usize) -> Policy {
    policy(n, |i| format!("a.svc{i}.example.com"), "/api/x/items", "/api/v1/**", "/usr/bin/curl")
}

fn exceeding(n: usize) -> Policy {
    // The last rule's POST widens from one segment to any depth.
    let mut p = within(n);
    let key = format!("r{}", n - 1);
    let ep = &mut p.network_policies.get_mut(&key).unwrap().endpoints[0];
    for r in &mut ep.rules {
        if r.allow.method == "POST" {
            r.allow.path = "/api/**".into();
        }
    }
    p
}

/// The boundary with each rule's GET and POST rules split into two named rules: each
/// candidate endpoint then needs the union of two boundary endpoints, which goes to z3.
fn split_boundary(n: usize) -> Policy {
    let mut y = String::from("version: 1\nnetwork_policies:\n");
    for i in 0..n {
        for (m, path) in [("GET", "/api/**"), ("POST", "/api/*/items")] {
            y.push_str(&format!(
                "  r{i}_{m}:\n    endpoints:\n      - {{host: '*.svc{i}.example.com', port: 443, protocol: rest, enforcement: enforce, rules: [{{allow: {{method: {m}, path: '{path}'}}}}]}}\n    binaries: [{{path: '/usr/bin/*'}}]\n"
            ));
        }
    }
    Policy::from_yaml(&y).unwrap()
}

fn measure(label: &str, iters: usize, mut f: impl FnMut() -> Verdict, expect: fn(&Verdict) -> bool) {
    let mut times: Vec<Duration> = (0..iters)
        .map(|_| {
            let t = Instant::now();
            let v = f();
            let e = t.elapsed();
            assert!(expect(&v), "{label}: unexpected {v:?}");
            e
        })
        .collect();
    times.sort();
    let pct = |q: f64| times[((times.len() as f64 - 1.0) * q).round() as usize];
    println!(
        "{label:<28} p50 {:>9.3} ms   p99 {:>9.3} ms   ({iters} runs)",
        pct(0.5).as_secs_f64() * 1e3,
        pct(0.99).as_secs_f64() * 1e3
    );
}

fn main() {
    let deadline = || Instant::now() + Duration::from_secs(30);
    let is_within = |v: &Verdict| v.is_within();
    let is_exceeds = |v: &Verdict| matches!(v, Verdict::Exceeds(_));
    for n in [10, 50, 200] {
        let iters = if n == 200 { 30 } else { 100 };
        let (b, w, x) = (boundary(n), within(n), exceeding(n));
        measure(&format!("{n} rules, equal pair (floor)"), iters, || check_uncached(&b, &b, deadline()), is_within);
        measure(&format!("{n} rules, within"), iters, || check_uncached(&b, &w, deadline()), is_within);
        measure(&format!("{n} rules, exceeding"), iters, || check_uncached(&b, &x, deadline()), is_exceeds);
    }
    for n in [1, 10] {
        let (b, w) = (split_boundary(n), within(n));
        measure(&format!("{n} rules, within by union (z3)"), 20, || check_uncached(&b, &w, deadline()), is_within);
    }
    let prover = Prover::new(Duration::from_secs(30));
    let (b, w) = (boundary(50), within(50));
    prover.check(&b, &w);
    measure("50 rules, cache hit", 1000, || prover.check(&b, &w), is_within);
}
