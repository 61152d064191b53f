//! The definitions in sql/ are what the database holds: applied after the migrations, only
//! when the database is behind, never backwards (an older build is refused and changes
//! nothing), each object defined by one file, nothing left that no file defines; and
//! sql/schema.sql is what a freshly migrated database holds.

mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use common::{Db, catalog, h, url_as};
use openshell_store::{Applied, Definitions, GATEWAY_ROLE, Store};
use sha2::{Digest, Sha256};

fn sql_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../sql")
}

/// This build's files with `extra` appended (a newer build's), as revision `revision`.
fn with(revision: i32, extra: &[(&str, &str)]) -> Definitions {
    let mut files = Definitions::current().files().to_vec();
    files.extend(extra.iter().map(|(n, t)| (n.to_string(), t.to_string())));
    Definitions::new(revision, files)
}

async fn revisions(d: &Db) -> Vec<(i32, Vec<u8>)> {
    let rows = d.sql.query("SELECT revision, checksum FROM sql_revisions ORDER BY revision", &[]).await.unwrap();
    rows.iter().map(|r| (r.get(0), r.get(1))).collect()
}

#[test]
fn sql_revision_records_every_file_and_its_checksum() {
    let recorded = Definitions::recorded();
    let current = Definitions::current();
    let mut stale = Vec::new();
    for ((name, sum), (_, text)) in recorded.iter().zip(current.files()) {
        let on_disk = std::fs::read_to_string(sql_dir().join(name)).unwrap();
        assert_eq!(&on_disk, text, "sql/{name} changed since the build");
        if hex::encode(Sha256::digest(text.as_bytes())) != *sum {
            stale.push(*name);
        }
    }
    assert!(
        stale.is_empty(),
        "sql/revision records other checksums for {stale:?}: run scripts/sql-update.sh (it raises the revision)"
    );
    let mut unlisted = Vec::new();
    for entry in std::fs::read_dir(sql_dir()).unwrap() {
        let name = entry.unwrap().file_name().into_string().unwrap();
        if name.ends_with(".sql") && name != "schema.sql" && !recorded.iter().any(|(n, _)| *n == name) {
            unlisted.push(name);
        }
    }
    assert!(unlisted.is_empty(), "sql/{unlisted:?} not in sql/revision: add each where it applies in order");
    assert!(current.revision() >= 1);
}

#[tokio::test]
async fn a_migrated_database_holds_exactly_the_files_and_their_revision() {
    let d = common::db(2).await;
    assert_eq!(d.store.definitions_drift().await.unwrap(), Vec::<String>::new());
    let current = Definitions::current();
    assert_eq!(revisions(&d).await, vec![(current.revision(), current.checksum().to_vec())]);
    // Started again, nothing to do.
    assert_eq!(d.store.apply_definitions(&current).await.unwrap(), Applied::Current);
    assert_eq!(revisions(&d).await.len(), 1);
    // What the files define is documented.
    let bare = common::column(
        &d.sql,
        "SELECT 'function ' || p.oid::regprocedure FROM pg_proc p \
          WHERE p.pronamespace = 'public'::regnamespace AND obj_description(p.oid, 'pg_proc') IS NULL \
         UNION ALL SELECT 'trigger ' || t.tgname FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid \
          WHERE c.relnamespace = 'public'::regnamespace AND NOT t.tgisinternal \
            AND obj_description(t.oid, 'pg_trigger') IS NULL \
         UNION ALL SELECT 'view ' || c.relname FROM pg_class c \
          WHERE c.relnamespace = 'public'::regnamespace AND c.relkind = 'v' AND obj_description(c.oid, 'pg_class') IS NULL",
    )
    .await;
    assert!(bare.is_empty(), "without COMMENT ON: {bare:?}");
}

#[tokio::test]
async fn drift_names_what_was_changed_or_added_behind_the_files() {
    let d = common::db(2).await;
    d.sql
        .batch_execute(
            "SET ROLE openshell_owner; \
             CREATE OR REPLACE FUNCTION os_is_live(phase text) RETURNS boolean LANGUAGE sql IMMUTABLE PARALLEL SAFE \
             AS $$ SELECT phase IN ('PROVISIONING', 'READY') $$; \
             CREATE FUNCTION os_extra() RETURNS integer LANGUAGE sql AS $$ SELECT 1 $$; \
             ALTER TABLE sandboxes DISABLE TRIGGER sandboxes_count_end; \
             GRANT EXECUTE ON FUNCTION os_recount() TO openshell_gateway; RESET ROLE",
        )
        .await
        .unwrap();
    let drift = d.store.definitions_drift().await.unwrap();
    let want = [
        "function os_extra(): in the database, defined by no file",
        "function os_is_live(text): differs from its file",
        "function os_recount(): differs from its file",
        "trigger sandboxes_count_end on sandboxes: differs from its file",
    ];
    assert_eq!(drift, want, "{drift:#?}");
    // The check itself changed nothing.
    assert_eq!(d.store.definitions_drift().await.unwrap(), want);
}

#[tokio::test]
async fn an_older_build_is_refused_naming_both_revisions_and_changes_nothing() {
    let d = common::db(2).await;
    let current = Definitions::current();
    // A newer build (two revisions on) set the database up.
    let newest = Definitions::new(current.revision() + 2, current.files().to_vec());
    d.store.apply_definitions(&newest).await.unwrap();
    let before = (catalog(&d.sql).await, revisions(&d).await);
    // An older build's files: the same with one rule as it was (an older message).
    let older_files: Vec<(String, String)> = current
        .files()
        .iter()
        .map(|(n, t)| (n.clone(), t.replace("max_breadth is %s", "the breadth limit is %s")))
        .collect();
    assert_ne!(older_files, current.files());
    let older = Definitions::new(current.revision() + 1, older_files.clone());
    let e = d.store.apply_definitions(&older).await.unwrap_err();
    let (have, want) = (newest.revision(), older.revision());
    assert!(
        e.message.contains(&format!("revision {have}")) && e.message.contains(&format!("revision {want}")),
        "{e:?}"
    );
    assert!(e.message.contains("newer"), "{e:?}");
    // The same revision with other files: two builds disagree.
    let twin = Definitions::new(newest.revision(), older_files);
    let e = d.store.apply_definitions(&twin).await.unwrap_err();
    assert!(e.message.contains("disagree") && e.message.contains(&hex::encode(newest.checksum())), "{e:?}");
    // Logged in as the gateway role, the older build is refused too; the newer one starts.
    let gateway = Store::connect(&url_as(&d.db.url, GATEWAY_ROLE), 1).unwrap();
    let e = gateway.apply_definitions(&older).await.unwrap_err();
    assert!(e.message.contains("newer"), "{e:?}");
    assert_eq!(gateway.apply_definitions(&newest).await.unwrap(), Applied::Current);
    assert_eq!((catalog(&d.sql).await, revisions(&d).await), before, "a refused build changed the rules");
    // And the rules are the newer build's: the breadth refusal's message.
    let lead = common::root(&d, "lead", Some(common::grant(1, 1, 10))).await;
    common::admit(&d, lead, "c1", "agent").await.unwrap();
    let e = common::admit(&d, lead, "c2", "agent").await.unwrap_err();
    assert!(e.message.contains("max_breadth is 1"), "{e:?}");
}

async fn probes(d: &Db) -> Vec<String> {
    common::column(
        &d.sql,
        "SELECT p.oid::regprocedure::text || ' ' || pg_get_function_result(p.oid) || ' ' || coalesce(p.proacl::text, '') \
           FROM pg_proc p WHERE p.proname IN ('os_probe', 'os_leftover') ORDER BY 1",
    )
    .await
}

#[tokio::test]
async fn a_newer_build_applies_once_dropping_what_no_file_defines() {
    let d = common::db(2).await;
    let r = Definitions::current().revision();
    // Made behind the files' back: gone after the next apply.
    d.sql
        .batch_execute(
            "SET ROLE openshell_owner; CREATE FUNCTION os_leftover() RETURNS integer LANGUAGE sql AS $$ SELECT 1 $$; \
             RESET ROLE",
        )
        .await
        .unwrap();
    let probe_int = "CREATE OR REPLACE FUNCTION os_probe(p integer) RETURNS integer LANGUAGE sql AS $$ SELECT p $$;\n\
                     COMMENT ON FUNCTION os_probe(integer) IS 'A newer build''s function.';\n\
                     GRANT EXECUTE ON FUNCTION os_probe(integer) TO openshell_operator;\n";
    let newer = with(r + 1, &[("probe.sql", probe_int)]);
    // Two replicas starting together: one applies, the other finds it done.
    let other = Store::connect(&d.db.url, 1).unwrap();
    let (a, b) = tokio::join!(d.store.apply_definitions(&newer), other.apply_definitions(&newer));
    let mut outcomes = [a.unwrap(), b.unwrap()];
    outcomes.sort_by_key(|o| *o == Applied::Current);
    assert_eq!(outcomes, [Applied::Upgraded { from: Some(r) }, Applied::Current]);
    assert_eq!(
        probes(&d).await,
        ["os_probe(integer) integer {openshell_owner=X/openshell_owner,openshell_operator=X/openshell_owner}"]
    );
    // A changed signature and return type, with no grant: the old one goes with no DROP written.
    let probe_text = "CREATE OR REPLACE FUNCTION os_probe(p text) RETURNS text LANGUAGE sql AS $$ SELECT p $$;\n\
                      COMMENT ON FUNCTION os_probe(text) IS 'Changed.';\n";
    let newest = with(r + 2, &[("probe.sql", probe_text)]);
    assert_eq!(d.store.apply_definitions(&newest).await.unwrap(), Applied::Upgraded { from: Some(r + 1) });
    assert_eq!(probes(&d).await, ["os_probe(text) text {openshell_owner=X/openshell_owner}"]);
    assert_eq!(revisions(&d).await.iter().map(|(r, _)| *r).collect::<Vec<_>>(), [r, r + 1, r + 2]);
    // The rules still hold through the redefined triggers and functions.
    let lead = common::root(&d, "lead", Some(common::grant(1, 1, 10))).await;
    common::admit(&d, lead, "c1", "agent").await.unwrap();
    assert_eq!(common::admit(&d, lead, "c2", "agent").await.unwrap_err().code, openshell_store::Code::LimitReached);
    assert!(d.store.authenticate(&h("admin-token")).await.unwrap().is_some());
    // This build is now the older one.
    assert!(d.store.migrate().await.unwrap_err().message.contains("newer"));
}

#[tokio::test]
async fn a_failing_file_or_an_undefined_pinned_function_changes_nothing_and_is_named() {
    let d = common::db(2).await;
    let r = Definitions::current().revision();
    let before = (catalog(&d.sql).await, revisions(&d).await);
    let broken = with(
        r + 1,
        &[("broken.sql", "-- a newer build's mistake\nSELECT 1;\nCREATE VIEW v AS SELECT nope FROM users;\n")],
    );
    let e = d.store.apply_definitions(&broken).await.unwrap_err();
    assert!(e.message.contains("sql/broken.sql line 3") && e.message.contains("nope"), "{e:?}");
    // sandboxes.id's default names os_new_id: it cannot be dropped, so a build must define it.
    let files = Definitions::current()
        .files()
        .iter()
        .map(|(n, t)| {
            let t = match t.find("CREATE OR REPLACE FUNCTION os_new_id") {
                Some(start) => {
                    let end = start + t[start..].find("$$;").unwrap() + 3;
                    let comment_end = end + t[end..].find("';").unwrap() + 2;
                    format!("{}{}", &t[..start], &t[comment_end..])
                }
                None => t.clone(),
            };
            (n.clone(), t)
        })
        .collect();
    let e = d.store.apply_definitions(&Definitions::new(r + 1, files)).await.unwrap_err();
    assert!(e.message.contains("function os_new_id(boolean)"), "{e:?}");
    assert_eq!((catalog(&d.sql).await, revisions(&d).await), before);
}

/// Each file runs in a savepoint of its own, so a catalog row its statements write carries that
/// subtransaction's id: an object whose row changes again in a later file is defined by two
/// files. roles.sql only grants (which rewrites a function's row), and holds nothing else.
#[tokio::test]
async fn no_object_is_defined_by_two_files() {
    let d = common::db(2).await;
    d.sql
        .batch_execute("BEGIN; SET LOCAL ROLE openshell_owner; SET LOCAL client_min_messages = warning")
        .await
        .unwrap();
    d.sql.batch_execute(Definitions::clear_sql()).await.unwrap();
    let objects = "SELECT 'function ' || p.oid::regprocedure, p.xmin::text FROM pg_proc p \
                    WHERE p.pronamespace = 'public'::regnamespace \
                   UNION ALL SELECT 'view ' || c.relname, r.xmin::text FROM pg_class c JOIN pg_rewrite r ON r.ev_class = c.oid \
                    WHERE c.relnamespace = 'public'::regnamespace AND c.relkind = 'v' \
                   UNION ALL SELECT 'trigger ' || t.tgname || ' on ' || c.relname, t.xmin::text FROM pg_trigger t \
                     JOIN pg_class c ON c.oid = t.tgrelid \
                    WHERE c.relnamespace = 'public'::regnamespace AND NOT t.tgisinternal";
    // What clear.sql keeps (a function something versioned depends on) is there before any file.
    let mut seen: BTreeMap<String, (String, String)> = BTreeMap::new();
    for row in d.sql.query(objects, &[]).await.unwrap() {
        seen.insert(row.get(0), (String::new(), row.get(1)));
    }
    let mut twice = Vec::new();
    for (name, text) in Definitions::current().files() {
        d.sql.batch_execute(&format!("SAVEPOINT f; {text}; RELEASE SAVEPOINT f")).await.unwrap();
        for row in d.sql.query(objects, &[]).await.unwrap() {
            let (object, xmin): (String, String) = (row.get(0), row.get(1));
            let by = match seen.get(&object) {
                None => name.clone(),
                Some((by, x)) if *x == xmin => by.clone(),
                Some((by, _)) if by.is_empty() || name == "roles.sql" => {
                    if by.is_empty() {
                        name.clone()
                    } else {
                        by.clone()
                    }
                }
                Some((by, _)) => {
                    twice.push(format!("{object}: {by} and {name}"));
                    by.clone()
                }
            };
            seen.insert(object, (by, xmin));
        }
    }
    d.sql.batch_execute("ROLLBACK").await.unwrap();
    assert!(twice.is_empty(), "defined by two files: {twice:#?}");
    assert!(seen.len() > 150, "{}", seen.len());
    let roles = std::fs::read_to_string(sql_dir().join("roles.sql")).unwrap();
    let other: Vec<&str> =
        roles.lines().filter(|l| !l.trim().is_empty() && !l.starts_with("--") && !l.starts_with("GRANT ")).collect();
    assert!(other.is_empty(), "roles.sql holds only grants: {other:?}");
}

/// sql/schema.sql is `pg_dump --schema-only` of a freshly migrated database, so a change's whole
/// effect on the schema is one diff. `OPENSHELL_WRITE_SCHEMA=1` (scripts/sql-update.sh) writes it.
#[tokio::test]
async fn schema_sql_is_what_a_freshly_migrated_database_holds() {
    let d = common::db(1).await;
    let got = common::schema_dump(&d.db.url);
    let path = sql_dir().join("schema.sql");
    let header = "-- Generated by scripts/sql-update.sh: pg_dump --schema-only of a freshly migrated database\n\
                  -- (migrations/ then sql/). Do not edit; edit migrations/ or sql/ and run the script.\n";
    let got = format!("{header}{got}");
    if std::env::var_os("OPENSHELL_WRITE_SCHEMA").is_some() {
        std::fs::write(&path, &got).unwrap();
        return;
    }
    let want = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        want == got,
        "sql/schema.sql differs from what the migrations and sql/ make: run scripts/sql-update.sh\n{}",
        common::diff(&want, &got)
    );
}
