//! The project's error codes (`openshell-codes`) as a client reads them from a gRPC status,
//! and the exit code the CLI gives for each.

use std::collections::BTreeMap;

use tonic_types::StatusExt;

/// Exit code of a failure that carries none of the project's codes.
pub const EXIT_ERROR: u8 = 1;

pub use openshell_codes::Code;

/// The code a status without ErrorInfo stands for (one tonic or a proxy made, not the
/// gateway's rules): only where the gRPC code names exactly one of ours.
fn from_transport(code: tonic::Code) -> Option<Code> {
    match code {
        tonic::Code::Unavailable | tonic::Code::DeadlineExceeded => Some(Code::Unavailable),
        tonic::Code::Unauthenticated => Some(Code::Unauthenticated),
        tonic::Code::PermissionDenied => Some(Code::NotAllowed),
        tonic::Code::InvalidArgument => Some(Code::InvalidArgument),
        tonic::Code::NotFound => Some(Code::NotFound),
        _ => None,
    }
}

/// The CLI's exit code for a code (README, "Exit codes").
pub fn exit_code(code: Code) -> u8 {
    match code {
        Code::InvalidArgument => 2,
        Code::NotFound => 3,
        Code::NotAllowed | Code::Unauthenticated => 4,
        Code::LimitReached => 5,
        Code::PolicyExceedsParent | Code::PolicyUnprovable => 6,
        Code::Conflict => 7,
        Code::Unavailable => 8,
    }
}

/// A failed call as the gateway explained it.
#[derive(Debug, Clone)]
pub struct Refusal {
    /// The gateway's code (its ErrorInfo reason), else what the transport status names.
    pub code: Option<Code>,
    /// Whether `code` came from the gateway's ErrorInfo (not guessed from the status).
    pub from_gateway: bool,
    pub status: tonic::Code,
    /// The message without its `CODE: ` prefix.
    pub message: String,
    /// The ErrorInfo metadata (which field, which limit and its values, ...).
    pub details: BTreeMap<String, String>,
}

impl Refusal {
    /// The code as text: the project's code, else the gRPC status's name.
    pub fn code_name(&self) -> String {
        self.code.map(|c| c.as_str().to_string()).unwrap_or_else(|| format!("{:?}", self.status))
    }

    pub fn exit_code(&self) -> u8 {
        self.code.map_or(EXIT_ERROR, exit_code)
    }
}

impl From<&tonic::Status> for Refusal {
    fn from(s: &tonic::Status) -> Refusal {
        let info = s.get_error_details().error_info().cloned();
        let reason = info.as_ref().and_then(|i| Code::parse(&i.reason));
        let code = reason.or_else(|| from_transport(s.code()));
        let message = match &reason {
            Some(c) => s.message().strip_prefix(&format!("{c}: ")).unwrap_or(s.message()).to_string(),
            None => s.message().to_string(),
        };
        let details = info.map(|i| i.metadata.into_iter().collect()).unwrap_or_default();
        Refusal { code, from_gateway: reason.is_some(), status: s.code(), message, details }
    }
}

impl From<tonic::Status> for Refusal {
    fn from(s: tonic::Status) -> Refusal {
        Refusal::from(&s)
    }
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.code_name(), self.message)
    }
}

impl std::error::Error for Refusal {}
