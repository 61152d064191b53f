//! What is kept for good (sql/append_only.sql): sandbox, grant, user and token rows stay, and
//! the audit log, the grant history, policy versions and request ids are append-only, whoever
//! asks, psql included.

mod common;

use common::{Db, fails, tree};

async fn db() -> Db {
    common::db(8).await
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
