//! Every policy is proved with z3 within its boundary: child <= parent <= global maximum,
//! at creation and on every later write, with a counterexample when it does not fit.

use openshell_e2e::*;
use openshell_proto::v1 as pb;

const PARENT: &str = "version: 1
filesystem_policy:
  read_only: [/usr]
  read_write: [/tmp]
network_policies:
  github_api:
    endpoints:
      - {host: api.github.com, port: 443, protocol: rest, enforcement: enforce, access: read-write}
    binaries: [{path: /usr/bin/curl}]
  tools:
    endpoints:
      - {host: tools.internal.example.com, port: 8080, protocol: mcp, enforcement: enforce}
    binaries: [{path: /usr/bin/python3}]
";

fn github(access: &str) -> String {
    format!(
        "version: 1
filesystem_policy:
  read_only: [/usr]
  read_write: [/tmp]
network_policies:
  gh:
    endpoints:
      - {{host: api.github.com, port: 443, protocol: rest, enforcement: enforce, access: {access}}}
    binaries: [{{path: /usr/bin/curl}}]
"
    )
}

async fn root_with(a: &Api, name: &str, yaml: &str) -> Result<pb::Sandbox, tonic::Status> {
    let req = pb::CreateSandboxRequest {
        name: name.into(),
        command: vec!["sleep".into(), "600".into()],
        policy_yaml: yaml.into(),
        grant: Some(grant(3, 10, 10)),
        ..Default::default()
    };
    Ok(a.sandboxes().create_sandbox(a.req(req)).await?.into_inner().sandbox.unwrap())
}

async fn child_with(a: &Api, parent: &str, name: &str, yaml: &str) -> Result<pb::Sandbox, tonic::Status> {
    let req = pb::CreateChildSandboxRequest {
        parent: parent.into(),
        name: name.into(),
        command: vec!["sleep".into(), "600".into()],
        policy_yaml: yaml.into(),
        ..Default::default()
    };
    a.child_req(req).await.map(|r| r.sandbox.unwrap())
}

async fn set_policy(a: &Api, sandbox: &str, yaml: &str) -> Result<pb::PolicyResponse, tonic::Status> {
    let req = pb::SetPolicyRequest { sandbox: sandbox.into(), policy_yaml: yaml.into() };
    Ok(openshell_proto::v1::policies_client::PoliciesClient::new(a.channel())
        .set_policy(a.req(req))
        .await?
        .into_inner())
}

#[tokio::test]
async fn a_wider_child_is_refused_at_every_depth_with_a_counterexample_and_hint() {
    let h = Harness::fake().await;
    let a = h.admin().await;
    root_with(&a, "lead", PARENT).await.unwrap();
    // Narrower (read-only) children are admitted; MCP rules in the parent block nothing.
    let ro = child_with(&a, "lead", "reader", &github("read-only")).await.unwrap();
    assert_eq!(ro.depth, 1);
    child_with(&a, "reader", "reader2", &github("read-only")).await.unwrap();

    let s = refused(child_with(&a, "lead", "wide1", &github("full")).await, "POLICY_EXCEEDS_PARENT");
    assert_eq!(s.code(), tonic::Code::FailedPrecondition);
    let d = details(&s);
    assert_eq!(d["verdict"], "exceeds");
    assert!(d["counterexample"].contains("api.github.com:443"), "{d:?}");
    assert!(d["hint"].contains("github_api"), "the hint names the boundary rule: {d:?}");

    let s = refused(child_with(&a, "reader", "wide2", &github("read-write")).await, "POLICY_EXCEEDS_PARENT");
    let d = details(&s);
    assert!(d["counterexample"].starts_with("program /usr/bin/curl -> api.github.com:443"), "{d:?}");
    assert!(!["GET", "HEAD", "OPTIONS"].iter().any(|m| d["counterexample"].contains(&format!(":443 {m} "))), "{d:?}");

    let fs = "version: 1\nfilesystem_policy:\n  read_write: [/etc]\n";
    let s = refused(child_with(&a, "lead", "wide3", fs).await, "POLICY_EXCEEDS_PARENT");
    assert!(details(&s)["counterexample"].contains("/etc"), "{:?}", details(&s));

    // The receipts carry the verdicts.
    let audit = a.audit_of("lead").await;
    let refused_verdicts: Vec<String> = audit
        .iter()
        .filter(|e| e.code == "POLICY_EXCEEDS_PARENT")
        .map(|e| {
            serde_json::from_str::<serde_json::Value>(&e.details_json).unwrap()["verdict"].as_str().unwrap().to_string()
        })
        .collect();
    assert_eq!(refused_verdicts, ["exceeds"; 3]);
    let admitted = audit.iter().find(|e| e.sandbox_name == "reader" && e.outcome == "admitted").unwrap();
    let details: serde_json::Value = serde_json::from_str(&admitted.details_json).unwrap();
    assert_eq!(details["verdict"], "within", "{admitted:?}");
    assert!(
        admitted.details_json.contains("\"verdict\": \"within\"")
            || admitted.details_json.contains("\"verdict\":\"within\""),
        "{admitted:?}"
    );
}

#[tokio::test]
async fn an_unprovable_child_is_refused_with_its_reason() {
    let h = Harness::fake().await;
    let a = h.admin().await;
    root_with(&a, "lead", PARENT).await.unwrap();
    // A child asking for an MCP endpoint: the prover cannot model it, so it refuses.
    let mcp = "version: 1
network_policies:
  tools:
    endpoints:
      - {host: tools.internal.example.com, port: 8080, protocol: mcp, enforcement: enforce}
    binaries: [{path: /usr/bin/python3}]
";
    let s = refused(child_with(&a, "lead", "m", mcp).await, "POLICY_UNPROVABLE");
    assert_eq!(details(&s)["verdict"], "unsupported");
    assert!(!details(&s)["reason"].is_empty());
}

#[tokio::test]
async fn later_writes_are_proved_too() {
    let h = Harness::fake().await;
    let a = h.admin().await;
    root_with(&a, "lead", PARENT).await.unwrap();
    let child = child_with(&a, "lead", "worker", &github("read-only")).await.unwrap();

    // Malformed or missing policies name the problem and write nothing.
    let s = refused(set_policy(&a, "worker", "version: 1\nbogus: 1\n").await, "INVALID_ARGUMENT");
    assert!(s.message().contains("bogus"), "{s:?}");
    refused(set_policy(&a, "worker", "").await, "INVALID_ARGUMENT");
    refused(set_policy(&a, &"w".repeat(500), &github("read-only")).await, "INVALID_ARGUMENT");
    // Widening beyond the parent: refused, nothing written.
    refused(set_policy(&a, "worker", &github("full")).await, "POLICY_EXCEEDS_PARENT");
    // Within the parent: a new version.
    let v = set_policy(&a, "worker", &github("read-write")).await.unwrap();
    assert_eq!(v.version, 2);
    // Static sections cannot change on a running sandbox.
    let moved = github("read-only").replace("read_write: [/tmp]", "read_write: [/tmp/x]");
    let s = refused(set_policy(&a, "worker", &moved).await, "CONFLICT");
    assert_eq!(details(&s)["field"], "policy.filesystem_policy");
    // The parent cannot narrow below a live child.
    let s = refused(set_policy(&a, "lead", &github("read-only")).await, "POLICY_EXCEEDS_PARENT");
    assert!(s.message().contains("worker"), "{s:?}");

    // The parent sandbox itself may narrow its child (through the door), not itself.
    let lead = a.get("lead").await.unwrap();
    let me = h.as_sandbox(&lead.id, Some("/usr/bin/python3")).await;
    let v = set_policy(&me, &child.name, &github("read-only")).await.unwrap();
    assert_eq!(v.version, 3);
    refused(set_policy(&me, "lead", PARENT).await, "NOT_ALLOWED");
    let wrong_program = h.as_sandbox(&lead.id, Some("/usr/bin/curl")).await;
    refused(set_policy(&wrong_program, &child.name, &github("read-only")).await, "NOT_ALLOWED");

    // Now the parent may narrow to what the child needs.
    set_policy(&a, "lead", &github("read-only")).await.unwrap();
    let history: i64 = h.sql().await.query_one("SELECT count(*) FROM sandbox_policies", &[]).await.unwrap().get(0);
    assert_eq!(history, 2 + 2 + 1, "every version is kept");
}

/// The gateway caches verdicts by the parent's policy version and the global maximum's
/// version: the same candidate proved again after either changed is proved against the new
/// boundary, never answered from the old verdict.
#[tokio::test]
async fn a_cached_verdict_never_outlives_the_policies_it_was_proved_against() {
    let h = Harness::fake().await;
    let a = h.admin().await;
    let no_network = "version: 1\nfilesystem_policy:\n  read_only: [/usr]\n  read_write: [/tmp]\n";
    async fn set_max(a: &Api, yaml: &str) {
        let req = a.req(pb::SetGlobalMaxRequest { policy_yaml: yaml.into() });
        openshell_proto::v1::policies_client::PoliciesClient::new(a.channel()).set_global_max(req).await.unwrap();
    }
    async fn delete(a: &Api, name: &str) {
        a.sandboxes().delete_sandbox(a.req(pb::DeleteSandboxRequest { sandbox: name.into() })).await.unwrap();
    }

    // The parent's version: a child admitted, then the parent narrowed below it (once the
    // child is gone), then the same child policy again.
    root_with(&a, "lead", PARENT).await.unwrap();
    child_with(&a, "lead", "first", &github("read-only")).await.unwrap();
    child_with(&a, "lead", "second", &github("read-only")).await.unwrap();
    delete(&a, "first").await;
    delete(&a, "second").await;
    set_policy(&a, "lead", no_network).await.unwrap();
    let s = refused(child_with(&a, "lead", "third", &github("read-only")).await, "POLICY_EXCEEDS_PARENT");
    assert!(details(&s)["counterexample"].contains("api.github.com"), "{:?}", details(&s));

    // The global maximum's version, for roots and for children.
    root_with(&a, "wide", &github("read-write")).await.unwrap();
    set_max(&a, &github("read-write")).await;
    root_with(&a, "root1", &github("read-only")).await.unwrap();
    child_with(&a, "wide", "child1", &github("read-only")).await.unwrap();
    set_max(&a, no_network).await;
    let s = refused(root_with(&a, "root2", &github("read-only")).await, "POLICY_EXCEEDS_PARENT");
    assert!(s.message().contains("global maximum"), "{s:?}");
    refused(child_with(&a, "wide", "child2", &github("read-only")).await, "POLICY_EXCEEDS_PARENT");
    // And back: the maximum's next version admits them again.
    set_max(&a, &github("read-write")).await;
    root_with(&a, "root3", &github("read-only")).await.unwrap();
    child_with(&a, "wide", "child3", &github("read-only")).await.unwrap();
}

#[tokio::test]
async fn the_global_maximum_bounds_roots_and_children() {
    let h = Harness::fake().await;
    let a = h.admin().await;
    root_with(&a, "before", &github("read-write")).await.unwrap();
    let max = github("read-only");
    let policies = |api: &Api| openshell_proto::v1::policies_client::PoliciesClient::new(api.channel());
    let bob = h.user("bob").await;
    refused(
        policies(&bob).set_global_max(bob.req(pb::SetGlobalMaxRequest { policy_yaml: max.clone() })).await,
        "NOT_ALLOWED",
    );
    let g = policies(&a)
        .set_global_max(a.req(pb::SetGlobalMaxRequest { policy_yaml: max.clone() }))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(g.version, 1);

    // Roots are held to it.
    let s = refused(root_with(&a, "wide-root", &github("full")).await, "POLICY_EXCEEDS_PARENT");
    assert!(s.message().contains("global maximum"), "{s:?}");
    // Rules the prover cannot model (enforced MCP) cannot be proved within it: fail closed.
    refused(root_with(&a, "mcp-root", PARENT).await, "POLICY_UNPROVABLE");
    root_with(&a, "ok-root", &github("read-only")).await.unwrap();
    // Children too, even inheriting from a parent created before the maximum.
    let s = refused(child_with(&a, "before", "inherits", "").await, "POLICY_EXCEEDS_PARENT");
    assert!(details(&s)["counterexample"].contains("api.github.com"), "{:?}", details(&s));
    child_with(&a, "before", "narrow", &github("read-only")).await.unwrap();

    let cleared = policies(&a)
        .set_global_max(a.req(pb::SetGlobalMaxRequest { policy_yaml: String::new() }))
        .await
        .unwrap()
        .into_inner();
    assert_eq!((cleared.version, cleared.policy_yaml.as_str()), (2, ""));
    child_with(&a, "before", "inherits", "").await.unwrap();
}

#[tokio::test]
async fn policy_check_cli_prints_the_verdict_with_exit_codes() {
    let dir = TempDir::new("openshell-policy");
    let write = |name: &str, text: &str| {
        let p = dir.0.join(name);
        std::fs::write(&p, text).unwrap();
        p
    };
    let parent = write("parent.yaml", PARENT);
    let narrow = write("narrow.yaml", &github("read-only"));
    let wide = write("wide.yaml", &github("full"));
    let bad = write("bad.yaml", "version: 1\nnope: 1\n");
    let mcp = write("mcp.yaml", &PARENT.replace("github_api", "x"));
    let run = |b: &std::path::Path, c: &std::path::Path| {
        let out = std::process::Command::new(bin("openshell"))
            .args(["policy", "check", "--boundary"])
            .arg(b)
            .arg("--candidate")
            .arg(c)
            .output()
            .unwrap();
        (
            out.status.code().unwrap(),
            String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr),
        )
    };
    let (code, out) = run(&parent, &narrow);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("verdict: within"));
    let (code, out) = run(&parent, &wide);
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("counterexample: program /usr/bin/curl -> api.github.com:443"), "{out}");
    assert!(out.contains("hint:"), "{out}");
    let (code, out) = run(&parent, &mcp);
    assert_eq!(code, 3, "{out}");
    let (code, out) = run(&parent, &bad);
    assert_eq!(code, 2, "{out}");
    assert!(out.contains("nope"), "{out}");
}
