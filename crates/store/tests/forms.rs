//! A sandbox name's and a request_id's form, at the edges of each rule. The name's rule is
//! stated once (sql/names.sql): admit_child's early check (for its error message) and the
//! insert trigger (for every other inserter) refuse exactly the strings it refuses, with the
//! same error. The request_id's early check and the table's CHECK accept the same strings.

mod common;

use common::{Db, grant, h, root};
use openshell_store::{AdmissionProof, Code, NewChild, Verdict};
use uuid::Uuid;

/// Names on both sides of every part of the rule: 1 to 63 of A-Z, a-z, 0-9, ., _ or -,
/// starting with a letter or digit, and not shaped like an id.
fn names() -> Vec<(String, bool)> {
    vec![
        ("a".into(), true),
        ("A.b_c-9".into(), true),
        ("7up".into(), true),
        ("a".repeat(63), true),
        ("a".repeat(64), false),
        (".a".into(), false),
        ("-a".into(), false),
        ("_a".into(), false),
        ("a b".into(), false),
        ("a/b".into(), false),
        ("a\n".into(), false),
        ("é".into(), false),
        ("ab:c".into(), false),
        // 36 characters: an id's shape is refused, anything else of that length is a name.
        ("0123abcd-0123-4567-89ab-0123456789ab".into(), false),
        ("0123ABCD-0123-4567-89AB-0123456789AB".into(), false),
        ("0123abcg-0123-4567-89ab-0123456789ab".into(), true),
        ("0123abcd_0123-4567-89ab-0123456789ab".into(), true),
        ("a".repeat(36), true),
        ("0123abcd-0123-4567-89ab-0123456789abc".into(), true),
    ]
}

/// request_ids likewise: 1 to 128 of A-Z, a-z, 0-9, ., _, : or -.
fn request_ids() -> Vec<(String, bool)> {
    vec![
        ("r".into(), true),
        ("a:b.c_d-E9".into(), true),
        ("r".repeat(128), true),
        ("r".repeat(129), false),
        ("a b".into(), false),
        ("a/b".into(), false),
        ("a\n".into(), false),
        ("é".into(), false),
    ]
}

/// Admits `name` under `parent` as the admin, with `request_id`.
async fn admit_as(d: &Db, parent: Uuid, name: &str, request_id: Option<&str>) -> Result<Uuid, openshell_store::Error> {
    let command = ["sleep".to_string()];
    let policy = serde_json::json!({"version": 1});
    let (policy_hash, credential, args) = (h("p"), h(&format!("cred-{name}")), h(name));
    let parent_ref = parent.to_string();
    let new = NewChild {
        parent: &parent_ref,
        name: Some(name),
        kind: "agent".parse().unwrap(),
        command: &command,
        policy: &policy,
        policy_hash: &policy_hash,
        proof: AdmissionProof { parent_id: parent, parent_version: 1, global_version: 0, verdict: Verdict::Inherited },
        credential_hash: &credential,
        request_id,
        args_hash: &args,
        runner: "test",
        template: None,
    };
    d.store.admit_child(&d.admin, &new).await.map(|(id, _)| id)
}

/// Whether the table lets a bare `insert` (as a superuser would type it) through; rolled back
/// either way. A refusal is the CHECK named `constraint`, or (with `constraint` None) the rule's
/// own refusal, INVALID_ARGUMENT naming the field `name`.
async fn table_accepts(d: &Db, insert: &str, value: &str, parent: Uuid, constraint: Option<&str>) -> bool {
    d.sql.batch_execute("BEGIN").await.unwrap();
    let r = d.sql.execute(insert, &[&value, &parent]).await;
    d.sql.batch_execute("ROLLBACK").await.unwrap();
    match r {
        Ok(_) => true,
        Err(e) => {
            let db = e.as_db_error().unwrap_or_else(|| panic!("{value:?}: {e}"));
            match constraint {
                Some(c) => assert_eq!(db.constraint(), Some(c), "{value:?}: {e:?}"),
                None => {
                    let e = openshell_store::Error::from(e);
                    assert_eq!(e.code, Code::InvalidArgument, "{value:?}: {e:?}");
                    assert_eq!(e.details["field"], "name", "{value:?}: {e:?}");
                    assert!(e.message.contains("1 to 63"), "{value:?}: {e:?}");
                }
            }
            false
        }
    }
}

const RAW_CHILD: &str = "INSERT INTO sandboxes (name, owner_id, parent_id, root_id, depth, kind, command, created_by_user) \
                         VALUES ($1, 1, $2, $2, 1, 'agent', ARRAY['sh'], 1)";
const RAW_REQUEST: &str = "INSERT INTO create_requests (caller, request_id, args_hash, sandbox_id) \
                           VALUES ('user:1', $1, sha256('x'::bytea), $2)";

#[tokio::test]
async fn a_name_is_checked_by_its_one_rule_in_admission_and_for_every_inserter() {
    let d = common::db(4).await;
    let lead = root(&d, "lead", Some(grant(2, 100, 100))).await;
    for (name, valid) in names() {
        assert_eq!(table_accepts(&d, RAW_CHILD, &name, lead, None).await, valid, "{name:?}");
        match (admit_as(&d, lead, &name, None).await, valid) {
            (Ok(_), true) => {}
            (Err(e), false) => {
                assert_eq!(e.code, Code::InvalidArgument, "{name:?}: {e:?}");
                assert_eq!(e.details["field"], "name", "{name:?}: {e:?}");
                assert!(e.message.contains("1 to 63"), "{name:?}: {e:?}");
            }
            (r, _) => panic!("{name:?}: admission gave {r:?}, the rule says valid = {valid}"),
        }
    }
}

#[tokio::test]
async fn a_request_id_is_checked_by_the_same_rule_in_admission_replay_and_the_table() {
    let d = common::db(4).await;
    let lead = root(&d, "lead", Some(grant(2, 100, 100))).await;
    for (i, (request_id, valid)) in request_ids().into_iter().enumerate() {
        let r = table_accepts(&d, RAW_REQUEST, &request_id, lead, Some("create_requests_request_id_format")).await;
        assert_eq!(r, valid, "{request_id:?}");
        // A create's look-up before its proof holds the rule too.
        let replay = d.store.replayed(&d.admin, Some(&request_id), &h("x")).await;
        assert_eq!(replay.map_err(|e| e.code), if valid { Ok(None) } else { Err(Code::InvalidArgument) });
        match (admit_as(&d, lead, &format!("c{i}"), Some(&request_id)).await, valid) {
            (Ok(_), true) => {}
            (Err(e), false) => {
                assert_eq!(e.code, Code::InvalidArgument, "{request_id:?}: {e:?}");
                assert_eq!(e.details["field"], "request_id", "{request_id:?}: {e:?}");
            }
            (r, _) => panic!("{request_id:?}: admission gave {r:?}, the rule says valid = {valid}"),
        }
    }
    assert!(!table_accepts(&d, RAW_REQUEST, "", lead, Some("create_requests_request_id_format")).await);
}
