//! The proxy's own answers: refusals with a JSON body that says what was missing, and
//! errors it met on the way.

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::{Response, StatusCode, header};
use serde_json::json;

use crate::decide::{Decision, Reason};
use crate::virtual_host::{Body, BodyRefused};

pub(crate) fn json(status: StatusCode, value: serde_json::Value) -> Response<Body> {
    let mut resp =
        Response::new(Full::new(Bytes::from(value.to_string())).map_err(|never| match never {}).boxed_unsync());
    *resp.status_mut() = status;
    resp.headers_mut().insert(header::CONTENT_TYPE, header::HeaderValue::from_static("application/json"));
    resp
}

/// 403: names the program, host, port, method, path and what was missing.
pub(crate) fn denied(d: &Decision, reason: &Reason) -> Response<Body> {
    json(
        StatusCode::FORBIDDEN,
        json!({
            "error": "denied",
            "program": d.program,
            "host": d.host,
            "port": d.port,
            "method": d.method,
            "path": d.path,
            "missing": reason.code(),
            "reason": reason.to_string(),
        }),
    )
}

pub(crate) fn bad_request(reason: &str) -> Response<Body> {
    json(StatusCode::BAD_REQUEST, json!({ "error": "bad_request", "reason": reason }))
}

/// 502 (or 504 for a timeout): the request was allowed but the upstream failed.
pub(crate) fn upstream_failed(host: &str, port: u16, reason: &str, timed_out: bool) -> Response<Body> {
    let status = if timed_out { StatusCode::GATEWAY_TIMEOUT } else { StatusCode::BAD_GATEWAY };
    json(status, json!({ "error": "upstream", "host": host, "port": port, "reason": reason }))
}

pub(crate) fn no_virtual_host(host: &str) -> Response<Body> {
    json(
        StatusCode::NOT_FOUND,
        json!({ "error": "not_found", "host": host, "reason": "no handler for this virtual host" }),
    )
}

/// The response with `Connection: close`: the connection is not used again.
pub(crate) fn closing(mut resp: Response<Body>) -> Response<Body> {
    resp.headers_mut().insert(header::CONNECTION, header::HeaderValue::from_static("close"));
    resp
}

/// 413, 408 or 400 for a virtual host's request body, naming the limit.
pub(crate) fn body_refused(refusal: &BodyRefused) -> Response<Body> {
    let body = match refusal {
        BodyRefused::TooLarge { max_bytes } => {
            json!({ "error": "payload_too_large", "detail": refusal.to_string(), "max_bytes": max_bytes })
        }
        BodyRefused::TooSlow { after } => {
            json!({ "error": "request_timeout", "detail": refusal.to_string(), "timeout_seconds": after.as_secs() })
        }
        BodyRefused::Unreadable(_) => json!({ "error": "bad_request", "detail": refusal.to_string() }),
    };
    json(refusal.status(), body)
}
