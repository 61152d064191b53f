//! The database holds its invariants against anyone, psql included: lineage is fixed at
//! creation, phases follow their machine, credentials die with the sandbox, rows stay, and
//! the audit log and grant history are append-only.

mod common;

use common::{Db, admit, grant, h, root};
use openshell_store::{AdmissionProof, NewChild, Verdict};

async fn db() -> Db {
    common::db(8).await
}

/// A root `lead` (grant depth 2, breadth 2, total 4) and its agent child `worker`.
async fn tree(d: &Db) -> (uuid::Uuid, uuid::Uuid) {
    let root = root(d, "lead", Some(grant(2, 2, 4))).await;
    let child = admit(d, root, "worker", "agent").await.unwrap();
    (root, child)
}

async fn fails(d: &Db, sql: &str) -> String {
    let e = d.sql.batch_execute(sql).await.expect_err(sql);
    e.as_db_error().map(|e| e.message().to_string()).unwrap_or_else(|| e.to_string())
}

#[tokio::test]
async fn lineage_is_derived_from_the_parent_and_fixed() {
    let d = db().await;
    let (root, child) = tree(&d).await;
    let row =
        d.sql.query_one("SELECT root_id, depth, parent_id FROM sandboxes WHERE id = $1", &[&child]).await.unwrap();
    assert_eq!((row.get::<_, uuid::Uuid>(0), row.get::<_, i32>(1)), (root, 1));
    let m = fails(&d, &format!("UPDATE sandboxes SET depth = 0 WHERE id = '{child}'")).await;
    assert!(m.contains("fixed at creation"), "{m}");
    fails(&d, &format!("UPDATE sandboxes SET parent_id = NULL WHERE id = '{child}'")).await;
    // An insert claiming another lineage gets the parent's.
    d.sql
        .batch_execute(&format!(
            "INSERT INTO sandboxes (name, owner_id, parent_id, root_id, depth, kind, command, created_by_user) \
             VALUES ('forged', 1, '{child}', '{child}', 0, 'agent', ARRAY['x'], 1)"
        ))
        .await
        .unwrap();
    let row = d.sql.query_one("SELECT root_id, depth, phase FROM sandboxes WHERE name = 'forged'", &[]).await.unwrap();
    assert_eq!(
        (row.get::<_, uuid::Uuid>(0), row.get::<_, i32>(1), row.get::<_, String>(2)),
        (root, 2, "PROVISIONING".into())
    );
}

#[tokio::test]
async fn phases_follow_their_machine_and_credentials_die_with_the_sandbox() {
    let d = db().await;
    let (_, child) = tree(&d).await;
    let m = fails(&d, &format!("UPDATE sandboxes SET phase = 'STOPPED' WHERE id = '{child}'")).await;
    assert!(m.contains("cannot go from PROVISIONING to STOPPED"), "{m}");
    d.store.mark_ready(child).await.unwrap();
    assert!(d.store.authenticate(&h("cred-worker")).await.unwrap().is_some());
    let stopped = d.store.system_stop(child, "test").await.unwrap();
    assert_eq!(stopped.len(), 1);
    assert!(
        d.store.authenticate(&h("cred-worker")).await.unwrap().is_none(),
        "a stopping sandbox's credential is dead"
    );
    let m = fails(&d, &format!("UPDATE sandboxes SET phase = 'READY' WHERE id = '{child}'")).await;
    assert!(m.contains("cannot go"), "{m}");
    // Nor can a credential be given back to a stopped sandbox, or set or changed on any:
    // it can only be cleared.
    let m = fails(&d, &format!("UPDATE sandboxes SET credential_hash = sha256('x') WHERE id = '{child}'")).await;
    assert!(m.contains("only be cleared"), "{m}");
    assert!(d.store.authenticate(&h("x")).await.unwrap().is_none());
    let cleared: bool =
        d.sql.query_one("SELECT credential_hash IS NULL FROM sandboxes WHERE id = $1", &[&child]).await.unwrap().get(0);
    assert!(cleared);
}

#[tokio::test]
async fn rows_stay_and_logs_are_append_only() {
    let d = db().await;
    tree(&d).await;
    for sql in [
        "DELETE FROM sandboxes",
        "DELETE FROM grants",
        "UPDATE audit_log SET message = 'x'",
        "DELETE FROM audit_log",
        "TRUNCATE audit_log",
        "UPDATE grant_history SET max_total = 1000",
        "DELETE FROM grant_history",
    ] {
        fails(&d, sql).await;
    }
    let m = fails(&d, "UPDATE grants SET root_id = (SELECT id FROM sandboxes WHERE name = 'worker')").await;
    assert!(m.contains("fixed"), "{m}");
    // Limits are range-checked even for a raw UPDATE.
    fails(&d, "UPDATE grants SET max_breadth = -1").await;
    // A raw change to a grant still lands in its history.
    d.sql.batch_execute("UPDATE grants SET max_total = 9").await.unwrap();
    let events: Vec<String> = d
        .sql
        .query("SELECT event FROM grant_history ORDER BY id", &[])
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(events, ["created", "updated"]);
}

#[tokio::test]
async fn a_proof_holds_only_for_the_parent_it_was_made_against() {
    let d = db().await;
    let (root, child) = tree(&d).await;
    let policy = serde_json::json!({"version": 1});
    let admit = |parent_id: uuid::Uuid, name: &'static str| {
        let store = d.store.clone();
        let admin = d.admin.clone();
        let policy = policy.clone();
        async move {
            store
                .admit_child(
                    &admin,
                    &NewChild {
                        parent: "lead",
                        name: Some(name),
                        kind: openshell_store::Kind::Agent,
                        command: &["x".into()],
                        policy: &policy,
                        policy_hash: &h("p"),
                        proof: AdmissionProof {
                            parent_id,
                            parent_version: 1,
                            global_version: 0,
                            verdict: Verdict::Within,
                        },
                        credential_hash: &h(name),
                        request_id: None,
                        args_hash: &h(name),
                        runner: "test",
                        template: None,
                    },
                )
                .await
        }
    };
    // Same version number (1), other sandbox: refused as a changed policy, to be re-proved.
    let e = admit(child, "x1").await.unwrap_err();
    assert!(e.is_policy_changed(), "{e:?}");
    admit(root, "x2").await.unwrap();
}

#[tokio::test]
async fn failing_a_sandbox_stops_its_descendants_in_the_same_transaction() {
    let d = db().await;
    let (root, child) = tree(&d).await;
    d.store.mark_error(root, "lost").await.unwrap();
    let phase: String = d.sql.query_one("SELECT phase FROM sandboxes WHERE id = $1", &[&child]).await.unwrap().get(0);
    assert_eq!(phase, "STOPPING");
    // And nothing is admitted under the failed root.
    let children: i64 =
        d.sql.query_one("SELECT count(*) FROM sandboxes WHERE parent_id = $1", &[&root]).await.unwrap().get(0);
    assert_eq!(children, 1);
}
