//! `CONNECT host:port`: a raw tunnel where an L4 endpoint allows the program to reach the
//! host and port; a terminated tunnel (TLS with the sandbox CA's certificate, or plain HTTP)
//! decided request by request where an enforced `rest` endpoint could; a refusal otherwise.
//! `CONNECT policy.local:80` and `openshell.local:80` (exactly) carry plain HTTP to the
//! supervisor's hosts, request by request.

use std::sync::{Arc, Mutex};

use bytes::BytesMut;
use hyper::body::Incoming;
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use tokio::io::AsyncReadExt;
use tokio::net::TcpStream;
use tokio_rustls::TlsAcceptor;

use crate::decide::{Reason, Verdict, decide_resolved, may_inspect};
use crate::forward::{Session, Target, normalize_host};
use crate::io::{IdleIo, Prefixed};
use crate::reply;
use crate::server::{Conn, connect_any, serve_session};
use crate::virtual_host;

/// The first byte of a TLS handshake record.
const TLS_HANDSHAKE: u8 = 0x16;

/// What to do with the client's stream once the CONNECT's 200 is sent.
pub(crate) struct Upgrade {
    on_upgrade: hyper::upgrade::OnUpgrade,
    then: Then,
}

enum Then {
    /// Copy bytes both ways.
    Tunnel(TcpStream),
    /// Terminate and decide each request.
    Inspect(Target),
}

pub(crate) async fn handle(
    conn: &Arc<Conn>,
    pending: &Mutex<Option<Upgrade>>,
    mut req: Request<Incoming>,
) -> Response<crate::Body> {
    let Some(authority) = req.uri().authority().cloned() else {
        return reply::bad_request("CONNECT needs host:port");
    };
    let then = if let Some(own) = virtual_host::named(Some(authority.host())) {
        // The supervisor's own hosts: a tunnel only to the exact name on port 80, with plain
        // HTTP inside (Node's fetch tunnels even http:// URLs), each request in it served
        // as itself.
        if let Some(reason) = virtual_host::misnamed_tunnel(own, &authority) {
            return virtual_host::wrong_name(own, &reason);
        }
        Then::Inspect(Target { host: own.name().to_string(), port: 80, addrs: Vec::new() })
    } else {
        let Some(port) = authority.port_u16() else {
            return reply::bad_request("CONNECT needs a port");
        };
        match target(conn, &normalize_host(authority.host()), port).await {
            Ok(then) => then,
            Err(resp) => return resp,
        }
    };
    let upgrade = Upgrade { on_upgrade: hyper::upgrade::on(&mut req), then };
    match pending.lock() {
        Ok(mut slot) => *slot = Some(upgrade),
        Err(_) => return reply::bad_request("internal state poisoned"),
    }
    Response::new(crate::forward::empty())
}

/// A tunnel is decided once, at its CONNECT, for the program holding the connection then;
/// what it carries afterwards is not looked at again (see docs/caller-identity.md).
async fn target(conn: &Arc<Conn>, host: &str, port: u16) -> Result<Then, Response<crate::Body>> {
    let caller = conn.sender(false).await.map_err(|r| {
        let found = r.found.as_ref().map(|(p, pid)| (p.as_str(), *pid));
        let reason = Reason::Identity(r.reason);
        let d = conn.decision(found, host, port, None, None, Verdict::Deny { reason: reason.clone() });
        conn.record(&d);
        reply::closing(reply::denied(&d, &reason))
    })?;
    let who = Some((caller.program.as_str(), caller.pid));
    let deny = |reason: Reason| {
        let d = conn.decision(who, host, port, None, None, Verdict::Deny { reason: reason.clone() });
        conn.record(&d);
        reply::denied(&d, &reason)
    };
    let policy = conn.shared.policy.borrow().clone();
    match decide_resolved(&policy, &caller, host, port, None, conn.destinations(host, port)).await {
        Ok((rule, only)) => {
            let addrs = match only {
                Some(addrs) => addrs,
                None => conn.destinations(host, port).await.map_err(deny)?,
            };
            // The policy allowed it, whether or not the upstream answers.
            conn.record(&conn.decision(who, host, port, None, None, Verdict::Allow { rule }));
            let stream = connect_any(&addrs, conn.shared.limits.connect_timeout)
                .await
                .map_err(|(e, timed_out)| reply::upstream_failed(host, port, &e, timed_out))?;
            Ok(Then::Tunnel(stream))
        }
        Err(_) if may_inspect(&policy, &caller, host, port) => {
            let addrs = conn.destinations(host, port).await.map_err(deny)?;
            Ok(Then::Inspect(Target { host: host.to_string(), port, addrs }))
        }
        Err(reason) => Err(deny(reason)),
    }
}

impl Upgrade {
    pub(crate) async fn run(self, conn: Arc<Conn>) {
        let limits = conn.shared.limits.clone();
        let upgraded = match tokio::time::timeout(limits.header_read_timeout, self.on_upgrade).await {
            Ok(Ok(u)) => u,
            Ok(Err(e)) => return tracing::debug!(error = %e, "CONNECT upgrade failed"),
            Err(_) => return tracing::debug!("CONNECT upgrade timed out"),
        };
        // The client side is already under the connection's idle timeout.
        let mut client = TokioIo::new(upgraded);
        match self.then {
            Then::Tunnel(upstream) => {
                let mut upstream = IdleIo::new(upstream, limits.idle_timeout);
                if let Err(e) = tokio::io::copy_bidirectional(&mut client, &mut upstream).await {
                    tracing::debug!(error = %e, "tunnel ended");
                }
            }
            Then::Inspect(target) => {
                // The first bytes tell TLS from plain HTTP.
                let mut first = BytesMut::with_capacity(4096);
                match tokio::time::timeout(limits.header_read_timeout, client.read_buf(&mut first)).await {
                    Ok(Ok(n)) if n > 0 => {}
                    _ => return,
                }
                let stream = Prefixed::new(first.freeze(), client);
                if stream_starts_tls(&stream) && virtual_host::named(Some(&target.host)).is_some() {
                    return tracing::info!(host = %target.host, "TLS in a tunnel to a virtual host: closed (plain HTTP only)");
                }
                if stream_starts_tls(&stream) {
                    let cfg = match conn.shared.ca.server_config(&target.host) {
                        Ok(cfg) => cfg,
                        Err(e) => return tracing::warn!(error = %e, "no certificate for an inspected host"),
                    };
                    let accept = TlsAcceptor::from(cfg).accept(stream);
                    let tls = match tokio::time::timeout(limits.tls_handshake_timeout, accept).await {
                        Ok(Ok(tls)) => tls,
                        Ok(Err(e)) => {
                            return tracing::info!(host = %target.host, error = %e, "client TLS handshake failed");
                        }
                        Err(_) => return tracing::info!(host = %target.host, "client TLS handshake timed out"),
                    };
                    serve_session(Arc::new(Session::tunnel(conn, target, true)), tls).await;
                } else {
                    serve_session(Arc::new(Session::tunnel(conn, target, false)), stream).await;
                }
            }
        }
    }
}

fn stream_starts_tls<T>(s: &Prefixed<T>) -> bool {
    s.first_byte() == Some(TLS_HANDSHAKE)
}
