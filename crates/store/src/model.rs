//! What the store returns: rows of the views, decoded.

use chrono::{DateTime, Utc};
use serde::Serialize;
use tokio_postgres::Row;
use uuid::Uuid;

use crate::row::{FromRow, RowExt};
use crate::{Error, GrantState, Kind, Phase};

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

impl FromRow for Sandbox {
    fn from_row(r: &Row) -> Result<Sandbox, Error> {
        Ok(Sandbox {
            id: r.col("id")?,
            name: r.col("name")?,
            owner: r.col("owner_name")?,
            parent_id: r.col("parent_id")?,
            parent_name: r.col("parent_name")?,
            root_id: r.col("root_id")?,
            root_name: r.col("root_name")?,
            depth: r.col("depth")?,
            kind: r.col("kind")?,
            phase: r.col("phase")?,
            phase_reason: r.col("phase_reason")?,
            command: r.col("command")?,
            policy_version: r.col("policy_version")?,
            policy_hash: r.col("policy_hash")?,
            exit_code: r.col("exit_code")?,
            template: r.col("template")?,
            isolation: r.col("isolation")?,
            created_by: r.col("created_by")?,
            created_at: r.col("created_at")?,
            updated_at: r.col("updated_at")?,
        })
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

impl FromRow for Denial {
    fn from_row(r: &Row) -> Result<Denial, Error> {
        Ok(Denial {
            at: r.col("at")?,
            program: r.col("program")?,
            host: r.col("host")?,
            port: r.col("port")?,
            method: r.col("method")?,
            path: r.col("path")?,
            reason: r.col("reason")?,
        })
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

impl FromRow for Grant {
    fn from_row(r: &Row) -> Result<Grant, Error> {
        Ok(Grant {
            id: r.col("id")?,
            root_id: r.col("root_id")?,
            root_name: r.col("root_name")?,
            max_depth: r.col("max_depth")?,
            max_breadth: r.col("max_breadth")?,
            max_total: r.col("max_total")?,
            expires_at: r.col("expires_at")?,
            program: r.col("program")?,
            state: r.col("state")?,
            created_by: r.col("created_by")?,
            created_at: r.col("created_at")?,
            ended_at: r.col("ended_at")?,
            children_admitted: r.col("children_admitted")?,
            tool_idle_seconds: r.col("tool_idle_seconds")?,
            program_resolved: r.col("program_resolved")?,
            rate: Rate { calls: r.col("rate_calls")?, period_s: r.col("rate_period_s")? },
        })
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

impl FromRow for AuditEntry {
    fn from_row(r: &Row) -> Result<AuditEntry, Error> {
        Ok(AuditEntry {
            id: r.col("id")?,
            at: r.col("at")?,
            action: r.col("action")?,
            outcome: r.col("outcome")?,
            code: r.col("code")?,
            message: r.col("message")?,
            actor: r.col("actor")?,
            owner: r.col("owner_name")?,
            sandbox_id: r.col("sandbox_id")?,
            sandbox_name: r.col("sandbox_name")?,
            parent_id: r.col("parent_id")?,
            root_id: r.col("root_id")?,
            request_id: r.col("request_id")?,
            details: r.col("details")?,
        })
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

/// A sandbox's phase as one write left it, with the other columns a phase change can move;
/// the rest of a sandbox (its names, lineage, command, creation) never changes.
#[derive(Debug, Clone, PartialEq)]
pub struct PhaseChange {
    pub id: Uuid,
    pub phase: Phase,
    pub phase_reason: String,
    pub isolation: Option<serde_json::Value>,
    pub policy_version: i32,
    pub exit_code: Option<i32>,
    pub updated_at: DateTime<Utc>,
}

impl PhaseChange {
    /// `before` (an earlier read of the same sandbox) as this write left it, or None when this
    /// change is another sandbox's or its policy moved since (the hash is not here): read it.
    pub fn applied_to(&self, before: &Sandbox) -> Option<Sandbox> {
        (before.id == self.id && before.policy_version == self.policy_version).then(|| Sandbox {
            phase: self.phase,
            phase_reason: self.phase_reason.clone(),
            isolation: self.isolation.clone(),
            exit_code: self.exit_code,
            updated_at: self.updated_at,
            ..before.clone()
        })
    }
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
