//! Upstream OpenShell's own policy files (tests/corpus/openshell; sources and licence in its
//! README): each parses as upstream parses it, with the warnings it should get, and proves
//! within itself as the gateway stores it (with the baseline paths): `Within`, or
//! `Unsupported` naming what the prover cannot model, never `Exceeds`.

use std::path::{Path, PathBuf};
use std::time::Duration;

use openshell_policy::Policy;
use openshell_prover::{Prover, Verdict, boundary};

/// What a file should give: the warnings (each a substring of one, in order) and the verdict
/// of the file within itself (`None`: Within; `Some(s)`: Unsupported naming `s`).
struct Expect {
    file: &'static str,
    warnings: &'static [&'static str],
    unsupported: Option<&'static str>,
}

const TERMINATE: &str = "`tls: terminate` is deprecated";
const MIDDLEWARE: &str = "network_middlewares";

const fn within(file: &'static str) -> Expect {
    Expect { file, warnings: &[], unsupported: None }
}

const CORPUS: &[Expect] = &[
    Expect {
        file: "crates/openshell-policy/testdata/mcp-version-profiles.yaml",
        warnings: &[],
        unsupported: Some("protocol `mcp` under `enforce`"),
    },
    within("crates/openshell-prover/testdata/policy.yaml"),
    within("crates/openshell-prover-cli/tests/fixtures/candidate-contained.yaml"),
    within("crates/openshell-prover-cli/tests/fixtures/candidate-ipv6.yaml"),
    within("crates/openshell-prover-cli/tests/fixtures/candidate-underscore-host.yaml"),
    Expect {
        file: "crates/openshell-prover-cli/tests/fixtures/candidate-unicode-network-selector.yaml",
        warnings: &[],
        unsupported: Some("binaries[0].path `/usr/bin/é*` has a non-ASCII character"),
    },
    within("crates/openshell-prover-cli/tests/fixtures/query-any.yaml"),
    within("crates/openshell-prover-cli/tests/fixtures/query-receive.yaml"),
    within("crates/openshell-prover-cli/tests/fixtures/query-upload.yaml"),
    within("e2e/policy-advisor/policy.template.yaml"),
    within("examples/a2a-design-review/policy.yaml"),
    within("examples/agent-driven-policy-management/policy.template.yaml"),
    within("examples/governance-interceptor/policy.yaml"),
    within("examples/jupyter-sandbox/policy.yaml"),
    Expect { file: "examples/local-inference/sandbox-policy.yaml", warnings: &[TERMINATE], unsupported: None },
    within("examples/multi-agent-notepad/policy.template.yaml"),
    Expect { file: "examples/pi-conversation-middleware/policy.yaml", warnings: &[], unsupported: Some(MIDDLEWARE) },
    within("examples/policy-advisor/sandbox-policy.yaml"),
    Expect {
        file: "examples/sandbox-policy-quickstart/README.md.policy.yaml",
        warnings: &[TERMINATE],
        unsupported: None,
    },
    within("examples/sandbox-policy-quickstart/policy.yaml"),
    Expect {
        file: "examples/supervisor-middleware-content-guard/policy.yaml",
        warnings: &[],
        unsupported: Some(MIDDLEWARE),
    },
    Expect {
        file: "examples/supervisor-middleware-git-signing/policy.yaml",
        warnings: &[],
        unsupported: Some(MIDDLEWARE),
    },
    Expect {
        file: "examples/supervisor-middleware-payment-gate/policy.yaml",
        warnings: &[],
        unsupported: Some(MIDDLEWARE),
    },
    Expect {
        file: "examples/supervisor-middleware-protocol/policy.yaml",
        warnings: &[],
        unsupported: Some(MIDDLEWARE),
    },
    Expect {
        file: "examples/supervisor-middleware-response-transform/policy.yaml",
        warnings: &[],
        unsupported: Some(MIDDLEWARE),
    },
    within("examples/transparent-tcp-redis/policy.yaml"),
    Expect { file: "examples/tutorial/policy.yaml", warnings: &[TERMINATE], unsupported: Some("credential_binding") },
];

/// Files without `version`: network rules to add to a policy (what a proposal carries), not
/// a policy. Upstream refuses them as policies too.
const FRAGMENTS: &[Expect] = &[Expect {
    file: "examples/tutorial/nv-inference-policy.yaml",
    warnings: &[TERMINATE],
    unsupported: Some("credential_binding"),
}];

fn corpus() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/corpus/openshell")
}

fn files(dir: &Path, out: &mut Vec<String>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let p = entry.unwrap().path();
        if p.is_dir() {
            files(&p, out);
        } else if p.extension().is_some_and(|x| x == "yaml") {
            out.push(p.strip_prefix(corpus()).unwrap().display().to_string());
        }
    }
}

fn check(e: &Expect, text: &str) {
    let (policy, warnings) = Policy::from_yaml_with_warnings(text).unwrap_or_else(|err| panic!("{}: {err}", e.file));
    assert_eq!(warnings.len(), e.warnings.len(), "{}: {warnings:?}", e.file);
    for (got, want) in warnings.iter().zip(e.warnings) {
        assert!(got.message.contains(want), "{}: {got}", e.file);
    }
    let stored = policy.with_baseline();
    // The gateway stores the canonical form and every reader parses it back.
    let back = Policy::from_json(&stored.canonical_json()).unwrap_or_else(|err| panic!("{} stored: {err}", e.file));
    assert_eq!(back, stored, "{}", e.file);
    let verdict = Prover::new(Duration::from_secs(30)).check(&boundary(&stored, None), &stored);
    match (e.unsupported, &verdict) {
        (None, Verdict::Within) => {}
        (Some(why), Verdict::Unsupported(reason)) => assert!(reason.contains(why), "{}: {reason}", e.file),
        _ => panic!("{}: {verdict:?}", e.file),
    }
}

#[test]
fn every_file_is_known() {
    let mut found = Vec::new();
    files(&corpus(), &mut found);
    found.sort();
    let mut known: Vec<String> = CORPUS.iter().chain(FRAGMENTS).map(|e| e.file.to_string()).collect();
    known.sort();
    assert_eq!(found, known, "classify a new corpus file in this table");
}

#[test]
fn each_upstream_policy_parses_and_proves_within_itself() {
    for e in CORPUS {
        check(e, &std::fs::read_to_string(corpus().join(e.file)).unwrap());
    }
}

#[test]
fn a_fragment_is_refused_as_a_policy_and_parses_as_rules() {
    for e in FRAGMENTS {
        let text = std::fs::read_to_string(corpus().join(e.file)).unwrap();
        let err = Policy::from_yaml(&text).expect_err("no version: not a policy");
        assert!(err.reason.contains("missing field `version`"), "{}: {err}", e.file);
        check(e, &format!("version: 1\n{text}"));
    }
}

#[test]
fn a_non_ascii_program_glob_on_either_side_is_unprovable() {
    let p = |bin: &str| {
        Policy::from_yaml(&format!(
            "version: 1\nnetwork_policies: {{r: {{endpoints: [{{host: a.example.com, port: 443}}], binaries: [{{path: '{bin}'}}]}}}}\n"
        ))
        .unwrap()
    };
    let prover = Prover::new(Duration::from_secs(30));
    for (b, c, side) in [("/usr/bin/*", "/usr/bin/é*x", "candidate"), ("/usr/bin/é*", "/usr/bin/*", "boundary")] {
        match prover.check(&boundary(&p(b), None), &p(c)) {
            Verdict::Unsupported(reason) => {
                assert!(reason.starts_with(&format!("{side} network_policies.r.binaries[0].path")), "{reason}")
            }
            other => panic!("{b} / {c}: {other:?}"),
        }
    }
}
