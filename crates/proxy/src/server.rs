//! Accepting connections: a bounded number at once, each identified from the kernel when it
//! is accepted and again for every request on it ([`Conn::sender`]), served as HTTP/1.1 proxy
//! requests (CONNECT or absolute form).

use std::convert::Infallible;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use hyper::Method;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::task::JoinSet;

use crate::Shared;
use crate::connect::{self, Upgrade};
use crate::decide::{Decision, Reason, Verdict};
use crate::forward::{self, Session};
use crate::identity::{Caller, Unidentified};
use crate::io::IdleIo;

/// Waits before asking again when several processes hold a connection: a process that forks
/// holds its parent's sockets until it execs (which closes close-on-exec ones), so a request
/// that meets that moment is asked about again before it is refused.
const SEVERAL_RETRIES: [Duration; 4] =
    [Duration::from_millis(1), Duration::from_millis(3), Duration::from_millis(8), Duration::from_millis(20)];

/// One accepted connection: who held it when it was accepted, and where the proxy was reached.
pub(crate) struct Conn {
    pub(crate) shared: Arc<Shared>,
    pub(crate) opened_by: Result<Caller, Unidentified>,
    peer: SocketAddr,
    /// The proxy's own address on this connection: never a destination.
    pub(crate) local: SocketAddr,
    _permit: OwnedSemaphorePermit,
}

/// A request that is no program's: why, and the program found holding the connection.
#[derive(Debug, Clone)]
pub(crate) struct Refused {
    pub(crate) reason: String,
    pub(crate) found: Option<(String, u32)>,
}

pub(crate) async fn serve(shared: Arc<Shared>, listener: TcpListener) -> io::Result<()> {
    let permits = Arc::new(Semaphore::new(shared.limits.max_connections.max(1)));
    // Dropping the set (when this future is dropped) aborts every connection task.
    let mut tasks = JoinSet::new();
    loop {
        tokio::select! {
            Some(_) = tasks.join_next(), if !tasks.is_empty() => {}
            accepted = accept(&listener, &permits) => match accepted {
                Ok((stream, peer, permit)) => {
                    tasks.spawn(connection(shared.clone(), stream, peer, permit));
                }
                Err(e) if is_transient(&e) => {
                    tracing::warn!(error = %e, "accepting a connection");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                Err(e) => return Err(e),
            },
        }
    }
}

async fn accept(
    listener: &TcpListener,
    permits: &Arc<Semaphore>,
) -> io::Result<(TcpStream, SocketAddr, OwnedSemaphorePermit)> {
    let permit = permits.clone().acquire_owned().await.map_err(io::Error::other)?;
    let (stream, peer) = listener.accept().await?;
    Ok((stream, peer, permit))
}

/// Errors after which accepting can go on (a peer that left, descriptors running out).
fn is_transient(e: &io::Error) -> bool {
    matches!(e.kind(), io::ErrorKind::ConnectionAborted | io::ErrorKind::ConnectionReset | io::ErrorKind::Interrupted)
        // EMFILE, ENFILE, ENOBUFS, ENOMEM: wait for connections to finish.
        || matches!(e.raw_os_error(), Some(24 | 23 | 105 | 12))
}

async fn connection(shared: Arc<Shared>, stream: TcpStream, peer: SocketAddr, permit: OwnedSemaphorePermit) {
    let _ = stream.set_nodelay(true);
    let local = match stream.local_addr() {
        Ok(a) => a,
        Err(e) => return tracing::warn!(error = %e, "connection without a local address"),
    };
    let opened_by = identify(&shared, peer, local).await;
    if let Err(e) = &opened_by {
        tracing::warn!(%peer, error = %e, "caller not identified; every request on this connection is refused");
    }
    let limits = shared.limits.clone();
    let conn = Arc::new(Conn { shared, opened_by, peer, local, _permit: permit });
    let session = Arc::new(Session::proxy(conn.clone()));
    // A CONNECT leaves what to do with the upgraded stream here, to run in this task.
    let pending: Arc<Mutex<Option<Upgrade>>> = Arc::default();
    let slot = pending.clone();
    let service = service_fn(move |req| {
        let (session, slot) = (session.clone(), slot.clone());
        async move {
            let resp = if req.method() == Method::CONNECT {
                connect::handle(&session.conn, &slot, req).await
            } else {
                forward::handle(&session, req).await
            };
            Ok::<_, Infallible>(resp)
        }
    });
    let io = TokioIo::new(IdleIo::new(stream, limits.idle_timeout));
    if let Err(e) = http_server(&limits).serve_connection(io, service).with_upgrades().await {
        tracing::debug!(%peer, error = %e, "proxy connection ended");
    }
    let upgrade = pending.lock().ok().and_then(|mut p| p.take());
    if let Some(upgrade) = upgrade {
        upgrade.run(conn).await;
    }
}

/// Who holds the connection now, asking again (briefly) while several processes do.
async fn identify(shared: &Arc<Shared>, peer: SocketAddr, local: SocketAddr) -> Result<Caller, Unidentified> {
    let mut waits = SEVERAL_RETRIES.iter();
    loop {
        match identify_once(shared, peer, local).await {
            Err(e) if !e.holders.is_empty() => match waits.next() {
                Some(wait) => tokio::time::sleep(*wait).await,
                None => return Err(e),
            },
            done => return done,
        }
    }
}

async fn identify_once(shared: &Arc<Shared>, peer: SocketAddr, local: SocketAddr) -> Result<Caller, Unidentified> {
    match tokio::time::timeout(shared.limits.identify_timeout, shared.identity.identify(peer, local)).await {
        Ok(r) => r,
        Err(_) => Err(Unidentified::new("identifying timed out")),
    }
}

/// The HTTP/1.1 server side, with its sizes and waits bounded.
pub(crate) fn http_server(limits: &crate::Limits) -> http1::Builder {
    let mut b = http1::Builder::new();
    b.timer(TokioTimer::new())
        .header_read_timeout(limits.header_read_timeout)
        .max_buf_size(limits.max_header_bytes.max(8192))
        .max_header_size(limits.max_header_bytes)
        .max_headers(limits.max_headers)
        .keep_alive(true);
    b
}

/// Serves inspected requests on a stream (a terminated tunnel).
pub(crate) async fn serve_session<I>(session: Arc<Session>, io: I)
where
    I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let limits = session.conn.shared.limits.clone();
    let service = service_fn(move |req| {
        let session = session.clone();
        async move { Ok::<_, Infallible>(forward::handle(&session, req).await) }
    });
    if let Err(e) = http_server(&limits).serve_connection(TokioIo::new(io), service).await {
        tracing::debug!(error = %e, "inspected tunnel ended");
    }
}

impl Conn {
    /// Logs a decision and hands it to the supervisor without waiting.
    pub(crate) fn record(&self, d: &Decision) {
        match &d.verdict {
            Verdict::Allow { rule } => tracing::info!(
                program = ?d.program, host = %d.host, port = d.port, method = ?d.method, path = ?d.path,
                rule = %rule.rule, endpoint = rule.endpoint, "allow"
            ),
            Verdict::VirtualHost => tracing::info!(
                program = ?d.program, host = %d.host, method = ?d.method, path = ?d.path, "virtual host"
            ),
            Verdict::Deny { reason } => tracing::warn!(
                program = ?d.program, host = %d.host, port = d.port, method = ?d.method, path = ?d.path,
                missing = reason.code(), reason = %reason, "deny"
            ),
        }
        if self.shared.decisions.try_send(d.clone()).is_err() {
            self.shared.dropped.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// The program sending a request, asked of the kernel as the request arrives (for a
    /// request with a body the proxy reads, once its last byte has): the one process holding
    /// the connection, which must be the one that held it when it was accepted, on the same
    /// descriptors, running the same program image. `close_on_exec`: its descriptors must
    /// also close on exec, so a program it starts gets the connection only if handed it on
    /// purpose (see docs/caller-identity.md).
    pub(crate) async fn sender(&self, close_on_exec: bool) -> Result<Caller, Refused> {
        let opened_by = match &self.opened_by {
            Ok(c) => c,
            Err(e) => return Err(Refused { reason: e.reason.clone(), found: None }),
        };
        let now = identify(&self.shared, self.peer, self.local).await.map_err(|e| {
            // Several hold it: name one that did not open it, if any.
            let other = e.holders.iter().find(|h| h.pid != opened_by.pid).or(e.holders.first());
            Refused { reason: e.reason, found: other.map(|h| (h.program.clone(), h.pid)) }
        })?;
        let found = Some((now.program.clone(), now.pid));
        opened_by.still_holds(&now).map_err(|reason| Refused { reason, found: found.clone() })?;
        if close_on_exec && now.inheritable {
            return Err(Refused {
                reason: format!(
                    "process {} ({}) holds the connection on descriptors {:?} that are not close-on-exec, so a \
                     program it starts would inherit it; this host takes requests only on close-on-exec sockets \
                     (curl and wget make inheritable ones)",
                    now.pid, now.program, now.fds
                ),
                found,
            });
        }
        Ok(now)
    }

    /// A decision about a request of `program` (`None`: unknown).
    pub(crate) fn decision(
        &self,
        program: Option<(&str, u32)>,
        host: &str,
        port: u16,
        method: Option<&str>,
        path: Option<&str>,
        verdict: Verdict,
    ) -> Decision {
        Decision {
            program: program.map(|(p, _)| p.to_string()),
            pid: program.map(|(_, pid)| pid),
            host: host.to_string(),
            port,
            method: method.map(str::to_string),
            path: path.map(str::to_string),
            verdict,
        }
    }

    /// Resolves `host` and keeps the addresses the proxy may connect to.
    pub(crate) async fn destinations(&self, host: &str, port: u16) -> Result<Vec<SocketAddr>, Reason> {
        let ips =
            self.shared.resolver.resolve(host, self.shared.limits.resolve_timeout).await.map_err(Reason::Resolve)?;
        let own: IpAddr = self.local.ip().to_canonical();
        let allowed: Vec<SocketAddr> = ips
            .iter()
            .filter(|ip| !self.shared.blocked.is_blocked(**ip) && ip.to_canonical() != own)
            .map(|ip| SocketAddr::new(*ip, port))
            .collect();
        if allowed.is_empty() {
            let list: Vec<String> = ips.iter().map(IpAddr::to_string).collect();
            return Err(Reason::Blocked(list.join(", ")));
        }
        Ok(allowed)
    }
}

/// Connects to the first address that answers, each try bounded by `timeout`.
pub(crate) async fn connect_any(addrs: &[SocketAddr], timeout: Duration) -> Result<TcpStream, (String, bool)> {
    let mut last = ("no address to connect to".to_string(), false);
    for addr in addrs {
        match tokio::time::timeout(timeout, TcpStream::connect(addr)).await {
            Ok(Ok(s)) => {
                let _ = s.set_nodelay(true);
                return Ok(s);
            }
            Ok(Err(e)) => last = (format!("connecting to {addr}: {e}"), false),
            Err(_) => last = (format!("connecting to {addr} timed out"), true),
        }
    }
    Err(last)
}
