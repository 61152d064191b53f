//! MCP from inside a sandbox: the official Python SDK, unchanged, run by the grant's program
//! inside a real sandbox, reaches `http://openshell.local/mcp` with nothing but the URL
//! (its supervisor's door adds the door credential and the kernel-resolved program) and
//! walks the acceptance path. Another program is refused; a tree without a grant is refused
//! until a user grants it; no tool changes a grant.

use std::path::PathBuf;
use std::time::Duration;

use openshell_e2e::inside::{json_of, run_in};
use openshell_e2e::*;
use openshell_proto::v1 as pb;

const DOOR: &str = "http://openshell.local/mcp";

fn repo() -> PathBuf {
    std::fs::canonicalize(std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..")).unwrap()
}

/// The default policy plus read access to the Python SDK's venv (of /usr/bin/python3, the
/// grant's program) and the scripts.
fn policy() -> String {
    policy_reading(&[sandbox_python().parent().unwrap().parent().unwrap(), &scripts()])
}

fn python() -> String {
    sandbox_python().display().to_string()
}

/// The interop scripts where sandboxes can read them (one copy per test process).
fn scripts() -> PathBuf {
    static STAGED: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    STAGED.get_or_init(|| sandbox_visible(&repo().join("tests/interop"))).clone()
}

fn script(name: &str) -> String {
    scripts().join(name).display().to_string()
}

async fn root(api: &Api, name: &str, grant: Option<pb::GrantSpec>) {
    let req = pb::CreateSandboxRequest {
        name: name.into(),
        command: vec!["sleep".into(), "600".into()],
        policy_yaml: policy(),
        grant,
        ..Default::default()
    };
    api.sandboxes().create_sandbox(api.req(req)).await.expect("root");
    let up =
        eventually(Duration::from_secs(20), || async { api.get(name).await.is_ok_and(|s| s.phase == "READY") }).await;
    assert!(up, "{name} should run: {:?}", api.get(name).await);
}

#[tokio::test]
async fn python_sdk_walks_the_acceptance_path_through_the_door() {
    let h = Harness::process(|_| {}).await;
    let a = h.admin().await;
    // The grant names the program as users write it (a symlink to the interpreter).
    // The walk makes more tool calls than the default rate (10/s) allows on a fast machine.
    root(&a, "lead", Some(pb::GrantSpec { rate: "100/s".into(), ..grant(1, 2, 3) })).await;
    let grants_before = count(&h.sql().await, "SELECT count(*) FROM grant_history").await;

    let walk = |phase: &str| vec![python(), script("mcp_walk.py"), DOOR.into(), phase.into()];
    let first = json_of(&a, "lead", walk("first")).await;
    assert_eq!(first["created"]["parent"], "lead", "{first}");
    assert_eq!(first["grant"]["sandbox"], "lead", "its own tree, seen from itself: {first}");
    assert_eq!(first["grant"]["remaining"]["breadth"], 2, "{first}");
    assert_eq!(first["limit"]["details"]["limit"], "breadth", "{first}");
    let child = a.get("walk-tool").await.unwrap();
    assert!(child.created_by.starts_with("sandbox:lead program:/usr/bin/python3"), "{}", child.created_by);
    // The agent child saw the secret its parent gave it; no row, receipt or log holds it.
    let secret = first["secret"].as_str().unwrap();
    assert_eq!(first["file"]["content"], secret, "{first}");
    assert_eq!(secrets::tables_holding(&h.sql().await, secret).await, Vec::<String>::new());
    assert_eq!(secrets::files_holding(&h.state.0, secret), Vec::<PathBuf>::new());

    a.grants()
        .update_grant(a.req(pb::UpdateGrantRequest {
            sandbox: "lead".into(),
            max_breadth: Some(3),
            ..Default::default()
        }))
        .await
        .expect("the user raises breadth");
    json_of(&a, "lead", walk("after_raise")).await;

    // The agent changed no grant through any tool: only the user's one update is recorded.
    let grants_after = count(&h.sql().await, "SELECT count(*) FROM grant_history").await;
    assert_eq!(grants_after, grants_before + 1, "the user's update only");
    let tools = first["tools"].as_array().unwrap();
    assert!(!tools.iter().any(|t| t != "get_grant" && t.as_str().unwrap().contains("grant")), "{tools:?}");
}

#[tokio::test]
async fn another_program_is_refused_and_a_grant_attached_later_lets_the_sandbox_create() {
    let h = Harness::process(|_| {}).await;
    let a = h.admin().await;
    root(&a, "bare", None).await;
    let create = |name: &str| vec![python(), script("mcp_create.py"), DOOR.into(), name.into()];

    // No grant: refused at call time, with the tools still listed.
    let r = json_of(&a, "bare", create("c1")).await;
    assert_eq!(r["is_error"], true, "{r}");
    assert_eq!(r["result"]["code"], "NOT_ALLOWED", "{r}");
    assert_eq!(r["result"]["details"]["reason"], "no_grant", "{r}");
    assert!(r["tools"].as_array().unwrap().iter().any(|t| t == "create_sandbox"), "{r}");
    assert_eq!(a.tree("bare").await.len(), 1, "nothing created");

    // The user grants the tree: the same call now creates.
    a.grants()
        .create_grant(a.req(pb::CreateGrantRequest { sandbox: "bare".into(), grant: Some(grant(1, 2, 2)) }))
        .await
        .expect("grant");
    let r = json_of(&a, "bare", create("c1")).await;
    assert_eq!(r["is_error"], false, "{r}");
    assert_eq!(r["result"]["sandbox"]["phase"], "READY", "{r}");

    // curl is not the grant's program: refused, naming it.
    let init = r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"curl","version":"1"}}}"#;
    let call = r#"{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"create_sandbox","arguments":{"name":"c2","kind":"tool","command":["sleep","600"]}}}"#;
    let curl = format!(
        "set -e; h='-H content-type:application/json -H accept:application/json,text/event-stream'; \
         sid=$(curl -s -D - -o /dev/null $h -X POST {DOOR} -d '{init}' | tr -d '\\r' | sed -n 's/^mcp-session-id: //Ip'); \
         curl -s $h -H \"mcp-session-id: $sid\" -X POST {DOOR} -d '{{\"jsonrpc\":\"2.0\",\"method\":\"notifications/initialized\"}}'; \
         curl -s $h -H \"mcp-session-id: $sid\" -X POST {DOOR} -d '{call}'"
    );
    let (code, out, err) = run_in(&a, "bare", vec!["/bin/sh".into(), "-c".into(), curl]).await;
    assert_eq!(code, 0, "{out}\n{err}");
    // curl's sockets are inheritable, which the door refuses before the gateway is asked (a
    // program of its own with close-on-exec sockets meets NOT_ALLOWED: door_attacks.rs).
    assert!(out.contains(r#""program":"/usr/bin/curl""#) && out.contains("close-on-exec"), "refused naming it: {out}");
    assert_eq!(a.tree("bare").await.len(), 2, "curl created nothing");
}
