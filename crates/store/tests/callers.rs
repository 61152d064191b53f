//! Who may call what is decided in SQL alone (sql/auth.sql and each entry point): adding users,
//! setting the global maximum or reading the audit log, tried as an attacker holding the
//! gateway's role would (calling the functions directly with a non-admin or a sandbox caller),
//! and the store holds no copy of these rules.

mod common;

use common::{Db, connect, grant, h, refused, root, url_as};
use openshell_store::{AuditFilter, Code, GATEWAY_ROLE, Principal};
use uuid::Uuid;

/// The admin, a plain user `bob` (token `bob-token`) and the admin's root `lead`.
async fn setup() -> (Db, Principal, Uuid) {
    let d = common::db(4).await;
    d.store.create_user(&d.admin, "bob", false, &h("bob-token")).await.unwrap();
    let bob = d.store.authenticate(&h("bob-token")).await.unwrap().unwrap();
    let lead = root(&d, "lead", Some(grant(2, 2, 2))).await;
    (d, bob, lead)
}

/// What a refused call must not change: users, tokens, global maximum versions.
async fn footprint(d: &Db) -> (i64, i64, i64) {
    let r = d
        .sql
        .query_one(
            "SELECT (SELECT count(*) FROM users), (SELECT count(*) FROM user_tokens), \
                    (SELECT count(*) FROM global_max_policies)",
            &[],
        )
        .await
        .unwrap();
    (r.get(0), r.get(1), r.get(2))
}

#[tokio::test]
async fn sql_itself_refuses_a_non_admin_or_a_sandbox_called_directly_as_the_gateway_role() {
    let (d, bob, lead) = setup().await;
    let gw = connect(&url_as(&d.db.url, GATEWAY_ROLE)).await;
    let Principal::User { id: bob_id, .. } = bob else { unreachable!() };
    let Principal::User { id: admin_id, .. } = d.admin else { unreachable!() };
    let before = footprint(&d).await;
    // A non-admin user, and the admin's own sandbox (whose owner, carried in the caller, is
    // the admin): neither may add a user, set the global maximum, or read another's audit.
    for (who, caller) in [
        ("a non-admin user", format!("ROW({bob_id}, NULL, NULL)::os_caller")),
        ("the admin's sandbox", format!("ROW({admin_id}, '{lead}', NULL)::os_caller")),
        ("the admin's sandbox through its door", format!("ROW({admin_id}, '{lead}', '/usr/bin/python3')::os_caller")),
    ] {
        for stmt in [
            format!(
                "SELECT user_create(p_caller => {caller}, p_name => 'mallory', p_admin => true, \
                        p_token_hash => sha256('m'))"
            ),
            format!("SELECT global_max_set(p_caller => {caller}, p_document => '{{}}', p_hash => sha256('g'))"),
            format!(
                "SELECT * FROM audit_list(p_caller => {caller}, p_sandbox_ref => NULL, p_owner_name => 'admin', \
                        p_since => NULL, p_until => NULL, p_refusals_only => false, p_before_id => NULL, p_limit => 10)"
            ),
        ] {
            let (state, message) = refused(&gw, &stmt).await;
            assert_eq!(state, Code::NotAllowed.sqlstate(), "{who}: {stmt}: {message}");
            assert!(message.contains("admin") || message.contains("only a user"), "{who}: {message}");
        }
    }
    // A sandbox is not a user, whatever its owner: user-only calls refuse it.
    let sandbox = format!("ROW({admin_id}, '{lead}', NULL)::os_caller");
    for stmt in [
        format!(
            "SELECT * FROM sandbox_list(p_caller => {sandbox}, p_include_stopped => true, p_after_at => NULL, \
                        p_after_id => NULL, p_limit => 10)"
        ),
        format!("SELECT * FROM grant_list(p_caller => {sandbox}, p_ref => NULL)"),
        format!("SELECT * FROM proposal_list(p_caller => {sandbox}, p_ref => NULL, p_state => NULL, p_limit => 10)"),
        format!("SELECT * FROM token_list(p_caller => {sandbox}, p_user => NULL)"),
        format!(
            "SELECT * FROM create_root(p_caller => {sandbox}, p_name => 'x', p_command => ARRAY['sh'], \
                    p_template => '{{}}', p_policy => '{{}}', p_policy_hash => sha256('p'), \
                    p_credential_hash => sha256('c'), p_request_id => NULL, p_args_hash => sha256('a'), \
                    p_grant => NULL, p_runner => 'test', p_proof => ROW(0, 'no_global_max')::os_root_proof)"
        ),
    ] {
        let (state, message) = refused(&gw, &stmt).await;
        assert_eq!(state, Code::NotAllowed.sqlstate(), "{stmt}: {message}");
        assert!(message.contains("only a user"), "{message}");
    }
    // The signatures that hold the rules are not the gateway's to call: not with a NULL
    // actor (the bootstrap's), not with a user id it picks.
    for stmt in [
        "SELECT user_create(p_actor => NULL::bigint, p_name => 'mallory', p_admin => true, p_token_hash => sha256('m'))",
        "SELECT global_max_set(p_user => 1::bigint, p_document => NULL, p_hash => NULL)",
        "SELECT count(*) FROM audit_list(1::bigint, NULL, NULL, NULL, NULL, false, NULL, 10::bigint)",
    ] {
        assert_eq!(refused(&gw, stmt).await.0, "42501", "{stmt}");
    }
    // And the NULL actor is only for the first user, even for the owner.
    let (state, _) = refused(
        &d.sql,
        "SELECT user_create(p_actor => NULL::bigint, p_name => 'mallory', p_admin => true, p_token_hash => sha256('m'))",
    )
    .await;
    assert_eq!(state, Code::NotAllowed.sqlstate());
    // A kind is one of os_kind's, checked before anything runs.
    let (state, _) = refused(
        &gw,
        &format!(
            "SELECT exec_begin(p_caller => ROW({admin_id}, NULL, NULL)::os_caller, p_ref => 'lead', p_kind => 'robot')"
        ),
    )
    .await;
    assert_eq!(state, "22P02", "invalid input value for enum os_kind");
    assert_eq!(footprint(&d).await, before, "nothing changed");

    // The admin may: the same calls succeed (the refusals above were about the caller).
    let admin = format!("ROW({admin_id}, NULL, NULL)::os_caller");
    gw.batch_execute(&format!(
        "SELECT user_create(p_caller => {admin}, p_name => 'carol', p_admin => false, p_token_hash => sha256('c')); \
         SELECT global_max_set(p_caller => {admin}, p_document => NULL, p_hash => NULL); \
         SELECT count(*) FROM audit_list(p_caller => {admin}, p_sandbox_ref => NULL, p_owner_name => 'bob', \
                p_since => NULL, p_until => NULL, p_refusals_only => false, p_before_id => NULL, p_limit => 10)"
    ))
    .await
    .unwrap();
    let after = footprint(&d).await;
    assert_eq!((after.0, after.1, after.2), (before.0 + 1, before.1 + 1, before.2 + 1));
}

#[tokio::test]
async fn the_store_holds_no_copy_of_these_rules_and_passes_on_sqls_refusal() {
    let (d, bob, lead) = setup().await;
    let Principal::User { id: admin_id, .. } = d.admin else { unreachable!() };
    let sandbox = Principal::Sandbox { id: lead, name: "lead".into(), owner: admin_id, program: None };
    let before = footprint(&d).await;
    for caller in [&bob, &sandbox] {
        let e = d.store.create_user(caller, "mallory", true, &h("m")).await.unwrap_err();
        assert_eq!(e.code, Code::NotAllowed, "{e}");
        let e = d.store.set_global_max(caller, None).await.unwrap_err();
        assert_eq!(e.code, Code::NotAllowed, "{e}");
        let other = AuditFilter { user: Some("admin".into()), limit: 10, ..Default::default() };
        let e = d.store.audit(caller, &other).await.unwrap_err();
        assert_eq!(e.code, Code::NotAllowed, "{e}");
    }
    let mine = AuditFilter { limit: 10, ..Default::default() };
    assert_eq!(d.store.audit(&sandbox, &mine).await.unwrap_err().code, Code::NotAllowed);
    assert_eq!(d.store.list_grants(&sandbox, None).await.unwrap_err().code, Code::NotAllowed);
    assert_eq!(d.store.proposals(&sandbox, None, None, 10).await.unwrap_err().code, Code::NotAllowed);
    assert_eq!(d.store.list_sandboxes(&sandbox, true, None, 10).await.unwrap_err().code, Code::NotAllowed);
    assert_eq!(footprint(&d).await, before, "nothing changed");
    // bob reads his own audit (none of the admin's tree); the admin may add him a colleague.
    let own = d.store.audit(&bob, &mine).await.unwrap();
    assert!(own.iter().all(|a| a.root_id != Some(lead)), "{own:?}");
    d.store.create_user(&d.admin, "carol", false, &h("carol-token")).await.unwrap();
}
