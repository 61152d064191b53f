//! Children's work through the real process driver: exec in a running sandbox, relayed over
//! its supervisor's own work channel and run inside the sandbox's isolation, with stdout and
//! stderr apart, exit codes, stdin, timeout, output cap and cancellation; and who may.

use std::time::{Duration, Instant};

use openshell_e2e::*;
use openshell_proto::v1 as pb;
use pb::exec_input::Input;
use pb::exec_output::Output;

fn sh(script: &str) -> Vec<String> {
    vec!["/bin/sh".into(), "-c".into(), script.into()]
}

#[derive(Debug, Default)]
struct Ran {
    stdout: Vec<u8>,
    stderr: Vec<u8>,
    /// Which stream each chunk came on, in order.
    order: Vec<char>,
    exit: pb::ExecExit,
}

fn start(sandbox: &str, command: Vec<String>) -> pb::ExecStart {
    pb::ExecStart { sandbox: sandbox.into(), command, ..Default::default() }
}

/// Runs an exec to its end: as a user (ExecSandbox) or a sandbox (ExecChildSandbox).
async fn exec(api: &Api, as_sandbox: bool, start: pb::ExecStart, stdin: Option<&[u8]>) -> Result<Ran, tonic::Status> {
    let (tx, rx) = tokio::sync::mpsc::channel(8);
    let with_stdin = pb::ExecStart { stdin: stdin.is_some(), ..start };
    tx.send(pb::ExecInput { input: Some(Input::Start(with_stdin)) }).await.unwrap();
    if let Some(data) = stdin {
        tx.send(pb::ExecInput { input: Some(Input::Stdin(data.to_vec())) }).await.unwrap();
        tx.send(pb::ExecInput { input: Some(Input::StdinEof(true)) }).await.unwrap();
    }
    let req = api.req(tokio_stream::wrappers::ReceiverStream::new(rx));
    let mut out = if as_sandbox {
        api.sandboxes().exec_child_sandbox(req).await?.into_inner()
    } else {
        api.sandboxes().exec_sandbox(req).await?.into_inner()
    };
    let mut ran = Ran::default();
    while let Some(msg) = out.message().await? {
        match msg.output {
            Some(Output::Stdout(d)) => {
                ran.order.push('o');
                ran.stdout.extend(d);
            }
            Some(Output::Stderr(d)) => {
                ran.order.push('e');
                ran.stderr.extend(d);
            }
            Some(Output::Exit(x)) => {
                ran.exit = x;
                return Ok(ran);
            }
            None => {}
        }
    }
    panic!("the exec ended without an exit: {ran:?}");
}

async fn running(api: &Api, name: &str, req: pb::CreateSandboxRequest) {
    api.sandboxes().create_sandbox(api.req(pb::CreateSandboxRequest { name: name.into(), ..req })).await.unwrap();
    let up = eventually(Duration::from_secs(20), || async {
        api.get(name).await.is_ok_and(|s| s.phase == "READY" && !s.isolation.is_empty())
    })
    .await;
    assert!(up, "{name} should run: {:?}", api.get(name).await);
}

#[tokio::test]
async fn exec_streams_output_and_exit_codes_from_inside_the_sandbox() {
    let h = Harness::process(|_| {}).await;
    let a = h.admin().await;
    running(&a, "box", pb::CreateSandboxRequest { command: sh("sleep 600"), ..Default::default() }).await;

    let r = exec(&a, false, start("box", sh("echo out; sleep 0.2; echo err >&2; sleep 0.2; echo out2; exit 3")), None)
        .await
        .unwrap();
    assert_eq!(r.exit.code, 3, "{r:?}");
    assert_eq!(String::from_utf8_lossy(&r.stdout), "out\nout2\n");
    assert_eq!(String::from_utf8_lossy(&r.stderr), "err\n");
    assert_eq!(r.order, ['o', 'e', 'o'], "stdout and stderr keep their order");

    // It runs as the sandbox does: its uid, its Landlock, its process namespace.
    let r = exec(
        &a,
        false,
        start("box", sh("id -u; touch /etc/os-exec 2>/dev/null; echo $?; ls /proc | grep -c '^[0-9]'")),
        None,
    )
    .await
    .unwrap();
    let lines: Vec<String> = String::from_utf8_lossy(&r.stdout).lines().map(str::to_string).collect();
    let uid: u32 = lines[0].parse().unwrap();
    assert!(uid >= openshell_driver::DEFAULT_RANGE.first, "{lines:?}");
    assert_ne!(lines[1], "0", "wrote to /etc: {lines:?}");
    assert!(lines[2].parse::<usize>().unwrap() < 10, "sees the host's processes: {lines:?}");

    // Standard input reaches the command; without it the command reads end of file.
    let r = exec(&a, false, start("box", vec!["cat".into()]), Some(b"hello\nworld\n")).await.unwrap();
    assert_eq!(String::from_utf8_lossy(&r.stdout), "hello\nworld\n");
    let r = exec(&a, false, start("box", vec!["cat".into()]), None).await.unwrap();
    assert_eq!((r.exit.code, r.stdout.len()), (0, 0));

    // A working directory the sandbox's user may not enter is refused, not entered as root.
    let r = exec(&a, false, pb::ExecStart { workdir: "/root".into(), ..start("box", sh("ls")) }, None).await.unwrap();
    assert_eq!(r.exit.code, 127, "{r:?}");
    assert!(r.exit.error.contains("workdir /root"), "{r:?}");

    // A program that does not exist: 127 with the reason.
    let r = exec(&a, false, start("box", vec!["/nonexistent/tool".into()]), None).await.unwrap();
    assert_eq!(r.exit.code, 127);
    assert!(r.exit.error.contains("/nonexistent/tool"), "{r:?}");
}

#[tokio::test]
async fn exec_timeout_output_cap_and_cancellation_kill_the_command() {
    let h = Harness::process(|_| {}).await;
    let a = h.admin().await;
    running(&a, "box", pb::CreateSandboxRequest { command: sh("sleep 600"), ..Default::default() }).await;

    let t0 = Instant::now();
    let r = exec(&a, false, pb::ExecStart { timeout_seconds: 1, ..start("box", sh("sleep 30")) }, None).await.unwrap();
    assert!(r.exit.timed_out && r.exit.code == 137, "{r:?}");
    assert!(t0.elapsed() < Duration::from_secs(10));

    let r =
        exec(&a, false, pb::ExecStart { output_cap: 10_000, ..start("box", vec!["yes".into()]) }, None).await.unwrap();
    assert!(r.exit.output_capped, "{:?}", r.exit);
    assert_eq!(r.stdout.len(), 10_000);

    // The caller goes away: the command goes too.
    let marker = format!("os-exec-cancel-{}", std::process::id());
    let alive = || {
        std::fs::read_dir("/proc").unwrap().flatten().any(|e| {
            std::fs::read(e.path().join("cmdline")).is_ok_and(|c| c.starts_with(marker.as_bytes()))
                && !std::fs::read_to_string(e.path().join("stat")).is_ok_and(|s| s.contains(") Z "))
        })
    };
    let (tx, rx) = tokio::sync::mpsc::channel(1);
    let cmd = vec!["/bin/bash".into(), "-c".into(), format!("exec -a {marker} sleep 1000")];
    tx.send(pb::ExecInput { input: Some(Input::Start(start("box", cmd))) }).await.unwrap();
    let stream = a.sandboxes().exec_sandbox(a.req(tokio_stream::wrappers::ReceiverStream::new(rx))).await.unwrap();
    assert!(eventually(Duration::from_secs(10), || async { alive() }).await, "the command started");
    drop(stream);
    drop(tx);
    assert!(eventually(Duration::from_secs(10), || async { !alive() }).await, "the command outlived its caller");
}

#[tokio::test]
async fn only_the_parent_execs_in_its_tool_children_and_the_childs_policy_holds() {
    let h = Harness::process_recording().await;
    let a = h.admin().await;
    let lead_req =
        pb::CreateSandboxRequest { command: sh("sleep 600"), grant: Some(grant(2, 5, 5)), ..Default::default() };
    running(&a, "lead", lead_req).await;
    running(
        &a,
        "other",
        pb::CreateSandboxRequest { command: sh("sleep 600"), grant: Some(grant(2, 5, 5)), ..Default::default() },
    )
    .await;
    // A tool child that may not read /etc, an agent child, and a grandchild.
    let narrow = "version: 1\nfilesystem_policy:\n  include_workdir: true\n  read_only: [/usr, /lib, /proc]\n";
    let child = |parent: &str, name: &str, kind: pb::SandboxKind, policy: &str| pb::CreateChildSandboxRequest {
        parent: parent.into(),
        name: name.into(),
        kind: kind as i32,
        command: sh("sleep 600"),
        policy_yaml: policy.into(),
        ..Default::default()
    };
    a.child_req(child("lead", "tool", pb::SandboxKind::Tool, narrow)).await.unwrap();
    a.child_req(child("lead", "agent", pb::SandboxKind::Agent, "")).await.unwrap();
    a.child_req(child("agent", "grandchild", pb::SandboxKind::Tool, "")).await.unwrap();
    a.child_req(child("other", "others-tool", pb::SandboxKind::Tool, "")).await.unwrap();
    for name in ["tool", "agent", "grandchild", "others-tool"] {
        let up =
            eventually(Duration::from_secs(20), || async { a.get(name).await.is_ok_and(|s| s.phase == "READY") }).await;
        assert!(up, "{name}");
    }
    let lead = h.as_sandbox(&a.get("lead").await.unwrap().id, None).await;

    // The parent runs commands in its tool child, under the child's own (narrower) policy.
    let read_etc = || sh("cat /etc/hostname >/dev/null && echo read || echo refused");
    let r = exec(&lead, true, start("tool", read_etc()), None).await.unwrap();
    assert_eq!(String::from_utf8_lossy(&r.stdout).trim(), "refused", "{r:?}");
    let r = exec(&a, false, start("lead", read_etc()), None).await.unwrap();
    assert_eq!(String::from_utf8_lossy(&r.stdout).trim(), "read", "the parent itself may");

    // Everything else is refused, with a receipt.
    let refused_as = |r: Result<Ran, tonic::Status>, code: &str| refused(r, code);
    refused_as(exec(&lead, true, start("agent", sh("true")), None).await, "NOT_ALLOWED");
    refused_as(exec(&lead, true, start("grandchild", sh("true")), None).await, "NOT_ALLOWED");
    refused_as(exec(&lead, true, start("lead", sh("true")), None).await, "NOT_ALLOWED");
    refused_as(exec(&lead, true, start("others-tool", sh("true")), None).await, "NOT_FOUND");
    refused_as(exec(&lead, false, start("tool", sh("true")), None).await, "NOT_ALLOWED");
    refused_as(exec(&a, true, start("tool", sh("true")), None).await, "NOT_ALLOWED");
    let stranger = h.user("mallory").await;
    refused_as(exec(&stranger, false, start("tool", sh("true")), None).await, "NOT_FOUND");
    let receipts = a.audit_of("lead").await;
    let exec_refusals = receipts.iter().filter(|e| e.action == "sandbox.exec" && e.outcome == "refused").count();
    assert!(exec_refusals >= 3, "{receipts:?}");
}
