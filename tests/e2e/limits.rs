//! The grant's limits, expiry, revocation, program and request_id, exactly as docs/limits.md
//! states them, through gRPC against a real database.

use openshell_e2e::*;
use openshell_proto::v1 as pb;

#[tokio::test]
async fn depth_breadth_and_total_refuse_with_which_limit_and_values() {
    let h = Harness::fake().await;
    let a = h.admin().await;
    a.root("lead", Some(grant(2, 2, 3))).await.unwrap();
    a.child("lead", "w1", false).await.unwrap();
    a.child("lead", "w2", false).await.unwrap();

    let s = refused(a.child("lead", "w3", false).await, "LIMIT_REACHED");
    let d = details(&s);
    assert_eq!((d["limit"].as_str(), d["max"].as_str(), d["current"].as_str()), ("breadth", "2", "2"));
    assert_eq!(s.code(), tonic::Code::ResourceExhausted);

    let grandchild = a.child("w1", "w11", false).await.unwrap();
    assert_eq!(grandchild.depth, 2);
    let s = refused(a.child("w11", "w111", false).await, "LIMIT_REACHED");
    assert_eq!(details(&s)["limit"], "depth");
    assert_eq!(details(&s)["current"], "3");

    // Tools ignore depth, but still count against total: the tree now has 3.
    let s = refused(a.child("w11", "t1", true).await, "LIMIT_REACHED");
    assert_eq!(details(&s)["limit"], "total");
    assert_eq!(details(&s)["max"], "3");

    // Each refusal committed its receipt.
    let refusals: Vec<_> = a.audit_of("lead").await.into_iter().filter(|e| e.outcome == "refused").collect();
    assert_eq!(refusals.len(), 3, "{refusals:?}");
    assert!(refusals.iter().all(|r| r.code == "LIMIT_REACHED" && r.action == "sandbox.create_child"));
}

#[tokio::test]
async fn tool_children_ignore_depth_and_cannot_have_children() {
    let h = Harness::fake().await;
    let a = h.admin().await;
    a.root("lead", Some(grant(0, 5, 5))).await.unwrap();
    refused(a.child("lead", "agent", false).await, "LIMIT_REACHED");
    let tool = a.child("lead", "tool", true).await.unwrap();
    assert_eq!(tool.kind, pb::SandboxKind::Tool as i32);
    let s = refused(a.child("tool", "x", true).await, "NOT_ALLOWED");
    assert!(s.message().contains("tool"), "{s:?}");
}

#[tokio::test]
async fn stopped_children_free_their_slot_and_a_raised_limit_admits_the_next_create() {
    let h = Harness::fake().await;
    let a = h.admin().await;
    a.root("lead", Some(grant(1, 1, 10))).await.unwrap();
    a.child("lead", "w1", false).await.unwrap();
    refused(a.child("lead", "w2", false).await, "LIMIT_REACHED");

    a.sandboxes().stop_sandbox(a.req(pb::StopSandboxRequest { sandbox: "w1".into() })).await.unwrap();
    a.child("lead", "w2", false).await.unwrap();
    refused(a.child("lead", "w3", false).await, "LIMIT_REACHED");

    let req = pb::UpdateGrantRequest { sandbox: "lead".into(), max_breadth: Some(2), ..Default::default() };
    let g = a.grants().update_grant(a.req(req)).await.unwrap().into_inner();
    assert_eq!(g.max_breadth, 2);
    a.child("lead", "w3", false).await.unwrap();
}

#[tokio::test]
async fn no_grant_revoked_and_expired_grants_refuse() {
    let h = Harness::fake().await;
    let a = h.admin().await;
    a.root("bare", None).await.unwrap();
    let s = refused(a.child("bare", "x", false).await, "NOT_ALLOWED");
    assert_eq!(details(&s)["reason"], "no_grant");
    assert_eq!(s.code(), tonic::Code::PermissionDenied);

    a.root("lead", Some(grant(1, 5, 5))).await.unwrap();
    a.child("lead", "ok", false).await.unwrap();
    let g =
        a.grants().revoke_grant(a.req(pb::RevokeGrantRequest { sandbox: "lead".into() })).await.unwrap().into_inner();
    assert_eq!(g.state, "revoked");
    let s = refused(a.child("lead", "x", false).await, "NOT_ALLOWED");
    assert_eq!(details(&s)["reason"], "revoked");

    // A new grant replaces the revoked one; history keeps both.
    let req = pb::CreateGrantRequest { sandbox: "lead".into(), grant: Some(grant(1, 5, 5)) };
    a.grants().create_grant(a.req(req.clone())).await.unwrap();
    a.child("lead", "again", false).await.unwrap();
    refused(a.grants().create_grant(a.req(req)).await, "CONFLICT");

    // Expire it in the database (as time would), then it refuses, and a new one replaces it.
    h.sql()
        .await
        .execute("UPDATE grants SET expires_at = now() - interval '1 second' WHERE ended_at IS NULL", &[])
        .await
        .unwrap();
    let s = refused(a.child("lead", "late", false).await, "NOT_ALLOWED");
    assert_eq!(details(&s)["reason"], "expired");
    let g = a.grants().get_grant(a.req(pb::GetGrantRequest { sandbox: "lead".into() })).await.unwrap().into_inner();
    assert_eq!(g.state, "expired");
    let req = pb::CreateGrantRequest { sandbox: "lead".into(), grant: Some(grant(1, 5, 5)) };
    a.grants().create_grant(a.req(req)).await.unwrap();
    a.child("lead", "late", false).await.unwrap();

    let history =
        a.grants().list_grants(a.req(pb::ListGrantsRequest { sandbox: "lead".into() })).await.unwrap().into_inner();
    let states: Vec<_> = history.grants.iter().map(|g| g.state.as_str()).collect();
    assert_eq!(states, ["live", "replaced", "revoked"]);
}

#[tokio::test]
async fn the_program_check_applies_to_calls_through_the_in_sandbox_door() {
    let h = Harness::fake().await;
    let a = h.admin().await;
    let lead = a.root("lead", Some(grant(2, 5, 5))).await.unwrap();

    let wrong = h.as_sandbox(&lead.id, Some("/usr/bin/curl")).await;
    let s = refused(wrong.child("", "x", false).await, "NOT_ALLOWED");
    assert_eq!(details(&s)["reason"], "program");
    let unknown = h.as_sandbox(&lead.id, None).await;
    refused(unknown.child("", "x", false).await, "NOT_ALLOWED");

    let right = h.as_sandbox(&lead.id, Some("/usr/bin/python3")).await;
    let child = right.child("", "worker", false).await.unwrap();
    assert_eq!(child.parent_name, "lead");
    assert_eq!(child.created_by, "sandbox:lead program:/usr/bin/python3");

    // A grant update changes the allowed program from the next call.
    let req =
        pb::UpdateGrantRequest { sandbox: "lead".into(), program: Some("/usr/bin/curl".into()), ..Default::default() };
    a.grants().update_grant(a.req(req)).await.unwrap();
    refused(right.child("", "y", false).await, "NOT_ALLOWED");
    wrong.child("", "y", false).await.unwrap();
}

#[tokio::test]
async fn a_sandbox_creates_only_under_itself_and_a_user_meets_the_same_grant() {
    let h = Harness::fake().await;
    let a = h.admin().await;
    let lead = a.root("lead", Some(grant(2, 1, 5))).await.unwrap();
    a.root("other", Some(grant(2, 5, 5))).await.unwrap();
    let me = h.as_sandbox(&lead.id, Some("/usr/bin/python3")).await;
    let s = refused(me.child("other", "x", false).await, "NOT_ALLOWED");
    assert!(s.message().contains("under itself"), "{s:?}");

    // The user on the host is held to the same breadth as the sandbox.
    a.child("lead", "by-user", false).await.unwrap();
    refused(me.child("", "by-sandbox", false).await, "LIMIT_REACHED");
}

#[tokio::test]
async fn request_id_repeats_return_the_first_result_and_other_arguments_conflict() {
    let h = Harness::fake().await;
    let a = h.admin().await;
    a.root("lead", Some(grant(1, 1, 1))).await.unwrap();
    let req = pb::CreateChildSandboxRequest {
        parent: "lead".into(),
        name: "w".into(),
        command: vec!["sleep".into(), "1".into()],
        request_id: "r-1".into(),
        ..Default::default()
    };
    let first = a.child_req(req.clone()).await.unwrap();
    assert!(!first.replayed);
    // The limit is now reached, but a repeat still answers with the first result.
    let again = a.child_req(req.clone()).await.unwrap();
    assert!(again.replayed);
    assert_eq!(again.sandbox.unwrap().id, first.sandbox.unwrap().id);
    let other = pb::CreateChildSandboxRequest { command: vec!["sleep".into(), "2".into()], ..req.clone() };
    let s = refused(a.child_req(other).await, "CONFLICT");
    assert_eq!(details(&s)["field"], "request_id");
    assert_eq!(a.tree("lead").await.len(), 2);

    // Request ids are per caller: another user reusing it is not a repeat.
    let bob = h.user("bob").await;
    bob.root("bob-lead", Some(grant(1, 1, 1))).await.unwrap();
    let bobs = bob.child_req(pb::CreateChildSandboxRequest { parent: "bob-lead".into(), ..req }).await.unwrap();
    assert!(!bobs.replayed);
}

#[tokio::test]
async fn refusals_are_not_remembered_so_a_retry_after_a_raise_succeeds() {
    let h = Harness::fake().await;
    let a = h.admin().await;
    a.root("lead", Some(grant(1, 0, 5))).await.unwrap();
    let req = pb::CreateChildSandboxRequest {
        parent: "lead".into(),
        command: vec!["true".into()],
        request_id: "retry-me".into(),
        ..Default::default()
    };
    refused(a.child_req(req.clone()).await, "LIMIT_REACHED");
    let up = pb::UpdateGrantRequest { sandbox: "lead".into(), max_breadth: Some(1), ..Default::default() };
    a.grants().update_grant(a.req(up)).await.unwrap();
    let r = a.child_req(req).await.unwrap();
    assert!(!r.replayed);
}

#[tokio::test]
async fn children_inherit_the_parent_policy_and_a_wider_one_is_refused() {
    let h = Harness::fake().await;
    let a = h.admin().await;
    let yaml = "version: 1\nfilesystem_policy:\n  read_only: [/usr]\n";
    let req = pb::CreateSandboxRequest {
        name: "lead".into(),
        command: vec!["true".into()],
        policy_yaml: yaml.into(),
        grant: Some(grant(1, 5, 5)),
        ..Default::default()
    };
    let lead = a.sandboxes().create_sandbox(a.req(req)).await.unwrap().into_inner().sandbox.unwrap();
    let inherit = a.child("lead", "inherit", false).await.unwrap();
    assert_eq!(inherit.policy_hash, lead.policy_hash);
    let same = pb::CreateChildSandboxRequest {
        parent: "lead".into(),
        name: "same".into(),
        command: vec!["true".into()],
        policy_yaml: yaml.into(),
        ..Default::default()
    };
    assert_eq!(a.child_req(same.clone()).await.unwrap().sandbox.unwrap().policy_hash, lead.policy_hash);
    let wider = pb::CreateChildSandboxRequest {
        name: "wider".into(),
        policy_yaml: "version: 1\nfilesystem_policy:\n  read_write: [/]\n".into(),
        ..same
    };
    let s = refused(a.child_req(wider).await, "POLICY_EXCEEDS_PARENT");
    assert_eq!(s.code(), tonic::Code::FailedPrecondition);
    assert!(details(&s)["counterexample"].starts_with("write /"), "{:?}", details(&s));
}

#[tokio::test]
async fn a_repeated_root_create_with_a_relative_expiry_replays() {
    let h = Harness::fake().await;
    let a = h.admin().await;
    let req = pb::CreateSandboxRequest {
        name: "lead".into(),
        command: vec!["true".into()],
        grant: Some(grant(1, 1, 1)),
        request_id: "root-1".into(),
        ..Default::default()
    };
    let first = a.sandboxes().create_sandbox(a.req(req.clone())).await.unwrap().into_inner();
    tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    let again = a.sandboxes().create_sandbox(a.req(req)).await.unwrap().into_inner();
    assert!(!first.replayed && again.replayed);
    assert_eq!(first.sandbox.unwrap().id, again.sandbox.unwrap().id);
}

#[tokio::test]
async fn a_repeat_answers_with_the_first_result_even_after_the_policy_narrowed() {
    let h = Harness::fake().await;
    let a = h.admin().await;
    let yaml = "version: 1\nfilesystem_policy:\n  read_write: [/tmp]\n";
    let root = pb::CreateSandboxRequest {
        name: "lead".into(),
        command: vec!["true".into()],
        policy_yaml: yaml.into(),
        grant: Some(grant(1, 5, 5)),
        ..Default::default()
    };
    a.sandboxes().create_sandbox(a.req(root)).await.unwrap();
    let req = pb::CreateChildSandboxRequest {
        parent: "lead".into(),
        command: vec!["true".into()],
        request_id: "c-1".into(),
        ..Default::default()
    };
    let first = a.child_req(req.clone()).await.unwrap();
    // The admin narrows the global maximum: a new create of the same kind is refused...
    let policies = openshell_proto::v1::policies_client::PoliciesClient::new(a.channel());
    let narrow = pb::SetGlobalMaxRequest { policy_yaml: "version: 1\n".into() };
    policies.clone().set_global_max(a.req(narrow)).await.unwrap();
    refused(
        a.child_req(pb::CreateChildSandboxRequest { request_id: "c-2".into(), ..req.clone() }).await,
        "POLICY_EXCEEDS_PARENT",
    );
    // ...but the repeat of the admitted one still answers with its first result.
    let again = a.child_req(req).await.unwrap();
    assert!(again.replayed);
    assert_eq!(again.sandbox.unwrap().id, first.sandbox.unwrap().id);
}
