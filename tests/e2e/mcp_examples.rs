//! The MCP walk-throughs in examples/, run exactly as written: from the host with a login,
//! and by an agent inside a sandbox through its door.

use std::path::PathBuf;
use std::time::Duration;

use openshell_e2e::*;
use openshell_proto::v1 as pb;
use pb::exec_input::Input;
use pb::exec_output::Output;

fn repo() -> PathBuf {
    std::fs::canonicalize(std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..")).unwrap()
}

#[tokio::test]
async fn the_host_example_creates_a_child_and_runs_a_command_in_it() {
    let h = Harness::process(|_| {}).await;
    let a = h.admin().await;
    a.root("lead", Some(grant(1, 2, 2))).await.unwrap();
    let out = tokio::process::Command::new(repo().join(".deps/py/bin/python"))
        .arg(repo().join("examples/mcp_from_host.py"))
        .args([&format!("{}/mcp", h.endpoint), "lead"])
        .env("OPENSHELL_TOKEN", &h.admin_token)
        .output()
        .await
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}\n{}", String::from_utf8_lossy(&out.stderr));
    assert!(text.contains("created helper READY"), "{text}");
    assert!(text.contains("helper says Linux"), "{text}");
    assert!(text.contains("'breadth': 1"), "{text}");
}

#[tokio::test]
async fn the_agent_example_creates_its_child_through_the_door() {
    let h = Harness::process(|_| {}).await;
    let a = h.admin().await;
    // Where sandboxes can read it (the checkout may be under a /tmp they do not see).
    let examples = sandbox_visible(&repo().join("examples"));
    let policy = policy_reading(&[sandbox_python().parent().unwrap().parent().unwrap(), &examples]);
    let req = pb::CreateSandboxRequest {
        name: "lead".into(),
        command: vec!["sleep".into(), "600".into()],
        policy_yaml: policy,
        grant: Some(grant(1, 2, 2)),
        ..Default::default()
    };
    a.sandboxes().create_sandbox(a.req(req)).await.unwrap();
    assert!(
        eventually(Duration::from_secs(20), || async { a.get("lead").await.is_ok_and(|s| s.phase == "READY") }).await
    );
    let (tx, rx) = tokio::sync::mpsc::channel(1);
    let command =
        vec![sandbox_python().display().to_string(), examples.join("agent_in_sandbox.py").display().to_string()];
    tx.send(pb::ExecInput {
        input: Some(Input::Start(pb::ExecStart { sandbox: "lead".into(), command, ..Default::default() })),
    })
    .await
    .unwrap();
    let mut out =
        a.sandboxes().exec_sandbox(a.req(tokio_stream::wrappers::ReceiverStream::new(rx))).await.unwrap().into_inner();
    let (mut stdout, mut stderr, mut code) = (Vec::new(), Vec::new(), -1);
    while let Some(m) = out.message().await.unwrap() {
        match m.output {
            Some(Output::Stdout(d)) => stdout.extend(d),
            Some(Output::Stderr(d)) => stderr.extend(d),
            Some(Output::Exit(x)) => code = x.code,
            None => {}
        }
    }
    let text = String::from_utf8_lossy(&stdout);
    assert_eq!(code, 0, "{text}\n{}", String::from_utf8_lossy(&stderr));
    assert!(text.contains("may still create 2 children"), "{text}");
    assert!(text.contains("worker: READY"), "{text}");
    assert!(text.contains("hello from worker"), "{text}");
    assert_eq!(a.get("worker").await.unwrap().parent_name, "lead");
}
