//! The typed values that cross into SQL: the caller (`os_caller`), a child's kind
//! (`os_kind`), what a new sandbox's policy was proved against (`os_admission_proof`,
//! `os_root_proof`, `os_verdict`), a grant's values (`os_grant_values`), and a sandbox's phase
//! and a grant's state on the way back, so no store call passes them as loose strings or JSON.

use std::error::Error as StdError;

use bytes::BytesMut;
use chrono::{DateTime, Utc};
use postgres_types::{FromSql, IsNull, ToSql, Type, to_sql_checked};
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::{GrantValues, Principal};

/// `os_caller`: who calls, as the SQL functions decide from it (sql/auth.sql).
#[derive(Debug, ToSql)]
#[postgres(name = "os_caller")]
struct Caller<'a> {
    user_id: Option<i64>,
    sandbox_id: Option<Uuid>,
    program: Option<&'a str>,
}

impl Principal {
    fn caller(&self) -> Caller<'_> {
        match self {
            Principal::User { id, .. } => Caller { user_id: Some(*id), sandbox_id: None, program: None },
            Principal::Sandbox { id, owner, program, .. } => {
                Caller { user_id: Some(*owner), sandbox_id: Some(*id), program: program.as_deref() }
            }
        }
    }
}

/// A principal is passed to SQL as one `os_caller` value; what it may do is decided there.
impl ToSql for Principal {
    fn to_sql(&self, ty: &Type, out: &mut BytesMut) -> Result<IsNull, Box<dyn StdError + Sync + Send>> {
        self.caller().to_sql(ty, out)
    }

    fn accepts(ty: &Type) -> bool {
        <Caller<'_> as ToSql>::accepts(ty)
    }

    to_sql_checked!();
}

/// `os_grant_values`: a new root's grant as create_root takes it (sql/admission.sql).
#[derive(Debug, ToSql)]
#[postgres(name = "os_grant_values")]
struct GrantRow<'a> {
    max_depth: i32,
    max_breadth: i32,
    max_total: i32,
    expires_at: DateTime<Utc>,
    program: &'a str,
    program_resolved: &'a str,
    rate_calls: i32,
    rate_period_s: i32,
    tool_idle_seconds: Option<i32>,
}

impl GrantValues {
    fn row(&self) -> GrantRow<'_> {
        GrantRow {
            max_depth: self.max_depth,
            max_breadth: self.max_breadth,
            max_total: self.max_total,
            expires_at: self.expires_at,
            program: &self.program,
            program_resolved: &self.program_resolved,
            rate_calls: self.rate.calls,
            rate_period_s: self.rate.period_s,
            tool_idle_seconds: self.tool_idle_seconds,
        }
    }
}

/// A grant's values are passed to SQL as one `os_grant_values`.
impl ToSql for GrantValues {
    fn to_sql(&self, ty: &Type, out: &mut BytesMut) -> Result<IsNull, Box<dyn StdError + Sync + Send>> {
        self.row().to_sql(ty, out)
    }

    fn accepts(ty: &Type) -> bool {
        <GrantRow<'_> as ToSql>::accepts(ty)
    }

    to_sql_checked!();
}

/// A child's kind: `os_kind` in SQL, text in the views.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, ToSql)]
#[postgres(name = "os_kind")]
#[serde(rename_all = "lowercase")]
pub enum Kind {
    /// Runs its own task; may have children within its tree's grant.
    #[postgres(name = "agent")]
    Agent,
    /// Runs commands for its parent and stops when idle; never has children.
    #[postgres(name = "tool")]
    Tool,
}

impl Kind {
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Agent => "agent",
            Kind::Tool => "tool",
        }
    }
}

/// How a new sandbox's policy was decided (`os_verdict`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, ToSql)]
#[postgres(name = "os_verdict")]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    /// Proved within its boundary.
    #[postgres(name = "within")]
    Within,
    /// The parent's policy, taken as it is (no global maximum could have narrowed it).
    #[postgres(name = "inherited")]
    Inherited,
    /// The parent's policy, proved within the global maximum too.
    #[postgres(name = "inherited_within")]
    InheritedWithin,
    /// A root with no global maximum to be proved within.
    #[postgres(name = "no_global_max")]
    NoGlobalMax,
}

/// What a child's policy was proved against (`os_admission_proof`): admission re-checks
/// that the parent and its policy version, and the global maximum's version, are current.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ToSql)]
#[postgres(name = "os_admission_proof")]
pub struct AdmissionProof {
    pub parent_id: Uuid,
    pub parent_version: i32,
    pub global_version: i32,
    pub verdict: Verdict,
}

/// What a root's policy was proved against (`os_root_proof`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, ToSql)]
#[postgres(name = "os_root_proof")]
pub struct RootProof {
    pub global_version: i32,
    pub verdict: Verdict,
}

/// A sandbox's phase, as `sandboxes.phase` holds it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum Phase {
    Provisioning,
    Ready,
    Stopping,
    Stopped,
    Deleted,
    Error,
}

impl Phase {
    pub const ALL: [Phase; 6] =
        [Phase::Provisioning, Phase::Ready, Phase::Stopping, Phase::Stopped, Phase::Deleted, Phase::Error];

    pub fn as_str(self) -> &'static str {
        match self {
            Phase::Provisioning => "PROVISIONING",
            Phase::Ready => "READY",
            Phase::Stopping => "STOPPING",
            Phase::Stopped => "STOPPED",
            Phase::Deleted => "DELETED",
            Phase::Error => "ERROR",
        }
    }

    /// Where a create waits no longer: running, failed, or already on its way out.
    pub fn is_settled(self) -> bool {
        !matches!(self, Phase::Provisioning)
    }
}

/// A grant's state, as `os_grant_state` (sql/grants.sql) names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum GrantState {
    /// In force: the tree may create children within it.
    Live,
    /// Past its expiry; a new grant may replace it.
    Expired,
    /// Ended by its user, for good.
    Revoked,
    /// Ended by a newer grant of the same tree.
    Replaced,
}

impl GrantState {
    pub const ALL: [GrantState; 4] = [GrantState::Live, GrantState::Expired, GrantState::Revoked, GrantState::Replaced];

    pub fn as_str(self) -> &'static str {
        match self {
            GrantState::Live => "live",
            GrantState::Expired => "expired",
            GrantState::Revoked => "revoked",
            GrantState::Replaced => "replaced",
        }
    }
}

/// These are text on the way out of SQL (views, result columns): decoded by name, and a name
/// this build does not know is a decoding error, never a default.
macro_rules! text_enum {
    ($t:ty, $all:expr) => {
        impl std::fmt::Display for $t {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(self.as_str())
            }
        }

        impl std::str::FromStr for $t {
            type Err = String;

            fn from_str(s: &str) -> Result<$t, String> {
                $all.into_iter().find(|v| v.as_str() == s).ok_or_else(|| format!("unknown {}: {s:?}", stringify!($t)))
            }
        }

        impl<'a> FromSql<'a> for $t {
            fn from_sql(ty: &Type, raw: &'a [u8]) -> Result<$t, Box<dyn StdError + Sync + Send>> {
                Ok(<&str as FromSql>::from_sql(ty, raw)?.parse()?)
            }

            fn accepts(ty: &Type) -> bool {
                <&str as FromSql>::accepts(ty)
            }
        }
    };
}

text_enum!(Kind, [Kind::Agent, Kind::Tool]);
text_enum!(Phase, Phase::ALL);
text_enum!(GrantState, GrantState::ALL);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_unknown_names_are_refused() {
        for p in Phase::ALL {
            assert_eq!(p.as_str().parse::<Phase>(), Ok(p));
            assert_eq!(serde_json::to_value(p).unwrap(), p.as_str());
        }
        for k in [Kind::Agent, Kind::Tool] {
            assert_eq!(k.as_str().parse::<Kind>(), Ok(k));
            assert_eq!(serde_json::to_value(k).unwrap(), k.as_str());
        }
        for g in GrantState::ALL {
            assert_eq!(g.as_str().parse::<GrantState>(), Ok(g));
            assert_eq!(serde_json::to_value(g).unwrap(), g.as_str());
        }
        assert!("ready".parse::<Phase>().is_err());
        assert!("Live".parse::<GrantState>().is_err());
        assert!("".parse::<GrantState>().is_err());
        assert!("Agent".parse::<Kind>().is_err());
    }
}
