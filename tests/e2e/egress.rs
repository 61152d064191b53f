//! The egress proxy from inside real sandboxes: an agent reaches exactly what its policy
//! allows, by program, host, port, method and path, over plain HTTP and over HTTPS that the
//! proxy terminates; nothing without the proxy; a policy write applies to the running agent;
//! every denial is listed. Destinations are Python servers on a test host in a network
//! namespace of the test's own; names reach them through the gateway's test-only resolver.

use std::time::Duration;

use openshell_e2e::*;
use openshell_proto::v1 as pb;
use openshell_testhost::TestHost;

const SERVER: &str = r#"
import http.server, ssl, sys, threading
class H(http.server.BaseHTTPRequestHandler):
    def reply(self):
        n = int(self.headers.get("Content-Length") or 0)
        if n:
            self.rfile.read(n)
        body = f"{self.command} {self.path}".encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    do_GET = do_POST = do_PUT = do_DELETE = reply
    def log_message(self, *a):
        pass
plain = http.server.ThreadingHTTPServer(("0.0.0.0", 80), H)
tls = http.server.ThreadingHTTPServer(("0.0.0.0", 443), H)
ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
ctx.load_cert_chain(sys.argv[1], sys.argv[2])
tls.socket = ctx.wrap_socket(tls.socket, server_side=True)
threading.Thread(target=tls.serve_forever, daemon=True).start()
plain.serve_forever()
"#;

/// [`SERVER`] on the test host's port 443 with this certificate, listening once it returns.
async fn serve_https(
    host: &TestHost,
    dir: &TempDir,
    cert: &rcgen::Certificate,
    key: &rcgen::KeyPair,
) -> openshell_testhost::Server {
    let (cert_file, key_file) = (dir.0.join("cert.pem"), dir.0.join("key.pem"));
    std::fs::write(&cert_file, cert.pem()).unwrap();
    std::fs::write(&key_file, key.serialize_pem()).unwrap();
    let server = host.spawn("python3", &["-c", SERVER, cert_file.to_str().unwrap(), key_file.to_str().unwrap()]);
    let up = eventually(Duration::from_secs(10), || async {
        std::net::TcpStream::connect_timeout(&(host.ip, 443).into(), Duration::from_millis(200)).is_ok()
    })
    .await;
    assert!(up, "the test host's server did not start");
    server
}

/// Each round prints `case code` lines: curl's and Python's view of every case.
const AGENT: &str = r#"
probe() { curl -s -o /dev/null -w '%{http_code}' -m 10 "$@"; }
pyget() { python3 -c '
import sys, urllib.request, urllib.error
try:
    print(urllib.request.urlopen(sys.argv[1], timeout=10).status)
except urllib.error.HTTPError as e:
    print(e.code)
except Exception as e:
    print("error", type(e).__name__)' "$1"; }
round() {
  echo "curl_http $(probe http://api.test/x)"
  echo "python_http $(pyget http://api.test/x)"
  echo "curl_http_other_host $(probe http://other.test/x)"
  echo "curl_http_other_port $(probe http://api.test:8080/x)"
  echo "curl_https_get $(probe https://api.test/repos/a)"
  echo "curl_https_post $(probe -X POST -d x https://api.test/repos/a)"
  echo "curl_https_other_path $(probe https://api.test/other)"
  echo "python_https_get $(pyget https://api.test/repos/a)"
  echo "curl_https_query_allowed $(probe 'https://api.test/search?q=okay')"
  echo "curl_https_query_denied $(probe 'https://api.test/search?q=nope')"
  echo "curl_without_proxy $(env -u HTTP_PROXY -u http_proxy -u ALL_PROXY -u all_proxy curl -s -o /dev/null -w '%{http_code}' -m 3 http://$TARGET/x)"
}
round > round1.txt
curl -s http://other.test/x > denied_body.json
touch done1
while [ ! -e go ]; do sleep 0.1; done
round > round2.txt
touch done2
sleep 600
"#;

const FS: &str = "filesystem_policy:
  include_workdir: true
  read_only: [/usr, /lib, /proc, /dev/urandom, /etc]
  read_write: [/tmp, /dev/null]
";

fn policy(plain_http: bool, rest_methods: &[&str]) -> String {
    let mut p = format!("version: 1\n{FS}network_policies:\n");
    if plain_http {
        p.push_str("  plain:\n    endpoints: [{host: api.test, port: 80}]\n    binaries: [{path: /usr/bin/curl}]\n");
    }
    p.push_str("  rest:\n    endpoints:\n      - host: api.test\n        port: 443\n        protocol: rest\n        enforcement: enforce\n        rules:\n");
    for m in rest_methods {
        p.push_str(&format!("          - allow: {{method: {m}, path: \"/repos/**\"}}\n"));
    }
    p.push_str("          - allow: {method: GET, path: /search, query: {q: \"ok*\"}}\n");
    p.push_str("    binaries: [{path: /usr/bin/curl}, {path: \"/usr/bin/python3*\"}]\n");
    p
}

fn results(text: &str) -> std::collections::BTreeMap<String, String> {
    text.lines().filter_map(|l| l.split_once(' ')).map(|(k, v)| (k.to_string(), v.trim().to_string())).collect()
}

#[tokio::test]
async fn the_proxy_allows_exactly_the_policy_and_follows_its_changes() {
    let host = TestHost::new("eg", 18);
    let dir = TempDir::new("openshell-egress");
    // The upstream's CA: trusted by the proxies through --proxy-extra-ca, never by the agent.
    let ca_key = rcgen::KeyPair::generate().unwrap();
    let mut ca_params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    let ca_cert = ca_params.self_signed(&ca_key).unwrap();
    let issuer = rcgen::Issuer::new(ca_params, ca_key);
    let key = rcgen::KeyPair::generate().unwrap();
    let cert = rcgen::CertificateParams::new(vec!["api.test".to_string()]).unwrap().signed_by(&key, &issuer).unwrap();
    let ca_file = dir.0.join("ca.pem");
    std::fs::write(&ca_file, ca_cert.pem()).unwrap();
    let _server = serve_https(&host, &dir, &cert, &key).await;

    let ip = std::net::IpAddr::V4(host.ip);
    let h = Harness::process(|o| {
        o.proxy_resolve = vec![("api.test".into(), ip), ("other.test".into(), ip)];
        o.proxy_extra_ca = Some(ca_file.clone());
    })
    .await;
    let a = h.admin().await;
    let script = format!("export TARGET={}; {AGENT}", host.ip);
    let req = pb::CreateSandboxRequest {
        name: "agent".into(),
        command: vec!["/bin/bash".into(), "-c".into(), script],
        policy_yaml: policy(true, &["GET"]),
        ..Default::default()
    };
    let s = a.sandboxes().create_sandbox(a.req(req)).await.unwrap().into_inner().sandbox.unwrap();
    let work = h.workdir(&s.id);
    let log = || std::fs::read_to_string(h.supervisor_log(&s.id)).unwrap_or_default();
    assert!(eventually(Duration::from_secs(60), || async { work.join("done1").exists() }).await, "{}", log());
    let first = results(&std::fs::read_to_string(work.join("round1.txt")).unwrap());
    let want = [
        ("curl_http", "200"),
        ("python_http", "403"), // another program: the plain rule lists only curl
        ("curl_http_other_host", "403"),
        ("curl_http_other_port", "403"),
        ("curl_https_get", "200"), // terminated with the sandbox CA, checked, forwarded
        ("curl_https_post", "403"),
        ("curl_https_other_path", "403"),
        ("python_https_get", "200"),
        ("curl_https_query_allowed", "200"),
        ("curl_https_query_denied", "403"),
        ("curl_without_proxy", "000"),
    ];
    for (case, code) in want {
        assert_eq!(first.get(case).map(String::as_str), Some(code), "{case}: {first:?}\n{}", log());
    }
    let body: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(work.join("denied_body.json")).unwrap()).unwrap();
    assert_eq!(body["program"], "/usr/bin/curl", "{body}");
    assert_eq!(body["host"], "other.test", "{body}");
    assert_eq!(body["port"], 80, "{body}");

    // Narrow plain HTTP away and allow POST: the running agent sees the new version.
    let policies = openshell_proto::v1::policies_client::PoliciesClient::new(a.channel());
    let write = pb::SetPolicyRequest { sandbox: "agent".into(), policy_yaml: policy(false, &["GET", "POST"]) };
    policies.clone().set_policy(a.req(write)).await.unwrap();
    tokio::time::sleep(Duration::from_millis(1200)).await;
    std::fs::write(work.join("go"), "").unwrap();
    assert!(eventually(Duration::from_secs(60), || async { work.join("done2").exists() }).await, "{}", log());
    let second = results(&std::fs::read_to_string(work.join("round2.txt")).unwrap());
    assert_eq!(second["curl_http"], "403", "{second:?}");
    assert_eq!(second["curl_https_post"], "200", "{second:?}");
    assert_eq!(second["curl_https_get"], "200", "{second:?}");

    // Every denial is listed, newest first, with the program the kernel named.
    let denials = eventually(Duration::from_secs(5), || async {
        let r = a.sandboxes().list_denials(a.req(pb::ListDenialsRequest { sandbox: "agent".into(), limit: 100 })).await;
        r.is_ok_and(|r| r.into_inner().denials.iter().any(|d| d.program.starts_with("/usr/bin/python3")))
    })
    .await;
    let list = a
        .sandboxes()
        .list_denials(a.req(pb::ListDenialsRequest { sandbox: "agent".into(), limit: 100 }))
        .await
        .unwrap()
        .into_inner()
        .denials;
    assert!(denials, "{list:?}");
    assert!(list.iter().any(|d| d.host == "other.test" && d.program == "/usr/bin/curl"), "{list:?}");
    assert!(list.iter().any(|d| d.path == "/other" && d.method == "GET"), "{list:?}");
    // Every decision, allowed or denied, is in the sandbox's supervisor log.
    let log = log();
    assert!(log.contains(" allow ") && log.contains("rule=plain"), "{log}");
    assert!(log.contains(" deny ") && log.contains("/usr/bin/python3") && log.contains("missing="), "{log}");
}

/// Every address of the gateway's host is closed to an agent, whatever its policy says: here
/// a service on the host's side of a test host's pair (one of the host's own addresses, as a
/// gateway listening on every address would be) is allowed by the policy, by name and by
/// address, and the proxy refuses both before connecting. `openshell sandbox denials` lists
/// the refusals.
#[tokio::test]
async fn the_hosts_own_addresses_are_never_reached_and_the_cli_lists_the_refusals() {
    use std::io::Write;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};
    let host = TestHost::new("eo", 18);
    let [a0, a1, a2, a3] = host.ip.octets();
    let own = std::net::Ipv4Addr::new(a0, a1, a2, a3 - 1);
    let service = std::net::TcpListener::bind((own, 0)).unwrap();
    let port = service.local_addr().unwrap().port();
    let reached = Arc::new(AtomicUsize::new(0));
    let counter = reached.clone();
    std::thread::spawn(move || {
        for mut c in service.incoming().flatten() {
            counter.fetch_add(1, Ordering::SeqCst);
            // The request's head first: closing with it unread would reset the connection.
            let mut head = std::io::BufReader::new(c.try_clone().unwrap());
            let mut line = String::new();
            while std::io::BufRead::read_line(&mut head, &mut line).is_ok_and(|n| n > 2) {
                line.clear();
            }
            let _ = c.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 7\r\nConnection: close\r\n\r\nreached");
        }
    });
    let h = Harness::process(|o| o.proxy_resolve = vec![("own.test".into(), std::net::IpAddr::V4(own))]).await;
    let a = h.admin().await;
    let policy = format!(
        "version: 1\n{FS}network_policies:\n  own:\n    endpoints: [{{host: own.test, port: {port}}}, {{host: \"{own}\", port: {port}}}]\n    binaries: [{{path: /usr/bin/curl}}]\n"
    );
    let script = format!(
        "curl -s -o by_name.txt -w '%{{http_code}}' -m 10 http://own.test:{port}/ > by_name.code; \
         curl -s -o by_address.txt -w '%{{http_code}}' -m 10 http://{own}:{port}/ > by_address.code; \
         touch done; sleep 600"
    );
    let req = pb::CreateSandboxRequest {
        name: "agent".into(),
        command: vec!["/bin/bash".into(), "-c".into(), script],
        policy_yaml: policy,
        ..Default::default()
    };
    let s = a.sandboxes().create_sandbox(a.req(req)).await.unwrap().into_inner().sandbox.unwrap();
    let work = h.workdir(&s.id);
    let log = || std::fs::read_to_string(h.supervisor_log(&s.id)).unwrap_or_default();
    assert!(eventually(Duration::from_secs(30), || async { work.join("done").exists() }).await, "{}", log());
    for probe in ["by_name", "by_address"] {
        let code = std::fs::read_to_string(work.join(format!("{probe}.code"))).unwrap();
        let body = std::fs::read_to_string(work.join(format!("{probe}.txt"))).unwrap();
        assert_eq!(code.trim(), "403", "{probe}: {body}\n{}", log());
        let body: serde_json::Value = serde_json::from_str(&body).unwrap_or_else(|_| panic!("{probe}: {body}"));
        assert_eq!(body["missing"], "blocked_address", "{probe}: {body}");
    }
    assert_eq!(reached.load(Ordering::SeqCst), 0, "the host's service was reached");

    // The CLI shows both refusals, naming the program the kernel reported (denials reach the
    // gateway in batches, at most a second apart).
    let listed = || async {
        let out = tokio::process::Command::new(bin("openshell"))
            .args(["--endpoint", &h.endpoint, "--output", "json", "sandbox", "denials", "agent"])
            .env_remove("OPENSHELL_CONFIG")
            .env("OPENSHELL_TOKEN", &h.admin_token)
            .env("HOME", &h.state.0)
            .output()
            .await
            .unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        serde_json::from_slice::<Vec<serde_json::Value>>(&out.stdout).unwrap()
    };
    let both = |rows: &[serde_json::Value]| {
        [own.to_string(), "own.test".to_string()].iter().all(|host| {
            rows.iter().any(|d| {
                d["host"] == host.as_str()
                    && d["port"] == port
                    && d["program"] == "/usr/bin/curl"
                    && d["reason"].as_str().is_some_and(|r| r.contains("never connects to"))
            })
        })
    };
    let shown = eventually(Duration::from_secs(10), || async { both(&listed().await) }).await;
    assert!(shown, "{:#?}", listed().await);
}

/// An agent that makes its first HTTPS request the moment it starts, before its supervisor
/// has read the host's trust store (read after READY), gets no unverified upstream: the
/// proxy's handshake waits for the roots, and a server no root vouches for is refused.
#[tokio::test]
async fn an_https_request_at_start_is_still_verified_upstream() {
    let host = TestHost::new("ev", 18);
    let dir = TempDir::new("openshell-egress-start");
    // Self-signed: neither the host's store nor --proxy-extra-ca trusts it.
    let key = rcgen::KeyPair::generate().unwrap();
    let cert = rcgen::CertificateParams::new(vec!["api.test".to_string()]).unwrap().self_signed(&key).unwrap();
    let _server = serve_https(&host, &dir, &cert, &key).await;

    let ip = std::net::IpAddr::V4(host.ip);
    let h = Harness::process(|o| o.proxy_resolve = vec![("api.test".into(), ip)]).await;
    let a = h.admin().await;
    let script =
        "curl -s -o body.txt -w '%{http_code}' -m 20 https://api.test/repos/a > code.txt; touch done; sleep 600";
    let req = pb::CreateSandboxRequest {
        name: "early".into(),
        command: vec!["/bin/bash".into(), "-c".into(), script.into()],
        policy_yaml: policy(false, &["GET"]),
        ..Default::default()
    };
    let s = a.sandboxes().create_sandbox(a.req(req)).await.unwrap().into_inner().sandbox.unwrap();
    let work = h.workdir(&s.id);
    let log = || std::fs::read_to_string(h.supervisor_log(&s.id)).unwrap_or_default();
    assert!(eventually(Duration::from_secs(60), || async { work.join("done").exists() }).await, "{}", log());
    let code = std::fs::read_to_string(work.join("code.txt")).unwrap();
    let body = std::fs::read_to_string(work.join("body.txt")).unwrap_or_default();
    assert_eq!(code, "502", "{body}\n{}", log());
    assert!(body.contains("TLS with api.test") && !body.contains("GET /repos/a"), "{body}");
}
