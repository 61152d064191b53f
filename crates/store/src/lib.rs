//! The gateway's PostgreSQL store: migrations, the sql/ definitions, SERIALIZABLE calls into the functions that hold every rule.
//!
//! Every rule (lineage, grants, limits, request ids, phases, the audit log) is enforced by
//! the schema: its tables in `migrations/`, its functions, triggers and views in `sql/` (one
//! file per concern, see [`definitions`]). This crate applies both, calls the functions,
//! retries serialization failures and decodes rows. It keeps no state of its own.
//!
//! This file connects, migrates and runs a statement (with its retry, pool.rs); the calls
//! are one module per concern, as sql/ has one file per concern: users (sql/auth.sql,
//! sql/users.sql), door, admission, sandboxes, lifecycle, work, supervisor, policies, grants,
//! proposals, audit, metrics and roles. Every statement is in [`queries`], with the Rust types
//! it binds and reads.

mod admission;
mod audit;
mod changes;
pub mod definitions;
mod door;
mod error;
mod grants;
mod health;
mod lifecycle;
mod metrics;
mod model;
mod policies;
mod pool;
mod proposals;
pub mod queries;
mod roles;
mod row;
mod sandboxes;
mod supervisor;
mod turns;
mod typed;
mod users;
mod work;

pub use admission::{ChildCreated, ChildPolicy, CreateChild, NewChild, NewRoot, ParentSnapshot};
pub use audit::{AuditFilter, ChainHead, ChainStatus};
pub use changes::{APPLICATION_NAME as LISTEN_APPLICATION_NAME, CHANNEL, Change, Listener};
pub use definitions::{Applied, Definitions};
pub use error::{Code, Error, limit_of};
pub use grants::GrantStatus;
pub use health::Health;
pub use model::{
    AuditEntry, Denial, Grant, GrantChange, GrantValues, LiveRow, PhaseChange, Principal, Rate, Sandbox, StopItem,
};
pub use policies::{ParentPolicy, PolicyChild, PolicyTarget, SupervisorStart};
pub use proposals::{NewProposal, Proposal};
pub use typed::{AdmissionProof, GrantState, Kind, Phase, RootProof, Verdict};

use deadpool_postgres::Pool;
use queries::Query;
use row::RowExt;

mod embedded {
    refinery::embed_migrations!("../../migrations");
}

/// A handle on the database; cheap to clone.
#[derive(Clone)]
pub struct Store {
    pool: Pool,
    /// The login, for migrations (which run as the owner role, not the gateway role).
    config: tokio_postgres::Config,
    /// How the pool's sessions log in (the gateway role), for the LISTEN session (changes.rs).
    session: tokio_postgres::Config,
    /// Admissions under one parent queue here rather than fail each other (see turns.rs).
    turns: std::sync::Arc<turns::Turns>,
    /// Whether the database answers, as the calls see it.
    health: std::sync::Arc<Health>,
}

/// The database roles (made by the migrations; what each may call: sql/roles.sql).
pub const OWNER_ROLE: &str = "openshell_owner";
pub use pool::GATEWAY_ROLE;
pub const OPERATOR_ROLE: &str = "openshell_operator";
/// The migration that makes the roles (number 6, `roles`); later ones run as the owner role.
const ROLES_MIGRATION: i32 = 6;

impl Store {
    /// Connects (lazily) to `url`; every statement runs SERIALIZABLE.
    pub fn connect(url: &str, max_connections: usize) -> Result<Store, Error> {
        let session = pool::session(url)?;
        Ok(Store {
            pool: pool::build(session.clone(), max_connections)?,
            config: pool::parse(url)?,
            session,
            turns: Default::default(),
            health: Default::default(),
        })
    }

    /// Applies the embedded migrations on a connection of its own, as the login (the first
    /// time, until the migration that makes the owner role) or as the owner role (later), then
    /// this build's definitions in sql/ (see [`definitions`]). A login that can do neither (the
    /// gateway role) only checks that the schema and the definitions are current.
    pub async fn migrate(&self) -> Result<(), Error> {
        self.apply_definitions(&Definitions::current()).await.map(|_| ())
    }

    /// [`Store::migrate`] with the given definitions: what a build of another revision does at
    /// start (the tests' older and newer builds).
    pub async fn apply_definitions(&self, defs: &Definitions) -> Result<Applied, Error> {
        let (mut client, conn) = self.config.connect(tokio_postgres::NoTls).await?;
        let conn = tokio::spawn(conn);
        let result = async {
            let row = client.query_one(queries::LOGIN_ROLES.sql, &[&OWNER_ROLE]).await?;
            let (superuser, history_owner, owner_member): (bool, Option<String>, bool) =
                (row.col("rolsuper")?, row.col("history_owner")?, row.col("owner_member")?);
            if !superuser && !owner_member {
                self.check_schema_current(&client).await?;
                definitions::check(&client, defs).await?;
                return Ok(Applied::Current);
            }
            // A concurrent first migration (or apply) from two replicas must not interleave.
            client.batch_execute("SELECT pg_advisory_lock(7061707)").await?;
            // Until the roles migration (which makes the owner role and gives it the schema) as
            // the login; every later migration, and the definitions, as the owner, so what they
            // create is the owner's.
            let mut result = Ok(());
            if history_owner.as_deref() != Some(OWNER_ROLE) {
                result = embedded::migrations::runner()
                    .set_target(refinery::Target::Version(ROLES_MIGRATION))
                    .run_async(&mut client)
                    .await
                    .map(|_| ());
            }
            let mut applied = Ok(Applied::Current);
            if result.is_ok() {
                client.batch_execute(&format!("SET ROLE {OWNER_ROLE}")).await?;
                result = embedded::migrations::runner().run_async(&mut client).await.map(|_| ());
                if result.is_ok() {
                    applied = definitions::apply(&mut client, defs).await;
                }
            }
            client.batch_execute("RESET ROLE; SELECT pg_advisory_unlock(7061707)").await?;
            result.map_err(|e| Error::database(format!("migration failed: {e}")))?;
            applied
        }
        .await;
        drop(client);
        let _ = conn.await;
        result
    }

    /// Where the database's functions, triggers and views differ from this build's sql/ (as
    /// the owner: the files are applied in a transaction that is rolled back). Empty when it
    /// holds exactly the files.
    pub async fn definitions_drift(&self) -> Result<Vec<String>, Error> {
        let (mut client, conn) = self.config.connect(tokio_postgres::NoTls).await?;
        let conn = tokio::spawn(conn);
        let result = async {
            client.batch_execute(&format!("SET ROLE {OWNER_ROLE}")).await?;
            definitions::drift(&mut client, &Definitions::current()).await
        }
        .await;
        drop(client);
        let _ = conn.await;
        result
    }

    /// For a login that cannot migrate: the database must already be at this build's schema.
    async fn check_schema_current(&self, client: &tokio_postgres::Client) -> Result<(), Error> {
        let want = embedded::migrations::runner().get_migrations().iter().map(|m| m.version()).max().unwrap_or(0);
        let have: i32 = client
            .query_one(queries::SCHEMA_VERSION.sql, &[])
            .await
            .map_err(|e| {
                Error::database(format!(
                    "the database has no OpenShell schema this role can read ({e}); \
                     run `openshell gateway init-db` with a superuser first"
                ))
            })?
            .col(0)?;
        if (have as i64) < want as i64 {
            return Err(Error::unavailable(format!(
                "the database schema is at version {have}, this gateway needs {want}: run `openshell gateway init-db` \
                 with a superuser to migrate it"
            )));
        }
        Ok(())
    }

    /// Closes every pooled connection (before the database itself stops).
    pub fn close(&self) {
        self.pool.close();
    }

    /// Whether the database answers.
    pub async fn ping(&self) -> bool {
        match self.pool.get().await {
            Ok(c) => c.simple_query("SELECT 1").await.is_ok(),
            Err(_) => false,
        }
    }

    /// Runs one statement of the registry as its own SERIALIZABLE transaction (see pool.rs).
    async fn call(
        &self,
        q: &Query,
        params: &[&(dyn tokio_postgres::types::ToSql + Sync)],
    ) -> Result<Vec<tokio_postgres::Row>, Error> {
        debug_assert_eq!(params.len(), q.params.len(), "{}: the parameters the registry lists", q.name);
        pool::call(&self.pool, &self.health, q.sql, params).await
    }

    /// [`Store::call`] for a long read-only statement, at READ COMMITTED (see pool::read).
    async fn read(
        &self,
        q: &Query,
        params: &[&(dyn tokio_postgres::types::ToSql + Sync)],
    ) -> Result<Vec<tokio_postgres::Row>, Error> {
        debug_assert_eq!(params.len(), q.params.len(), "{}: the parameters the registry lists", q.name);
        pool::read(&self.pool, &self.health, q.sql, params).await
    }

    /// The first column of the one row a statement returns (a function's value).
    async fn value<T>(&self, q: &Query, params: &[&(dyn tokio_postgres::types::ToSql + Sync)]) -> Result<T, Error>
    where
        T: for<'a> tokio_postgres::types::FromSql<'a>,
    {
        row::first(&self.call(q, params).await?, q.name)?.col(0)
    }

    /// Whether the database answers, as this store's calls saw it.
    pub fn health(&self) -> &Health {
        &self.health
    }

    /// The pool's connections: (open, idle, the most it may open).
    pub fn pool_use(&self) -> (usize, usize, usize) {
        let s = self.pool.status();
        (s.size, s.available, s.max_size)
    }
}
