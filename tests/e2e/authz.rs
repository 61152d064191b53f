//! Authorization matrix: every method against admin, another user, a sandbox with a grant,
//! a sandbox without one, and no credential, including every way a sandbox might try to
//! change a grant.

use openshell_e2e::*;
use openshell_proto::v1 as pb;

const OK: &str = "OK";

#[track_caller]
fn expect<T: std::fmt::Debug>(what: &str, who: &str, r: Result<T, tonic::Status>, want: &str) {
    let got = match &r {
        Ok(_) => OK.to_string(),
        Err(s) => code(s),
    };
    assert_eq!(got, want, "{what} as {who}: {r:?}");
}

struct World {
    h: Harness,
    admin: Api,
    bob: Api,
    granted: Api,
    ungranted: Api,
    none: Api,
    child_of_lead: String,
}

async fn world() -> World {
    let h = Harness::fake().await;
    let admin = h.admin().await;
    let lead = admin.root("lead", Some(grant(2, 10, 10))).await.unwrap();
    let bare = admin.root("bare", None).await.unwrap();
    let child = admin.child("lead", "lead-child", false).await.unwrap();
    let bob = h.user("bob").await;
    bob.root("bobs", Some(grant(1, 1, 1))).await.unwrap();
    let granted = h.as_sandbox(&lead.id, Some("/usr/bin/python3")).await;
    let ungranted = h.as_sandbox(&bare.id, Some("/usr/bin/python3")).await;
    let none = h.anonymous().await;
    World { h, admin, bob, granted, ungranted, none, child_of_lead: child.name }
}

impl World {
    fn all(&self) -> [(&'static str, &Api); 5] {
        [
            ("admin", &self.admin),
            ("bob", &self.bob),
            ("granted", &self.granted),
            ("ungranted", &self.ungranted),
            ("none", &self.none),
        ]
    }
}

#[tokio::test]
async fn sandbox_methods() {
    let w = world().await;
    let want_root = [OK, OK, "NOT_ALLOWED", "NOT_ALLOWED", "UNAUTHENTICATED"];
    for (i, (who, api)) in w.all().into_iter().enumerate() {
        expect("CreateSandbox", who, api.root(&format!("root-{who}"), None).await, want_root[i]);
    }
    let want_child = [OK, "NOT_FOUND", OK, "NOT_ALLOWED", "UNAUTHENTICATED"];
    for (i, (who, api)) in w.all().into_iter().enumerate() {
        let parent = if who == "granted" || who == "ungranted" { "" } else { "lead" };
        expect("CreateChildSandbox", who, api.child(parent, &format!("c-{who}"), false).await, want_child[i]);
    }
    let want_get = [OK, "NOT_FOUND", OK, "NOT_FOUND", "UNAUTHENTICATED"];
    for (i, (who, api)) in w.all().into_iter().enumerate() {
        expect("GetSandbox lead", who, api.get("lead").await, want_get[i]);
        let r = api.sandboxes().list_children(api.req(pb::ListChildrenRequest { sandbox: "lead".into() })).await;
        expect("ListChildren lead", who, r, want_get[i]);
    }
    let want_list = [OK, OK, "NOT_ALLOWED", "NOT_ALLOWED", "UNAUTHENTICATED"];
    for (i, (who, api)) in w.all().into_iter().enumerate() {
        let r = api.sandboxes().list_sandboxes(api.req(pb::ListSandboxesRequest::default())).await;
        if who == "bob" {
            let mut names: Vec<_> = r.as_ref().unwrap().get_ref().sandboxes.iter().map(|s| s.name.clone()).collect();
            names.sort();
            assert_eq!(names, ["bobs", "root-bob"], "bob sees his own and nobody else's");
        }
        expect("ListSandboxes", who, r, want_list[i]);
    }
    // Stop: a sandbox may stop its descendants, never itself or another tree.
    let stop = |api: &Api, name: &str| {
        let api = api.clone();
        let name = name.to_string();
        async move { api.sandboxes().stop_sandbox(api.req(pb::StopSandboxRequest { sandbox: name })).await }
    };
    expect("StopSandbox lead-child", "bob", stop(&w.bob, &w.child_of_lead).await, "NOT_FOUND");
    expect("StopSandbox lead-child", "ungranted", stop(&w.ungranted, &w.child_of_lead).await, "NOT_FOUND");
    expect("StopSandbox lead-child", "none", stop(&w.none, &w.child_of_lead).await, "UNAUTHENTICATED");
    expect("StopSandbox itself", "granted", stop(&w.granted, "lead").await, "NOT_ALLOWED");
    expect("StopSandbox lead-child", "granted", stop(&w.granted, &w.child_of_lead).await, OK);
    let del =
        w.admin.sandboxes().delete_sandbox(w.admin.req(pb::DeleteSandboxRequest { sandbox: "bare".into() })).await;
    expect("DeleteSandbox bare", "admin", del, OK);
    // bare is gone, and with it its credential.
    expect(
        "WhoAmI after delete",
        "ungranted",
        w.ungranted.users().who_am_i(w.ungranted.req(pb::WhoAmIRequest {})).await,
        "UNAUTHENTICATED",
    );
    // An admin acts on any tree, by id.
    let bobs = w.bob.get("bobs").await.unwrap();
    expect("GetSandbox bobs by id", "admin", w.admin.get(&bobs.id).await, OK);
    expect("GetSandbox bobs by id", "granted", w.granted.get(&bobs.id).await, "NOT_FOUND");
}

#[tokio::test]
async fn only_a_user_reads_or_changes_a_grant() {
    let w = world().await;
    let spec = || Some(grant(9, 9, 9));
    for (who, api) in w.all() {
        let (own, want_owner) = match who {
            "admin" => ("lead", OK),
            "bob" => ("lead", "NOT_FOUND"),
            "none" => ("lead", "UNAUTHENTICATED"),
            // Every way a sandbox might touch its own tree's grant, or another's.
            _ => ("lead", "NOT_ALLOWED"),
        };
        let g = api.grants();
        expect(
            "GetGrant",
            who,
            g.clone().get_grant(api.req(pb::GetGrantRequest { sandbox: own.into() })).await,
            want_owner,
        );
        let list = g.clone().list_grants(api.req(pb::ListGrantsRequest { sandbox: own.into() })).await;
        expect("ListGrants lead", who, list, want_owner);
        let up = pb::UpdateGrantRequest { sandbox: own.into(), max_total: Some(1000), ..Default::default() };
        expect("UpdateGrant", who, g.clone().update_grant(api.req(up)).await, want_owner);
        let want_create = if who == "admin" { "CONFLICT" } else { want_owner };
        let create = pb::CreateGrantRequest { sandbox: own.into(), grant: spec() };
        expect("CreateGrant (live exists)", who, g.clone().create_grant(api.req(create)).await, want_create);
        let bare = pb::CreateGrantRequest { sandbox: "bare".into(), grant: spec() };
        let want_bare = match who {
            "admin" => OK,
            "bob" => "NOT_FOUND",
            "none" => "UNAUTHENTICATED",
            _ => "NOT_ALLOWED",
        };
        expect("CreateGrant bare", who, g.clone().create_grant(api.req(bare)).await, want_bare);
        if who != "admin" {
            expect(
                "RevokeGrant",
                who,
                g.clone().revoke_grant(api.req(pb::RevokeGrantRequest { sandbox: own.into() })).await,
                want_owner,
            );
        }
    }
    // Nothing a non-owner tried changed the grant.
    let g = w
        .admin
        .grants()
        .get_grant(w.admin.req(pb::GetGrantRequest { sandbox: "lead".into() }))
        .await
        .unwrap()
        .into_inner();
    assert_eq!((g.max_total, g.state.as_str()), (1000, "live"), "only the admin's update applied");
    // Every refused attempt by a sandbox left a receipt naming it.
    let sql = w.h.sql().await;
    let receipts = count(
        &sql,
        "SELECT count(*) FROM audit_log WHERE action LIKE 'grant.%' AND outcome = 'refused' \
           AND code = 'NOT_ALLOWED' AND actor_sandbox IS NOT NULL",
    )
    .await;
    assert_eq!(receipts, 2 * 4, "create, update, revoke and the bare create, for both sandboxes");
    // A sandbox's create of a root (which could carry a grant) is refused too.
    let req = pb::CreateSandboxRequest {
        name: "sneaky".into(),
        command: vec!["true".into()],
        grant: spec(),
        ..Default::default()
    };
    expect(
        "CreateSandbox with grant",
        "granted",
        w.granted.sandboxes().create_sandbox(w.granted.req(req)).await,
        "NOT_ALLOWED",
    );
    // A child naming a grant's root it does not own, through the SQL the gateway calls.
    let lead_id: uuid::Uuid = sql.query_one("SELECT id FROM sandboxes WHERE name = 'lead'", &[]).await.unwrap().get(0);
    let err = sql
        .query(
            "SELECT grant_update(p_caller => ROW(NULL, $1::uuid, NULL)::os_caller, p_ref => 'lead', p_max_depth => 50, \
                    p_max_breadth => 50, p_max_total => 50, p_expires_at => NULL, p_program => NULL, \
                    p_tool_idle_seconds => NULL, p_program_resolved => NULL, p_rate_calls => NULL, \
                    p_rate_period_s => NULL)",
            &[&lead_id],
        )
        .await
        .expect_err("a sandbox principal cannot update a grant in SQL either");
    assert_eq!(err.code().unwrap().code(), openshell_store::Code::NotAllowed.sqlstate());
}

#[tokio::test]
async fn audit_users_supervisor_and_health() {
    let w = world().await;
    let want_audit = [OK, "NOT_FOUND", "NOT_ALLOWED", "NOT_ALLOWED", "UNAUTHENTICATED"];
    for (i, (who, api)) in w.all().into_iter().enumerate() {
        let r = api
            .audit()
            .list_audit(api.req(pb::ListAuditRequest { sandbox: "lead".into(), ..Default::default() }))
            .await;
        expect("ListAudit lead", who, r, want_audit[i]);
    }
    let r =
        w.bob.audit().list_audit(w.bob.req(pb::ListAuditRequest { user: "admin".into(), ..Default::default() })).await;
    expect("ListAudit user=admin", "bob", r, "NOT_ALLOWED");
    let mine = w.bob.audit().list_audit(w.bob.req(pb::ListAuditRequest::default())).await.unwrap().into_inner();
    assert!(mine.entries.iter().all(|e| e.owner == "bob"), "bob reads only his trees' audit");

    let want_user = [OK, "NOT_ALLOWED", "NOT_ALLOWED", "NOT_ALLOWED", "UNAUTHENTICATED"];
    for (i, (who, api)) in w.all().into_iter().enumerate() {
        let r = api.users().create_user(api.req(pb::CreateUserRequest { name: format!("u-{who}"), admin: true })).await;
        expect("CreateUser", who, r, want_user[i]);
        let r = api.users().who_am_i(api.req(pb::WhoAmIRequest {})).await;
        expect("WhoAmI", who, r, if who == "none" { "UNAUTHENTICATED" } else { OK });
        let r = api.health().get_status(api.req(pb::GetStatusRequest {})).await;
        expect("GetStatus", who, r, OK);
    }
    // The sandboxes here call through the door, whose credential never works on the
    // supervisor's RPCs; the supervisor's own credential does.
    let want_sup = ["NOT_ALLOWED", "NOT_ALLOWED", "UNAUTHENTICATED", "UNAUTHENTICATED", "UNAUTHENTICATED"];
    for (i, (who, api)) in w.all().into_iter().enumerate() {
        let r = api.supervisor().supervisor_connect(api.req(pb::ConnectRequest { pid: 1 })).await;
        expect("SupervisorConnect", who, r, want_sup[i]);
        // READY checks the credential in its own database call, as the connect does.
        let r = api.supervisor().report_isolation(api.req(pb::ReportIsolationRequest::default())).await;
        expect("ReportIsolation", who, r, want_sup[i]);
    }
    let lead = w.admin.sandboxes().get_sandbox(w.admin.req(pb::GetSandboxRequest { sandbox: "lead".into() })).await;
    let supervisor = w.h.as_sandbox(&lead.unwrap().into_inner().id, None).await;
    let r = supervisor.supervisor().supervisor_connect(supervisor.req(pb::ConnectRequest { pid: 1 })).await;
    expect("SupervisorConnect", "lead's supervisor", r, OK);
    let s = w.none.health().get_status(w.none.req(pb::GetStatusRequest {})).await.unwrap().into_inner();
    assert!(s.database_ok);
    assert_eq!(s.driver, "capturing-fake");
    assert_eq!(s.database, "", "where the database is, is for signed-in callers");
    let s = w.admin.health().get_status(w.admin.req(pb::GetStatusRequest {})).await.unwrap().into_inner();
    assert!(s.database.starts_with("postgres://"), "{s:?}");
}

#[tokio::test]
async fn bad_tokens_are_unauthenticated_and_leak_nothing() {
    let h = Harness::fake().await;
    for token in ["", "osu_00", "not-a-token", &"x".repeat(300), "oss_deadbeef"] {
        let api = Api::connect(&h.endpoint, Some(token)).await;
        let r = api.users().who_am_i(api.req(pb::WhoAmIRequest {})).await;
        let s = refused(r, "UNAUTHENTICATED");
        assert_eq!(s.code(), tonic::Code::Unauthenticated);
        assert!(!s.message().contains(token) || token.is_empty(), "the token is not echoed: {s:?}");
    }
}

#[tokio::test]
async fn policy_methods() {
    let w = world().await;
    let policies = |api: &Api| openshell_proto::v1::policies_client::PoliciesClient::new(api.channel());
    let yaml = openshell_gateway::DEFAULT_POLICY_YAML;
    // Read: a user their own, a sandbox itself; nobody another tree.
    let want_get = [OK, "NOT_FOUND", OK, "NOT_FOUND", "UNAUTHENTICATED"];
    let want_child = [OK, "NOT_FOUND", OK, "NOT_FOUND", "UNAUTHENTICATED"];
    for (i, (who, api)) in w.all().into_iter().enumerate() {
        let r = policies(api).get_policy(api.req(pb::GetPolicyRequest { sandbox: "lead".into() })).await;
        expect("GetPolicy lead", who, r, want_get[i]);
        let req = pb::SetPolicyRequest { sandbox: w.child_of_lead.clone(), policy_yaml: yaml.into() };
        expect("SetPolicy lead-child", who, policies(api).set_policy(api.req(req)).await, want_child[i]);
        // No sandbox may write its own policy.
        if who == "granted" {
            let req = pb::SetPolicyRequest { sandbox: "lead".into(), policy_yaml: yaml.into() };
            expect("SetPolicy itself", who, policies(api).set_policy(api.req(req)).await, "NOT_ALLOWED");
        }
        let want_global = match who {
            "admin" => OK,
            "none" => "UNAUTHENTICATED",
            "bob" => "NOT_ALLOWED",
            _ => "NOT_ALLOWED",
        };
        let r = policies(api).set_global_max(api.req(pb::SetGlobalMaxRequest { policy_yaml: String::new() })).await;
        expect("SetGlobalMax", who, r, want_global);
        let want_read_global = match who {
            "admin" | "bob" => OK,
            "none" => "UNAUTHENTICATED",
            _ => "NOT_ALLOWED",
        };
        let r = policies(api).get_global_max(api.req(pb::GetGlobalMaxRequest {})).await;
        expect("GetGlobalMax", who, r, want_read_global);
        let check =
            pb::CheckPolicyRequest { boundary_yaml: yaml.into(), candidate_yaml: yaml.into(), ..Default::default() };
        let r = policies(api).check_policy(api.req(check)).await;
        expect("CheckPolicy", who, r, if who == "none" { "UNAUTHENTICATED" } else { OK });
    }
}

/// A flood of bad tokens from one address: past a small budget per second they are refused
/// before the database is asked, so a real user's creates (on the same address, with a
/// token verified before) keep succeeding; and a revoked token is refused within a second.
#[tokio::test]
async fn a_flood_of_bad_tokens_cannot_starve_a_real_users_creates() {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
    let h = Harness::fake().await;
    let a = h.admin().await;
    a.root("lead", Some(grant(1, 1000, 1000))).await.unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let (sent, limited) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let mut flood = Vec::new();
    for f in 0..24 {
        let bad = Api::connect(&h.endpoint, Some(&format!("osu_{f:064x}"))).await;
        let (stop, sent, limited) = (stop.clone(), sent.clone(), limited.clone());
        flood.push(tokio::spawn(async move {
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
            while !stop.load(Ordering::Relaxed) && std::time::Instant::now() < deadline {
                let s = bad.users().who_am_i(bad.req(pb::WhoAmIRequest {})).await.unwrap_err();
                assert_eq!(s.code(), tonic::Code::Unauthenticated, "{s:?}");
                sent.fetch_add(1, Ordering::Relaxed);
                if s.message().contains("too many failed authentications") {
                    limited.fetch_add(1, Ordering::Relaxed);
                }
            }
        }));
    }
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    let started = std::time::Instant::now();
    for i in 0..40 {
        a.child("lead", &format!("w{i}"), false).await.unwrap_or_else(|e| panic!("create {i} during the flood: {e:?}"));
    }
    let took = started.elapsed();
    stop.store(true, Ordering::Relaxed);
    for f in flood {
        f.await.unwrap();
    }
    let (sent, limited) = (sent.load(Ordering::Relaxed), limited.load(Ordering::Relaxed));
    assert!(sent > 200, "the flood ran ({sent} bad calls)");
    // At most ~20 failures a second reach the database: nearly all the rest were refused early.
    let reached = sent - limited;
    assert!(
        reached as f64 <= 20.0 * (took.as_secs_f64() + 1.5) + 20.0,
        "{reached} of {sent} bad calls reached the database in {took:?}"
    );

    // A revoked token stops working within a second, cache or not.
    let sql = h.sql().await;
    sql.batch_execute("UPDATE user_tokens SET revoked_at = now() WHERE user_id = 1").await.unwrap();
    tokio::time::sleep(std::time::Duration::from_millis(1000)).await;
    let s = a.users().who_am_i(a.req(pb::WhoAmIRequest {})).await.unwrap_err();
    assert_eq!(s.code(), tonic::Code::Unauthenticated);
}
