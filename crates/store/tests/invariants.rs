//! `os_invariants()` (sql/invariants.sql) sees every kind of loss the storms look for: each test
//! breaks one invariant behind the database's back (as a superuser with the triggers off,
//! inside a transaction that is rolled back) and checks the function names it. A check that
//! stays silent here would let a storm pass for the wrong reason.

mod common;

use common::{Db, admit, grant, h, root};
use openshell_store::{AdmissionProof, NewChild, Verdict};
use uuid::Uuid;

/// A tree `lead` (grant depth 2, breadth 2, total 4): agent `a` (READY) with agent child `b`,
/// tool `t` (PROVISIONING, with a request id), and `gone`, stopped.
struct Tree {
    d: Db,
    a: Uuid,
    b: Uuid,
    t: Uuid,
    gone: Uuid,
}

async fn tree() -> Tree {
    let d = common::db(4).await;
    let lead = root(&d, "lead", Some(grant(2, 2, 4))).await;
    let a = admit(&d, lead, "a", "agent").await.unwrap();
    d.store.supervisor_ready(&h("cred-a"), &serde_json::json!({})).await.unwrap();
    let b = admit(&d, a, "b", "agent").await.unwrap();
    let (t, _) = d
        .store
        .admit_child(
            &d.admin,
            &NewChild {
                parent: &lead.to_string(),
                name: Some("t"),
                kind: "tool".parse().unwrap(),
                command: &["sleep".into()],
                policy: &serde_json::json!({"version": 1}),
                policy_hash: &h("p"),
                proof: AdmissionProof {
                    parent_id: lead,
                    parent_version: 1,
                    global_version: 0,
                    verdict: Verdict::Inherited,
                },
                credential_hash: &h("cred-t"),
                request_id: Some("r-t"),
                args_hash: &h("t"),
                runner: "test",
                template: None,
            },
        )
        .await
        .unwrap();
    let gone = admit(&d, a, "gone", "tool").await.unwrap();
    for item in d.store.system_stop(gone, "test").await.unwrap() {
        d.store.finish_stop(item.id).await.unwrap();
    }
    Tree { d, a, b, t, gone }
}

/// The invariants with violations, by name, after `corrupt` (run with the triggers off) in a
/// transaction that is then rolled back; `workloads` as os_invariants takes them.
async fn broken_after(d: &Db, corrupt: &str, workloads: Option<Vec<Uuid>>) -> Vec<String> {
    d.sql.batch_execute("BEGIN; SET LOCAL session_replication_role = replica").await.unwrap();
    d.sql.batch_execute(corrupt).await.unwrap_or_else(|e| panic!("{corrupt}: {e}"));
    d.sql.batch_execute("SET LOCAL session_replication_role = origin").await.unwrap();
    let rows = d
        .sql
        .query("SELECT invariant FROM os_invariants(interval '30 seconds', $1) WHERE violations > 0", &[&workloads])
        .await
        .unwrap();
    d.sql.batch_execute("ROLLBACK").await.unwrap();
    rows.iter().map(|r| r.get(0)).collect()
}

#[tokio::test]
async fn a_sound_tree_breaks_nothing_and_receipts_carry_their_limits() {
    let t = tree().await;
    assert_eq!(broken_after(&t.d, "SELECT 1", None).await, Vec::<String>::new());
    let limits: serde_json::Value =
        t.d.sql
            .query_one(
                "SELECT details FROM audit_log WHERE action = 'sandbox.create_child' AND outcome = 'admitted' \
                AND sandbox_id = $1",
                &[&t.b],
            )
            .await
            .unwrap()
            .get(0);
    assert_eq!(
        (limits["max_depth"].as_i64(), limits["max_breadth"].as_i64(), limits["max_total"].as_i64()),
        (Some(2), Some(2), Some(4))
    );
    // A raised limit is what the next receipt records.
    t.d.store
        .update_grant(&t.d.admin, "lead", &openshell_store::GrantChange { max_total: Some(9), ..Default::default() })
        .await
        .unwrap();
    let c = admit(&t.d, t.a, "c", "agent").await.unwrap();
    let total: i64 =
        t.d.sql
            .query_one(
                "SELECT (details->>'max_total')::bigint FROM audit_log WHERE sandbox_id = $1 AND outcome = 'admitted'",
                &[&c],
            )
            .await
            .unwrap()
            .get(0);
    assert_eq!(total, 9);
    assert_eq!(broken_after(&t.d, "SELECT 1", None).await, Vec::<String>::new());
}

#[tokio::test]
async fn each_kind_of_loss_is_named() {
    let t = tree().await;
    let d = &t.d;
    let receipt = |id: Uuid, set: &str| {
        format!(
            "UPDATE audit_log SET details = details || '{set}'::jsonb \
              WHERE sandbox_id = '{id}' AND action = 'sandbox.create_child' AND outcome = 'admitted'"
        )
    };
    // Admitted past the limits its receipt says it was admitted under.
    assert!(broken_after(d, &receipt(t.b, r#"{"max_total": 1}"#), None).await.contains(&"total_over_limit".into()));
    assert!(broken_after(d, &receipt(t.b, r#"{"max_breadth": 0}"#), None).await.contains(&"breadth_over_limit".into()));
    assert!(broken_after(d, &receipt(t.b, r#"{"max_depth": 1}"#), None).await.contains(&"depth_over_limit".into()));
    // A receipt off the count replayed before it (a lost or doubled event).
    assert!(broken_after(d, &receipt(t.b, r#"{"live_total": 3}"#), None).await.contains(&"total_over_limit".into()));
    // A counter off its recount.
    assert_eq!(broken_after(d, "UPDATE trees SET live_total = live_total + 1", None).await, ["counter_drift"]);
    // A child without its admission receipt, or its first policy; a stop without its receipt.
    let lost = broken_after(
        d,
        &format!("DELETE FROM audit_log WHERE sandbox_id = '{}' AND action = 'sandbox.create_child'", t.t),
        None,
    )
    .await;
    assert!(lost.contains(&"receipts_and_policy".into()), "{lost:?}");
    let lost = broken_after(d, &format!("DELETE FROM sandbox_policies WHERE sandbox_id = '{}'", t.b), None).await;
    assert_eq!(lost, ["receipts_and_policy"]);
    let lost = broken_after(
        d,
        &format!("DELETE FROM audit_log WHERE sandbox_id = '{}' AND action = 'sandbox.stopped'", t.gone),
        None,
    )
    .await;
    assert!(lost.contains(&"receipts_and_policy".into()), "{lost:?}");
    // A claim or a policy of no sandbox.
    let orphan = broken_after(
        d,
        &format!(
            "INSERT INTO create_requests (caller, request_id, args_hash, sandbox_id) \
             SELECT caller, 'other', args_hash, '{}' FROM create_requests WHERE request_id = 'r-t'",
            Uuid::new_v4()
        ),
        None,
    )
    .await;
    assert!(
        orphan.contains(&"rows_naming_no_sandbox".into()) && orphan.contains(&"request_id_twice".into()),
        "{orphan:?}"
    );
    // One request id admitted twice.
    let twice = broken_after(
        d,
        "INSERT INTO audit_log (action, outcome, actor_user, owner_id, sandbox_id, parent_id, root_id, request_id, details) \
         SELECT action, outcome, actor_user, owner_id, (SELECT id FROM sandboxes WHERE name = 'a'), parent_id, root_id, \
                request_id, details FROM audit_log WHERE request_id = 'r-t' AND outcome = 'admitted'",
        None,
    )
    .await;
    assert!(twice.contains(&"request_id_twice".into()), "{twice:?}");
    // Rows left PROVISIONING or STOPPING past the timeout.
    let overdue = broken_after(
        d,
        &format!("UPDATE sandboxes SET updated_at = now() - interval '1 hour' WHERE id = '{}'", t.t),
        None,
    )
    .await;
    assert_eq!(overdue, ["provisioning_overdue"]);
    let overdue = broken_after(
        d,
        &format!("UPDATE sandboxes SET phase = 'STOPPING', credential_hash = NULL, updated_at = now() - interval '1 hour' WHERE id = '{}'", t.b),
        None,
    )
    .await;
    assert_eq!(overdue, ["stopping_overdue"]);
    // Workloads: each live row's is running; one more, of a stopped or unknown sandbox, is not allowed.
    let live = vec![t.a, t.b, t.t];
    assert_eq!(broken_after(d, "SELECT 1", Some(live.clone())).await, Vec::<String>::new());
    assert_eq!(broken_after(d, "SELECT 1", Some(vec![t.a, t.b, t.t, t.gone])).await, ["workload_without_live_row"]);
    assert_eq!(
        broken_after(d, "SELECT 1", Some(vec![t.a, t.b, t.t, Uuid::new_v4()])).await,
        ["workload_without_live_row"]
    );
    // READY a without its workload.
    assert_eq!(broken_after(d, "SELECT 1", Some(vec![t.b, t.t])).await, ["ready_without_workload"]);
}

#[tokio::test]
async fn operators_run_the_check_and_the_gateway_cannot() {
    let t = tree().await;
    let as_role = |role: &str| format!("SET ROLE {role}; SELECT * FROM os_invariants(); RESET ROLE");
    t.d.sql.batch_execute(&as_role("openshell_operator")).await.unwrap();
    let e = t.d.sql.batch_execute(&as_role("openshell_gateway")).await.unwrap_err();
    assert!(e.to_string().contains("permission denied") || format!("{e:?}").contains("permission denied"), "{e:?}");
}
