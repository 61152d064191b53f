//! Linux isolation of one sandbox: its cgroup, uid, Landlock rules, seccomp filter and privilege drop
//! (and, for a gateway that is not root, its user namespace).
//!
//! The supervisor applies these to its agent; the process driver uses the cgroup and uid
//! parts to allocate, stop and clean up. Everything here fails closed: a step that cannot be
//! taken is an error naming what the host lacks, never a silent fallback.

pub mod cgroup;
pub mod filesystem;
pub mod privileges;
pub mod seccomp;
pub mod uids;
pub mod userns;

/// A setup step that failed; the message says what and why, for the sandbox's status.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct IsolationError(pub String);

impl IsolationError {
    pub(crate) fn io(what: impl std::fmt::Display, e: impl std::fmt::Display) -> IsolationError {
        IsolationError(format!("{what}: {e}"))
    }
}
