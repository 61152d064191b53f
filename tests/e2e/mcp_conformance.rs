//! The official MCP conformance suite (`@modelcontextprotocol/conformance`) against the
//! gateway's `/mcp`, with the committed list of expected failures (each with its reason):
//! a scenario failing that is not listed, or passing that is listed, fails this test.
//! The suite sends no credentials, so a one-hop forwarder adds a user's login.

use std::path::PathBuf;
use std::process::Stdio;

use openshell_e2e::*;
use tokio::io::AsyncBufReadExt;

fn repo() -> PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

#[tokio::test]
async fn the_conformance_suite_passes_but_for_the_listed_failures() {
    let h = Harness::fake().await;
    let mut hop = tokio::process::Command::new(repo().join(".deps/py/bin/python"))
        .arg(repo().join("tests/interop/auth_hop.py"))
        .args([&h.endpoint, "OPENSHELL_TEST_TOKEN"])
        .env("OPENSHELL_TEST_TOKEN", &h.admin_token)
        .stdout(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("the forwarder starts");
    let mut port = String::new();
    tokio::io::BufReader::new(hop.stdout.take().unwrap()).read_line(&mut port).await.unwrap();
    let url = format!("http://127.0.0.1:{}/mcp", port.trim());
    let out_dir = TempDir::new("openshell-conformance");
    let node = repo().join(".deps/node-runtime/node_modules/.bin/node");
    assert!(node.is_file(), "{} missing: run scripts/setup.sh", node.display());
    let out = tokio::process::Command::new(node)
        .arg(repo().join(".deps/node/node_modules/@modelcontextprotocol/conformance/dist/index.js"))
        .args(["server", "--url", &url, "--expected-failures"])
        .arg(repo().join("tests/interop/conformance-expected-failures.yml"))
        .arg("-o")
        .arg(&out_dir.0)
        .output()
        .await
        .unwrap();
    let text = format!("{}\n{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    println!("{text}");
    assert!(out.status.success(), "conformance: unexpected failures or stale expected failures:\n{text}");
}
