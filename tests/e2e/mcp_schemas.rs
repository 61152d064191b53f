//! The tool schemas as clients and models take them: the MCP Inspector's `--strict`
//! portability check (0 errors, 0 warnings), the Agents SDK's OpenAI strict-mode conversion
//! and google-genai's Gemini conversion of every tool, and every tool's real results and
//! refusals validated against its output schema (tests/interop/mcp_schemas.py). And what an
//! OAuth client finds: no discovery documents (404) and a 401 that says what to send.

use std::path::PathBuf;
use std::process::Stdio;

use openshell_e2e::*;

fn repo() -> PathBuf {
    std::fs::canonicalize(std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..")).unwrap()
}

/// The MCP Inspector's CLI (scripts/setup.d/45-mcp-clients.sh) under Node 22; (exit code,
/// stdout, stderr).
async fn inspector(args: &[&str]) -> (i32, String, String) {
    let node = repo().join(".deps/node-runtime/node_modules/.bin/node");
    let cli =
        repo().join(".deps/inspector/node_modules/@modelcontextprotocol/inspector/clients/launcher/build/index.js");
    assert!(cli.is_file(), "{} missing: run scripts/setup.sh", cli.display());
    let home = TempDir::new("openshell-inspector-home");
    let out = tokio::process::Command::new(node)
        .arg(cli)
        .arg("--cli")
        .args(args)
        // Its catalog and secret store go to a home of the test's own.
        .env("HOME", &home.0)
        .env("MCP_INSPECTOR_SECRET_STORE", "memory")
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
async fn the_inspector_strict_check_finds_no_portability_problem() {
    let h = Harness::fake().await;
    let auth = format!("Authorization: Bearer {}", h.admin_token);
    let url = format!("{}/mcp", h.endpoint);
    let (code, out, err) = inspector(&[&url, "--header", &auth, "--method", "tools/list", "--strict"]).await;
    assert_eq!(code, 0, "inspector --strict: {err}\n{out}");
    assert!(!err.contains("Warning") && !err.contains("Error"), "no problem reported: {err}");
    let listed: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(listed["tools"].as_array().unwrap().len(), 10, "{out}");
}

#[tokio::test]
async fn every_tool_converts_for_openai_and_gemini_and_every_result_fits_its_schema() {
    let h = Harness::process(|_| {}).await;
    let a = h.admin().await;
    a.root("lead", Some(grant(1, 2, 3))).await.expect("root with a grant");
    let out = tokio::process::Command::new(repo().join(".deps/py/bin/python"))
        .arg(repo().join("tests/interop/mcp_schemas.py"))
        .args([&format!("{}/mcp", h.endpoint), "--token-env", "OPENSHELL_TEST_TOKEN", "--parent", "lead"])
        .env("OPENSHELL_TEST_TOKEN", &h.admin_token)
        .output()
        .await
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    let found: serde_json::Value = serde_json::from_str(stdout.lines().last().unwrap_or("")).unwrap();
    assert_eq!(found["problems"], serde_json::json!([]), "{found:#}");
    let tools = found["strict"].as_object().unwrap();
    assert_eq!(tools.len(), 10, "{found:#}");
    for (name, strict) in tools {
        assert_eq!(strict, true, "{name} converts to OpenAI strict mode: {found:#}");
        assert_eq!(found["gemini"][name], true, "{name} converts to a Gemini declaration: {found:#}");
        let kinds = found["validated"][name].as_array().unwrap_or_else(|| panic!("{name} was called: {found:#}"));
        assert!(kinds.iter().any(|k| k == "result"), "{name}: a result was validated: {found:#}");
        assert!(kinds.iter().any(|k| k == "refusal"), "{name}: a refusal was validated: {found:#}");
    }
}

/// (status, lower-cased headers, body) of one request with curl.
async fn http(method: &str, url: &str, headers: &[&str]) -> (u16, String, String) {
    let mut cmd = tokio::process::Command::new("curl");
    cmd.args(["-s", "-D", "/dev/stderr", "-o", "-", "-w", "\n%{http_code}", "-X", method, url]);
    for h in headers {
        cmd.args(["-H", h]);
    }
    if method == "POST" {
        cmd.args(["--data-binary", r#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#]);
    }
    let out = cmd.output().await.unwrap();
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    let (body, status) = text.rsplit_once('\n').unwrap();
    (status.trim().parse().unwrap(), String::from_utf8_lossy(&out.stderr).to_lowercase(), body.into())
}

#[tokio::test]
async fn an_oauth_client_finds_no_discovery_documents_and_a_401_says_what_to_send() {
    let h = Harness::fake().await;
    for path in [
        "/.well-known/oauth-protected-resource",
        "/.well-known/oauth-protected-resource/mcp",
        "/.well-known/oauth-authorization-server",
        "/.well-known/oauth-authorization-server/mcp",
        "/register",
    ] {
        let (status, headers, body) = http("GET", &format!("{}{path}", h.endpoint), &[]).await;
        assert_eq!(status, 404, "{path}: {headers}{body}");
        assert!(headers.contains("content-type: application/json"), "{path}: {headers}");
        assert!(body.contains("Authorization: Bearer TOKEN"), "{path}: {body}");
    }
    // gRPC clients still get gRPC's answer for a method that does not exist.
    let (status, headers, _) =
        http("POST", &format!("{}/openshell.v1.Nothing/Here", h.endpoint), &["content-type: application/grpc"]).await;
    assert_eq!(status, 200, "{headers}");
    assert!(headers.contains("grpc-status: 12"), "{headers}");

    let mcp = format!("{}/mcp", h.endpoint);
    let json = ["content-type: application/json", "accept: application/json, text/event-stream"];
    let (status, headers, body) = http("POST", &mcp, &json).await;
    assert_eq!(status, 401, "{body}");
    assert!(
        headers.contains(r#"www-authenticate: bearer realm="openshell", error="invalid_token", error_description="no credential: send `authorization: bearer token`""#),
        "{headers}"
    );
    let bad = [json[0], json[1], "authorization: Bearer osu_not-a-token"];
    let (status, headers, _) = http("POST", &mcp, &bad).await;
    assert_eq!(status, 401);
    assert!(headers.contains("error_description=\""), "{headers}");
    assert!(!headers.contains("not-a-token"), "the challenge does not echo the credential: {headers}");

    // The Inspector, told not to start an OAuth flow, reports the gateway's message.
    let (code, out, err) = inspector(&[&mcp, "--method", "tools/list", "--stored-auth-only"]).await;
    assert_ne!(code, 0);
    assert!(format!("{out}{err}").contains("no credential: send `authorization: Bearer TOKEN`"), "{out}\n{err}");
}
