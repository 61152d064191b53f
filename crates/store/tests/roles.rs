//! Least privilege, tried as the attacker would: logged in as the gateway role and as the
//! operator role, every forbidden thing fails (write a table, disable a trigger, set the
//! replication role, set a credential, run a program) and changes nothing, while what each
//! role is for still works.

mod common;

use common::{Db, connect, grant, h, root, url_as};
use openshell_store::{GATEWAY_ROLE, OPERATOR_ROLE, Store};

/// A database with one root `lead` (grant 1/1/1).
async fn db() -> Db {
    let d = common::db(4).await;
    root(&d, "lead", Some(grant(1, 1, 1))).await;
    d
}

/// Every table's rows and every trigger's enabled state: what a forbidden statement must not change.
async fn footprint(sql: &tokio_postgres::Client) -> String {
    let rows = sql
        .query(
            "SELECT (SELECT string_agg(format('%s=%s', c.relname, \
                        (xpath('/row/n/text()', query_to_xml(format('SELECT count(*) AS n FROM %I', c.relname), false, true, '')))[1]::text), ',' ORDER BY c.relname) \
                       FROM pg_class c WHERE c.relnamespace = 'public'::regnamespace AND c.relkind = 'r'), \
                    (SELECT string_agg(tgname || ':' || tgenabled::text, ',' ORDER BY tgname) FROM pg_trigger WHERE NOT tgisinternal), \
                    (SELECT string_agg(encode(credential_hash, 'hex'), ',') FROM sandboxes)",
            &[],
        )
        .await
        .unwrap();
    format!(
        "{:?}",
        (rows[0].get::<_, Option<String>>(0), rows[0].get::<_, Option<String>>(1), rows[0].get::<_, Option<String>>(2))
    )
}

const FORBIDDEN: &[&str] = &[
    "INSERT INTO users (name, is_admin) VALUES ('mallory', true)",
    "INSERT INTO user_tokens (token_hash, user_id) VALUES (sha256('t'), 1)",
    "UPDATE sandboxes SET credential_hash = sha256('minted')",
    "UPDATE grants SET max_total = 100000",
    "UPDATE parents SET live_children = 0",
    "UPDATE trees SET live_total = 0",
    "DELETE FROM audit_log",
    "INSERT INTO sandboxes (name, owner_id, kind, command, created_by_user) VALUES ('x', 1, 'agent', ARRAY['sh'], 1)",
    "ALTER TABLE sandboxes DISABLE TRIGGER USER",
    "ALTER TABLE audit_log DISABLE TRIGGER audit_log_append_only",
    "SET session_replication_role = replica",
    "COPY (SELECT 1) TO PROGRAM 'true'",
    "CREATE TABLE public.evil (x int)",
    "CREATE FUNCTION public.authenticate(bytea) RETURNS int LANGUAGE sql AS 'SELECT 1'",
    "SET ROLE openshell_owner",
    "SELECT os_refuse('NOT_ALLOWED', 'x')",
];

#[tokio::test]
async fn the_gateway_role_can_only_call_its_functions() {
    let d = db().await;
    let gw = connect(&url_as(&d.db.url, GATEWAY_ROLE)).await;
    let before = footprint(&d.sql).await;
    for stmt in FORBIDDEN.iter().chain(&["SELECT * FROM sandboxes", "SELECT token_hash FROM user_tokens"]) {
        let e = gw.batch_execute(stmt).await.expect_err(stmt);
        let db = e.as_db_error().unwrap_or_else(|| panic!("{stmt}: {e}"));
        // 42501 insufficient privilege (or "must be owner"), never a refusal by a trigger: the
        // statement never reached a table.
        assert_eq!(db.code().code(), "42501", "{stmt}: {}", db.message());
    }
    assert_eq!(footprint(&d.sql).await, before, "nothing changed");

    // What it is for still works: its functions, as SECURITY DEFINER.
    let n: i64 = gw
        .query_one("SELECT count(*) FROM sandbox_list(ROW(1, NULL, NULL)::os_caller, true, NULL, NULL, 10)", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(n, 1);
    let who: String =
        gw.query_one("SELECT user_name FROM authenticate($1)", &[&h("admin-token").as_slice()]).await.unwrap().get(0);
    assert_eq!(who, "admin");
    // And the store's own pool acts as this role, whatever the login.
    let role: String = d
        .store
        .sandbox_by_id(uuid::Uuid::nil())
        .await
        .map(|_| String::new())
        .unwrap_or_else(|e| e.message)
        .split_whitespace()
        .next()
        .unwrap_or_default()
        .to_string();
    assert_eq!(role, "sandbox", "a plain NOT_FOUND through the definer function");
}

#[tokio::test]
async fn every_gateway_function_is_security_definer_with_a_fixed_search_path() {
    // The two pure functions (sql/roles.sql) are exempt: they read no table.
    let d = db().await;
    let loose: Vec<String> = d
        .sql
        .query(
            "SELECT p.oid::regprocedure::text FROM pg_proc p \
              WHERE p.pronamespace = 'public'::regnamespace \
                AND (has_function_privilege($1, p.oid, 'EXECUTE') OR has_function_privilege($2, p.oid, 'EXECUTE')) \
                AND p.oid::regprocedure::text NOT IN ('os_is_live(text)', 'os_created_by(text,text,text)') \
                AND (NOT p.prosecdef OR NOT coalesce(p.proconfig @> ARRAY['search_path=public, pg_temp'], false) \
                     OR pg_get_userbyid(p.proowner) <> 'openshell_owner')",
            &[&GATEWAY_ROLE, &OPERATOR_ROLE],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert!(loose.is_empty(), "callable without SECURITY DEFINER, a fixed search_path or the owner: {loose:?}");
    // Nobody else may call anything: EXECUTE is not PUBLIC's.
    let public = common::column(&d.sql, "SELECT p.oid::regprocedure::text FROM pg_proc p, aclexplode(coalesce(p.proacl, acldefault('f', p.proowner))) a \
              WHERE p.pronamespace = 'public'::regnamespace AND a.grantee = 0").await;
    assert!(public.is_empty(), "executable by PUBLIC: {public:?}");
    let owners = common::column(
        &d.sql,
        "SELECT c.relname::text FROM pg_class c WHERE c.relnamespace = 'public'::regnamespace \
                AND c.relkind IN ('r', 'v') AND pg_get_userbyid(c.relowner) <> 'openshell_owner'",
    )
    .await;
    assert!(owners.is_empty(), "not owned by the owner role: {owners:?}");
    for role in [GATEWAY_ROLE, OPERATOR_ROLE] {
        let r = d
            .sql
            .query_one(
                "SELECT rolsuper OR rolcreaterole OR rolcreatedb OR rolbypassrls FROM pg_roles WHERE rolname = $1",
                &[&role],
            )
            .await
            .unwrap();
        assert!(!r.get::<_, bool>(0), "{role} has no special attribute");
    }
}

#[tokio::test]
async fn the_operator_role_reads_views_and_nothing_else() {
    let d = db().await;
    let op = connect(&url_as(&d.db.url, OPERATOR_ROLE)).await;
    let before = footprint(&d.sql).await;
    let reads_secrets = [
        "SELECT credential_hash FROM sandboxes",
        "SELECT token_hash FROM user_tokens",
        "SELECT * FROM users",
        "SELECT * FROM audit_log",
        "SELECT * FROM authenticate(sha256('admin-token'))",
        "SELECT * FROM sandbox_list(1, true, NULL, NULL, 10)",
        "SELECT grant_revoke(1, NULL, 'lead')",
    ];
    for stmt in FORBIDDEN.iter().chain(&reads_secrets) {
        let e = op.batch_execute(stmt).await.expect_err(stmt);
        let db = e.as_db_error().unwrap_or_else(|| panic!("{stmt}: {e}"));
        assert_eq!(db.code().code(), "42501", "{stmt}: {}", db.message());
    }
    assert_eq!(footprint(&d.sql).await, before, "nothing changed");
    for view in ["sandbox_view", "grant_view", "audit_view", "tree_view", "grant_history_view"] {
        let n: i64 = op.query_one(&format!("SELECT count(*) FROM {view}"), &[]).await.unwrap().get(0);
        assert!(n >= 1, "{view} is readable and shows the tree");
    }
    let drift: i64 = op.query_one("SELECT count(*) FROM os_recount()", &[]).await.unwrap().get(0);
    assert_eq!(drift, 0);
    let total: i32 =
        op.query_one("SELECT live_total FROM tree_view WHERE root_name = 'lead'", &[]).await.unwrap().get(0);
    assert_eq!(total, 0);
}

/// The gateway's login may be the gateway role itself: it cannot migrate, so it only checks
/// that the schema is current, and its calls work.
#[tokio::test]
async fn a_store_logged_in_as_the_gateway_role_checks_the_schema_and_works() {
    let d = db().await;
    let store = Store::connect(&url_as(&d.db.url, GATEWAY_ROLE), 2).unwrap();
    assert!(!store.login_is_superuser().await.unwrap());
    store.migrate().await.unwrap();
    assert!(store.authenticate(&h("admin-token")).await.unwrap().is_some());
    // On an empty database it says what to do.
    let empty = openshell_testkit::fresh_database().await;
    let store = Store::connect(&url_as(&empty.url, GATEWAY_ROLE), 2).unwrap();
    let e = store.migrate().await.unwrap_err();
    assert!(e.message.contains("init-db"), "{e:?}");
}
