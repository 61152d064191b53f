//! The supervisor's own hosts, reached through the proxy: `policy.local` (the sandbox's
//! policy, denials, proposals) and `openshell.local` (the MCP door). They never go to DNS and
//! answer only as themselves: plain `http://` in absolute form, the name exactly (lower case,
//! no trailing dot) on port 80, the path as sent (no percent-encoding, no dot or empty
//! segments). A `CONNECT` to the exact name on port 80 carries such requests too (Node's
//! fetch tunnels every request through a proxy), each held to the same form inside. Anything
//! else naming them is refused 400 saying what they accept, as upstream OpenShell answers
//! `invalid_policy_local_scheme`; a name without a handler answers 404.
//!
//! A request's body is read whole first, bounded by its host ([`VirtualHost::max_body`], 413
//! beyond) and by [`crate::Limits::body_timeout`] (408); only then is the program sending it
//! asked of the kernel, so every byte the handler gets came from the program it is given.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::uri::Authority;
use http_body_util::BodyExt;
use http_body_util::combinators::UnsyncBoxBody;
use hyper::body::Incoming;
use hyper::header::{self, HeaderMap};
use hyper::{Request, Response, StatusCode, Uri};
use serde_json::json;

use crate::decide::{Reason, Verdict};
use crate::forward::normalize_host;
use crate::identity::Caller;
use crate::path::canonical;
use crate::reply;
use crate::server::Conn;

pub type BoxError = Box<dyn std::error::Error + Send + Sync>;
/// Response bodies: the proxy's own, an upstream's, or a virtual host's.
pub type Body = UnsyncBoxBody<Bytes, BoxError>;

pub const POLICY_HOST: &str = "policy.local";
pub const OPENSHELL_HOST: &str = "openshell.local";

/// Serves requests for one virtual host.
pub trait VirtualHost: Send + Sync {
    /// The largest request body this host takes; the proxy answers larger ones itself.
    fn max_body(&self) -> usize;

    /// The answer to a body that was too large, too slow or unreadable, in this host's own
    /// error format (by default the proxy's: `{error, detail, ...}`).
    fn body_refused(&self, refusal: &BodyRefused) -> Response<Body> {
        reply::body_refused(refusal)
    }

    /// Serves one request: its URI in origin form as sent (`/mcp`), its body read whole;
    /// `caller` is the program that sent it, resolved from the kernel after its last byte.
    fn serve(&self, caller: Caller, req: Request<Bytes>) -> Pin<Box<dyn Future<Output = Response<Body>> + Send>>;
}

/// Why a virtual host's request body was not taken.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BodyRefused {
    /// Longer than the host's limit (as declared, or as sent).
    TooLarge { max_bytes: usize },
    /// Not all there within this long.
    TooSlow { after: Duration },
    /// The stream broke off or was malformed.
    Unreadable(String),
}

impl BodyRefused {
    pub fn status(&self) -> StatusCode {
        match self {
            BodyRefused::TooLarge { .. } => StatusCode::PAYLOAD_TOO_LARGE,
            BodyRefused::TooSlow { .. } => StatusCode::REQUEST_TIMEOUT,
            BodyRefused::Unreadable(_) => StatusCode::BAD_REQUEST,
        }
    }
}

impl fmt::Display for BodyRefused {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BodyRefused::TooLarge { max_bytes } => write!(f, "body: at most {max_bytes} bytes"),
            BodyRefused::TooSlow { after } => write!(f, "body: not received within {} s", after.as_secs()),
            BodyRefused::Unreadable(e) => write!(f, "body: unreadable: {e}"),
        }
    }
}

/// Handlers for the reserved names; `None` answers 404.
#[derive(Clone, Default)]
pub struct VirtualHosts {
    pub policy: Option<Arc<dyn VirtualHost>>,
    pub openshell: Option<Arc<dyn VirtualHost>>,
}

/// One of the reserved names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Own {
    Policy,
    OpenShell,
}

impl Own {
    pub(crate) fn name(self) -> &'static str {
        match self {
            Own::Policy => POLICY_HOST,
            Own::OpenShell => OPENSHELL_HOST,
        }
    }

    /// What it accepts (upstream's words for policy.local).
    fn accepts(self) -> &'static str {
        match self {
            Own::Policy => "Use http://policy.local only",
            Own::OpenShell => "Use http://openshell.local/mcp only",
        }
    }

    /// The door's requests carry the program as a credential, so no other program may be
    /// able to inherit their connection; policy.local only records it (see
    /// docs/caller-identity.md).
    fn close_on_exec(self) -> bool {
        self == Own::OpenShell
    }
}

impl VirtualHosts {
    fn get(&self, own: Own) -> Option<&Arc<dyn VirtualHost>> {
        match own {
            Own::Policy => self.policy.as_ref(),
            Own::OpenShell => self.openshell.as_ref(),
        }
    }
}

/// Which reserved name `host` is, however it is spelled (case, a trailing dot).
pub(crate) fn named(host: Option<&str>) -> Option<Own> {
    match normalize_host(host?).as_str() {
        POLICY_HOST => Some(Own::Policy),
        OPENSHELL_HOST => Some(Own::OpenShell),
        _ => None,
    }
}

/// 400: a request naming `own` otherwise than it answers; says what it accepts and why.
pub(crate) fn wrong_name(own: Own, reason: &str) -> Response<Body> {
    let error = match own {
        Own::Policy => "invalid_policy_local_scheme",
        Own::OpenShell => "invalid_openshell_local_scheme",
    };
    refusal(error, own, reason)
}

fn wrong_path(own: Own, reason: &str) -> Response<Body> {
    let error = match own {
        Own::Policy => "invalid_policy_local_path",
        Own::OpenShell => "invalid_openshell_local_path",
    };
    refusal(error, own, reason)
}

fn refusal(error: &str, own: Own, reason: &str) -> Response<Body> {
    let body = json!({ "error": error, "detail": own.accepts(), "reason": reason });
    reply::closing(reply::json(StatusCode::BAD_REQUEST, body))
}

/// Why `uri` does not name `own` exactly, if it does not.
fn misnamed(own: Own, uri: &Uri) -> Option<String> {
    let name = own.name();
    let scheme = uri.scheme_str().unwrap_or("");
    if scheme != "http" {
        return Some(format!("{scheme}://{name}: {name} answers plain http:// only"));
    }
    let authority = uri.authority()?.as_str();
    if authority == name || authority == format!("{name}:80") {
        return None;
    }
    let host = uri.host().unwrap_or("");
    Some(if authority.contains('@') {
        "a user name in the URL".to_string()
    } else if uri.port_u16().is_some_and(|p| p != 80) || (host == name && authority != name) {
        format!("{authority}: {name} answers on port 80 only")
    } else {
        format!("{host}: the name is {name} exactly (lower case, no trailing dot)")
    })
}

/// Why `CONNECT authority` does not name `own` exactly on port 80, if it does not.
pub(crate) fn misnamed_tunnel(own: Own, authority: &Authority) -> Option<String> {
    let name = own.name();
    if authority.as_str() == format!("{name}:80") {
        return None;
    }
    Some(if authority.host() != name {
        format!("CONNECT {authority}: the name is {name} exactly (lower case, no trailing dot)")
    } else {
        format!("CONNECT {authority}: {name} answers on port 80 only, plain HTTP")
    })
}

/// Why a request inside a tunnel to `own` does not name it exactly, if it does not: its URI
/// (when in absolute form) or else its `Host`.
fn misnamed_inside(own: Own, req: &Request<Incoming>) -> Option<String> {
    if req.uri().authority().is_some() {
        return misnamed(own, req.uri());
    }
    let name = own.name();
    match req.headers().get(header::HOST).map(|h| h.to_str()) {
        None => None,
        Some(Ok(h)) if h == name || h == format!("{name}:80") => None,
        Some(Ok(h)) => Some(format!("Host: {h}: the name is {name} exactly, on port 80")),
        Some(Err(_)) => Some("an unreadable Host header".to_string()),
    }
}

/// Why `path` is not to be taken as sent, if it is not.
fn unliteral(path: &str) -> Option<&'static str> {
    if path.contains('%') {
        return Some("a percent-encoded path: paths here are taken as sent, never decoded");
    }
    if canonical(path).as_deref() != Some(path) {
        return Some("dot or empty segments in the path");
    }
    None
}

/// Serves a request naming `own` (`tunneled`: inside a `CONNECT own:80`): refused unless
/// named exactly; its body read whole; then the program sending it resolved and the handler
/// called.
pub(crate) async fn serve(conn: &Arc<Conn>, own: Own, req: Request<Incoming>, tunneled: bool) -> Response<Body> {
    let misnamed = if tunneled { misnamed_inside(own, &req) } else { misnamed(own, req.uri()) };
    if let Some(reason) = misnamed {
        return wrong_name(own, &reason);
    }
    let path = req.uri().path().to_string();
    if let Some(reason) = unliteral(&path) {
        return wrong_path(own, reason);
    }
    let host = own.name();
    let Some(handler) = conn.shared.virtual_hosts.get(own).cloned() else {
        return reply::no_virtual_host(host);
    };
    let method = req.method().as_str().to_string();
    let deny = |found: Option<(String, u32)>, reason: String| {
        let reason = Reason::Identity(reason);
        let program = found.as_ref().map(|(p, pid)| (p.as_str(), *pid));
        let d = conn.decision(program, host, 80, Some(&method), Some(&path), Verdict::Deny { reason: reason.clone() });
        conn.record(&d);
        reply::closing(reply::denied(&d, &reason))
    };
    // Nobody could be found holding it at accept: refused before its body is read.
    if let Err(e) = &conn.opened_by {
        return deny(None, e.reason.clone());
    }
    let (mut parts, body) = req.into_parts();
    // Origin form, as sent: what the handler routes on.
    parts.uri = parts.uri.path_and_query().cloned().map(Uri::from).unwrap_or_else(|| Uri::from_static("/"));
    let max = handler.max_body();
    let body = match read_body(&parts.headers, body, max, conn.shared.limits.body_timeout).await {
        Ok(b) => b,
        Err(refusal) => {
            tracing::warn!(host, method = %method, path = %path, status = refusal.status().as_u16(), "{refusal}");
            return reply::closing(handler.body_refused(&refusal));
        }
    };
    let caller = match conn.sender(own.close_on_exec()).await {
        Ok(c) => c,
        Err(r) => return deny(r.found, r.reason),
    };
    let who = Some((caller.program.as_str(), caller.pid));
    conn.record(&conn.decision(who, host, 80, Some(&method), Some(&path), Verdict::VirtualHost));
    handler.serve(caller, Request::from_parts(parts, body)).await
}

/// A body over the limit is still read (and dropped) up to this many bytes before the 413:
/// a client that is still sending when the proxy closes would get a reset instead of it.
const DRAIN_BYTES: u64 = 4 << 20;

/// The whole body, at most `max` bytes, within `timeout`. A larger one is refused: at once
/// when its client waits for `100 Continue` or it declares more than [`DRAIN_BYTES`], else
/// once read (and dropped) up to that.
async fn read_body(
    headers: &HeaderMap,
    mut body: Incoming,
    max: usize,
    timeout: Duration,
) -> Result<Bytes, BodyRefused> {
    let max_bytes = max as u64;
    let declared = headers.get(header::CONTENT_LENGTH).and_then(|v| v.to_str().ok()?.parse::<u64>().ok());
    let mut too_large = declared.is_some_and(|n| n > max_bytes);
    // A client waiting for `100 Continue` sends nothing more once refused.
    let waits = headers.get(header::EXPECT).is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"100-continue"));
    if too_large && (waits || declared.is_some_and(|n| n > DRAIN_BYTES)) {
        return Err(BodyRefused::TooLarge { max_bytes: max });
    }
    let deadline = tokio::time::Instant::now() + timeout;
    let mut kept = bytes::BytesMut::new();
    let mut seen = 0u64;
    loop {
        let frame = match tokio::time::timeout_at(deadline, body.frame()).await {
            Err(_) if too_large => break,
            Err(_) => return Err(BodyRefused::TooSlow { after: timeout }),
            Ok(None) => break,
            Ok(Some(Err(e))) => return Err(BodyRefused::Unreadable(e.to_string())),
            Ok(Some(Ok(frame))) => frame,
        };
        let Ok(data) = frame.into_data() else { continue };
        seen += data.len() as u64;
        too_large |= seen > max_bytes;
        if too_large {
            if seen > DRAIN_BYTES {
                break;
            }
            continue;
        }
        kept.extend_from_slice(&data);
    }
    if too_large {
        return Err(BodyRefused::TooLarge { max_bytes: max });
    }
    Ok(kept.freeze())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_exact_names_are_served() {
        let uri = |s: &str| s.parse::<Uri>().unwrap();
        for (s, own) in [
            ("http://openshell.local/mcp", Own::OpenShell),
            ("http://openshell.local:80/mcp", Own::OpenShell),
            ("http://policy.local/v1/policy/current", Own::Policy),
        ] {
            assert_eq!(named(uri(s).host()), Some(own), "{s}");
            assert_eq!(misnamed(own, &uri(s)), None, "{s}");
        }
        for (s, own, why) in [
            ("http://openshell.local:8080/mcp", Own::OpenShell, "port 80 only"),
            ("http://openshell.local:/mcp", Own::OpenShell, "port 80 only"),
            ("http://OPENSHELL.LOCAL/mcp", Own::OpenShell, "exactly"),
            ("http://OpenShell.local:80/mcp", Own::OpenShell, "exactly"),
            ("http://openshell.local./mcp", Own::OpenShell, "exactly"),
            ("http://policy.local:8080/v1/denials", Own::Policy, "port 80 only"),
            ("https://policy.local/v1/denials", Own::Policy, "plain http:// only"),
            ("ftp://policy.local/resource", Own::Policy, "plain http:// only"),
            ("http://me@policy.local/", Own::Policy, "user name"),
        ] {
            assert_eq!(named(uri(s).host()), Some(own), "{s}");
            let reason = misnamed(own, &uri(s)).unwrap_or_else(|| panic!("{s} served"));
            assert!(reason.contains(why), "{s}: {reason}");
        }
        for s in ["http://openshell.local.evil/mcp", "http://policy.locals/", "http://xopenshell.local/"] {
            assert_eq!(named(uri(s).host()), None, "{s}");
        }
    }

    #[test]
    fn a_tunnel_only_to_the_exact_name_on_port_80() {
        let authority = |s: &str| s.parse::<Authority>().unwrap();
        assert_eq!(misnamed_tunnel(Own::OpenShell, &authority("openshell.local:80")), None);
        assert_eq!(misnamed_tunnel(Own::Policy, &authority("policy.local:80")), None);
        for (a, why) in [
            ("openshell.local:443", "port 80 only"),
            ("openshell.local", "port 80 only"),
            ("OPENSHELL.LOCAL:80", "exactly"),
            ("openshell.local.:80", "exactly"),
        ] {
            let reason = misnamed_tunnel(Own::OpenShell, &authority(a)).unwrap_or_else(|| panic!("{a}"));
            assert!(reason.contains(why), "{a}: {reason}");
        }
    }

    #[test]
    fn paths_are_taken_as_sent() {
        for p in ["/mcp", "/v1/proposals/3/wait", "/v1/denials/"] {
            assert_eq!(unliteral(p), None, "{p}");
        }
        for p in ["/%6dcp", "/mcp%2f", "/./mcp", "/a/../mcp", "//mcp", "/mcp/.", "/v1/%70olicy/current"] {
            assert!(unliteral(p).is_some(), "{p}");
        }
    }
}
