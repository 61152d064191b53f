//! The API layer: typed operations that every surface (gRPC, MCP) calls with a typed caller
//! ([`Principal`]) and typed arguments, returning typed results or a coded refusal
//! ([`openshell_store::Error`]). The rules live here and below (the store, the database);
//! the surfaces only translate.
//!
//! One module per operation, each a set of methods on [`crate::Gateway`]; `page` is the
//! pagination every listing shares.

mod audit;
pub(crate) mod create;
mod door;
mod exec;
mod files;
mod grants;
mod page;
pub(crate) mod policies;
mod proposals;
mod sandboxes;
mod stop;
pub(crate) mod supervisor;
mod users;

pub use audit::AuditQuery;
pub use create::{ChildRequest, Created, Env, RootRequest};
pub use exec::{ExecEntry, ExecOutcome, ExecRequest, ExecStream, Stdin, exec_scope};
pub use files::{DEFAULT_MAX_FILE_BYTES, FileContent, FileStream};
pub use grants::{GrantEdit, GrantSpec};
pub use page::{Page, PageRequest};
pub use policies::gate::DEFAULT_POLICY_YAML;
pub use policies::{Boundary, CheckPolicy, PolicyView};
pub(crate) use sandboxes::child_parent;
pub use users::Status;

#[allow(unused_imports)]
pub use openshell_store::Principal;
