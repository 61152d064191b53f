//! What the store returns: rows of the views, decoded.

use chrono::{DateTime, Utc};
use serde::Serialize;
use tokio_postgres::Row;
use uuid::Uuid;

use crate::{GrantState, Kind, Phase};

/// Who is calling, as authenticated by the gateway. It crosses into SQL as one `os_caller`
/// value (typed.rs), where what it may do is decided; `admin` is for display only.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "kind", rename_all = "lowercase")]
pub enum Principal {
    User {
        id: i64,
        name: String,
        admin: bool,
    },
    /// A sandbox's supervisor; `program` is the calling program when the call came through
    /// the in-sandbox door.
    Sandbox {
        id: Uuid,
        name: String,
        owner: i64,
        program: Option<String>,
    },
}

impl Principal {
    pub fn is_user(&self) -> bool {
        matches!(self, Principal::User { .. })
    }
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Sandbox {
    pub id: Uuid,
    pub name: String,
    pub owner: String,
    pub parent_id: Option<Uuid>,
    pub parent_name: Option<String>,
    pub root_id: Uuid,
    pub root_name: String,
    pub depth: i32,
    pub kind: Kind,
    pub phase: Phase,
    pub phase_reason: String,
    pub command: Vec<String>,
    pub policy_version: i32,
    pub policy_hash: String,
    pub exit_code: Option<i32>,
    /// What it runs on (resources), copied from its parent.
    pub template: serde_json::Value,
    /// What isolation its supervisor applied at start.
    pub isolation: Option<serde_json::Value>,
    pub created_by: String,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

pub(crate) const SANDBOX_COLUMNS: &str = "id, name, owner_name, parent_id, parent_name, root_id, root_name, depth, \
     kind, phase, phase_reason, command, policy_version, coalesce(policy_hash, '') AS policy_hash, exit_code, \
     template, isolation, created_by, created_at, updated_at";

impl From<&Row> for Sandbox {
    fn from(r: &Row) -> Sandbox {
        Sandbox {
            id: r.get("id"),
            name: r.get("name"),
            owner: r.get("owner_name"),
            parent_id: r.get("parent_id"),
            parent_name: r.get("parent_name"),
            root_id: r.get("root_id"),
            root_name: r.get("root_name"),
            depth: r.get("depth"),
            kind: r.get("kind"),
            phase: r.get("phase"),
            phase_reason: r.get("phase_reason"),
            command: r.get("command"),
            policy_version: r.get("policy_version"),
            policy_hash: r.get("policy_hash"),
            exit_code: r.get("exit_code"),
            template: r.get("template"),
            isolation: r.get("isolation"),
            created_by: r.get("created_by"),
            created_at: r.get("created_at"),
            updated_at: r.get("updated_at"),
        }
    }
}

/// A request a sandbox's egress proxy refused.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Denial {
    pub at: DateTime<Utc>,
    pub program: String,
    pub host: String,
    pub port: i32,
    pub method: Option<String>,
    pub path: Option<String>,
    pub reason: String,
}

impl From<&Row> for Denial {
    fn from(r: &Row) -> Denial {
        Denial {
            at: r.get("at"),
            program: r.get("program"),
            host: r.get("host"),
            port: r.get("port"),
            method: r.get("method"),
            path: r.get("path"),
            reason: r.get("reason"),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Grant {
    pub id: i64,
    pub root_id: Uuid,
    pub root_name: String,
    pub max_depth: i32,
    pub max_breadth: i32,
    pub max_total: i32,
    pub expires_at: DateTime<Utc>,
    pub program: String,
    pub state: GrantState,
    pub created_by: String,
    pub created_at: DateTime<Utc>,
    pub ended_at: Option<DateTime<Utc>>,
    pub children_admitted: i64,
    /// `program` with its symlinks resolved when the grant was written (None for grants
    /// written before this was kept).
    pub program_resolved: Option<String>,
    /// MCP tool calls each sandbox of the tree may make.
    pub rate: Rate,
    /// Seconds after which a tool child of the tree with no exec is stopped.
    pub tool_idle_seconds: i32,
}

pub(crate) const GRANT_COLUMNS: &str = "id, root_id, root_name, max_depth, max_breadth, max_total, expires_at, \
     program, state, created_by, created_at, ended_at, children_admitted, program_resolved, rate_calls, rate_period_s, \
     tool_idle_seconds";

/// A rate of calls: `calls` per `period_s` seconds (1 or 60), a token bucket of `calls`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Rate {
    pub calls: i32,
    pub period_s: i32,
}

impl Default for Rate {
    /// The tool-call rate of a grant that names none.
    fn default() -> Rate {
        Rate { calls: 10, period_s: 1 }
    }
}

impl std::fmt::Display for Rate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.calls, if self.period_s == 60 { "min" } else { "s" })
    }
}

impl std::str::FromStr for Rate {
    type Err = String;

    /// `N/s` or `N/min` (also `N/sec`, `N/second`, `N/m`, `N/minute`), N from 1 to 100000.
    fn from_str(s: &str) -> Result<Rate, String> {
        let bad = || format!("{s:?}: expected N/s or N/min, N from 1 to 100000");
        let (n, unit) = s.trim().split_once('/').ok_or_else(bad)?;
        let calls: i32 = n.trim().parse().map_err(|_| bad())?;
        let period_s = match unit.trim() {
            "s" | "sec" | "second" => 1,
            "m" | "min" | "minute" => 60,
            _ => return Err(bad()),
        };
        if !(1..=100_000).contains(&calls) {
            return Err(bad());
        }
        Ok(Rate { calls, period_s })
    }
}

impl From<&Row> for Grant {
    fn from(r: &Row) -> Grant {
        Grant {
            id: r.get("id"),
            root_id: r.get("root_id"),
            root_name: r.get("root_name"),
            max_depth: r.get("max_depth"),
            max_breadth: r.get("max_breadth"),
            max_total: r.get("max_total"),
            expires_at: r.get("expires_at"),
            program: r.get("program"),
            state: r.get("state"),
            created_by: r.get("created_by"),
            created_at: r.get("created_at"),
            ended_at: r.get("ended_at"),
            children_admitted: r.get("children_admitted"),
            tool_idle_seconds: r.get("tool_idle_seconds"),
            program_resolved: r.get("program_resolved"),
            rate: Rate { calls: r.get("rate_calls"), period_s: r.get("rate_period_s") },
        }
    }
}

/// Values of a grant as a user sets them.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct GrantValues {
    pub max_depth: i32,
    pub max_breadth: i32,
    pub max_total: i32,
    pub expires_at: DateTime<Utc>,
    pub program: String,
    /// Seconds after which an idle tool child stops; `None` means the default (300).
    pub tool_idle_seconds: Option<i32>,
    /// `program` with its symlinks resolved on the gateway's host.
    pub program_resolved: String,
    pub rate: Rate,
}

/// A partial change to a grant: `None` keeps the value.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct GrantChange {
    pub max_depth: Option<i32>,
    pub max_breadth: Option<i32>,
    pub max_total: Option<i32>,
    pub expires_at: Option<DateTime<Utc>>,
    pub tool_idle_seconds: Option<i32>,
    /// A new program comes with what it resolved to.
    pub program: Option<(String, String)>,
    pub rate: Option<Rate>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct AuditEntry {
    pub id: i64,
    pub at: DateTime<Utc>,
    pub action: String,
    pub outcome: String,
    pub code: Option<String>,
    pub message: String,
    pub actor: String,
    pub owner: Option<String>,
    pub sandbox_id: Option<Uuid>,
    pub sandbox_name: Option<String>,
    pub parent_id: Option<Uuid>,
    pub root_id: Option<Uuid>,
    pub request_id: Option<String>,
    pub details: serde_json::Value,
}

impl From<&Row> for AuditEntry {
    fn from(r: &Row) -> AuditEntry {
        AuditEntry {
            id: r.get("id"),
            at: r.get("at"),
            action: r.get("action"),
            outcome: r.get("outcome"),
            code: r.get("code"),
            message: r.get("message"),
            actor: r.get("actor"),
            owner: r.get("owner_name"),
            sandbox_id: r.get("sandbox_id"),
            sandbox_name: r.get("sandbox_name"),
            parent_id: r.get("parent_id"),
            root_id: r.get("root_id"),
            request_id: r.get("request_id"),
            details: r.get("details"),
        }
    }
}

/// One sandbox of a subtree being stopped, in the order to stop them.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct StopItem {
    pub id: Uuid,
    pub name: String,
    pub depth: i32,
    pub phase: Phase,
    /// The driver instance that runs its workload: only that gateway stops it.
    pub runner: String,
}

/// A sandbox row the reconciler looks at.
#[derive(Debug, Clone, PartialEq)]
pub struct LiveRow {
    pub id: Uuid,
    pub name: String,
    pub phase: Phase,
    pub depth: i32,
    pub age: std::time::Duration,
}
