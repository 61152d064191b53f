//! A child's create in as few calls as it needs (`create_child`, sql/admission.sql): an
//! inheriting child is admitted in one call with its parent's current policy and comes back as
//! sandbox_view has it; anything to prove returns the snapshot first; a repeated request id
//! answers with the first child whatever changed since; an inheritance is never admitted
//! unproved under a global maximum.

mod common;

use common::{Db, grant, h, root};
use openshell_store::{ChildCreated, ChildPolicy, CreateChild, Phase, Verdict};

const COMMAND: &[String] = &[];

fn create<'a>(parent: &'a str, name: &'a str, policy: ChildPolicy<'a>, request_id: &'a str) -> CreateChild<'a> {
    CreateChild {
        parent,
        parent_id: None,
        door: None,
        name: Some(name),
        kind: openshell_store::Kind::Agent,
        command: COMMAND,
        policy,
        credential_hash: &[7; 32],
        request_id: Some(request_id),
        args_hash: &[1; 32],
        runner: "test",
        template: None,
    }
}

async fn children(d: &Db) -> i64 {
    d.sql.query_one("SELECT count(*) FROM sandboxes WHERE parent_id IS NOT NULL", &[]).await.unwrap().get(0)
}

#[tokio::test]
async fn an_inheriting_child_is_admitted_in_one_call_with_its_parents_policy() {
    let d = common::db(4).await;
    let lead = root(&d, "lead", Some(grant(2, 4, 8))).await;
    let command = vec!["sleep".to_string(), "9".to_string()];
    let new = CreateChild { command: &command, ..create("lead", "kid", ChildPolicy::Inherit, "r1") };
    let other =
        CreateChild { args_hash: &[2; 32], command: &command, ..create("lead", "kid2", ChildPolicy::Inherit, "r2") };
    let ChildCreated::Admitted { sandbox, replayed, inherited } = d.store.create_child(&d.admin, &new).await.unwrap()
    else {
        panic!("an inheriting child without a global maximum is admitted at once");
    };
    assert!(!replayed);
    assert_eq!(inherited, Some(serde_json::json!({"version": 1})), "the parent's policy comes back");
    // The answer is the row sandbox_view reads, built without reading the new row.
    assert_eq!(*sandbox, d.store.sandbox_by_id(sandbox.id).await.unwrap());
    assert_eq!((sandbox.parent_id, sandbox.parent_name.as_deref()), (Some(lead), Some("lead")));
    assert_eq!((sandbox.root_name.as_str(), sandbox.owner.as_str()), ("lead", "admin"));
    assert_eq!((sandbox.phase, sandbox.created_by.as_str()), (Phase::Provisioning, "user:admin"));
    assert_eq!(sandbox.policy_hash, hex::encode(h("p")));
    let row = d
        .sql
        .query_one(
            "SELECT c.document = p.document AND c.hash = p.hash, \
                    (SELECT details->>'verdict' FROM audit_log WHERE sandbox_id = c.sandbox_id \
                      AND action = 'sandbox.create_child') \
               FROM sandbox_policies c JOIN sandbox_policies p ON p.sandbox_id = $2 AND p.version = 1 \
              WHERE c.sandbox_id = $1",
            &[&sandbox.id, &lead],
        )
        .await
        .unwrap();
    assert!(row.get::<_, bool>(0), "the child's policy is its parent's, document and hash");
    assert_eq!(row.get::<_, String>(1), "inherited");

    // A repeat answers with the first child even once the parent is stopping (the request id
    // is claimed before anything else is checked), and admits nothing.
    d.store.begin_stop(&d.admin, "lead", false).await.unwrap();
    let ChildCreated::Admitted { sandbox: again, replayed, inherited } =
        d.store.create_child(&d.admin, &new).await.unwrap()
    else {
        panic!("a repeat is answered");
    };
    assert!(replayed && inherited.is_none());
    assert_eq!(again.id, sandbox.id);
    // Another name under the stopping parent is refused: the repeat was no bypass.
    let e = d.store.create_child(&d.admin, &other).await.unwrap_err();
    assert_eq!(e.details["reason"], "parent_not_running", "{e:?}");
    assert_eq!(children(&d).await, 1);
}

#[tokio::test]
async fn what_is_to_prove_comes_back_as_the_snapshot_first() {
    let d = common::db(4).await;
    let lead = root(&d, "lead", Some(grant(2, 4, 8))).await;
    // A policy of the child's own: the snapshot, nothing admitted.
    let ChildCreated::Prove(snap) =
        d.store.create_child(&d.admin, &create("lead", "a", ChildPolicy::Requested, "ra")).await.unwrap()
    else {
        panic!("an own policy is proved first");
    };
    assert_eq!((snap.id, snap.policy_version, snap.global_version), (lead, 1, 0));
    assert_eq!(children(&d).await, 0);
    // Inheriting under a global maximum: proved first too.
    let max = serde_json::json!({"version": 1});
    let version = d.store.set_global_max(&d.admin, Some((&max, &h("max")))).await.unwrap();
    let ChildCreated::Prove(snap) =
        d.store.create_child(&d.admin, &create("lead", "b", ChildPolicy::Inherit, "rb")).await.unwrap()
    else {
        panic!("an inheritance under a global maximum is proved first");
    };
    assert_eq!((snap.global_version, snap.global_policy.as_ref()), (version, Some(&max)));
    assert_eq!(children(&d).await, 0);
    // The proved admission, against that snapshot.
    let proof = openshell_store::AdmissionProof {
        parent_id: snap.id,
        parent_version: snap.policy_version,
        global_version: snap.global_version,
        verdict: Verdict::InheritedWithin,
    };
    let proved = ChildPolicy::Proved { policy: &snap.policy, hash: &[3; 32], proof };
    let command = vec!["sleep".to_string()];
    let new = CreateChild { command: &command, ..create("lead", "b", proved, "rb") };
    let ChildCreated::Admitted { sandbox, replayed, inherited } = d.store.create_child(&d.admin, &new).await.unwrap()
    else {
        panic!("a proved child is admitted");
    };
    assert!(!replayed && inherited.is_none());
    assert_eq!(*sandbox, d.store.sandbox_by_id(sandbox.id).await.unwrap());
    assert_eq!(sandbox.policy_hash, hex::encode([3u8; 32]));
}

#[tokio::test]
async fn an_inheritance_is_never_admitted_unproved_under_a_global_maximum() {
    // Past create_child's own check (a caller that asks the admission to inherit directly):
    // the admission itself refuses, to be proved.
    let d = common::db(4).await;
    let lead = root(&d, "lead", Some(grant(2, 4, 8))).await;
    d.store.set_global_max(&d.admin, Some((&serde_json::json!({"version": 1}), &h("max")))).await.unwrap();
    let stmt = format!(
        "SELECT outcome FROM create_child(p_caller => ROW((SELECT id FROM users WHERE name = 'admin'), NULL, NULL)::os_caller, \
         p_door => NULL, p_parent => 'lead', p_parent_id => NULL, p_name => 'x', p_kind => 'agent', \
         p_command => ARRAY['sleep'], p_policy => NULL, p_policy_hash => NULL, \
         p_proof => ROW('{lead}', NULL, NULL, 'inherited')::os_admission_proof, p_credential_hash => sha256('c'), \
         p_request_id => NULL, p_args_hash => sha256('a'), p_runner => 'test', p_template => NULL)"
    );
    let e = d.sql.query_one(&stmt, &[]).await.unwrap_err();
    let db = e.as_db_error().unwrap_or_else(|| panic!("{e}"));
    assert!(db.message().contains("global maximum policy is set"), "{}", db.message());
    assert_eq!(children(&d).await, 0);
}
