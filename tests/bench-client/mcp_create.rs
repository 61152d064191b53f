//! A bench client: `create_sandbox` through MCP with the official Rust SDK (rmcp's client
//! over its reqwest transport), timed per call. The same binary runs on the host (with a
//! login) and inside a sandbox (through the door, as the grant's program), so the two
//! figures differ only by the path.
//!
//!     openshell-bench-mcp URL N PREFIX [--parent NAME]    # OPENSHELL_TOKEN for a login
//!
//! Each call creates a tool child named PREFIX-i and returns at admission (`wait: false`);
//! prints one JSON object: {"micros": [...]}. Exits 1 on a refusal or a fault.

use std::time::Instant;

use rmcp::ServiceExt;
use rmcp::model::CallToolRequestParams;
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use serde_json::json;

#[tokio::main(flavor = "current_thread")]
async fn main() {
    if let Err(e) = run().await {
        println!("{}", json!({ "error": e.to_string() }));
        std::process::exit(1);
    }
}

async fn run() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (url, n, prefix) = match &args[..] {
        [url, n, prefix, ..] => (url.clone(), n.parse::<usize>()?, prefix.clone()),
        _ => anyhow::bail!("usage: openshell-bench-mcp URL N PREFIX [--parent NAME]"),
    };
    let parent = args.iter().position(|a| a == "--parent").and_then(|i| args.get(i + 1)).cloned();
    let mut config = StreamableHttpClientTransportConfig::with_uri(url);
    if let Ok(token) = std::env::var("OPENSHELL_TOKEN") {
        config = config.auth_header(token);
    }
    // reqwest reads HTTP_PROXY: inside a sandbox the door is reached through its proxy.
    let transport = StreamableHttpClientTransport::with_client(reqwest::Client::new(), config);
    let client = ().serve(transport).await?;
    client.list_all_tools().await?;
    let mut micros = Vec::with_capacity(n);
    for i in 0..n {
        let mut a = json!({
            "name": format!("{prefix}-{i}"), "kind": "tool", "command": ["sleep", "600"], "wait": false,
        });
        if let Some(p) = &parent {
            a["parent"] = json!(p);
        }
        let serde_json::Value::Object(a) = a else { unreachable!() };
        let t = Instant::now();
        let r = client.call_tool(CallToolRequestParams::new("create_sandbox").with_arguments(a)).await?;
        micros.push(t.elapsed().as_micros() as u64);
        if r.is_error == Some(true) {
            anyhow::bail!("create {i} refused: {:?}", r.structured_content);
        }
    }
    client.cancel().await?;
    println!("{}", json!({ "micros": micros }));
    Ok(())
}
