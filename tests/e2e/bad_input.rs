//! Bad input through gRPC and the CLI: each gets a clear error naming the field and why,
//! and changes nothing.

use tokio::process::Command;

use openshell_e2e::*;
use openshell_proto::v1 as pb;

/// Rows a refused call must not have added (the audit log records refusals, so it is
/// counted apart).
async fn footprint(h: &Harness) -> (i64, i64, i64, i64) {
    let sql = h.sql().await;
    let one = |q: &'static str| {
        let sql = &sql;
        async move { sql.query_one(q, &[]).await.unwrap().get::<_, i64>(0) }
    };
    (
        one("SELECT count(*) FROM sandboxes").await,
        one("SELECT count(*) FROM grants").await,
        one("SELECT count(*) FROM grant_history").await,
        one("SELECT count(*) FROM create_requests").await,
    )
}

#[track_caller]
fn invalid(r: Result<impl std::fmt::Debug, tonic::Status>, field: &str) {
    let s = refused(r, "INVALID_ARGUMENT");
    assert_eq!(s.code(), tonic::Code::InvalidArgument);
    assert!(s.message().contains(field), "the message names `{field}`: {}", s.message());
}

#[tokio::test]
async fn grpc_bad_input_is_refused_with_the_field_and_changes_nothing() {
    let h = Harness::fake().await;
    let a = h.admin().await;
    a.root("lead", Some(grant(1, 5, 5))).await.unwrap();
    let before = footprint(&h).await;

    let root = |name: &str, command: Vec<String>, policy: &str, g: Option<pb::GrantSpec>| pb::CreateSandboxRequest {
        name: name.into(),
        command,
        policy_yaml: policy.into(),
        grant: g,
        ..Default::default()
    };
    let cmd = || vec!["true".to_string()];
    let create = |r: pb::CreateSandboxRequest| {
        let a = a.clone();
        async move { a.sandboxes().create_sandbox(a.req(r)).await }
    };
    invalid(create(root("x", cmd(), "version: 1\nfilesystem_policy: [unclosed", None)).await, "policy");
    invalid(create(root("x", cmd(), "version: 1\nsurprise: true\n", None)).await, "surprise");
    invalid(create(root("x", cmd(), "version: 2\n", None)).await, "version");
    invalid(
        create(root(
            "x",
            cmd(),
            "version: 1\nnetwork_policies:\n  r:\n    endpoints:\n      - host: api.example.com\n        port: 70000\n",
            None,
        ))
        .await,
        "port",
    );
    invalid(create(root("x", cmd(), &"#".repeat(300 * 1024), None)).await, "policy");
    invalid(create(root("x", vec![], "", None)).await, "command");
    invalid(create(root("x", vec!["a".repeat(5000)], "", None)).await, "command");
    invalid(create(root(&"n".repeat(300), cmd(), "", None)).await, "name");
    invalid(create(root("bad name!", cmd(), "", None)).await, "name");
    invalid(create(root("x", cmd(), "", Some(pb::GrantSpec { max_depth: -1, ..grant(1, 1, 1) }))).await, "max_depth");
    invalid(
        create(root("x", cmd(), "", Some(pb::GrantSpec { max_breadth: -5, ..grant(1, 1, 1) }))).await,
        "max_breadth",
    );
    invalid(
        create(root("x", cmd(), "", Some(pb::GrantSpec { max_total: 1 << 30, ..grant(1, 1, 1) }))).await,
        "max_total",
    );
    invalid(
        create(root("x", cmd(), "", Some(pb::GrantSpec { expires: "yesterday".into(), ..grant(1, 1, 1) }))).await,
        "expires",
    );
    invalid(
        create(root("x", cmd(), "", Some(pb::GrantSpec { expires: "2001-01-01T00:00:00Z".into(), ..grant(1, 1, 1) })))
            .await,
        "expires",
    );
    invalid(
        create(root("x", cmd(), "", Some(pb::GrantSpec { program: "python3".into(), ..grant(1, 1, 1) }))).await,
        "program",
    );

    let child = |parent: &str, kind: i32, request_id: &str| pb::CreateChildSandboxRequest {
        parent: parent.into(),
        kind,
        command: cmd(),
        request_id: request_id.into(),
        ..Default::default()
    };
    invalid(a.child_req(child("lead", 7, "")).await, "kind");
    invalid(a.child_req(child("lead", 1, "has spaces")).await, "request_id");
    invalid(a.child_req(child("lead", 1, &"r".repeat(200))).await, "request_id");
    invalid(a.child_req(child("", 1, "")).await, "parent");
    invalid(a.child_req(child(&"p".repeat(1000), 1, "")).await, "parent");
    let s = refused(a.child_req(child("no-such-parent", 1, "")).await, "NOT_FOUND");
    assert!(s.message().contains("no-such-parent"), "{s:?}");

    let up = pb::UpdateGrantRequest { sandbox: "lead".into(), ..Default::default() };
    invalid(a.grants().update_grant(a.req(up)).await, "grant");
    let up = pb::UpdateGrantRequest { sandbox: "lead".into(), max_total: Some(-1), ..Default::default() };
    invalid(a.grants().update_grant(a.req(up)).await, "max_total");
    let list = pb::ListSandboxesRequest { page_size: 5000, ..Default::default() };
    invalid(a.sandboxes().list_sandboxes(a.req(list)).await, "page_size");
    let list = pb::ListSandboxesRequest { page_token: "garbage".into(), ..Default::default() };
    invalid(a.sandboxes().list_sandboxes(a.req(list)).await, "page_token");
    let audit = pb::ListAuditRequest { since: "last week".into(), ..Default::default() };
    invalid(a.audit().list_audit(a.req(audit)).await, "since");
    let user = pb::CreateUserRequest { name: "Not Valid".into(), admin: false };
    invalid(a.users().create_user(a.req(user)).await, "name");
    let g = pb::CreateGrantRequest { sandbox: "lead".into(), grant: None };
    invalid(a.grants().create_grant(a.req(g)).await, "grant");

    assert_eq!(footprint(&h).await, before, "refused calls changed nothing");
    // Policy errors carry the path of the offending field.
    let r = create(root("x", cmd(), "version: 1\nnetwork_policies:\n  gh:\n    endpoints:\n      - host: api.github.com\n        port: 443\n        bogus: 1\n", None)).await;
    let s = refused(r, "INVALID_ARGUMENT");
    assert!(s.message().contains("network_policies") && s.message().contains("bogus"), "{}", s.message());
}

#[tokio::test]
async fn pages_walk_every_sandbox_once() {
    let h = Harness::fake().await;
    let a = h.admin().await;
    for i in 0..7 {
        a.root(&format!("r{i}"), None).await.unwrap();
    }
    let mut seen = Vec::new();
    let mut token = String::new();
    loop {
        let req = pb::ListSandboxesRequest { page_size: 3, page_token: token.clone(), all: false };
        let page = a.sandboxes().list_sandboxes(a.req(req)).await.unwrap().into_inner();
        assert!(page.sandboxes.len() <= 3);
        seen.extend(page.sandboxes.into_iter().map(|s| s.name));
        if page.next_page_token.is_empty() {
            break;
        }
        token = page.next_page_token;
    }
    seen.sort();
    assert_eq!(seen, (0..7).map(|i| format!("r{i}")).collect::<Vec<_>>());
}

/// Runs the CLI without blocking the runtime the in-process gateway serves on.
async fn cli(h: &Harness, token: &str, args: &[&str]) -> (i32, String, String) {
    let out = Command::new(bin("openshell"))
        .args(["--endpoint", &h.endpoint, "--token", token])
        .args(args)
        .env_remove("OPENSHELL_CONFIG")
        .env("HOME", &h.state.0)
        .output()
        .await
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[tokio::test]
async fn cli_bad_input_gets_clear_errors_and_exit_codes() {
    let h = Harness::fake().await;
    let t = h.admin_token.clone();
    let before = footprint(&h).await;
    let bad_yaml = h.state.0.join("bad.yaml");
    std::fs::write(&bad_yaml, "version: 1\nfilesystem_policy:\n  read_only: [/usr]\n  frobnicate: yes\n").unwrap();
    let bad = bad_yaml.to_str().unwrap();

    let (code, _, err) = cli(&h, &t, &["sandbox", "create", "--name", "x", "--policy", bad, "--", "true"]).await;
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("INVALID_ARGUMENT") && err.contains("frobnicate"), "{err}");

    let (code, _, err) = cli(
        &h,
        &t,
        &[
            "sandbox",
            "create",
            "--name",
            "x",
            "--grant-max-depth",
            "-1",
            "--grant-max-breadth",
            "1",
            "--grant-max-total",
            "1",
            "--grant-expires",
            "1h",
            "--grant-program",
            "/usr/bin/python3",
            "--",
            "true",
        ],
    )
    .await;
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("max_depth"), "{err}");

    let (code, _, err) =
        cli(&h, &t, &["sandbox", "create", "--name", "x", "--grant-max-depth", "1", "--", "true"]).await;
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("--grant-expires"), "names the missing flags: {err}");

    let (code, _, err) = cli(&h, &t, &["sandbox", "create", "--name", &"n".repeat(500), "--", "true"]).await;
    assert_eq!(code, 2, "{err}");

    let (code, _, err) = cli(&h, &t, &["sandbox", "create", "--parent", "nope", "--", "true"]).await;
    assert_eq!(code, 3, "unknown parent is NOT_FOUND: {err}");

    let (code, _, err) =
        cli(&h, &t, &["sandbox", "create", "--name", "x", "--policy", "/nonexistent.yaml", "--", "true"]).await;
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("/nonexistent.yaml"), "{err}");

    let (code, out, _) = cli(&h, &t, &["--output", "json", "grant", "get", "nope"]).await;
    assert_eq!(code, 3);
    let v: serde_json::Value = serde_json::from_str(&out).expect("json error on stdout");
    assert_eq!(v["error"]["code"], "NOT_FOUND");

    let (code, _, err) = cli(&h, "osu_wrong", &["sandbox", "list"]).await;
    assert_eq!(code, 4, "{err}");

    let out = Command::new(bin("openshell"))
        .args(["--endpoint", "http://127.0.0.1:9", "--token", "x", "sandbox", "list"])
        .output()
        .await
        .unwrap();
    assert_eq!(out.status.code(), Some(8));
    assert!(String::from_utf8_lossy(&out.stderr).contains("openshell gateway start"));

    assert_eq!(footprint(&h).await, before, "refused CLI calls changed nothing");

    // And a good one, through the CLI, as JSON.
    let (code, out, err) = cli(
        &h,
        &t,
        &[
            "-o",
            "json",
            "sandbox",
            "create",
            "--detach",
            "--name",
            "lead",
            "--grant-max-depth",
            "1",
            "--grant-max-breadth",
            "1",
            "--grant-max-total",
            "1",
            "--grant-expires",
            "1h",
            "--grant-program",
            "/usr/bin/python3",
            "--",
            "true",
        ],
    )
    .await;
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["sandbox"]["name"], "lead");
    assert_eq!(v["sandbox"]["kind"], "agent");
    let (code, _, _) = cli(&h, &t, &["sandbox", "create", "--detach", "--parent", "lead", "--", "true"]).await;
    assert_eq!(code, 0);
    let (code, _, err) = cli(&h, &t, &["sandbox", "create", "--parent", "lead", "--", "true"]).await;
    assert_eq!(code, 5, "LIMIT_REACHED: {err}");
    assert!(err.contains("breadth"), "{err}");
}
