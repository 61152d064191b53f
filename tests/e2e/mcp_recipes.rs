//! The agent-framework recipes of docs/mcp-clients.md, each run exactly as written inside a
//! lead sandbox through its door, with the framework's own scripted model: pydantic-ai's
//! `MCPToolset` with `FunctionModel` (and what `tool_error_behavior` changes), and the OpenAI
//! Agents SDK's `MCPServerStreamableHttp` with its `ScriptedModel`, in strict mode.

use std::path::PathBuf;
use std::time::Duration;

use openshell_e2e::inside::run_in;
use openshell_e2e::*;
use openshell_proto::v1 as pb;

fn repo() -> PathBuf {
    std::fs::canonicalize(std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..")).unwrap()
}

/// A lead whose grant (program /usr/bin/python3) allows one child, and the examples where it
/// can read them; runs `example` there with the sandboxes' venv (the frameworks installed by
/// scripts/setup.d/45-mcp-clients.sh).
async fn run_example(h: &Harness, example: &str, args: &[&str]) -> (i32, String, String) {
    let a = h.admin().await;
    let examples = sandbox_visible(&repo().join("examples"));
    let venv = sandbox_python().parent().unwrap().parent().unwrap().to_path_buf();
    let req = pb::CreateSandboxRequest {
        name: "lead".into(),
        command: vec!["sleep".into(), "600".into()],
        policy_yaml: policy_reading(&[&venv, &examples]),
        grant: Some(grant(1, 1, 1)),
        ..Default::default()
    };
    a.sandboxes().create_sandbox(a.req(req)).await.unwrap();
    assert!(
        eventually(Duration::from_secs(20), || async { a.get("lead").await.is_ok_and(|s| s.phase == "READY") }).await
    );
    let mut command = vec![sandbox_python().display().to_string(), examples.join(example).display().to_string()];
    command.extend(args.iter().map(|s| s.to_string()));
    run_in(&a, "lead", command).await
}

#[tokio::test]
async fn pydantic_ai_delegates_through_the_door_and_sees_the_refusal() {
    let h = Harness::process(|_| {}).await;
    let (code, out, err) = run_example(&h, "pydantic_ai_lead.py", &[]).await;
    assert_eq!(code, 0, "{out}\n{err}");
    assert!(out.contains("hello from worker"), "{out}");
    // tool_error_behavior="failed": the model saw the refusal of the second child.
    assert!(out.contains("LIMIT_REACHED"), "the model saw the refusal: {out}");
    let a = h.admin().await;
    let worker = a.get("worker").await.unwrap();
    assert_eq!(worker.parent_name, "lead");
    assert!(worker.created_by.starts_with("sandbox:lead program:/usr/bin/python3"), "{}", worker.created_by);
    assert!(a.get("second").await.is_err(), "the refused child does not exist");
}

#[tokio::test]
async fn pydantic_ai_with_the_default_retry_ends_the_run_at_a_second_refusal() {
    let h = Harness::process(|_| {}).await;
    let (code, out, err) = run_example(&h, "pydantic_ai_lead.py", &["--tool-error-behavior", "retry"]).await;
    assert_eq!(code, 0, "{out}\n{err}");
    assert!(out.contains("run ended: UnexpectedModelBehavior"), "{out}\n{err}");
    let refusals = h.admin().await.audit_of("lead").await.into_iter().filter(|e| e.code == "LIMIT_REACHED").count();
    assert_eq!(refusals, 2, "the call and its one retry were refused");
}

#[tokio::test]
async fn the_openai_agents_sdk_delegates_through_the_door_in_strict_mode() {
    let h = Harness::process(|_| {}).await;
    let (code, out, err) = run_example(&h, "openai_agents_lead.py", &[]).await;
    assert_eq!(code, 0, "{out}\n{err}");
    assert!(out.contains("tools in strict mode: 10 of 10"), "{out}");
    assert!(out.contains("hello from worker in fast mode"), "{out}");
    assert!(out.contains("LIMIT_REACHED"), "the model saw the refusal: {out}");
    let worker = h.admin().await.get("worker").await.unwrap();
    assert_eq!(worker.parent_name, "lead");
    assert!(worker.created_by.contains("program:/usr/bin/python3"), "{}", worker.created_by);
}

/// Pi 0.86.1 with pi-mcp-adapter 2.36.0 (scripts/setup.d/45-mcp-clients.sh), whose node the
/// grant names by the link users write (resolved to the binary the kernel reports).
const PI_PREFIX: &str = "/opt/openshell-test/pi-sandbox";

#[tokio::test]
async fn pi_with_its_mcp_adapter_delegates_through_the_door() {
    let h = Harness::process(|_| {}).await;
    let a = h.admin().await;
    let recipe = sandbox_visible(&repo().join("examples/pi"));
    let model = sandbox_visible(&repo().join("tests/interop"));
    let prefix = std::path::Path::new(PI_PREFIX);
    let node = prefix.join("node_modules/.bin/node").display().to_string();
    let req = pb::CreateSandboxRequest {
        name: "lead".into(),
        command: vec!["sleep".into(), "600".into()],
        policy_yaml: policy_reading(&[prefix, &recipe, &model]),
        grant: Some(pb::GrantSpec { program: node.clone(), ..grant(1, 1, 1) }),
        ..Default::default()
    };
    a.sandboxes().create_sandbox(a.req(req)).await.unwrap();
    assert!(
        eventually(Duration::from_secs(20), || async { a.get("lead").await.is_ok_and(|s| s.phase == "READY") }).await
    );
    // The scripted model on the sandbox's own loopback, then the recipe as written.
    let run = format!(
        "set -e; {node} {model}/scripted_model.mjs 18080 {recipe}/script.json > model.out 2> model.err & \
         for i in $(seq 100); do grep -q listening model.out 2>/dev/null && break; sleep 0.1; done; \
         sh {recipe}/lead.sh {PI_PREFIX}",
        model = model.display(),
        recipe = recipe.display(),
    );
    let (code, out, err) = run_in(&a, "lead", vec!["/bin/sh".into(), "-c".into(), run]).await;
    assert_eq!(code, 0, "{out}\n{err}");
    assert!(out.contains("hello from worker"), "{out}\n{err}");
    assert!(!err.contains("unknown format"), "Pi's validator accepts every schema: {err}");
    let worker = a.get("worker").await.unwrap();
    assert_eq!(worker.parent_name, "lead");
    assert!(
        worker.created_by.contains("program:/opt/openshell-test/pi-sandbox/node_modules/node/bin/node"),
        "{}",
        worker.created_by
    );
}
