//! The MCP surface: streamable HTTP at `/mcp` on the gateway's own listener (the official
//! Rust SDK, rmcp, speaks the protocol), over the same operations as gRPC. Every HTTP
//! request is authenticated by the one function gRPC uses; tools translate arguments to the
//! operations and refusals to tool results with `{code, message, details}`.

mod schema;
mod server;
mod tools;

use std::sync::Arc;
use std::time::Duration;

use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};

use crate::Gateway;

pub use server::McpServer;

/// The door credential (its SHA-256) an MCP request from a sandbox came with: each tool
/// call checks it again with the call's bucket (`Store::take_door_call`).
#[derive(Debug, Clone, Copy)]
pub(crate) struct DoorCall(pub [u8; 32]);

/// Where MCP is served on the gateway's listener.
pub const PATH: &str = "/mcp";

/// The transport's bounds and allow-lists.
#[derive(Debug, Clone)]
pub struct McpSettings {
    /// Largest request body accepted (413 beyond).
    pub max_body_bytes: usize,
    /// `Host` values accepted (host or host:port); DNS rebinding protection.
    pub allowed_hosts: Vec<String>,
    /// Browser origins accepted (loopback pages by default); a request carrying any other
    /// `Origin` is refused. Every call still needs a credential.
    pub allowed_origins: Vec<String>,
    /// A session unused this long is closed (the client starts a new one).
    pub session_idle: Duration,
}

const LOOPBACK_ORIGINS: &[&str] = &["http://localhost:*", "http://127.0.0.1:*", "http://[::1]:*"];

impl Default for McpSettings {
    fn default() -> McpSettings {
        McpSettings {
            max_body_bytes: 64 * 1024,
            allowed_hosts: vec!["localhost".into(), "127.0.0.1".into(), "::1".into(), "[::1]".into()],
            allowed_origins: LOOPBACK_ORIGINS.iter().map(|o| o.to_string()).collect(),
            session_idle: Duration::from_secs(600),
        }
    }
}

/// The `/mcp` routes: authentication in front of the SDK's streamable HTTP service.
pub fn router(gateway: Gateway, settings: &McpSettings) -> axum::Router {
    let mut config = StreamableHttpServerConfig::default()
        .with_allowed_hosts(settings.allowed_hosts.clone())
        .with_allowed_origins(settings.allowed_origins.clone())
        .enforce_origin_validation()
        .with_max_request_body_bytes(settings.max_body_bytes);
    config.sse_keep_alive = Some(Duration::from_secs(15));
    let mut sessions = LocalSessionManager::default();
    sessions.session_config.keep_alive = Some(settings.session_idle);
    let gw = gateway.clone();
    let service = StreamableHttpService::new(move || Ok(McpServer::new(gw.clone())), Arc::new(sessions), config);
    axum::Router::new().nest_service(PATH, service).layer(axum::middleware::from_fn_with_state(gateway, authenticate))
}

/// Authenticates every MCP HTTP request (no credential, no MCP) and hands the principal to
/// the tools through the request's extensions. Credentials travel only in headers: a
/// request with a query string is refused, so no token sits in a URL or a log.
async fn authenticate(State(gw): State<Gateway>, mut req: Request, next: Next) -> Response {
    if req.uri().query().is_some() {
        return refuse(
            http::StatusCode::BAD_REQUEST,
            "invalid_request",
            "no query parameters on /mcp: send credentials in the Authorization header",
        );
    }
    let peer = req.extensions().get::<tonic::transport::server::TcpConnectInfo>().and_then(|c| c.remote_addr());
    match crate::auth::authenticate_credential(&gw.store, &gw.auth, req.headers(), peer, crate::auth::Surface::Mcp)
        .await
    {
        Ok((p, hash)) => {
            if !p.is_user() {
                req.extensions_mut().insert(DoorCall(hash));
            }
            req.extensions_mut().insert(p);
            next.run(req).await
        }
        Err(e) if e.code == openshell_store::Code::Unauthenticated => {
            refuse(http::StatusCode::UNAUTHORIZED, "invalid_token", &e.message)
        }
        Err(e) if e.code == openshell_store::Code::InvalidArgument => {
            refuse(http::StatusCode::BAD_REQUEST, "invalid_request", &e.message)
        }
        Err(e) => refuse(http::StatusCode::SERVICE_UNAVAILABLE, "temporarily_unavailable", &e.message),
    }
}

fn refuse(status: http::StatusCode, error: &str, message: &str) -> Response {
    let mut resp =
        (status, axum::Json(serde_json::json!({ "error": error, "error_description": message }))).into_response();
    if status == http::StatusCode::UNAUTHORIZED {
        resp.headers_mut().insert(http::header::WWW_AUTHENTICATE, challenge(error, message));
    }
    resp
}

/// RFC 6750's challenge: a bearer token, and what was wrong with this request (the
/// gateway's message, which names no secret). No `resource_metadata`: there is no OAuth
/// server to discover; the token is the user's login (`openshell` CLI config).
fn challenge(error: &str, message: &str) -> http::HeaderValue {
    let description: String =
        message.chars().map(|c| if c == '"' || c == '\\' || !(' '..='~').contains(&c) { '\'' } else { c }).collect();
    format!("Bearer realm=\"openshell\", error=\"{error}\", error_description=\"{description}\"")
        .parse()
        .unwrap_or_else(|_| http::HeaderValue::from_static("Bearer realm=\"openshell\""))
}

/// What the listener answers for a path no gRPC service or `/mcp` serves: gRPC's
/// UNIMPLEMENTED to a gRPC request, else 404. OAuth clients probe
/// `/.well-known/oauth-protected-resource` and `/.well-known/oauth-authorization-server`
/// (and `/register`) after a 401; a 404 tells them this server has no OAuth, where a gRPC
/// answer (200, `grpc-status` 12, no body) sends them down a broken discovery.
pub async fn fallback(req: Request) -> Response {
    let grpc = req
        .headers()
        .get(http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/grpc"));
    if grpc {
        return tonic::Status::unimplemented(format!("no gRPC method at {}", req.uri().path())).into_http();
    }
    (
        http::StatusCode::NOT_FOUND,
        axum::Json(serde_json::json!({
            "error": "not_found",
            "error_description": format!(
                "nothing at {}: this gateway serves gRPC and MCP at {PATH}, and no OAuth; send your login \
                 token as `Authorization: Bearer TOKEN`",
                req.uri().path()
            ),
        })),
    )
        .into_response()
}
