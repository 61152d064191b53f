//! The MCP door: `http://openshell.local/mcp` inside the sandbox, served through the egress
//! proxy (which resolves the calling program from the kernel and refuses when it cannot).
//! Each request is forwarded to the gateway's `/mcp` with the door credential (held only
//! here) and the program, over keep-alive connections to the gateway; the agent needs
//! nothing but the URL. Responses, SSE streams included, flow back as they come.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::{Request, Response, StatusCode};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::{TokioExecutor, TokioTimer};
use openshell_proxy::{Body, Caller, VirtualHost};

use crate::door_credential::DoorCredential;

/// The header the gateway reads the calling program from (with a door credential only).
const PROGRAM_HEADER: &str = "x-openshell-program";
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
const MCP_PATH: &str = "/mcp";

/// Headers of the agent's request that never reach the gateway: credentials and program
/// are the door's to set, hop-by-hop headers are this hop's, and an Origin would be the
/// agent's claim (the door is not a browser).
const DROPPED: &[&str] = &[
    "authorization",
    "proxy-authorization",
    "cookie",
    "origin",
    "host",
    "connection",
    "proxy-connection",
    "keep-alive",
    "te",
    "trailer",
    "upgrade",
];

/// Gateway connections kept open between door calls: calls come in bursts from one agent,
/// and a fresh TCP connection and HTTP handshake per call was most of what the door added.
const POOL_IDLE: Duration = Duration::from_secs(30);
const POOL_MAX_IDLE: usize = 8;

type Upstream = Client<HttpConnector, Incoming>;

#[derive(Clone)]
pub struct Door {
    /// The gateway's `/mcp` (absolute, `http://host:port/mcp`).
    mcp: String,
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
        let mut connector = HttpConnector::new();
        connector.set_nodelay(true);
        connector.set_connect_timeout(Some(CONNECT_TIMEOUT));
        let upstream = Client::builder(TokioExecutor::new())
            .pool_idle_timeout(POOL_IDLE)
            .pool_max_idle_per_host(POOL_MAX_IDLE)
            .pool_timer(TokioTimer::new())
            .build(connector);
        Ok(Arc::new(Door { mcp: format!("http://{gateway}{}", MCP_PATH), host, upstream, credential }))
    }

    async fn forward(self, caller: Caller, req: Request<Incoming>) -> Response<Body> {
        if req.uri().path() != MCP_PATH {
            return reply(StatusCode::NOT_FOUND, "openshell.local serves MCP at /mcp only");
        }
        let Some(token) = self.credential.token().await else {
            return reply(StatusCode::SERVICE_UNAVAILABLE, "the door has no credential from the gateway yet");
        };
        let (mut parts, body) = req.into_parts();
        for name in DROPPED {
            parts.headers.remove(*name);
        }
        parts.headers.remove(PROGRAM_HEADER);
        let (Ok(auth), Ok(program)) =
            (http::HeaderValue::from_str(&format!("Bearer {token}")), http::HeaderValue::from_str(&caller.program))
        else {
            return reply(StatusCode::BAD_REQUEST, "the calling program's path cannot travel in a header");
        };
        parts.headers.insert(http::header::AUTHORIZATION, auth);
        parts.headers.insert(PROGRAM_HEADER, program);
        parts.headers.insert(http::header::HOST, self.host.clone());
        let target = match parts.uri.query() {
            Some(q) => format!("{}?{q}", self.mcp),
            None => self.mcp.clone(),
        };
        let Ok(uri) = target.parse() else {
            return reply(StatusCode::BAD_REQUEST, "the request's query cannot be forwarded");
        };
        parts.uri = uri;
        match self.upstream.request(Request::from_parts(parts, body)).await {
            Ok(resp) => resp.map(|b| b.map_err(Into::into).boxed_unsync()),
            Err(e) if e.is_connect() => {
                tracing::warn!("reaching the gateway for a door call: {e}");
                reply(StatusCode::BAD_GATEWAY, "the gateway cannot be reached")
            }
            Err(e) => {
                tracing::warn!("forwarding a door call: {e}");
                reply(StatusCode::BAD_GATEWAY, "the gateway did not answer")
            }
        }
    }
}

impl VirtualHost for Door {
    fn serve(&self, caller: Caller, req: Request<Incoming>) -> Pin<Box<dyn Future<Output = Response<Body>> + Send>> {
        Box::pin(self.clone().forward(caller, req))
    }
}

fn reply(status: StatusCode, message: &str) -> Response<Body> {
    let body = serde_json::json!({ "error": message }).to_string();
    Response::builder()
        .status(status)
        .header(http::header::CONTENT_TYPE, "application/json")
        .body(Full::new(Bytes::from(body)).map_err(|never| match never {}).boxed_unsync())
        .unwrap_or_else(|_| Response::new(http_body_util::Empty::new().map_err(|never| match never {}).boxed_unsync()))
}
