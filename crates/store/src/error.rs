//! The store's error: a code of the project's vocabulary (`openshell_codes::Code`, the Rust
//! side of `os_error_codes`) and how a database error maps to one (once, here).

pub use openshell_codes::Code;
use tokio_postgres::error::SqlState;

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
        if let Some(code) = Code::from_sqlstate(db.code().code()) {
            let details =
                db.detail().and_then(|d| serde_json::from_str(d).ok()).unwrap_or_else(|| serde_json::json!({}));
            return Error::new(code, db.message()).with_details(details);
        }
        match *db.code() {
            SqlState::UNIQUE_VIOLATION => {
                Error::new(Code::Conflict, format!("already exists ({})", db.constraint().unwrap_or("unique")))
            }
            SqlState::CHECK_VIOLATION if db.constraint().and_then(limit_of).is_some() => {
                let constraint = db.constraint().unwrap_or_default();
                let limit = limit_of(constraint).unwrap_or_default();
                Error::new(Code::LimitReached, format!("{limit} limit reached (constraint {constraint})"))
                    .with_details(serde_json::json!({ "limit": limit, "constraint": constraint }))
            }
            SqlState::CHECK_VIOLATION | SqlState::NOT_NULL_VIOLATION | SqlState::STRING_DATA_RIGHT_TRUNCATION => {
                Error::new(Code::InvalidArgument, format!("rejected by constraint {}", db.constraint().unwrap_or("?")))
            }
            SqlState::INVALID_TEXT_REPRESENTATION
            | SqlState::INVALID_DATETIME_FORMAT
            | SqlState::DATETIME_FIELD_OVERFLOW => Error::new(Code::InvalidArgument, db.message().to_string()),
            // A server shutting down or recovering: the store's health logs the outage once.
            _ if crate::health::unreachable(&e) => Error::database(db.message()),
            _ => {
                tracing::error!(sqlstate = db.code().code(), message = db.message(), "database error");
                Error::new(Code::Unavailable, format!("database error {}", db.code().code()))
            }
        }
    }
}

/// The limit a CHECK constraint holds, by the schema's naming rule `{table}_{limit}_limit`
/// (`trees_total_limit` holds `total`): its violation is LIMIT_REACHED, not malformed input.
pub fn limit_of(constraint: &str) -> Option<&str> {
    let (table_and_limit, _) = constraint.rsplit_once("_limit").filter(|(_, rest)| rest.is_empty())?;
    let (_, limit) = table_and_limit.rsplit_once('_')?;
    (!limit.is_empty()).then_some(limit)
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
