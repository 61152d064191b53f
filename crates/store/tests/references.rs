//! The references checked without foreign keys (sql/references.sql): a policy version or a
//! request-id claim naming no sandbox is still refused, whoever inserts it, the sandbox a
//! transaction has just made is known to exist without reading its index page, and the users
//! sandboxes and policies name exist and keep their id.

mod common;

use common::{Db, grant, root};
use openshell_store::Code;

async fn db() -> Db {
    common::db(4).await
}

async fn sqlstate(sql: &tokio_postgres::Client, stmt: &str) -> Option<(String, String)> {
    sql.batch_execute(stmt).await.err().map(|e| {
        let db = e.as_db_error().unwrap_or_else(|| panic!("{stmt}: {e}"));
        (db.code().code().to_string(), db.constraint().unwrap_or_default().to_string())
    })
}

#[tokio::test]
async fn a_policy_or_claim_naming_no_sandbox_is_refused_and_the_new_sandbox_is_known() {
    let d = db().await;
    let lead = root(&d, "lead", Some(grant(1, 2, 2))).await;
    let ghost = uuid::Uuid::new_v4();
    for stmt in [
        format!(
            "INSERT INTO sandbox_policies (sandbox_id, version, document, hash, set_by_user) \
             VALUES ('{ghost}', 1, '{{}}', sha256('x'), 1)"
        ),
        format!(
            "INSERT INTO create_requests (caller, request_id, args_hash, sandbox_id) VALUES ('user:1', 'r1', sha256('x'), '{ghost}')"
        ),
    ] {
        let got = sqlstate(&d.sql, &stmt).await;
        assert_eq!(got.as_ref().map(|g| g.0.as_str()), Some("23503"), "{stmt}: {got:?}");
        assert!(got.unwrap().1.ends_with("_sandbox_fkey"));
    }
    assert_eq!(
        d.sql
            .query_one("SELECT count(*) FROM sandbox_policies WHERE sandbox_id = $1", &[&ghost])
            .await
            .unwrap()
            .get::<_, i64>(0),
        0
    );
    // An existing sandbox, made in another transaction, is found by the fallback lookup.
    assert_eq!(
        sqlstate(
            &d.sql,
            &format!("INSERT INTO create_requests (caller, request_id, args_hash, sandbox_id) VALUES ('user:1', 'r2', sha256('x'), '{lead}')")
        )
        .await,
        None
    );
    // A child inserted and given its policy in one transaction (as admit_child does).
    assert_eq!(
        sqlstate(
            &d.sql,
            &format!(
                "BEGIN; \
                 INSERT INTO sandboxes (name, owner_id, parent_id, root_id, depth, kind, command, created_by_user) \
                 VALUES ('kid', 1, '{lead}', '{lead}', 1, 'agent', ARRAY['sh'], 1); \
                 INSERT INTO sandbox_policies (sandbox_id, version, document, hash, set_by_user) \
                 SELECT id, 1, '{{}}', sha256('x'), 1 FROM sandboxes WHERE name = 'kid'; COMMIT"
            )
        )
        .await,
        None
    );
    // Ids are time-ordered (UUID version 7 layout); the gateway's children are in a key range
    // above every root's.
    let kid: uuid::Uuid = d.sql.query_one("SELECT id FROM sandboxes WHERE name = 'kid'", &[]).await.unwrap().get(0);
    let admitted = common::admit(&d, lead, "admitted", "agent").await.unwrap();
    assert!(kid > lead && kid.get_version_num() == 7 && lead.get_version_num() == 7, "{lead} {kid}");
    assert!(admitted > kid && admitted.as_bytes()[0] & 0x80 != 0 && lead.as_bytes()[0] & 0x80 == 0, "{admitted}");
}

#[tokio::test]
async fn users_named_by_sandboxes_and_policies_exist_and_keep_their_id() {
    let d = db().await;
    let lead = root(&d, "lead", Some(grant(1, 2, 2))).await;
    for (stmt, constraint) in [
        (
            "INSERT INTO sandboxes (name, owner_id, kind, command, created_by_user, runner) \
             VALUES ('ghost-owned', 424242, 'agent', '{true}', 1, 'r')"
                .to_string(),
            "sandboxes_owner_fkey",
        ),
        (
            "INSERT INTO sandboxes (name, owner_id, kind, command, created_by_user, runner) \
             VALUES ('ghost-made', 1, 'agent', '{true}', 424242, 'r')"
                .to_string(),
            "sandboxes_creator_user_fkey",
        ),
        (
            format!(
                "INSERT INTO sandbox_policies (sandbox_id, version, document, hash, set_by_user) \
                 VALUES ('{lead}', 2, '{{}}', sha256('x'), 424242)"
            ),
            "sandbox_policies_user_fkey",
        ),
    ] {
        let got = sqlstate(&d.sql, &stmt).await;
        assert_eq!(got, Some(("23503".into(), constraint.into())), "{stmt}");
    }
    // The id those rows rely on cannot move (an identity column, so only to DEFAULT).
    let got = sqlstate(&d.sql, "UPDATE users SET id = DEFAULT WHERE id = 1").await;
    assert_eq!(got.map(|g| g.0), Some("OS001".into()));
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
