//! V20's cheaper admission path keeps what the old one recorded: a grant's children_admitted
//! counts the receipts naming it, every admission receipt carries its limits whoever writes
//! it, a violated limit constraint is LIMIT_REACHED naming the limit, and a user's id stays
//! fixed through os_refuse. Sandboxes, which no admission updates, fills its pages, and an
//! admission takes no SSI lock on the parents counters.

mod common;

use common::{Db, admit, grant, root};
use openshell_store::{Code, limit_of};

async fn db() -> Db {
    common::db(4).await
}

#[tokio::test]
async fn children_admitted_counts_the_receipts_naming_each_grant() {
    let d = db().await;
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
    let d = db().await;
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
    let d = db().await;
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

#[tokio::test]
async fn a_user_id_is_fixed_through_os_refuse() {
    let d = db().await;
    let e = d.sql.batch_execute("UPDATE users SET id = DEFAULT WHERE id = 1").await.unwrap_err();
    let db = e.as_db_error().unwrap();
    assert_eq!(db.code().code(), Code::NotAllowed.sqlstate(), "{e:?}");
    assert!(db.message().contains("id is fixed"), "{}", db.message());
    assert_eq!(openshell_store::Error::from(e).code, Code::NotAllowed);
}

#[tokio::test]
async fn a_childs_creating_user_is_checked_unless_it_is_the_childs_owner() {
    let d = db().await;
    let lead = root(&d, "lead", Some(grant(1, 5, 5))).await;
    let insert = |name: &str, creator: i64| {
        format!(
            "INSERT INTO sandboxes (name, owner_id, parent_id, root_id, depth, kind, command, created_by_user) \
             VALUES ('{name}', 1, '{lead}', '{lead}', 1, 'agent', ARRAY['sh'], {creator})"
        )
    };
    let e = d.sql.batch_execute(&insert("ghost-made", 424242)).await.unwrap_err();
    let db = e.as_db_error().unwrap();
    assert_eq!((db.code().code(), db.constraint()), ("23503", Some("sandboxes_creator_user_fkey")), "{e:?}");
    // Its owner (the parent's, an existing user) needs no look-up, and passes.
    d.sql.batch_execute(&insert("owner-made", 1)).await.unwrap();
}

#[tokio::test]
async fn sandboxes_fill_their_pages() {
    // No admission updates a row of sandboxes (the counters are in trees and parents), so its
    // pages keep no room for new row versions: 120 children take a handful of pages, not the
    // 41 that V9's fillfactor of 10 left them.
    let d = db().await;
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
async fn an_admission_reads_no_page_of_other_parents_counters() {
    // SSI locks the index page a scan reads, and one page of parents_pkey holds the counters
    // of many parents of every tree: an admission that read it would conflict with any
    // other tree's first child (a new entry on that page). The counting trigger finds the
    // parent's row with a dirty snapshot (not locked) and reports the count itself, over
    // whatever the caller set (any role may set a custom setting: here a false 99).
    let d = db().await;
    let lead = root(&d, "lead", Some(grant(3, 50, 50))).await;
    admit(&d, lead, "first", "agent").await.unwrap();
    d.sql
        .batch_execute(&format!(
            "SET os.live_children = '99'; BEGIN ISOLATION LEVEL SERIALIZABLE; \
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
    let receipt: i32 = d
        .sql
        .query_one(
            "SELECT (details->>'live_children')::int FROM audit_log \
              WHERE action = 'sandbox.create_child' AND details->>'name' = 'second'",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    d.sql.batch_execute("ROLLBACK").await.unwrap();
    // The tree's own row is read (and locked) by key: the list is not empty.
    assert!(locked.contains(&"trees_pkey".to_string()), "SIRead locks: {locked:?}");
    assert!(!locked.iter().any(|r| r.starts_with("parents")), "SIRead locks: {locked:?}");
    // The receipt records the parent's live children as the trigger counted them.
    assert_eq!(receipt, 2);
}
