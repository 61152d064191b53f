//! The limits are held by the database's counters (sql/limits.sql), whoever writes: an operator inserting
//! straight into `sandboxes` meets the same grant, depth, breadth and total as
//! `admit_child`, and after any mix of creates, stops, errors and reconciles the counters
//! equal a recount (`os_recount()` returns no drift).

mod common;

use common::{Db, admit, grant, root};
use openshell_store::{Code, limit_of};
use uuid::Uuid;

const NOT_ALLOWED: &str = Code::NotAllowed.sqlstate();
const LIMIT_REACHED: &str = Code::LimitReached.sqlstate();

async fn db() -> Db {
    common::db(16).await
}

/// What an operator with write access would type: a bare INSERT of a child.
fn raw_insert(parent: Uuid, name: &str, kind: &str) -> String {
    format!(
        "INSERT INTO sandboxes (name, owner_id, parent_id, root_id, depth, kind, command, created_by_user) \
         VALUES ('{name}', 1, '{parent}', '{parent}', 1, '{kind}', ARRAY['sh'], 1)"
    )
}

/// The SQLSTATE, message and DETAIL of a failed statement.
async fn refusal(sql: &tokio_postgres::Client, stmt: &str) -> (String, String, serde_json::Value) {
    let e = sql.batch_execute(stmt).await.expect_err(stmt);
    let db = e.as_db_error().unwrap_or_else(|| panic!("{stmt}: {e}"));
    let details = db.detail().and_then(|d| serde_json::from_str(d).ok()).unwrap_or(serde_json::json!({}));
    (db.code().code().to_string(), db.message().to_string(), details)
}

async fn drift(sql: &tokio_postgres::Client) -> Vec<String> {
    sql.query("SELECT counter || ' ' || id || ': stored ' || coalesce(stored::text, 'none') || ', counted ' || counted FROM os_recount()", &[])
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect()
}

async fn count(sql: &tokio_postgres::Client, q: &str) -> i64 {
    sql.query_one(q, &[]).await.unwrap().get(0)
}

#[tokio::test]
async fn a_direct_insert_from_psql_is_held_to_the_grant_and_its_limits() {
    let d = db().await;
    let bare = root(&d, "bare", None).await;
    let (code, msg, det) = refusal(&d.sql, &raw_insert(bare, "x", "agent")).await;
    assert_eq!((code.as_str(), det["reason"].as_str()), (NOT_ALLOWED, Some("no_grant")), "{msg}");

    let flat = root(&d, "flat", Some(grant(1, 0, 3))).await;
    let (code, msg, det) = refusal(&d.sql, &raw_insert(flat, "x", "agent")).await;
    assert_eq!((code.as_str(), det["limit"].as_str()), (LIMIT_REACHED, Some("breadth")), "{msg}");

    let lead = root(&d, "lead", Some(grant(1, 2, 3))).await;
    d.sql.batch_execute(&raw_insert(lead, "w1", "agent")).await.unwrap();
    d.sql.batch_execute(&raw_insert(lead, "w2", "agent")).await.unwrap();
    // What get_grant shows is the counters'.
    let g = d.store.grant_status(&d.admin, Some("lead")).await.unwrap();
    assert_eq!((g.live_children, g.live_total, g.remaining_breadth), (2, 2, 0));
    let (code, msg, det) = refusal(&d.sql, &raw_insert(lead, "w3", "agent")).await;
    assert_eq!(code, LIMIT_REACHED, "{msg}");
    assert_eq!(
        (det["limit"].as_str(), det["max"].as_i64(), det["current"].as_i64()),
        (Some("breadth"), Some(2), Some(2))
    );

    let w1: Uuid = d.sql.query_one("SELECT id FROM sandboxes WHERE name = 'w1'", &[]).await.unwrap().get(0);
    let (code, msg, det) = refusal(&d.sql, &raw_insert(w1, "deep", "agent")).await;
    assert_eq!((code.as_str(), det["limit"].as_str()), (LIMIT_REACHED, Some("depth")), "{msg}");
    // A tool ignores depth but counts against total: the third descendant fits, a fourth does not.
    d.sql.batch_execute(&raw_insert(w1, "t1", "tool")).await.unwrap();
    let (code, msg, det) = refusal(&d.sql, &raw_insert(w1, "t2", "tool")).await;
    assert_eq!(
        (code.as_str(), det["limit"].as_str(), det["current"].as_i64()),
        (LIMIT_REACHED, Some("total"), Some(3)),
        "{msg}"
    );

    // A stop frees a slot for the next insert, psql or gateway alike.
    d.store.system_stop(w1, "test").await.unwrap();
    let (_, _, det) = refusal(&d.sql, &raw_insert(lead, "w3", "agent")).await;
    assert_eq!(det["limit"], "breadth", "STOPPING is still live");
    for id in d.store.system_stop(w1, "test").await.unwrap() {
        d.store.finish_stop(id.id).await.unwrap();
    }
    d.sql.batch_execute(&raw_insert(lead, "w3", "agent")).await.unwrap();
    let e = admit(&d, lead, "w4", "agent").await.unwrap_err();
    assert_eq!(e.details["limit"], "breadth", "{e:?}");

    // Revoked grants admit nothing, whatever inserts.
    d.sql
        .batch_execute("UPDATE grants SET ended_at = now(), end_reason = 'revoked' WHERE ended_at IS NULL")
        .await
        .unwrap();
    d.sql.batch_execute("UPDATE grants SET max_breadth = 10").await.unwrap_err();
    let (code, msg, det) = refusal(&d.sql, &raw_insert(lead, "late", "tool")).await;
    assert_eq!((code.as_str(), det["reason"].as_str()), (NOT_ALLOWED, Some("revoked")), "{msg}");

    // Nothing refused left a row, and the counters were never bypassed.
    assert_eq!(count(&d.sql, "SELECT count(*) FROM sandboxes WHERE parent_id IS NOT NULL").await, 4);
    assert_eq!(drift(&d.sql).await, Vec::<String>::new());
}

#[tokio::test]
async fn counters_cannot_be_written_by_hand() {
    let d = db().await;
    let lead = root(&d, "lead", Some(grant(1, 5, 1))).await;
    admit(&d, lead, "w1", "agent").await.unwrap();
    for stmt in [
        format!("UPDATE parents SET live_children = 0 WHERE parent_id = '{lead}'"),
        "DELETE FROM parents".to_string(),
        "TRUNCATE parents".to_string(),
        format!(
            "INSERT INTO parents (parent_id, live_children) VALUES ('{lead}', 0) \
             ON CONFLICT (parent_id) DO UPDATE SET live_children = 0"
        ),
        "UPDATE trees SET live_total = 0".to_string(),
        "UPDATE trees SET admitted_max_total = 100".to_string(),
        "DELETE FROM trees".to_string(),
        "TRUNCATE trees".to_string(),
        format!("INSERT INTO trees (root_id) VALUES ('{lead}')"),
    ] {
        let (code, msg, _) = refusal(&d.sql, &stmt).await;
        assert_eq!(code, NOT_ALLOWED, "{stmt}: {msg}");
    }
    let e = admit(&d, lead, "w2", "agent").await.unwrap_err();
    assert_eq!(e.details["limit"], "total", "{e:?}");
    assert_eq!(drift(&d.sql).await, Vec::<String>::new());
}

#[tokio::test]
async fn a_lowered_limit_stays_allowed_and_applies_from_the_next_create() {
    let d = db().await;
    let lead = root(&d, "lead", Some(grant(1, 5, 5))).await;
    for i in 0..3 {
        admit(&d, lead, &format!("w{i}"), "agent").await.unwrap();
    }
    d.sql.batch_execute("UPDATE grants SET max_total = 1").await.unwrap();
    let e = admit(&d, lead, "w9", "agent").await.unwrap_err();
    assert_eq!((e.details["limit"].as_str(), e.details["current"].as_i64()), (Some("total"), Some(3)), "{e:?}");
    // Stops bring the tree under the lowered limit; only then does a create fit again.
    for name in ["w0", "w1", "w2"] {
        for item in d.store.system_stop(d.store.sandbox(&d.admin, name).await.unwrap().id, "t").await.unwrap() {
            d.store.finish_stop(item.id).await.unwrap();
        }
        let e = admit(&d, lead, "w9", "agent").await;
        assert_eq!(e.is_ok(), name == "w2", "{name}: {e:?}");
    }
}

/// psql sessions default to READ COMMITTED: concurrent raw inserts still cannot pass the
/// limit, because the count and the check are one guarded UPDATE of the tree's row.
#[tokio::test]
async fn concurrent_direct_inserts_in_read_committed_never_exceed_the_limit() {
    let d = db().await;
    let lead = root(&d, "lead", Some(grant(1, 100, 7))).await;
    let mut tasks = Vec::new();
    for i in 0..24 {
        let url = d.db.url.clone();
        tasks.push(tokio::spawn(async move {
            let (c, conn) = tokio_postgres::connect(&url, tokio_postgres::NoTls).await.unwrap();
            tokio::spawn(conn);
            c.batch_execute("SET default_transaction_isolation = 'read committed'").await.unwrap();
            c.batch_execute(&raw_insert(lead, &format!("c{i}"), "agent"))
                .await
                .map_err(|e| e.as_db_error().map(|e| e.code().code().to_string()).unwrap_or_else(|| e.to_string()))
        }));
    }
    let mut admitted = 0;
    for t in tasks {
        match t.await.unwrap() {
            Ok(()) => admitted += 1,
            Err(code) => assert_eq!(code, LIMIT_REACHED),
        }
    }
    assert_eq!(admitted, 7);
    assert_eq!(count(&d.sql, &format!("SELECT count(*) FROM sandboxes WHERE parent_id = '{lead}'")).await, 7);
    assert_eq!(drift(&d.sql).await, Vec::<String>::new());
}

/// A deterministic pseudo-random walk (xorshift) over creates, user stops, errors and
/// reconciler finishes across three trees; after every step the counters equal a recount.
#[tokio::test]
async fn counters_equal_a_recount_after_any_sequence_of_creates_stops_errors_and_reconciles() {
    let d = db().await;
    for r in 0..3 {
        root(&d, &format!("r{r}"), Some(grant(3, 3, 8))).await;
    }
    let mut x: u64 = 0x9e3779b97f4a7c15;
    let mut next = |n: usize| {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        (x % n as u64) as usize
    };
    let (mut created, mut refused) = (0, 0);
    for step in 0..200 {
        let running: Vec<Uuid> = d
            .sql
            .query("SELECT id FROM sandboxes WHERE phase IN ('PROVISIONING', 'READY') ORDER BY id", &[])
            .await
            .unwrap()
            .iter()
            .map(|r| r.get(0))
            .collect();
        if running.is_empty() {
            root(&d, &format!("r{step}"), Some(grant(3, 3, 8))).await;
            continue;
        }
        let target = running[next(running.len())];
        match next(10) {
            0..=6 => match admit(&d, target, &format!("s{step}"), if next(4) == 0 { "tool" } else { "agent" }).await {
                Ok(_) => created += 1,
                Err(_) => refused += 1,
            },
            7 => {
                d.store.system_stop(target, "walk").await.unwrap();
            }
            8 => {
                d.store.mark_error(target, "walk").await.unwrap();
            }
            _ => {
                // The reconciler's part: finish every STOPPING row whose children are gone.
                let stopping: Vec<Uuid> = d
                    .sql
                    .query("SELECT id FROM sandboxes WHERE phase = 'STOPPING' ORDER BY depth DESC", &[])
                    .await
                    .unwrap()
                    .iter()
                    .map(|r| r.get(0))
                    .collect();
                for id in stopping {
                    d.store.finish_stop(id).await.unwrap();
                }
            }
        }
        let drift = drift(&d.sql).await;
        assert!(drift.is_empty(), "step {step}: {drift:?}");
    }
    assert!(created > 20 && refused > 5, "the walk exercised both ({created} created, {refused} refused)");
    // The walk never exceeded a grant: every tree's live descendants within 8.
    let over = count(
        &d.sql,
        "SELECT count(*) FROM (SELECT root_id FROM sandboxes WHERE parent_id IS NOT NULL AND os_is_live(phase) \
          GROUP BY root_id HAVING count(*) > 8) o",
    )
    .await;
    assert_eq!(over, 0);
}

/// os_recount can fail: counters bypassed with the triggers off (what only a superuser can
/// do) show up as drift, naming the counter and the row.
#[tokio::test]
async fn recount_reports_drift_when_the_triggers_were_bypassed() {
    let d = db().await;
    let lead = root(&d, "lead", Some(grant(1, 5, 5))).await;
    admit(&d, lead, "w1", "agent").await.unwrap();
    d.sql
        .batch_execute(&format!(
            "SET session_replication_role = replica; {}; SET session_replication_role = origin",
            raw_insert(lead, "sneaky", "agent")
        ))
        .await
        .unwrap();
    let mut drift = drift(&d.sql).await;
    drift.sort();
    assert_eq!(
        drift,
        [format!("live_children {lead}: stored 1, counted 2"), format!("live_total {lead}: stored 1, counted 2")]
    );
}

/// The parent must be running when its child is admitted, even against a stop that does not
/// go through the gateway (an operator's UPDATE, which takes no tree row): the admission
/// waits for the stop's transaction, then is refused; it never admits a child under a parent
/// whose stop committed first.
#[tokio::test]
async fn an_admission_waits_for_a_direct_stop_of_its_parent_and_is_refused() {
    let d = db().await;
    let lead = root(&d, "lead", Some(grant(2, 5, 5))).await;
    admit(&d, lead, "w1", "agent").await.unwrap();
    // Its credential already cleared, the stop changes no key the foreign key check's lock
    // would wait for: only the parent's own lock holds the admission.
    d.sql.batch_execute(&format!("UPDATE sandboxes SET credential_hash = NULL WHERE id = '{lead}'")).await.unwrap();
    d.sql.batch_execute(&format!("BEGIN; UPDATE sandboxes SET phase = 'STOPPING' WHERE id = '{lead}'")).await.unwrap();
    let racing = admit(&d, lead, "w2", "agent");
    tokio::pin!(racing);
    let early = tokio::time::timeout(std::time::Duration::from_millis(500), &mut racing).await;
    assert!(early.is_err(), "the admission must wait for the stop's transaction: {early:?}");
    d.sql.batch_execute("COMMIT").await.unwrap();
    let e = racing.await.unwrap_err();
    assert_eq!(e.details["reason"], "parent_not_running", "{e:?}");
    assert_eq!(count(&d.sql, "SELECT count(*) FROM sandboxes WHERE parent_id IS NOT NULL").await, 1);
}

#[tokio::test]
async fn children_admitted_counts_the_receipts_naming_each_grant() {
    let d = common::db(4).await;
    let lead = root(&d, "lead", Some(grant(2, 5, 5))).await;
    let other = root(&d, "other", Some(grant(2, 5, 5))).await;
    admit(&d, lead, "a1", "agent").await.unwrap();
    admit(&d, lead, "a2", "tool").await.unwrap();
    admit(&d, other, "o1", "agent").await.unwrap();
    // A refusal is no admission.
    admit(&d, lead, "a1", "agent").await.unwrap_err();
    assert_eq!(d.store.grant(&d.admin, "lead").await.unwrap().children_admitted, 2);
    assert_eq!(d.store.grant(&d.admin, "other").await.unwrap().children_admitted, 1);

    // A new grant starts from none; the ended one keeps its count.
    d.store.revoke_grant(&d.admin, "lead").await.unwrap();
    d.store.create_grant(&d.admin, "lead", &grant(2, 5, 5)).await.unwrap();
    assert_eq!(d.store.grant(&d.admin, "lead").await.unwrap().children_admitted, 0);
    admit(&d, lead, "a3", "agent").await.unwrap();
    let mut counts: Vec<i64> =
        d.store.list_grants(&d.admin, Some("lead")).await.unwrap().iter().map(|g| g.children_admitted).collect();
    counts.sort();
    assert_eq!(counts, [1, 2]);

    // Admission writes no grant row any more.
    let column: i64 = d
        .sql
        .query_one(
            "SELECT count(*) FROM pg_attribute WHERE attrelid = 'grants'::regclass AND attname = 'children_admitted' \
                AND NOT attisdropped",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(column, 0);
}

#[tokio::test]
async fn every_admission_receipt_carries_its_limits_whoever_writes_it() {
    let d = common::db(4).await;
    let lead = root(&d, "lead", Some(grant(3, 4, 6))).await;
    let child = admit(&d, lead, "a1", "agent").await.unwrap();
    let limits = |id: uuid::Uuid| {
        let sql = &d.sql;
        async move {
            let r = sql
                .query_one(
                    "SELECT (details->>'max_depth')::int, (details->>'max_breadth')::int, (details->>'max_total')::int \
                       FROM audit_log WHERE sandbox_id = $1 AND action = 'sandbox.create_child' AND outcome = 'admitted'",
                    &[&id],
                )
                .await
                .unwrap();
            (r.get::<_, Option<i32>>(0), r.get::<_, Option<i32>>(1), r.get::<_, Option<i32>>(2))
        }
    };
    assert_eq!(limits(child).await, (Some(3), Some(4), Some(6)), "admit_child's receipt");

    // A receipt written by hand without them gets the grant's.
    let by_hand = admit(&d, lead, "a2", "agent").await.unwrap();
    d.sql
        .execute(
            "INSERT INTO audit_log (action, outcome, actor_user, sandbox_id, parent_id, root_id, details) \
             VALUES ('sandbox.create_child', 'admitted', 1, $1, $2, $2, '{\"note\": \"by hand\"}')",
            &[&by_hand, &lead],
        )
        .await
        .unwrap();
    let filled = d
        .sql
        .query_one("SELECT details FROM audit_log WHERE sandbox_id = $1 AND details->>'note' = 'by hand'", &[&by_hand])
        .await
        .unwrap()
        .get::<_, serde_json::Value>(0);
    assert_eq!(
        (filled["max_depth"].as_i64(), filled["max_breadth"].as_i64(), filled["max_total"].as_i64()),
        (Some(3), Some(4), Some(6)),
        "{filled}"
    );
}

#[tokio::test]
async fn a_limit_constraint_is_limit_reached_naming_its_limit() {
    let d = common::db(4).await;
    let lead = root(&d, "lead", Some(grant(1, 5, 5))).await;
    admit(&d, lead, "a1", "agent").await.unwrap();
    // Past the counting triggers (a superuser's replica mode), the CHECK still holds the count.
    let e = d
        .sql
        .batch_execute(&format!(
            "SET session_replication_role = replica; \
             UPDATE trees SET live_total = admitted_max_total + 1 WHERE root_id = '{lead}'"
        ))
        .await
        .unwrap_err();
    d.sql.batch_execute("RESET session_replication_role").await.unwrap();
    assert_eq!(e.as_db_error().and_then(|db| db.constraint()), Some("trees_total_limit"), "{e:?}");
    let e = openshell_store::Error::from(e);
    assert_eq!(e.code, Code::LimitReached, "{e:?}");
    assert_eq!(e.details["limit"], "total", "{e:?}");
    assert_eq!(e.details["constraint"], "trees_total_limit", "{e:?}");

    // Any other CHECK is malformed input.
    let e = d.sql.batch_execute("UPDATE grants SET max_total = -1").await.unwrap_err();
    let e = openshell_store::Error::from(e);
    assert_eq!(e.code, Code::InvalidArgument, "{e:?}");

    // Every limit constraint of the schema follows the rule the mapping reads.
    let limits = common::column(
        &d.sql,
        "SELECT conrelid::regclass::text || ' ' || conname FROM pg_constraint \
          WHERE contype = 'c' AND connamespace = 'public'::regnamespace AND conname ~ 'limit'",
    )
    .await;
    assert!(!limits.is_empty());
    for l in limits {
        let (table, name) = l.split_once(' ').unwrap();
        let limit = limit_of(name).unwrap_or_else(|| panic!("{name}: not {{table}}_{{limit}}_limit"));
        assert_eq!(name, format!("{table}_{limit}_limit"));
    }
    assert_eq!(limit_of("sandboxes_name_format"), None);
    assert_eq!(limit_of("limit"), None);
    assert_eq!(limit_of("x_limit_y"), None);
}
