//! The program check of every door call (take_door_call, sql/door.sql; os_check_program,
//! sql/grants.sql): whatever the tool, a call through the door from a program the tree's
//! grant does not allow is refused NOT_ALLOWED naming it, before the bucket is touched; a
//! tree never granted allows no program; a revoked or expired grant still names its program.

mod common;

use common::*;
use openshell_store::{Code, GrantChange};

const PROGRAM: &str = "/usr/bin/python3";

async fn bucket_rows(d: &Db) -> i64 {
    d.sql.query_one("SELECT count(*) FROM sandbox_call_buckets", &[]).await.unwrap().get(0)
}

#[tokio::test]
async fn a_door_call_from_another_program_is_refused_naming_it_before_the_bucket() {
    let d = db(4).await;
    let lead = root(&d, "lead", Some(grant(1, 5, 5))).await;
    d.store.door_credential_issue(lead, &[1; 32], 60).await.unwrap();
    for other in [Some("/work/py"), Some("/usr/bin/python3.11"), None] {
        let e = d.store.take_door_call(&[1; 32], lead, other).await.unwrap_err();
        assert_eq!((e.code, e.details["reason"].as_str()), (Code::NotAllowed, Some("program")), "{e}");
        assert!(e.message.contains(other.unwrap_or("unknown")) && e.message.contains(PROGRAM), "{e}");
        assert_eq!(e.details["program"], serde_json::json!(other), "{e}");
    }
    assert_eq!(bucket_rows(&d).await, 0, "a refused program takes nothing from the bucket");
    d.store.take_door_call(&[1; 32], lead, Some(PROGRAM)).await.unwrap();
    assert_eq!(bucket_rows(&d).await, 1);
    // A credential check still comes first: an unknown credential is UNAUTHENTICATED, whoever.
    let e = d.store.take_door_call(&[9; 32], lead, Some("/work/py")).await.unwrap_err();
    assert_eq!(e.code, Code::Unauthenticated, "{e}");

    // The grant's new program applies from the next call; the old one is refused.
    let change = GrantChange { program: Some(("/work/py".into(), "/work/py".into())), ..Default::default() };
    d.store.update_grant(&d.admin, "lead", &change).await.unwrap();
    d.store.take_door_call(&[1; 32], lead, Some("/work/py")).await.unwrap();
    let e = d.store.take_door_call(&[1; 32], lead, Some(PROGRAM)).await.unwrap_err();
    assert_eq!(e.details["reason"], "program", "{e}");
}

#[tokio::test]
async fn a_tree_never_granted_allows_no_program_and_a_revoked_grant_still_names_its_own() {
    let d = db(4).await;
    let bare = root(&d, "bare", None).await;
    d.store.door_credential_issue(bare, &[2; 32], 60).await.unwrap();
    let e = d.store.take_door_call(&[2; 32], bare, Some(PROGRAM)).await.unwrap_err();
    assert_eq!((e.code, e.details["reason"].as_str()), (Code::NotAllowed, Some("no_grant")), "{e}");
    assert!(e.message.contains("no grant") && e.message.contains(PROGRAM), "{e}");
    assert_eq!(bucket_rows(&d).await, 0);

    let lead = root(&d, "lead", Some(grant(1, 5, 5))).await;
    d.store.door_credential_issue(lead, &[3; 32], 60).await.unwrap();
    d.store.revoke_grant(&d.admin, "lead").await.unwrap();
    // The grant's program may still ask (and stop its children); another may not.
    d.store.take_door_call(&[3; 32], lead, Some(PROGRAM)).await.unwrap();
    let e = d.store.take_door_call(&[3; 32], lead, Some("/work/py")).await.unwrap_err();
    assert_eq!((e.code, e.details["reason"].as_str()), (Code::NotAllowed, Some("program")), "{e}");
}
