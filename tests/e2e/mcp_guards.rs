//! The guards on the MCP endpoint, over raw HTTP: only a door credential (with the calling
//! program) lets a sandbox in, never its general credential, and no other caller may name a
//! program; a sandbox's tool calls meet its grant's rate, refused as a tool result with
//! LIMIT_REACHED, the rate and a retry-after.

use std::process::Stdio;

use openshell_e2e::*;
use openshell_proto::v1 as pb;

struct Http {
    status: u16,
    headers: String,
    body: String,
}

/// One raw POST with curl, keeping the response headers.
async fn post(url: &str, headers: &[String], body: &str) -> Http {
    let mut cmd = tokio::process::Command::new("curl");
    cmd.args(["-s", "-D", "/dev/stderr", "-o", "-", "-w", "\n%{http_code}", "-X", "POST", url]);
    cmd.args(["-H", "content-type: application/json", "-H", "accept: application/json, text/event-stream"]);
    for h in headers {
        cmd.args(["-H", h]);
    }
    cmd.args(["--data-binary", "@-"]).stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::piped());
    let mut child = cmd.spawn().expect("curl");
    use tokio::io::AsyncWriteExt;
    let mut stdin = child.stdin.take().unwrap();
    stdin.write_all(body.as_bytes()).await.unwrap();
    drop(stdin);
    let out = child.wait_with_output().await.unwrap();
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    let (body, status) = text.rsplit_once('\n').unwrap();
    Http {
        status: status.trim().parse().unwrap(),
        headers: String::from_utf8_lossy(&out.stderr).to_lowercase(),
        body: body.to_string(),
    }
}

const INIT: &str = r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"curl","version":"1"}}}"#;

/// An MCP session for `headers`: initialized, ready for tool calls.
async fn session(url: &str, headers: &[String]) -> Vec<String> {
    let init = post(url, headers, INIT).await;
    assert_eq!(init.status, 200, "{}", init.body);
    let id = init
        .headers
        .lines()
        .find_map(|l| l.strip_prefix("mcp-session-id:"))
        .map(|v| v.trim().to_string())
        .expect("a session id");
    let mut with = headers.to_vec();
    with.push(format!("mcp-session-id: {id}"));
    let done = post(url, &with, r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#).await;
    assert!(done.status < 300, "{}", done.body);
    with
}

/// A tool call's result object (from a JSON or an SSE response).
async fn call(url: &str, headers: &[String], id: u32, tool: &str) -> serde_json::Value {
    call_with(url, headers, id, tool, serde_json::json!({})).await
}

/// The JSON-RPC result in a tool call's response (JSON or SSE).
fn result_of(r: &Http) -> serde_json::Value {
    assert_eq!(r.status, 200, "{}", r.body);
    r.body
        .lines()
        .filter_map(|l| l.strip_prefix("data:").map(str::trim).or(Some(l)))
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .find(|v| v.get("id").is_some())
        .unwrap_or_else(|| panic!("no JSON-RPC response in {}", r.body))["result"]
        .clone()
}

/// A tool call with a credential the gateway no longer accepts: refused UNAUTHENTICATED as
/// the tool's result while the gateway reuses its verification (under a second old), or as a
/// 401 once it looks the credential up again. Either way nothing runs.
async fn refused_unauthenticated(url: &str, headers: &[String], id: u32, tool: &str, args: serde_json::Value) {
    let r = post(url, headers, &tool_call(id, tool, args)).await;
    if r.status == 401 {
        assert!(r.body.contains("invalid_token"), "{}", r.body);
        return;
    }
    let result = result_of(&r);
    assert_eq!(result["isError"], serde_json::json!(true), "{result}");
    assert_eq!(result["structuredContent"]["code"], "UNAUTHENTICATED", "{result}");
}

fn tool_call(id: u32, tool: &str, args: serde_json::Value) -> String {
    serde_json::json!({
        "jsonrpc": "2.0", "id": id, "method": "tools/call", "params": { "name": tool, "arguments": args },
    })
    .to_string()
}

#[tokio::test]
async fn only_a_door_credential_with_its_program_lets_a_sandbox_into_mcp() {
    let h = Harness::fake().await;
    let a = h.admin().await;
    let lead = a.root("lead", Some(grant(1, 5, 5))).await.unwrap();
    let url = format!("{}/mcp", h.endpoint);
    let bearer = |t: &str| format!("authorization: Bearer {t}");
    let program = format!("{}: /usr/bin/python3", openshell_gateway::PROGRAM_HEADER);

    let general = h.sandbox_credential(&lead.id);
    let r = post(&url, &[bearer(&general)], INIT).await;
    assert_eq!(r.status, 401, "a sandbox's general credential is not a door credential: {}", r.body);
    let r = post(&url, &[bearer(&general), program.clone()], INIT).await;
    assert_eq!(r.status, 400, "nor can it claim a program: {}", r.body);
    let r = post(&url, &[bearer(&h.admin_token), program.clone()], INIT).await;
    assert_eq!(r.status, 400, "a user cannot claim a program: {}", r.body);

    let door = h.as_sandbox(&lead.id, None).await.door_credential().await.unwrap().token;
    let r = post(&url, &[bearer(&door)], INIT).await;
    assert_eq!(r.status, 400, "a door call names the program: {}", r.body);
    let s = session(&url, &[bearer(&door), program]).await;
    let g = call(&url, &s, 2, "get_grant").await;
    assert_eq!(g["isError"], serde_json::json!(false), "{g}");
}

#[tokio::test]
async fn a_sandboxs_tool_calls_meet_its_grant_rate() {
    let h = Harness::fake().await;
    let a = h.admin().await;
    let spec = pb::GrantSpec { rate: "3/min".into(), ..grant(1, 5, 5) };
    let lead = a.root("lead", Some(spec)).await.unwrap();
    let url = format!("{}/mcp", h.endpoint);
    let door = h.as_sandbox(&lead.id, None).await.door_credential().await.unwrap().token;
    let s =
        session(&url, &[format!("authorization: Bearer {door}"), "x-openshell-program: /usr/bin/python3".into()]).await;
    for i in 0..3 {
        let r = call(&url, &s, 10 + i, "get_grant").await;
        assert_eq!(r["isError"], serde_json::json!(false), "call {i}: {r}");
    }
    let r = call(&url, &s, 20, "get_grant").await;
    assert_eq!(r["isError"], serde_json::json!(true), "{r}");
    let refusal = &r["structuredContent"];
    assert_eq!(refusal["code"], "LIMIT_REACHED", "{r}");
    assert_eq!(refusal["details"]["rate"], "3/min", "{r}");
    assert!(refusal["details"]["retry_after_ms"].as_u64().is_some_and(|ms| ms > 1000), "{r}");

    // A user on the host is not a sandbox: no sandbox bucket applies.
    let u = session(&url, &[format!("authorization: Bearer {}", h.admin_token)]).await;
    for i in 0..5 {
        let r = call(&url, &u, 30 + i, "list_children").await;
        assert_ne!(r["structuredContent"]["code"], "LIMIT_REACHED", "{r}");
    }
    // The rate is the grant's: raising it admits the next call.
    let req = pb::UpdateGrantRequest { sandbox: "lead".into(), rate: Some("100/s".into()), ..Default::default() };
    let g = a.grants().update_grant(a.req(req)).await.unwrap().into_inner();
    assert_eq!(g.rate, "100/s");
    tokio::time::sleep(std::time::Duration::from_millis(50)).await; // a call's worth of refill at 100/s
    let r = call(&url, &s, 40, "get_grant").await;
    assert_eq!(r["isError"], serde_json::json!(false), "{r}");
}

/// The gateway reuses a door credential it verified less than a second ago for MCP requests
/// that act on nothing, but every tool call checks it again in the SQL call that takes from
/// the sandbox's bucket: a revoked credential or a stopped sandbox is refused on the very
/// next tool call, and on any request within a second.
#[tokio::test]
async fn a_revoked_door_credential_or_a_stop_is_refused_at_the_next_tool_call() {
    let h = Harness::fake().await;
    let a = h.admin().await;
    let lead = a.root("lead", Some(grant(1, 5, 5))).await.unwrap();
    let url = format!("{}/mcp", h.endpoint);
    let program = format!("{}: /usr/bin/python3", openshell_gateway::PROGRAM_HEADER);
    let supervisor = h.as_sandbox(&lead.id, None).await;
    let with = |t: &str| vec![format!("authorization: Bearer {t}"), program.clone()];

    // Revoked by renewal (only the newest two live): the cached credential is refused at once.
    let first = supervisor.door_credential().await.unwrap().token;
    let s = session(&url, &with(&first)).await;
    let r = call(&url, &s, 2, "get_grant").await;
    assert_eq!(r["isError"], serde_json::json!(false), "{r}");
    supervisor.door_credential().await.unwrap();
    let newest = supervisor.door_credential().await.unwrap().token;
    refused_unauthenticated(&url, &s, 3, "get_grant", serde_json::json!({})).await;
    tokio::time::sleep(std::time::Duration::from_millis(1000)).await;
    let r = post(&url, &s, r#"{"jsonrpc":"2.0","id":4,"method":"tools/list"}"#).await;
    assert_eq!(r.status, 401, "within a second no request gets in: {}", r.body);

    // A stop: the live credential's next tool call is refused, and nothing was created.
    let s = session(&url, &with(&newest)).await;
    let r = call(&url, &s, 5, "list_children").await;
    assert_eq!(r["isError"], serde_json::json!(false), "{r}");
    a.sandboxes().stop_sandbox(a.req(pb::StopSandboxRequest { sandbox: "lead".into() })).await.unwrap();
    refused_unauthenticated(&url, &s, 6, "list_children", serde_json::json!({})).await;
    let create = serde_json::json!({ "kind": "tool", "command": ["sleep", "1"] });
    refused_unauthenticated(&url, &s, 7, "create_sandbox", create).await;
    let sql = h.sql().await;
    assert_eq!(count(&sql, "SELECT count(*) FROM sandboxes").await, 1, "only the lead");
    tokio::time::sleep(std::time::Duration::from_millis(1000)).await;
    let r = post(&url, &s, r#"{"jsonrpc":"2.0","id":8,"method":"tools/list"}"#).await;
    assert_eq!(r.status, 401, "within a second no request gets in: {}", r.body);
}

/// A tool call with these arguments; its result object.
async fn call_with(url: &str, headers: &[String], id: u32, tool: &str, args: serde_json::Value) -> serde_json::Value {
    result_of(&post(url, headers, &tool_call(id, tool, args)).await)
}

/// A door's create_sandbox takes its call in the SQL call that reads the parent: each create
/// costs one call of the bucket, a create past the rate or with a revoked credential is
/// refused as any other tool call is (no child, no receipt), and a create that fails before
/// the parent is read (bad arguments, a request_id) still meets the door check first.
#[tokio::test]
async fn a_door_create_takes_one_call_and_meets_the_door_check_on_every_path() {
    let h = Harness::fake().await;
    let a = h.admin().await;
    let spec = pb::GrantSpec { rate: "3/min".into(), ..grant(1, 10, 10) };
    let lead = a.root("lead", Some(spec)).await.unwrap();
    let url = format!("{}/mcp", h.endpoint);
    let program = format!("{}: /usr/bin/python3", openshell_gateway::PROGRAM_HEADER);
    let supervisor = h.as_sandbox(&lead.id, None).await;
    let with = |t: &str| vec![format!("authorization: Bearer {t}"), program.clone()];
    let sql = h.sql().await;
    let create =
        |name: &str| serde_json::json!({ "name": name, "kind": "tool", "command": ["sleep", "1"], "wait": false });
    let code = |r: &serde_json::Value| r["structuredContent"]["code"].as_str().unwrap_or("").to_string();

    let first = supervisor.door_credential().await.unwrap().token;
    let s = session(&url, &with(&first)).await;
    for (i, name) in ["c1", "c2"].iter().enumerate() {
        let r = call_with(&url, &s, 10 + i as u32, "create_sandbox", create(name)).await;
        assert_eq!(r["isError"], serde_json::json!(false), "{r}");
    }
    // Bad arguments still take a call: the third call of the minute is this refusal.
    let r = call_with(&url, &s, 12, "create_sandbox", serde_json::json!({ "kind": "bogus", "command": ["x"] })).await;
    assert_eq!(code(&r), "INVALID_ARGUMENT", "{r}");
    let r = call_with(&url, &s, 13, "create_sandbox", create("c3")).await;
    assert_eq!(code(&r), "LIMIT_REACHED", "{r}");
    assert_eq!(r["structuredContent"]["details"]["rate"], "3/min", "{r}");
    assert!(r["structuredContent"]["details"]["retry_after_ms"].as_u64().is_some_and(|ms| ms > 1000), "{r}");
    let children = "SELECT count(*) FROM sandboxes WHERE parent_id IS NOT NULL";
    assert_eq!(count(&sql, children).await, 2, "c1 and c2 only");
    let receipts = "SELECT count(*) FROM audit_log WHERE action = 'sandbox.create_child' AND outcome = 'refused' \
                    AND code IN ('LIMIT_REACHED', 'UNAUTHENTICATED')";
    assert_eq!(count(&sql, receipts).await, 0, "a door refusal writes no create receipt");

    // Room again, then the credential revoked (two newer ones): every form of create is refused
    // UNAUTHENTICATED, whether or not its arguments would have been.
    let req = pb::UpdateGrantRequest { sandbox: "lead".into(), rate: Some("100/s".into()), ..Default::default() };
    a.grants().update_grant(a.req(req)).await.unwrap();
    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    let r = call_with(&url, &s, 20, "create_sandbox", create("c4")).await;
    assert_eq!(r["isError"], serde_json::json!(false), "{r}");
    supervisor.door_credential().await.unwrap();
    supervisor.door_credential().await.unwrap();
    let mut with_id = create("c5");
    with_id["request_id"] = serde_json::json!("r-1");
    // Arguments that do not parse, and arguments that parse but the create refuses before it
    // reads the parent (an empty command).
    let unparsed = serde_json::json!({ "kind": "bogus", "command": ["x"] });
    let refused = serde_json::json!({ "kind": "tool", "command": [] });
    for (i, args) in [create("c5"), with_id, unparsed, refused].into_iter().enumerate() {
        refused_unauthenticated(&url, &s, 30 + i as u32, "create_sandbox", args).await;
    }
    assert_eq!(count(&sql, children).await, 3, "c1, c2 and c4 only");
    assert_eq!(count(&sql, receipts).await, 0);
}
