//! Attacks on the in-sandbox MCP door, run inside a real sandbox as a prompt-injected agent
//! would (tests/attacks/door_attacks.py, raw HTTP through the proxy): the grant's program is
//! /usr/bin/python3, and `./py`, a copy of the same interpreter in the working directory, is
//! another program to the kernel.
//!
//! - A socket the grant's program opened, then held by `./py` (handed over by SCM_RIGHTS,
//!   inherited across fork and exec, or kept across an exec in place) creates nothing, and
//!   the refusal names `./py`; taking it with pidfd_getfd is refused by seccomp.
//! - The grant's program creates over one kept-alive connection; every receipt names the
//!   program that made the call.
//! - The door answers only as `http://openshell.local/mcp` (and policy.local only as
//!   `http://policy.local`), directly or inside `CONNECT` to the name on port 80 (how Node's
//!   fetch sends any http:// request): every other spelling is a 4xx saying what it accepts.
//! - A body over the gateway's MCP limit is 413 naming the limit, logged once.
//! - Another program on a connection of its own is refused every tool (get_grant,
//!   list_children, get_sandbox, exec, stop_sandbox), naming it.

use std::path::PathBuf;
use std::time::Duration;

use openshell_e2e::inside::run_in;
use openshell_e2e::*;
use openshell_proto::v1 as pb;
use serde_json::Value;

fn repo() -> PathBuf {
    std::fs::canonicalize(std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..")).unwrap()
}

/// The attack script where sandboxes can read it (one copy per test process).
fn script() -> String {
    static STAGED: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    STAGED.get_or_init(|| sandbox_visible(&repo().join("tests/attacks"))).join("door_attacks.py").display().to_string()
}

/// The lead: granted to /usr/bin/python3, reading the script; running once this returns.
async fn lead(h: &Harness) -> Api {
    let a = h.admin().await;
    let dir = PathBuf::from(script()).parent().unwrap().to_path_buf();
    let req = pb::CreateSandboxRequest {
        name: "lead".into(),
        command: vec!["sleep".into(), "600".into()],
        policy_yaml: policy_reading(&[&dir]),
        grant: Some(pb::GrantSpec { rate: "100/s".into(), ..grant(1, 5, 5) }),
        ..Default::default()
    };
    a.sandboxes().create_sandbox(a.req(req)).await.expect("lead");
    let up =
        eventually(Duration::from_secs(30), || async { a.get("lead").await.is_ok_and(|s| s.phase == "READY") }).await;
    assert!(up, "the lead runs: {:?}", a.get("lead").await);
    a
}

/// Runs a mode of the script with the grant's program; its JSON line.
async fn attack(h: &Harness, a: &Api, mode: &[&str]) -> Value {
    let mut command = vec!["/usr/bin/python3".to_string(), script()];
    command.extend(mode.iter().map(|m| m.to_string()));
    let (code, out, err) = run_in(a, "lead", command).await;
    if code != 0 {
        let id = a.get("lead").await.unwrap().id;
        let log = std::fs::read_to_string(h.supervisor_log(&id)).unwrap_or_default();
        panic!("{mode:?} exited {code}: {out}\n{err}\nthe supervisor's log:\n{log}");
    }
    serde_json::from_str(out.lines().last().unwrap_or("")).unwrap_or_else(|e| panic!("{mode:?}: {e}: {out}\n{err}"))
}

fn python() -> String {
    std::fs::canonicalize("/usr/bin/python3").unwrap().display().to_string()
}

#[tokio::test]
async fn a_socket_that_changed_hands_creates_nothing_and_the_refusal_names_the_holder() {
    let h = Harness::process(|_| {}).await;
    let a = lead(&h).await;
    // Each mode, and what the proxy finds (a hand-off may be seen while both still hold it).
    let changed = ["changed hands", "processes hold the connection"];
    let both = ["processes hold the connection"];
    let exec = ["started another program"];
    for (mode, why) in [
        ("scm", &changed[..]),
        ("scm-both", &both),
        ("fork-exec", &changed),
        ("fork-exec-both", &both),
        ("exec", &exec),
    ] {
        let out = attack(&h, &a, &[mode]).await;
        let py = out["program"].as_str().unwrap_or_else(|| panic!("{mode}: {out}")).to_string();
        assert!(py.ends_with("/py"), "{mode}: sent by ./py: {out}");
        let r = &out["result"];
        assert_eq!(r["status"], 403, "{mode}: {out}");
        assert_eq!(r["connection"], "close", "{mode}: the connection is done: {out}");
        let refusal = &r["message"];
        assert_eq!(refusal["missing"], "identity", "{mode}: {out}");
        assert_eq!(refusal["program"], py.as_str(), "{mode}: names the program holding it: {out}");
        let reason = refusal["reason"].as_str().unwrap();
        assert!(why.iter().any(|w| reason.contains(w)) && reason.contains(&py), "{mode}: says why: {reason}");
        assert_eq!(a.tree("lead").await.len(), 1, "{mode}: nothing created");
    }
    // Taking the grant's program's socket from the side: the filter refuses (EPERM).
    let out = attack(&h, &a, &["steal"]).await;
    assert_eq!((&out["thief"]["ret"], &out["thief"]["errno"]), (&(-1).into(), &1.into()), "{out}");

    // No receipt names the grant's program for any of it; each denial names ./py.
    let audit = a.audit_of("lead").await;
    assert!(!audit.iter().any(|e| e.action == "sandbox.create_child"), "{audit:#?}");
    let sql = h.sql().await;
    let denied = eventually(Duration::from_secs(20), || async {
        count(&sql, "SELECT count(*) FROM proxy_denials WHERE host = 'openshell.local'").await >= 5
    })
    .await;
    let rows =
        sql.query("SELECT program, reason FROM proxy_denials WHERE host = 'openshell.local'", &[]).await.unwrap();
    let rows: Vec<(String, String)> = rows.iter().map(|r| (r.get(0), r.get(1))).collect();
    assert!(denied, "{rows:?}");
    assert!(rows.iter().all(|(p, _)| p.ends_with("/py")), "{rows:?}");
}

#[tokio::test]
async fn the_grant_s_program_creates_over_keep_alive_and_each_receipt_names_the_caller() {
    let h = Harness::process(|_| {}).await;
    let a = lead(&h).await;
    let out = attack(&h, &a, &["keepalive"]).await;
    for r in out["results"].as_array().unwrap() {
        assert_eq!(r["status"], 200, "{out}");
        assert_eq!(r["message"]["result"]["isError"], false, "{out}");
    }
    for name in ["ka-1", "ka-2"] {
        let child = a.get(name).await.unwrap();
        assert_eq!(child.created_by, format!("sandbox:lead program:{}", python()), "{name}");
    }
    // ./py on a connection of its own reaches the gateway, which refuses it by name.
    let out = attack(&h, &a, &["own"]).await;
    let py = out["program"].as_str().unwrap().to_string();
    let result = &out["result"]["message"]["result"];
    assert_eq!(result["isError"], true, "{out}");
    assert_eq!(result["structuredContent"]["code"], "NOT_ALLOWED", "{out}");
    assert_eq!(result["structuredContent"]["details"]["program"], py.as_str(), "{out}");
    assert_eq!(a.tree("lead").await.len(), 3, "two children and the lead");
    let mut creates: Vec<(String, String)> = a
        .audit_of("lead")
        .await
        .into_iter()
        .filter(|e| e.action == "sandbox.create_child")
        .map(|e| (e.outcome, e.actor))
        .collect();
    creates.sort();
    let by = |p: &str| format!("sandbox:lead program:{p}");
    let want =
        vec![("admitted".into(), by(&python())), ("admitted".into(), by(&python())), ("refused".into(), by(&py))];
    assert_eq!(creates, want);
}

/// Only the grant's program is answered, whatever the tool: ./py, on a connection of its own
/// (so the proxy passes it, naming it), is refused NOT_ALLOWED naming it on the read-only
/// tools, on exec and on stop, for a tool child the grant's program just exec'd in.
#[tokio::test]
async fn a_second_program_is_refused_every_tool_naming_it() {
    let h = Harness::process(|_| {}).await;
    let a = lead(&h).await;
    let out = attack(&h, &a, &["other-tools"]).await;
    assert_eq!(out["created"]["message"]["result"]["isError"], false, "{out}");
    let granted = &out["exec"]["message"]["result"];
    assert_eq!(
        (&granted["isError"], &granted["structuredContent"]["stdout"]),
        (&false.into(), &"hi\n".into()),
        "{out}"
    );
    let py = out["py"]["program"].as_str().unwrap().to_string();
    assert!(py.ends_with("/py"), "{out}");
    let results = out["py"]["results"].as_object().unwrap();
    for tool in ["get_grant", "list_children", "get_sandbox", "exec", "stop_sandbox"] {
        let r = &results[tool]["message"]["result"];
        assert_eq!(r["isError"], true, "{tool}: {out}");
        let refusal = &r["structuredContent"];
        assert_eq!(refusal["code"], "NOT_ALLOWED", "{tool}: {out}");
        assert_eq!(
            (refusal["details"]["reason"].as_str(), refusal["details"]["program"].as_str()),
            (Some("program"), Some(py.as_str())),
            "{tool}: {out}"
        );
        assert!(refusal["message"].as_str().unwrap().contains(&py), "{tool}: says which program: {out}");
    }
    assert_eq!(a.get("tc").await.unwrap().phase, "READY", "./py's stop stopped nothing");
}

#[tokio::test]
async fn the_door_and_policy_local_answer_only_as_themselves() {
    let h = Harness::process(|_| {}).await;
    let a = lead(&h).await;
    let out = attack(&h, &a, &["names"]).await;
    let cases = out["cases"].as_object().unwrap();
    for exact in ["exact", "exact_port_80", "tunnel_exact"] {
        let c = &cases[exact];
        assert_eq!(c["status"], 200, "{exact}: {c}");
        assert!(c["session"].is_string(), "{exact}: an MCP session: {c}");
    }
    for exact in ["policy_exact", "policy_tunnel_exact"] {
        assert_eq!(cases[exact]["status"], 200, "{exact}: {}", cases[exact]);
    }
    let door = "Use http://openshell.local/mcp only";
    let policy = "Use http://policy.local only";
    let mut checked = 0;
    for (name, c) in cases.iter().filter(|(n, _)| !n.contains("exact")) {
        let status = c["status"].as_u64().unwrap();
        assert!((400..500).contains(&status), "{name}: {c}");
        assert!(c["session"].is_null(), "{name}: no MCP session: {c}");
        let body: Value =
            serde_json::from_str(c["body"].as_str().unwrap()).unwrap_or_else(|e| panic!("{name}: {e}: {c}"));
        let accepts = if name.starts_with("policy") { policy } else { door };
        assert_eq!(body["detail"], accepts, "{name}: says what it accepts: {body}");
        assert!(body["reason"].as_str().is_some_and(|r| !r.is_empty()), "{name}: says why: {body}");
        if name.starts_with("policy") && (name.contains("port") || name.contains("https") || name.contains("connect")) {
            // Upstream OpenShell's answer, word for word.
            assert_eq!((status, &body["error"]), (400, &"invalid_policy_local_scheme".into()), "{name}: {body}");
        }
        checked += 1;
    }
    assert_eq!(checked, 17, "{cases:?}");
    assert_eq!(a.tree("lead").await.len(), 1);
}

#[tokio::test]
async fn a_door_body_over_the_gateway_s_limit_is_413_naming_it_and_logged_once() {
    const LIMIT: usize = 32 * 1024;
    let h = Harness::process(|o| o.mcp_max_body_bytes = LIMIT).await;
    let a = lead(&h).await;
    let out = attack(&h, &a, &["big", &LIMIT.to_string()]).await;
    for case in ["mib", "over"] {
        let r = &out[case];
        assert_eq!(r["status"], 413, "{case}: {r}");
        assert_eq!(r["message"]["max_bytes"], LIMIT, "{case}: the gateway's limit: {r}");
        assert!(r["session"].is_null(), "{r}");
    }
    assert_eq!(out["at"]["status"], 200, "a body of exactly the limit reaches the gateway: {}", out["at"]);
    assert!(out["at"]["session"].is_string(), "{}", out["at"]);
    // Each refusal is one line of the supervisor's log.
    let lead = a.get("lead").await.unwrap();
    let log = std::fs::read_to_string(h.supervisor_log(&lead.id)).unwrap_or_default();
    let lines = log.lines().filter(|l| l.contains(&format!("at most {LIMIT} bytes"))).count();
    assert_eq!(lines, 2, "{log}");
}
