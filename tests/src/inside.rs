//! Running programs inside a sandbox as its user would (ExecSandbox), and what the MCP
//! clients there need: the official SDKs outside the checkout, at /opt/openshell-test.

use std::path::PathBuf;

use openshell_proto::v1 as pb;
use pb::exec_input::Input;
use pb::exec_output::Output;

use crate::Api;

/// Node 22 with the official TypeScript MCP SDK beside it, where sandboxes can run it
/// (scripts/setup.d/45-mcp-clients.sh). The `node` link a grant names; the kernel reports
/// the binary it points to.
pub fn sandbox_node() -> PathBuf {
    PathBuf::from("/opt/openshell-test/node-sandbox/node_modules/.bin/node")
}

/// The npm prefix holding the sandboxes' TypeScript SDK.
pub fn sandbox_node_prefix() -> PathBuf {
    PathBuf::from("/opt/openshell-test/node-sandbox")
}

/// Runs `command` inside `sandbox`; (exit code, stdout, stderr).
pub async fn run_in(api: &Api, sandbox: &str, command: Vec<String>) -> (i32, String, String) {
    run_in_with(api, sandbox, command, None).await
}

/// Runs `command` inside `sandbox` with `stdin` (then end of file) when given, else none;
/// (exit code, stdout, stderr).
pub async fn run_in_with(
    api: &Api,
    sandbox: &str,
    command: Vec<String>,
    stdin: Option<&[u8]>,
) -> (i32, String, String) {
    let (tx, rx) = tokio::sync::mpsc::channel(4);
    let start = pb::ExecStart {
        sandbox: sandbox.into(),
        command,
        timeout_seconds: 180,
        stdin: stdin.is_some(),
        ..Default::default()
    };
    tx.send(pb::ExecInput { input: Some(Input::Start(start)) }).await.unwrap();
    if let Some(bytes) = stdin {
        tx.send(pb::ExecInput { input: Some(Input::Stdin(bytes.to_vec())) }).await.unwrap();
        tx.send(pb::ExecInput { input: Some(Input::StdinEof(true)) }).await.unwrap();
    }
    let mut out = api
        .sandboxes()
        .exec_sandbox(api.req(tokio_stream::wrappers::ReceiverStream::new(rx)))
        .await
        .expect("exec")
        .into_inner();
    let (mut stdout, mut stderr) = (Vec::new(), Vec::new());
    while let Some(msg) = out.message().await.expect("exec stream") {
        match msg.output {
            Some(Output::Stdout(d)) => stdout.extend(d),
            Some(Output::Stderr(d)) => stderr.extend(d),
            Some(Output::Exit(x)) => {
                return (x.code, String::from_utf8_lossy(&stdout).into(), String::from_utf8_lossy(&stderr).into());
            }
            None => {}
        }
    }
    panic!("no exit");
}

/// The last line of a command's stdout as JSON, the command having exited 0.
pub async fn json_of(api: &Api, sandbox: &str, command: Vec<String>) -> serde_json::Value {
    let (code, out, err) = run_in(api, sandbox, command).await;
    assert_eq!(code, 0, "stdout: {out}\nstderr: {err}");
    serde_json::from_str(out.lines().last().unwrap_or("")).unwrap_or_else(|e| panic!("{e}: {out}\n{err}"))
}
