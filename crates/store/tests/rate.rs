//! The per-sandbox tool-call rate (take_door_call): a token bucket per sandbox in PostgreSQL
//! at its tree's grant rate, shared by every gateway replica; a refusal names the rate and
//! when to retry.

mod common;

use common::*;
use openshell_store::{Code, GrantChange, Rate, Store};
use uuid::Uuid;

/// The program the tests' grants allow (`common::grant`).
const PROGRAM: &str = "/usr/bin/python3";

fn rate(calls: i32, period_s: i32) -> Rate {
    Rate { calls, period_s }
}

/// The door credential these tests give `sandbox` (see [`issue`]).
fn door(sandbox: Uuid) -> [u8; 32] {
    h(&format!("door-{sandbox}"))
}

async fn issue(d: &Db, sandbox: Uuid) {
    d.store.door_credential_issue(sandbox, &door(sandbox), 60).await.unwrap();
}

/// One tool call of `sandbox` through its door, as the gateway takes it.
async fn take(store: &Store, sandbox: Uuid) -> Result<(), openshell_store::Error> {
    store.take_door_call(&door(sandbox), sandbox, Some(PROGRAM)).await
}

#[tokio::test]
async fn a_sandbox_past_its_grant_rate_is_refused_with_the_rate_and_a_retry_after() {
    let d = db(4).await;
    let lead = root(&d, "lead", Some(openshell_store::GrantValues { rate: rate(3, 1), ..grant(1, 5, 5) })).await;
    let w = admit(&d, lead, "w", "agent").await.unwrap();
    issue(&d, lead).await;
    issue(&d, w).await;
    for _ in 0..3 {
        take(&d.store, lead).await.unwrap();
    }
    let e = take(&d.store, lead).await.unwrap_err();
    assert_eq!(e.code, Code::LimitReached, "{e}");
    assert!(e.message.contains("3/s"), "{e}");
    assert_eq!(e.details["limit"], "rate");
    assert_eq!(e.details["rate"], "3/s");
    let wait = e.details["retry_after_ms"].as_u64().unwrap();
    assert!((1..=334).contains(&wait), "one call refills in a third of a second: {wait}");
    // Each sandbox of the tree has its own bucket.
    take(&d.store, w).await.unwrap();
    // After the retry-after, one more call.
    tokio::time::sleep(std::time::Duration::from_millis(wait + 20)).await;
    take(&d.store, lead).await.unwrap();
    assert_eq!(take(&d.store, lead).await.unwrap_err().code, Code::LimitReached);
}

#[tokio::test]
async fn the_grant_sets_the_rate_and_a_change_applies_from_the_next_call() {
    let d = db(4).await;
    // Without a live grant (revoked here): the default, 10/s.
    let bare = root(&d, "bare", Some(grant(1, 5, 5))).await;
    d.store.revoke_grant(&d.admin, "bare").await.unwrap();
    issue(&d, bare).await;
    let mut refused = None;
    for _ in 0..60 {
        if let Err(e) = take(&d.store, bare).await {
            refused = Some(e);
            break;
        }
    }
    assert_eq!(refused.expect("a burst past 10 calls is refused").details["rate"], "10/s");

    let lead = root(&d, "lead", Some(openshell_store::GrantValues { rate: rate(1, 60), ..grant(1, 5, 5) })).await;
    issue(&d, lead).await;
    take(&d.store, lead).await.unwrap();
    let e = take(&d.store, lead).await.unwrap_err();
    assert_eq!(e.details["rate"], "1/min");
    assert!(e.details["retry_after_ms"].as_u64().unwrap() > 50_000, "{e}");
    let g = d
        .store
        .update_grant(&d.admin, "lead", &GrantChange { rate: Some(rate(100, 1)), ..Default::default() })
        .await
        .unwrap();
    assert_eq!(g.rate.to_string(), "100/s");
    // The bucket was empty; at the new rate it holds a call again within 10 ms (at 1/min it
    // would take a minute).
    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    take(&d.store, lead).await.unwrap();

    // Out of range is refused naming the field, in SQL, and changes nothing.
    let e = d
        .store
        .update_grant(&d.admin, "lead", &GrantChange { rate: Some(rate(0, 1)), ..Default::default() })
        .await
        .unwrap_err();
    assert_eq!((e.code, e.details["field"].as_str()), (Code::InvalidArgument, Some("rate")));
    let e = d
        .store
        .update_grant(&d.admin, "lead", &GrantChange { rate: Some(rate(5, 7)), ..Default::default() })
        .await
        .unwrap_err();
    assert_eq!(e.details["field"], "rate");
    assert_eq!(d.store.grant(&d.admin, "lead").await.unwrap().rate.to_string(), "100/s");
    let history: i64 =
        d.sql.query_one("SELECT count(*) FROM grant_history WHERE rate_calls = 100", &[]).await.unwrap().get(0);
    assert_eq!(history, 1, "the change is in the grant's history");
}

#[tokio::test]
async fn the_gateway_role_may_take_calls_but_not_touch_the_buckets() {
    let d = db(2).await;
    let lead = root(&d, "lead", Some(grant(1, 5, 5))).await;
    issue(&d, lead).await;
    d.sql.batch_execute("SET ROLE openshell_gateway").await.unwrap();
    d.sql.execute("SELECT take_door_call($1, $2, $3)", &[&door(lead).as_slice(), &lead, &PROGRAM]).await.unwrap();
    let e = d.sql.batch_execute("UPDATE sandbox_call_buckets SET tokens = 1000").await.unwrap_err();
    assert!(e.as_db_error().is_some_and(|d| d.code().code() == "42501"), "permission denied: {e:?}");
    let e = d.sql.batch_execute("SELECT door_credential_issue(NULL, NULL, 1)").await;
    assert!(e.is_err(), "argument checks still apply");
}

#[tokio::test]
async fn a_door_call_checks_its_credential_and_takes_from_its_sandboxs_bucket_in_one_call() {
    let d = db(4).await;
    let lead = root(&d, "lead", Some(openshell_store::GrantValues { rate: rate(2, 60), ..grant(1, 5, 5) })).await;
    let other = root(&d, "other", Some(grant(1, 5, 5))).await;
    d.store.door_credential_issue(lead, &[1; 32], 60).await.unwrap();
    d.store.door_credential_issue(other, &[2; 32], 60).await.unwrap();
    let tokens = || async {
        let r = d.sql.query_opt("SELECT tokens FROM sandbox_call_buckets WHERE sandbox_id = $1", &[&lead]).await;
        r.unwrap().map(|r| r.get::<_, f64>(0))
    };
    // Unknown, or another sandbox's: refused, and the bucket is not touched.
    for hash in [[9u8; 32], [2; 32]] {
        let e = d.store.take_door_call(&hash, lead, Some(PROGRAM)).await.unwrap_err();
        assert_eq!(e.code, Code::Unauthenticated, "{e}");
    }
    assert_eq!(tokens().await, None);
    d.store.take_door_call(&[1; 32], lead, Some(PROGRAM)).await.unwrap();
    d.store.take_door_call(&[1; 32], lead, Some(PROGRAM)).await.unwrap();
    assert_eq!(d.store.take_door_call(&[1; 32], lead, Some(PROGRAM)).await.unwrap_err().code, Code::LimitReached);
    // Revoked (two newer ones issued): refused before the bucket is asked.
    d.store.door_credential_issue(lead, &[3; 32], 60).await.unwrap();
    d.store.door_credential_issue(lead, &[4; 32], 60).await.unwrap();
    assert_eq!(d.store.take_door_call(&[1; 32], lead, Some(PROGRAM)).await.unwrap_err().code, Code::Unauthenticated);
}

#[tokio::test]
async fn door_calls_racing_from_two_replicas_take_exactly_the_rate_and_the_rest_learn_when_to_retry() {
    let d = db(8).await;
    let lead = root(&d, "lead", Some(openshell_store::GrantValues { rate: rate(10, 60), ..grant(1, 5, 5) })).await;
    d.store.door_credential_issue(lead, &[7; 32], 60).await.unwrap();
    let other = Store::connect(&d.db.url, 8).unwrap();
    // Forty calls at once on one bucket, half through each "replica": the single upsert
    // must neither lose a take (more than 10 pass) nor refuse one the bucket could pay.
    let calls = (0..40).map(|i| {
        let s = if i % 2 == 0 { d.store.clone() } else { other.clone() };
        tokio::spawn(async move { s.take_door_call(&[7; 32], lead, Some(PROGRAM)).await })
    });
    let results: Vec<_> = futures::future::join_all(calls).await.into_iter().map(Result::unwrap).collect();
    assert_eq!(results.iter().filter(|r| r.is_ok()).count(), 10, "the bucket's 10 calls: {results:?}");
    for e in results.iter().filter_map(|r| r.as_ref().err()) {
        assert_eq!(e.code, Code::LimitReached, "{e}");
        assert_eq!((e.details["limit"].as_str(), e.details["rate"].as_str()), (Some("rate"), Some("10/min")), "{e}");
        let wait = e.details["retry_after_ms"].as_u64().expect("retry_after_ms");
        // Empty at 10/min: the next call is at most 6 s away, and never "now".
        assert!((1..=6000).contains(&wait), "{wait}");
        assert!(e.message.contains("10/min") && e.message.contains("lead"), "{e}");
    }
    let tokens: f64 = d.sql.query_one("SELECT tokens FROM sandbox_call_buckets", &[]).await.unwrap().get(0);
    assert!((0.0..1.0).contains(&tokens), "{tokens}");
}

#[tokio::test]
async fn a_door_call_commits_without_waiting_for_the_wal_flush_and_only_that_transaction_does() {
    let d = db(2).await;
    let lead = root(&d, "lead", Some(grant(1, 5, 5))).await;
    d.store.door_credential_issue(lead, &[5; 32], 60).await.unwrap();
    let setting = || async {
        d.sql.query_one("SELECT current_setting('synchronous_commit')", &[]).await.unwrap().get::<_, String>(0)
    };
    // The production default, whatever the test cluster runs with.
    d.sql.batch_execute("SET synchronous_commit = on").await.unwrap();
    d.sql.batch_execute("BEGIN").await.unwrap();
    d.sql.execute("SELECT take_door_call($1, $2, $3)", &[&[5u8; 32].as_slice(), &lead, &PROGRAM]).await.unwrap();
    assert_eq!(setting().await, "off", "the bucket's commit does not wait for the WAL flush");
    d.sql.batch_execute("COMMIT").await.unwrap();
    assert_eq!(setting().await, "on", "the next transaction waits again");
    // A refused call changes nothing but still ends its transaction as it began.
    d.sql.batch_execute("BEGIN").await.unwrap();
    assert!(
        d.sql.execute("SELECT take_door_call($1, $2, $3)", &[&[6u8; 32].as_slice(), &lead, &PROGRAM]).await.is_err()
    );
    d.sql.batch_execute("ROLLBACK").await.unwrap();
    assert_eq!(setting().await, "on");
}

#[tokio::test]
async fn a_door_create_reads_its_parent_only_after_its_credential_and_bucket_passed() {
    let d = db(4).await;
    let lead = root(&d, "lead", Some(openshell_store::GrantValues { rate: rate(1, 60), ..grant(1, 5, 5) })).await;
    let other = root(&d, "other", Some(grant(1, 5, 5))).await;
    d.store.door_credential_issue(lead, &[8; 32], 60).await.unwrap();
    d.store.door_credential_issue(other, &[9; 32], 60).await.unwrap();
    let mut me = d.store.authenticate_door(&[8; 32]).await.unwrap().unwrap();
    if let openshell_store::Principal::Sandbox { program, .. } = &mut me {
        *program = Some(PROGRAM.into()); // as the gateway fills it from the door's header
    }
    let taken =
        || async { d.sql.query_one("SELECT count(*) FROM sandbox_call_buckets", &[]).await.unwrap().get::<_, i64>(0) };
    // Another sandbox's credential, or none: refused, nothing read, no bucket touched.
    for hash in [[9u8; 32], [0; 32]] {
        let e = d.store.door_parent_snapshot(&hash, &me, "").await.unwrap_err();
        assert_eq!(e.code, Code::Unauthenticated, "{e}");
    }
    assert_eq!(taken().await, 0);
    // A sandbox's parent is itself, whatever it names; the call is taken with the read.
    let p = d.store.door_parent_snapshot(&[8; 32], &me, "other").await.unwrap();
    assert_eq!((p.id, p.name.as_str()), (lead, "lead"));
    let e = d.store.door_parent_snapshot(&[8; 32], &me, "").await.unwrap_err();
    assert_eq!(
        (e.code, e.details["limit"].as_str(), e.details["rate"].as_str()),
        (Code::LimitReached, Some("rate"), Some("1/min"))
    );
    // A user is not a door caller, whatever credential hash comes with it.
    let e = d.store.door_parent_snapshot(&[8; 32], &d.admin, "lead").await.unwrap_err();
    assert_eq!(e.code, Code::Unauthenticated, "{e}");
}
