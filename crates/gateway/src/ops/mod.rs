//! The API layer: typed operations that every surface (gRPC, MCP) calls with a typed caller
//! ([`Principal`]) and typed arguments, returning typed results or a coded refusal
//! ([`openshell_store::Error`]). The rules live here and below (the store, the database);
//! the surfaces only translate.
//!
//! Creating (`create_root`, `create_child`), stopping (`stop`), policy writes (`set_policy`),
//! `exec` and `get_file` are operations of the same kind in their own modules of the crate.

mod audit_chain;
mod exec;
mod grants;
mod listing;
mod page;
mod policies;
mod sandboxes;
mod supervisor;
mod users;

pub use exec::{ExecEntry, ExecOutcome, ExecRequest, exec_scope};
pub use crate::files::FileContent;
pub use grants::{GrantEdit, GrantSpec};
pub use listing::AuditQuery;
pub use page::{Page, PageRequest};
pub use policies::{Boundary, CheckPolicy, PolicyView};
pub(crate) use sandboxes::child_parent;
pub use users::Status;

#[allow(unused_imports)]
pub use openshell_store::Principal;
