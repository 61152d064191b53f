//! `http://policy.local`, served through the sandbox's own proxy: the sandbox's current
//! policy, its latest denials, and proposals of network rules for itself, relayed to the
//! gateway with the supervisor's credential (the agent holds none). Bodies are bounded (the
//! proxy reads them, see [`VirtualHost::max_body`]), reads time out, long-polls are bounded,
//! and every error is JSON `{code, message, details}` with the gateway's error codes. Paths
//! are taken as sent (the proxy refuses encoded or dot-segment ones), on `http://policy.local`
//! only (upstream's `invalid_policy_local_scheme` otherwise).
//!
//! - `GET /v1/policy/current`
//! - `GET /v1/denials?last=N` (1..=1000, default 50)
//! - `POST /v1/proposals` body `{reason, network_policies: {KEY: RULE}}` (YAML or JSON)
//! - `GET /v1/proposals/{id}`
//! - `GET /v1/proposals/{id}/wait?timeout=S` (0..=120 s, default 30, 4 at once): returns
//!   once the proposal leaves pending, or at the timeout with `timed_out: true`.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::{Request, Response, StatusCode};
use openshell_client::{Code, Refusal};
use openshell_proto::v1 as pb;
use openshell_proxy::{Body, BodyRefused, Caller, VirtualHost};
use serde_json::{Value, json};

use crate::gateway;

/// Largest request body.
pub const MAX_BODY: usize = 64 * 1024;
/// Longest long-poll, and its default.
const MAX_WAIT: u64 = 120;
const DEFAULT_WAIT: u64 = 30;
/// Longest one wait at the gateway (its limit is 60 s; the client's deadline is 30 s): a
/// longer long-poll waits in several.
const WAIT_CHUNK: Duration = Duration::from_secs(20);
/// How often a long-poll asks a gateway that cannot wait for it (an older build).
const WAIT_POLL: Duration = Duration::from_millis(250);
/// Long-polls at once per sandbox: each holds a call at the gateway.
const MAX_WAITS: usize = 4;

/// The handler the proxy calls for `policy.local`.
pub fn handler(client: gateway::Client, sandbox_id: String) -> Arc<dyn VirtualHost> {
    let waits = Arc::new(tokio::sync::Semaphore::new(MAX_WAITS));
    Arc::new(PolicyLocal { shared: Arc::new((client, sandbox_id, waits)) })
}

struct PolicyLocal {
    shared: Arc<(gateway::Client, String, Arc<tokio::sync::Semaphore>)>,
}

impl VirtualHost for PolicyLocal {
    fn max_body(&self) -> usize {
        MAX_BODY
    }

    fn body_refused(&self, refusal: &BodyRefused) -> Response<Body> {
        let details = match refusal {
            BodyRefused::TooLarge { max_bytes } => json!({"field": "body", "max_bytes": max_bytes}),
            _ => json!({"field": "body"}),
        };
        failure(Failure {
            status: refusal.status(),
            code: Code::InvalidArgument,
            message: refusal.to_string(),
            details,
        })
    }

    fn serve(&self, caller: Caller, req: Request<Bytes>) -> Pin<Box<dyn Future<Output = Response<Body>> + Send>> {
        let shared = self.shared.clone();
        Box::pin(async move {
            let (client, sandbox, waits) = &*shared;
            match route(client.clone(), sandbox, waits, caller, req).await {
                Ok((status, body)) => reply(status, &body),
                Err(e) => failure(e),
            }
        })
    }
}

fn failure(e: Failure) -> Response<Body> {
    reply(e.status, &json!({"code": e.code.as_str(), "message": e.message, "details": e.details}))
}

/// A refusal, as policy.local answers it.
struct Failure {
    status: StatusCode,
    code: Code,
    message: String,
    details: Value,
}

fn invalid(field: &str, why: impl std::fmt::Display) -> Failure {
    Failure {
        status: StatusCode::BAD_REQUEST,
        code: Code::InvalidArgument,
        message: format!("{field}: {why}"),
        details: json!({"field": field}),
    }
}

fn not_found(what: impl std::fmt::Display) -> Failure {
    Failure { status: StatusCode::NOT_FOUND, code: Code::NotFound, message: what.to_string(), details: json!({}) }
}

/// A gateway refusal keeps its code, message and details; any other failure is the
/// gateway being unreachable.
fn from_status(s: tonic::Status) -> Failure {
    let r = Refusal::from(&s);
    let code = r.code.filter(|_| r.from_gateway).unwrap_or(Code::Unavailable);
    let status = match code {
        Code::NotAllowed => StatusCode::FORBIDDEN,
        Code::LimitReached => StatusCode::TOO_MANY_REQUESTS,
        Code::PolicyExceedsParent | Code::PolicyUnprovable => StatusCode::UNPROCESSABLE_ENTITY,
        Code::InvalidArgument => StatusCode::BAD_REQUEST,
        Code::NotFound => StatusCode::NOT_FOUND,
        Code::Conflict => StatusCode::CONFLICT,
        Code::Unauthenticated => StatusCode::UNAUTHORIZED,
        Code::Unavailable => StatusCode::SERVICE_UNAVAILABLE,
    };
    if !r.from_gateway {
        let message = format!("UNAVAILABLE: the gateway cannot be reached ({})", s.message());
        return Failure { status, code, message, details: json!({}) };
    }
    Failure { status, code, message: r.to_string(), details: json!(r.details) }
}

async fn route(
    mut client: gateway::Client,
    sandbox: &str,
    waits: &tokio::sync::Semaphore,
    caller: Caller,
    req: Request<Bytes>,
) -> Result<(StatusCode, Value), Failure> {
    let path = req.uri().path().to_string();
    let query = query(req.uri().query().unwrap_or(""))?;
    let segments: Vec<&str> = path.trim_start_matches('/').split('/').collect();
    let method = req.method().clone();
    let allow = |allowed: &[&str], q: &[&str]| -> Result<(), Failure> {
        if !allowed.contains(&method.as_str()) {
            return Err(Failure {
                status: StatusCode::METHOD_NOT_ALLOWED,
                code: Code::InvalidArgument,
                message: format!("method: {path} answers {}", allowed.join(", ")),
                details: json!({"field": "method", "allowed": allowed}),
            });
        }
        match query.iter().find(|(k, _)| !q.contains(&k.as_str())) {
            Some((k, _)) => Err(invalid(k, format!("unknown query parameter for {path}"))),
            None => Ok(()),
        }
    };
    match segments.as_slice() {
        ["v1", "policy", "current"] => {
            allow(&["GET"], &[])?;
            let (version, document) =
                client.current_policy(-1).await.map_err(from_status)?.ok_or_else(|| not_found("no policy"))?;
            let policy: Value = serde_json::from_str(&document).unwrap_or(Value::Null);
            let yaml = serde_json::from_value::<openshell_policy::Policy>(policy.clone())
                .map(|p| p.to_yaml())
                .unwrap_or_default();
            Ok((StatusCode::OK, json!({"version": version, "policy": policy, "policy_yaml": yaml})))
        }
        ["v1", "denials"] => {
            allow(&["GET"], &["last"])?;
            let last = number(&query, "last", 1, 1000, 50)?;
            let denials = client.own_denials(sandbox, last as i32).await.map_err(from_status)?;
            let list: Vec<Value> = denials.iter().map(denial).collect();
            Ok((StatusCode::OK, json!({"denials": list})))
        }
        ["v1", "proposals"] => {
            allow(&["POST"], &[])?;
            let document =
                String::from_utf8(req.into_body().to_vec()).map_err(|_| invalid("body", "not UTF-8 text"))?;
            let p = client.propose(document, &caller.program).await.map_err(from_status)?;
            Ok((StatusCode::CREATED, proposal(&p, None)))
        }
        ["v1", "proposals", id] => {
            allow(&["GET"], &[])?;
            let p = client.own_proposal(proposal_id(id)?).await.map_err(from_status)?;
            Ok((StatusCode::OK, proposal(&p, None)))
        }
        ["v1", "proposals", id, "wait"] => {
            allow(&["GET"], &["timeout"])?;
            let id = proposal_id(id)?;
            let timeout = number(&query, "timeout", 0, MAX_WAIT, DEFAULT_WAIT)?;
            let _slot = waits.try_acquire().map_err(|_| Failure {
                status: StatusCode::TOO_MANY_REQUESTS,
                code: Code::LimitReached,
                message: format!("at most {MAX_WAITS} long-polls at once"),
                details: json!({"limit": "waits", "max": MAX_WAITS}),
            })?;
            let deadline = tokio::time::Instant::now() + Duration::from_secs(timeout);
            // The gateway wakes on the decision's notification (and at the expiry).
            loop {
                let left = deadline.saturating_duration_since(tokio::time::Instant::now());
                match client.wait_own_proposal(id, left.min(WAIT_CHUNK)).await {
                    Ok((p, _)) if p.state != "pending" => return Ok((StatusCode::OK, proposal(&p, Some(false)))),
                    Ok((p, _)) if tokio::time::Instant::now() >= deadline => {
                        return Ok((StatusCode::OK, proposal(&p, Some(true))));
                    }
                    Ok(_) => {}
                    Err(s) if s.code() == tonic::Code::Unimplemented => break,
                    Err(s) => return Err(from_status(s)),
                }
            }
            // An older gateway: ask again and again.
            loop {
                let p = client.own_proposal(id).await.map_err(from_status)?;
                if p.state != "pending" {
                    return Ok((StatusCode::OK, proposal(&p, Some(false))));
                }
                let now = tokio::time::Instant::now();
                if now >= deadline {
                    return Ok((StatusCode::OK, proposal(&p, Some(true))));
                }
                tokio::time::sleep(WAIT_POLL.min(deadline - now)).await;
            }
        }
        _ => Err(not_found(format!(
            "policy.local has no {path}: see GET /v1/policy/current, GET /v1/denials, \
             POST /v1/proposals, GET /v1/proposals/ID, GET /v1/proposals/ID/wait"
        ))),
    }
}

fn query(q: &str) -> Result<Vec<(String, String)>, Failure> {
    let mut out = Vec::new();
    for pair in q.split('&').filter(|p| !p.is_empty()).take(17) {
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        out.push((k.chars().take(64).collect(), v.to_string()));
    }
    if out.len() > 16 {
        return Err(invalid("query", "too many parameters"));
    }
    Ok(out)
}

fn number(query: &[(String, String)], name: &str, min: u64, max: u64, default: u64) -> Result<u64, Failure> {
    let Some((_, v)) = query.iter().find(|(k, _)| k == name) else {
        return Ok(default);
    };
    match v.parse::<u64>() {
        Ok(n) if (min..=max).contains(&n) => Ok(n),
        _ => Err(invalid(name, format!("a whole number from {min} to {max}"))),
    }
}

fn proposal_id(s: &str) -> Result<i64, Failure> {
    match s.parse::<i64>() {
        Ok(n) if n > 0 => Ok(n),
        _ => Err(invalid("id", "a proposal number")),
    }
}

fn proposal(p: &pb::Proposal, timed_out: Option<bool>) -> Value {
    let mut v = json!({
        "id": p.id,
        "state": p.state,
        "rules": serde_json::from_str::<Value>(&p.rules_json).unwrap_or(Value::Null),
        "reason": p.reason,
        "created_at": p.created_at,
        "expires_at": p.expires_at,
        "decided_at": p.decided_at,
        "decided_by": p.decided_by,
        "decision_reason": p.decision_reason,
        "policy_version": p.policy_version,
        "superseded_by": p.superseded_by,
    });
    if let Some(t) = timed_out {
        v["timed_out"] = json!(t);
    }
    v
}

fn denial(d: &pb::Denial) -> Value {
    json!({"at": d.at, "program": d.program, "host": d.host, "port": d.port, "method": d.method,
           "path": d.path, "reason": d.reason})
}

fn reply(status: StatusCode, body: &Value) -> Response<Body> {
    let mut text = serde_json::to_vec(body).unwrap_or_default();
    text.push(b'\n');
    let body = Full::new(Bytes::from(text)).map_err(|never| match never {}).boxed_unsync();
    let mut r = Response::new(body);
    *r.status_mut() = status;
    r.headers_mut().insert(hyper::header::CONTENT_TYPE, hyper::header::HeaderValue::from_static("application/json"));
    r.headers_mut().insert(hyper::header::CACHE_CONTROL, hyper::header::HeaderValue::from_static("no-store"));
    r
}
