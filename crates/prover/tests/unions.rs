//! Candidates that only a union of boundary endpoints can cover, drawn to be hard for the
//! solver-free paths: host globs that overlap and nest (`**.example.com` over
//! `*.example.com`, `**.a.example.com`, `a*.example.com`), `**` and one-segment paths with
//! deny rules, methods (GET also matching HEAD, `*`, presets), port sets and program
//! globs. Each candidate is merged from several boundary endpoints and then perhaps moved
//! by one step (a host, a port, a program, an HTTP rule), so it is covered exactly, or
//! misses one cell.
//!
//! The solver-free paths alone (`check_without_z3`) must decide every such pair; their
//! verdict must match z3's alone (`check_by_z3_only`) wherever z3 answers in time; a
//! `Within` must survive the matcher over an enumerated universe of requests; and every
//! `Exceeds` must replay through the matcher.

use std::sync::OnceLock;
use std::time::{Duration, Instant};

use openshell_policy::{Access, HttpRequest, NetworkRequest, Policy};
use openshell_prover::{NEEDS_Z3, Verdict, check_by_z3_only, check_without_z3};
use proptest::prelude::*;
use proptest::test_runner::{Config, TestRng, TestRunner};

/// Hosts that nest and overlap around `example.com`.
const HOSTS: &[&str] = &[
    "a.example.com",
    "b.example.com",
    "x.a.example.com",
    "*.example.com",
    "**.example.com",
    "*.a.example.com",
    "**.a.example.com",
    "a*.example.com",
    "*b.example.com",
    "*.*.example.com",
    "**.*.example.com",
];
const BINS: &[&str] =
    &["/usr/bin/curl", "/usr/bin/*", "/usr/bin/c*", "/usr/**", "/**", "/usr/*/curl", "/usr/bin/*l", "/opt/**"];
const METHODS: &[&str] = &["GET", "HEAD", "POST", "*", "PUT", "OPTIONS"];
const PATHS: &[&str] =
    &["/**", "/a/**", "/a/*", "/a/b", "/a/**/b", "/*/b", "/a*", "/a/b*", "/*", "/a/*/**", "/b/**", "/"];
const PORTS: &[u16] = &[80, 443, 8080];

fn rule() -> impl Strategy<Value = (&'static str, &'static str)> {
    (prop::sample::select(METHODS), prop::sample::select(PATHS))
}

/// One boundary endpoint: L4, a preset, or allow rules with perhaps deny rules.
fn endpoint() -> impl Strategy<Value = String> {
    let http = prop_oneof![
        2 => Just(String::new()),
        1 => prop::sample::select(&["read-only", "read-write", "full"][..])
            .prop_map(|a| format!(", protocol: rest, enforcement: enforce, access: {a}")),
        5 => (prop::collection::vec(rule(), 1..4), prop::collection::vec(rule(), 0..2)).prop_map(|(allow, deny)| {
            let allow: Vec<String> = allow.iter().map(|(m, p)| format!("{{allow: {{method: '{m}', path: '{p}'}}}}")).collect();
            let deny: Vec<String> = deny.iter().map(|(m, p)| format!("{{method: '{m}', path: '{p}'}}")).collect();
            let deny = if deny.is_empty() { String::new() } else { format!(", deny_rules: [{}]", deny.join(", ")) };
            format!(", protocol: rest, enforcement: enforce, rules: [{}]{deny}", allow.join(", "))
        }),
    ];
    (prop::sample::select(HOSTS), prop::sample::subsequence(PORTS.to_vec(), 1..=3), http).prop_map(|(h, ps, http)| {
        let ps: Vec<String> = ps.iter().map(u16::to_string).collect();
        format!("{{host: '{h}', ports: [{}]{http}}}", ps.join(", "))
    })
}

/// A network-only boundary of 1-4 named rules with 1-4 endpoints each.
fn boundary() -> impl Strategy<Value = Policy> {
    let rule = (prop::collection::vec(endpoint(), 1..5), prop::sample::subsequence(BINS.to_vec(), 1..3));
    prop::collection::vec(rule, 1..5).prop_map(|rules| {
        let mut y = String::from("version: 1\nnetwork_policies:\n");
        for (i, (eps, bins)) in rules.iter().enumerate() {
            let bins: Vec<String> = bins.iter().map(|b| format!("{{path: '{b}'}}")).collect();
            y.push_str(&format!("  r{i}:\n    endpoints: [{}]\n    binaries: [{}]\n", eps.join(", "), bins.join(", ")));
        }
        Policy::from_yaml(&y).unwrap_or_else(|e| panic!("{e}\n{y}"))
    })
}

/// One step a merged candidate endpoint may take off the union it came from.
#[derive(Debug, Clone)]
enum Step {
    None,
    Host(&'static str),
    Port(u16),
    Program(&'static str),
    Allow(&'static str, &'static str),
    /// Drops the deny rules of the first endpoint merged.
    NoDeny,
    /// Keeps only the first allow rule, as a narrower candidate.
    FirstRuleOnly,
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        4 => Just(Step::None),
        1 => prop::sample::select(HOSTS).prop_map(Step::Host),
        1 => prop::sample::select(PORTS).prop_map(Step::Port),
        1 => prop::sample::select(BINS).prop_map(Step::Program),
        1 => rule().prop_map(|(m, p)| Step::Allow(m, p)),
        1 => Just(Step::NoDeny),
        1 => Just(Step::FirstRuleOnly),
    ]
}

/// The boundary with a candidate of 1-2 endpoints, each merged from 1-3 boundary endpoints
/// (their ports, programs and allow rules together, the first one's host and deny rules)
/// and then moved by one [`Step`].
fn pair() -> impl Strategy<Value = (Policy, Policy)> {
    boundary().prop_flat_map(|b| {
        let n: usize = b.network_policies.values().map(|np| np.endpoints.len()).sum();
        let merged = (prop::collection::vec(0..n, 1..4), step());
        (Just(b), prop::collection::vec(merged, 1..3)).prop_map(|(b, cands)| {
            let c = candidate(&b, &cands);
            (b, c)
        })
    })
}

fn candidate(b: &Policy, cands: &[(Vec<usize>, Step)]) -> Policy {
    let pieces: Vec<(Vec<String>, &openshell_policy::Endpoint)> = b
        .network_policies
        .values()
        .flat_map(|np| {
            let bins: Vec<String> = np.binaries.iter().map(|x| x.path.clone()).collect();
            np.endpoints.iter().map(move |e| (bins.clone(), e))
        })
        .collect();
    let mut y = String::from("version: 1\nnetwork_policies:\n");
    for (i, (picks, step)) in cands.iter().enumerate() {
        let chosen: Vec<&(Vec<String>, &openshell_policy::Endpoint)> = picks.iter().map(|&k| &pieces[k]).collect();
        let first = chosen[0].1;
        let mut host = first.host.clone();
        let mut ports: Vec<u16> = chosen.iter().flat_map(|(_, e)| e.ports.clone()).collect();
        let mut bins: Vec<String> = chosen.iter().flat_map(|(b, _)| b.clone()).collect();
        let mut allow: Vec<(String, String)> = Vec::new();
        for (_, e) in &chosen {
            match e.access.map(|a| a.methods()) {
                Some(None) => allow.push(("*".into(), "/**".into())),
                Some(Some(ms)) => allow.extend(ms.iter().map(|m| (m.to_string(), "/**".to_string()))),
                None => allow.extend(e.rules.iter().map(|r| (r.allow.method.clone(), r.allow.path.clone()))),
            }
        }
        let mut deny: Vec<(String, String)> =
            first.deny_rules.iter().map(|d| (d.method.clone(), d.path.clone())).collect();
        let l4 = chosen.iter().any(|(_, e)| e.is_l4());
        match step {
            Step::None => {}
            Step::Host(h) => host = h.to_string(),
            Step::Port(p) => ports.push(*p),
            Step::Program(p) => bins.push(p.to_string()),
            Step::Allow(m, p) => allow.push((m.to_string(), p.to_string())),
            Step::NoDeny => deny.clear(),
            Step::FirstRuleOnly => allow.truncate(1),
        }
        ports.sort();
        ports.dedup();
        bins.sort();
        bins.dedup();
        allow.sort();
        allow.dedup();
        let http = if l4 || allow.is_empty() {
            String::new()
        } else {
            let allow: Vec<String> =
                allow.iter().map(|(m, p)| format!("{{allow: {{method: '{m}', path: '{p}'}}}}")).collect();
            let deny: Vec<String> = deny.iter().map(|(m, p)| format!("{{method: '{m}', path: '{p}'}}")).collect();
            let deny = if deny.is_empty() { String::new() } else { format!(", deny_rules: [{}]", deny.join(", ")) };
            format!(", protocol: rest, enforcement: enforce, rules: [{}]{deny}", allow.join(", "))
        };
        let ports: Vec<String> = ports.iter().map(u16::to_string).collect();
        let bins: Vec<String> = bins.iter().map(|b| format!("{{path: '{b}'}}")).collect();
        y.push_str(&format!(
            "  c{i}:\n    endpoints: [{{host: '{host}', ports: [{}]{http}}}]\n    binaries: [{}]\n",
            ports.join(", "),
            bins.join(", ")
        ));
    }
    Policy::from_yaml(&y).unwrap_or_else(|e| panic!("{e}\n{y}"))
}

/// Requests built from strings each glob above tells apart from its neighbours.
fn universe() -> Vec<Access> {
    let programs = ["/usr/bin/curl", "/usr/bin/cat", "/usr/bin/wget", "/usr/bin/shell", "/usr/lib/curl", "/opt/x/y"];
    let hosts = [
        "a.example.com",
        "b.example.com",
        "ab.example.com",
        "q.example.com",
        "x.a.example.com",
        "y.x.a.example.com",
        "x.q.example.com",
        "x.y.q.example.com",
        "example.com",
    ];
    let methods = ["GET", "HEAD", "POST", "PUT", "OPTIONS", "DELETE"];
    let paths = ["/", "/a", "/a/", "/a/b", "/a/b/c", "/a/x/b", "/ab", "/a/bc", "/b", "/b/c", "/x/b", "/x"];
    let mut out = Vec::new();
    for program in programs {
        for host in hosts {
            for port in [80, 443, 8080] {
                let req = |http| {
                    Access::Network(NetworkRequest {
                        program: program.into(),
                        host: host.into(),
                        port,
                        http,
                        ..Default::default()
                    })
                };
                out.push(req(None));
                for m in methods {
                    for p in paths {
                        out.push(req(Some(HttpRequest { method: m.into(), path: p.into(), ..Default::default() })));
                    }
                }
            }
        }
    }
    out
}

static UNIVERSE: OnceLock<Vec<Access>> = OnceLock::new();

fn kind(v: &Verdict) -> &'static str {
    match v {
        Verdict::Within => "within",
        Verdict::Exceeds(_) => "exceeds",
        Verdict::Unsupported(_) => "unsupported",
        Verdict::Inconclusive(_) => "inconclusive",
    }
}

/// What one pair came to: [within, exceeds, compared with z3].
fn judge(b: &Policy, c: &Policy, counts: &mut [u32; 3]) -> Result<(), TestCaseError> {
    let fast = check_without_z3(b, c, Instant::now() + Duration::from_secs(20));
    let show = |v: &Verdict| format!("{v:?}\nboundary:\n{}\ncandidate:\n{}", b.to_yaml(), c.to_yaml());
    match &fast {
        Verdict::Within => {
            counts[0] += 1;
            let universe = UNIVERSE.get_or_init(universe);
            if let Some(w) = universe.iter().find(|a| c.allows(a) && !b.allows(a)) {
                prop_assert!(false, "the fast paths say Within, but the matcher finds {w}: {}", show(&fast));
            }
        }
        Verdict::Exceeds(cx) => {
            counts[1] += 1;
            prop_assert!(c.allows(&cx.request) && !b.allows(&cx.request), "no replay: {}", show(&fast));
        }
        Verdict::Inconclusive(r) if r.contains(NEEDS_Z3) => {
            prop_assert!(false, "the fast paths left a union to z3: {}", show(&fast));
        }
        other => prop_assert!(false, "unexpected: {}", show(other)),
    }
    let z3 = check_by_z3_only(b, c, Instant::now() + Duration::from_secs(3));
    if !matches!(z3, Verdict::Inconclusive(_)) {
        counts[2] += 1;
        prop_assert_eq!(kind(&fast), kind(&z3), "z3 alone: {}\nfast: {}", show(&z3), show(&fast));
        if let Verdict::Exceeds(cx) = &z3 {
            prop_assert!(c.allows(&cx.request) && !b.allows(&cx.request), "z3's does not replay: {}", show(&z3));
        }
    }
    Ok(())
}

/// `UNIONS_CASES` pairs (default 150) from a fixed seed, so a failure reproduces; set
/// `UNIONS_SEED` to draw other pairs.
#[test]
fn fast_paths_decide_adversarial_unions_as_z3_and_the_matcher_do() {
    let cases = std::env::var("UNIONS_CASES").ok().and_then(|n| n.parse().ok()).unwrap_or(150);
    let config = Config { cases, failure_persistence: None, ..Config::default() };
    let rng = match std::env::var("UNIONS_SEED").ok().and_then(|s| s.parse::<u64>().ok()) {
        Some(seed) => {
            let mut bytes = [0u8; 32];
            bytes[..8].copy_from_slice(&seed.to_le_bytes());
            TestRng::from_seed(config.rng_algorithm, &bytes)
        }
        None => TestRng::deterministic_rng(config.rng_algorithm),
    };
    let counts = std::sync::Mutex::new([0u32; 3]);
    TestRunner::new_with_rng(config, rng).run(&pair(), |(b, c)| judge(&b, &c, &mut counts.lock().unwrap())).unwrap();
    let [within, exceeds, compared] = counts.into_inner().unwrap();
    println!("within {within}, exceeds {exceeds}, compared with z3 {compared}");
    // The draw must exercise both answers, and z3 must have answered for most.
    assert!(within * 10 >= cases && exceeds * 10 >= cases, "one-sided draw: {within} within, {exceeds} exceeds");
    assert!(compared * 4 >= cases * 3, "z3 answered only {compared} of {cases}");
}
