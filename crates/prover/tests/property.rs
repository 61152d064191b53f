//! The prover against an independent brute force: the matcher run over a finite universe of
//! requests built from the policies' own literals and near misses. The prover must never
//! say Within when the brute force finds a request the candidate allows and the boundary
//! does not, and every Exceeds must replay.

use std::time::Duration;

use openshell_policy::{Access, FileMode, HttpRequest, NetworkRequest, Policy};
use openshell_prover::{Prover, Verdict};
use proptest::prelude::*;

const HOSTS: &[&str] = &[
    "a.example.com",
    "b.example.com",
    "*.example.com",
    "**.example.com",
    "x.a.example.com",
    "*.a.example.com",
];
const BINS: &[&str] = &[
    "/usr/bin/curl",
    "/usr/bin/*",
    "/usr/bin/git",
    "/**",
    "/usr/**",
];
const METHODS: &[&str] = &["GET", "HEAD", "POST", "*"];
const PATHS: &[&str] = &["/a/**", "/a/*", "/a/b", "/**", "/b", "/a*"];
const FS: &[&str] = &["/usr", "/usr/lib", "/tmp", "/", "/tmp/x"];

fn endpoint() -> impl Strategy<Value = String> {
    let host = prop::sample::select(HOSTS);
    let ports = prop::sample::subsequence(vec![80u16, 443], 1..=2);
    let rule = (prop::sample::select(METHODS), prop::sample::select(PATHS))
        .prop_map(|(m, p)| format!("{{allow: {{method: '{m}', path: '{p}'}}}}"));
    let deny = (prop::sample::select(METHODS), prop::sample::select(PATHS))
        .prop_map(|(m, p)| format!("{{method: '{m}', path: '{p}'}}"));
    let l7 = prop_oneof![
        Just(String::new()),
        prop::sample::select(&["read-only", "read-write", "full"][..])
            .prop_map(|a| format!(", protocol: rest, enforcement: enforce, access: {a}")),
        (
            prop::collection::vec(rule, 1..3),
            prop::collection::vec(deny, 0..2)
        )
            .prop_map(|(r, d)| {
                let deny = if d.is_empty() {
                    String::new()
                } else {
                    format!(", deny_rules: [{}]", d.join(", "))
                };
                format!(
                    ", protocol: rest, enforcement: enforce, rules: [{}]{deny}",
                    r.join(", ")
                )
            }),
    ];
    (host, ports, l7).prop_map(|(h, ps, l7)| {
        let ps: Vec<String> = ps.iter().map(u16::to_string).collect();
        format!("{{host: '{h}', ports: [{}]{l7}}}", ps.join(", "))
    })
}

fn policy() -> impl Strategy<Value = Policy> {
    let rule = (
        prop::collection::vec(endpoint(), 1..3),
        prop::sample::subsequence(BINS.to_vec(), 1..3),
    );
    let fs = (
        prop::sample::subsequence(FS.to_vec(), 0..3),
        prop::sample::subsequence(FS.to_vec(), 0..2),
        any::<bool>(),
    );
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

/// Every access in the finite universe.
fn universe() -> Vec<Access> {
    let programs = [
        "/usr/bin/curl",
        "/usr/bin/git",
        "/usr/bin/x",
        "/usr/bin",
        "/usr/lib/y",
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
    ];
    let methods = ["GET", "HEAD", "POST", "PUT", "OPTIONS", "DELETE"];
    let paths = ["/", "/a", "/a/", "/a/b", "/a/b/c", "/b", "/ab", "/a/x"];
    let mut out = vec![
        Access::WithoutLandlock,
        Access::Workdir {
            mode: FileMode::Write,
        },
    ];
    for p in [
        "/",
        "/usr",
        "/usr/lib",
        "/usr/lib/z",
        "/tmp",
        "/tmp/x",
        "/tmp/x/y",
        "/etc",
    ] {
        for mode in [FileMode::Read, FileMode::Write] {
            out.push(Access::File {
                mode,
                path: p.into(),
            });
        }
    }
    for program in programs {
        for host in hosts {
            for port in [80, 443, 22] {
                let req = |http| {
                    Access::Network(NetworkRequest {
                        program: program.into(),
                        ancestors: vec![],
                        host: host.into(),
                        port,
                        http,
                    })
                };
                out.push(req(None));
                for m in methods {
                    for p in paths {
                        out.push(req(Some(HttpRequest {
                            method: m.into(),
                            path: p.into(),
                        })));
                    }
                }
            }
        }
    }
    out
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 200, ..ProptestConfig::default() })]

    #[test]
    fn prover_agrees_with_brute_force(boundary in policy(), candidate in policy()) {
        let prover = Prover::new(Duration::from_secs(20));
        let verdict = prover.check(&boundary, &candidate);
        let witness = universe()
            .into_iter()
            .find(|a| candidate.allows(a) && !boundary.allows(a));
        if let Some(w) = &witness {
            prop_assert!(!verdict.is_within(), "Within, but brute force found {w}\nboundary: {}\ncandidate: {}", boundary.to_yaml(), candidate.to_yaml());
        }
        if let Verdict::Exceeds(cx) = &verdict {
            prop_assert!(candidate.allows(&cx.request) && !boundary.allows(&cx.request), "no replay: {cx:?}");
        }
        prop_assert!(!matches!(verdict, Verdict::Inconclusive(_) | Verdict::Unsupported(_)), "{verdict:?}");
    }
}
