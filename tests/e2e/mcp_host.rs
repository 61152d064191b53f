//! MCP from the host: the official Python SDK, unchanged, walks the acceptance path with a
//! user's login (both its legacy handshake and its 2026-07-28 negotiation), and the
//! transport's rules hold against raw HTTP (credentials, Host, Origin, body size, URLs).

use std::path::PathBuf;
use std::process::Stdio;

use openshell_e2e::*;
use openshell_proto::v1 as pb;

fn repo() -> PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

async fn new_user(h: &Harness, name: &str) -> (String, Api) {
    let admin = h.admin().await;
    let token = admin
        .users()
        .create_user(admin.req(pb::CreateUserRequest { name: name.into(), admin: false }))
        .await
        .expect("admin creates a user")
        .into_inner()
        .token;
    let api = h.client(&token).await;
    (token, api)
}

/// Runs the Python walk; returns its JSON report (asserting it succeeded).
async fn walk(url: &str, token: &str, phase: &str, mode: &str, parent: &str) -> serde_json::Value {
    let python = repo().join(".deps/py/bin/python");
    assert!(python.is_file(), "{} missing: run scripts/setup.sh", python.display());
    let out = tokio::process::Command::new(python)
        .arg(repo().join("tests/interop/mcp_walk.py"))
        .args([url, phase, "--token-env", "OPENSHELL_TEST_TOKEN", "--mode", mode, "--parent", parent])
        .env("OPENSHELL_TEST_TOKEN", token)
        .stdin(Stdio::null())
        .output()
        .await
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "walk {phase} ({mode}) failed: {stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_str(stdout.lines().last().unwrap_or("")).unwrap_or_else(|e| panic!("{e}: {stdout}"))
}

async fn walk_as(h: &Harness, user: &str, mode: &str) {
    let (token, api) = new_user(h, user).await;
    api.root("lead", Some(grant(1, 2, 3))).await.expect("root with a grant");
    let url = format!("{}/mcp", h.endpoint);
    let first = walk(&url, &token, "first", mode, "lead").await;
    assert_eq!(first["grant"]["limits"]["breadth"], 2, "{first}");
    assert_eq!(first["grant"]["remaining"]["breadth"], 2, "{first}");
    assert_eq!(first["created"]["phase"], "READY", "{first}");
    assert!(!first["progress"].as_array().unwrap().is_empty(), "progress was reported: {first}");
    assert_eq!(first["limit"]["code"], "LIMIT_REACHED", "{first}");
    assert_eq!(first["limit"]["details"]["limit"], "breadth", "{first}");
    assert_eq!(first["wider"]["code"], "POLICY_EXCEEDS_PARENT", "{first}");
    // Nothing was created by the refusals.
    let mut tree: Vec<String> = api.tree("lead").await.into_iter().map(|s| s.name).collect();
    tree.sort();
    assert_eq!(tree, ["lead", "walk-agent", "walk-tool"]);
    // The child read the secret it was given (get_file returned it); no row, receipt or
    // log holds it.
    let secret = first["secret"].as_str().unwrap();
    assert_eq!(first["file"]["content"], secret, "{first}");
    assert_eq!(secrets::tables_holding(&h.sql().await, secret).await, Vec::<String>::new());
    assert_eq!(secrets::files_holding(&h.state.0, secret), Vec::<PathBuf>::new());

    // The user raises the limit; the same request now succeeds with no policy change.
    api.grants()
        .update_grant(api.req(pb::UpdateGrantRequest {
            sandbox: "lead".into(),
            max_breadth: Some(3),
            ..Default::default()
        }))
        .await
        .expect("raise breadth");
    let after = walk(&url, &token, "after_raise", mode, "lead").await;
    assert_eq!(after["created"]["name"], "walk-over", "{after}");
    let audit = api.audit_of("lead").await;
    assert!(audit.iter().any(|a| a.code == "LIMIT_REACHED"), "the refusal has its receipt");
}

#[tokio::test]
async fn python_sdk_walks_the_acceptance_path_from_the_host() {
    let h = Harness::process(|_| {}).await;
    walk_as(&h, "alice", "legacy").await;
    // The SDK's default: discover the 2026-07-28 revision (stateless), else fall back.
    walk_as(&h, "bob", "auto").await;
}

struct Http {
    status: u16,
    body: String,
}

/// One raw POST with curl: (extra headers, body).
async fn post(url: &str, headers: &[&str], body: &str) -> Http {
    let mut cmd = tokio::process::Command::new("curl");
    cmd.args(["-s", "-o", "-", "-w", "\n%{http_code}", "-X", "POST", url]);
    cmd.args(["-H", "content-type: application/json", "-H", "accept: application/json, text/event-stream"]);
    for h in headers {
        cmd.args(["-H", h]);
    }
    cmd.args(["--data-binary", "@-"]).stdin(Stdio::piped()).stdout(Stdio::piped());
    let mut child = cmd.spawn().expect("curl");
    use tokio::io::AsyncWriteExt;
    let mut stdin = child.stdin.take().unwrap();
    stdin.write_all(body.as_bytes()).await.unwrap();
    drop(stdin);
    let out = child.wait_with_output().await.unwrap();
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    let (body, status) = text.rsplit_once('\n').unwrap();
    Http { status: status.trim().parse().unwrap(), body: body.to_string() }
}

const INIT: &str = r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"curl","version":"1"}}}"#;

#[tokio::test]
async fn the_transport_refuses_what_its_rules_forbid() {
    let h = Harness::fake().await;
    let url = format!("{}/mcp", h.endpoint);
    let auth = format!("authorization: Bearer {}", h.admin_token);

    let ok = post(&url, &[&auth], INIT).await;
    assert_eq!(ok.status, 200, "{}", ok.body);
    assert!(ok.body.contains("openshell-gateway"), "{}", ok.body);

    let none = post(&url, &[], INIT).await;
    assert_eq!(none.status, 401, "no credential: {}", none.body);
    let bad = post(&url, &["authorization: Bearer osu_not-a-token"], INIT).await;
    assert_eq!(bad.status, 401, "unknown token: {}", bad.body);
    assert!(!bad.body.contains("osu_not-a-token"), "no token echoed: {}", bad.body);

    // A token in the URL is never read, and the request is refused outright.
    let in_url = post(&format!("{url}?access_token={}", h.admin_token), &[], INIT).await;
    assert_eq!(in_url.status, 400, "{}", in_url.body);
    let with_query = post(&format!("{url}?x=1"), &[&auth], INIT).await;
    assert_eq!(with_query.status, 400, "{}", with_query.body);

    // DNS rebinding: a Host that is not this gateway's.
    let host = post(&url, &[&auth, "host: evil.example"], INIT).await;
    assert_eq!(host.status, 403, "foreign Host: {}", host.body);
    // A browser page from anywhere.
    let origin = post(&url, &[&auth, "origin: https://evil.example"], INIT).await;
    assert_eq!(origin.status, 403, "foreign Origin: {}", origin.body);

    // Bodies are bounded (64 KiB by default).
    let big = format!(
        r#"{{"jsonrpc":"2.0","id":1,"method":"initialize","params":{{"protocolVersion":"2025-06-18","capabilities":{{}},"clientInfo":{{"name":"{}","version":"1"}}}}}}"#,
        "x".repeat(70 * 1024)
    );
    let too_big = post(&url, &[&auth], &big).await;
    assert_eq!(too_big.status, 413, "{}", too_big.body);

    // gRPC still answers on the same port.
    h.admin().await.root("still-grpc", None).await.expect("gRPC on the same listener");
}
