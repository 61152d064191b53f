//! What the store's test files share: a fresh migrated database with its first admin, and
//! roots and children made through the store as the gateway makes them.

#![allow(dead_code)]

use openshell_store::{AdmissionProof, GrantValues, NewChild, NewRoot, Principal, RootProof, Store, Verdict};
use sha2::{Digest, Sha256};
use uuid::Uuid;

pub fn h(s: &str) -> [u8; 32] {
    Sha256::digest(s.as_bytes()).into()
}

pub struct Db {
    pub db: openshell_testkit::TestDb,
    pub store: Store,
    pub sql: tokio_postgres::Client,
    pub admin: Principal,
}

/// A fresh database, migrated, with the admin `admin` (token `admin-token`).
pub async fn db(pool: usize) -> Db {
    let db = openshell_testkit::fresh_database().await;
    let store = Store::connect(&db.url, pool).unwrap();
    store.migrate().await.unwrap();
    assert!(store.bootstrap_admin("admin", &h("admin-token")).await.unwrap());
    let admin = store.authenticate(&h("admin-token")).await.unwrap().unwrap();
    let sql = db.connect().await;
    Db { db, store, sql, admin }
}

/// The test database's URL with another login (the test server trusts local logins).
pub fn url_as(url: &str, role: &str) -> String {
    let (scheme, rest) = url.split_once("://").unwrap();
    let host = rest.split_once('@').map_or(rest, |(_, h)| h);
    format!("{scheme}://{role}@{host}")
}

pub async fn connect(url: &str) -> tokio_postgres::Client {
    let (c, conn) = tokio_postgres::connect(url, tokio_postgres::NoTls).await.unwrap();
    tokio::spawn(conn);
    c
}

/// A grant for an hour, program /usr/bin/python3.
pub fn grant(depth: i32, breadth: i32, total: i32) -> GrantValues {
    GrantValues {
        max_depth: depth,
        max_breadth: breadth,
        max_total: total,
        expires_at: chrono::Utc::now() + chrono::Duration::hours(1),
        program: "/usr/bin/python3".into(),
        tool_idle_seconds: None,
        program_resolved: "/usr/bin/python3".into(),
        rate: Default::default(),
    }
}

/// A root named `name` whose credential is `cred-NAME`.
pub async fn root(d: &Db, name: &str, g: Option<GrantValues>) -> Uuid {
    d.store
        .create_root(
            &d.admin,
            &NewRoot {
                name,
                command: &["sleep".into()],
                policy: &serde_json::json!({"version": 1}),
                policy_hash: &h("p"),
                credential_hash: &h(&format!("cred-{name}")),
                request_id: None,
                args_hash: &h(name),
                grant: g.as_ref(),
                template: &serde_json::json!({}),
                runner: "test",
                proof: RootProof { global_version: 0, verdict: Verdict::NoGlobalMax },
            },
        )
        .await
        .unwrap()
        .0
        .id
}

/// A child named `name` (credential `cred-NAME`), admitted as the admin under `parent`.
pub async fn admit(d: &Db, parent: Uuid, name: &str, kind: &str) -> Result<Uuid, openshell_store::Error> {
    d.store
        .admit_child(
            &d.admin,
            &NewChild {
                parent: &parent.to_string(),
                name: Some(name),
                kind: kind.parse().expect("agent or tool"),
                command: &["sleep".into()],
                policy: &serde_json::json!({"version": 1}),
                policy_hash: &h("p"),
                proof: AdmissionProof {
                    parent_id: parent,
                    parent_version: 1,
                    global_version: 0,
                    verdict: Verdict::Inherited,
                },
                credential_hash: &h(&format!("cred-{name}")),
                request_id: None,
                args_hash: &h(name),
                runner: "test",
                template: None,
            },
        )
        .await
        .map(|(id, _)| id)
}

/// The first column of every row `query` returns, as text (catalog checks list offenders).
#[allow(dead_code)]
pub async fn column(sql: &tokio_postgres::Client, query: &str) -> Vec<String> {
    sql.query(query, &[]).await.unwrap().iter().map(|r| r.get(0)).collect()
}

/// The database's functions, triggers and views with everything the definitions set
/// (`Definitions::catalog_sql`), by object.
pub async fn catalog(sql: &tokio_postgres::Client) -> std::collections::BTreeMap<String, String> {
    let rows = sql.query(openshell_store::Definitions::catalog_sql(), &[]).await.unwrap();
    rows.iter().map(|r| (r.get(0), r.get(1))).collect()
}

/// `pg_dump --schema-only` of the database at `url`, without what changes between two dumps of
/// one schema (the version banner, the random `\restrict` key). The program is
/// `OPENSHELL_PG_DUMP`, else the host's PostgreSQL 15 (the test server's major version).
pub fn schema_dump(url: &str) -> String {
    let program = std::env::var("OPENSHELL_PG_DUMP").unwrap_or_else(|_| "/usr/lib/postgresql/15/bin/pg_dump".into());
    let out = std::process::Command::new(&program)
        .args(["--schema-only", "--no-tablespaces", url])
        .output()
        .unwrap_or_else(|e| panic!("{program}: {e} (scripts/setup.d/10-apt.sh installs postgresql-client-15)"));
    assert!(out.status.success(), "{program}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .filter(|l| !l.starts_with("\\restrict") && !l.starts_with("\\unrestrict") && !l.starts_with("-- Dumped "))
        .map(|l| format!("{l}\n"))
        .collect()
}

/// A unified diff of two texts (the `diff` program's), for a failure message.
pub fn diff(want: &str, got: &str) -> String {
    let dir = std::env::temp_dir().join(format!("openshell-diff-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (a, b) = (dir.join("want"), dir.join("got"));
    std::fs::write(&a, want).unwrap();
    std::fs::write(&b, got).unwrap();
    let out = std::process::Command::new("diff").arg("-u").arg(&a).arg(&b).output();
    let _ = std::fs::remove_dir_all(&dir);
    match out {
        Ok(o) => String::from_utf8_lossy(&o.stdout).chars().take(20_000).collect(),
        Err(e) => format!("(no diff program: {e})"),
    }
}

/// The SQLSTATE of a failed statement, and its message.
pub async fn refused(c: &tokio_postgres::Client, stmt: &str) -> (String, String) {
    let e = c.batch_execute(stmt).await.expect_err(stmt);
    let db = e.as_db_error().unwrap_or_else(|| panic!("{stmt}: {e}"));
    (db.code().code().to_string(), db.message().to_string())
}

/// A root `lead` (grant depth 2, breadth 2, total 4) and its agent child `worker`.
pub async fn tree(d: &Db) -> (uuid::Uuid, uuid::Uuid) {
    let root = root(d, "lead", Some(grant(2, 2, 4))).await;
    let child = admit(d, root, "worker", "agent").await.unwrap();
    (root, child)
}

/// The message of a statement that must fail.
pub async fn fails(d: &Db, sql: &str) -> String {
    let e = d.sql.batch_execute(sql).await.expect_err(sql);
    e.as_db_error().map(|e| e.message().to_string()).unwrap_or_else(|| e.to_string())
}
