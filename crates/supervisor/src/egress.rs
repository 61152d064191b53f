//! The sandbox's one way out: the egress proxy on the listener the init made inside the
//! sandbox's network namespace, with the sandbox's own CA for inspected HTTPS, the caller
//! identified from the kernel (by the sandbox's init, see `identity`), and every denial
//! forwarded to the gateway.

use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use openshell_policy::Policy;
use openshell_proto::v1 as pb;
use openshell_proxy::{Config, Decision, Proxy, Resolver, SandboxCa, UpstreamRoots, Verdict, VirtualHosts};
use tokio::sync::{mpsc, watch};

/// The host's trust store, in the place Debian and most distributions keep it.
const SYSTEM_BUNDLE: &str = "/etc/ssl/certs/ca-certificates.crt";

/// The sandbox's CA, the trust bundle its agent is pointed at (the host's trust store plus
/// that CA), and the extra roots the proxy trusts upstream besides the host's.
pub struct Trust {
    pub ca: SandboxCa,
    bundle: String,
    pub extra: rustls::RootCertStore,
}

impl Trust {
    /// Writes the bundle as `ca-bundle.pem` beside the working directory, readable by the
    /// agent: clients that verify TLS then trust the certificates the proxy makes for
    /// inspected hosts. Returns its path.
    pub fn write(&self, sandbox_dir: &Path) -> Result<PathBuf, String> {
        let path = sandbox_dir.join("ca-bundle.pem");
        write_public(&path, self.bundle.as_bytes()).map_err(|e| format!("{}: {e}", path.display()))?;
        Ok(path)
    }
}

/// A new CA and its trust bundle, in memory. Nothing of a sandbox is in them (its key is
/// new, its name is the same for every sandbox), so a pooled supervisor makes them before
/// its claim (crates/supervisor/src/pool.rs), a cold one while the gateway answers it.
pub struct Ca {
    ca: SandboxCa,
    bundle: String,
}

/// Makes a [`Ca`]: the key and certificate, and the bundle of the host's trust store plus
/// that certificate.
pub fn make_ca() -> Result<Ca, String> {
    let ca = SandboxCa::generate("OpenShell sandbox CA").map_err(|e| format!("sandbox CA: {e}"))?;
    let mut bundle = std::fs::read_to_string(SYSTEM_BUNDLE).unwrap_or_default();
    if !bundle.is_empty() && !bundle.ends_with('\n') {
        bundle.push('\n');
    }
    bundle.push_str(ca.cert_pem());
    Ok(Ca { ca, bundle })
}

/// The sandbox's trust: `made`, and the roots of `extra_ca` (read here, so a bad file fails
/// the start). The bundle is written by [`Trust::write`] once the sandbox's files are in place.
pub fn trust(made: Ca, extra_ca: Option<&Path>) -> Result<Trust, String> {
    Ok(Trust { ca: made.ca, bundle: made.bundle, extra: extra_roots(extra_ca)? })
}

/// The certificates of `extra_ca` (at least one).
fn extra_roots(extra_ca: Option<&Path>) -> Result<rustls::RootCertStore, String> {
    let mut roots = rustls::RootCertStore::empty();
    if let Some(path) = extra_ca {
        let pem = std::fs::read(path).map_err(|e| format!("--proxy-extra-ca {}: {e}", path.display()))?;
        for cert in rustls_pemfile(&pem) {
            roots.add(cert).map_err(|e| format!("--proxy-extra-ca {}: {e}", path.display()))?;
        }
        if roots.is_empty() {
            return Err(format!("--proxy-extra-ca {}: no certificate in it", path.display()));
        }
    }
    Ok(roots)
}

/// The proxy's upstream roots: the host's trust store plus `extra`, read once `after` ends
/// (the sandbox is READY), so the milliseconds of parsing it takes are not spent while the
/// sandbox starts. An upstream TLS handshake before then waits for them.
pub fn upstream_roots(
    extra: rustls::RootCertStore,
    after: impl std::future::Future<Output = ()> + Send + 'static,
) -> UpstreamRoots {
    let (tx, rx) = tokio::sync::oneshot::channel();
    tokio::spawn(async move {
        after.await;
        let loaded = tokio::task::spawn_blocking(move || {
            let mut roots = openshell_proxy::host_roots();
            roots.roots.extend(extra.roots);
            roots
        });
        let _ = tx.send(loaded.await.map_err(|e| e.to_string()));
    });
    UpstreamRoots::loading(
        async move { rx.await.unwrap_or_else(|_| Err("its reading stopped before it ended".into())) },
    )
}

/// A root-owned file anyone may read (certificates only), replaced atomically, never
/// written through a symlink.
fn write_public(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let tmp = path.with_extension("pem.tmp");
    let _ = std::fs::remove_file(&tmp);
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o644)
        .custom_flags(libc::O_NOFOLLOW)
        .open(&tmp)?;
    f.write_all(bytes)?;
    std::fs::rename(&tmp, path)
}

/// The variables that point common clients at the proxy and the bundle.
pub fn environment(proxy: &str, bundle: &Path) -> Vec<(String, String)> {
    let mut env = Vec::new();
    for key in ["HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY"] {
        env.push((key.to_string(), proxy.to_string()));
        env.push((key.to_ascii_lowercase(), proxy.to_string()));
    }
    // Node's built-in fetch reads the proxy variables only when told to (Node 22.21+).
    env.push(("NODE_USE_ENV_PROXY".into(), "1".into()));
    env.push(("NO_PROXY".into(), "localhost,127.0.0.1,::1".into()));
    env.push(("no_proxy".into(), "localhost,127.0.0.1,::1".into()));
    let bundle = bundle.to_string_lossy().into_owned();
    for key in ["SSL_CERT_FILE", "REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE", "NODE_EXTRA_CA_CERTS"] {
        env.push((key.to_string(), bundle.clone()));
    }
    env
}

/// Everything the proxy needs that the supervisor knows.
pub struct Setup {
    pub listener: std::net::TcpListener,
    /// Where the sandbox's init answers who opened a connection (see `identity`).
    pub identity: Option<std::os::fd::OwnedFd>,
    pub ca: SandboxCa,
    pub roots: UpstreamRoots,
    pub resolve: Vec<(String, IpAddr)>,
    /// The host's own addresses ([`host_addresses`]).
    pub blocked: Vec<ipnet::IpNet>,
    pub policy: watch::Receiver<Arc<Policy>>,
    pub denials: mpsc::Sender<pb::Denial>,
    pub virtual_hosts: VirtualHosts,
}

/// Starts the proxy; it runs until the returned task is aborted (or the supervisor exits).
pub fn start(setup: Setup) -> Result<tokio::task::JoinHandle<()>, String> {
    let identity = setup.identity.ok_or("the init handed over no identity socket")?;
    let identity = crate::identity::FromInit::new(identity).map_err(|e| format!("proxy caller identity: {e}"))?;
    let mut resolver = Resolver::system();
    for (host, ip) in &setup.resolve {
        resolver = resolver.with_override(host, vec![*ip]);
    }
    let (decisions_tx, decisions_rx) = mpsc::channel(1024);
    let config = Config {
        policy: setup.policy,
        identity: Arc::new(identity),
        resolver,
        ca: setup.ca,
        upstream_roots: setup.roots,
        blocked: setup.blocked,
        virtual_hosts: setup.virtual_hosts,
        decisions: decisions_tx,
        limits: openshell_proxy::Limits::default(),
    };
    let proxy = Proxy::new(config).map_err(|e| format!("proxy: {e}"))?;
    setup.listener.set_nonblocking(true).map_err(|e| format!("proxy listener: {e}"))?;
    let listener = tokio::net::TcpListener::from_std(setup.listener).map_err(|e| format!("proxy listener: {e}"))?;
    tokio::spawn(forward(decisions_rx, setup.denials));
    Ok(tokio::spawn(async move {
        if let Err(e) = proxy.serve(listener).await {
            tracing::error!("the egress proxy stopped: {e}");
        }
    }))
}

/// Denials go on to the gateway; every decision is already in the log.
async fn forward(mut rx: mpsc::Receiver<Decision>, denials: mpsc::Sender<pb::Denial>) {
    while let Some(d) = rx.recv().await {
        let Verdict::Deny { reason } = &d.verdict else { continue };
        let denial = pb::Denial {
            at: chrono_now(),
            program: d.program.clone().unwrap_or_default(),
            host: d.host.clone(),
            port: u32::from(d.port),
            method: d.method.clone().unwrap_or_default(),
            path: d.path.clone().unwrap_or_default(),
            reason: reason.to_string(),
        };
        // Full means the gateway is behind: the forwarder counts what it drops.
        let _ = denials.try_send(denial);
    }
}

fn chrono_now() -> String {
    humantime::format_rfc3339_millis(std::time::SystemTime::now()).to_string()
}

/// Every address of this host's interfaces, which no sandbox may reach: the gateway may listen
/// on any of them, and nothing else on the host is a sandbox's business either. Fails closed:
/// without the list the proxy cannot tell the host's own addresses apart, so it does not start.
pub fn host_addresses() -> Result<Vec<ipnet::IpNet>, String> {
    listed_addresses(nix::ifaddrs::getifaddrs().map(|a| a.filter_map(|a| a.address).collect()))
}

fn listed_addresses(listed: nix::Result<Vec<nix::sys::socket::SockaddrStorage>>) -> Result<Vec<ipnet::IpNet>, String> {
    let addrs: Vec<ipnet::IpNet> = listed
        .map_err(|e| format!("the host's own addresses (to refuse them): getifaddrs: {e}"))?
        .iter()
        .filter_map(|s| {
            s.as_sockaddr_in()
                .map(|v4| IpAddr::V4(v4.ip()))
                .or_else(|| s.as_sockaddr_in6().map(|v6| IpAddr::V6(v6.ip())))
        })
        .map(ipnet::IpNet::from)
        .collect();
    if addrs.is_empty() {
        return Err("the host's own addresses (to refuse them): no interface has an address".into());
    }
    Ok(addrs)
}

/// The policy the proxy enforces for a version the gateway sent: one that does not parse
/// (which a gateway of the same build never sends) allows no network access at all, rather
/// than leaving the previous, perhaps wider, version in force.
pub fn enforced(version: i32, json: &str) -> Policy {
    serde_json::from_str(json).unwrap_or_else(|e| {
        tracing::error!(version, "policy version {version} does not parse ({e}); the proxy now denies every request");
        Policy::default()
    })
}

/// The certificates in a PEM file.
fn rustls_pemfile(pem: &[u8]) -> Vec<rustls::pki_types::CertificateDer<'static>> {
    use rustls::pki_types::pem::PemObject;
    rustls::pki_types::CertificateDer::pem_slice_iter(pem).filter_map(Result::ok).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use nix::sys::socket::SockaddrStorage;

    #[test]
    fn without_the_host_addresses_the_proxy_does_not_start() {
        assert!(listed_addresses(Err(nix::errno::Errno::EMFILE)).unwrap_err().contains("getifaddrs"));
        assert!(listed_addresses(Ok(vec![])).unwrap_err().contains("no interface"));
        let lo = SockaddrStorage::from(std::net::SocketAddr::from(([127, 0, 0, 1], 0)));
        assert_eq!(listed_addresses(Ok(vec![lo])).unwrap(), ["127.0.0.1/32".parse::<ipnet::IpNet>().unwrap()]);
        assert!(host_addresses().unwrap().iter().any(|a| a.addr().is_loopback()));
    }

    #[test]
    fn a_policy_version_that_does_not_parse_allows_no_network_access() {
        let wide = r#"{"version": 1, "network_policies": {"all": {"endpoints": [{"host": "*.example.com", "port": 443}],
                       "binaries": [{"path": "/usr/bin/curl"}]}}}"#;
        assert!(!enforced(2, wide).network_policies.is_empty());
        let broken = enforced(3, r#"{"version": 1, "network_policies": 7}"#);
        assert!(broken.network_policies.is_empty());
        assert_eq!(broken, Policy::default());
    }
}
