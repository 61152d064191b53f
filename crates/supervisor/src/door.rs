//! The MCP door: exactly `http://openshell.local/mcp` inside the sandbox, served through the
//! egress proxy, which reads each request's body whole (at most the gateway's MCP limit, 413
//! beyond), then resolves the program sending it from the kernel and refuses when it cannot
//! (see the proxy crate's `virtual_host`). Each request is forwarded to the gateway's `/mcp`
//! with the door credential (held only here) and that program, over keep-alive connections to
//! the gateway; the agent needs nothing but the URL. Responses, SSE streams included, flow
//! back as they come.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::{Request, Response, StatusCode};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::{TokioExecutor, TokioTimer};
use openshell_proxy::{Body, Caller, VirtualHost};
use serde_json::json;

use crate::door_credential::DoorCredential;

/// The header the gateway reads the calling program from (with a door credential only).
const PROGRAM_HEADER: &str = "x-openshell-program";
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
const MCP_PATH: &str = "/mcp";
const ACCEPTS: &str = "Use http://openshell.local/mcp only";

/// The only headers of the agent's request that reach the gateway (the first value of each):
/// what streamable HTTP needs. Credentials and program are the door's to set, and nothing
/// else the agent sends can change how the gateway reads the request or make it refuse the
/// request's framing.
const FORWARDED: &[&str] =
    &["content-type", "accept", "mcp-session-id", "mcp-protocol-version", "last-event-id", "user-agent"];

/// Gateway connections kept open between door calls: calls come in bursts from one agent,
/// and a fresh TCP connection and HTTP handshake per call was most of what the door added.
const POOL_IDLE: Duration = Duration::from_secs(30);
const POOL_MAX_IDLE: usize = 8;

type Upstream = Client<HttpConnector, Full<Bytes>>;

#[derive(Clone)]
pub struct Door {
    /// The gateway's `/mcp` (absolute, `http://host:port/mcp`).
    mcp: http::Uri,
    /// The gateway's address as a Host header (host:port of its endpoint).
    host: http::HeaderValue,
    /// Keep-alive connections to the gateway, shared by every door call of this sandbox
    /// (each request carries its own credential and program; the gateway checks each one).
    upstream: Upstream,
    credential: DoorCredential,
}

impl Door {
    /// A door to the gateway at `endpoint` (`http://host:port`).
    pub fn handler(endpoint: &str, credential: DoorCredential) -> Result<Arc<dyn VirtualHost>, String> {
        let uri: http::Uri = endpoint.parse().map_err(|e| format!("gateway endpoint {endpoint}: {e}"))?;
        if uri.scheme_str() != Some("http") {
            return Err(format!("gateway endpoint {endpoint}: the door forwards to http:// endpoints only"));
        }
        let authority = uri.authority().ok_or_else(|| format!("gateway endpoint {endpoint}: no host"))?;
        let gateway = match authority.port_u16() {
            Some(_) => authority.to_string(),
            None => format!("{authority}:80"),
        };
        let host = http::HeaderValue::from_str(&gateway).map_err(|e| format!("gateway endpoint {endpoint}: {e}"))?;
        let mcp =
            format!("http://{gateway}{MCP_PATH}").parse().map_err(|e| format!("gateway endpoint {endpoint}: {e}"))?;
        let mut connector = HttpConnector::new();
        connector.set_nodelay(true);
        connector.set_connect_timeout(Some(CONNECT_TIMEOUT));
        let upstream = Client::builder(TokioExecutor::new())
            .pool_idle_timeout(POOL_IDLE)
            .pool_max_idle_per_host(POOL_MAX_IDLE)
            .pool_timer(TokioTimer::new())
            .build(connector);
        Ok(Arc::new(Door { mcp, host, upstream, credential }))
    }

    async fn forward(self, caller: Caller, req: Request<Bytes>) -> Response<Body> {
        if req.uri().path() != MCP_PATH || req.uri().query().is_some() {
            let reason = format!("{}: openshell.local serves MCP at /mcp only, without a query", req.uri());
            return reply(StatusCode::NOT_FOUND, json!({ "error": "not_found", "detail": ACCEPTS, "reason": reason }));
        }
        let Some(token) = self.credential.token().await else {
            return reply(StatusCode::SERVICE_UNAVAILABLE, error("the door has no credential from the gateway yet"));
        };
        let (Ok(auth), Ok(program)) =
            (http::HeaderValue::from_str(&format!("Bearer {token}")), http::HeaderValue::from_str(&caller.program))
        else {
            return reply(StatusCode::BAD_REQUEST, error("the calling program's path cannot travel in a header"));
        };
        let (parts, body) = req.into_parts();
        let mut forwarded =
            Request::builder().method(parts.method).uri(self.mcp.clone()).version(http::Version::HTTP_11);
        for name in FORWARDED {
            if let Some(v) = parts.headers.get(*name) {
                forwarded = forwarded.header(*name, v);
            }
        }
        let forwarded = forwarded
            .header(http::header::AUTHORIZATION, auth)
            .header(PROGRAM_HEADER, program)
            .header(http::header::HOST, self.host.clone())
            .header(http::header::CONTENT_LENGTH, body.len())
            .body(Full::new(body));
        let Ok(forwarded) = forwarded else {
            return reply(StatusCode::BAD_REQUEST, error("the request cannot be forwarded"));
        };
        match self.upstream.request(forwarded).await {
            Ok(resp) => resp.map(|b| b.map_err(Into::into).boxed_unsync()),
            Err(e) if e.is_connect() => {
                tracing::warn!("reaching the gateway for a door call: {e}");
                reply(StatusCode::BAD_GATEWAY, error("the gateway cannot be reached"))
            }
            Err(e) => {
                tracing::warn!("forwarding a door call: {e}");
                reply(StatusCode::BAD_GATEWAY, error("the gateway did not answer"))
            }
        }
    }
}

impl VirtualHost for Door {
    /// The gateway's own limit, so a body the door takes is one the gateway reads whole.
    fn max_body(&self) -> usize {
        self.credential.max_body()
    }

    fn serve(&self, caller: Caller, req: Request<Bytes>) -> Pin<Box<dyn Future<Output = Response<Body>> + Send>> {
        Box::pin(self.clone().forward(caller, req))
    }
}

fn error(message: &str) -> serde_json::Value {
    json!({ "error": message })
}

fn reply(status: StatusCode, body: serde_json::Value) -> Response<Body> {
    let body = body.to_string();
    Response::builder()
        .status(status)
        .header(http::header::CONTENT_TYPE, "application/json")
        .body(Full::new(Bytes::from(body)).map_err(|never| match never {}).boxed_unsync())
        .unwrap_or_else(|_| Response::new(http_body_util::Empty::new().map_err(|never| match never {}).boxed_unsync()))
}
