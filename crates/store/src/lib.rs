//! The gateway's PostgreSQL store: migrations, SERIALIZABLE transactions and the SQL functions that own every invariant.
//!
//! Every rule (lineage, grants, limits, request ids, phases, the audit log) is enforced by
//! the schema: its tables in `migrations/`, its functions, triggers and views in `sql/` (one
//! file per concern, see [`definitions`]). This crate applies both, calls the functions,
//! retries serialization failures and decodes rows. It keeps no state of its own.

mod audit;
pub mod definitions;
mod error;
mod grant_status;
mod health;
mod model;
mod pool;
mod proposals;
mod turns;
mod typed;
mod work;

use chrono::{DateTime, Utc};
use deadpool_postgres::Pool;
use uuid::Uuid;

pub use audit::{ChainHead, ChainStatus};
pub use definitions::{Applied, Definitions};
pub use error::{Code, Error, limit_of};
pub use grant_status::GrantStatus;
pub use health::Health;
pub use model::{AuditEntry, Denial, Grant, GrantChange, GrantValues, LiveRow, Principal, Rate, Sandbox, StopItem};
use model::{GRANT_COLUMNS, SANDBOX_COLUMNS};
pub use proposals::{NewProposal, Proposal};
pub use typed::{AdmissionProof, GrantState, Kind, Phase, RootProof, Verdict};

mod embedded {
    refinery::embed_migrations!("../../migrations");
}

/// A handle on the database; cheap to clone.
#[derive(Clone)]
pub struct Store {
    pool: Pool,
    /// The login, for migrations (which run as the owner role, not the gateway role).
    config: tokio_postgres::Config,
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

/// A root sandbox to create.
pub struct NewRoot<'a> {
    pub name: &'a str,
    pub command: &'a [String],
    pub policy: &'a serde_json::Value,
    pub policy_hash: &'a [u8; 32],
    pub credential_hash: &'a [u8; 32],
    pub request_id: Option<&'a str>,
    pub args_hash: &'a [u8; 32],
    pub grant: Option<&'a GrantValues>,
    /// What it runs on (resources); its descendants copy it.
    pub template: &'a serde_json::Value,
    /// The driver instance that will run it.
    pub runner: &'a str,
    /// What the policy was proved against.
    pub proof: RootProof,
}

/// A child to admit under a parent.
pub struct NewChild<'a> {
    /// The parent the creator named (a sandbox caller's parent is itself, whatever this says).
    pub parent: &'a str,
    pub name: Option<&'a str>,
    pub kind: Kind,
    pub command: &'a [String],
    pub policy: &'a serde_json::Value,
    pub policy_hash: &'a [u8; 32],
    /// What the policy was proved against.
    pub proof: AdmissionProof,
    pub credential_hash: &'a [u8; 32],
    pub request_id: Option<&'a str>,
    pub args_hash: &'a [u8; 32],
    pub runner: &'a str,
    /// The template the creator asked for: the database fits it to the parent's
    /// (`os_fit_template`), refusing another image or more resources. None: the parent's.
    pub template: Option<&'a serde_json::Value>,
}

/// A parent's current policy, read before the proof.
#[derive(Debug, Clone)]
pub struct ParentSnapshot {
    pub id: Uuid,
    pub name: String,
    pub kind: Kind,
    pub policy: serde_json::Value,
    pub policy_hash: Vec<u8>,
    pub policy_version: i32,
    /// The global maximum read in the same snapshot: its version (0: never set) and document.
    pub global_version: i32,
    pub global_policy: Option<serde_json::Value>,
}

/// A sandbox's policy with everything a write to it is proved against.
#[derive(Debug, Clone)]
pub struct PolicyTarget {
    pub id: Uuid,
    pub name: String,
    pub phase: Phase,
    pub version: i32,
    pub policy: serde_json::Value,
    /// The parent's current policy and version (None for a root).
    pub parent: Option<ParentPolicy>,
    /// Live children, whose policies must still fit after the write.
    pub children: Vec<PolicyChild>,
}

#[derive(Debug, Clone)]
pub struct ParentPolicy {
    pub id: Uuid,
    pub policy: serde_json::Value,
    pub version: i32,
}

#[derive(Debug, Clone)]
pub struct PolicyChild {
    pub id: Uuid,
    pub name: String,
    pub version: i32,
    pub policy: serde_json::Value,
}

/// Filters of an audit listing.
#[derive(Debug, Clone, Default)]
pub struct AuditFilter {
    pub sandbox: Option<String>,
    pub user: Option<String>,
    pub since: Option<DateTime<Utc>>,
    pub until: Option<DateTime<Utc>>,
    pub refusals_only: bool,
    pub before_id: Option<i64>,
    pub limit: i64,
}

impl Store {
    /// Connects (lazily) to `url`; every statement runs SERIALIZABLE.
    pub fn connect(url: &str, max_connections: usize) -> Result<Store, Error> {
        Ok(Store {
            pool: pool::build(url, max_connections)?,
            config: pool::parse(url)?,
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
            let row = client
                .query_one(
                    "SELECT r.rolsuper, \
                            pg_get_userbyid(c.relowner) AS history_owner, \
                            EXISTS (SELECT 1 FROM pg_roles o WHERE o.rolname = $1 \
                                     AND pg_has_role(current_user, o.oid, 'MEMBER')) AS owner_member \
                       FROM pg_roles r LEFT JOIN pg_class c ON c.oid = to_regclass('refinery_schema_history') \
                      WHERE r.rolname = current_user",
                    &[&OWNER_ROLE],
                )
                .await?;
            let (superuser, history_owner, owner_member): (bool, Option<String>, bool) =
                (row.get(0), row.get(1), row.get(2));
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

    /// Whether the URL's login is a superuser (the gateway refuses one unless allowed).
    pub async fn login_is_superuser(&self) -> Result<bool, Error> {
        let (client, conn) = self.config.connect(tokio_postgres::NoTls).await?;
        let conn = tokio::spawn(conn);
        let row = client.query_one("SELECT rolsuper FROM pg_roles WHERE rolname = session_user", &[]).await;
        drop(client);
        let _ = conn.await;
        Ok(row?.get(0))
    }

    /// Sets the gateway and operator roles' passwords (as a superuser: `gateway init-db`).
    pub async fn set_role_passwords(&self, gateway: &str, operator: &str) -> Result<(), Error> {
        let (client, conn) = self.config.connect(tokio_postgres::NoTls).await?;
        let conn = tokio::spawn(conn);
        // ALTER ROLE takes no parameters: quote the literals in SQL itself.
        let result = client
            .query_one(
                "SELECT format('ALTER ROLE %I LOGIN PASSWORD %L; ALTER ROLE %I LOGIN PASSWORD %L', $1::text, $2::text, \
                        $3::text, $4::text)",
                &[&GATEWAY_ROLE, &gateway, &OPERATOR_ROLE, &operator],
            )
            .await;
        let result = match result {
            Ok(row) => client.batch_execute(row.get::<_, &str>(0)).await.map_err(Error::from),
            Err(e) => Err(e.into()),
        };
        drop(client);
        let _ = conn.await;
        result
    }

    /// For a login that cannot migrate: the database must already be at this build's schema.
    async fn check_schema_current(&self, client: &tokio_postgres::Client) -> Result<(), Error> {
        let want = embedded::migrations::runner().get_migrations().iter().map(|m| m.version()).max().unwrap_or(0);
        let have: i32 = client
            .query_one("SELECT os_schema_version()", &[])
            .await
            .map_err(|e| {
                Error::database(format!(
                    "the database has no OpenShell schema this role can read ({e}); \
                     run `openshell gateway init-db` with a superuser first"
                ))
            })?
            .get(0);
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

    async fn call(
        &self,
        sql: &str,
        params: &[&(dyn tokio_postgres::types::ToSql + Sync)],
    ) -> Result<Vec<tokio_postgres::Row>, Error> {
        pool::call(&self.pool, &self.health, sql, params).await
    }

    /// [`Store::call`] for a long read-only statement, at READ COMMITTED (see pool::read).
    async fn read(
        &self,
        sql: &str,
        params: &[&(dyn tokio_postgres::types::ToSql + Sync)],
    ) -> Result<Vec<tokio_postgres::Row>, Error> {
        pool::read(&self.pool, &self.health, sql, params).await
    }

    /// Live sandboxes of every gateway: (phase, driver kind, count).
    pub async fn live_sandbox_counts(&self) -> Result<Vec<(String, String, i64)>, Error> {
        let rows = self.read("SELECT phase, driver, sandboxes FROM os_live_sandboxes()", &[]).await?;
        Ok(rows.iter().map(|r| (r.get(0), r.get(1), r.get(2))).collect())
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

    // ------------------------------------------------------------ principals and users

    /// The principal behind a token's SHA-256, if it is a user's live token or a live
    /// sandbox's credential.
    pub async fn authenticate(&self, token_hash: &[u8; 32]) -> Result<Option<Principal>, Error> {
        let rows = self
            .call(
                "SELECT kind, user_id, user_name, is_admin, sandbox_id, sandbox_name FROM authenticate(p_hash => $1)",
                &[&token_hash.as_slice()],
            )
            .await?;
        Ok(rows.first().map(|r| {
            if r.get::<_, String>("kind") == "user" {
                Principal::User { id: r.get("user_id"), name: r.get("user_name"), admin: r.get("is_admin") }
            } else {
                Principal::Sandbox {
                    id: r.get("sandbox_id"),
                    name: r.get("sandbox_name"),
                    owner: r.get("user_id"),
                    program: None,
                }
            }
        }))
    }

    /// The sandbox behind a live door credential's SHA-256 (its `program` is left for the
    /// gateway to fill from the door's header).
    pub async fn authenticate_door(&self, token_hash: &[u8; 32]) -> Result<Option<Principal>, Error> {
        let rows = self
            .call(
                "SELECT sandbox_id, sandbox_name, owner_id FROM authenticate_door(p_hash => $1)",
                &[&token_hash.as_slice()],
            )
            .await?;
        Ok(rows.first().map(|r| Principal::Sandbox {
            id: r.get("sandbox_id"),
            name: r.get("sandbox_name"),
            owner: r.get("owner_id"),
            program: None,
        }))
    }

    /// Issues a door credential (its hash) to a live sandbox, living `ttl_s` seconds;
    /// returns when it expires. Older ones beyond the previous are revoked.
    pub async fn door_credential_issue(
        &self,
        sandbox: Uuid,
        token_hash: &[u8; 32],
        ttl_s: i32,
    ) -> Result<DateTime<Utc>, Error> {
        let rows = self
            .call(
                "SELECT door_credential_issue(p_sandbox => $1, p_token_hash => $2, p_ttl_seconds => $3)",
                &[&sandbox, &token_hash.as_slice(), &ttl_s],
            )
            .await?;
        Ok(rows[0].get(0))
    }

    /// A tool call through a sandbox's door: UNAUTHENTICATED unless `door_hash` is a live door
    /// credential of `sandbox`, NOT_ALLOWED naming `program` unless it is the tree's grant's
    /// (a tree never granted allows none), then one call from its bucket, shared by every
    /// gateway replica (`LIMIT_REACHED` with the rate and `retry_after_ms` when empty), in one
    /// SQL call (see `take_door_call` in sql/door.sql).
    pub async fn take_door_call(
        &self,
        door_hash: &[u8; 32],
        sandbox: Uuid,
        program: Option<&str>,
    ) -> Result<(), Error> {
        self.call(
            "SELECT take_door_call(p_hash => $1, p_sandbox => $2, p_program => $3)",
            &[&door_hash.as_slice(), &sandbox, &program],
        )
        .await?;
        Ok(())
    }

    /// Creates the first admin when there are no users yet; false if users exist.
    pub async fn bootstrap_admin(&self, name: &str, token_hash: &[u8; 32]) -> Result<bool, Error> {
        let rows = self
            .call("SELECT bootstrap_admin(p_name => $1, p_token_hash => $2)", &[&name, &token_hash.as_slice()])
            .await?;
        Ok(rows[0].get(0))
    }

    /// A new token (its hash) for the first admin, audited as a system action; returns the
    /// admin's name. Only `openshell gateway admin-token` on the gateway's host calls it.
    pub async fn admin_token_mint(&self, token_hash: &[u8; 32], label: &str) -> Result<String, Error> {
        let rows = self
            .call("SELECT admin_token_mint(p_token_hash => $1, p_label => $2)", &[&token_hash.as_slice(), &label])
            .await?;
        Ok(rows[0].get(0))
    }

    /// An admin adds a user with one token (stored hashed); `user_create` decides who may.
    pub async fn create_user(
        &self,
        actor: &Principal,
        name: &str,
        admin: bool,
        token_hash: &[u8; 32],
    ) -> Result<(), Error> {
        self.call(
            "SELECT user_create(p_caller => $1, p_name => $2, p_admin => $3, p_token_hash => $4)",
            &[actor, &name, &admin, &token_hash.as_slice()],
        )
        .await?;
        Ok(())
    }

    // ------------------------------------------------------------ sandboxes

    /// A user creates a root sandbox (`create_root` refuses a sandbox caller); its grant, if
    /// any, goes over as one `os_grant_values`.
    pub async fn create_root(&self, user: &Principal, new: &NewRoot<'_>) -> Result<(Uuid, bool), Error> {
        let rows = self
            .call(
                "SELECT sandbox_id, replayed FROM create_root(p_caller => $1, p_name => $2, p_command => $3, \
                        p_template => $4, p_policy => $5, p_policy_hash => $6, p_credential_hash => $7, \
                        p_request_id => $8, p_args_hash => $9, p_grant => $10, p_runner => $11, p_proof => $12)",
                &[
                    user,
                    &new.name,
                    &new.command,
                    new.template,
                    new.policy,
                    &new.policy_hash.as_slice(),
                    &new.credential_hash.as_slice(),
                    &new.request_id,
                    &new.args_hash.as_slice(),
                    &new.grant,
                    &new.runner,
                    &new.proof,
                ],
            )
            .await?;
        let r = rows.first().ok_or_else(|| Error::database("create_root returned nothing"))?;
        Ok((r.get(0), r.get(1)))
    }

    /// The parent a child would be created under, with its current policy. A sandbox
    /// principal's parent is itself, whatever `parent` says (admission checks it).
    pub async fn parent_snapshot(&self, caller: &Principal, parent: &str) -> Result<ParentSnapshot, Error> {
        let rows = self
            .call(
                "SELECT id, name, kind, policy_version, document, hash, global_version, global_document \
                   FROM parent_snapshot(p_caller => $1, p_ref => $2)",
                &[caller, &parent],
            )
            .await?;
        snapshot_of(&rows, parent)
    }

    /// [`Store::parent_snapshot`] for a tool call through a sandbox's door, after
    /// [`Store::take_door_call`] in the same SQL call (see `door_parent_snapshot` in SQL):
    /// its refusals first, and nothing read when it refuses.
    pub async fn door_parent_snapshot(
        &self,
        door_hash: &[u8; 32],
        caller: &Principal,
        parent: &str,
    ) -> Result<ParentSnapshot, Error> {
        let rows = self
            .call(
                "SELECT id, name, kind, policy_version, document, hash, global_version, global_document \
                   FROM door_parent_snapshot(p_hash => $1, p_caller => $2, p_ref => $3)",
                &[&door_hash.as_slice(), caller, &parent],
            )
            .await?;
        snapshot_of(&rows, parent)
    }

    /// Admits a child in one SERIALIZABLE transaction (see `admit_child` in SQL). Admissions
    /// under the same parent take turns in this process first (see turns.rs).
    pub async fn admit_child(&self, caller: &Principal, new: &NewChild<'_>) -> Result<(Uuid, bool), Error> {
        // The parent admission proved against (a sandbox's own, which SQL checks).
        let _turn = self.turns.take(new.proof.parent_id).await;
        let rows = self
            .call(
                "SELECT sandbox_id, replayed FROM admit_child(p_caller => $1, p_parent => $2, p_name => $3, \
                        p_kind => $4, p_command => $5, p_policy => $6, p_policy_hash => $7, p_proof => $8, \
                        p_credential_hash => $9, p_request_id => $10, p_args_hash => $11, p_runner => $12, \
                        p_template => $13)",
                &[
                    caller,
                    &new.parent,
                    &new.name,
                    &new.kind,
                    &new.command,
                    new.policy,
                    &new.policy_hash.as_slice(),
                    &new.proof,
                    &new.credential_hash.as_slice(),
                    &new.request_id,
                    &new.args_hash.as_slice(),
                    &new.runner,
                    &new.template,
                ],
            )
            .await?;
        let r = rows.first().ok_or_else(|| Error::database("admit_child returned nothing"))?;
        Ok((r.get(0), r.get(1)))
    }

    /// Commits the receipt of a refused create.
    pub async fn record_refusal(
        &self,
        caller: &Principal,
        action: &str,
        target: &str,
        request_id: Option<&str>,
        refusal: &Error,
    ) -> Result<(), Error> {
        self.call(
            "SELECT record_refusal(p_caller => $1, p_action => $2, p_target => $3, p_request_id => $4, \
                    p_code => $5, p_message => $6, p_details => $7)",
            &[caller, &action, &target, &request_id, &refusal.code.as_str(), &refusal.message, &refusal.details],
        )
        .await?;
        Ok(())
    }

    pub async fn sandbox(&self, caller: &Principal, reference: &str) -> Result<Sandbox, Error> {
        let sql = format!("SELECT {SANDBOX_COLUMNS} FROM sandbox_get(p_caller => $1, p_ref => $2)");
        let rows = self.call(&sql, &[caller, &reference]).await?;
        rows.first()
            .map(Sandbox::from)
            .ok_or_else(|| Error::new(Code::NotFound, format!("sandbox {reference} not found")))
    }

    /// A sandbox by id, for the gateway's own use (no authorization).
    pub async fn sandbox_by_id(&self, id: Uuid) -> Result<Sandbox, Error> {
        let sql = format!("SELECT {SANDBOX_COLUMNS} FROM sandbox_by_id(p_id => $1)");
        let rows = self.call(&sql, &[&id]).await?;
        rows.first().map(Sandbox::from).ok_or_else(|| Error::new(Code::NotFound, format!("sandbox {id} not found")))
    }

    /// A user's sandboxes (an admin's: everyone's), newest first; `after` is the last
    /// (created_at, id) of the previous page.
    pub async fn list_sandboxes(
        &self,
        user: &Principal,
        include_stopped: bool,
        after: Option<(DateTime<Utc>, Uuid)>,
        limit: i64,
    ) -> Result<Vec<Sandbox>, Error> {
        let (after_at, after_id) = after.map_or((None, None), |(a, i)| (Some(a), Some(i)));
        let sql = format!(
            "SELECT {SANDBOX_COLUMNS} FROM sandbox_list(p_caller => $1, p_include_stopped => $2, \
                    p_after_at => $3, p_after_id => $4, p_limit => $5)"
        );
        let rows = self.call(&sql, &[user, &include_stopped, &after_at, &after_id, &limit]).await?;
        Ok(rows.iter().map(Sandbox::from).collect())
    }

    /// A sandbox and its descendants, in tree order.
    pub async fn tree(&self, caller: &Principal, reference: &str) -> Result<Vec<Sandbox>, Error> {
        let sql = format!("SELECT {SANDBOX_COLUMNS} FROM sandbox_subtree(p_caller => $1, p_ref => $2)");
        let rows = self.call(&sql, &[caller, &reference]).await?;
        Ok(rows.iter().map(Sandbox::from).collect())
    }

    // ------------------------------------------------------------ lifecycle

    /// Marks the subtree STOPPING (and DELETED where already stopped, for a delete);
    /// returns it deepest first.
    pub async fn begin_stop(&self, caller: &Principal, reference: &str, delete: bool) -> Result<Vec<StopItem>, Error> {
        let rows = self
            .call(
                "SELECT id, name, depth, phase, runner FROM begin_stop(p_caller => $1, p_ref => $2, p_delete => $3)",
                &[caller, &reference, &delete],
            )
            .await?;
        Ok(rows.iter().map(stop_item).collect())
    }

    /// The gateway stops a subtree on its own account.
    pub async fn system_stop(&self, id: Uuid, reason: &str) -> Result<Vec<StopItem>, Error> {
        let rows = self
            .call("SELECT id, name, depth, phase, runner FROM system_stop(p_id => $1, p_reason => $2)", &[&id, &reason])
            .await?;
        Ok(rows.iter().map(stop_item).collect())
    }

    /// The workload is gone: STOPPING becomes STOPPED (DELETED if a delete asked).
    /// None when there was nothing to finish.
    pub async fn finish_stop(&self, id: Uuid) -> Result<Option<Phase>, Error> {
        let rows = self.call("SELECT (finish_stop(p_id => $1)).phase", &[&id]).await?;
        Ok(rows.first().and_then(|r| r.get::<_, Option<Phase>>(0)))
    }

    /// Live children of a sandbox (a parent's workload is stopped only when this is 0).
    pub async fn live_children(&self, id: Uuid) -> Result<i64, Error> {
        let rows = self.call("SELECT live_children(p_id => $1)::bigint", &[&id]).await?;
        Ok(rows[0].get(0))
    }

    /// The sandbox a repeated request_id created, if this caller already made this request
    /// (a repeat with other arguments is refused).
    pub async fn replayed(
        &self,
        caller: &Principal,
        request_id: Option<&str>,
        args_hash: &[u8; 32],
    ) -> Result<Option<Uuid>, Error> {
        let Some(request_id) = request_id else { return Ok(None) };
        let rows = self
            .call(
                "SELECT os_replay(p_caller => $1, p_request_id => $2, p_args_hash => $3)",
                &[caller, &request_id, &args_hash.as_slice()],
            )
            .await?;
        Ok(rows[0].get(0))
    }

    pub async fn mark_ready(&self, id: Uuid) -> Result<(), Error> {
        self.call("SELECT mark_ready(p_id => $1)", &[&id]).await?;
        Ok(())
    }

    pub async fn record_exit(&self, id: Uuid, exit_code: i32) -> Result<(), Error> {
        self.call("SELECT record_exit(p_id => $1, p_exit_code => $2)", &[&id, &exit_code]).await?;
        Ok(())
    }

    /// The running sandbox `reference` names, if the caller may work in it (exec, files): a
    /// sandbox only in its own children of `kind`, a user in any of theirs.
    pub async fn work_target(&self, caller: &Principal, reference: &str, kind: Option<Kind>) -> Result<Uuid, Error> {
        let rows = self
            .call("SELECT work_target(p_caller => $1, p_ref => $2, p_kind => $3)", &[caller, &reference, &kind])
            .await?;
        Ok(rows[0].get(0))
    }

    /// What the supervisor of a starting sandbox applied.
    pub async fn record_isolation(&self, id: Uuid, isolation: &serde_json::Value) -> Result<(), Error> {
        self.call("SELECT record_isolation(p_id => $1, p_isolation => $2)", &[&id, isolation]).await?;
        Ok(())
    }

    /// Appends a batch of proxy denials (a JSON array) for a sandbox.
    pub async fn record_denials(&self, id: Uuid, denials: &serde_json::Value) -> Result<(), Error> {
        self.call("SELECT record_denials(p_id => $1, p_denials => $2)", &[&id, denials]).await?;
        Ok(())
    }

    /// The latest proxy denials of a sandbox the caller may see, newest first.
    pub async fn denials(&self, caller: &Principal, reference: &str, limit: i32) -> Result<Vec<Denial>, Error> {
        let rows = self
            .call(
                "SELECT at, program, host, port, method, path, reason \
                   FROM sandbox_denials(p_caller => $1, p_ref => $2, p_limit => $3)",
                &[caller, &reference, &limit],
            )
            .await?;
        Ok(rows.iter().map(Denial::from).collect())
    }

    /// A sandbox's current policy version, and its document when that differs from `known`.
    pub async fn current_policy(&self, id: Uuid, known: i32) -> Result<(i32, Option<serde_json::Value>), Error> {
        let rows = self
            .call(
                "SELECT version, document FROM sandbox_current_policy(p_id => $1, p_known => $2) WHERE version IS NOT NULL",
                &[&id, &known],
            )
            .await?;
        let r = rows.first().ok_or_else(|| Error::new(Code::NotFound, "sandbox not found"))?;
        Ok((r.get(0), r.get(1)))
    }

    pub async fn mark_error(&self, id: Uuid, reason: &str) -> Result<(), Error> {
        self.call("SELECT mark_error(p_id => $1, p_reason => $2)", &[&id, &reason]).await?;
        Ok(())
    }

    /// Every sandbox of this runner that may have a workload (PROVISIONING, READY, STOPPING).
    pub async fn live_rows(&self, runner: &str) -> Result<Vec<LiveRow>, Error> {
        let rows = self.call("SELECT id, name, phase, depth, age FROM live_rows(p_runner => $1)", &[&runner]).await?;
        Ok(rows
            .iter()
            .map(|r| LiveRow {
                id: r.get("id"),
                name: r.get("name"),
                phase: r.get("phase"),
                depth: r.get("depth"),
                age: std::time::Duration::from_secs_f64(r.get::<_, f64>("age").max(0.0)),
            })
            .collect())
    }

    /// Of the sandboxes whose files this gateway's host still has, those whose files must go:
    /// no live row names them, or they stopped longer than `keep` ago (see `expired_files`).
    pub async fn expired_files(&self, ids: &[Uuid], keep: std::time::Duration) -> Result<Vec<Uuid>, Error> {
        let keep = keep.as_secs_f64();
        let rows = self
            .call("SELECT id FROM expired_files(p_ids => $1, p_keep => make_interval(secs => $2))", &[&ids, &keep])
            .await?;
        Ok(rows.iter().map(|r| r.get(0)).collect())
    }

    // ------------------------------------------------------------ policies

    /// The global maximum policy: its version (0 if never set) and document (None if none).
    pub async fn global_max(&self) -> Result<(i32, Option<serde_json::Value>), Error> {
        let rows = self.call("SELECT version, document FROM global_max_current()", &[]).await?;
        let r = rows.first().ok_or_else(|| Error::database("global_max_current returned nothing"))?;
        Ok((r.get(0), r.get(1)))
    }

    /// An admin sets (None: clears) the global maximum; returns its new version.
    pub async fn set_global_max(
        &self,
        caller: &Principal,
        policy: Option<(&serde_json::Value, &[u8; 32])>,
    ) -> Result<i32, Error> {
        let (doc, hash) = policy.map_or((None, None), |(d, h)| (Some(d), Some(h.as_slice())));
        let rows = self
            .call("SELECT global_max_set(p_caller => $1, p_document => $2, p_hash => $3)", &[caller, &doc, &hash])
            .await?;
        Ok(rows[0].get(0))
    }

    /// A sandbox's current policy, its parent's, and its live children's, as the caller may
    /// see them: what a policy write is proved against.
    pub async fn policy_target(&self, caller: &Principal, reference: &str) -> Result<PolicyTarget, Error> {
        // A sandbox reads its own policy too, but writes only its descendants' (set_policy).
        let rows = self
            .call(
                "SELECT id, name, phase, policy_version, document, parent_id, parent_document, parent_version \
                   FROM policy_target(p_caller => $1, p_ref => $2)",
                &[caller, &reference],
            )
            .await?;
        let r = rows.first().ok_or_else(|| Error::new(Code::NotFound, format!("sandbox {reference} not found")))?;
        let id: Uuid = r.get("id");
        let children = self
            .call("SELECT id, name, policy_version, document FROM policy_children(p_id => $1)", &[&id])
            .await?
            .iter()
            .map(|c| PolicyChild { id: c.get(0), name: c.get(1), version: c.get(2), policy: c.get(3) })
            .collect();
        let parent_version: Option<i32> = r.get("parent_version");
        let parent_document: Option<serde_json::Value> = r.get("parent_document");
        let parent_id: Option<Uuid> = r.get("parent_id");
        Ok(PolicyTarget {
            id,
            name: r.get("name"),
            phase: r.get("phase"),
            version: r.get("policy_version"),
            policy: r.get("document"),
            parent: match (parent_id, parent_document, parent_version) {
                (Some(id), Some(doc), Some(v)) => Some(ParentPolicy { id, policy: doc, version: v }),
                (Some(_), _, _) => {
                    return Err(Error::new(Code::PolicyUnprovable, "the parent's current policy version is missing"));
                }
                _ => None,
            },
            children,
        })
    }

    /// Writes a new policy version (see `set_policy` in SQL); returns the version.
    pub async fn set_policy(
        &self,
        caller: &Principal,
        reference: &str,
        policy: &serde_json::Value,
        hash: &[u8; 32],
        proof: &serde_json::Value,
    ) -> Result<i32, Error> {
        let rows = self
            .call(
                "SELECT set_policy(p_caller => $1, p_ref => $2, p_document => $3, p_hash => $4, p_proof => $5)",
                &[caller, &reference, policy, &hash.as_slice(), proof],
            )
            .await?;
        Ok(rows[0].get(0))
    }

    // ------------------------------------------------------------ grants

    pub async fn create_grant(&self, caller: &Principal, root: &str, g: &GrantValues) -> Result<Grant, Error> {
        let sql = format!(
            "SELECT {GRANT_COLUMNS} FROM grant_create(p_caller => $1, p_ref => $2, p_max_depth => $3, \
             p_max_breadth => $4, p_max_total => $5, p_expires_at => $6, p_program => $7, p_tool_idle_seconds => $8, \
             p_program_resolved => $9, p_rate_calls => $10, p_rate_period_s => $11)"
        );
        let rows = self
            .call(
                &sql,
                &[
                    caller,
                    &root,
                    &g.max_depth,
                    &g.max_breadth,
                    &g.max_total,
                    &g.expires_at,
                    &g.program,
                    &g.tool_idle_seconds,
                    &g.program_resolved,
                    &g.rate.calls,
                    &g.rate.period_s,
                ],
            )
            .await?;
        one_grant(&rows)
    }

    pub async fn grant(&self, caller: &Principal, root: &str) -> Result<Grant, Error> {
        let sql = format!("SELECT {GRANT_COLUMNS} FROM grant_current(p_caller => $1, p_ref => $2)");
        one_grant(&self.call(&sql, &[caller, &root]).await?)
    }

    pub async fn update_grant(&self, caller: &Principal, root: &str, c: &GrantChange) -> Result<Grant, Error> {
        let sql = format!(
            "SELECT {GRANT_COLUMNS} FROM grant_update(p_caller => $1, p_ref => $2, p_max_depth => $3, \
             p_max_breadth => $4, p_max_total => $5, p_expires_at => $6, p_program => $7, p_tool_idle_seconds => $8, \
             p_program_resolved => $9, p_rate_calls => $10, p_rate_period_s => $11)"
        );
        let (program, resolved) = c.program.as_ref().map(|(p, r)| (p, r)).unzip();
        let rows = self
            .call(
                &sql,
                &[
                    caller,
                    &root,
                    &c.max_depth,
                    &c.max_breadth,
                    &c.max_total,
                    &c.expires_at,
                    &program,
                    &c.tool_idle_seconds,
                    &resolved,
                    &c.rate.map(|r| r.calls),
                    &c.rate.map(|r| r.period_s),
                ],
            )
            .await?;
        one_grant(&rows)
    }

    pub async fn revoke_grant(&self, caller: &Principal, root: &str) -> Result<Grant, Error> {
        let sql = format!("SELECT {GRANT_COLUMNS} FROM grant_revoke(p_caller => $1, p_ref => $2)");
        one_grant(&self.call(&sql, &[caller, &root]).await?)
    }

    /// Every grant of the caller's trees, or one tree's history when `root` is given.
    pub async fn list_grants(&self, caller: &Principal, root: Option<&str>) -> Result<Vec<Grant>, Error> {
        let sql = format!("SELECT {GRANT_COLUMNS} FROM grant_list(p_caller => $1, p_ref => $2)");
        let rows = self.call(&sql, &[caller, &root]).await?;
        Ok(rows.iter().map(Grant::from).collect())
    }

    // ------------------------------------------------------------ audit

    /// The audit entries the caller may read (who may read what is decided in SQL).
    pub async fn audit(&self, caller: &Principal, f: &AuditFilter) -> Result<Vec<AuditEntry>, Error> {
        let rows = self
            .call(
                "SELECT * FROM audit_list(p_caller => $1, p_sandbox_ref => $2, p_owner_name => $3, p_since => $4, \
                        p_until => $5, p_refusals_only => $6, p_before_id => $7, p_limit => $8)",
                &[caller, &f.sandbox, &f.user, &f.since, &f.until, &f.refusals_only, &f.before_id, &f.limit],
            )
            .await?;
        Ok(rows.iter().map(AuditEntry::from).collect())
    }
}

fn stop_item(r: &tokio_postgres::Row) -> StopItem {
    StopItem {
        id: r.get("id"),
        name: r.get("name"),
        depth: r.get("depth"),
        phase: r.get("phase"),
        runner: r.get("runner"),
    }
}

fn one_grant(rows: &[tokio_postgres::Row]) -> Result<Grant, Error> {
    rows.first().map(Grant::from).ok_or_else(|| Error::new(Code::NotFound, "no grant"))
}

fn snapshot_of(rows: &[tokio_postgres::Row], parent: &str) -> Result<ParentSnapshot, Error> {
    let r = rows.first().ok_or_else(|| Error::new(Code::NotFound, format!("sandbox {parent} not found")))?;
    Ok(ParentSnapshot {
        id: r.get("id"),
        name: r.get("name"),
        kind: r.get("kind"),
        policy_version: r.get("policy_version"),
        policy: r.get("document"),
        policy_hash: r.get("hash"),
        global_version: r.get("global_version"),
        global_policy: r.get("global_document"),
    })
}
