//! The Python SDK (sdk/python) against a real gateway: its unit suite (with the check that the
//! checked-in gRPC code is fresh), its type check, an offline install from the repository, its
//! host suite over gRPC, its in-sandbox suites through the door of real leads (the grant's
//! program, and a lead whose grant names another program), and examples/rl_runner.py run as
//! written from the host and from inside a lead.

use std::path::{Path, PathBuf};
use std::process::{Output, Stdio};
use std::time::Duration;

use openshell_e2e::inside::run_in;
use openshell_e2e::*;
use openshell_proto::v1 as pb;

fn repo() -> PathBuf {
    std::fs::canonicalize(Path::new(env!("CARGO_MANIFEST_DIR")).join("..")).unwrap()
}

fn sdk() -> PathBuf {
    repo().join("sdk/python")
}

/// The host's Python (.deps/py, made by scripts/setup.d/40-python.sh).
fn host_python() -> PathBuf {
    let p = repo().join(".deps/py/bin/python");
    assert!(p.is_file(), "{} missing: run scripts/setup.sh", p.display());
    p
}

fn text(out: &Output) -> String {
    format!("{}\n{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr))
}

/// A pytest run's closing line, asserting every test ran and passed (none skipped): at least `min`.
#[track_caller]
fn all_passed(code: i32, out: &str, min: usize) {
    assert_eq!(code, 0, "pytest failed:\n{out}");
    let summary = out.lines().rev().find(|l| l.contains(" passed")).unwrap_or_else(|| panic!("no summary:\n{out}"));
    let passed: usize = summary.split_whitespace().next().and_then(|n| n.parse().ok()).unwrap_or(0);
    assert!(passed >= min, "{passed} passed, expected at least {min}:\n{out}");
    for word in ["failed", "skipped", "error", "xfail"] {
        assert!(!summary.contains(word), "{summary}\n{out}");
    }
}

/// The SDK's source, tests and the example where sandboxes can read them (the checkout may sit
/// under a /tmp that sandboxes do not see); removed on drop.
struct Staged(PathBuf);

impl Staged {
    fn new() -> Staged {
        let to = PathBuf::from("/var/tmp").join(format!("openshell-e2e-sdk-{}", uuid::Uuid::new_v4()));
        std::fs::create_dir_all(&to).unwrap();
        for from in
            [sdk().join("src"), sdk().join("tests"), sdk().join("pyproject.toml"), repo().join("examples/rl_runner.py")]
        {
            let ok = std::process::Command::new("cp").arg("-r").arg(&from).arg(&to).status().unwrap().success();
            assert!(ok, "copy {}", from.display());
        }
        let ok = std::process::Command::new("chmod").args(["-R", "a+rX"]).arg(&to).status().unwrap().success();
        assert!(ok);
        Staged(to)
    }
}

impl Drop for Staged {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A lead running `sleep` whose Python finds the staged SDK (PYTHONPATH, for its main command
/// and every exec), with read access to the sandboxes' venv and the staged files.
async fn lead(api: &Api, name: &str, staged: &Staged, grant: pb::GrantSpec) {
    let venv = sandbox_python().parent().unwrap().parent().unwrap().to_path_buf();
    let env = [("PYTHONPATH", staged.0.join("src")), ("PYTHONDONTWRITEBYTECODE", "1".into())]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.display().to_string()))
        .collect();
    let req = pb::CreateSandboxRequest {
        name: name.into(),
        command: vec!["sleep".into(), "900".into()],
        policy_yaml: policy_reading(&[&venv, &staged.0]),
        grant: Some(grant),
        env,
        ..Default::default()
    };
    api.sandboxes().create_sandbox(api.req(req)).await.expect("lead");
    let up =
        eventually(Duration::from_secs(30), || async { api.get(name).await.is_ok_and(|s| s.phase == "READY") }).await;
    assert!(up, "{name} should run: {:?}", api.get(name).await);
}

fn in_sandbox_pytest(staged: &Staged, file: &str) -> Vec<String> {
    let target = staged.0.join("tests/sandbox").join(file);
    vec![
        sandbox_python().display().to_string(),
        "-m".into(),
        "pytest".into(),
        "-q".into(),
        target.display().to_string(),
    ]
}

#[tokio::test]
async fn the_sdk_unit_suite_passes_and_its_generated_code_is_fresh() {
    let out = tokio::process::Command::new(host_python())
        .args(["-m", "pytest", "-q", "tests/unit"])
        .current_dir(sdk())
        .env_remove("OPENSHELL_SANDBOX_ID")
        .stdin(Stdio::null())
        .output()
        .await
        .unwrap();
    all_passed(out.status.code().unwrap_or(-1), &text(&out), 20);
}

#[tokio::test]
async fn the_sdk_and_the_example_type_check_strictly() {
    let out = tokio::process::Command::new(host_python())
        .args(["-m", "mypy", "--config-file", "sdk/python/pyproject.toml", "--cache-dir", "target/mypy-sdk"])
        .args(["sdk/python/src/openshell_delegation", "examples/rl_runner.py"])
        .env("MYPYPATH", sdk().join("src"))
        .current_dir(repo())
        .output()
        .await
        .unwrap();
    let t = text(&out);
    assert!(out.status.success() && t.contains("Success: no issues found"), "{t}");
}

#[tokio::test]
async fn the_sdk_installs_offline_from_the_repository() {
    let target = TempDir::new("openshell-sdk-install");
    let out = tokio::process::Command::new(host_python())
        .args(["-m", "pip", "install", "--quiet", "--disable-pip-version-check", "--no-index", "--no-deps"])
        .args(["--no-build-isolation", "--target"])
        .arg(&target.0)
        .arg(sdk())
        .output()
        .await
        .unwrap();
    assert!(out.status.success(), "{}", text(&out));
    let pkg = target.0.join("openshell_delegation");
    for f in ["py.typed", "_proto/gateway_pb2.py", "_proto/gateway_pb2.pyi", "_proto/gateway_pb2_grpc.py"] {
        assert!(pkg.join(f).is_file(), "{f} installed");
    }
    let probe = "import openshell_delegation as o, openshell_delegation._grpc; print(o.__file__, o.__version__)";
    let out = tokio::process::Command::new(host_python())
        .args(["-c", probe])
        .env("PYTHONPATH", &target.0)
        .output()
        .await
        .unwrap();
    assert!(out.status.success(), "{}", text(&out));
    assert!(String::from_utf8_lossy(&out.stdout).starts_with(&pkg.display().to_string()), "{}", text(&out));
}

#[tokio::test]
async fn the_sdk_host_suite_passes_against_a_real_gateway() {
    let h = Harness::process(|_| {}).await;
    let out = tokio::process::Command::new(host_python())
        .args(["-m", "pytest", "-q", "tests/host"])
        .current_dir(sdk())
        .env("OPENSHELL_ENDPOINT", &h.endpoint)
        .env("OPENSHELL_TOKEN", &h.admin_token)
        .env("OPENSHELL_CONFIG", h.state.0.join("no-config.json"))
        .env_remove("OPENSHELL_SANDBOX_ID")
        .stdin(Stdio::null())
        .output()
        .await
        .unwrap();
    all_passed(out.status.code().unwrap_or(-1), &text(&out), 12);
    // The refusals the suite met left their receipts; the token reached no log of the gateway.
    let sql = h.sql().await;
    assert!(count(&sql, "SELECT count(*) FROM audit_view WHERE code = 'LIMIT_REACHED'").await >= 1);
    assert!(count(&sql, "SELECT count(*) FROM audit_view WHERE code = 'POLICY_EXCEEDS_PARENT'").await >= 1);
    // Every create carries a request_id: the SDK makes one when the caller gives none.
    assert!(count(&sql, "SELECT count(*) FROM audit_view WHERE request_id LIKE 'sdk-%'").await >= 5);
    assert_eq!(secrets::files_holding(&h.state.0, &h.admin_token), Vec::<PathBuf>::new());
}

#[tokio::test]
async fn the_sdk_sandbox_suites_pass_inside_leads_through_the_door() {
    let h = Harness::process(|_| {}).await;
    let a = h.admin().await;
    let staged = Staged::new();

    // The grant's program runs the suite: everything a sandbox may do, its limits, and the
    // host-only calls refused before they leave the process.
    lead(&a, "lead", &staged, grant(1, 2, 3)).await;
    let grants_before = count(&h.sql().await, "SELECT count(*) FROM grant_history").await;
    let (code, out, err) = run_in(&a, "lead", in_sandbox_pytest(&staged, "test_door.py")).await;
    all_passed(code, &format!("{out}\n{err}"), 9);
    let audit = a.audit_of("lead").await;
    assert!(audit.iter().any(|e| e.code == "LIMIT_REACHED" && e.details_json.contains("breadth")), "{audit:?}");
    assert!(audit.iter().any(|e| e.code == "POLICY_EXCEEDS_PARENT"), "{audit:?}");
    let made: Vec<pb::Sandbox> = a.tree("lead").await.into_iter().skip(1).collect();
    assert!(!made.is_empty() && made.iter().all(|s| s.created_by.starts_with("sandbox:lead program:/usr/bin/python3")));
    // No grant changed: the host-only calls never reached the gateway.
    assert_eq!(count(&h.sql().await, "SELECT count(*) FROM grant_history").await, grants_before);

    // A lead whose tree may make two door calls a second: a burst meets the rate, and the
    // SDK's pacing carries one through.
    lead(&a, "paced", &staged, pb::GrantSpec { rate: "2/s".into(), ..grant(1, 2, 3) }).await;
    let (code, out, err) = run_in(&a, "paced", in_sandbox_pytest(&staged, "test_rate.py")).await;
    all_passed(code, &format!("{out}\n{err}"), 2);

    // Python is not the program this lead's grant names: its creates are refused, naming it.
    lead(&a, "other", &staged, pb::GrantSpec { program: "/usr/bin/env".into(), ..grant(1, 2, 3) }).await;
    let (code, out, err) = run_in(&a, "other", in_sandbox_pytest(&staged, "test_wrong_program.py")).await;
    all_passed(code, &format!("{out}\n{err}"), 1);
    assert_eq!(a.tree("other").await.len(), 1, "nothing was created");
    let refused = a.audit_of("other").await;
    assert!(refused.iter().any(|e| e.code == "NOT_ALLOWED" && e.details_json.contains("program")), "{refused:?}");
}

#[tokio::test]
async fn the_rl_runner_example_runs_the_same_from_the_host_and_inside_a_lead() {
    let h = Harness::process(|_| {}).await;
    let a = h.admin().await;
    let staged = Staged::new();
    let check = |report: &serde_json::Value, place: &str, episodes: usize| {
        assert_eq!(report["place"], place, "{report}");
        let got = report["episodes"].as_array().unwrap();
        assert_eq!(got.len(), episodes, "{report}");
        for e in got {
            let i = e["episode"].as_i64().unwrap();
            assert_eq!(e["exit_code"], 0, "{report}");
            assert_eq!(e["output"], format!("episode {i} on sandbox: reward {}", i * i), "{report}");
        }
        assert_eq!(report["stopped"].as_array().unwrap().len(), episodes, "{report}");
    };

    // From the host, under a lead the user made, as written in the example's docstring.
    a.root("lead", Some(grant(1, 3, 3))).await.unwrap();
    let out = tokio::process::Command::new(host_python())
        .arg(repo().join("examples/rl_runner.py"))
        .args(["--parent", "lead", "--workers", "3"])
        .env("PYTHONPATH", sdk().join("src"))
        .env("OPENSHELL_ENDPOINT", &h.endpoint)
        .env("OPENSHELL_TOKEN", &h.admin_token)
        .env_remove("OPENSHELL_SANDBOX_ID")
        .output()
        .await
        .unwrap();
    assert!(out.status.success(), "{}", text(&out));
    let stdout = String::from_utf8_lossy(&out.stdout);
    let report: serde_json::Value = serde_json::from_str(stdout.lines().last().unwrap_or("")).unwrap();
    check(&report, "host", 3);
    let tree = a.tree("lead").await;
    assert_eq!(tree.len(), 4, "{tree:?}");
    assert!(tree.iter().skip(1).all(|s| s.phase == "STOPPED"), "{tree:?}");

    // Inside a lead whose grant admits two: the third create is refused (LIMIT_REACHED), the
    // two that started run their episodes and are stopped.
    lead(&a, "runner", &staged, grant(1, 2, 2)).await;
    let command = vec![
        sandbox_python().display().to_string(),
        staged.0.join("rl_runner.py").display().to_string(),
        "--workers".into(),
        "3".into(),
    ];
    let (code, out, err) = run_in(&a, "runner", command).await;
    assert_eq!(code, 0, "{out}\n{err}");
    let report: serde_json::Value = serde_json::from_str(out.lines().last().unwrap_or("")).unwrap();
    check(&report, "sandbox", 2);
    assert_eq!(report["refused"][0]["limit"], "breadth", "{report}");
    let tree = a.tree("runner").await;
    assert_eq!(tree.len(), 3, "{tree:?}");
    assert!(tree.iter().skip(1).all(|s| s.phase == "STOPPED" && s.created_by.contains("program:")), "{tree:?}");
}
