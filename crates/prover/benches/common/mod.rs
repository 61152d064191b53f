//! What both prover benches share: the policy shapes and the timing.

#![allow(dead_code)]

use std::time::{Duration, Instant};

use openshell_policy::Policy;

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

/// `n` rules, each one wildcard host with GET and POST rules.
pub fn boundary(n: usize) -> Policy {
    policy(n, |i| format!("*.svc{i}.example.com"), "/api/*/items", "/api/**", "/usr/bin/*")
}

/// Inside [`boundary`] and [`split_boundary`]: one host, one program and narrower paths.
pub fn within(n: usize) -> Policy {
    policy(n, |i| format!("a.svc{i}.example.com"), "/api/x/items", "/api/v1/**", "/usr/bin/curl")
}

/// [`within`] with the last rule's POST widened from one segment to any depth.
pub fn exceeding(n: usize) -> Policy {
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

/// [`boundary`] with each rule's GET and POST rules split into two endpoints: each
/// candidate endpoint then needs the union of two boundary endpoints (no single one
/// covers it). The two are named rules of their own while that stays within the schema's
/// 256 named rules (up to 128 rules here), else two endpoints of one named rule.
pub fn split_boundary(n: usize) -> Policy {
    let endpoint = |i: usize, m: &str, path: &str| {
        format!(
            "      - {{host: '*.svc{i}.example.com', port: 443, protocol: rest, enforcement: enforce, rules: [{{allow: {{method: {m}, path: '{path}'}}}}]}}\n"
        )
    };
    let halves = [("GET", "/api/**"), ("POST", "/api/*/items")];
    let bins = "    binaries: [{path: '/usr/bin/*'}]\n";
    let mut y = String::from("version: 1\nnetwork_policies:\n");
    for i in 0..n {
        if 2 * n <= 256 {
            for (m, path) in halves {
                y.push_str(&format!("  r{i}_{m}:\n    endpoints:\n{}{bins}", endpoint(i, m, path)));
            }
        } else {
            let eps: String = halves.iter().map(|(m, path)| endpoint(i, m, path)).collect();
            y.push_str(&format!("  r{i}:\n    endpoints:\n{eps}{bins}"));
        }
    }
    Policy::from_yaml(&y).unwrap()
}

/// How long one row may keep measuring once it has [`MIN_RUNS`].
const ROW_BUDGET: Duration = Duration::from_secs(20);
const MIN_RUNS: usize = 10;

/// One measured row.
pub struct Row {
    pub p50: Duration,
    pub p99: Duration,
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// The rows a run prints: all, or those whose label contains the first argument that is no
/// flag (cargo passes `--bench`). `PROVER_BENCH_RUNS=N` runs every row N times instead of
/// its default (for a profiler or a quick look); a row stops early after 20 s once it has
/// 10 runs.
pub struct Bench {
    filter: Option<String>,
    runs: Option<usize>,
}

impl Bench {
    pub fn from_args() -> Bench {
        let bench = Bench {
            filter: std::env::args().skip(1).find(|a| !a.starts_with("--")),
            runs: std::env::var("PROVER_BENCH_RUNS").ok().and_then(|n| n.parse().ok()).filter(|&n| n > 0),
        };
        println!("{:<40} {:>9} {:>9}   {:>8} {:>8}   {:>5}", "row", "p50 ms", "p99 ms", "p50/ref", "p99/ref", "runs");
        bench
    }

    pub fn wants(&self, label: &str) -> bool {
        self.filter.as_ref().is_none_or(|f| label.contains(f.as_str()))
    }

    /// Times `iters` runs of `f`, checks each result with `expect`, prints the row with its
    /// ratios to `reference` (the floor measured in the same run), and returns it.
    pub fn measure<T: std::fmt::Debug>(
        &self,
        label: &str,
        iters: usize,
        reference: Option<&Row>,
        mut f: impl FnMut() -> T,
        expect: impl Fn(&T) -> bool,
    ) -> Row {
        let iters = self.runs.unwrap_or(iters);
        let started = Instant::now();
        let mut times: Vec<Duration> = Vec::with_capacity(iters);
        // A slow row (z3, or an older prover under --before) stops after ROW_BUDGET once it
        // has MIN_RUNS; the runs column says how many it took.
        while times.len() < iters && (times.len() < MIN_RUNS || started.elapsed() < ROW_BUDGET) {
            let t = Instant::now();
            let v = f();
            times.push(t.elapsed());
            assert!(expect(&v), "{label}: unexpected {v:?}");
        }
        let iters = times.len();
        times.sort();
        let pct = |q: f64| times[((times.len() as f64 - 1.0) * q).round() as usize];
        let row = Row { p50: pct(0.5), p99: pct(0.99) };
        // Small ratios keep their digits: a cache hit is thousands of times below its floor.
        let times = |x: f64| if x < 1.0 { format!("{x:>7.4}x") } else { format!("{x:>7.1}x") };
        let ratio = match reference {
            Some(r) => format!(
                "{} {}",
                times(row.p50.as_secs_f64() / r.p50.as_secs_f64()),
                times(row.p99.as_secs_f64() / r.p99.as_secs_f64())
            ),
            None => format!("{:>8} {:>8}", "-", "-"),
        };
        // Under 10 µs (a cache hit), two more digits: the figure is in nanoseconds there.
        let fmt = |d: Duration| if ms(d) < 0.01 { format!("{:>9.6}", ms(d)) } else { format!("{:>9.4}", ms(d)) };
        println!("{label:<40} {} {}   {ratio}   {iters:>5}", fmt(row.p50), fmt(row.p99));
        row
    }
}
