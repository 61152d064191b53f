//! Every statement the store sends, in one registry: its SQL, the Rust type of each parameter
//! it binds and of each column it reads. The methods send only these; the statements test
//! (crates/store/tests/statements.rs) prepares each against a freshly migrated database and
//! checks PostgreSQL's parameter and column types against the ones declared here, so a
//! function whose signature or result changed in sql/ fails a test, not a call.
//!
//! A statement reads its columns by name, in the order listed; an empty list means the
//! result is not read (a function called for its effect).

use chrono::{DateTime, Utc};
use postgres_types::{FromSql, ToSql, Type};
use uuid::Uuid;

use crate::{AdmissionProof, GrantValues, Kind, Phase, Principal, RootProof};

type Json = serde_json::Value;

/// A Rust type as the store binds or reads it: its name and which PostgreSQL types it takes.
#[derive(Clone, Copy)]
pub struct Rust {
    pub name: &'static str,
    pub accepts: fn(&Type) -> bool,
}

impl std::fmt::Debug for Rust {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name)
    }
}

/// One statement and the Rust types on both sides of it.
#[derive(Debug, Clone, Copy)]
pub struct Query {
    pub name: &'static str,
    pub sql: &'static str,
    /// What each `$n` is bound from, in order.
    pub params: &'static [Rust],
    /// The columns read (name, type), in the statement's order; empty: the result is not read.
    pub columns: &'static [(&'static str, Rust)],
}

macro_rules! bind {
    ($t:ty) => {
        Rust { name: stringify!($t), accepts: <$t as ToSql>::accepts }
    };
}

macro_rules! read {
    ($t:ty) => {
        Rust { name: stringify!($t), accepts: <$t as FromSql<'static>>::accepts }
    };
}

macro_rules! columns {
    (($($c:ident: $ct:ty),* $(,)?)) => {
        &[$((stringify!($c), read!($ct))),*]
    };
    ($shared:ident) => {
        $shared
    };
}

macro_rules! queries {
    ($( $(#[$doc:meta])* $name:ident = $sql:expr; ($($p:ty),* $(,)?) -> $cols:tt; )*) => {
        $(
            $(#[$doc])*
            pub const $name: Query = Query {
                name: stringify!($name),
                sql: $sql,
                params: &[$(bind!($p)),*],
                columns: columns!($cols),
            };
        )*
        /// Every statement of the registry.
        pub const ALL: &[Query] = &[$($name),*];
    };
}

type Columns = &'static [(&'static str, Rust)];

/// The columns of a sandbox as [`crate::Sandbox`] reads them, then `extra`.
macro_rules! sandbox_then {
    ($($c:ident: $ct:ty),* $(,)?) => {
        columns!((id: Uuid, name: String, owner_name: String, parent_id: Option<Uuid>,
            parent_name: Option<String>, root_id: Uuid, root_name: String, depth: i32, kind: Kind, phase: Phase,
            phase_reason: String, command: Vec<String>, policy_version: i32, policy_hash: String,
            exit_code: Option<i32>, template: Json, isolation: Option<Json>, created_by: String,
            created_at: DateTime<Utc>, updated_at: DateTime<Utc> $(, $c: $ct)*))
    };
}

/// A sandbox as [`crate::Sandbox`] reads it.
const SANDBOX: Columns = sandbox_then!();

/// A root just admitted, or the first one of its request_id (`replayed`).
const ROOT_CREATED: Columns = sandbox_then!(replayed: bool);

/// A grant as [`crate::Grant`] reads it.
const GRANT: Columns = columns!((id: i64, root_id: Uuid, root_name: String, max_depth: i32, max_breadth: i32,
    max_total: i32, expires_at: DateTime<Utc>, program: String, state: crate::GrantState, created_by: String,
    created_at: DateTime<Utc>, ended_at: Option<DateTime<Utc>>, children_admitted: i64,
    program_resolved: Option<String>, rate_calls: i32, rate_period_s: i32, tool_idle_seconds: i32));

/// A proposal as [`crate::Proposal`] reads it.
const PROPOSAL: Columns = columns!((id: i64, sandbox_id: Uuid, sandbox_name: String, state: String, rules: Json,
    reason: String, created_at: DateTime<Utc>, expires_at: DateTime<Utc>, decided_at: Option<DateTime<Utc>>,
    decided_by: Option<String>, decision_reason: Option<String>, policy_version: Option<i32>,
    superseded_by: Option<i64>));

/// A sandbox of a subtree being stopped as [`crate::StopItem`] reads it.
const STOP: Columns = columns!((id: Uuid, name: String, depth: i32, phase: Phase, runner: String));

/// The columns of a sandbox as [`crate::Sandbox`] reads them (`sandbox_view`).
macro_rules! sandbox_columns {
    () => {
        "id, name, owner_name, parent_id, parent_name, root_id, root_name, depth, kind, phase, phase_reason, command, \
         policy_version, coalesce(policy_hash, '') AS policy_hash, exit_code, template, isolation, created_by, \
         created_at, updated_at"
    };
}

/// The columns of a grant as [`crate::Grant`] reads them (`grant_view`).
macro_rules! grant_columns {
    () => {
        "id, root_id, root_name, max_depth, max_breadth, max_total, expires_at, program, state, created_by, \
         created_at, ended_at, children_admitted, program_resolved, rate_calls, rate_period_s, tool_idle_seconds"
    };
}

/// The columns of a proposal as [`crate::Proposal`] reads them (`proposal_view`).
macro_rules! proposal_columns {
    () => {
        "id, sandbox_id, sandbox_name, state, rules, reason, created_at, expires_at, decided_at, decided_by, \
         decision_reason, policy_version, superseded_by"
    };
}

/// The columns of a parent's snapshot as [`crate::ParentSnapshot`] reads them.
macro_rules! snapshot_columns {
    () => {
        "id, name, kind, policy_version, document, hash, global_version, global_document"
    };
}

/// The columns of a subtree being stopped as [`crate::StopItem`] reads them.
macro_rules! stop_columns {
    () => {
        "id, name, depth, phase, runner"
    };
}

queries! {
    // ------------------------------------------------------------ start-up (lib.rs, roles.rs)

    /// Whether the login may migrate (a superuser, or a member of the owner role) and who owns
    /// the migrations' history.
    LOGIN_ROLES = "SELECT r.rolsuper, \
                          pg_get_userbyid(c.relowner) AS history_owner, \
                          EXISTS (SELECT 1 FROM pg_roles o WHERE o.rolname = $1 \
                                   AND pg_has_role(current_user, o.oid, 'MEMBER')) AS owner_member \
                     FROM pg_roles r LEFT JOIN pg_class c ON c.oid = to_regclass('refinery_schema_history') \
                    WHERE r.rolname = current_user";
        (&str) -> (rolsuper: bool, history_owner: Option<String>, owner_member: bool);
    SCHEMA_VERSION = "SELECT os_schema_version()"; () -> (os_schema_version: i32);
    LOGIN_IS_SUPERUSER = "SELECT rolsuper FROM pg_roles WHERE rolname = session_user"; () -> (rolsuper: bool);
    /// ALTER ROLE takes no parameters: the literals are quoted in SQL itself.
    ROLE_PASSWORDS = "SELECT format('ALTER ROLE %I LOGIN PASSWORD %L; ALTER ROLE %I LOGIN PASSWORD %L', $1::text, \
                      $2::text, $3::text, $4::text)";
        (&str, &str, &str, &str) -> (format: String);

    // ------------------------------------------------------------ definitions (definitions.rs)

    SQL_REVISION_HELD = "SELECT revision, checksum FROM sql_revisions ORDER BY revision DESC LIMIT 1";
        () -> (revision: i32, checksum: Vec<u8>);
    SQL_REVISION_RECORD = "INSERT INTO sql_revisions (revision, checksum) VALUES ($1, $2)"; (i32, &[u8]) -> ();
    SQL_REVISION = "SELECT revision, checksum FROM os_sql_revision()";
        () -> (revision: Option<i32>, checksum: Option<Vec<u8>>);
    /// definitions/verify.sql: what an apply did not (re)define.
    DEFINITIONS_LEFT = include_str!("definitions/verify.sql"); () -> (object: String);
    /// definitions/catalog.sql: every function, trigger and view with its definition.
    DEFINITIONS_CATALOG = include_str!("definitions/catalog.sql"); () -> (object: String, definition: String);

    // ------------------------------------------------------------ metrics (sql/metrics.sql)

    LIVE_SANDBOXES = "SELECT phase, driver, sandboxes FROM os_live_sandboxes()";
        () -> (phase: String, driver: String, sandboxes: i64);

    // ------------------------------------------------------------ users (sql/auth.sql, sql/users.sql)

    AUTHENTICATE = "SELECT kind, user_id, user_name, is_admin, sandbox_id, sandbox_name FROM authenticate(p_hash => $1)";
        (&[u8]) -> (kind: String, user_id: i64, user_name: Option<String>, is_admin: Option<bool>,
                    sandbox_id: Option<Uuid>, sandbox_name: Option<String>);
    BOOTSTRAP_ADMIN = "SELECT bootstrap_admin(p_name => $1, p_token_hash => $2)"; (&str, &[u8]) -> (bootstrap_admin: bool);
    ADMIN_TOKEN_MINT = "SELECT admin_token_mint(p_token_hash => $1, p_label => $2)";
        (&[u8], &str) -> (admin_token_mint: String);
    USER_CREATE = "SELECT user_create(p_caller => $1, p_name => $2, p_admin => $3, p_token_hash => $4)";
        (Principal, &str, bool, &[u8]) -> ();

    // ------------------------------------------------------------ the door (sql/door.sql)

    AUTHENTICATE_DOOR = "SELECT sandbox_id, sandbox_name, owner_id FROM authenticate_door(p_hash => $1)";
        (&[u8]) -> (sandbox_id: Uuid, sandbox_name: String, owner_id: i64);
    DOOR_CREDENTIAL_ISSUE = "SELECT door_credential_issue(p_sandbox => $1, p_token_hash => $2, p_ttl_seconds => $3)";
        (Uuid, &[u8], i32) -> (door_credential_issue: DateTime<Utc>);
    TAKE_DOOR_CALL = "SELECT take_door_call(p_hash => $1, p_sandbox => $2, p_program => $3)";
        (&[u8], Uuid, Option<&str>) -> ();
    DOOR_PARENT_SNAPSHOT = concat!("SELECT ", snapshot_columns!(),
                                   " FROM door_parent_snapshot(p_hash => $1, p_caller => $2, p_ref => $3)");
        (&[u8], Principal, &str) -> (id: Uuid, name: String, kind: Kind, policy_version: i32, document: Json,
                                     hash: Vec<u8>, global_version: i32, global_document: Option<Json>);

    // ------------------------------------------------------------ admission (sql/admission.sql, sql/idempotency.sql)

    CREATE_ROOT = concat!("SELECT ", sandbox_columns!(), ", replayed FROM create_root(p_caller => $1, \
                           p_name => $2, p_command => $3, p_template => $4, p_policy => $5, p_policy_hash => $6, \
                           p_credential_hash => $7, p_request_id => $8, p_args_hash => $9, p_grant => $10, \
                           p_runner => $11, p_proof => $12)");
        (Principal, &str, &[String], Json, Json, &[u8], &[u8], Option<&str>, &[u8], Option<GrantValues>, &str,
         RootProof) -> ROOT_CREATED;
    PARENT_SNAPSHOT = concat!("SELECT ", snapshot_columns!(), " FROM parent_snapshot(p_caller => $1, p_ref => $2)");
        (Principal, &str) -> (id: Uuid, name: String, kind: Kind, policy_version: i32, document: Json,
                              hash: Vec<u8>, global_version: i32, global_document: Option<Json>);
    ADMIT_CHILD = "SELECT sandbox_id, replayed FROM admit_child(p_caller => $1, p_parent => $2, p_name => $3, \
                   p_kind => $4, p_command => $5, p_policy => $6, p_policy_hash => $7, p_proof => $8, \
                   p_credential_hash => $9, p_request_id => $10, p_args_hash => $11, p_runner => $12, \
                   p_template => $13)";
        (Principal, &str, Option<&str>, Kind, &[String], Json, &[u8], AdmissionProof, &[u8], Option<&str>, &[u8],
         &str, Option<Json>) -> (sandbox_id: Uuid, replayed: bool);
    CREATE_CHILD = concat!("SELECT outcome, ", sandbox_columns!(), ", inherited, snapshot_id, snapshot_name, \
                            snapshot_kind, snapshot_version, snapshot_document, snapshot_hash, global_version, \
                            global_document \
                            FROM create_child(p_caller => $1, p_door => $2, p_parent => $3, p_parent_id => $4, \
                            p_name => $5, p_kind => $6, p_command => $7, p_policy => $8, p_policy_hash => $9, \
                            p_proof => $10, p_credential_hash => $11, p_request_id => $12, p_args_hash => $13, \
                            p_runner => $14, p_template => $15)");
        (Principal, Option<&[u8]>, &str, Option<Uuid>, Option<&str>, Kind, &[String], Option<Json>, Option<&[u8]>,
         Option<AdmissionProof>, &[u8], Option<&str>, &[u8], &str, Option<Json>)
        -> (outcome: String, id: Uuid, name: String, owner_name: String, parent_id: Option<Uuid>,
            parent_name: Option<String>, root_id: Uuid, root_name: String, depth: i32, kind: Kind, phase: Phase,
            phase_reason: String, command: Vec<String>, policy_version: i32, policy_hash: String,
            exit_code: Option<i32>, template: Json, isolation: Option<Json>, created_by: String,
            created_at: DateTime<Utc>, updated_at: DateTime<Utc>, inherited: Option<Json>, snapshot_id: Option<Uuid>,
            snapshot_name: Option<String>, snapshot_kind: Option<Kind>, snapshot_version: Option<i32>,
            snapshot_document: Option<Json>, snapshot_hash: Option<Vec<u8>>, global_version: Option<i32>,
            global_document: Option<Json>);
    REPLAY = "SELECT os_replay(p_caller => $1, p_request_id => $2, p_args_hash => $3)";
        (Principal, &str, &[u8]) -> (os_replay: Option<Uuid>);

    // ------------------------------------------------------------ sandboxes (sql/sandboxes.sql)

    SANDBOX_GET = concat!("SELECT ", sandbox_columns!(), " FROM sandbox_get(p_caller => $1, p_ref => $2)");
        (Principal, &str) -> SANDBOX;
    SANDBOX_BY_ID = concat!("SELECT ", sandbox_columns!(), " FROM sandbox_by_id(p_id => $1)"); (Uuid) -> SANDBOX;
    SANDBOX_LIST = concat!("SELECT ", sandbox_columns!(), " FROM sandbox_list(p_caller => $1, \
                            p_include_stopped => $2, p_after_at => $3, p_after_id => $4, p_limit => $5)");
        (Principal, bool, Option<DateTime<Utc>>, Option<Uuid>, i64) -> SANDBOX;
    SANDBOX_SUBTREE = concat!("SELECT ", sandbox_columns!(), " FROM sandbox_subtree(p_caller => $1, p_ref => $2)");
        (Principal, &str) -> SANDBOX;

    // ------------------------------------------------------------ lifecycle (sql/lifecycle.sql, sql/limits.sql)

    BEGIN_STOP = concat!("SELECT ", stop_columns!(), " FROM begin_stop(p_caller => $1, p_ref => $2, p_delete => $3)");
        (Principal, &str, bool) -> STOP;
    SYSTEM_STOP = concat!("SELECT ", stop_columns!(), " FROM system_stop(p_id => $1, p_reason => $2)");
        (Uuid, &str) -> STOP;
    FINISH_STOP = "SELECT (finish_stop(p_id => $1)).phase"; (Uuid) -> (phase: Option<Phase>);
    LIVE_CHILDREN = "SELECT live_children(p_id => $1)::bigint"; (Uuid) -> (live_children: i64);
    RECORD_EXIT = "SELECT record_exit(p_id => $1, p_exit_code => $2)"; (Uuid, i32) -> ();
    MARK_ERROR = "SELECT mark_error(p_id => $1, p_reason => $2)"; (Uuid, &str) -> ();
    LIVE_ROWS = "SELECT id, name, phase, depth, age FROM live_rows(p_runner => $1)";
        (&str) -> (id: Uuid, name: String, phase: Phase, depth: i32, age: f64);
    EXPIRED_FILES = "SELECT id FROM expired_files(p_ids => $1, p_keep => make_interval(secs => $2))";
        (&[Uuid], f64) -> (id: Uuid);

    // ------------------------------------------------------------ work (sql/work.sql)

    WORK_TARGET = "SELECT work_target(p_caller => $1, p_ref => $2, p_kind => $3)";
        (Principal, &str, Option<Kind>) -> (work_target: Uuid);
    EXEC_BEGIN = "SELECT exec_begin(p_caller => $1, p_ref => $2, p_kind => $3)";
        (Principal, &str, Option<Kind>) -> (exec_begin: Uuid);
    EXEC_END = "SELECT exec_end(p_id => $1)"; (Uuid) -> ();
    EXECS_RESET = "SELECT execs_reset(p_runner => $1)"; (&str) -> (execs_reset: i32);
    IDLE_TOOLS = "SELECT idle_tools(p_runner => $1)"; (&str) -> (idle_tools: Uuid);
    STOP_IDLE = concat!("SELECT ", stop_columns!(), " FROM stop_idle(p_id => $1)"); (Uuid) -> STOP;
    FILE_TARGET = "SELECT file_target(p_caller => $1, p_ref => $2)"; (Principal, &str) -> (file_target: Uuid);

    // ------------------------------------------------------------ the supervisor (sql/supervisor.sql)

    SUPERVISOR_START = "SELECT id, name, policy_version, document, parent_document, global_document \
                        FROM supervisor_start(p_hash => $1)";
        (&[u8]) -> (id: Uuid, name: String, policy_version: i32, document: Json,
                    parent_document: Option<Json>, global_document: Option<Json>);
    SUPERVISOR_READY = "SELECT id, phase, phase_reason, isolation, policy_version, exit_code, updated_at \
                        FROM supervisor_ready(p_hash => $1, p_isolation => $2)";
        (&[u8], Json) -> (id: Uuid, phase: Phase, phase_reason: String, isolation: Option<Json>,
                          policy_version: i32, exit_code: Option<i32>, updated_at: DateTime<Utc>);
    RECORD_DENIALS = "SELECT record_denials(p_id => $1, p_denials => $2)"; (Uuid, Json) -> ();
    DENIALS = "SELECT at, program, host, port, method, path, reason \
                 FROM sandbox_denials(p_caller => $1, p_ref => $2, p_limit => $3)";
        (Principal, &str, i32) -> (at: DateTime<Utc>, program: String, host: String, port: i32,
                                   method: Option<String>, path: Option<String>, reason: String);

    // ------------------------------------------------------------ policies (sql/policies.sql)

    CURRENT_POLICY = "SELECT version, document FROM sandbox_current_policy(p_id => $1, p_known => $2) \
                      WHERE version IS NOT NULL";
        (Uuid, i32) -> (version: i32, document: Option<Json>);
    GLOBAL_MAX = "SELECT version, document FROM global_max_current()"; () -> (version: i32, document: Option<Json>);
    GLOBAL_MAX_SET = "SELECT global_max_set(p_caller => $1, p_document => $2, p_hash => $3)";
        (Principal, Option<&Json>, Option<&[u8]>) -> (global_max_set: i32);
    POLICY_TARGET = "SELECT id, name, phase, policy_version, document, parent_id, parent_document, parent_version \
                       FROM policy_target(p_caller => $1, p_ref => $2)";
        (Principal, &str) -> (id: Uuid, name: String, phase: Phase, policy_version: i32, document: Json,
                              parent_id: Option<Uuid>, parent_document: Option<Json>, parent_version: Option<i32>);
    POLICY_CHILDREN = "SELECT id, name, policy_version, document FROM policy_children(p_id => $1)";
        (Uuid) -> (id: Uuid, name: String, policy_version: i32, document: Json);
    SET_POLICY = "SELECT set_policy(p_caller => $1, p_ref => $2, p_document => $3, p_hash => $4, p_proof => $5)";
        (Principal, &str, Json, &[u8], Json) -> (set_policy: i32);

    // ------------------------------------------------------------ grants (sql/grants.sql)

    GRANT_CREATE = concat!("SELECT ", grant_columns!(), " FROM grant_create(p_caller => $1, p_ref => $2, \
                            p_max_depth => $3, p_max_breadth => $4, p_max_total => $5, p_expires_at => $6, \
                            p_program => $7, p_tool_idle_seconds => $8, p_program_resolved => $9, \
                            p_rate_calls => $10, p_rate_period_s => $11)");
        (Principal, &str, i32, i32, i32, DateTime<Utc>, &str, Option<i32>, &str, i32, i32) -> GRANT;
    GRANT_CURRENT = concat!("SELECT ", grant_columns!(), " FROM grant_current(p_caller => $1, p_ref => $2)");
        (Principal, &str) -> GRANT;
    GRANT_UPDATE = concat!("SELECT ", grant_columns!(), " FROM grant_update(p_caller => $1, p_ref => $2, \
                            p_max_depth => $3, p_max_breadth => $4, p_max_total => $5, p_expires_at => $6, \
                            p_program => $7, p_tool_idle_seconds => $8, p_program_resolved => $9, \
                            p_rate_calls => $10, p_rate_period_s => $11)");
        (Principal, &str, Option<i32>, Option<i32>, Option<i32>, Option<DateTime<Utc>>, Option<&str>, Option<i32>,
         Option<&str>, Option<i32>, Option<i32>) -> GRANT;
    GRANT_REVOKE = concat!("SELECT ", grant_columns!(), " FROM grant_revoke(p_caller => $1, p_ref => $2)");
        (Principal, &str) -> GRANT;
    GRANT_LIST = concat!("SELECT ", grant_columns!(), " FROM grant_list(p_caller => $1, p_ref => $2)");
        (Principal, Option<&str>) -> GRANT;
    GRANT_STATUS = "SELECT grant_id, root_id, root_name, sandbox_id, sandbox_name, sandbox_kind, state, max_depth, \
                           max_breadth, max_total, expires_at, program, depth, live_children, live_total, \
                           remaining_depth, remaining_breadth, remaining_total \
                      FROM grant_status(p_caller => $1, p_ref => $2)";
        (Principal, Option<&str>) -> (grant_id: i64, root_id: Uuid, root_name: String, sandbox_id: Uuid,
                                      sandbox_name: String, sandbox_kind: Kind, state: crate::GrantState,
                                      max_depth: i32, max_breadth: i32, max_total: i32, expires_at: DateTime<Utc>,
                                      program: String, depth: i32, live_children: i32, live_total: i32,
                                      remaining_depth: i32, remaining_breadth: i32, remaining_total: i32);

    // ------------------------------------------------------------ proposals (sql/proposals.sql)

    PROPOSAL_CREATE = concat!("SELECT ", proposal_columns!(), " FROM proposal_create(p_sandbox => $1, \
                               p_program => $2, p_rules => $3, p_reason => $4, p_ttl_seconds => $5)");
        (Uuid, Option<&str>, Json, &str, i32) -> PROPOSAL;
    PROPOSAL_GET_OWN = concat!("SELECT ", proposal_columns!(), " FROM proposal_get_own(p_sandbox => $1, p_id => $2)");
        (Uuid, i64) -> PROPOSAL;
    PROPOSAL_LIST = concat!("SELECT ", proposal_columns!(), " FROM proposal_list(p_caller => $1, p_ref => $2, \
                             p_state => $3, p_limit => $4)");
        (Principal, Option<&str>, Option<&str>, i32) -> PROPOSAL;
    PROPOSAL_PENDING = concat!("SELECT ", proposal_columns!(), " FROM proposal_pending(p_caller => $1, p_id => $2)");
        (Principal, i64) -> PROPOSAL;
    PROPOSAL_APPROVE = concat!("SELECT ", proposal_columns!(), " FROM proposal_approve(p_caller => $1, p_id => $2, \
                                p_keys => $3, p_document => $4, p_hash => $5, p_proof => $6)");
        (Principal, i64, &[String], Json, &[u8], Json) -> PROPOSAL;
    PROPOSAL_REJECT = concat!("SELECT ", proposal_columns!(), " FROM proposal_reject(p_caller => $1, p_id => $2, \
                               p_reason => $3)");
        (Principal, i64, &str) -> PROPOSAL;

    // ------------------------------------------------------------ audit (sql/audit.sql)

    RECORD_REFUSAL = "SELECT record_refusal(p_caller => $1, p_action => $2, p_target => $3, p_request_id => $4, \
                      p_code => $5, p_message => $6, p_details => $7)";
        (Principal, &str, &str, Option<&str>, &str, &str, Json) -> ();
    AUDIT_LIST = "SELECT id, at, action, outcome, code, message, actor, owner_name, sandbox_id, sandbox_name, \
                         parent_id, root_id, request_id, details \
                    FROM audit_list(p_caller => $1, p_sandbox_ref => $2, p_owner_name => $3, p_since => $4, \
                                    p_until => $5, p_refusals_only => $6, p_before_id => $7, p_limit => $8)";
        (Principal, Option<&str>, Option<&str>, Option<DateTime<Utc>>, Option<DateTime<Utc>>, bool, Option<i64>, i64)
        -> (id: i64, at: DateTime<Utc>, action: String, outcome: String, code: Option<String>, message: String,
            actor: String, owner_name: Option<String>, sandbox_id: Option<Uuid>, sandbox_name: Option<String>,
            parent_id: Option<Uuid>, root_id: Option<Uuid>, request_id: Option<String>, details: Json);
    AUDIT_VERIFY = "SELECT chain, receipts, head_seq, head_hash, broken_seq, broken_id, problem, detail \
                      FROM audit_verify(p_caller => $1, p_heads => $2)";
        (Principal, Json) -> (chain: String, receipts: Option<i64>, head_seq: Option<i64>, head_hash: Option<String>,
                              broken_seq: Option<i64>, broken_id: Option<i64>, problem: Option<String>,
                              detail: Option<String>);
    AUDIT_HEADS = "SELECT chain, seq, head, at FROM audit_heads(p_caller => $1, p_after => $2, p_limit => $3)";
        (Principal, Option<&str>, i64) -> (chain: String, seq: i64, head: String, at: DateTime<Utc>);
}
