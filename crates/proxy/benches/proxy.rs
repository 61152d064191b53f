//! Per-request latency through the proxy against a direct connection to the same test host,
//! measured in the same run: `cargo bench -p openshell-proxy` (release). Prints p50, p99 and
//! the p50 overhead for plain HTTP (kept-alive and a new connection each time), a raw CONNECT
//! tunnel, and an inspected HTTPS tunnel; then what identifying a caller costs, by
//! `/proc/net/tcp` and by sock_diag (the proxy here uses sock_diag).

#[path = "../tests/common/mod.rs"]
mod common;

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use common::{Harness, Options, TestCa, TestHost, serve_echo};
use http_body_util::{BodyExt, Empty};
use hyper::client::conn::http1::{SendRequest, handshake};
use hyper_util::rt::TokioIo;
use rustls::pki_types::ServerName;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;

const N: usize = 2000;
const WARMUP: usize = 100;

fn own_pid() -> std::io::Result<Vec<u32>> {
    Ok(vec![std::process::id()])
}

async fn client<I>(io: I) -> SendRequest<Empty<Bytes>>
where
    I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let (sender, conn) = handshake(TokioIo::new(io)).await.expect("handshake");
    tokio::spawn(conn);
    sender
}

async fn get(sender: &mut SendRequest<Empty<Bytes>>, uri: &str, host: &str) {
    sender.ready().await.expect("ready");
    let req = hyper::Request::get(uri).header("host", host).body(Empty::new()).unwrap();
    let resp = sender.send_request(req).await.expect("response");
    assert_eq!(resp.status(), 200, "{uri}");
    resp.into_body().collect().await.expect("body");
}

type Kept = Arc<tokio::sync::Mutex<SendRequest<Empty<Bytes>>>>;

/// A request on a kept-alive connection (the same uncontended lock on both sides).
fn kept(sender: &Kept, uri: &'static str) -> impl std::future::Future<Output = ()> + use<> {
    let sender = sender.clone();
    async move { get(&mut *sender.lock().await, uri, "bench.test").await }
}

fn keep(s: SendRequest<Empty<Bytes>>) -> Kept {
    Arc::new(tokio::sync::Mutex::new(s))
}

/// Reads the CONNECT answer with hyper's client (no hand parsing) and returns the tunnel.
async fn connect_tunnel(proxy: SocketAddr, authority: &str) -> hyper::upgrade::Upgraded {
    let stream = TcpStream::connect(proxy).await.unwrap();
    stream.set_nodelay(true).unwrap();
    let (mut sender, conn) = handshake::<_, Empty<Bytes>>(TokioIo::new(stream)).await.unwrap();
    tokio::spawn(conn.with_upgrades());
    let req = hyper::Request::connect(authority).header("host", authority).body(Empty::new()).unwrap();
    let resp = sender.send_request(req).await.unwrap();
    assert_eq!(resp.status(), 200, "CONNECT {authority}");
    hyper::upgrade::on(resp).await.unwrap()
}

struct Stats {
    p50: Duration,
    p99: Duration,
}

fn stats(mut v: Vec<Duration>) -> Stats {
    v.sort();
    Stats { p50: v[v.len() / 2], p99: v[v.len() * 99 / 100] }
}

async fn measure<F, Fut>(mut f: F) -> Stats
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    for _ in 0..WARMUP {
        f().await;
    }
    let mut v = Vec::with_capacity(N);
    for _ in 0..N {
        let t = Instant::now();
        f().await;
        v.push(t.elapsed());
    }
    stats(v)
}

fn report(name: &str, direct: &Stats, proxied: &Stats) {
    let us = |d: Duration| d.as_secs_f64() * 1e6;
    println!(
        "{name:<34} direct p50 {:>7.1} us p99 {:>7.1} us | proxy p50 {:>7.1} us p99 {:>7.1} us | p50 overhead {:>7.1} us, ratio {:.2}",
        us(direct.p50),
        us(direct.p99),
        us(proxied.p50),
        us(proxied.p99),
        us(proxied.p50) - us(direct.p50),
        us(proxied.p50) / us(direct.p50),
    );
}

fn main() {
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    rt.block_on(run());
}

async fn run() {
    let host = TestHost::new("pb", 19);
    let ca = TestCa::new();
    let tls_server = ca.server(&["bench.test"]);
    serve_echo(host.bind(80), None);
    serve_echo(host.bind(8080), None);
    serve_echo(host.bind(443), Some(tls_server));
    let me = std::fs::read_link("/proc/self/exe").unwrap().to_str().unwrap().to_string();
    let policy = format!(
        r#"
version: 1
network_policies:
  bench:
    endpoints:
      - {{ host: bench.test, port: 80, protocol: rest, enforcement: enforce, rules: [{{ allow: {{ method: GET, path: "/x/**" }} }}] }}
      - {{ host: bench.test, port: 443, protocol: rest, enforcement: enforce, rules: [{{ allow: {{ method: GET, path: "/x/**" }} }}] }}
      - {{ host: bench.test, port: 8080 }}
    binaries: [{{ path: "{me}" }}]
"#
    );
    let names = HashMap::from([("bench.test".to_string(), vec![IpAddr::V4(host.ip)])]);
    let opts = Options { names, roots: vec![ca.der.clone()], pids: Some(own_pid), ..Options::default() };
    let mut h = Harness::start(&policy, opts).await;
    let direct80 = SocketAddr::new(IpAddr::V4(host.ip), 80);
    let direct8080 = SocketAddr::new(IpAddr::V4(host.ip), 8080);
    let direct443 = SocketAddr::new(IpAddr::V4(host.ip), 443);
    println!("{N} requests each after {WARMUP} warm-up, one at a time, 2 worker threads");

    // Plain HTTP, one kept-alive connection.
    let d = keep(client(TcpStream::connect(direct80).await.unwrap()).await);
    let direct = measure(|| kept(&d, "/x/1")).await;
    let p = keep(client(TcpStream::connect(h.addr).await.unwrap()).await);
    let proxied = measure(|| kept(&p, "http://bench.test/x/1")).await;
    report("plain HTTP, kept-alive", &direct, &proxied);

    // Plain HTTP, a new connection per request (identification, resolution, upstream connect).
    let direct = measure(|| async {
        let mut c = client(TcpStream::connect(direct80).await.unwrap()).await;
        get(&mut c, "/x/1", "bench.test").await;
    })
    .await;
    let proxy = h.addr;
    let proxied = measure(|| async move {
        let mut c = client(TcpStream::connect(proxy).await.unwrap()).await;
        get(&mut c, "http://bench.test/x/1", "bench.test").await;
    })
    .await;
    report("plain HTTP, new connection", &direct, &proxied);

    // Raw CONNECT tunnel (L4 rule), a new tunnel per request.
    let direct = measure(|| async {
        let mut c = client(TcpStream::connect(direct8080).await.unwrap()).await;
        get(&mut c, "/x/1", "bench.test").await;
    })
    .await;
    let proxied = measure(|| async move {
        let mut c = client(TokioIo::new(connect_tunnel(proxy, "bench.test:8080").await)).await;
        get(&mut c, "/x/1", "bench.test").await;
    })
    .await;
    report("CONNECT raw tunnel, new tunnel", &direct, &proxied);

    // Inspected HTTPS: one TLS connection kept alive, each request decided in the tunnel.
    let sandbox_ca = h.ca_der.clone();
    let tls_to = |root: rustls::pki_types::CertificateDer<'static>| {
        let mut roots = rustls::RootCertStore::empty();
        roots.add(root).unwrap();
        let cfg = rustls::ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_root_certificates(roots)
            .with_no_client_auth();
        tokio_rustls::TlsConnector::from(Arc::new(cfg))
    };
    let name = ServerName::try_from("bench.test").unwrap();
    let tcp = TcpStream::connect(direct443).await.unwrap();
    tcp.set_nodelay(true).unwrap();
    let d = keep(client(tls_to(ca.der.clone()).connect(name.clone(), tcp).await.unwrap()).await);
    let direct = measure(|| kept(&d, "/x/1")).await;
    let tunnel = TokioIo::new(connect_tunnel(proxy, "bench.test:443").await);
    let p = keep(client(tls_to(sandbox_ca).connect(name, tunnel).await.unwrap()).await);
    let proxied = measure(|| kept(&p, "/x/1")).await;
    report("CONNECT inspected HTTPS, kept-alive", &direct, &proxied);

    // Where a new connection's time goes: identifying its program from /proc.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let _c = std::net::TcpStream::connect(listener.local_addr().unwrap()).unwrap();
    let (server, peer) = listener.accept().unwrap();
    let local = server.local_addr().unwrap();
    let rows = std::fs::read_to_string("/proc/self/net/tcp").map(|t| t.lines().count() - 1).unwrap_or(0);
    let tables = openshell_proxy::ProcIdentity::new("/proc/self/net/tcp", "/proc/self/net/tcp6", own_pid);
    let netlink = tables.clone().with_sock_diag("/proc/self/ns/net").unwrap();
    for (name, id) in [("/proc/net/tcp", tables), ("sock_diag", netlink)] {
        let mut v = Vec::with_capacity(200);
        for _ in 0..200 {
            let t = Instant::now();
            id.identify_now(peer, local).unwrap();
            v.push(t.elapsed());
        }
        let s = stats(v);
        println!(
            "identify by {name:<14} ({rows} rows in this namespace's tcp table): p50 {:>8.1} us p99 {:>8.1} us",
            s.p50.as_secs_f64() * 1e6,
            s.p99.as_secs_f64() * 1e6
        );
    }

    let decisions = h.drain().len();
    println!("decisions delivered: {decisions}, dropped (channel full): {}", h.proxy.dropped_decisions());
}
