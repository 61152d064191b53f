//! The OpenShell sandbox policy: its YAML model, validation, canonical form, hash and matcher.
//!
//! [`Policy::from_yaml`] / [`Policy::from_json`] parse and validate (the `_with_warnings`
//! forms also return what was accepted but deprecated or ignored), [`Policy::canonical_json`]
//! and [`Policy::hash`] identify a policy, and [`Policy::allows`] is the one matcher that the
//! supervisor's proxy enforces and the prover reasons about. The whole upstream OpenShell
//! schema parses; what the matcher cannot evaluate (other L7 protocols under `enforce`,
//! credential handling) allows nothing. [`Policy::with_baseline`] adds the system paths
//! upstream grants every sandbox with network rules ([`baseline`]).

pub mod baseline;
mod canonical;
mod document;
pub mod glob;
pub mod ip;
pub mod limits;
mod matcher;
mod model;
mod query;
mod validate;
pub mod value_glob;

pub use matcher::{
    Access, FileMode, HttpRequest, NetworkRequest, RuleRef, endpoint_allows, endpoint_allows_at, is_beneath, is_method,
    l7_matches, method_matches, query_allows, query_denies,
};
pub use model::*;
pub use query::{MAX_QUERY_PAIRS, decode_query};
pub use validate::MCP_VERSIONS;

/// A policy that failed to parse or validate: `path` names the field
/// (`network_policies.github.endpoints[0].port`), `reason` says why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{path}: {reason}")]
pub struct PolicyError {
    pub path: String,
    pub reason: String,
}

/// Something a policy says that was accepted but does not do what it reads as: a
/// deprecated alias, or a field its endpoint's protocol gives no meaning to. `path` names
/// the field as [`PolicyError::path`] does.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct PolicyWarning {
    pub path: String,
    pub message: String,
}

impl std::fmt::Display for PolicyWarning {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.path, self.message)
    }
}
