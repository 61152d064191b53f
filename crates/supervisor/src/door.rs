//! The MCP door: `http://openshell.local/mcp` inside the sandbox, served through the egress
//! proxy (which resolves the calling program from the kernel and refuses when it cannot).
//! Each request is forwarded to the gateway's `/mcp` with the door credential (held only
//! here) and the program; the agent needs nothing but the URL. Responses, SSE streams
//! included, flow back as they come.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::{Request, Response, StatusCode};
use openshell_proxy::{Body, Caller, VirtualHost};

use crate::door_credential::DoorCredential;

/// The header the gateway reads the calling program from (with a door credential only).
const PROGRAM_HEADER: &str = "x-openshell-program";
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

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

#[derive(Clone)]
pub struct Door {
    /// The gateway's address (host:port of its endpoint).
    gateway: String,
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
        Ok(Arc::new(Door { gateway, credential }))
    }

    async fn forward(self, caller: Caller, req: Request<Incoming>) -> Response<Body> {
        if req.uri().path() != "/mcp" {
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
        let (Ok(auth), Ok(program), Ok(host)) = (
            http::HeaderValue::from_str(&format!("Bearer {token}")),
            http::HeaderValue::from_str(&caller.program),
            http::HeaderValue::from_str(&self.gateway),
        ) else {
            return reply(StatusCode::BAD_REQUEST, "the calling program's path cannot travel in a header");
        };
        parts.headers.insert(http::header::AUTHORIZATION, auth);
        parts.headers.insert(PROGRAM_HEADER, program);
        parts.headers.insert(http::header::HOST, host);
        parts.uri = match parts.uri.query() {
            Some(q) => format!("/mcp?{q}"),
            None => "/mcp".to_string(),
        }
        .parse()
        .unwrap_or_else(|_| http::Uri::from_static("/mcp"));
        let stream = match tokio::time::timeout(CONNECT_TIMEOUT, tokio::net::TcpStream::connect(&self.gateway)).await {
            Ok(Ok(s)) => s,
            _ => return reply(StatusCode::BAD_GATEWAY, "the gateway cannot be reached"),
        };
        let _ = stream.set_nodelay(true);
        let (mut send, conn) = match hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream)).await {
            Ok(pair) => pair,
            Err(_) => return reply(StatusCode::BAD_GATEWAY, "the gateway did not speak HTTP"),
        };
        tokio::spawn(async move {
            if let Err(e) = conn.await {
                tracing::debug!("door connection to the gateway: {e}");
            }
        });
        match send.send_request(Request::from_parts(parts, body)).await {
            Ok(resp) => resp.map(|b| b.map_err(Into::into).boxed_unsync()),
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
