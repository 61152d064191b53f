//! The proxy end to end: real clients (curl and Python's urllib, two different programs
//! identified from the kernel) through the in-process proxy to servers on test hosts in
//! network namespaces of their own.

mod common;

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

use common::{Client, Harness, Options, TestCa, TestHost, decisions_after, exe_of, request, serve_echo};
use openshell_policy::Policy;
use openshell_proxy::{Reason, Verdict, VirtualHosts};

fn policy(python: &str) -> String {
    format!(
        r#"
version: 1
network_policies:
  web:
    endpoints:
      - host: web.test
        port: 80
        protocol: rest
        enforcement: enforce
        rules:
          - allow: {{ method: GET, path: "/public/**" }}
          - allow: {{ method: POST, path: "/submit" }}
        deny_rules: [{{ method: "*", path: "/public/secret" }}]
      - host: secure.test
        port: 443
        protocol: rest
        enforcement: enforce
        rules:
          - allow: {{ method: GET, path: "/repos/**" }}
      - {{ host: raw.test, port: 8080 }}
      - {{ host: raw.test, port: 8081 }}
      - {{ host: meta.test, port: 80 }}
      - {{ host: local.test, port: 80 }}
      - {{ host: 127.0.0.1, port: 80 }}
      - {{ host: mapped.test, port: 80 }}
    binaries: [{{ path: {curl} }}]
  py:
    endpoints:
      - {{ host: pyweb.test, port: 80, protocol: rest, enforcement: enforce, access: read-only }}
      - {{ host: secure.test, port: 443, protocol: rest, enforcement: enforce, access: read-only }}
    binaries: [{{ path: {python} }}]
"#,
        curl = exe_of(Client::Curl),
    )
}

struct Rig {
    h: Harness,
    seen_plain: common::Seen,
    seen_tls: common::Seen,
    seen_raw: common::Seen,
    _host: TestHost,
}

/// One test host serving plain HTTP on 80, HTTPS on 443 (certificate from a test CA) and
/// plain HTTP on 8080; names pointed at it, plus names pointing at blocked addresses.
async fn rig(opts: Options) -> Rig {
    let host = TestHost::new("px", 18);
    let ca = TestCa::new();
    let seen_plain = serve_echo(host.bind(80), None);
    let seen_tls = serve_echo(host.bind(443), Some(ca.server(&["secure.test", "web.test"])));
    let seen_raw = serve_echo(host.bind(8080), None);
    let at = IpAddr::V4(host.ip);
    let mut names: HashMap<String, Vec<IpAddr>> = ["web.test", "secure.test", "raw.test", "pyweb.test", "other.test"]
        .into_iter()
        .map(|n| (n.to_string(), vec![at]))
        .collect();
    names.insert("meta.test".into(), vec!["169.254.169.254".parse().unwrap()]);
    names.insert("local.test".into(), vec!["127.0.0.1".parse().unwrap()]);
    names.insert("mapped.test".into(), vec!["::ffff:127.0.0.1".parse().unwrap()]);
    let opts = Options { names, roots: vec![ca.der.clone()], ..opts };
    let h = Harness::start(&policy(&exe_of(Client::Python)), opts).await;
    Rig { h, seen_plain, seen_tls, seen_raw, _host: host }
}

/// What one row expects.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Want {
    /// 200 from the server, which saw exactly this request.
    Ok,
    /// 403 naming this missing piece, inside the HTTP exchange.
    Denied(&'static str),
    /// The CONNECT itself was refused with 403 naming this missing piece.
    ConnectDenied(&'static str),
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn table_program_host_port_method_path() {
    table(Options::default()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn table_with_identity_from_proc_net_tcp() {
    table(Options { tcp_tables: true, ..Options::default() }).await;
}

async fn table(opts: Options) {
    let mut r = rig(opts).await;
    use Client::{Curl, Python};
    use Want::*;
    let rows: &[(Client, &str, &str, Want)] = &[
        // plain HTTP, absolute form
        (Curl, "GET", "http://web.test/public/a", Ok),
        (Curl, "GET", "http://web.test/public/x/y?q=secretvalue", Ok),
        (Curl, "HEAD", "http://web.test/public/a", Ok),
        (Curl, "GET", "http://web.test/public/secret", Denied("method_path")),
        (Curl, "POST", "http://web.test/submit", Ok),
        (Curl, "DELETE", "http://web.test/submit", Denied("method_path")),
        (Curl, "GET", "http://web.test/private", Denied("method_path")),
        (Curl, "GET", "http://web.test/public/../private", Denied("path_form")),
        (Curl, "GET", "http://web.test/public//secret", Denied("path_form")),
        (Curl, "GET", "http://web.test/public/%73ecret", Denied("method_path")),
        (Curl, "GET", "http://web.test:8080/public/a", Denied("port")),
        (Curl, "GET", "http://other.test/public/a", Denied("host")),
        (Curl, "GET", "http://pyweb.test/x", Denied("host")),
        (Python, "GET", "http://web.test/public/a", Denied("host")),
        (Python, "GET", "http://pyweb.test/x", Ok),
        (Python, "POST", "http://pyweb.test/x", Denied("method_path")),
        (Python, "GET", "http://pyweb.test:8080/x", Denied("port")),
        // HTTPS: terminated with the sandbox CA, decided per request, forwarded over TLS
        (Curl, "GET", "https://secure.test/repos/a/b", Ok),
        (Curl, "GET", "https://secure.test/admin", Denied("method_path")),
        (Curl, "POST", "https://secure.test/repos/a", Denied("method_path")),
        (Python, "GET", "https://secure.test/repos/a", Ok),
        (Python, "PUT", "https://secure.test/repos/a", Denied("method_path")),
        (Curl, "GET", "https://web.test/public/a", ConnectDenied("port")),
        (Curl, "GET", "https://other.test/", ConnectDenied("host")),
        (Python, "GET", "https://web.test/public/a", ConnectDenied("host")),
        // never reachable, whatever the policy says
        (Curl, "GET", "http://meta.test/", Denied("blocked_address")),
        (Curl, "GET", "http://local.test/", Denied("blocked_address")),
        (Curl, "GET", "http://127.0.0.1/", Denied("blocked_address")),
        (Curl, "GET", "http://mapped.test/", Denied("blocked_address")),
    ];
    for &(client, method, url, want) in rows {
        let before = (r.seen_plain.lock().unwrap().len(), r.seen_tls.lock().unwrap().len());
        let out = request(client, &r.h, method, url).await;
        let ctx = format!("{client:?} {method} {url}: {out:?}");
        let decisions = decisions_after(&mut r.h).await;
        let after = (r.seen_plain.lock().unwrap().len(), r.seen_tls.lock().unwrap().len());
        let last = decisions.last().unwrap_or_else(|| panic!("no decision for {ctx}"));
        assert_eq!(last.program.as_deref(), Some(exe_of(client).as_str()), "{ctx}: {last:?}");
        match want {
            Ok => {
                assert_eq!(out.status, 200, "{ctx}");
                assert!(matches!(last.verdict, Verdict::Allow { .. }), "{ctx}: {last:?}");
                assert_eq!(last.method.as_deref(), Some(method), "{ctx}");
                if method != "HEAD" {
                    assert!(out.body.starts_with(&format!("echo {method} /")), "{ctx}");
                    assert!(out.body.contains("proxy_headers=0"), "{ctx}");
                }
                // The HTTPS server saw HTTPS requests (over TLS the proxy verified), the
                // plain one the plain ones.
                let want_after =
                    if url.starts_with("https") { (before.0, before.1 + 1) } else { (before.0 + 1, before.1) };
                assert_eq!(after, want_after, "the server saw it: {ctx}");
            }
            Denied(code) => {
                assert_eq!(out.status, 403, "{ctx}");
                let body: serde_json::Value = serde_json::from_str(&out.body).unwrap_or_else(|_| panic!("{ctx}"));
                assert_eq!(body["error"], "denied", "{ctx}");
                assert_eq!(body["missing"], code, "{ctx}");
                assert_eq!(body["program"], exe_of(client).as_str(), "{ctx}");
                assert_eq!(body["method"], method, "{ctx}");
                assert!(body["host"].is_string() && body["port"].is_u64() && body["path"].is_string(), "{ctx}");
                assert!(!body["reason"].as_str().unwrap_or("").is_empty(), "{ctx}");
                assert!(!out.body.contains("secretvalue"), "{ctx}");
                match &last.verdict {
                    Verdict::Deny { reason } => assert_eq!(reason.code(), code, "{ctx}"),
                    v => panic!("{ctx}: {v:?}"),
                }
                assert_eq!(after, before, "the server saw nothing: {ctx}");
            }
            ConnectDenied(code) => {
                assert_eq!(out.connect, 403, "{ctx}");
                match &last.verdict {
                    Verdict::Deny { reason } => assert_eq!(reason.code(), code, "{ctx}"),
                    v => panic!("{ctx}: {v:?}"),
                }
                assert_eq!(last.method, None, "a CONNECT decision is for raw traffic: {ctx}");
                assert_eq!(after, before, "the server saw nothing: {ctx}");
            }
        }
    }
    // Hot reload with real clients: without its rule, Python is listed nowhere.
    let without_py = policy(&exe_of(Python)).split("\n  py:").next().unwrap().to_string();
    r.h.policy.send(Arc::new(Policy::from_yaml(&without_py).unwrap())).unwrap();
    let out = request(Python, &r.h, "GET", "http://pyweb.test/x").await;
    assert_eq!(out.status, 403, "{out:?}");
    let body: serde_json::Value = serde_json::from_str(&out.body).unwrap();
    assert_eq!(body["missing"], "program", "{out:?}");
    let out = request(Python, &r.h, "GET", "https://secure.test/repos/a").await;
    assert_eq!(out.connect, 403, "{out:?}");
    let d = decisions_after(&mut r.h).await;
    assert_eq!(d.len(), 2, "{d:?}");
    assert!(d.iter().all(|d| d.verdict == Verdict::Deny { reason: Reason::Program }), "{d:?}");
    assert_eq!(r.h.proxy.dropped_decisions(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_403_body_names_what_was_missing() {
    let mut r = rig(Options::default()).await;
    let out = request(Client::Curl, &r.h, "DELETE", "http://web.test/submit?token=hunter2").await;
    let body: serde_json::Value = serde_json::from_str(&out.body).unwrap();
    assert_eq!(out.status, 403);
    assert_eq!(body["error"], "denied");
    assert_eq!(body["program"], exe_of(Client::Curl).as_str());
    assert_eq!(body["host"], "web.test");
    assert_eq!(body["port"], 80);
    assert_eq!(body["method"], "DELETE");
    assert_eq!(body["path"], "/submit");
    assert_eq!(body["missing"], "method_path");
    assert!(!out.body.contains("hunter2"), "query values stay out of refusals");
    let d = decisions_after(&mut r.h).await;
    assert_eq!(d.len(), 1);
    assert_eq!(d[0].verdict, Verdict::Deny { reason: Reason::MethodPath });
    assert_eq!(d[0].path.as_deref(), Some("/submit"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn raw_tunnel_where_l4_allows() {
    let mut r = rig(Options::default()).await;
    // -p makes curl CONNECT even for http://, so the bytes inside are opaque to the proxy.
    let out = common::request_with(Client::Curl, &r.h, "GET", "http://raw.test:8080/anything", &["-p"]).await;
    assert_eq!(out.status, 200, "{out:?}");
    assert!(out.body.starts_with("echo GET /anything"), "{out:?}");
    assert_eq!(r.seen_raw.lock().unwrap().len(), 1);
    let d = decisions_after(&mut r.h).await;
    assert_eq!(d.len(), 1, "{d:?}");
    assert!(matches!(&d[0].verdict, Verdict::Allow { rule } if rule.rule == "web"));
    assert_eq!((d[0].host.as_str(), d[0].port, d[0].method.as_deref()), ("raw.test", 8080, None));
    // CONNECT to a host allowed only for inspected HTTP, with plain HTTP inside: decided
    // request by request like absolute-form requests.
    let ok = common::request_with(Client::Curl, &r.h, "GET", "http://web.test:80/public/a", &["-p"]).await;
    assert_eq!(ok.status, 200, "{ok:?}");
    let no = common::request_with(Client::Curl, &r.h, "GET", "http://web.test:80/private", &["-p"]).await;
    assert_eq!(no.status, 403, "{no:?}");
    let d = decisions_after(&mut r.h).await;
    assert_eq!(d.len(), 2, "{d:?}");
    assert_eq!(d[1].verdict, Verdict::Deny { reason: Reason::MethodPath });
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tunnel_carries_requests_for_its_own_host_only() {
    let mut r = rig(Options::default()).await;
    // Allowed tunnel to web.test:80, but the request inside names other.test (a shared
    // front end would route it there).
    let out = common::request_with(
        Client::Curl,
        &r.h,
        "GET",
        "http://web.test:80/public/a",
        &["-p", "-H", "Host: other.test"],
    )
    .await;
    assert_eq!(out.status, 403, "{out:?} {:?}", r.h.drain());
    let body: serde_json::Value = serde_json::from_str(&out.body).unwrap();
    assert_eq!(body["missing"], "host_mismatch");
    let d = decisions_after(&mut r.h).await;
    assert_eq!(d.last().map(|d| &d.verdict), Some(&Verdict::Deny { reason: Reason::HostMismatch }));
    assert!(r.seen_plain.lock().unwrap().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn proxy_credentials_and_hop_by_hop_headers_never_reach_upstream() {
    let r = rig(Options::default()).await;
    let extra = ["--proxy-user", "agent:hunter2", "-H", "Proxy-Foo: 1", "-H", "Connection: X-Drop", "-H", "X-Drop: 1"];
    let out = common::request_with(Client::Curl, &r.h, "GET", "http://web.test/public/a", &extra).await;
    assert_eq!(out.status, 200, "{out:?}");
    assert!(out.body.contains("proxy_headers=0"), "{out:?}");
    assert!(out.body.contains("host=web.test "), "{out:?}");
    let out = common::request_with(Client::Curl, &r.h, "GET", "https://secure.test/repos/a", &extra).await;
    assert_eq!(out.status, 200, "{out:?}");
    assert!(out.body.contains("proxy_headers=0"), "{out:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_allowed_destination_that_does_not_answer_is_a_502() {
    let mut r = rig(Options::default()).await;
    // Nothing listens on 8081.
    let out = common::request_with(Client::Curl, &r.h, "GET", "http://raw.test:8081/", &["-p"]).await;
    assert_eq!(out.connect, 502, "{out:?}");
    let d = decisions_after(&mut r.h).await;
    assert!(matches!(&d[..], [d] if matches!(d.verdict, Verdict::Allow { .. })), "{d:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_beyond_the_cap_wait() {
    use tokio::io::AsyncWriteExt;
    let limits = openshell_proxy::Limits { max_connections: 1, ..Default::default() };
    let r = rig(Options { limits, ..Options::default() }).await;
    let mut hog = tokio::net::TcpStream::connect(r.h.addr).await.unwrap();
    hog.write_all(b"GET http://web.test/public/a HTTP/1.1\r\nHost: web.test\r\n\r\n").await.unwrap();
    // The one slot is held by `hog`'s kept-alive connection: curl waits in the backlog.
    let out = common::request_with(Client::Curl, &r.h, "GET", "http://web.test/public/b", &["--max-time", "2"]).await;
    assert_eq!(out.status, 0, "{out:?}");
    drop(hog);
    let out = request(Client::Curl, &r.h, "GET", "http://web.test/public/b").await;
    assert_eq!(out.status, 200, "{out:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hot_reload_applies_to_the_next_request_on_the_same_connection() {
    use http_body_util::{BodyExt, Empty};
    let r = rig(Options::default()).await;
    // This test process is the client: allow its own program first.
    let me = std::fs::read_link("/proc/self/exe").unwrap().to_str().unwrap().to_string();
    let allow = format!(
        "version: 1\nnetwork_policies:\n  me:\n    endpoints:\n      - {{ host: web.test, port: 80, protocol: rest, enforcement: enforce, access: read-only }}\n    binaries: [{{ path: \"{me}\" }}]\n"
    );
    r.h.policy.send(Arc::new(Policy::from_yaml(&allow).unwrap())).unwrap();
    let stream = tokio::net::TcpStream::connect(r.h.addr).await.unwrap();
    let (mut sender, conn) =
        hyper::client::conn::http1::handshake::<_, Empty<bytes::Bytes>>(hyper_util::rt::TokioIo::new(stream))
            .await
            .unwrap();
    tokio::spawn(conn);
    let get = || hyper::Request::get("http://web.test/public/a").header("host", "web.test").body(Empty::new()).unwrap();
    let first = sender.send_request(get()).await.unwrap();
    assert_eq!(first.status(), 200);
    first.into_body().collect().await.unwrap();
    // Narrow: the same program may no longer reach web.test.
    r.h.policy.send(Arc::new(Policy::from_yaml("version: 1\n").unwrap())).unwrap();
    sender.ready().await.unwrap();
    let second = sender.send_request(get()).await.unwrap();
    assert_eq!(second.status(), 403);
    let body = second.into_body().collect().await.unwrap().to_bytes();
    let body: serde_json::Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(body["missing"], "program");
    assert_eq!(body["program"], me.as_str());
    assert_eq!(r.seen_plain.lock().unwrap().len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unidentified_callers_are_refused() {
    fn nobody() -> std::io::Result<Vec<u32>> {
        Ok(Vec::new())
    }
    let mut r = rig(Options { pids: Some(nobody), ..Options::default() }).await;
    let out = request(Client::Curl, &r.h, "GET", "http://web.test/public/a").await;
    assert_eq!(out.status, 403, "{out:?}");
    let body: serde_json::Value = serde_json::from_str(&out.body).unwrap();
    assert_eq!(body["missing"], "identity");
    assert_eq!(body["program"], serde_json::Value::Null);
    let d = decisions_after(&mut r.h).await;
    assert!(matches!(&d[0].verdict, Verdict::Deny { reason: Reason::Identity(_) }), "{d:?}");
    assert!(r.seen_plain.lock().unwrap().is_empty());
}

/// A door of the test's own: answers with the program, the URI as given and the body's size.
struct EchoDoor {
    max_body: usize,
}

impl openshell_proxy::VirtualHost for EchoDoor {
    fn max_body(&self) -> usize {
        self.max_body
    }

    fn serve(
        &self,
        caller: openshell_proxy::Caller,
        req: hyper::Request<bytes::Bytes>,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = hyper::Response<openshell_proxy::Body>> + Send>> {
        use http_body_util::{BodyExt, Full};
        let text = format!("door {} {} {}", caller.program, req.uri(), req.body().len());
        Box::pin(async move {
            hyper::Response::new(Full::new(bytes::Bytes::from(text)).map_err(|never| match never {}).boxed_unsync())
        })
    }
}

/// Sends `bytes` from this process and reads until the proxy closes: (status, body).
async fn raw(h: &Harness, bytes: &[u8]) -> (u16, String) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = tokio::net::TcpStream::connect(h.addr).await.unwrap();
    s.write_all(bytes).await.unwrap();
    let mut out = Vec::new();
    tokio::time::timeout(Duration::from_secs(10), s.read_to_end(&mut out)).await.expect("the proxy answered").unwrap();
    let text = String::from_utf8_lossy(&out).to_string();
    let status = text.split(' ').nth(1).and_then(|c| c.parse().ok()).unwrap_or(0);
    let body = text.split_once("\r\n\r\n").map(|(_, b)| b.to_string()).unwrap_or_default();
    (status, body)
}

/// `request` inside a `CONNECT openshell.local:80` from this process: (status, body).
async fn tunneled(h: &Harness, request: &str) -> (u16, String) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = tokio::net::TcpStream::connect(h.addr).await.unwrap();
    s.write_all(b"CONNECT openshell.local:80 HTTP/1.1\r\nHost: openshell.local:80\r\n\r\n").await.unwrap();
    let mut head = Vec::new();
    while !head.ends_with(b"\r\n\r\n") {
        let mut b = [0u8; 1];
        assert_eq!(s.read(&mut b).await.unwrap(), 1, "{}", String::from_utf8_lossy(&head));
        head.push(b[0]);
    }
    assert!(head.starts_with(b"HTTP/1.1 200"), "{}", String::from_utf8_lossy(&head));
    s.write_all(request.as_bytes()).await.unwrap();
    let mut out = Vec::new();
    tokio::time::timeout(Duration::from_secs(10), s.read_to_end(&mut out)).await.expect("an answer").unwrap();
    let text = String::from_utf8_lossy(&out).to_string();
    let status = text.split(' ').nth(1).and_then(|c| c.parse().ok()).unwrap_or(0);
    (status, text.split_once("\r\n\r\n").map(|(_, b)| b.to_string()).unwrap_or_default())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn virtual_hosts_answer_only_as_themselves_never_to_dns() {
    let vh = VirtualHosts { openshell: Some(Arc::new(EchoDoor { max_body: 1000 })), policy: None };
    let limits = openshell_proxy::Limits { body_timeout: Duration::from_millis(500), ..Default::default() };
    let mut r = rig(Options { virtual_hosts: vh, limits, ..Options::default() }).await;
    let out = request(Client::Python, &r.h, "POST", "http://openshell.local/mcp").await;
    assert_eq!(out.status, 200, "{out:?}");
    assert_eq!(out.body, format!("door {} /mcp 1", exe_of(Client::Python)));
    // curl's sockets are inheritable: the door takes none (policy.local would).
    let out = request(Client::Curl, &r.h, "POST", "http://openshell.local/mcp").await;
    assert_eq!(out.status, 403, "{out:?}");
    let body: serde_json::Value = serde_json::from_str(&out.body).unwrap();
    assert_eq!((&body["missing"], &body["program"]), (&"identity".into(), &exe_of(Client::Curl).into()), "{body}");
    assert!(body["reason"].as_str().unwrap().contains("close-on-exec"), "{body}");
    let out = request(Client::Curl, &r.h, "GET", "http://policy.local/v1/denials").await;
    assert_eq!(out.status, 404, "no handler: {out:?}");
    let d = decisions_after(&mut r.h).await;
    let verdicts: Vec<(Option<String>, bool)> =
        d.iter().map(|d| (d.program.clone(), d.verdict == Verdict::VirtualHost)).collect();
    assert_eq!(verdicts, [(Some(exe_of(Client::Python)), true), (Some(exe_of(Client::Curl)), false)], "{d:?}");

    // A tunnel only to the exact name on port 80 (Node's fetch tunnels http:// too), with
    // each request inside held to the same form.
    for target in ["openshell.local:443", "policy.local:443", "OPENSHELL.LOCAL:80", "openshell.local.:80"] {
        let (status, body) = raw(&r.h, format!("CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n\r\n").as_bytes()).await;
        assert_eq!(status, 400, "CONNECT {target}: {body}");
        assert!(body.contains("invalid_") && body.contains(&format!("CONNECT {target}")), "{body}");
    }
    let me = std::fs::read_link("/proc/self/exe").unwrap().to_str().unwrap().to_string();
    let inside = |host: &str, path: &str| {
        format!("POST {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\nContent-Length: 2\r\n\r\nab")
    };
    assert_eq!(tunneled(&r.h, &inside("openshell.local", "/mcp")).await, (200, format!("door {me} /mcp 2")));
    for (host, path, error) in [
        ("OPENSHELL.LOCAL", "/mcp", "invalid_openshell_local_scheme"),
        ("openshell.local:8080", "/mcp", "invalid_openshell_local_scheme"),
        ("openshell.local", "/%6dcp", "invalid_openshell_local_path"),
    ] {
        let (status, body) = tunneled(&r.h, &inside(host, path)).await;
        assert_eq!(status, 400, "{host} {path}: {body}");
        assert!(body.contains(error), "{host} {path}: {body}");
    }
    // Every other spelling of a name, a port, a scheme or a path: 400 saying what is accepted.
    let door = "Use http://openshell.local/mcp only";
    let policy = "Use http://policy.local only";
    for (url, error, accepts) in [
        ("http://openshell.local:8080/mcp", "invalid_openshell_local_scheme", door),
        ("http://OPENSHELL.LOCAL/mcp", "invalid_openshell_local_scheme", door),
        ("http://openshell.local./mcp", "invalid_openshell_local_scheme", door),
        ("http://openshell.local/%6dcp", "invalid_openshell_local_path", door),
        ("http://openshell.local/./mcp", "invalid_openshell_local_path", door),
        ("http://openshell.local//mcp", "invalid_openshell_local_path", door),
        ("http://policy.local:8080/v1/policy/current", "invalid_policy_local_scheme", policy),
        ("https://policy.local/v1/policy/current", "invalid_policy_local_scheme", policy),
        ("ftp://policy.local/resource", "invalid_policy_local_scheme", policy),
        ("http://POLICY.LOCAL/v1/policy/current", "invalid_policy_local_scheme", policy),
        ("http://policy.local/v1/%70olicy/current", "invalid_policy_local_path", policy),
    ] {
        let (status, body) =
            raw(&r.h, format!("POST {url} HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\n\r\nx").as_bytes()).await;
        assert_eq!(status, 400, "{url}: {body}");
        let v: serde_json::Value = serde_json::from_str(&body).unwrap_or_else(|e| panic!("{url}: {e}: {body}"));
        assert_eq!((v["error"].as_str(), v["detail"].as_str()), (Some(error), Some(accepts)), "{url}: {body}");
        assert!(!v["reason"].as_str().unwrap_or("").is_empty(), "{url}: {body}");
    }
    // Bodies over the host's limit, declared or chunked: 413 naming it; a stalled one 408.
    let big = "x".repeat(1001);
    let declared = format!("POST http://openshell.local/mcp HTTP/1.1\r\nHost: x\r\nContent-Length: 1001\r\n\r\n{big}");
    let chunked = format!(
        "POST http://openshell.local/mcp HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n3e9\r\n{big}\r\n0\r\n\r\n"
    );
    for request in [declared, chunked] {
        let (status, body) = raw(&r.h, request.as_bytes()).await;
        assert_eq!(status, 413, "{body}");
        let v: serde_json::Value = serde_json::from_str(&body).unwrap();
        assert_eq!(v["max_bytes"], 1000, "{body}");
    }
    // A client waiting for 100 Continue is refused before it sends the body.
    let expect =
        b"POST http://openshell.local/mcp HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Length: 1001\r\n\r\n";
    assert_eq!(raw(&r.h, expect).await.0, 413);
    let (status, body) =
        raw(&r.h, b"POST http://openshell.local/mcp HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\nxy").await;
    assert_eq!(status, 408, "{body}");
    // At the limit it is served, to this process (its sockets close on exec).
    let at = format!(
        "POST http://openshell.local:80/mcp HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Length: 1000\r\n\r\n{}",
        &big[..1000]
    );
    assert_eq!(raw(&r.h, at.as_bytes()).await, (200, format!("door {me} /mcp 1000")));
    let d = r.h.drain();
    assert_eq!(d.len(), 2, "only the served requests are decisions: {d:?}");
    assert!(r.seen_plain.lock().unwrap().is_empty(), "nothing went to the network");
}

/// A Python client on one keep-alive connection: a request, then a child holding the same
/// socket, then a fresh connection of its own.
const HANDED_ON: &str = r#"
import http.client, json, subprocess, sys
host, port = sys.argv[1], int(sys.argv[2])
def get(c):
    c.request("GET", "http://pyweb.test/a")
    r = c.getresponse()
    return [r.status, r.getheader("connection"), r.read().decode()]
out = []
c = http.client.HTTPConnection(host, port, timeout=10)
out.append(get(c))
child = subprocess.Popen(["sleep", "30"], pass_fds=[c.sock.fileno()])
out.append(get(c))
child.kill(); child.wait()
c.close()
c = http.client.HTTPConnection(host, port, timeout=10)
out.append(get(c))
print(json.dumps(out))
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_request_is_the_program_s_that_holds_the_connection_then() {
    let mut r = rig(Options::default()).await;
    let out = tokio::process::Command::new(common::PYTHON)
        .args(["-c", HANDED_ON, "127.0.0.1", &r.h.addr.port().to_string()])
        .output()
        .await
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}{}", String::from_utf8_lossy(&out.stderr));
    let got: Vec<(u16, Option<String>, String)> = serde_json::from_str(text.trim()).unwrap();
    assert_eq!(got[0].0, 200, "{got:?}");
    // The second request on that connection: two processes hold it, so it is no one's.
    let (status, connection, body) = &got[1];
    assert_eq!((*status, connection.as_deref()), (403, Some("close")), "{got:?}");
    let body: serde_json::Value = serde_json::from_str(body).unwrap();
    let sleep = std::fs::canonicalize("/bin/sleep").unwrap();
    assert_eq!(body["missing"], "identity", "{body}");
    assert_eq!(body["program"], sleep.to_str().unwrap(), "names the other holder: {body}");
    assert!(body["reason"].as_str().unwrap().contains(": 2 processes hold the connection: "), "{body}");
    assert_eq!(got[2].0, 200, "its own connection again: {got:?}");
    assert_eq!(r.seen_plain.lock().unwrap().as_slice(), ["GET /a", "GET /a"]);
    let d = decisions_after(&mut r.h).await;
    assert!(d.iter().any(|d| matches!(&d.verdict, Verdict::Deny { reason: Reason::Identity(_) })), "{d:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn oversized_headers_are_refused() {
    let r = rig(Options::default()).await;
    let big = format!("X-Big: {}", "a".repeat(70 * 1024));
    let out = common::request_with(Client::Curl, &r.h, "GET", "http://web.test/public/a", &["-H", &big]).await;
    assert_eq!(out.status, 431, "{out:?}");
    assert!(r.seen_plain.lock().unwrap().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stalled_clients_are_cut_off() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let limits = openshell_proxy::Limits {
        header_read_timeout: Duration::from_millis(500),
        idle_timeout: Duration::from_secs(1),
        ..Default::default()
    };
    let r = rig(Options { limits, ..Options::default() }).await;
    let mut s = tokio::net::TcpStream::connect(r.h.addr).await.unwrap();
    s.write_all(b"GET http://web.test/public/a HTTP/1.1\r\nHost: web.test\r\n").await.unwrap();
    let mut buf = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(5), s.read_to_end(&mut buf)).await;
    assert!(read.is_ok(), "the proxy kept a half-sent request open");
    assert!(r.seen_plain.lock().unwrap().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn smuggled_and_nested_requests_never_reach_upstream() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    // The proxy closes each connection once it has been idle for a second.
    let limits = openshell_proxy::Limits { idle_timeout: Duration::from_secs(1), ..Default::default() };
    let r = rig(Options { limits, ..Options::default() }).await;
    let me = std::fs::read_link("/proc/self/exe").unwrap().to_str().unwrap().to_string();
    let allow = format!(
        "version: 1\nnetwork_policies:\n  me:\n    endpoints:\n      - {{ host: web.test, port: 80, protocol: rest, enforcement: enforce, rules: [{{ allow: {{ method: GET, path: \"/public/**\" }} }}] }}\n    binaries: [{{ path: \"{me}\" }}]\n"
    );
    r.h.policy.send(Arc::new(Policy::from_yaml(&allow).unwrap())).unwrap();
    // An attacker writes raw bytes: pipelined requests, a body framed two ways hiding a
    // request the policy refuses, then a CONNECT
    // inside a tunnel.
    let attempts: [&[u8]; 3] = [
        // Pipelined: each request is decided on its own.
        b"GET http://web.test/public/a HTTP/1.1\r\nHost: web.test\r\n\r\nGET http://web.test/private HTTP/1.1\r\nHost: web.test\r\n\r\n",
        b"GET http://web.test/public/a HTTP/1.1\r\nHost: web.test\r\nContent-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\nGET /private HTTP/1.1\r\nHost: web.test\r\n\r\n",
        b"CONNECT web.test:80 HTTP/1.1\r\nHost: web.test:80\r\n\r\nCONNECT other.test:80 HTTP/1.1\r\nHost: other.test:80\r\n\r\n",
    ];
    for bytes in attempts {
        let mut s = tokio::net::TcpStream::connect(r.h.addr).await.unwrap();
        // No half-close: a proxy that stops reading at EOF would hide a second request.
        s.write_all(bytes).await.unwrap();
        let mut out = Vec::new();
        let _ = tokio::time::timeout(Duration::from_secs(5), s.read_to_end(&mut out)).await;
        let text = String::from_utf8_lossy(&out);
        assert!(!text.contains("echo GET /private") && !text.contains("other.test"), "{text}");
    }
    let seen = r.seen_plain.lock().unwrap().clone();
    assert!(seen.iter().all(|l| l == "GET /public/a"), "{seen:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upstream_certificates_are_verified() {
    // A server whose CA is not in upstream_roots.
    let host = TestHost::new("px", 18);
    let stranger = TestCa::new();
    let seen = serve_echo(host.bind(443), Some(stranger.server(&["secure.test"])));
    let names = HashMap::from([("secure.test".to_string(), vec![IpAddr::V4(host.ip)])]);
    let policy = policy(&exe_of(Client::Python));
    let mut h = Harness::start(&policy, Options { names, ..Options::default() }).await;
    let out = request(Client::Curl, &h, "GET", "https://secure.test/repos/a").await;
    assert_eq!(out.status, 502, "{out:?}");
    assert!(out.body.contains("TLS"), "{out:?}");
    assert!(seen.lock().unwrap().is_empty());
    let d = decisions_after(&mut h).await;
    assert!(matches!(&d[..], [d] if matches!(d.verdict, Verdict::Allow { .. })), "{d:?}");
}

/// Upstream roots read after the proxy starts (the supervisor reads the host's store once its
/// sandbox is READY): a handshake waits for them, within its time bound, and one whose roots
/// failed to load is refused with the reason, reaching nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upstream_handshake_waits_for_loading_roots_within_its_bound_and_a_failed_load_refuses() {
    let host = TestHost::new("pl", 18);
    let ca = TestCa::new();
    let seen = serve_echo(host.bind(443), Some(ca.server(&["secure.test"])));
    let names = HashMap::from([("secure.test".to_string(), vec![IpAddr::V4(host.ip)])]);
    let policy = policy(&exe_of(Client::Python));

    let (release, loaded) = tokio::sync::oneshot::channel::<()>();
    let der = ca.der.clone();
    let upstream = openshell_proxy::UpstreamRoots::loading(async move {
        let _ = loaded.await;
        let mut roots = rustls::RootCertStore::empty();
        roots.add(der).map_err(|e| e.to_string())?;
        Ok(roots)
    });
    let opts = Options { names: names.clone(), upstream: Some(upstream), ..Options::default() };
    let h = Harness::start(&policy, opts).await;
    let asked = tokio::spawn(async move {
        let out = request(Client::Curl, &h, "GET", "https://secure.test/repos/a").await;
        (out, h)
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!asked.is_finished() && seen.lock().unwrap().is_empty(), "the handshake went on without its roots");
    release.send(()).unwrap();
    let (out, _h) = asked.await.unwrap();
    assert_eq!(out.status, 200, "{out:?}");
    assert_eq!(seen.lock().unwrap().len(), 1);

    let failed = openshell_proxy::UpstreamRoots::loading(async { Err("no store here".to_string()) });
    let h = Harness::start(&policy, Options { names, upstream: Some(failed), ..Options::default() }).await;
    let out = request(Client::Curl, &h, "GET", "https://secure.test/repos/a").await;
    assert_eq!(out.status, 502, "{out:?}");
    assert!(out.body.contains("the host's trust store: no store here"), "{out:?}");
    assert_eq!(seen.lock().unwrap().len(), 1, "a refused handshake reached the server");

    // Roots that never come: the handshake's time bound holds the wait too.
    let never = openshell_proxy::UpstreamRoots::loading(std::future::pending());
    let limits = openshell_proxy::Limits { tls_handshake_timeout: Duration::from_millis(300), ..Default::default() };
    let names = HashMap::from([("secure.test".to_string(), vec![IpAddr::V4(host.ip)])]);
    let h = Harness::start(&policy, Options { names, upstream: Some(never), limits, ..Options::default() }).await;
    let out =
        tokio::time::timeout(Duration::from_secs(10), request(Client::Curl, &h, "GET", "https://secure.test/repos/a"))
            .await
            .expect("the proxy answered within its handshake bound");
    assert!(out.status >= 500 && out.body.contains("timed out"), "{out:?}");
    assert_eq!(seen.lock().unwrap().len(), 1, "a timed-out handshake reached the server");
}

/// `allowed_ips` holds on the addresses the proxy resolved and connects to, never on the name;
/// a name no rule could allow is refused before it is looked up.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn allowed_ips_hold_on_the_resolved_address() {
    let host = TestHost::new("pi", 18);
    let seen = serve_echo(host.bind(80), None);
    let seen_8080 = serve_echo(host.bind(8080), None);
    let at = IpAddr::V4(host.ip);
    let names: HashMap<String, Vec<IpAddr>> = [
        ("inside.test", vec![at]),
        ("outside.test", vec![at]),
        ("any.test", vec![at]),
        ("mixed.test", vec!["203.0.113.9".parse().unwrap(), at]),
        ("loop.test", vec!["127.0.0.1".parse().unwrap()]),
    ]
    .into_iter()
    .map(|(n, a)| (n.to_string(), a))
    .collect();
    let policy = format!(
        r#"
version: 1
network_policies:
  ips:
    endpoints:
      - {{ host: inside.test, port: 80, allowed_ips: ["{at}/32"] }}
      - {{ host: mixed.test, port: 80, allowed_ips: ["{at}/32"] }}
      - {{ host: outside.test, port: 80, allowed_ips: [203.0.113.0/24] }}
      - {{ host: loop.test, port: 80, allowed_ips: [127.0.0.0/8] }}
      - {{ port: 8080, allowed_ips: ["{at}/30"] }}
    binaries: [{{ path: {curl} }}]
"#,
        curl = exe_of(Client::Curl),
    );
    let mut h = Harness::start(&policy, Options { names, ..Options::default() }).await;

    let ok = request(Client::Curl, &h, "GET", "http://inside.test/a").await;
    assert_eq!(ok.status, 200, "{ok:?}");
    let tunnelled = common::request_with(Client::Curl, &h, "GET", "http://inside.test/b", &["-p"]).await;
    assert_eq!(tunnelled.status, 200, "{tunnelled:?}");
    // Only the allowed address is connected to.
    let mixed = request(Client::Curl, &h, "GET", "http://mixed.test/c").await;
    assert_eq!(mixed.status, 200, "{mixed:?}");
    // A hostless rule: any name on the port, if it resolves inside.
    let hostless = request(Client::Curl, &h, "GET", "http://any.test:8080/d").await;
    assert_eq!(hostless.status, 200, "{hostless:?}");
    assert_eq!(seen.lock().unwrap().len(), 3);
    assert_eq!(seen_8080.lock().unwrap().len(), 1);
    let d = decisions_after(&mut h).await;
    assert!(d.iter().all(|d| matches!(d.verdict, Verdict::Allow { .. })), "{d:?}");

    // The name is allowed, but it resolves outside the rule's networks: over plain HTTP and
    // through CONNECT.
    let out = request(Client::Curl, &h, "GET", "http://outside.test/e").await;
    assert_eq!(out.status, 403, "{out:?}");
    assert!(out.body.contains("allowed_ips"), "{out:?}");
    let out = common::request_with(Client::Curl, &h, "GET", "http://outside.test/f", &["-p"]).await;
    assert_eq!(out.connect, 403, "{out:?}");
    // allowed_ips never open what the proxy always refuses.
    let out = request(Client::Curl, &h, "GET", "http://loop.test/g").await;
    assert_eq!(out.status, 403, "{out:?}");
    // A name no rule allows on port 80 is refused for its port (the hostless rule is for
    // 8080), not looked up: it has no answer, so a lookup would have said `resolve`.
    let out = request(Client::Curl, &h, "GET", "http://unknown.test/h").await;
    assert_eq!(out.status, 403, "{out:?}");
    assert_eq!(seen.lock().unwrap().len(), 3, "nothing refused reached the server");
    let d = decisions_after(&mut h).await;
    let reasons: Vec<&str> = d
        .iter()
        .map(|d| match &d.verdict {
            Verdict::Deny { reason } => reason.code(),
            v => panic!("{v:?}"),
        })
        .collect();
    assert_eq!(reasons, ["allowed_ips", "allowed_ips", "blocked_address", "port"], "{d:?}");
}
