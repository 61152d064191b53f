//! The acceptance walk with the official TypeScript SDK (`@modelcontextprotocol/sdk`),
//! unchanged: from the host with a user's login, and from inside a sandbox through its door,
//! run by the grant's program (node). The same path as the Python walk: create a child,
//! exec in a tool child, read an agent child's file (and its secret env, kept in no record),
//! a wider policy refused with a counterexample, LIMIT_REACHED, success after the user raises
//! the limit with no policy change, a repeated request_id answered with the first result.

use std::path::{Path, PathBuf};
use std::time::Duration;

use openshell_e2e::inside::{json_of, sandbox_node, sandbox_node_prefix};
use openshell_e2e::*;
use openshell_proto::v1 as pb;

const DOOR: &str = "http://openshell.local/mcp";

fn repo() -> PathBuf {
    std::fs::canonicalize(Path::new(env!("CARGO_MANIFEST_DIR")).join("..")).unwrap()
}

async fn raise_breadth(api: &Api, to: i32) {
    api.grants()
        .update_grant(api.req(pb::UpdateGrantRequest {
            sandbox: "lead".into(),
            max_breadth: Some(to),
            ..Default::default()
        }))
        .await
        .expect("the user raises breadth");
}

/// What both walks must have seen in their first phase, and that nothing holds the secret.
async fn check_first(h: &Harness, api: &Api, first: &serde_json::Value) {
    assert_eq!(first["grant"]["remaining"]["breadth"], 2, "{first}");
    assert_eq!(first["created"]["phase"], "READY", "{first}");
    assert_eq!(first["limit"]["code"], "LIMIT_REACHED", "{first}");
    assert_eq!(first["limit"]["details"]["limit"], "breadth", "{first}");
    assert_eq!(first["wider"]["code"], "POLICY_EXCEEDS_PARENT", "{first}");
    let mut tree: Vec<String> = api.tree("lead").await.into_iter().map(|s| s.name).collect();
    tree.sort();
    assert_eq!(tree, ["lead", "walk-agent", "walk-tool"], "the refusals created nothing");
    let secret = first["secret"].as_str().unwrap();
    assert_eq!(first["file"]["content"], secret, "{first}");
    assert_eq!(secrets::tables_holding(&h.sql().await, secret).await, Vec::<String>::new());
    assert_eq!(secrets::files_holding(&h.state.0, secret), Vec::<PathBuf>::new());
}

#[tokio::test]
async fn typescript_sdk_walks_the_acceptance_path_from_the_host() {
    let h = Harness::process(|_| {}).await;
    let a = h.admin().await;
    a.root("lead", Some(grant(1, 2, 3))).await.expect("root with a grant");
    let node = repo().join(".deps/node-runtime/node_modules/.bin/node");
    assert!(node.exists(), "{} missing: run scripts/setup.sh", node.display());
    let walk = |phase: &'static str| {
        let node = node.clone();
        let url = format!("{}/mcp", h.endpoint);
        let token = h.admin_token.clone();
        async move {
            let out = tokio::process::Command::new(node)
                .arg(repo().join("tests/interop/mcp_walk.mjs"))
                .args([&url, phase, "--token-env", "OPENSHELL_TEST_TOKEN", "--parent", "lead", "--sdk"])
                .arg(repo().join(".deps/node"))
                .env("OPENSHELL_TEST_TOKEN", token)
                .stdin(std::process::Stdio::null())
                .output()
                .await
                .unwrap();
            let stdout = String::from_utf8_lossy(&out.stdout).to_string();
            assert!(out.status.success(), "walk {phase}: {stdout}\n{}", String::from_utf8_lossy(&out.stderr));
            serde_json::from_str::<serde_json::Value>(stdout.lines().last().unwrap_or("")).unwrap()
        }
    };
    let first = walk("first").await;
    check_first(&h, &a, &first).await;
    assert!(!first["progress"].as_array().unwrap().is_empty(), "progress was reported: {first}");
    raise_breadth(&a, 3).await;
    let after = walk("after_raise").await;
    assert_eq!(after["created"]["name"], "walk-over", "{after}");
    assert!(a.audit_of("lead").await.iter().any(|e| e.code == "LIMIT_REACHED"), "the refusal has its receipt");
}

#[tokio::test]
async fn typescript_sdk_walks_the_acceptance_path_through_the_door() {
    let h = Harness::process(|_| {}).await;
    let a = h.admin().await;
    let scripts = sandbox_visible(&repo().join("tests/interop"));
    let policy = policy_reading(&[&sandbox_node_prefix(), &scripts]);
    // The grant names node as users write it: the link, resolved to the binary it points to.
    let program = sandbox_node().display().to_string();
    let req = pb::CreateSandboxRequest {
        name: "lead".into(),
        command: vec!["sleep".into(), "600".into()],
        policy_yaml: policy,
        // The walk makes more tool calls than the default rate (10/s) allows on a fast machine.
        grant: Some(pb::GrantSpec { program: program.clone(), rate: "100/s".into(), ..grant(1, 2, 3) }),
        ..Default::default()
    };
    a.sandboxes().create_sandbox(a.req(req)).await.expect("root");
    let up =
        eventually(Duration::from_secs(20), || async { a.get("lead").await.is_ok_and(|s| s.phase == "READY") }).await;
    assert!(up, "lead should run: {:?}", a.get("lead").await);
    let grants_before = count(&h.sql().await, "SELECT count(*) FROM grant_history").await;

    let walk = |phase: &str| {
        vec![
            program.clone(),
            scripts.join("mcp_walk.mjs").display().to_string(),
            DOOR.into(),
            phase.into(),
            "--sdk".into(),
            sandbox_node_prefix().display().to_string(),
        ]
    };
    let first = json_of(&a, "lead", walk("first")).await;
    check_first(&h, &a, &first).await;
    assert_eq!(first["grant"]["sandbox"], "lead", "its own tree, seen from itself: {first}");
    let child = a.get("walk-tool").await.unwrap();
    assert!(
        child.created_by.starts_with("sandbox:lead program:") && child.created_by.contains("node"),
        "created through the door by node: {}",
        child.created_by
    );
    raise_breadth(&a, 3).await;
    json_of(&a, "lead", walk("after_raise")).await;
    let grants_after = count(&h.sql().await, "SELECT count(*) FROM grant_history").await;
    assert_eq!(grants_after, grants_before + 1, "the user's update only");
}
