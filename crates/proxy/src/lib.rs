//! The sandbox egress proxy: the only way out of a sandbox's network namespace. The
//! supervisor binds a listener on the namespace's loopback and hands it to [`serve`]; the
//! agent reaches it through `HTTP_PROXY`/`HTTPS_PROXY`. The proxy identifies the calling
//! program from the kernel ([`ProcIdentity`]) when it accepts a connection and again for every
//! request on it (refusing a connection that changed hands), decides every connection and
//! every inspected HTTP request with the policy crate's one matcher, resolves names itself,
//! never connects to loopback, link-local or other blocked addresses, and reports each
//! decision.
//!
//! - `CONNECT host:port`: tunnelled raw when an L4 endpoint allows it; terminated with a
//!   certificate from the sandbox's CA and decided request by request when an enforced
//!   `rest` endpoint could allow it; refused otherwise.
//! - `GET http://host/path` (absolute form): decided and forwarded, or refused.
//! - `http://policy.local/...` and `http://openshell.local/...`, named exactly, go to the
//!   supervisor's [`VirtualHosts`]; other spellings of them are refused.
//!
//! Refusals are `403` with a JSON body naming the program, host, port, method, path and what
//! was missing. Anything unknown, failing or timing out is refused.
//!
//! ```no_run
//! # async fn supervisor(
//! #     listener: std::net::TcpListener, // bound on 127.0.0.1:3128 inside the sandbox's netns
//! #     sandbox_pid: u32,                // any process in that namespace
//! #     policy: openshell_policy::Policy,
//! # ) -> Result<(), Box<dyn std::error::Error>> {
//! use std::sync::Arc;
//! use openshell_proxy::*;
//!
//! let (policy_tx, policy_rx) = tokio::sync::watch::channel(Arc::new(policy));
//! let (decisions_tx, mut decisions_rx) = tokio::sync::mpsc::channel(1024);
//! let ca = SandboxCa::generate("OpenShell sandbox lead")?;
//! // Write ca.cert_pem() into the sandbox's trust bundle (SSL_CERT_FILE and friends).
//! let pids = ProcIdentity::cgroup_procs("/sys/fs/cgroup/unified/openshell/lead/cgroup.procs");
//! let config = Config {
//!     policy: policy_rx,
//!     identity: Arc::new(ProcIdentity::for_namespace_of(sandbox_pid, pids)?),
//!     resolver: Resolver::system(),
//!     ca,
//!     upstream_roots: UpstreamRoots::ready(host_roots()),
//!     blocked: vec!["192.0.2.10/32".parse()?], // the gateway
//!     virtual_hosts: VirtualHosts::default(),  // policy.local / openshell.local handlers
//!     decisions: decisions_tx,
//!     limits: Limits::default(),
//! };
//! listener.set_nonblocking(true)?;
//! let proxy = Proxy::new(config)?;
//! let task = tokio::spawn(async move { proxy.serve(tokio::net::TcpListener::from_std(listener)?).await });
//! // policy_tx.send(Arc::new(new_policy)) applies from the next request;
//! // decisions_rx.recv().await yields every allow and deny; task.abort() stops everything.
//! # drop((policy_tx, task)); let _ = decisions_rx.recv().await; Ok(())
//! # }
//! ```

mod blocked;
mod connect;
mod decide;
mod forward;
mod identity;
mod io;
mod path;
mod reply;
mod resolve;
mod server;
mod sock_diag;
mod tls;
mod virtual_host;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use openshell_policy::Policy;
use tokio::net::TcpListener;
use tokio::sync::{mpsc, watch};

pub use decide::{Decision, Reason, Verdict};
pub use identity::{Caller, Holder, Identify, Identifying, ProcIdentity, Unidentified, namespace_tables};
pub use resolve::Resolver;
pub use tls::{SandboxCa, UpstreamRoots, host_roots};
pub use virtual_host::{Body, BodyRefused, BoxError, OPENSHELL_HOST, POLICY_HOST, VirtualHost, VirtualHosts};

/// Everything the proxy needs from the supervisor.
pub struct Config {
    /// The sandbox's current policy; each new connection and each request reads the latest.
    pub policy: watch::Receiver<Arc<Policy>>,
    /// Who holds a connection (asked at accept and for every request).
    pub identity: Arc<dyn Identify>,
    pub resolver: Resolver,
    /// Signs the certificates of inspected hosts.
    pub ca: SandboxCa,
    /// The CAs upstream servers are verified against ([`host_roots`], plus any extra).
    pub upstream_roots: UpstreamRoots,
    /// Never destinations, besides the always-blocked set: e.g. the gateway's addresses.
    pub blocked: Vec<ipnet::IpNet>,
    pub virtual_hosts: VirtualHosts,
    /// Every decision; sent without waiting (dropped and counted when full).
    pub decisions: mpsc::Sender<Decision>,
    pub limits: Limits,
}

/// Sizes and waits; every one is bounded.
#[derive(Debug, Clone)]
pub struct Limits {
    /// Connections served at once; more wait in the listen backlog.
    pub max_connections: usize,
    /// From the first byte of a request (or of a tunnel) to its last header byte.
    pub header_read_timeout: Duration,
    /// A connection (either side) with no byte moving for this long is closed.
    pub idle_timeout: Duration,
    pub connect_timeout: Duration,
    pub resolve_timeout: Duration,
    pub tls_handshake_timeout: Duration,
    /// From sending a request upstream to its response headers.
    pub response_timeout: Duration,
    /// Identifying the caller from `/proc`.
    pub identify_timeout: Duration,
    /// A virtual host's request body, from its headers to its last byte.
    pub body_timeout: Duration,
    /// Request line and headers, in bytes (at least 8192).
    pub max_header_bytes: usize,
    pub max_headers: usize,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            max_connections: 256,
            header_read_timeout: Duration::from_secs(30),
            idle_timeout: Duration::from_secs(300),
            connect_timeout: Duration::from_secs(10),
            resolve_timeout: Duration::from_secs(5),
            tls_handshake_timeout: Duration::from_secs(10),
            response_timeout: Duration::from_secs(120),
            identify_timeout: Duration::from_secs(5),
            body_timeout: Duration::from_secs(10),
            max_header_bytes: 64 * 1024,
            max_headers: 100,
        }
    }
}

/// A proxy failed to start.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("upstream TLS configuration: {0}")]
    Tls(#[from] rustls::Error),
}

/// A configured proxy; clones share everything, including the decision counters.
#[derive(Clone)]
pub struct Proxy {
    shared: Arc<Shared>,
}

pub(crate) struct Shared {
    pub(crate) policy: watch::Receiver<Arc<Policy>>,
    pub(crate) identity: Arc<dyn Identify>,
    pub(crate) resolver: Resolver,
    pub(crate) ca: SandboxCa,
    pub(crate) upstream_tls: tls::Upstream,
    pub(crate) blocked: blocked::Blocklist,
    pub(crate) virtual_hosts: VirtualHosts,
    pub(crate) decisions: mpsc::Sender<Decision>,
    pub(crate) dropped: AtomicU64,
    pub(crate) limits: Limits,
}

impl Proxy {
    pub fn new(config: Config) -> Result<Proxy, Error> {
        let shared = Shared {
            upstream_tls: tls::Upstream::new(config.upstream_roots)?,
            policy: config.policy,
            identity: config.identity,
            resolver: config.resolver,
            ca: config.ca,
            blocked: blocked::Blocklist::new(config.blocked),
            virtual_hosts: config.virtual_hosts,
            decisions: config.decisions,
            dropped: AtomicU64::new(0),
            limits: config.limits,
        };
        Ok(Proxy { shared: Arc::new(shared) })
    }

    /// Serves connections from `listener` until the returned future is dropped (which ends
    /// every connection it started) or accepting fails for good.
    pub async fn serve(&self, listener: TcpListener) -> std::io::Result<()> {
        server::serve(self.shared.clone(), listener).await
    }

    /// Decisions not delivered because the channel was full or closed.
    pub fn dropped_decisions(&self) -> u64 {
        self.shared.dropped.load(Ordering::Relaxed)
    }
}

/// [`Proxy::new`] then [`Proxy::serve`].
pub async fn serve(listener: TcpListener, config: Config) -> Result<(), ServeError> {
    let proxy = Proxy::new(config)?;
    proxy.serve(listener).await?;
    Ok(())
}

/// Why [`serve`] returned.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    #[error(transparent)]
    Start(#[from] Error),
    #[error("accepting connections: {0}")]
    Accept(#[from] std::io::Error),
}
