//! The project's error codes and how database errors map to them (once, here).

use serde::Serialize;
use tokio_postgres::error::SqlState;

/// The error codes every surface uses (DESIGN.md, "Error codes").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum Code {
    NotAllowed,
    LimitReached,
    PolicyExceedsParent,
    PolicyUnprovable,
    InvalidArgument,
    NotFound,
    Conflict,
    Unauthenticated,
    /// The database could not be reached or kept failing: retry later. Not a refusal.
    Unavailable,
}

impl Code {
    /// Every code, in the order of `os_error_codes` (migrations/V17).
    pub const ALL: [Code; 9] = [
        Code::NotAllowed,
        Code::LimitReached,
        Code::PolicyExceedsParent,
        Code::PolicyUnprovable,
        Code::InvalidArgument,
        Code::NotFound,
        Code::Conflict,
        Code::Unauthenticated,
        Code::Unavailable,
    ];

    pub fn as_str(self) -> &'static str {
        self.names().0
    }

    /// The SQLSTATE a refusal with this code raised in SQL carries (`os_error_codes`).
    pub fn sqlstate(self) -> &'static str {
        self.names().1
    }

    /// The one list on this side of the boundary: the code's name and its SQLSTATE.
    fn names(self) -> (&'static str, &'static str) {
        match self {
            Code::NotAllowed => ("NOT_ALLOWED", "OS001"),
            Code::LimitReached => ("LIMIT_REACHED", "OS002"),
            Code::PolicyExceedsParent => ("POLICY_EXCEEDS_PARENT", "OS003"),
            Code::PolicyUnprovable => ("POLICY_UNPROVABLE", "OS004"),
            Code::InvalidArgument => ("INVALID_ARGUMENT", "OS005"),
            Code::NotFound => ("NOT_FOUND", "OS006"),
            Code::Conflict => ("CONFLICT", "OS007"),
            Code::Unauthenticated => ("UNAUTHENTICATED", "OS008"),
            Code::Unavailable => ("UNAVAILABLE", "OS010"),
        }
    }

    pub fn parse(s: &str) -> Option<Code> {
        Code::ALL.into_iter().find(|c| c.as_str() == s)
    }

    fn from_sqlstate(state: &SqlState) -> Option<Code> {
        Code::ALL.into_iter().find(|c| c.sqlstate() == state.code())
    }

    /// Whether the caller was refused (and a receipt is due), as opposed to a fault.
    pub fn is_refusal(self) -> bool {
        !matches!(self, Code::Unavailable)
    }
}

/// A code is text in SQL, checked there against `os_error_codes` (audit_log_code_fkey).
impl tokio_postgres::types::ToSql for Code {
    fn to_sql(
        &self,
        ty: &tokio_postgres::types::Type,
        out: &mut bytes::BytesMut,
    ) -> Result<tokio_postgres::types::IsNull, Box<dyn std::error::Error + Sync + Send>> {
        self.as_str().to_sql(ty, out)
    }

    fn accepts(ty: &tokio_postgres::types::Type) -> bool {
        <&str as tokio_postgres::types::ToSql>::accepts(ty)
    }

    tokio_postgres::types::to_sql_checked!();
}

impl std::fmt::Display for Code {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A refusal or failure, with a message that never holds a secret.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{code}: {message}")]
pub struct Error {
    pub code: Code,
    pub message: String,
    /// Structured details (which limit, its values, the field, ...).
    pub details: serde_json::Value,
}

impl Error {
    pub fn new(code: Code, message: impl Into<String>) -> Error {
        Error { code, message: message.into(), details: serde_json::json!({}) }
    }

    pub fn with_details(mut self, details: serde_json::Value) -> Error {
        self.details = details;
        self
    }

    pub fn invalid(field: &str, why: impl std::fmt::Display) -> Error {
        Error::new(Code::InvalidArgument, format!("{field}: {why}")).with_details(serde_json::json!({ "field": field }))
    }

    /// Something the gateway depends on cannot serve now; `what` says what.
    pub fn unavailable(what: impl std::fmt::Display) -> Error {
        Error::new(Code::Unavailable, what.to_string())
    }

    /// The database cannot serve now.
    pub fn database(what: impl std::fmt::Display) -> Error {
        Error::new(Code::Unavailable, format!("database unavailable: {what}"))
    }
}

impl From<tokio_postgres::Error> for Error {
    fn from(e: tokio_postgres::Error) -> Error {
        let Some(db) = e.as_db_error() else {
            return Error::database(e);
        };
        if let Some(code) = Code::from_sqlstate(db.code()) {
            let details =
                db.detail().and_then(|d| serde_json::from_str(d).ok()).unwrap_or_else(|| serde_json::json!({}));
            return Error::new(code, db.message()).with_details(details);
        }
        match *db.code() {
            SqlState::UNIQUE_VIOLATION => {
                Error::new(Code::Conflict, format!("already exists ({})", db.constraint().unwrap_or("unique")))
            }
            SqlState::CHECK_VIOLATION | SqlState::NOT_NULL_VIOLATION | SqlState::STRING_DATA_RIGHT_TRUNCATION => {
                Error::new(Code::InvalidArgument, format!("rejected by constraint {}", db.constraint().unwrap_or("?")))
            }
            SqlState::INVALID_TEXT_REPRESENTATION
            | SqlState::INVALID_DATETIME_FORMAT
            | SqlState::DATETIME_FIELD_OVERFLOW => Error::new(Code::InvalidArgument, db.message().to_string()),
            _ => {
                tracing::error!(sqlstate = db.code().code(), message = db.message(), "database error");
                Error::new(Code::Unavailable, format!("database error {}", db.code().code()))
            }
        }
    }
}

impl From<deadpool_postgres::PoolError> for Error {
    fn from(e: deadpool_postgres::PoolError) -> Error {
        Error::database(e)
    }
}

impl Error {
    /// The parent's policy changed between the proof and the admission: prove again
    /// (`CONFLICT` with reason `policy_changed`, see `os_refuse`).
    pub fn is_policy_changed(&self) -> bool {
        self.details.get("reason").and_then(|r| r.as_str()) == Some("policy_changed")
    }
}
