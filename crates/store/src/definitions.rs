//! The definitions in `sql/`: every function, trigger function, trigger and view, with their
//! grants and comments, in one current home per concern (docs/sql.md).
//!
//! They are applied after refinery's migrations, as the owner role, in one transaction under
//! the migrations' advisory lock, and only when the database holds an older revision than this
//! build's (`sql/revision`, which only grows):
//!
//! 1. `definitions/clear.sql` drops every view, trigger and function of the schema except the
//!    ones something versioned depends on (a column default), and clears those' grants and
//!    comments;
//! 2. the files run in `sql/revision`'s order (`CREATE OR REPLACE`);
//! 3. `definitions/verify.sql` finds any function, view or trigger this transaction did not
//!    (re)define: the apply fails naming it;
//! 4. the revision and the files' checksum are recorded in `sql_revisions`.
//!
//! A database at a newer revision, or at this revision with another checksum, is refused: an
//! older gateway restarting beside a newer one must not put its older rules back. When the
//! database is current, this costs one query.

use sha2::{Digest, Sha256};
use tokio_postgres::Client;
use tokio_postgres::error::ErrorPosition;

use crate::error::Error;
use crate::queries;
use crate::row::RowExt;

mod embedded {
    include!(concat!(env!("OUT_DIR"), "/definitions.rs"));
}

const CLEAR: &str = include_str!("definitions/clear.sql");
const VERIFY: &str = queries::DEFINITIONS_LEFT.sql;
const CATALOG: &str = queries::DEFINITIONS_CATALOG.sql;

/// One revision of the definitions: its number and its files, in the order they apply.
#[derive(Debug, Clone)]
pub struct Definitions {
    revision: i32,
    files: Vec<(String, String)>,
}

/// What [`crate::Store::apply_definitions`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Applied {
    /// The database already held this revision.
    Current,
    /// It held `from` (None: no revision yet) and now holds this one.
    Upgraded { from: Option<i32> },
}

impl Definitions {
    /// This build's definitions, as `sql/revision` lists them.
    pub fn current() -> Definitions {
        Definitions {
            revision: embedded::REVISION,
            files: embedded::FILES.iter().map(|(name, _, text)| (name.to_string(), text.to_string())).collect(),
        }
    }

    /// Another revision's definitions (an older or a newer build's, in tests).
    pub fn new(revision: i32, files: Vec<(String, String)>) -> Definitions {
        Definitions { revision, files }
    }

    pub fn revision(&self) -> i32 {
        self.revision
    }

    /// Each file's name (relative to `sql/`) and text, in the order they apply.
    pub fn files(&self) -> &[(String, String)] {
        &self.files
    }

    /// SHA-256 of the lines `NAME SHA256-OF-THE-FILE`, one per file in order: what
    /// `sql_revisions.checksum` records.
    pub fn checksum(&self) -> [u8; 32] {
        let mut lines = String::new();
        for (name, text) in &self.files {
            lines.push_str(&format!("{name} {}\n", hex::encode(Sha256::digest(text.as_bytes()))));
        }
        Sha256::digest(lines.as_bytes()).into()
    }

    /// What `sql/revision` records for each file (name, checksum), for the test that keeps it
    /// current.
    pub fn recorded() -> Vec<(&'static str, &'static str)> {
        embedded::FILES.iter().map(|(name, sum, _)| (*name, *sum)).collect()
    }

    /// The SQL that clears what the files redefine (step 1 of an apply).
    pub fn clear_sql() -> &'static str {
        CLEAR
    }

    /// One row per function, trigger and view of the schema (object, definition): two
    /// databases hold the same definitions when these rows are equal.
    pub fn catalog_sql() -> &'static str {
        CATALOG
    }

    fn refuse_other(&self, have: i32, have_sum: &[u8]) -> Result<(), Error> {
        if have > self.revision {
            return Err(Error::unavailable(format!(
                "the database holds revision {have} of the definitions in sql/, newer than this build's revision {}: \
                 a newer gateway upgraded it; run that build (or a newer one) against it",
                self.revision
            )));
        }
        if have == self.revision && have_sum != self.checksum() {
            return Err(Error::unavailable(format!(
                "the database holds revision {have} of the definitions in sql/ with checksum {}, this build's revision \
                 {have} has checksum {}: two builds disagree on one revision; the one whose sql/ changed must raise \
                 it (scripts/sql-update.sh)",
                hex::encode(have_sum),
                hex::encode(self.checksum())
            )));
        }
        Ok(())
    }
}

/// Applies `defs` unless the database holds them; `client` acts as the owner role and holds
/// the migrations' advisory lock.
pub(crate) async fn apply(client: &mut Client, defs: &Definitions) -> Result<Applied, Error> {
    let have = client
        .query_opt(queries::SQL_REVISION_HELD.sql, &[])
        .await?
        .map(|r| Ok::<_, Error>((r.col::<_, i32>("revision")?, r.col::<_, Vec<u8>>("checksum")?)))
        .transpose()?;
    if let Some((revision, sum)) = &have {
        defs.refuse_other(*revision, sum)?;
        if *revision == defs.revision {
            return Ok(Applied::Current);
        }
    }
    let tx = client.transaction().await?;
    tx.batch_execute(
        "SET LOCAL search_path = public, pg_temp; SET LOCAL check_function_bodies = on; \
         SET LOCAL client_min_messages = warning",
    )
    .await?;
    tx.batch_execute(CLEAR).await.map_err(|e| in_file("crates/store/src/definitions/clear.sql", CLEAR, &e))?;
    for (name, text) in &defs.files {
        tx.batch_execute(text).await.map_err(|e| in_file(&format!("sql/{name}"), text, &e))?;
    }
    let left: Vec<String> = tx.query(VERIFY, &[]).await?.iter().map(|r| r.col(0)).collect::<Result<_, _>>()?;
    if !left.is_empty() {
        return Err(Error::unavailable(format!(
            "the definitions of revision {} do not define {} (something versioned depends on it, so it cannot be \
             dropped): define it in sql/ or drop what depends on it with a migration",
            defs.revision,
            left.join(", ")
        )));
    }
    tx.execute(queries::SQL_REVISION_RECORD.sql, &[&defs.revision, &defs.checksum().as_slice()]).await?;
    tx.commit().await?;
    Ok(Applied::Upgraded { from: have.map(|(r, _)| r) })
}

/// For a login that cannot apply them: the database must hold exactly this build's definitions.
pub(crate) async fn check(client: &Client, defs: &Definitions) -> Result<(), Error> {
    let row = client.query_one(queries::SQL_REVISION.sql, &[]).await.map_err(|e| {
        Error::unavailable(format!(
            "the database holds no definitions this role can read ({e}); run `openshell gateway init-db` with a \
             superuser to upgrade it"
        ))
    })?;
    let (have, sum): (Option<i32>, Option<Vec<u8>>) = (row.col("revision")?, row.col("checksum")?);
    match (have, sum) {
        (Some(have), Some(sum)) if have >= defs.revision => defs.refuse_other(have, &sum),
        (have, _) => Err(Error::unavailable(format!(
            "the database holds revision {} of the definitions in sql/, this gateway needs {}: run `openshell gateway \
             init-db` with a superuser to upgrade it",
            have.map_or("none".to_string(), |h| h.to_string()),
            defs.revision
        ))),
    }
}

/// Where the database's functions, triggers and views differ from what `defs` define: the
/// files are applied in a transaction that is rolled back, and the catalog compared before
/// and after. Empty when the database holds exactly the files.
pub(crate) async fn drift(client: &mut Client, defs: &Definitions) -> Result<Vec<String>, Error> {
    let tx = client.transaction().await?;
    tx.batch_execute(
        "SET LOCAL search_path = public, pg_temp; SET LOCAL check_function_bodies = on; \
         SET LOCAL client_min_messages = warning",
    )
    .await?;
    let rows = |rows: Vec<tokio_postgres::Row>| -> Result<std::collections::BTreeMap<String, String>, Error> {
        rows.iter().map(|r| Ok((r.col(0)?, r.col(1)?))).collect()
    };
    let before = rows(tx.query(CATALOG, &[]).await?)?;
    tx.batch_execute(CLEAR).await.map_err(|e| in_file("crates/store/src/definitions/clear.sql", CLEAR, &e))?;
    for (name, text) in &defs.files {
        tx.batch_execute(text).await.map_err(|e| in_file(&format!("sql/{name}"), text, &e))?;
    }
    let after = rows(tx.query(CATALOG, &[]).await?)?;
    tx.rollback().await?;
    let mut drift = Vec::new();
    for (object, definition) in &before {
        match after.get(object) {
            None => drift.push(format!("{object}: in the database, defined by no file")),
            Some(d) if d != definition => drift.push(format!("{object}: differs from its file")),
            Some(_) => {}
        }
    }
    for object in after.keys().filter(|o| !before.contains_key(*o)) {
        drift.push(format!("{object}: defined by a file, missing from the database"));
    }
    Ok(drift)
}

/// A statement of `text` (the file `name`) failed: the error names the file and its line.
fn in_file(name: &str, text: &str, e: &tokio_postgres::Error) -> Error {
    let Some(db) = e.as_db_error() else {
        return Error::database(format!("{name}: {e}"));
    };
    let line = match db.position() {
        Some(ErrorPosition::Original(p)) => Some(text.chars().take(*p as usize).filter(|c| *c == '\n').count() + 1),
        _ => None,
    };
    let at = line.map_or(String::new(), |l| format!(" line {l}"));
    let context = db.where_().map_or(String::new(), |w| format!(" ({w})"));
    Error::unavailable(format!("applying {name}{at}: {}{context}", db.message()))
}
