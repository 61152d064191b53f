//! `env` on create through gRPC: the main command (and an exec) sees the variables its
//! creator gave, a child only its own, and a runtime name is refused naming the field; no
//! row, receipt, log, error or container configuration holds a value.
//!
//! Each test runs on the process driver and on the container driver (podman): its two cases.

use std::collections::HashMap;
use std::path::PathBuf;
use std::time::Duration;

use openshell_e2e::inside::run_in;
use openshell_e2e::*;
use openshell_proto::v1 as pb;
use rstest::rstest;

fn vars(pairs: &[(&str, &str)]) -> HashMap<String, String> {
    pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
}

fn sh(script: &str) -> Vec<String> {
    vec!["/bin/sh".into(), "-c".into(), script.into()]
}

async fn ready(api: &Api, name: &str) {
    let ok =
        eventually(Duration::from_secs(30), || async { api.get(name).await.is_ok_and(|s| s.phase == "READY") }).await;
    assert!(ok, "{name} should be READY: {:?}", api.get(name).await);
}

#[rstest]
#[case::process(Backend::Process)]
#[case::container(Backend::Container)]
#[tokio::test]
async fn the_main_command_sees_its_variables_and_no_record_holds_a_value(#[case] on: Backend) {
    let h = Harness::on(on, |_| {}).await;
    let a = h.admin().await;
    let secret = format!("s3cret-{}", uuid::Uuid::new_v4().simple());
    // A value with a newline and quotes travels intact; PATH may be the creator's.
    let req = pb::CreateSandboxRequest {
        name: "lead".into(),
        command: sh("printf '%s' \"$SECRET_TOKEN\" > seen; exec sleep 600"),
        grant: Some(grant(1, 2, 2)),
        template: on.template(None),
        env: vars(&[("SECRET_TOKEN", &secret), ("NOTE", "two\nlines \"quoted\""), ("PATH", "/nowhere:/usr/bin:/bin")]),
        ..Default::default()
    };
    a.sandboxes().create_sandbox(a.req(req)).await.expect("root with env");
    ready(&a, "lead").await;
    let (code, out, err) =
        run_in(&a, "lead", sh("printf '%s|%s|%s|%s' \"$SECRET_TOKEN\" \"$NOTE\" \"$PATH\" \"$HOME\"")).await;
    assert_eq!(code, 0, "{err}");
    let seen: Vec<&str> = out.split('|').collect();
    assert_eq!(seen[..3], [secret.as_str(), "two\nlines \"quoted\"", "/nowhere:/usr/bin:/bin"], "{out}");
    assert!(!seen[3].is_empty(), "HOME is still the runtime's: {out}");
    let (_, out, _) = run_in(&a, "lead", sh("cat seen")).await;
    assert_eq!(out, secret, "the main command itself saw it");

    // A child gets only what its creator gives it.
    let child = pb::CreateChildSandboxRequest {
        parent: "lead".into(),
        name: "child".into(),
        command: sh("exec sleep 600"),
        env: vars(&[("CHILD_ONLY", "c")]),
        ..Default::default()
    };
    a.child_req(child).await.expect("child with env");
    ready(&a, "child").await;
    let (_, out, _) = run_in(&a, "child", sh("printf '%s|%s' \"$CHILD_ONLY\" \"$SECRET_TOKEN\"")).await;
    assert_eq!(out, "c|", "the child sees its own variables, not its parent's");

    assert_eq!(secrets::tables_holding(&h.sql().await, &secret).await, Vec::<String>::new());
    assert_eq!(secrets::files_holding(&h.state.0, &secret), Vec::<PathBuf>::new());
    if on.is_container() {
        let lead = a.get("lead").await.unwrap();
        let inspect =
            std::process::Command::new("podman").args(["inspect", &format!("openshell-{}", lead.id)]).output().unwrap();
        let text = String::from_utf8_lossy(&inspect.stdout);
        assert!(inspect.status.success() && text.contains(&lead.id), "inspected: {text}");
        assert!(!text.contains(&secret), "the container's configuration holds no value");
    }
}

/// Refused at admission, before any driver: the fake one serves.
#[tokio::test]
async fn bad_variables_are_refused_naming_env_never_the_value_and_a_repeat_compares_them() {
    let h = Harness::fake().await;
    let a = h.admin().await;
    a.root("lead", Some(grant(1, 2, 2))).await.unwrap();
    let secret = format!("s3cret-{}", uuid::Uuid::new_v4().simple());
    let many: Vec<(String, String)> = (0..65).map(|i| (format!("V{i}"), secret.clone())).collect();
    let cases: Vec<(&str, HashMap<String, String>)> = vec![
        ("HOME", vars(&[("HOME", &secret)])),
        ("https_proxy", vars(&[("https_proxy", &secret)])),
        ("NODE_EXTRA_CA_CERTS", vars(&[("NODE_EXTRA_CA_CERTS", &secret)])),
        ("OPENSHELL_SANDBOX_ID", vars(&[("OPENSHELL_SANDBOX_ID", &secret)])),
        ("not a valid name", vars(&[("1BAD", &secret)])),
        ("at most 64", many.into_iter().collect()),
        ("longer than", vars(&[("BIG", &"x".repeat(40 * 1024))])),
        ("NUL", vars(&[("NUL", "a\0b")])),
    ];
    for (why, env) in cases {
        let child = pb::CreateChildSandboxRequest {
            parent: "lead".into(),
            name: "c".into(),
            command: vec!["sleep".into(), "600".into()],
            env: env.clone(),
            ..Default::default()
        };
        let s = refused(a.child_req(child).await, "INVALID_ARGUMENT");
        assert_eq!(details(&s).get("field").map(String::as_str), Some("env"), "{s:?}");
        assert!(s.message().contains(why), "{why}: {}", s.message());
        assert!(!s.message().contains(&secret), "{}", s.message());
        let root = pb::CreateSandboxRequest {
            name: "r".into(),
            command: vec!["sleep".into(), "600".into()],
            env,
            ..Default::default()
        };
        let s = refused(a.sandboxes().create_sandbox(a.req(root)).await.map(|r| r.into_inner()), "INVALID_ARGUMENT");
        assert!(s.message().contains(why) && !s.message().contains(&secret), "{}", s.message());
    }
    assert_eq!(a.tree("lead").await.len(), 1, "nothing was created");

    // A repeated request_id compares the variables too: the same ones replay, others conflict.
    let with = |value: &str| pb::CreateChildSandboxRequest {
        parent: "lead".into(),
        name: "c".into(),
        command: vec!["sleep".into(), "600".into()],
        request_id: "r1".into(),
        env: vars(&[("API_TOKEN", value)]),
        ..Default::default()
    };
    let first = a.child_req(with(&secret)).await.expect("created");
    assert!(!first.replayed);
    assert!(a.child_req(with(&secret)).await.expect("replayed").replayed);
    let other = format!("{secret}-other");
    let s = refused(a.child_req(with(&other)).await, "CONFLICT");
    assert!(!s.message().contains(&secret), "{}", s.message());
    assert!(a.audit_of("lead").await.iter().any(|e| e.code == "INVALID_ARGUMENT"), "the refusals have receipts");
    assert_eq!(secrets::tables_holding(&h.sql().await, &secret).await, Vec::<String>::new());
}
