//! What a user meets on the first day: the CLI draws its progress line only on a terminal
//! (never into captured output), the gateway's log has no colour codes off a terminal and is
//! one JSON object a line with `--log-format json`, and a name still held by a stopped
//! sandbox is refused CONFLICT saying why and how to free it, to the user and through the
//! door alike, but never describing a sandbox the caller may not see.

use std::process::Stdio;
use std::time::Duration;

use openshell_e2e::*;
use openshell_proto::v1 as pb;

async fn cli(h: &Harness, args: &[&str]) -> (i32, String, String) {
    let out = tokio::process::Command::new(bin("openshell"))
        .args(["--endpoint", &h.endpoint])
        .args(args)
        .env("OPENSHELL_TOKEN", &h.admin_token)
        .env_remove("OPENSHELL_CONFIG")
        .env("HOME", &h.state.0)
        .stdin(Stdio::null())
        .output()
        .await
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into(),
        String::from_utf8_lossy(&out.stderr).into(),
    )
}

#[tokio::test]
async fn the_cli_draws_no_progress_line_into_captured_output() {
    let h = Harness::process(|_| {}).await;
    let (code, out, err) = cli(&h, &["sandbox", "create", "--name", "quiet", "--", "sleep", "600"]).await;
    assert_eq!(code, 0, "{out}\n{err}");
    assert!(out.contains("READY"), "the result still says READY: {out}");
    assert!(!err.contains('\r') && !err.contains("PROVISIONING"), "no progress line off a terminal: {err:?}");
    let (code, _, err) = cli(&h, &["sandbox", "stop", "quiet"]).await;
    assert_eq!(code, 0, "{err}");
    assert!(!err.contains("deepest first"), "no progress note off a terminal: {err:?}");
}

#[tokio::test]
async fn the_gateway_log_is_json_on_request_and_never_coloured_off_a_terminal() {
    let dir = TempDir::new("openshell-log-format");
    for format in ["text", "json"] {
        let log = dir.0.join(format!("{format}.log"));
        let port = free_port();
        let mut gateway = tokio::process::Command::new(bin("openshell"))
            .args(["gateway", "start", "--log-format", format, "--driver", "null", "--listen"])
            .arg(format!("127.0.0.1:{port}"))
            .arg("--state-dir")
            .arg(dir.0.join("state"))
            .env("OPENSHELL_CONFIG", dir.0.join("config.json"))
            .env_remove("OPENSHELL_DATABASE_URL")
            .env_remove("RUST_LOG")
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        let up = eventually(Duration::from_secs(90), || async {
            std::fs::read_to_string(&log).unwrap_or_default().contains("gateway serving")
        })
        .await;
        let text = std::fs::read_to_string(&log).unwrap();
        assert!(up, "{format}: the gateway came up: {text}");
        nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(gateway.id().unwrap() as i32),
            nix::sys::signal::Signal::SIGTERM,
        )
        .unwrap();
        let _ = tokio::time::timeout(Duration::from_secs(30), gateway.wait()).await;
        let text = std::fs::read_to_string(&log).unwrap();
        assert!(!text.contains('\u{1b}'), "{format}: no ANSI codes in a file: {text:?}");
        if format == "json" {
            for line in text.lines() {
                let v: serde_json::Value =
                    serde_json::from_str(line).unwrap_or_else(|e| panic!("not one JSON object a line ({e}): {line}"));
                assert!(v["timestamp"].is_string() && v["level"].is_string() && v["target"].is_string(), "{line}");
            }
            assert!(text.contains(r#""message":"gateway serving""#), "{text}");
        } else {
            assert!(text.contains("gateway listening on"), "the notes for people: {text}");
        }
    }
}

async fn stopped_child(a: &Api, parent: &str, name: &str) {
    a.child(parent, name, true).await.expect("child");
    a.sandboxes().stop_sandbox(a.req(pb::StopSandboxRequest { sandbox: name.into() })).await.expect("stop");
    assert!(
        eventually(Duration::from_secs(20), || async { a.get(name).await.is_ok_and(|s| s.phase == "STOPPED") }).await
    );
}

#[tokio::test]
async fn a_name_held_by_a_stopped_sandbox_says_why_and_how_to_free_it() {
    let h = Harness::fake().await;
    let a = h.admin().await;
    let lead = a.root("lead", Some(grant(1, 3, 5))).await.unwrap();
    stopped_child(&a, "lead", "worker").await;

    // The user: refused CONFLICT naming the phase and `sandbox delete`.
    let s = refused(a.child("lead", "worker", true).await, "CONFLICT");
    assert!(s.message().contains("is STOPPED"), "{}", s.message());
    assert!(s.message().contains("openshell sandbox delete worker"), "{}", s.message());
    assert_eq!(details(&s).get("phase").map(String::as_str), Some("STOPPED"), "{s:?}");

    // The lead itself, as its door would call: the same explanation (worker is its child).
    let door = h.as_sandbox(&lead.id, Some("/usr/bin/python3")).await;
    let s = refused(door.child("", "worker", true).await, "CONFLICT");
    assert!(s.message().contains("is STOPPED") && s.message().contains("delete_sandbox"), "{}", s.message());

    // Once deleted, the name is free.
    a.sandboxes().delete_sandbox(a.req(pb::DeleteSandboxRequest { sandbox: "worker".into() })).await.expect("delete");
    a.child("lead", "worker", true).await.expect("the name is free again");

    // Another tree of the same user holds `elsewhere`, stopped: the lead, which may not see
    // it, is told only that the name is taken.
    a.root("other", Some(grant(1, 3, 5))).await.unwrap();
    stopped_child(&a, "other", "elsewhere").await;
    let s = refused(door.child("", "elsewhere", true).await, "CONFLICT");
    assert!(!s.message().contains("STOPPED") && !details(&s).contains_key("phase"), "{s:?}");
}
