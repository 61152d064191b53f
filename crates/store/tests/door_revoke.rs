//! Revoking door credentials (sql/door.sql): a stop whose transaction began before a
//! credential was issued (it then waited for the sandbox's row the issue locked) still
//! revokes it, never failing the stop on the credential's time order.

mod common;

use common::*;

#[tokio::test]
async fn a_stop_that_began_before_an_issue_revokes_the_new_credential() {
    let d = db(4).await;
    let lead = root(&d, "lead", None).await;
    // The stop's transaction begins (and fixes its now()) before the credential exists.
    d.sql.batch_execute("BEGIN; SELECT now()").await.unwrap();
    tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    d.store.door_credential_issue(lead, &[7; 32], 60).await.unwrap();
    d.sql.query("SELECT * FROM system_stop(p_id => $1, p_reason => 'test')", &[&lead]).await.unwrap();
    d.sql.batch_execute("COMMIT").await.unwrap();
    let row = d
        .sql
        .query_one("SELECT revoked_at IS NOT NULL, revoked_at >= issued_at FROM door_credentials", &[])
        .await
        .unwrap();
    assert_eq!((row.get::<_, bool>(0), row.get::<_, bool>(1)), (true, true));
    let e = d.store.take_door_call(&[7; 32], lead, None).await.unwrap_err();
    assert_eq!(e.code, openshell_store::Code::Unauthenticated, "{e}");
}
