//! Policies written for upstream OpenShell run here as written: upstream's own files
//! (tests/corpus/openshell) start sandboxes whose main command runs, a policy with only
//! network rules gets upstream's baseline paths (shown by `policy get` and policy.local, and
//! on both sides of every proof), deprecated aliases come back as warnings through gRPC,
//! MCP and the CLI, and paths a sandbox cannot see are said at create and in its status.

use std::path::{Path, PathBuf};
use std::time::Duration;

use openshell_e2e::inside::run_in;
use openshell_e2e::*;
use openshell_policy::{Access, FileMode, Policy};
use openshell_proto::v1 as pb;

fn corpus() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("corpus/openshell")
}

fn corpus_file(path: &str) -> String {
    std::fs::read_to_string(corpus().join(path)).unwrap_or_else(|e| panic!("{path}: {e}"))
}

fn corpus_files() -> Vec<String> {
    fn walk(dir: &Path, root: &Path, out: &mut Vec<String>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let p = entry.unwrap().path();
            if p.is_dir() {
                walk(&p, root, out);
            } else if p.extension().is_some_and(|x| x == "yaml") {
                out.push(p.strip_prefix(root).unwrap().display().to_string());
            }
        }
    }
    let mut out = Vec::new();
    walk(&corpus(), &corpus(), &mut out);
    out.sort();
    out
}

async fn root(a: &Api, name: &str, yaml: &str, command: &[&str]) -> pb::CreateSandboxResponse {
    let req = pb::CreateSandboxRequest {
        name: name.into(),
        command: command.iter().map(|s| s.to_string()).collect(),
        policy_yaml: yaml.into(),
        grant: Some(grant(1, 4, 4)),
        ..Default::default()
    };
    a.sandboxes().create_sandbox(a.req(req)).await.unwrap_or_else(|e| panic!("{name}: {e}")).into_inner()
}

async fn child(a: &Api, parent: &str, name: &str, yaml: &str) -> Result<pb::CreateSandboxResponse, tonic::Status> {
    let req = pb::CreateChildSandboxRequest {
        parent: parent.into(),
        name: name.into(),
        command: vec!["sh".into(), "-c".into(), "exit 0".into()],
        policy_yaml: yaml.into(),
        ..Default::default()
    };
    a.child_req(req).await
}

/// Waits until the sandbox has stopped, and returns it.
async fn stopped(a: &Api, name: &str) -> pb::Sandbox {
    let done = eventually(Duration::from_secs(60), || async {
        a.get(name).await.is_ok_and(|s| matches!(s.phase.as_str(), "STOPPED" | "ERROR"))
    })
    .await;
    let s = a.get(name).await.unwrap();
    assert!(done, "{name} did not stop: {s:?}");
    s
}

async fn policy_of(a: &Api, sandbox: &str) -> Policy {
    let r = pb::policies_client::PoliciesClient::new(a.channel())
        .get_policy(a.req(pb::GetPolicyRequest { sandbox: sandbox.into() }))
        .await
        .unwrap()
        .into_inner();
    Policy::from_yaml(&r.policy_yaml).unwrap()
}

fn isolation(s: &pb::Sandbox) -> serde_json::Value {
    serde_json::from_str(&s.isolation).unwrap_or_else(|e| panic!("{e}: {:?}", s.isolation))
}

fn skipped(s: &pb::Sandbox) -> Vec<String> {
    isolation(s)["skipped"].as_array().unwrap().iter().map(|v| v.as_str().unwrap().to_string()).collect()
}

const NETWORK_ONLY: &str = "examples/policy-advisor/sandbox-policy.yaml";

#[tokio::test]
async fn a_network_only_policy_runs_sleep_with_the_baseline_paths() {
    let h = Harness::process(|_| {}).await;
    let a = h.admin().await;
    let yaml = corpus_file(NETWORK_ONLY);
    assert!(!yaml.contains("filesystem_policy"), "upstream's file has network rules only");
    root(&a, "advisor", &yaml, &["sleep", "1"]).await;
    let s = stopped(&a, "advisor").await;
    assert_eq!((s.phase.as_str(), s.exit_code), ("STOPPED", Some(0)), "{s:?}");
    // The baseline is the policy the sandbox has: shown, and what Landlock got.
    let p = policy_of(&a, "advisor").await;
    let fs = &p.filesystem_policy;
    for path in openshell_policy::baseline::READ_ONLY {
        assert!(fs.read_only.contains(&path.to_string()), "{path}: {fs:?}");
    }
    assert_eq!(fs.read_write, ["/tmp"]);
    assert!(fs.include_workdir, "no filesystem_policy: the working directory, as upstream");
    // A baseline path the host lacks is skipped at start, and the status says so.
    let absent: Vec<&str> =
        openshell_policy::baseline::READ_ONLY.iter().copied().filter(|p| !Path::new(p).exists()).collect();
    let skipped = skipped(&s);
    for p in &absent {
        assert!(skipped.contains(&p.to_string()), "{p} absent on the host: {skipped:?}");
    }
    assert_eq!(isolation(&s)["landlock"], "enforced");
}

#[tokio::test]
async fn each_corpus_policy_that_proves_within_itself_runs_its_main_command() {
    let h = Harness::process(|_| {}).await;
    let a = h.admin().await;
    let prover = openshell_prover::Prover::new(Duration::from_secs(20));
    let mut started = Vec::new();
    for (i, file) in corpus_files().into_iter().enumerate() {
        let Ok(p) = Policy::from_yaml(&corpus_file(&file)) else {
            continue; // a fragment (no `version`): the corpus test in crates/prover covers it
        };
        let stored = p.with_baseline();
        if prover.check(&openshell_prover::boundary(&stored, None), &stored) != openshell_prover::Verdict::Within {
            continue;
        }
        // A dynamically linked program needs the libraries; a policy granting less than
        // /usr/lib runs the static busybox (upstream's fixture grants only /usr/bin).
        let libs = stored.allows(&Access::File { mode: FileMode::Read, path: "/usr/lib/x86_64-linux-gnu".into() });
        let command: &[&str] =
            if libs { &["sh", "-c", "echo ran; exit 0"] } else { &["/usr/bin/busybox", "sh", "-c", "exit 0"] };
        let name = format!("c{i}");
        root(&a, &name, &corpus_file(&file), command).await;
        started.push((name, file));
    }
    assert!(started.len() >= 15, "the corpus has at least 15 policies that prove within themselves: {started:?}");
    for (name, file) in &started {
        let s = stopped(&a, name).await;
        assert_eq!((s.phase.as_str(), s.exit_code), ("STOPPED", Some(0)), "{file}: {s:?}");
    }
}

#[tokio::test]
async fn a_child_whose_parent_has_a_path_only_by_baseline_is_admitted() {
    let h = Harness::process(|_| {}).await;
    let a = h.admin().await;
    let parent = "version: 1
network_policies:
  api:
    endpoints: [{host: api.example.com, port: 443}]
    binaries: [{path: /usr/bin/curl}]
";
    root(&a, "lead", parent, &["sleep", "600"]).await;
    // The child asks for what the parent has by baseline only; it has no network rule, so
    // no baseline of its own.
    let narrower = "version: 1
filesystem_policy: {include_workdir: true, read_only: [/usr, /lib, /etc]}
";
    let c = child(&a, "lead", "reader", narrower).await.expect("admitted").sandbox.unwrap();
    assert_eq!(c.parent_name, "lead");
    // The parent's own file again: the same policy once stored.
    child(&a, "lead", "same", parent).await.expect("admitted");
    for name in ["reader", "same"] {
        let s = stopped(&a, name).await;
        assert_eq!((s.phase.as_str(), s.exit_code), ("STOPPED", Some(0)), "{s:?}");
    }
    assert_eq!(policy_of(&a, "same").await, policy_of(&a, "lead").await);
    // The baseline widens nothing else: a path the parent lacks is still refused.
    let wider = "version: 1\nfilesystem_policy: {read_only: [/usr, /srv]}\n";
    let s = refused(child(&a, "lead", "wider", wider).await, "POLICY_EXCEEDS_PARENT");
    assert!(details(&s)["counterexample"].contains("/srv"), "{:?}", details(&s));
    let s = refused(
        child(&a, "lead", "writer", "version: 1\nfilesystem_policy: {read_write: [/usr]}\n").await,
        "POLICY_EXCEEDS_PARENT",
    );
    assert!(details(&s)["counterexample"].contains("write /usr"), "{:?}", details(&s));
}

const TERMINATE: &str = "examples/local-inference/sandbox-policy.yaml";

#[tokio::test]
async fn deprecated_aliases_are_warned_about_through_grpc_mcp_and_the_cli() {
    let h = Harness::fake().await;
    let a = h.admin().await;
    let yaml = corpus_file(TERMINATE);
    let field = "policy.network_policies.nvidia_inference.endpoints[0].tls";
    let created = root(&a, "lead", &yaml, &["sleep", "600"]).await;
    assert_eq!(created.warnings.len(), 1, "{:?}", created.warnings);
    assert!(
        created.warnings[0].starts_with(&format!("{field}: `tls: terminate` is deprecated")),
        "{:?}",
        created.warnings
    );
    // A child's create says it too.
    let first = child(&a, "lead", "c1", &yaml).await.unwrap();
    assert_eq!(first.warnings, created.warnings);
    // policy set too.
    let set = pb::policies_client::PoliciesClient::new(a.channel())
        .set_policy(a.req(pb::SetPolicyRequest { sandbox: "c1".into(), policy_yaml: yaml.clone() }))
        .await
        .expect("the same file again is the same policy once stored")
        .into_inner();
    assert_eq!(set.warnings, created.warnings);

    // MCP from the host, with the official Rust SDK's client.
    use rmcp::ServiceExt;
    use rmcp::transport::StreamableHttpClientTransport;
    use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
    let config =
        StreamableHttpClientTransportConfig::with_uri(format!("{}/mcp", h.endpoint)).auth_header(h.admin_token.clone());
    let mcp = ().serve(StreamableHttpClientTransport::from_config(config)).await.expect("MCP session");
    let args = serde_json::json!({"parent": "lead", "name": "c2", "command": ["true"], "policy": yaml, "wait": false});
    let r = mcp
        .call_tool(
            rmcp::model::CallToolRequestParams::new("create_sandbox").with_arguments(args.as_object().unwrap().clone()),
        )
        .await
        .expect("tool call");
    assert_ne!(r.is_error, Some(true), "{r:?}");
    let out = r.structured_content.expect("structured result");
    assert_eq!(out["warnings"], serde_json::json!(created.warnings), "{out}");
    let plain = serde_json::json!({"parent": "lead", "name": "c3", "command": ["true"], "wait": false});
    let r = mcp
        .call_tool(
            rmcp::model::CallToolRequestParams::new("create_sandbox")
                .with_arguments(plain.as_object().unwrap().clone()),
        )
        .await
        .expect("tool call");
    assert_eq!(r.structured_content.unwrap()["warnings"], serde_json::json!([]));
    mcp.cancel().await.ok();

    // The CLI prints it on stderr; its JSON carries it too.
    let file = h.state.0.join("terminate.yaml");
    std::fs::write(&file, &yaml).unwrap();
    let out = tokio::process::Command::new(bin("openshell"))
        .args(["--endpoint", &h.endpoint, "--token", &h.admin_token, "--output", "json"])
        .args(["sandbox", "create", "--parent", "lead", "--name", "c4", "--detach", "--policy"])
        .arg(&file)
        .args(["--", "true"])
        .env_remove("OPENSHELL_CONFIG")
        .env("HOME", &h.state.0)
        .output()
        .await
        .unwrap();
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert!(stderr.contains(&format!("warning: {field}: `tls: terminate` is deprecated")), "{stderr}");
    let json: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(json["warnings"], serde_json::json!(created.warnings), "{json}");
}

#[tokio::test]
async fn a_path_in_the_private_tmp_is_warned_about_and_reported_skipped() {
    let h = Harness::process(|_| {}).await;
    let a = h.admin().await;
    // Upstream's fixture: read-only /usr/bin, read-write /tmp/cache.
    let yaml = corpus_file("crates/openshell-prover-cli/tests/fixtures/candidate-contained.yaml");
    let host_cache = Path::new("/tmp/cache");
    let created = root(&a, "cache", &yaml, &["/usr/bin/busybox", "sh", "-c", "exit 0"]).await;
    assert_eq!(created.warnings.len(), 1, "{:?}", created.warnings);
    let w = &created.warnings[0];
    assert!(w.starts_with("policy.filesystem_policy.read_write: /tmp/cache lies in the sandbox's own /tmp"), "{w}");
    let s = stopped(&a, "cache").await;
    assert_eq!((s.phase.as_str(), s.exit_code), ("STOPPED", Some(0)), "{s:?}");
    assert!(
        skipped(&s).contains(&"/tmp/cache".to_string()),
        "{:?} (host has it: {})",
        s.isolation,
        host_cache.exists()
    );
    // `sandbox get` shows it.
    let out = tokio::process::Command::new(bin("openshell"))
        .args(["--endpoint", &h.endpoint, "--token", &h.admin_token, "sandbox", "get", "cache"])
        .env_remove("OPENSHELL_CONFIG")
        .env("HOME", &h.state.0)
        .output()
        .await
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("skipped paths (absent at start, so not granted): /tmp/cache"), "{stdout}");
}

#[tokio::test]
async fn the_sandbox_sees_its_baseline_in_policy_local_and_a_set_keeps_it() {
    let h = Harness::process(|_| {}).await;
    let a = h.admin().await;
    let yaml = corpus_file(NETWORK_ONLY);
    root(&a, "lead", &yaml, &["sleep", "600"]).await;
    assert!(
        eventually(Duration::from_secs(20), || async { a.get("lead").await.is_ok_and(|s| s.phase == "READY") }).await
    );
    let current = |a: Api| async move {
        let (code, out, err) =
            run_in(&a, "lead", vec!["curl".into(), "-s".into(), "http://policy.local/v1/policy/current".into()]).await;
        assert_eq!(code, 0, "{out}\n{err}");
        serde_json::from_str::<serde_json::Value>(&out).unwrap_or_else(|e| panic!("{e}: {out}"))
    };
    let v = current(a.clone()).await;
    assert_eq!(v["policy"]["filesystem_policy"]["read_write"], serde_json::json!(["/tmp"]), "{v}");
    assert!(v["policy"]["filesystem_policy"]["read_only"].as_array().unwrap().contains(&"/usr".into()), "{v}");
    // The author's file, with one more rule: the baseline the sandbox started with stays.
    let more = format!(
        "{yaml}  more:\n    endpoints: [{{host: api.example.com, port: 443}}]\n    binaries: [{{path: /usr/bin/curl}}]\n"
    );
    let set = pb::policies_client::PoliciesClient::new(a.channel())
        .set_policy(a.req(pb::SetPolicyRequest { sandbox: "lead".into(), policy_yaml: more }))
        .await
        .expect("the filesystem the sandbox has is kept")
        .into_inner();
    assert_eq!(set.version, 2);
    let after = policy_of(&a, "lead").await;
    assert!(after.network_policies.contains_key("more"));
    assert!(eventually(Duration::from_secs(10), || async { current(a.clone()).await["version"] == 2 }).await);
    // A proposal from inside, approved: the merge keeps the baseline too.
    let body = "reason: the agent needs it\nnetwork_policies:\n  asked: {endpoints: [{host: asked.example.com, port: 443}], binaries: [{path: /usr/bin/curl}]}\n";
    let (code, out, err) = run_in(
        &a,
        "lead",
        vec![
            "curl".into(),
            "-s".into(),
            "-X".into(),
            "POST".into(),
            "--data-binary".into(),
            body.into(),
            "http://policy.local/v1/proposals".into(),
        ],
    )
    .await;
    assert_eq!(code, 0, "{out}\n{err}");
    let id = serde_json::from_str::<serde_json::Value>(&out).unwrap()["id"].as_i64().unwrap_or_else(|| panic!("{out}"));
    pb::policies_client::PoliciesClient::new(a.channel())
        .approve_proposal(a.req(pb::ApproveProposalRequest { id }))
        .await
        .expect("approved");
    let merged = policy_of(&a, "lead").await;
    assert!(merged.network_policies.contains_key("asked"));
    assert_eq!(merged.filesystem_policy, after.filesystem_policy);
    assert!(eventually(Duration::from_secs(10), || async { current(a.clone()).await["version"] == 3 }).await);
    let v = current(a.clone()).await;
    assert_eq!(v["policy"]["filesystem_policy"]["read_write"], serde_json::json!(["/tmp"]), "{v}");
    // A set that tries to change the filesystem is still refused.
    let other = pb::policies_client::PoliciesClient::new(a.channel())
        .set_policy(a.req(pb::SetPolicyRequest {
            sandbox: "lead".into(),
            policy_yaml: format!("{yaml}filesystem_policy: {{read_only: [/srv]}}\n"),
        }))
        .await;
    refused(other, "CONFLICT");
}

/// An attack from inside: the agent tries the hosts its policy names only with fields this
/// gateway cannot honour (`credential_binding`, and `credential_signing` on an enforced
/// `rest` endpoint). Each allows nothing: the proxy refuses before connecting, while the
/// same host and port with no such field passes, so the refusals are the fields'.
#[tokio::test]
async fn endpoints_with_credential_fields_allow_nothing_from_inside() {
    const SERVER: &str = r#"
import http.server
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        body = b"reached"
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def log_message(self, *a):
        pass
http.server.ThreadingHTTPServer(("0.0.0.0", 80), H).serve_forever()
"#;
    let host = openshell_testhost::TestHost::new("up", 19);
    let _server = host.spawn("python3", &["-c", SERVER]);
    let up = eventually(Duration::from_secs(10), || async {
        std::net::TcpStream::connect_timeout(&(host.ip, 80).into(), Duration::from_millis(200)).is_ok()
    })
    .await;
    assert!(up, "the test host's server did not start");
    let ip = std::net::IpAddr::V4(host.ip);
    let names = ["open.test", "bound.test", "bound-l4.test", "signed.test"];
    let h = Harness::process(|o| o.proxy_resolve = names.iter().map(|n| (n.to_string(), ip)).collect()).await;
    let a = h.admin().await;
    // Network rules only: the baseline paths run curl.
    let policy = "version: 1
network_policies:
  open:
    endpoints: [{host: open.test, port: 80}]
    binaries: [{path: /usr/bin/curl}]
  bound:
    endpoints:
      - {host: bound.test, port: 80, protocol: rest, enforcement: enforce, access: full, credential_binding: {provider: work}}
      - {host: bound-l4.test, port: 80, credential_binding: {provider: work}}
    binaries: [{path: /usr/bin/curl}]
  signed:
    endpoints:
      - {host: signed.test, port: 80, protocol: rest, enforcement: enforce, access: full, credential_signing: sigv4, signing_service: s3, signing_region: us-east-1}
    binaries: [{path: /usr/bin/curl}]
";
    let script = "for h in open bound bound-l4 signed; do \
         curl -s -o $h.txt -w '%{http_code}' -m 10 http://$h.test/x > $h.code; done; touch done; sleep 600";
    let s = root(&a, "agent", policy, &["/bin/sh", "-c", script]).await.sandbox.unwrap();
    let work = h.workdir(&s.id);
    let log = || std::fs::read_to_string(h.supervisor_log(&s.id)).unwrap_or_default();
    let done = eventually(Duration::from_secs(90), || async { work.join("done").exists() }).await;
    let listing: Vec<_> =
        std::fs::read_dir(&work).map(|d| d.flatten().map(|e| e.file_name()).collect()).unwrap_or_default();
    assert!(done, "{:?}\n{listing:?}\n{}", a.get("agent").await, log());
    let read = |f: String| std::fs::read_to_string(work.join(f)).unwrap_or_default();
    assert_eq!(read("open.code".into()).trim(), "200", "{}", log());
    assert_eq!(read("open.txt".into()), "reached");
    for h in ["bound", "bound-l4", "signed"] {
        let (code, body) = (read(format!("{h}.code")), read(format!("{h}.txt")));
        assert_eq!(code.trim(), "403", "{h}: {body}\n{}", log());
        assert!(!body.contains("reached"), "{h}: the server was reached: {body}");
    }
}
