//! The grant's program as the kernel reports it: a symlink admits what it resolves to, both
//! are shown, and a program that does not exist is refused when the grant is written.

use openshell_e2e::*;
use openshell_proto::v1 as pb;

async fn get_grant(a: &Api, root: &str) -> pb::Grant {
    a.grants().get_grant(a.req(pb::GetGrantRequest { sandbox: root.into() })).await.unwrap().into_inner()
}

#[tokio::test]
async fn a_symlinked_program_admits_what_it_resolves_to_and_nothing_else() {
    let h = Harness::fake().await;
    let a = h.admin().await;
    // A program of the test's own: bin/agent -> real/agent-1.2.
    let dir = TempDir::new("grant-program");
    std::fs::create_dir_all(dir.0.join("bin")).unwrap();
    std::fs::create_dir_all(dir.0.join("real")).unwrap();
    let real = dir.0.join("real/agent-1.2");
    std::fs::write(&real, "#!/bin/sh\n").unwrap();
    let link = dir.0.join("bin/agent");
    std::os::unix::fs::symlink("../real/agent-1.2", &link).unwrap();
    let (link, real) = (link.to_str().unwrap().to_string(), real.to_str().unwrap().to_string());

    let lead = a.root("lead", Some(pb::GrantSpec { program: link.clone(), ..grant(2, 5, 5) })).await.unwrap();
    let g = get_grant(&a, "lead").await;
    assert_eq!((g.program.as_str(), g.program_resolved.as_str()), (link.as_str(), real.as_str()));

    // The door reports the executable the kernel shows: the resolved path. Admitted, and
    // so is the path as written.
    h.as_sandbox(&lead.id, Some(&real)).await.child("", "by-kernel-path", false).await.unwrap();
    h.as_sandbox(&lead.id, Some(&link)).await.child("", "by-written-path", false).await.unwrap();
    // Any other program in the sandbox: NOT_ALLOWED naming it.
    let s = refused(h.as_sandbox(&lead.id, Some("/usr/bin/curl")).await.child("", "x", false).await, "NOT_ALLOWED");
    assert!(s.message().contains("/usr/bin/curl"), "{s:?}");
    assert_eq!(details(&s)["program"], "/usr/bin/curl");
    assert_eq!(details(&s)["reason"], "program");
    // A sibling of the target in the same folder is another program.
    let sibling = dir.0.join("real/agent-1.3");
    std::fs::write(&sibling, "").unwrap();
    refused(h.as_sandbox(&lead.id, Some(sibling.to_str().unwrap())).await.child("", "y", false).await, "NOT_ALLOWED");
    assert_eq!(a.tree("lead").await.len(), 3);

    // Re-pointing the link later does not widen the grant: it keeps what it resolved to.
    std::fs::remove_file(&link).unwrap();
    std::os::unix::fs::symlink("../real/agent-1.3", &link).unwrap();
    refused(h.as_sandbox(&lead.id, Some(sibling.to_str().unwrap())).await.child("", "z", false).await, "NOT_ALLOWED");
    // An update resolves again, and the history keeps both.
    let req = pb::UpdateGrantRequest { sandbox: "lead".into(), program: Some(link.clone()), ..Default::default() };
    let g = a.grants().update_grant(a.req(req)).await.unwrap().into_inner();
    assert_eq!(g.program_resolved, sibling.to_str().unwrap());
    h.as_sandbox(&lead.id, Some(sibling.to_str().unwrap())).await.child("", "z", false).await.unwrap();
    let sql = h.sql().await;
    let resolved: Vec<String> = sql
        .query("SELECT program_resolved FROM grant_history ORDER BY id", &[])
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(resolved, [real.clone(), sibling.to_str().unwrap().to_string()]);
}

#[tokio::test]
async fn usr_bin_python3_admits_the_interpreter_it_points_to() {
    let h = Harness::fake().await;
    let a = h.admin().await;
    let lead = a.root("lead", Some(grant(2, 5, 5))).await.unwrap();
    let interpreter = std::fs::canonicalize("/usr/bin/python3").unwrap();
    let g = get_grant(&a, "lead").await;
    assert_eq!(g.program, "/usr/bin/python3");
    assert_eq!(g.program_resolved, interpreter.to_str().unwrap());
    h.as_sandbox(&lead.id, Some(interpreter.to_str().unwrap())).await.child("", "w", false).await.unwrap();
}

#[tokio::test]
async fn a_program_that_does_not_exist_is_refused_naming_the_field_and_changes_nothing() {
    let h = Harness::fake().await;
    let a = h.admin().await;
    let missing = "/usr/bin/no-such-agent-here";
    let s = refused(
        a.root("ghost", Some(pb::GrantSpec { program: missing.into(), ..grant(1, 1, 1) })).await,
        "INVALID_ARGUMENT",
    );
    assert!(s.message().contains("grant.program") && s.message().contains(missing), "{s:?}");
    assert_eq!(details(&s)["field"], "grant.program");
    refused(a.get("ghost").await, "NOT_FOUND");

    a.root("lead", None).await.unwrap();
    let spec = pb::GrantSpec { program: missing.into(), ..grant(1, 1, 1) };
    let s = refused(
        a.grants().create_grant(a.req(pb::CreateGrantRequest { sandbox: "lead".into(), grant: Some(spec) })).await,
        "INVALID_ARGUMENT",
    );
    assert_eq!(details(&s)["field"], "grant.program");
    refused(a.grants().get_grant(a.req(pb::GetGrantRequest { sandbox: "lead".into() })).await, "NOT_FOUND");

    a.grants()
        .create_grant(a.req(pb::CreateGrantRequest { sandbox: "lead".into(), grant: Some(grant(1, 1, 1)) }))
        .await
        .unwrap();
    let req = pb::UpdateGrantRequest { sandbox: "lead".into(), program: Some("/tmp".into()), ..Default::default() };
    let s = refused(a.grants().update_grant(a.req(req)).await, "INVALID_ARGUMENT");
    assert_eq!(details(&s)["field"], "program");
    assert_eq!(get_grant(&a, "lead").await.program, "/usr/bin/python3", "unchanged");
}

#[tokio::test]
async fn grant_get_shows_both_in_the_cli_table_and_json() {
    let h = Harness::fake().await;
    let a = h.admin().await;
    a.root("lead", Some(grant(1, 1, 1))).await.unwrap();
    let interpreter = std::fs::canonicalize("/usr/bin/python3").unwrap();
    let table = cli(&h, &["grant", "get", "lead"]).await;
    assert!(table.contains("RESOLVED") && table.contains("/usr/bin/python3"), "{table}");
    assert!(table.contains(interpreter.to_str().unwrap()), "{table}");
    let json: serde_json::Value =
        serde_json::from_str(&cli(&h, &["grant", "get", "lead", "--output", "json"]).await).unwrap();
    let g = if json.is_array() { json[0].clone() } else { json };
    assert_eq!(g["program"], "/usr/bin/python3", "{g}");
    assert_eq!(g["program_resolved"], interpreter.to_str().unwrap(), "{g}");
}

/// Runs the CLI without blocking the runtime the in-process gateway serves on.
async fn cli(h: &Harness, args: &[&str]) -> String {
    let out = tokio::process::Command::new(bin("openshell"))
        .args(["--endpoint", &h.endpoint])
        .args(args)
        .env("OPENSHELL_TOKEN", &h.admin_token)
        .env_remove("OPENSHELL_CONFIG")
        .env("HOME", &h.state.0)
        .output()
        .await
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).into_owned()
}
