//! A child's admission (sql/admission.sql): a proof holds only for the parent and policy
//! version it was made against; no admission updates a row of sandboxes (so the table fills its
//! pages) nor takes an SSI lock on other trees' counters or audit chain heads.

mod common;

use common::{Db, admit, grant, h, root, tree};
use openshell_store::{AdmissionProof, NewChild, Verdict};

async fn db() -> Db {
    common::db(8).await
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
async fn sandboxes_fill_their_pages() {
    // No admission updates a row of sandboxes (the counters are in trees and parents), so its
    // pages keep no room for new row versions: 120 children take a handful of pages, not the
    // 41 that a fillfactor of 10 left them.
    let d = common::db(4).await;
    let lead = root(&d, "lead", Some(grant(2, 200, 200))).await;
    for i in 0..120 {
        admit(&d, lead, &format!("child-{i}"), "agent").await.unwrap();
    }
    let pages: i64 = d
        .sql
        .query_one("SELECT pg_relation_size('sandboxes') / current_setting('block_size')::bigint", &[])
        .await
        .unwrap()
        .get(0);
    assert!(pages <= 10, "121 sandboxes take {pages} heap pages");
}

#[tokio::test]
async fn an_admission_reads_no_page_of_other_trees_counters() {
    // SSI locks the index page a scan reads, and one page of trees_pkey, parents_pkey or
    // audit_chain_heads_pkey holds the rows of many trees: an admission that read it would
    // conflict with any other tree's admission that adds an entry there (a parent's first
    // child, a counter or chain head that moved to another heap page). The insert, the
    // counting trigger and the chain find their rows with a dirty snapshot (not locked), and
    // the trigger reports the counts itself, over whatever the caller set (any role may set a
    // custom setting: here a false 99).
    let d = common::db(4).await;
    let lead = root(&d, "lead", Some(grant(3, 50, 50))).await;
    admit(&d, lead, "first", "agent").await.unwrap();
    d.sql
        .batch_execute(&format!(
            "SET os.live_children = '99'; SET os.live_total = '99'; BEGIN ISOLATION LEVEL SERIALIZABLE; \
             SELECT admit_child(p_caller => ROW((SELECT id FROM users WHERE name = 'admin'), NULL, NULL)::os_caller, \
                 p_parent => 'lead', p_name => 'second', p_kind => 'agent', p_command => ARRAY['true'], \
                 p_policy => '{{\"version\": 1}}', p_policy_hash => sha256('p'), \
                 p_proof => ROW('{lead}', 1, 0, 'inherited')::os_admission_proof, \
                 p_credential_hash => sha256('second'), p_request_id => NULL, p_args_hash => sha256('second'), \
                 p_runner => 'test', p_template => NULL)"
        ))
        .await
        .unwrap();
    let locked = common::column(
        &d.sql,
        "SELECT DISTINCT relation::regclass::text FROM pg_locks \
          WHERE pid = pg_backend_pid() AND mode = 'SIReadLock' AND relation IS NOT NULL ORDER BY 1",
    )
    .await;
    let receipt: (i32, i32) = d
        .sql
        .query_one(
            "SELECT (details->>'live_children')::int, (details->>'live_total')::int FROM audit_log \
              WHERE action = 'sandbox.create_child' AND details->>'name' = 'second'",
            &[],
        )
        .await
        .map(|r| (r.get(0), r.get(1)))
        .unwrap();
    d.sql.batch_execute("ROLLBACK").await.unwrap();
    // The parent is read by key: the list is not empty.
    assert!(locked.contains(&"sandboxes_pkey".to_string()), "SIRead locks: {locked:?}");
    for shared in ["trees", "parents", "audit_chain_heads"] {
        assert!(!locked.iter().any(|r| r.starts_with(shared)), "SIRead locks: {locked:?}");
    }
    // The receipt records the counts as the trigger counted them.
    assert_eq!(receipt, (2, 2));
}
