//! A sandbox's row holds against anyone, psql included (sql/lineage.sql): lineage is derived
//! from the parent and fixed at creation, phases follow their machine, a credential dies with
//! its sandbox, and a failed sandbox's descendants stop in the same transaction.

mod common;

use common::{Db, fails, h, tree};

async fn db() -> Db {
    common::db(8).await
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
    // The supervisor's start and READY check its credential in the same call.
    let unknown = d.store.supervisor_start(&h("cred-nobody")).await.unwrap_err();
    assert_eq!(unknown.code, openshell_store::Code::Unauthenticated, "{unknown}");
    let started = d.store.supervisor_start(&h("cred-worker")).await.unwrap();
    assert_eq!(started.id, child);
    let ready = d.store.supervisor_ready(&h("cred-worker"), &serde_json::json!({})).await.unwrap();
    assert_eq!((ready.id, ready.phase), (child, openshell_store::Phase::Ready));
    assert!(d.store.authenticate(&h("cred-worker")).await.unwrap().is_some());
    let stopped = d.store.system_stop(child, "test").await.unwrap();
    assert_eq!(stopped.len(), 1);
    assert!(
        d.store.authenticate(&h("cred-worker")).await.unwrap().is_none(),
        "a stopping sandbox's credential is dead"
    );
    for refused in [
        d.store.supervisor_start(&h("cred-worker")).await.map(drop),
        d.store.supervisor_ready(&h("cred-worker"), &serde_json::json!({})).await.map(drop),
    ] {
        assert_eq!(
            refused.unwrap_err().code,
            openshell_store::Code::Unauthenticated,
            "a stopping sandbox's supervisor"
        );
    }
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
