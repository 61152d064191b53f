//! Test rig: destination servers on test hosts in network namespaces of their own (a veth
//! pair, addresses from 198.18.0.0/15), the proxy in-process with the real `ProcIdentity`,
//! and real clients (curl, Python's urllib) driving it. No traffic goes anywhere else.

#![allow(dead_code)]

use std::collections::HashMap;
use std::convert::Infallible;
use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use openshell_policy::Policy;
use openshell_proxy::{Config, Decision, Limits, ProcIdentity, Proxy, Resolver, SandboxCa, VirtualHosts};
use rcgen::{BasicConstraints, CertificateParams, IsCa, Issuer, KeyPair};
use rustls::RootCertStore;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use tokio::sync::{mpsc, watch};

pub use openshell_testhost::TestHost;

/// What a test server saw: "METHOD path?query" per request.
pub type Seen = Arc<Mutex<Vec<String>>>;

async fn echo(seen: Seen, req: Request<Incoming>) -> Result<Response<Full<Bytes>>, Infallible> {
    let line = format!("{} {}", req.method(), req.uri());
    seen.lock().unwrap().push(line.clone());
    let host = req.headers().get("host").and_then(|h| h.to_str().ok()).unwrap_or("").to_string();
    let proxy_headers = req
        .headers()
        .keys()
        .filter(|k| k.as_str().starts_with("proxy-") || k.as_str() == "x-drop" || k.as_str() == "connection")
        .count();
    let body = format!("echo {line} host={host} proxy_headers={proxy_headers}");
    Ok(Response::new(Full::new(Bytes::from(body))))
}

/// An HTTP echo server on `listener`; TLS when `tls` is given.
pub fn serve_echo(listener: std::net::TcpListener, tls: Option<Arc<rustls::ServerConfig>>) -> Seen {
    let seen: Seen = Arc::default();
    let listener = tokio::net::TcpListener::from_std(listener).expect("tokio listener");
    let s = seen.clone();
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else { return };
            let (s, tls) = (s.clone(), tls.clone());
            tokio::spawn(async move {
                let svc = service_fn(move |req| echo(s.clone(), req));
                let http = hyper::server::conn::http1::Builder::new();
                match tls {
                    Some(cfg) => {
                        if let Ok(t) = tokio_rustls::TlsAcceptor::from(cfg).accept(stream).await {
                            let _ = http.serve_connection(TokioIo::new(t), svc).await;
                        }
                    }
                    None => {
                        let _ = http.serve_connection(TokioIo::new(stream), svc).await;
                    }
                }
            });
        }
    });
    seen
}

/// A CA for the test's HTTPS servers (what upstream_roots trusts).
pub struct TestCa {
    issuer: Issuer<'static, KeyPair>,
    pub der: CertificateDer<'static>,
}

impl TestCa {
    pub fn new() -> TestCa {
        let key = KeyPair::generate().unwrap();
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.distinguished_name.push(rcgen::DnType::CommonName, "proxy test upstream CA");
        let cert = params.self_signed(&key).unwrap();
        TestCa { der: cert.der().clone(), issuer: Issuer::new(params, key) }
    }

    /// A TLS server config for these names.
    pub fn server(&self, names: &[&str]) -> Arc<rustls::ServerConfig> {
        let key = KeyPair::generate().unwrap();
        let params = CertificateParams::new(names.iter().map(|s| s.to_string()).collect::<Vec<_>>()).unwrap();
        let cert = params.signed_by(&key, &self.issuer).unwrap();
        let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der()));
        let cfg = rustls::ServerConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_no_client_auth()
            .with_single_cert(vec![cert.der().clone()], key)
            .unwrap();
        Arc::new(cfg)
    }
}

/// The proxy under test, on 127.0.0.1 in this namespace.
pub struct Harness {
    pub addr: SocketAddr,
    pub policy: watch::Sender<Arc<Policy>>,
    pub decisions: mpsc::Receiver<Decision>,
    /// The sandbox CA's PEM, as the supervisor would write it into the sandbox.
    pub ca_file: PathBuf,
    pub ca_der: CertificateDer<'static>,
    pub proxy: Proxy,
    task: tokio::task::JoinHandle<()>,
    _dir: TempDir,
}

#[derive(Default)]
pub struct Options {
    pub names: HashMap<String, Vec<IpAddr>>,
    pub roots: Vec<CertificateDer<'static>>,
    pub virtual_hosts: VirtualHosts,
    pub limits: Limits,
    pub pids: Option<fn() -> std::io::Result<Vec<u32>>>,
    /// Identify by reading /proc/net/tcp instead of sock_diag.
    pub tcp_tables: bool,
    /// Upstream roots to use instead of `roots` (say, still loading).
    pub upstream: Option<openshell_proxy::UpstreamRoots>,
}

impl Harness {
    pub async fn start(policy: &str, opts: Options) -> Harness {
        let policy = Policy::from_yaml(policy).expect("test policy");
        let (policy_tx, policy_rx) = watch::channel(Arc::new(policy));
        let (tx, rx) = mpsc::channel(1024);
        let ca = SandboxCa::generate("proxy test sandbox").unwrap();
        let dir = TempDir::new();
        let ca_file = dir.0.join("sandbox-ca.pem");
        std::fs::write(&ca_file, ca.cert_pem()).unwrap();
        let ca_der = ca.cert_der().clone();
        let mut roots = RootCertStore::empty();
        for r in opts.roots {
            roots.add(r).unwrap();
        }
        let pids = opts.pids.unwrap_or(own_family);
        let mut identity = ProcIdentity::new("/proc/self/net/tcp", "/proc/self/net/tcp6", pids);
        if !opts.tcp_tables {
            identity = identity.with_sock_diag("/proc/self/ns/net").expect("sock_diag");
        }
        let config = Config {
            policy: policy_rx,
            identity: Arc::new(identity),
            resolver: Resolver::fixed(opts.names),
            ca,
            upstream_roots: opts.upstream.unwrap_or_else(|| openshell_proxy::UpstreamRoots::ready(roots)),
            blocked: Vec::new(),
            virtual_hosts: opts.virtual_hosts,
            decisions: tx,
            limits: opts.limits,
        };
        let proxy = Proxy::new(config).unwrap();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let p = proxy.clone();
        let task = tokio::spawn(async move {
            p.serve(listener).await.expect("proxy serve");
        });
        Harness { addr, policy: policy_tx, decisions: rx, ca_file, ca_der, proxy, task, _dir: dir }
    }

    pub fn proxy_url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Every decision sent so far.
    pub fn drain(&mut self) -> Vec<Decision> {
        let mut out = Vec::new();
        while let Ok(d) = self.decisions.try_recv() {
            out.push(d);
        }
        out
    }
}

impl Drop for Harness {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// The candidate processes of the tests: this process and its descendants (the clients it
/// runs and theirs), as a sandbox's cgroup would list its own. Found by each process's parent
/// in `/proc/<pid>/stat` (`/proc/self/task/*/children` may miss a child that is being made).
pub fn own_family() -> std::io::Result<Vec<u32>> {
    let mut parent_of = HashMap::new();
    for p in procfs::process::all_processes().map_err(std::io::Error::other)? {
        // Processes that exit while being listed are no candidates.
        if let Ok(stat) = p.and_then(|p| p.stat()) {
            parent_of.insert(stat.pid as u32, stat.ppid as u32);
        }
    }
    let mut pids = vec![std::process::id()];
    let mut i = 0;
    while i < pids.len() {
        let parent = pids[i];
        pids.extend(parent_of.iter().filter(|(_, pp)| **pp == parent).map(|(pid, _)| *pid));
        i += 1;
    }
    Ok(pids)
}

pub struct TempDir(pub PathBuf);

impl TempDir {
    pub fn new() -> TempDir {
        static N: AtomicU32 = AtomicU32::new(0);
        let p = std::env::temp_dir().join(format!(
            "osproxy-test-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir_all(&p).unwrap();
        TempDir(p)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// What a client got: the HTTP status (0 when the request never got an answer), the status
/// of a refused CONNECT, and the body.
#[derive(Debug)]
pub struct Outcome {
    pub status: u16,
    pub connect: u16,
    pub body: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Client {
    Curl,
    Python,
}

pub const PYTHON: &str = "/usr/bin/python3";

/// The program's path as the kernel reports it (`/proc/<pid>/exe`).
pub fn exe_of(client: Client) -> String {
    let p = match client {
        Client::Curl => curl_path(),
        Client::Python => PYTHON.to_string(),
    };
    std::fs::canonicalize(p).unwrap().to_str().unwrap().to_string()
}

fn curl_path() -> String {
    let out = Command::new("sh").args(["-c", "command -v curl"]).output().expect("sh");
    let p = String::from_utf8_lossy(&out.stdout).trim().to_string();
    assert!(!p.is_empty(), "curl is required: apt-get install -y curl");
    p
}

const PY_CLIENT: &str = r#"
import sys, ssl, urllib.request, urllib.error
proxy, method, url, ca = sys.argv[1:5]
ctx = ssl.create_default_context(cafile=ca)
opener = urllib.request.build_opener(
    urllib.request.ProxyHandler({"http": proxy, "https": proxy}),
    urllib.request.HTTPSHandler(context=ctx))
data = b"x" if method in ("POST", "PUT", "PATCH") else None
req = urllib.request.Request(url, method=method, data=data)
connect = 0
try:
    r = opener.open(req, timeout=10)
    status, body = r.status, r.read()
except urllib.error.HTTPError as e:
    status, body = e.code, e.read()
except urllib.error.URLError as e:
    reason = str(e.reason)
    status, body = 0, reason.encode()
    if "Tunnel connection failed: " in reason:
        connect = int(reason.split("Tunnel connection failed: ")[1].split()[0])
sys.stdout.write(f"{status} {connect}\n")
sys.stdout.flush()
sys.stdout.buffer.write(body)
"#;

/// Runs one request through the proxy with a real client program.
pub async fn request(client: Client, h: &Harness, method: &str, url: &str) -> Outcome {
    request_with(client, h, method, url, &[]).await
}

pub async fn request_with(client: Client, h: &Harness, method: &str, url: &str, extra: &[&str]) -> Outcome {
    let mut cmd = match client {
        Client::Curl => {
            let mut c = tokio::process::Command::new(curl_path());
            c.args(["-sS", "--max-time", "10", "--path-as-is", "--noproxy", "", "-x", &h.proxy_url()]);
            c.arg("--cacert").arg(&h.ca_file);
            // HEAD with -X would wait for a body that never comes.
            if method == "HEAD" {
                c.arg("-I");
            } else {
                c.args(["-X", method]);
            }
            c.args(["-o", "-", "-w", "\n%{http_code} %{http_connect}"]);
            if matches!(method, "POST" | "PUT" | "PATCH") {
                c.args(["--data", "x"]);
            }
            c.args(extra).arg(url);
            c
        }
        Client::Python => {
            let mut c = tokio::process::Command::new(PYTHON);
            c.args(["-c", PY_CLIENT, &h.proxy_url(), method, url]).arg(&h.ca_file);
            c
        }
    };
    for v in
        ["http_proxy", "https_proxy", "HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "all_proxy", "NO_PROXY", "no_proxy"]
    {
        cmd.env_remove(v);
    }
    cmd.kill_on_drop(true);
    let out =
        tokio::time::timeout(Duration::from_secs(20), cmd.output()).await.expect("client timed out").expect("client");
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    match client {
        Client::Curl => {
            let (body, codes) = text.rsplit_once('\n').unwrap_or(("", &text));
            let mut it = codes.split_whitespace().map(|c| c.parse().unwrap_or(0));
            Outcome { status: it.next().unwrap_or(0), connect: it.next().unwrap_or(0), body: body.to_string() }
        }
        Client::Python => {
            let (codes, body) = text.split_once('\n').unwrap_or((&text, ""));
            let mut it = codes.split_whitespace().map(|c| c.parse().unwrap_or(0));
            Outcome { status: it.next().unwrap_or(0), connect: it.next().unwrap_or(0), body: body.to_string() }
        }
    }
}

/// Collects decisions until one arrives or the wait ends (decisions are sent before the
/// response, so one is normally already there).
pub async fn decisions_after(h: &mut Harness) -> Vec<Decision> {
    let mut out = h.drain();
    if out.is_empty() {
        if let Ok(Some(d)) = tokio::time::timeout(Duration::from_secs(2), h.decisions.recv()).await {
            out.push(d);
        }
        out.extend(h.drain());
    }
    out
}
