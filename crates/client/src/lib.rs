//! One authenticated gRPC client of the gateway, shared by the CLI, the supervisor and the
//! test harness: where the gateway is ([`Endpoint`]), who calls ([`Client`] attaches the
//! bearer token, and a door call's program), and what a refusal means ([`Refusal`], with the
//! project's error [`Code`] and the CLI's exit code).
//!
//! A token is held as a sensitive header value: it is never formatted into an error, a log
//! line or a `Debug` output by this crate.

mod code;
mod connect;

pub use code::{Code, EXIT_ERROR, Refusal, exit_code};
pub use connect::{Client, ConnectError, Endpoint};

/// The gateway's default listener (what `openshell gateway start` binds).
pub const DEFAULT_ENDPOINT: &str = "http://127.0.0.1:7570";

/// The header a door call carries the kernel-resolved calling program in (accepted by the
/// gateway only with a door credential).
pub const PROGRAM_HEADER: &str = "x-openshell-program";
