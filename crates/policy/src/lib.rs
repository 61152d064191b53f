//! The OpenShell sandbox policy: its YAML model, validation, canonical form, hash and matcher.
//!
//! [`Policy::from_yaml`] / [`Policy::from_json`] parse and validate, [`Policy::canonical_json`]
//! and [`Policy::hash`] identify a policy, and [`Policy::allows`] is the one matcher that the
//! supervisor's proxy enforces and the prover reasons about. The whole upstream OpenShell
//! schema parses; what the matcher cannot evaluate (other L7 protocols under `enforce`,
//! credential handling) allows nothing.

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
    Access, FileMode, HttpRequest, NetworkRequest, RuleRef, endpoint_allows, endpoint_allows_at, query_allows,
    query_denies,
};
pub use model::*;
pub use query::{MAX_QUERY_PAIRS, decode_query};

/// A policy that failed to parse or validate: `path` names the field
/// (`network_policies.github.endpoints[0].port`), `reason` says why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{path}: {reason}")]
pub struct PolicyError {
    pub path: String,
    pub reason: String,
}
