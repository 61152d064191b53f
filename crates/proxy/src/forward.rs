//! One HTTP request, decided and forwarded: absolute-form requests to the proxy itself, and
//! requests inside a terminated tunnel. Each is decided with the policy current when it
//! arrives, for the program holding the connection then (asked of the kernel once its
//! headers are in; the body streams on); allowed ones go upstream on a connection this
//! session keeps, without hop-by-hop and `Proxy-*` headers.

use std::net::SocketAddr;
use std::str::FromStr;
use std::sync::Arc;

use bytes::Bytes;
use http::uri::{Authority, PathAndQuery};
use http_body_util::{BodyExt, Empty};
use hyper::body::Incoming;
use hyper::client::conn::http1::{self as client, SendRequest};
use hyper::header::{self, HeaderMap, HeaderName, HeaderValue};
use hyper::{Method, Request, Response, Uri, Version};
use hyper_util::rt::TokioIo;
use openshell_policy::HttpRequest;
use rustls::pki_types::ServerName;
use tokio::sync::Mutex;
use tokio_rustls::TlsConnector;

use crate::Body;
use crate::decide::{Reason, Verdict, decide_resolved};
use crate::io::IdleIo;
use crate::path::canonical;
use crate::reply;
use crate::server::{Conn, connect_any};
use crate::virtual_host;

/// Where a terminated tunnel leads: its host and port (as decided at CONNECT), and the
/// addresses allowed for them.
pub(crate) struct Target {
    pub(crate) host: String,
    pub(crate) port: u16,
    pub(crate) addrs: Vec<std::net::SocketAddr>,
}

/// Requests arriving on one stream: the proxy connection itself, or one terminated tunnel.
pub(crate) struct Session {
    pub(crate) conn: Arc<Conn>,
    tunnel: Option<(Target, bool)>,
    /// The upstream connection kept for the next request.
    upstream: Mutex<Option<Upstream>>,
}

struct Upstream {
    host: String,
    port: u16,
    /// The address connected to: reused only for requests allowed at it.
    addr: SocketAddr,
    sender: SendRequest<Incoming>,
}

/// Where one request goes.
struct Dest {
    host: String,
    port: u16,
    tls: bool,
}

impl Session {
    pub(crate) fn proxy(conn: Arc<Conn>) -> Session {
        Session { conn, tunnel: None, upstream: Mutex::new(None) }
    }

    /// A terminated tunnel; `tls` when the client spoke TLS inside it (then so does the
    /// proxy upstream).
    pub(crate) fn tunnel(conn: Arc<Conn>, target: Target, tls: bool) -> Session {
        Session { conn, tunnel: Some((target, tls)), upstream: Mutex::new(None) }
    }
}

pub(crate) async fn handle(session: &Session, req: Request<Incoming>) -> Response<Body> {
    let conn = &session.conn;
    match &session.tunnel {
        Some((t, _)) => {
            if let Some(own) = virtual_host::named(Some(&t.host)) {
                return virtual_host::serve(conn, own, req, true).await;
            }
        }
        None => {
            if let Some(own) = virtual_host::named(req.uri().host()) {
                return virtual_host::serve(conn, own, req, false).await;
            }
        }
    }
    let dest = match destination(session, &req) {
        Ok(d) => d,
        Err(why) => return reply::bad_request(why),
    };
    let method = req.method().as_str().to_string();
    let raw_path = req.uri().path().to_string();
    let deny = |program: Option<(&str, u32)>, path: &str, reason: Reason| {
        let verdict = Verdict::Deny { reason: reason.clone() };
        let d = conn.decision(program, &dest.host, dest.port, Some(&method), Some(path), verdict);
        conn.record(&d);
        reply::denied(&d, &reason)
    };
    // Each request is the program's that holds the connection as it arrives.
    let caller = match conn.sender(false).await {
        Ok(c) => c,
        Err(r) => {
            let found = r.found.as_ref().map(|(p, pid)| (p.as_str(), *pid));
            return reply::closing(deny(found, &raw_path, Reason::Identity(r.reason)));
        }
    };
    let who = Some((caller.program.as_str(), caller.pid));
    if let Some(resp) = host_mismatch(session, &req, &dest) {
        return resp.unwrap_or_else(|reason| deny(who, &raw_path, reason));
    }
    let Some(path) = canonical(&raw_path) else {
        return deny(who, &raw_path, Reason::PathForm);
    };
    let policy = conn.shared.policy.borrow().clone();
    // Query rules are decided on the decoded values; a query with no one reading (bad
    // escapes, too many pairs) is refused like an ambiguous path.
    let Some(query) = openshell_policy::decode_query(req.uri().query().unwrap_or("")) else {
        return deny(who, &path, Reason::PathForm);
    };
    let http = HttpRequest { method: method.clone(), path: path.clone(), query };
    let resolve = async {
        match &session.tunnel {
            Some((t, _)) => Ok(t.addrs.clone()),
            None => conn.destinations(&dest.host, dest.port).await,
        }
    };
    let (rule, only) = match decide_resolved(&policy, &caller, &dest.host, dest.port, Some(http), resolve).await {
        Ok(decided) => decided,
        Err(reason) => return deny(who, &path, reason),
    };
    let mut upstream = session.upstream.lock().await;
    let allow = conn.decision(who, &dest.host, dest.port, Some(&method), Some(&path), Verdict::Allow { rule });
    let mut sender = match ready_sender(session, &mut upstream, &dest, only).await {
        Ok(s) => s,
        Err(Failure::Denied(reason)) => return deny(who, &path, reason),
        // The policy allowed it; the upstream failed.
        Err(Failure::Upstream(e, timed_out)) => {
            conn.record(&allow);
            return reply::upstream_failed(&dest.host, dest.port, &e, timed_out);
        }
    };
    conn.record(&allow);
    let Some(mut req) = origin_form(req, &path) else {
        return reply::bad_request("unreadable path");
    };
    strip_hop_by_hop(req.headers_mut());
    if let Ok(v) = HeaderValue::from_str(&authority(&dest)) {
        req.headers_mut().insert(header::HOST, v);
    }
    *req.version_mut() = Version::HTTP_11;
    let limits = &conn.shared.limits;
    let sent = tokio::time::timeout(limits.response_timeout, sender.sender.send_request(req)).await;
    match sent {
        Ok(Ok(mut resp)) => {
            // The connection is reusable once this response's body has been read.
            *upstream = Some(sender);
            strip_hop_by_hop(resp.headers_mut());
            resp.map(|b| b.map_err(Into::into).boxed_unsync())
        }
        Ok(Err(e)) => reply::upstream_failed(&dest.host, dest.port, &e.to_string(), false),
        Err(_) => reply::upstream_failed(&dest.host, dest.port, "no response in time", true),
    }
}

/// The request's destination: the tunnel's, or the absolute-form URI's.
/// Err says why the request is malformed.
fn destination(session: &Session, req: &Request<Incoming>) -> Result<Dest, &'static str> {
    if let Some((t, tls)) = &session.tunnel {
        if req.method() == Method::CONNECT {
            return Err("CONNECT inside a tunnel");
        }
        return Ok(Dest { host: t.host.clone(), port: t.port, tls: *tls });
    }
    let uri = req.uri();
    match uri.scheme_str() {
        Some("http") => {}
        Some(_) => return Err("only http:// URLs are forwarded; use CONNECT for https"),
        None => return Err("requests to a proxy must name their URL in absolute form"),
    }
    let Some(authority) = uri.authority() else {
        return Err("the URL has no host");
    };
    Ok(Dest { host: normalize_host(authority.host()), port: authority.port_u16().unwrap_or(80), tls: false })
}

/// Inside a tunnel, a request must name the tunnel's host (else a shared front could route
/// it elsewhere). `Some(Err)` refuses; `Some(Ok)` answers directly.
fn host_mismatch(session: &Session, req: &Request<Incoming>, dest: &Dest) -> Option<Result<Response<Body>, Reason>> {
    session.tunnel.as_ref()?;
    let named = match req.uri().authority() {
        Some(a) => Some(a.host().to_string()),
        None => {
            match req.headers().get(header::HOST).map(|h| h.to_str().ok().and_then(|s| Authority::from_str(s).ok())) {
                None => None,
                Some(Some(a)) => Some(a.host().to_string()),
                Some(None) => return Some(Ok(reply::bad_request("unreadable Host header"))),
            }
        }
    };
    match named {
        Some(h) if normalize_host(&h) != dest.host => Some(Err(Reason::HostMismatch)),
        _ => None,
    }
}

enum Failure {
    Denied(Reason),
    Upstream(String, bool),
}

/// The kept upstream connection if it leads to `dest` and is ready, else a new one.
/// `only`: the addresses this request is allowed at, when the policy restricts them.
async fn ready_sender(
    session: &Session,
    kept: &mut Option<Upstream>,
    dest: &Dest,
    only: Option<Vec<SocketAddr>>,
) -> Result<Upstream, Failure> {
    let conn = &session.conn;
    let limits = &conn.shared.limits;
    if let Some(mut up) = kept.take()
        && up.host == dest.host
        && up.port == dest.port
        && only.as_ref().is_none_or(|a| a.contains(&up.addr))
        && !up.sender.is_closed()
        && matches!(tokio::time::timeout(limits.response_timeout, up.sender.ready()).await, Ok(Ok(())))
    {
        return Ok(up);
    }
    let addrs = match (only, &session.tunnel) {
        (Some(addrs), _) => addrs,
        (None, Some((t, _))) => t.addrs.clone(),
        (None, None) => conn.destinations(&dest.host, dest.port).await.map_err(Failure::Denied)?,
    };
    let tcp = connect_any(&addrs, limits.connect_timeout).await.map_err(|(e, t)| Failure::Upstream(e, t))?;
    let addr = tcp.peer_addr().map_err(|e| Failure::Upstream(e.to_string(), false))?;
    let io = IdleIo::new(tcp, limits.idle_timeout);
    let sender = if dest.tls {
        let name = ServerName::try_from(dest.host.clone()).map_err(|e| Failure::Upstream(e.to_string(), false))?;
        // The wait for the upstream roots (still loading at a sandbox's start) counts too.
        let connect = async {
            let config = conn.shared.upstream_tls.config().await.map_err(|e| Failure::Upstream(e, false))?;
            let tls = TlsConnector::from(config).connect(name, io).await;
            tls.map_err(|e| Failure::Upstream(format!("TLS with {}: {e}", dest.host), false))
        };
        let tls = match tokio::time::timeout(limits.tls_handshake_timeout, connect).await {
            Ok(tls) => tls?,
            Err(_) => return Err(Failure::Upstream(format!("TLS with {} timed out", dest.host), true)),
        };
        handshake(TokioIo::new(tls), limits).await?
    } else {
        handshake(TokioIo::new(io), limits).await?
    };
    Ok(Upstream { host: dest.host.clone(), port: dest.port, addr, sender })
}

async fn handshake<I>(io: I, limits: &crate::Limits) -> Result<SendRequest<Incoming>, Failure>
where
    I: hyper::rt::Read + hyper::rt::Write + Unpin + Send + 'static,
{
    let mut b = client::Builder::new();
    b.max_buf_size(limits.max_header_bytes.max(8192)).max_headers(limits.max_headers);
    let (sender, connection) = b.handshake(io).await.map_err(|e| Failure::Upstream(e.to_string(), false))?;
    // Ends when the session drops its sender or the idle timeout closes the socket.
    tokio::spawn(async move {
        if let Err(e) = connection.await {
            tracing::debug!(error = %e, "upstream connection ended");
        }
    });
    Ok(sender)
}

/// The request with an origin-form URI made of the canonical path and the original query.
fn origin_form(mut req: Request<Incoming>, path: &str) -> Option<Request<Incoming>> {
    let pq = match req.uri().query() {
        Some(q) => format!("{path}?{q}"),
        None => path.to_string(),
    };
    *req.uri_mut() = Uri::from(PathAndQuery::from_str(&pq).ok()?);
    Some(req)
}

/// `host` or `host:port` when the port is not the scheme's default.
fn authority(dest: &Dest) -> String {
    let default = if dest.tls { 443 } else { 80 };
    if dest.port == default { dest.host.clone() } else { format!("{}:{}", dest.host, dest.port) }
}

/// Removes headers meant for one hop only, those a `Connection` header names (except the
/// ones framing depends on), and every `Proxy-*` header.
fn strip_hop_by_hop(headers: &mut HeaderMap) {
    let named: Vec<HeaderName> = headers
        .get_all(header::CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .filter_map(|n| HeaderName::from_bytes(n.trim().as_bytes()).ok())
        .filter(|n| *n != header::HOST && *n != header::CONTENT_LENGTH)
        .collect();
    for n in named {
        headers.remove(n);
    }
    for n in [header::CONNECTION, header::TE, header::TRAILER, header::TRANSFER_ENCODING, header::UPGRADE] {
        headers.remove(n);
    }
    let proxy: Vec<HeaderName> =
        headers.keys().filter(|k| k.as_str().starts_with("proxy-") || k.as_str() == "keep-alive").cloned().collect();
    for n in proxy {
        headers.remove(n);
    }
}

/// Lower-case, without brackets (IPv6) or one trailing dot.
pub(crate) fn normalize_host(host: &str) -> String {
    let h = host.trim_start_matches('[').trim_end_matches(']');
    h.strip_suffix('.').unwrap_or(h).to_ascii_lowercase()
}

pub(crate) fn empty() -> Body {
    Empty::<Bytes>::new().map_err(|never| match never {}).boxed_unsync()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hop_by_hop_and_proxy_headers_are_removed() {
        let mut h = HeaderMap::new();
        for (k, v) in [
            ("connection", "keep-alive, x-secret, host"),
            ("keep-alive", "timeout=5"),
            ("proxy-authorization", "Basic eA=="),
            ("proxy-connection", "keep-alive"),
            ("x-secret", "1"),
            ("te", "trailers"),
            ("upgrade", "websocket"),
            ("host", "a.test"),
            ("accept", "*/*"),
        ] {
            h.append(HeaderName::from_static(k), HeaderValue::from_static(v));
        }
        strip_hop_by_hop(&mut h);
        let mut left: Vec<&str> = h.keys().map(|k| k.as_str()).collect();
        left.sort();
        assert_eq!(left, ["accept", "host"]);
    }

    #[test]
    fn hosts_are_normalized() {
        assert_eq!(normalize_host("API.Test."), "api.test");
        assert_eq!(normalize_host("[::1]"), "::1");
    }
}
