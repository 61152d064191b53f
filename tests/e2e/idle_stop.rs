//! Idle stop of tool children through the real process driver: the idle period is the
//! grant's, the timer lives in the database (it survives a gateway restart), an exec in
//! progress keeps the child, and the stop frees the child's breadth and total slots.

use std::time::{Duration, Instant};

use openshell_e2e::*;
use openshell_proto::v1 as pb;
use pb::exec_input::Input;
use pb::exec_output::Output;

fn grant_idle(breadth: i32, idle: u32) -> pb::GrantSpec {
    pb::GrantSpec { tool_idle_seconds: idle, ..grant(1, breadth, breadth) }
}

async fn ready(a: &Api, name: &str) {
    let up =
        eventually(Duration::from_secs(20), || async { a.get(name).await.is_ok_and(|s| s.phase == "READY") }).await;
    assert!(up, "{name} should be READY: {:?}", a.get(name).await);
}

async fn phase(a: &Api, name: &str) -> String {
    a.get(name).await.map(|s| s.phase).unwrap_or_default()
}

/// Runs `script` in `sandbox` as the user (ExecSandbox) to its end; its exit code.
async fn exec(a: &Api, sandbox: &str, script: &str) -> i32 {
    let (tx, rx) = tokio::sync::mpsc::channel(1);
    let start = pb::ExecStart {
        sandbox: sandbox.into(),
        command: vec!["/bin/sh".into(), "-c".into(), script.into()],
        ..Default::default()
    };
    tx.send(pb::ExecInput { input: Some(Input::Start(start)) }).await.unwrap();
    let req = a.req(tokio_stream::wrappers::ReceiverStream::new(rx));
    let mut out = a.sandboxes().exec_sandbox(req).await.unwrap().into_inner();
    while let Some(msg) = out.message().await.unwrap() {
        if let Some(Output::Exit(x)) = msg.output {
            drop(tx);
            return x.code;
        }
    }
    panic!("the exec ended without an exit");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_idle_tool_child_is_stopped_and_frees_its_slot_but_not_while_an_exec_runs() {
    let h = Harness::process(|_| {}).await;
    let a = h.admin().await;
    a.root("lead", Some(grant_idle(1, 3))).await.unwrap();
    ready(&a, "lead").await;
    let g = a.grants().get_grant(a.req(pb::GetGrantRequest { sandbox: "lead".into() })).await.unwrap();
    assert_eq!(g.into_inner().tool_idle_seconds, 3, "the grant shows its idle period");
    a.child("lead", "t1", true).await.unwrap();
    ready(&a, "t1").await;

    // An exec longer than the idle period keeps the child.
    let t0 = Instant::now();
    let code = {
        let a = a.clone();
        tokio::spawn(async move { exec(&a, "t1", "sleep 7; echo done").await })
    };
    // Breadth is full meanwhile.
    refused(a.child("lead", "t2", true).await, "LIMIT_REACHED");
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert_eq!(phase(&a, "t1").await, "READY", "stopped while an exec ran");
    assert_eq!(code.await.unwrap(), 0);
    let ended = Instant::now();
    assert!(ended - t0 >= Duration::from_secs(7));
    // Its timer restarts when the exec ends: not stopped before the period has passed again.
    tokio::time::sleep(Duration::from_millis(2000)).await;
    assert_eq!(phase(&a, "t1").await, "READY", "stopped before its idle period after the exec");
    let stopped = eventually(Duration::from_secs(15), || async { phase(&a, "t1").await == "STOPPED" }).await;
    assert!(stopped, "an idle tool child is stopped: {:?}", a.get("t1").await);
    let t1 = a.get("t1").await.unwrap();
    assert!(t1.phase_reason.starts_with("idle"), "{t1:?}");

    // Its slot is free: the next create succeeds.
    a.child("lead", "t2", true).await.unwrap();

    // The stop is audited with its reason, as the gateway's own act.
    let audit = a.audit_of("lead").await;
    let idle: Vec<_> = audit.iter().filter(|e| e.action == "system.stop" && e.sandbox_name == "t1").collect();
    assert_eq!(idle.len(), 1, "{audit:?}");
    let details: serde_json::Value = serde_json::from_str(&idle[0].details_json).unwrap();
    assert_eq!(details["reason"], "idle");
    assert_eq!(details["tool_idle_seconds"], 3);
    assert_eq!(idle[0].actor, "gateway");

    // Agent children and roots are never stopped for idleness.
    assert_eq!(phase(&a, "lead").await, "READY");
}

#[tokio::test]
async fn the_idle_period_is_set_and_changed_with_the_grant_and_checked() {
    let h = Harness::fake().await;
    let a = h.admin().await;
    let s = refused(
        a.root("bad", Some(pb::GrantSpec { tool_idle_seconds: 700_000, ..grant(1, 1, 1) })).await,
        "INVALID_ARGUMENT",
    );
    assert_eq!(details(&s).get("field").map(String::as_str), Some("grant.tool_idle_seconds"), "{s:?}");
    a.root("lead", Some(grant(1, 1, 1))).await.unwrap();
    let get = || async {
        a.grants().get_grant(a.req(pb::GetGrantRequest { sandbox: "lead".into() })).await.unwrap().into_inner()
    };
    assert_eq!(get().await.tool_idle_seconds, 300, "5 minutes by default");
    let up = pb::UpdateGrantRequest { sandbox: "lead".into(), tool_idle_seconds: Some(42), ..Default::default() };
    assert_eq!(a.grants().update_grant(a.req(up)).await.unwrap().into_inner().tool_idle_seconds, 42);
    for bad in [0, -5, 604_801] {
        let up = pb::UpdateGrantRequest { sandbox: "lead".into(), tool_idle_seconds: Some(bad), ..Default::default() };
        let s = refused(a.grants().update_grant(a.req(up)).await, "INVALID_ARGUMENT");
        assert!(s.message().contains("tool_idle"), "{s:?}");
    }
    assert_eq!(get().await.tool_idle_seconds, 42, "a refused change changes nothing");
    // An operator in psql is held to the same range.
    let sql = h.sql().await;
    let e = sql.execute("UPDATE grants SET tool_idle_seconds = 0", &[]).await.unwrap_err();
    assert!(format!("{e:?}").contains("grants_tool_idle_range"), "{e:?}");
    let history: i64 = count(&sql, "SELECT count(*) FROM grant_history WHERE tool_idle_seconds = 42").await;
    assert_eq!(history, 1, "the change is in the grant's history");
}

/// The real gateway binary on a fixed port (so its supervisors find the restarted one).
struct Rig {
    db: openshell_testkit::TestDb,
    state: TempDir,
    config: std::path::PathBuf,
    listen: String,
}

impl Rig {
    fn start(&self) -> GatewayProcess {
        let fast = ["--stop-grace", "2", "--reconcile-interval", "1"];
        GatewayProcess::spawn(&self.db.url, &self.state.0, &self.listen, Some(&self.config), &fast)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_idle_timer_survives_a_gateway_restart() {
    let state = TempDir::new("openshell-idle");
    let config = state.0.join("config.json");
    let rig = Rig {
        db: openshell_testkit::fresh_database().await,
        state,
        config,
        listen: format!("127.0.0.1:{}", free_port()),
    };
    let gw = rig.start();
    let a = Api::connect(&format!("http://{}", rig.listen), Some(&config_token(&rig.config))).await;
    const IDLE: i64 = 8;
    a.root("lead", Some(grant_idle(1, IDLE as u32))).await.unwrap();
    ready(&a, "lead").await;
    a.child("lead", "t", true).await.unwrap();
    ready(&a, "t").await;
    let sql = rig.db.connect().await;
    let since = |q: &'static str| {
        let sql = &sql;
        async move { sql.query_one(q, &[]).await.unwrap().get::<_, f64>(0) }
    };
    // Down for a while, well inside the idle period, then up again.
    tokio::time::sleep(Duration::from_secs(2)).await;
    gw.kill9();
    tokio::time::sleep(Duration::from_secs(3)).await;
    let _gw = rig.start();
    let restarted =
        since("SELECT extract(epoch FROM now() - last_activity)::float8 FROM sandboxes WHERE name = 't'").await;
    assert!(restarted >= 5.0, "the restart left the timer alone: idle for {restarted} s");
    let stopped = eventually(Duration::from_secs(30), || async {
        count(&sql, "SELECT count(*) FROM sandboxes WHERE name = 't' AND phase = 'STOPPED'").await == 1
    })
    .await;
    assert!(stopped, "the tool child is stopped after the restart");
    // Stopped one idle period after it became READY, not one period after the restart
    // (which came at least 5 s later).
    let after = since(
        "SELECT extract(epoch FROM a.at - s.last_activity)::float8 FROM audit_log a JOIN sandboxes s ON s.id = a.sandbox_id \
          WHERE s.name = 't' AND a.action = 'system.stop'",
    )
    .await;
    assert!(after >= IDLE as f64 && after < IDLE as f64 + 3.5, "stopped {after} s after its last activity");
    // Its slot is free.
    a.child("lead", "t2", true).await.unwrap();
}
