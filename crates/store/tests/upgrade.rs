//! Upgrades in the field: a database that a build of migration 28 (before sql/ existed) set up
//! and used, then started by this build, ends with exactly the schema of a fresh one (every
//! function, trigger, view, grant, comment, constraint and index: the two `pg_dump`s are
//! equal), its rows intact, and its trees still held to their grants.

mod common;

use common::{Db, grant, h};
use openshell_store::{Code, GrantValues, OWNER_ROLE, Principal, Store};
use uuid::Uuid;

mod embedded {
    refinery::embed_migrations!("../../migrations");
}

/// What the build of migration 28 ran at start: the migrations up to the roles as the login,
/// then the rest as the owner (its `Store::migrate`), and nothing of sql/.
async fn migrate_as_v28_did(url: &str) {
    let (mut client, conn) = tokio_postgres::connect(url, tokio_postgres::NoTls).await.unwrap();
    let conn = tokio::spawn(conn);
    embedded::migrations::runner().set_target(refinery::Target::Version(6)).run_async(&mut client).await.unwrap();
    client.batch_execute(&format!("SET ROLE {OWNER_ROLE}")).await.unwrap();
    embedded::migrations::runner().set_target(refinery::Target::Version(28)).run_async(&mut client).await.unwrap();
    drop(client);
    let _ = conn.await;
}

/// A root with its grant as that build created it: its create_root took the grant as a JSON
/// object (this build's takes an `os_grant_values`, sql/admission.sql).
async fn root_as_v28_did(d: &Db, name: &str, g: GrantValues) -> Uuid {
    let Principal::User { id: admin, .. } = d.admin else { panic!("the admin is a user") };
    let grant = serde_json::json!({
        "max_depth": g.max_depth, "max_breadth": g.max_breadth, "max_total": g.max_total,
        "expires_at": g.expires_at, "program": g.program, "program_resolved": g.program_resolved,
        "rate_calls": g.rate.calls, "rate_period_s": g.rate.period_s, "tool_idle_seconds": g.tool_idle_seconds,
    });
    let (policy_hash, credential_hash, args_hash) = (h("p"), h(&format!("cred-{name}")), h(name));
    d.sql
        .query_one(
            "SELECT sandbox_id FROM create_root(p_caller => ROW($1::bigint, NULL::uuid, NULL::text)::os_caller, \
                    p_name => $2, p_command => ARRAY['sleep'], p_template => '{}', p_policy => '{\"version\": 1}', \
                    p_policy_hash => $3, p_credential_hash => $4, p_request_id => NULL, p_args_hash => $5, \
                    p_grant => $6, p_runner => 'test', p_proof => ROW(0, 'no_global_max')::os_root_proof)",
            &[&admin, &name, &policy_hash.as_slice(), &credential_hash.as_slice(), &args_hash.as_slice(), &grant],
        )
        .await
        .unwrap()
        .get(0)
}

/// One table's rows: its name, the columns read, how many rows and their digest.
type Rows = (String, Vec<String>, i64, String);

/// Every table's rows as one digest per table (the bookkeeping of migrations and
/// definitions aside, which an upgrade adds to).
async fn rows(sql: &tokio_postgres::Client) -> Vec<Rows> {
    let tables = common::column(
        sql,
        "SELECT c.relname::text FROM pg_class c WHERE c.relnamespace = 'public'::regnamespace AND c.relkind = 'r' \
            AND c.relname NOT IN ('refinery_schema_history', 'sql_revisions') ORDER BY 1",
    )
    .await;
    let mut out = Vec::new();
    for t in tables {
        let cols = common::column(
            sql,
            &format!("SELECT attname::text FROM pg_attribute WHERE attrelid = '{t}'::regclass AND attnum > 0 AND NOT attisdropped ORDER BY attnum"),
        )
        .await;
        out.push(digest(sql, &t, cols).await);
    }
    out
}

/// The same tables' rows read through the same columns, so columns an upgrade adds (the
/// audit chain's, which old receipts leave empty) do not hide a changed old value.
async fn rows_as(sql: &tokio_postgres::Client, before: &[Rows]) -> Vec<Rows> {
    let mut out = Vec::new();
    for (t, cols, _, _) in before {
        out.push(digest(sql, t, cols.clone()).await);
    }
    out
}

async fn digest(sql: &tokio_postgres::Client, table: &str, cols: Vec<String>) -> Rows {
    let list = cols.iter().map(|c| format!("t.{c}")).collect::<Vec<_>>().join(", ");
    let row = sql
        .query_one(
            &format!(
                "SELECT count(*), coalesce(md5(string_agg(r::text, '|' ORDER BY r::text)), '') \
                   FROM (SELECT ROW({list}) AS r FROM {table} t) x"
            ),
            &[],
        )
        .await
        .unwrap();
    (table.to_string(), cols, row.get(0), row.get(1))
}

#[tokio::test]
async fn a_database_of_migration_28_upgrades_to_what_a_fresh_one_is_with_its_rows() {
    let old = openshell_testkit::fresh_database().await;
    migrate_as_v28_did(&old.url).await;
    let version: i32 =
        old.connect().await.query_one("SELECT max(version) FROM refinery_schema_history", &[]).await.unwrap().get(0);
    assert_eq!(version, 28);

    // Used as that build used it: users, trees with grants, children, a request id, a stop.
    let store = Store::connect(&old.url, 2).unwrap();
    assert!(store.bootstrap_admin("admin", &h("admin-token")).await.unwrap());
    let admin = store.authenticate(&h("admin-token")).await.unwrap().unwrap();
    let d = Db { sql: old.connect().await, db: old, store, admin };
    let lead = root_as_v28_did(&d, "lead", grant(2, 2, 3)).await;
    let other = root_as_v28_did(&d, "other", grant(1, 5, 5)).await;
    let c1 = common::admit(&d, lead, "c1", "agent").await.unwrap();
    common::admit(&d, c1, "c1a", "tool").await.unwrap();
    let c2 = common::admit(&d, lead, "c2", "agent").await.unwrap();
    common::admit(&d, other, "o1", "agent").await.unwrap();
    d.store.begin_stop(&d.admin, &c2.to_string(), false).await.unwrap();
    d.store.finish_stop(c2).await.unwrap();
    let before = rows(&d.sql).await;
    assert!(before.iter().any(|(t, _, n, _)| t == "sandboxes" && *n == 6), "{before:?}");

    // This build starts on it.
    d.store.migrate().await.unwrap();
    assert_eq!(rows_as(&d.sql, &before).await, before, "the upgrade changed rows");
    let added: Vec<String> =
        rows(&d.sql).await.into_iter().map(|r| r.0).filter(|t| !before.iter().any(|b| &b.0 == t)).collect();
    assert_eq!(added, ["audit_chain_heads", "audit_chain_origin"]);
    // Old receipts stay outside the chain, which begins after the last of them.
    let origin =
        common::column(&d.sql, "SELECT (before_id = (SELECT max(id) FROM audit_log))::text FROM audit_chain_origin")
            .await;
    assert_eq!(origin, ["true"]);
    let fresh = common::db(1).await;
    let (upgraded, made) = (common::schema_dump(&d.db.url), common::schema_dump(&fresh.db.url));
    assert!(upgraded == made, "upgraded and fresh schemas differ:\n{}", common::diff(&made, &upgraded));
    assert_eq!(common::catalog(&d.sql).await, common::catalog(&fresh.sql).await);
    assert_eq!(d.store.definitions_drift().await.unwrap(), Vec::<String>::new());

    // The trees are held to their grants by the new definitions, counting the old rows.
    let e = common::admit(&d, lead, "c3", "agent").await.unwrap();
    let full = common::admit(&d, lead, "c4", "agent").await.unwrap_err();
    assert_eq!(full.code, Code::LimitReached, "{full:?}");
    assert_eq!(full.details["limit"], "breadth", "{full:?}");
    let deep = common::admit(&d, e, "c3a", "agent").await.unwrap_err();
    assert_eq!(deep.details["limit"], "total", "{deep:?}");
    let drift = common::column(&d.sql, "SELECT counter || ' ' || id FROM os_recount()").await;
    assert!(drift.is_empty(), "{drift:?}");
    let broken = common::column(&d.sql, "SELECT invariant FROM os_invariants() WHERE violations > 0").await;
    assert!(broken.is_empty(), "{broken:?}");
}
