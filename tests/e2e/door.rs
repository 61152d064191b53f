//! The door credential: only a door call may name the calling program; a door credential
//! acts only as its own sandbox, only on API and MCP calls, expires, dies with its sandbox,
//! and is renewed by a real supervisor before it expires.

use std::time::{Duration, SystemTime};

use openshell_e2e::*;
use openshell_gateway::auth::{Surface, authenticate};
use openshell_proto::v1 as pb;
use openshell_store::{Code, Principal};

const PYTHON: &str = "/usr/bin/python3";

async fn sandboxes(h: &Harness) -> i64 {
    count(&h.sql().await, "SELECT count(*) FROM sandboxes").await
}

#[tokio::test]
async fn a_program_header_is_refused_on_every_call_but_a_door_call() {
    let h = Harness::fake().await;
    let a = h.admin().await;
    let lead = a.root("lead", Some(grant(2, 5, 5))).await.unwrap();
    let before = sandboxes(&h).await;

    // The sandbox's own credential claiming the grant's program: refused, nothing created.
    let claiming = a.with_token(&h.sandbox_credential(&lead.id), Some(PYTHON));
    let s = refused(claiming.child("", "x", false).await, "INVALID_ARGUMENT");
    assert_eq!(s.code(), tonic::Code::InvalidArgument);
    assert!(s.message().contains(openshell_gateway::PROGRAM_HEADER), "{s:?}");
    refused(claiming.get(&lead.id).await, "INVALID_ARGUMENT");

    // A user cannot claim one either.
    let user = a.with_token(&h.admin_token, Some(PYTHON));
    refused(user.child("lead", "y", false).await, "INVALID_ARGUMENT");
    refused(user.get("lead").await, "INVALID_ARGUMENT");
    assert_eq!(sandboxes(&h).await, before, "no refused call created anything");

    // Through the door (a door credential with the program) it is the grant's program.
    let door = h.as_sandbox(&lead.id, Some(PYTHON)).await;
    let child = door.child("", "worker", false).await.unwrap();
    assert_eq!(child.created_by, format!("sandbox:lead program:{PYTHON}"));
    // A door call that names no program is malformed.
    let anonymous_door = door.with_token(&door_token(&h, &lead.id).await, None);
    let s = refused(anonymous_door.child("", "z", false).await, "INVALID_ARGUMENT");
    assert!(s.message().contains(openshell_gateway::PROGRAM_HEADER), "{s:?}");
}

async fn door_token(h: &Harness, id: &str) -> String {
    h.as_sandbox(id, None).await.door_credential().await.unwrap().token
}

#[tokio::test]
async fn a_door_credential_acts_only_as_its_sandbox_and_never_on_supervisor_calls() {
    let h = Harness::fake().await;
    let a = h.admin().await;
    let lead = a.root("lead", Some(grant(2, 5, 5))).await.unwrap();
    let other = a.root("other", Some(grant(2, 5, 5))).await.unwrap();
    let supervisor = h.as_sandbox(&lead.id, None).await;
    let cred = supervisor.door_credential().await.unwrap();
    assert_eq!(cred.audience, "urn:openshell:gateway-mcp");
    assert!(cred.token.starts_with("osd_") && cred.token.len() > 60, "256 random bits");
    assert_eq!(cred.ttl_seconds, 600, "ten minutes by default");
    let door = supervisor.with_token(&cred.token, Some(PYTHON));

    // Its own sandbox, never another tree's.
    let who = door.users().who_am_i(door.req(pb::WhoAmIRequest {})).await.unwrap().into_inner();
    assert_eq!((who.kind.as_str(), who.sandbox_id.as_str()), ("sandbox", lead.id.as_str()));
    refused(door.get(&other.id).await, "NOT_FOUND");
    let s = refused(door.child("other", "x", false).await, "NOT_ALLOWED");
    assert!(s.message().contains("under itself"), "{s:?}");

    // Not for the supervisor's own RPCs: it cannot report, read the policy or renew itself.
    let s =
        door.supervisor().current_policy(door.req(pb::CurrentPolicyRequest { known_version: 0 })).await.unwrap_err();
    assert_eq!(code(&s), "UNAUTHENTICATED", "{s:?}");
    let plain = supervisor.with_token(&cred.token, None);
    refused(plain.door_credential().await, "UNAUTHENTICATED");
    refused(
        plain.supervisor().report_exit(plain.req(pb::ReportExitRequest { exit_code: 0, error: String::new() })).await,
        "UNAUTHENTICATED",
    );
    assert_eq!(a.get("lead").await.unwrap().phase, "PROVISIONING", "the refused report changed nothing");
    // Stored hashed only.
    let sql = h.sql().await;
    let raw =
        count(&sql, &format!("SELECT count(*) FROM door_credentials WHERE token_hash = '{}'::bytea", cred.token)).await;
    assert_eq!(raw, 0);
}

#[tokio::test]
async fn the_mcp_surface_takes_a_door_credential_never_the_sandbox_credential() {
    let h = Harness::fake().await;
    let a = h.admin().await;
    let lead = a.root("lead", Some(grant(2, 5, 5))).await.unwrap();
    let gw = &h.running.as_ref().unwrap().gateway;
    let sandbox_cred = h.sandbox_credential(&lead.id);
    let door = door_token(&h, &lead.id).await;
    let call = |token: &str, program: Option<&str>| {
        let mut headers = http::HeaderMap::new();
        headers.insert("authorization", format!("Bearer {token}").parse().unwrap());
        if let Some(p) = program {
            headers.insert(openshell_gateway::PROGRAM_HEADER, p.parse().unwrap());
        }
        headers
    };
    let mcp =
        |headers: http::HeaderMap| async move { authenticate(&gw.store, &gw.auth, &headers, None, Surface::Mcp).await };
    let e = mcp(call(&sandbox_cred, None)).await.unwrap_err();
    assert_eq!(e.code, Code::Unauthenticated, "{e}");
    assert!(e.message.contains("door credential"), "{e}");
    let e = mcp(call(&sandbox_cred, Some(PYTHON))).await.unwrap_err();
    assert_eq!(e.code, Code::InvalidArgument, "a sandbox credential cannot claim a program: {e}");
    match mcp(call(&door, Some(PYTHON))).await.unwrap() {
        Principal::Sandbox { id, program, .. } => {
            assert_eq!(id.to_string(), lead.id);
            assert_eq!(program.as_deref(), Some(PYTHON));
        }
        p => panic!("{p:?}"),
    }
    assert!(mcp(call(&h.admin_token, None)).await.unwrap().is_user());
    assert_eq!(mcp(call(&h.admin_token, Some(PYTHON))).await.unwrap_err().code, Code::InvalidArgument);
}

#[tokio::test]
async fn a_door_credential_expires_and_only_the_newest_two_live() {
    let h = Harness::fake_with(|o| o.door_ttl_secs = 2).await;
    let a = h.admin().await;
    let lead = a.root("lead", Some(grant(2, 5, 5))).await.unwrap();
    let supervisor = h.as_sandbox(&lead.id, None).await;
    let first = supervisor.door_credential().await.unwrap();
    assert_eq!(first.ttl_seconds, 2);
    let door = supervisor.with_token(&first.token, Some(PYTHON));
    door.get(&lead.id).await.unwrap();

    // Renewing keeps the previous one (calls in flight) but not the one before it.
    let second = supervisor.door_credential().await.unwrap();
    door.get(&lead.id).await.unwrap();
    let third = supervisor.door_credential().await.unwrap();
    refused(door.get(&lead.id).await, "UNAUTHENTICATED");
    supervisor.with_token(&second.token, Some(PYTHON)).get(&lead.id).await.unwrap();
    let newest = supervisor.with_token(&third.token, Some(PYTHON));
    newest.get(&lead.id).await.unwrap();

    tokio::time::sleep(Duration::from_millis(2300)).await;
    refused(newest.get(&lead.id).await, "UNAUTHENTICATED");
    // The sandbox's own credential still exchanges for a fresh one.
    let fresh = supervisor.door_credential().await.unwrap();
    supervisor.with_token(&fresh.token, Some(PYTHON)).get(&lead.id).await.unwrap();
}

#[tokio::test]
async fn only_a_live_sandbox_gets_one_and_a_stop_revokes_it() {
    let h = Harness::fake().await;
    let a = h.admin().await;
    let lead = a.root("lead", Some(grant(2, 5, 5))).await.unwrap();
    let supervisor = h.as_sandbox(&lead.id, None).await;
    let door = supervisor.with_token(&supervisor.door_credential().await.unwrap().token, Some(PYTHON));
    door.child("", "worker", false).await.unwrap();

    a.sandboxes().stop_sandbox(a.req(pb::StopSandboxRequest { sandbox: "lead".into() })).await.unwrap();
    refused(door.get(&lead.id).await, "UNAUTHENTICATED");
    refused(door.child("", "after-stop", false).await, "UNAUTHENTICATED");
    refused(supervisor.door_credential().await, "UNAUTHENTICATED");
    let sql = h.sql().await;
    let live = format!("SELECT count(*) FROM door_credentials WHERE sandbox_id = '{}' AND revoked_at IS NULL", lead.id);
    assert_eq!(count(&sql, &live).await, 0, "the stop revoked it in the database");

    // The database itself refuses to issue one to a sandbox that is not live, whoever asks.
    let gw = &h.running.as_ref().unwrap().gateway;
    let e = gw.store.door_credential_issue(lead.id.parse().unwrap(), &[7; 32], 60).await.unwrap_err();
    assert_eq!(e.code, Code::NotAllowed, "{e}");
    assert_eq!(e.details["reason"], "sandbox_not_live");
    assert_eq!(count(&sql, &live).await, 0);
    // And nobody (not even the owner role in psql) can revive or extend a revoked one.
    let e = sql
        .batch_execute(&format!(
            "UPDATE door_credentials SET revoked_at = NULL, expires_at = expires_at + interval '1 minute' \
              WHERE sandbox_id = '{}'",
            lead.id
        ))
        .await
        .unwrap_err();
    let message = e.as_db_error().map(|d| d.message().to_string()).unwrap_or_default();
    assert!(message.contains("only be revoked"), "{e:?}");
}

#[tokio::test]
async fn a_real_supervisor_renews_its_door_credential_before_it_expires() {
    let h = Harness::process_recording_with(Default::default(), |o| o.door_ttl_secs = 2).await;
    let a = h.admin().await;
    let lead = a.root("lead", Some(grant(1, 1, 1))).await.unwrap();
    let sql = h.sql().await;
    let issued = format!(
        "SELECT issued_at, expires_at, revoked_at IS NULL FROM door_credentials WHERE sandbox_id = '{}' ORDER BY id",
        lead.id
    );
    let renewed =
        eventually(Duration::from_secs(20), || async { sql.query(&issued, &[]).await.unwrap().len() >= 4 }).await;
    assert!(renewed, "the supervisor renewed its door credential");
    let rows = sql.query(&issued, &[]).await.unwrap();
    for pair in rows.windows(2) {
        let (next_issued, prev_expires): (SystemTime, SystemTime) = (pair[1].get(0), pair[0].get(1));
        assert!(next_issued < prev_expires, "renewed before the previous one expired");
    }
    let live: Vec<bool> = rows.iter().map(|r| r.get(2)).collect();
    assert!(live.iter().filter(|l| **l).count() <= 2, "{live:?}");

    a.sandboxes().stop_sandbox(a.req(pb::StopSandboxRequest { sandbox: "lead".into() })).await.unwrap();
    let unrevoked =
        format!("SELECT count(*) FROM door_credentials WHERE sandbox_id = '{}' AND revoked_at IS NULL", lead.id);
    assert_eq!(count(&sql, &unrevoked).await, 0);
}
