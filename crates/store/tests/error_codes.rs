//! The error-code vocabulary is one list on each side of the boundary, and they agree: the
//! `os_error_codes` table that os_refuse raises from (sql/refuse.sql) and openshell_codes.

mod common;

use common::refused;
use openshell_store::Code;

#[tokio::test]
async fn the_error_codes_are_one_list_on_each_side_and_the_lists_agree() {
    let d = common::db(2).await;
    let sql: Vec<(String, String)> = d
        .sql
        .query("SELECT code, sqlstate FROM os_error_codes ORDER BY sqlstate", &[])
        .await
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect();
    let rust: Vec<(String, String)> =
        Code::ALL.iter().map(|c| (c.as_str().to_string(), c.sqlstate().to_string())).collect();
    assert_eq!(sql, rust, "os_error_codes and openshell_store::Code");
    // Every project SQLSTATE a function raises is one of the list: os_refuse looks it up, and
    // a trigger body that names one itself must name a listed one.
    let unlisted = common::column(
        &d.sql,
        "SELECT DISTINCT p.oid::regprocedure::text || ' ' || m[1] \
               FROM pg_proc p, regexp_matches(p.prosrc, 'ERRCODE\\s*=\\s*''(OS[0-9]*)''', 'gi') m \
              WHERE p.pronamespace = 'public'::regnamespace \
                AND NOT EXISTS (SELECT 1 FROM os_error_codes e WHERE e.sqlstate = upper(m[1]))",
    )
    .await;
    assert!(unlisted.is_empty(), "raise a SQLSTATE os_error_codes does not list: {unlisted:?}");
    // No function but os_refuse raises a project SQLSTATE itself.
    let literal = common::column(
        &d.sql,
        "SELECT p.proname::text FROM pg_proc p WHERE p.pronamespace = 'public'::regnamespace \
                AND p.proname <> 'os_refuse' \
                AND p.prosrc ~* 'ERRCODE\\s*=\\s*''OS'",
    )
    .await;
    assert!(literal.is_empty(), "raise a literal project SQLSTATE: {literal:?}");
    // os_refuse raises each listed code with its SQLSTATE, and refuses to invent one.
    for c in Code::ALL {
        let (state, _) = refused(&d.sql, &format!("SELECT os_refuse('{}', 'm')", c.as_str())).await;
        assert_eq!(state, c.sqlstate(), "{c}");
    }
    let (state, message) = refused(&d.sql, "SELECT os_refuse('MAYBE', 'm')").await;
    assert_eq!(state, "P0001", "{message}");
    // The parent's policy changed: a CONFLICT the gateway recognises by its reason.
    let e = d.sql.batch_execute("SELECT os_refuse('POLICY_CHANGED', 'm')").await.unwrap_err();
    let e = openshell_store::Error::from(e);
    assert_eq!(e.code, Code::Conflict);
    assert!(e.is_policy_changed());
    // A receipt names only a listed code.
    let (state, _) = refused(
        &d.sql,
        "SELECT record_refusal(p_caller => ROW(1, NULL, NULL)::os_caller, p_action => 'x', p_target => '', \
                p_request_id => NULL, p_code => 'MAYBE', p_message => 'm', p_details => '{}')",
    )
    .await;
    assert_eq!(state, "23503", "audit_log_code_fkey");
    // And the list itself changes only by migration.
    assert_eq!(refused(&d.sql, "DELETE FROM os_error_codes").await.0, Code::NotAllowed.sqlstate());
    assert_eq!(refused(&d.sql, "UPDATE os_error_codes SET sqlstate = 'OS099'").await.0, Code::NotAllowed.sqlstate());
}
