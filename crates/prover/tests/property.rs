//! The prover against an independent brute force: the matcher run over a finite universe of
//! requests built from the policies' own literals and near misses. The prover must never
//! say Within when the brute force finds a request the candidate allows and the boundary
//! does not, and every Exceeds must replay. And its solver-free paths against z3 alone:
//! the same verdict on the same pair (the differential tests).

use std::sync::OnceLock;
use std::time::{Duration, Instant};

use openshell_policy::{Access, FileMode, HttpRequest, NetworkRequest, Policy};
use openshell_prover::{NEEDS_Z3, Prover, Verdict, check_by_z3_only, check_without_z3};
use proptest::prelude::*;

const HOSTS: &[&str] = &[
    "a.example.com",
    "b.example.com",
    "*.example.com",
    "**.example.com",
    "x.a.example.com",
    "*.a.example.com",
    "**.a.example.com",
    "a*.example.com",
    "*b.example.com",
    "a.*.example.com",
];
const BINS: &[&str] = &["/usr/bin/curl", "/usr/bin/*", "/usr/bin/git", "/**", "/usr/**", "/usr/*/curl", "/usr/bin/c*"];
const METHODS: &[&str] = &["GET", "HEAD", "POST", "*", "OPTIONS"];
const PATHS: &[&str] = &["/a/**", "/a/*", "/a/b", "/**", "/b", "/a*", "/*", "/a/*/**", "/a/**/b", "/*/b", "/a/b*"];
const PORTS: &[u16] = &[80, 443, 8080];
const FS: &[&str] = &["/usr", "/usr/lib", "/tmp", "/", "/tmp/x"];

fn endpoint() -> impl Strategy<Value = String> {
    endpoint_on(prop::sample::select(HOSTS))
}

fn endpoint_on(host: impl Strategy<Value = &'static str>) -> impl Strategy<Value = String> {
    let ports = prop::sample::subsequence(PORTS.to_vec(), 1..=3);
    let rule = (prop::sample::select(METHODS), prop::sample::select(PATHS))
        .prop_map(|(m, p)| format!("{{allow: {{method: '{m}', path: '{p}'}}}}"));
    let deny = (prop::sample::select(METHODS), prop::sample::select(PATHS))
        .prop_map(|(m, p)| format!("{{method: '{m}', path: '{p}'}}"));
    let l7 = prop_oneof![
        Just(String::new()),
        prop::sample::select(&["read-only", "read-write", "full"][..])
            .prop_map(|a| format!(", protocol: rest, enforcement: enforce, access: {a}")),
        (prop::collection::vec(rule, 1..3), prop::collection::vec(deny, 0..2)).prop_map(|(r, d)| {
            let deny = if d.is_empty() { String::new() } else { format!(", deny_rules: [{}]", d.join(", ")) };
            format!(", protocol: rest, enforcement: enforce, rules: [{}]{deny}", r.join(", "))
        }),
    ];
    (host, ports, l7).prop_map(|(h, ps, l7)| {
        let ps: Vec<String> = ps.iter().map(u16::to_string).collect();
        format!("{{host: '{h}', ports: [{}]{l7}}}", ps.join(", "))
    })
}

fn policy() -> impl Strategy<Value = Policy> {
    let rule = (prop::collection::vec(endpoint(), 1..3), prop::sample::subsequence(BINS.to_vec(), 1..3));
    let fs =
        (prop::sample::subsequence(FS.to_vec(), 0..3), prop::sample::subsequence(FS.to_vec(), 0..2), any::<bool>());
    (prop::collection::vec(rule, 0..3), fs, any::<bool>()).prop_map(|(rules, (ro, rw, wd), hard)| {
        let mut y = format!(
            "version: 1\nlandlock: {{compatibility: {}}}\nfilesystem_policy: {{include_workdir: {wd}, read_only: [{}], read_write: [{}]}}\nnetwork_policies:\n",
            if hard { "hard_requirement" } else { "best_effort" },
            ro.join(", "),
            rw.join(", ")
        );
        for (i, (eps, bins)) in rules.iter().enumerate() {
            let bins: Vec<String> = bins.iter().map(|b| format!("{{path: '{b}'}}")).collect();
            y.push_str(&format!("  r{i}:\n    endpoints: [{}]\n    binaries: [{}]\n", eps.join(", "), bins.join(", ")));
        }
        Policy::from_yaml(&y).unwrap_or_else(|e| panic!("{e}\n{y}"))
    })
}

/// A network-only boundary whose rules mostly share one host, so that a candidate merged
/// from several of them is often covered by their union only.
fn shared_host_policy() -> impl Strategy<Value = Policy> {
    prop::sample::select(HOSTS).prop_flat_map(|h| {
        let host = prop_oneof![4 => Just(h), 1 => prop::sample::select(HOSTS)];
        let rule = (prop::collection::vec(endpoint_on(host), 1..3), prop::sample::subsequence(BINS.to_vec(), 1..3));
        prop::collection::vec(rule, 1..5).prop_map(|rules| {
            let mut y = String::from("version: 1\nnetwork_policies:\n");
            for (i, (eps, bins)) in rules.iter().enumerate() {
                let bins: Vec<String> = bins.iter().map(|b| format!("{{path: '{b}'}}")).collect();
                y.push_str(&format!(
                    "  r{i}:\n    endpoints: [{}]\n    binaries: [{}]\n",
                    eps.join(", "),
                    bins.join(", ")
                ));
            }
            Policy::from_yaml(&y).unwrap_or_else(|e| panic!("{e}\n{y}"))
        })
    })
}

/// Every access in the finite universe.
fn universe() -> Vec<Access> {
    let programs = [
        "/usr/bin/curl",
        "/usr/bin/git",
        "/usr/bin/x",
        "/usr/bin",
        "/usr/lib/y",
        "/usr/lib/curl",
        "/usr/bin/cat",
        "/opt/z",
    ];
    let hosts = [
        "a.example.com",
        "b.example.com",
        "q.example.com",
        "x.a.example.com",
        "y.x.a.example.com",
        "example.com",
        "z.other.org",
        "ab.example.com",
        "bb.example.com",
        "a.q.example.com",
        "x.y.a.example.com",
    ];
    let methods = ["GET", "HEAD", "POST", "PUT", "OPTIONS", "DELETE"];
    let paths = ["/", "/a", "/a/", "/a/b", "/a/b/c", "/b", "/ab", "/a/x", "/x/b", "/a/x/b", "/a/bc", "/a/x/y"];
    let mut out = vec![Access::WithoutLandlock, Access::Workdir { mode: FileMode::Write }];
    for p in ["/", "/usr", "/usr/lib", "/usr/lib/z", "/tmp", "/tmp/x", "/tmp/x/y", "/etc"] {
        for mode in [FileMode::Read, FileMode::Write] {
            out.push(Access::File { mode, path: p.into() });
        }
    }
    for program in programs {
        for host in hosts {
            for port in [80, 443, 8080, 22] {
                let req = |http| {
                    Access::Network(NetworkRequest {
                        program: program.into(),
                        ancestors: vec![],
                        host: host.into(),
                        port,
                        http,
                        addr: None,
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

/// A candidate built from the boundary's own endpoints: several of them (often from
/// different rules) merged into one candidate endpoint, with its host, ports, programs or
/// HTTP rules sometimes swapped for a nearby glob. Only a union of boundary endpoints can
/// cover such an endpoint, and it often is covered, so `Within` is common here.
fn derived(boundary: Policy) -> impl Strategy<Value = (Policy, Policy)> {
    let pieces: Vec<(Vec<String>, openshell_policy::Endpoint)> = boundary
        .network_policies
        .values()
        .flat_map(|np| {
            let bins: Vec<String> = np.binaries.iter().map(|b| b.path.clone()).collect();
            np.endpoints.iter().map(move |e| (bins.clone(), e.clone()))
        })
        .collect();
    let n = pieces.len().max(1);
    let merged = (
        prop::collection::vec(0..n, 1..4),
        prop::option::weighted(0.3, prop::sample::select(HOSTS)),
        prop::option::weighted(0.2, prop::sample::select(BINS)),
        prop::option::weighted(0.2, prop::sample::select(PORTS)),
        prop::option::weighted(0.2, (prop::sample::select(METHODS), prop::sample::select(PATHS))),
    );
    prop::collection::vec(merged, 1..3).prop_map(move |cands| {
        let mut y = format!(
            "version: 1\nlandlock: {{compatibility: {}}}\nnetwork_policies:\n",
            match boundary.landlock.compatibility {
                openshell_policy::LandlockCompatibility::HardRequirement => "hard_requirement",
                openshell_policy::LandlockCompatibility::BestEffort => "best_effort",
            }
        );
        if pieces.is_empty() {
            return (boundary.clone(), Policy::from_yaml(&y).unwrap());
        }
        for (i, (picks, host, bin, port, rule)) in cands.iter().enumerate() {
            let chosen: Vec<&(Vec<String>, openshell_policy::Endpoint)> = picks.iter().map(|&k| &pieces[k]).collect();
            let first = &chosen[0].1;
            let host = host.map_or(first.host.clone(), str::to_string);
            let mut ports: Vec<u16> = chosen.iter().flat_map(|(_, e)| e.ports.clone()).collect();
            ports.extend(port);
            ports.sort();
            ports.dedup();
            let mut bins: Vec<String> = chosen.iter().flat_map(|(b, _)| b.clone()).collect();
            bins.extend(bin.map(str::to_string));
            bins.sort();
            bins.dedup();
            // HTTP: L4 if any chosen endpoint is; otherwise the union of their allow rules
            // (presets spelled out) with the first one's deny rules.
            let l7 = if chosen.iter().any(|(_, e)| e.is_l4()) {
                String::new()
            } else {
                let mut rules: Vec<String> = Vec::new();
                for (_, e) in &chosen {
                    match e.access.map(|a| a.methods()) {
                        Some(None) => rules.push("{allow: {method: '*', path: '/**'}}".into()),
                        Some(Some(ms)) => {
                            rules.extend(ms.iter().map(|m| format!("{{allow: {{method: '{m}', path: '/**'}}}}")))
                        }
                        None => {
                            rules.extend(e.rules.iter().map(|r| {
                                format!("{{allow: {{method: '{}', path: '{}'}}}}", r.allow.method, r.allow.path)
                            }))
                        }
                    }
                }
                if let Some((m, p)) = rule {
                    rules.push(format!("{{allow: {{method: '{m}', path: '{p}'}}}}"));
                }
                rules.sort();
                rules.dedup();
                let deny: Vec<String> = first
                    .deny_rules
                    .iter()
                    .map(|d| format!("{{method: '{}', path: '{}'}}", d.method, d.path))
                    .collect();
                let deny = if deny.is_empty() { String::new() } else { format!(", deny_rules: [{}]", deny.join(", ")) };
                format!(", protocol: rest, enforcement: enforce, rules: [{}]{deny}", rules.join(", "))
            };
            let ports: Vec<String> = ports.iter().map(u16::to_string).collect();
            let bins: Vec<String> = bins.iter().map(|b| format!("{{path: '{b}'}}")).collect();
            y.push_str(&format!(
                "  c{i}:\n    endpoints: [{{host: '{host}', ports: [{}]{l7}}}]\n    binaries: [{}]\n",
                ports.join(", "),
                bins.join(", ")
            ));
        }
        let c = Policy::from_yaml(&y).unwrap_or_else(|e| panic!("{e}\n{y}"));
        (boundary.clone(), c)
    })
}

/// The prover's verdict agrees with the brute force over [`universe`].
fn agree(boundary: &Policy, candidate: &Policy) -> Result<Verdict, TestCaseError> {
    let prover = Prover::new(Duration::from_secs(20));
    let verdict = prover.check(boundary, candidate);
    let witness = UNIVERSE.get_or_init(universe).iter().find(|a| candidate.allows(a) && !boundary.allows(a));
    if let Some(w) = &witness {
        prop_assert!(
            !verdict.is_within(),
            "Within, but brute force found {w}\nboundary: {}\ncandidate: {}",
            boundary.to_yaml(),
            candidate.to_yaml()
        );
    }
    if let Verdict::Exceeds(cx) = &verdict {
        prop_assert!(candidate.allows(&cx.request) && !boundary.allows(&cx.request), "no replay: {cx:?}");
    }
    prop_assert!(!matches!(verdict, Verdict::Inconclusive(_) | Verdict::Unsupported(_)), "{verdict:?}");
    Ok(verdict)
}

static UNIVERSE: OnceLock<Vec<Access>> = OnceLock::new();

/// Which verdict, without its details.
fn kind(v: &Verdict) -> &'static str {
    match v {
        Verdict::Within => "within",
        Verdict::Exceeds(_) => "exceeds",
        Verdict::Unsupported(_) => "unsupported",
        Verdict::Inconclusive(_) => "inconclusive",
    }
}

/// How a differential case ended: compared with z3, or z3 gave no answer in time.
#[derive(Debug, PartialEq)]
enum Compared {
    Yes,
    NoZ3Answer,
    FastUndecided,
}

/// The differential test: the solver-free paths alone against z3 alone on the same pair.
/// Where both decide, the verdicts must agree, and each Exceeds replays; with `always`, the
/// fast paths must decide (these shapes are within their limits). z3 alone, on shapes it
/// never sees in the full check, may run out of time: that case is not compared.
fn same_as_z3(boundary: &Policy, candidate: &Policy, always: bool) -> Result<Compared, TestCaseError> {
    let fast = check_without_z3(boundary, candidate, Instant::now() + Duration::from_secs(20));
    let undecided = matches!(&fast, Verdict::Inconclusive(r) if r.contains(NEEDS_Z3));
    let show = || format!("fast {fast:?}\nboundary: {}\ncandidate: {}", boundary.to_yaml(), candidate.to_yaml());
    prop_assert!(!(always && undecided), "the fast paths left this to z3: {}", show());
    if undecided {
        return Ok(Compared::FastUndecided);
    }
    let z3 = check_by_z3_only(boundary, candidate, Instant::now() + Duration::from_secs(3));
    if matches!(z3, Verdict::Inconclusive(_)) && !matches!(fast, Verdict::Inconclusive(_)) {
        return Ok(Compared::NoZ3Answer);
    }
    prop_assert_eq!(kind(&fast), kind(&z3), "z3 alone: {:?}\n{}", z3, show());
    for v in [&fast, &z3] {
        if let Verdict::Exceeds(cx) = v {
            prop_assert!(candidate.allows(&cx.request) && !boundary.allows(&cx.request), "no replay: {cx:?}");
        }
    }
    Ok(Compared::Yes)
}

/// Runs [`same_as_z3`] on `cases` pairs and requires most of them compared.
fn differential(cases: u32, pairs: impl Strategy<Value = (Policy, Policy)>, always: bool) {
    use proptest::test_runner::{Config, TestRunner};
    let counts = std::sync::Mutex::new([0u32; 3]);
    // A fixed seed: the same pairs every run, so a run that fails fails again where it is
    // looked at (`tests/unions.rs` draws other union shapes, with a seed to vary).
    let config = Config { cases, failure_persistence: None, ..Config::default() };
    let rng = proptest::test_runner::TestRng::deterministic_rng(config.rng_algorithm);
    let mut runner = TestRunner::new_with_rng(config, rng);
    runner
        .run(&pairs, |(boundary, candidate)| {
            let c = same_as_z3(&boundary, &candidate, always)?;
            counts.lock().unwrap()[c as usize] += 1;
            Ok(())
        })
        .unwrap();
    let [yes, no_z3, undecided] = counts.into_inner().unwrap();
    println!("compared {yes}, z3 gave no answer {no_z3}, fast paths undecided {undecided}");
    assert!(yes * 4 >= cases * 3, "too few compared: {yes} of {cases} (z3 none {no_z3}, undecided {undecided})");
}

/// On unions of boundary endpoints, the fast paths decide every pair, as z3 does.
#[test]
fn fast_paths_agree_with_z3_on_unions() {
    differential(200, shared_host_policy().prop_flat_map(derived), true);
}

/// A union shape a random run found the cells leaving to z3: a candidate host
/// `**.example.com` over a boundary of `**.a.example.com` and `*.example.com`, beside a
/// second rule with deny rules. The cells once sorted hosts only against boundary globs
/// that may contain the candidate's, so a host cell's example fell under the narrower
/// `**.a.example.com`, did not replay and went to z3; they now sort against every glob that
/// may share a host with it (`Checker::overlapping`). It exceeds (`x.b.example.com` is in
/// neither): the fast paths alone refuse it with an example that replays, as the full check
/// does.
#[test]
fn a_union_over_narrower_boundary_hosts_is_decided_without_z3() {
    let boundary = Policy::from_yaml(
        "version: 1
network_policies:
  r0:
    endpoints:
      - {host: '**.a.example.com', ports: [80, 443, 8080], protocol: rest, enforcement: enforce, access: full}
      - {host: '*.example.com', ports: [80, 443, 8080], protocol: rest, enforcement: enforce,
         rules: [{allow: {method: POST, path: '/*'}}]}
    binaries: [{path: '/usr/bin/*'}, {path: '/usr/bin/c*'}]
  r1:
    endpoints:
      - {host: '*.example.com', ports: [80, 443], protocol: rest, enforcement: enforce,
         rules: [{allow: {method: POST, path: '/a/b*'}}], deny_rules: [{method: '*', path: '/*'}]}
    binaries: [{path: '/usr/**'}]
",
    )
    .unwrap();
    let candidate = Policy::from_yaml(
        "version: 1
network_policies:
  c0:
    endpoints:
      - {host: '**.example.com', ports: [80, 443, 8080], protocol: rest, enforcement: enforce,
         rules: [{allow: {method: POST, path: '/*'}}]}
    binaries: [{path: '/usr/bin/*'}, {path: '/usr/bin/c*'}]
",
    )
    .unwrap();
    let fast = check_without_z3(&boundary, &candidate, Instant::now() + Duration::from_secs(20));
    let full = Prover::new(Duration::from_secs(10)).check(&boundary, &candidate);
    for v in [&fast, &full] {
        match v {
            Verdict::Exceeds(cx) => {
                assert!(candidate.allows(&cx.request) && !boundary.allows(&cx.request), "no replay: {cx:?}")
            }
            v => panic!("{v:?}"),
        }
    }
}

#[test]
fn fast_paths_agree_with_z3() {
    differential(150, (policy(), policy()), true);
}

/// With the new fields, where approximations may leave a pair to z3.
#[test]
fn fast_paths_agree_with_z3_on_the_new_fields() {
    differential(100, rich_pair(), false);
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 400, ..ProptestConfig::default() })]

    #[test]
    fn prover_agrees_with_brute_force(boundary in policy(), candidate in policy()) {
        agree(&boundary, &candidate)?;
    }

    /// Candidates merged from several boundary endpoints: unions of them (decided cell by
    /// cell), overlapping and `**` host globs, port sets, mixed HTTP rules.
    #[test]
    fn prover_agrees_on_merged_boundary_endpoints((boundary, candidate) in shared_host_policy().prop_flat_map(derived)) {
        agree(&boundary, &candidate)?;
    }
}

// The new fields: allowed_ips (hostless too), tls, endpoint path, query in allow and deny
// rules, middlewares, and audit endpoints of other protocols. The prover may answer
// Unsupported here, but never Within when the brute force finds an excess, and every
// Exceeds replays.

const IPS: &[&str] = &["10.0.0.0/8", "10.0.5.0/24", "10.0.5.7", "192.0.2.0/24", "127.0.0.0/8", "fd00::/8"];
const QUERY_GLOBS: &[&str] = &["1*", "x", "*", "10"];

fn rich_endpoint() -> impl Strategy<Value = String> {
    let query = prop::option::weighted(
        0.4,
        (prop::sample::select(QUERY_GLOBS), prop::option::weighted(0.3, prop::sample::select(QUERY_GLOBS))),
    )
    .prop_map(|q| match q {
        None => String::new(),
        Some((a, None)) => format!(", query: {{q: '{a}'}}"),
        Some((a, Some(b))) => format!(", query: {{q: '{a}', r: {{any: ['{b}', 'zz']}}}}"),
    });
    let rule = (
        prop::sample::select(&["GET", "POST", "*"][..]),
        prop::sample::select(&["/a/**", "/**", "/b", "/a/*"][..]),
        query.clone(),
    )
        .prop_map(|(m, p, q)| format!("{{allow: {{method: '{m}', path: '{p}'{q}}}}}"));
    let deny = (prop::sample::select(&["GET", "*"][..]), prop::sample::select(&["/a/b", "/**"][..]), query)
        .prop_map(|(m, p, q)| format!("{{method: '{m}', path: '{p}'{q}}}"));
    let l7 = prop_oneof![
        2 => Just(String::new()),
        1 => Just(", protocol: mcp".to_string()),
        1 => Just(", protocol: graphql, access: read-only".to_string()),
        1 => prop::sample::select(&["read-only", "full"][..]).prop_map(|a| format!(", protocol: rest, enforcement: enforce, access: {a}")),
        3 => (prop::collection::vec(rule, 1..3), prop::collection::vec(deny, 0..2)).prop_map(|(r, d)| {
            let deny = if d.is_empty() { String::new() } else { format!(", deny_rules: [{}]", d.join(", ")) };
            format!(", protocol: rest, enforcement: enforce, rules: [{}]{deny}", r.join(", "))
        }),
    ];
    let host = prop_oneof![6 => prop::sample::select(&["a.example.com", "b.example.com", "*.example.com", "**.a.example.com"][..]).prop_map(Some), 1 => Just(None)];
    let ips = prop::sample::subsequence(IPS.to_vec(), 0..3);
    let extras = (any::<bool>(), prop::option::weighted(0.2, prop::sample::select(&["/a/**", "/b"][..])));
    (host, prop::sample::subsequence(vec![80u16, 443, 8080], 1..=2), ips, l7, extras).prop_map(
        |(host, ports, mut ips, l7, (skip, path))| {
            if host.is_none() && ips.is_empty() {
                ips.push("10.0.5.0/24");
            }
            let mut s = String::from("{");
            if let Some(h) = host {
                s.push_str(&format!("host: '{h}', "));
            }
            let ps: Vec<String> = ports.iter().map(u16::to_string).collect();
            s.push_str(&format!("ports: [{}]", ps.join(", ")));
            if !ips.is_empty() {
                let ips: Vec<String> = ips.iter().map(|i| format!("'{i}'")).collect();
                s.push_str(&format!(", allowed_ips: [{}]", ips.join(", ")));
            }
            if skip {
                s.push_str(", tls: skip");
            }
            s.push_str(&l7);
            if let Some(p) = path
                && !l7.is_empty()
            {
                s.push_str(&format!(", path: '{p}'"));
            }
            s.push('}');
            s
        },
    )
}

fn rich_policy() -> impl Strategy<Value = Policy> {
    let rule = (
        prop::collection::vec(rich_endpoint(), 1..3),
        prop::sample::subsequence(vec!["/usr/bin/curl", "/usr/bin/*", "/**"], 1..3),
    );
    let mw =
        prop::option::weighted(0.2, (prop::sample::select(&["a.example.com", "*.example.com"][..]), any::<bool>()));
    (prop::collection::vec(rule, 0..3), mw).prop_map(|(rules, mw)| {
        let mut y = String::from("version: 1\n");
        if let Some((host, open)) = mw {
            let on_error = if open { "fail_open" } else { "fail_closed" };
            y.push_str(&format!(
                "network_middlewares:\n  m: {{middleware: openshell/regex, on_error: {on_error}, endpoints: {{include: ['{host}']}}}}\n"
            ));
        }
        y.push_str("network_policies:\n");
        for (i, (eps, bins)) in rules.iter().enumerate() {
            let bins: Vec<String> = bins.iter().map(|b| format!("{{path: '{b}'}}")).collect();
            y.push_str(&format!("  r{i}:\n    endpoints: [{}]\n    binaries: [{}]\n", eps.join(", "), bins.join(", ")));
        }
        Policy::from_yaml(&y).unwrap_or_else(|e| panic!("{e}\n{y}"))
    })
}

/// A candidate: an unrelated policy, the boundary itself, or the boundary with one
/// endpoint left out (so verbatim copies and narrowings come up often).
fn rich_pair() -> impl Strategy<Value = (Policy, Policy)> {
    (rich_policy(), rich_policy(), 0..5usize, any::<prop::sample::Index>()).prop_map(|(b, c, kind, ix)| {
        let c = match kind {
            0..=2 => c,
            3 => b.clone(),
            _ => {
                let mut c = b.clone();
                let keys: Vec<String> = c.network_policies.keys().cloned().collect();
                if !keys.is_empty() {
                    let np = c.network_policies.get_mut(&keys[ix.index(keys.len())]).unwrap();
                    let i = ix.index(np.endpoints.len());
                    np.endpoints.remove(i);
                }
                c
            }
        };
        (b, c)
    })
}

fn rich_universe() -> Vec<Access> {
    let mut out = Vec::new();
    let queries: Vec<Vec<(&str, &str)>> =
        vec![vec![], vec![("q", "1")], vec![("q", "10"), ("q", "2")], vec![("q", "x")], vec![("q", "1"), ("r", "zz")]];
    let addrs = [
        None,
        Some("10.0.5.7"),
        Some("10.1.0.1"),
        Some("192.0.2.9"),
        Some("127.0.0.1"),
        Some("fd00::1"),
        Some("198.51.100.1"),
    ];
    for program in ["/usr/bin/curl", "/usr/bin/git", "/opt/z"] {
        for host in ["a.example.com", "b.example.com", "x.a.example.com", "q.example.com"] {
            for port in [80, 443, 8080] {
                for addr in addrs {
                    let req = |http| {
                        Access::Network(NetworkRequest {
                            program: program.into(),
                            host: host.into(),
                            port,
                            http,
                            addr: addr.map(|a| a.parse().unwrap()),
                            ..Default::default()
                        })
                    };
                    out.push(req(None));
                    for m in ["GET", "POST", "HEAD"] {
                        for p in ["/", "/a", "/a/b", "/b", "/a/x/b"] {
                            for q in &queries {
                                let mut query: std::collections::BTreeMap<String, Vec<String>> = Default::default();
                                for (k, v) in q {
                                    query.entry(k.to_string()).or_default().push(v.to_string());
                                }
                                out.push(req(Some(HttpRequest { method: m.into(), path: p.into(), query })));
                            }
                        }
                    }
                }
            }
        }
    }
    out
}

static RICH_UNIVERSE: OnceLock<Vec<Access>> = OnceLock::new();

#[test]
fn prover_agrees_with_brute_force_on_the_new_fields() {
    use proptest::test_runner::{Config, TestRunner};
    let counts = std::sync::Mutex::new([0usize; 3]);
    let cases = std::env::var("RICH_CASES").ok().and_then(|n| n.parse().ok()).unwrap_or(200);
    // A fixed seed: the same pairs every run, so a run that fails fails again where it is
    // looked at.
    let config = Config { cases, failure_persistence: None, ..Config::default() };
    let rng = proptest::test_runner::TestRng::deterministic_rng(config.rng_algorithm);
    let mut runner = TestRunner::new_with_rng(config, rng);
    runner
        .run(&rich_pair(), |(boundary, candidate)| {
            let prover = Prover::new(Duration::from_secs(20));
            let verdict = prover.check(&boundary, &candidate);
            let universe = RICH_UNIVERSE.get_or_init(rich_universe);
            if let Some(w) = universe.iter().find(|a| candidate.allows(a) && !boundary.allows(a)) {
                prop_assert!(
                    !verdict.is_within(),
                    "Within, but brute force found {w}\nboundary: {}\ncandidate: {}",
                    boundary.to_yaml(),
                    candidate.to_yaml()
                );
            }
            if let Verdict::Exceeds(cx) = &verdict {
                prop_assert!(candidate.allows(&cx.request) && !boundary.allows(&cx.request), "no replay: {cx:?}");
            }
            prop_assert!(!matches!(verdict, Verdict::Inconclusive(_)), "{verdict:?}");
            let mut c = counts.lock().unwrap();
            c[match verdict {
                Verdict::Within => 0,
                Verdict::Exceeds(_) => 1,
                _ => 2,
            }] += 1;
            Ok(())
        })
        .unwrap();
    let c = counts.into_inner().unwrap();
    println!("within {}, exceeds {}, unsupported {}", c[0], c[1], c[2]);
    assert!(c[0] >= 15 && c[1] >= 15, "too few decided cases: {c:?}");
}

/// The boundary built from a parent and a global maximum never allows what either does
/// not, by the matcher, with the new fields in play.
#[test]
fn boundary_is_inside_parent_and_global_maximum() {
    use proptest::test_runner::{Config, TestRunner};
    let mut runner = TestRunner::new(Config { cases: 200, failure_persistence: None, ..Config::default() });
    runner
        .run(&(rich_policy(), rich_policy()), |(parent, global)| {
            let b = openshell_prover::boundary(&parent, Some(&global));
            let universe = RICH_UNIVERSE.get_or_init(rich_universe);
            if let Some(a) = universe.iter().find(|a| b.allows(a) && !(parent.allows(a) && global.allows(a))) {
                prop_assert!(
                    false,
                    "boundary allows {a}\nparent: {}\nglobal: {}\nboundary: {}",
                    parent.to_yaml(),
                    global.to_yaml(),
                    b.to_yaml()
                );
            }
            Ok(())
        })
        .unwrap();
}
