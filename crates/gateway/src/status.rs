//! One mapping from the project's error codes to gRPC statuses, with a
//! `google.rpc.ErrorInfo` whose reason is the code and whose metadata holds the details.

use std::collections::HashMap;

use openshell_store::{Code, Error};
use tonic_types::{ErrorDetails, StatusExt};

/// The ErrorInfo domain of every refusal.
pub const DOMAIN: &str = "openshell.v1";

pub fn grpc_code(code: Code) -> tonic::Code {
    match code {
        Code::NotAllowed => tonic::Code::PermissionDenied,
        Code::LimitReached => tonic::Code::ResourceExhausted,
        Code::PolicyExceedsParent | Code::PolicyUnprovable => tonic::Code::FailedPrecondition,
        Code::InvalidArgument => tonic::Code::InvalidArgument,
        Code::NotFound => tonic::Code::NotFound,
        Code::Conflict => tonic::Code::AlreadyExists,
        Code::Unauthenticated => tonic::Code::Unauthenticated,
        Code::Unavailable => tonic::Code::Unavailable,
    }
}

pub fn to_status(e: Error) -> tonic::Status {
    let mut metadata = HashMap::new();
    if let serde_json::Value::Object(map) = &e.details {
        for (k, v) in map {
            let v = match v {
                serde_json::Value::String(s) => s.clone(),
                other => other.to_string(),
            };
            metadata.insert(k.clone(), v);
        }
    }
    let mut details = ErrorDetails::with_error_info(e.code.as_str(), DOMAIN, metadata);
    // A rate refusal also says when to retry the way gRPC clients read it (RetryInfo).
    if let Some(ms) = e.details.get("retry_after_ms").and_then(serde_json::Value::as_u64) {
        details.set_retry_info(Some(std::time::Duration::from_millis(ms)));
    }
    let mut status =
        tonic::Status::with_error_details(grpc_code(e.code), format!("{}: {}", e.code, e.message), details);
    if let Ok(v) = e.code.as_str().parse() {
        status.metadata_mut().insert("x-openshell-code", v);
    }
    status
}

/// The project's error back from a status [`to_status`] made (for operations that collect a
/// stream); any other status is UNAVAILABLE with its message.
pub fn from_status(s: tonic::Status) -> Error {
    let info = s.get_details_error_info();
    let code = info.as_ref().and_then(|i| Code::parse(&i.reason)).unwrap_or(Code::Unavailable);
    let message = s.message().strip_prefix(&format!("{code}: ")).unwrap_or(s.message()).to_string();
    let details = info.map(|i| serde_json::json!(i.metadata)).unwrap_or_else(|| serde_json::json!({}));
    Error::new(code, message).with_details(details)
}
