//! Changes pushed, not polled: the database NOTIFYs at commit, each gateway holds one LISTEN
//! session and pushes a policy write down the supervisor's stream (WatchPolicy) and wakes
//! proposal long-polls (WaitOwnProposal). A write reaches a running sandbox's proxy through
//! whichever gateway it was made on, and a change committed while a gateway's LISTEN session
//! was gone still arrives once it is back.
//!
//! The proxy is watched from inside: the agent asks `http://api.test/x` (a test host) through
//! it every 100 ms and keeps the last answer in its working directory.

use std::time::{Duration, Instant};

use openshell_e2e::*;
use openshell_proto::v1 as pb;
use openshell_proto::v1::policies_client::PoliciesClient;
use openshell_proto::v1::supervisor_client::SupervisorClient;
use openshell_testhost::TestHost;

const FS: &str = "filesystem_policy:
  include_workdir: true
  read_only: [/usr, /lib, /proc, /dev/urandom, /etc]
  read_write: [/tmp, /dev/null]
";

/// The agent: the proxy's last answer for api.test, in `code` (replaced whole each time).
const PROBE: &str = r#"
cd "$HOME"
while :; do
  c=$(curl -s -o /dev/null -w '%{http_code}' -m 2 http://api.test/x)
  echo "$c" > code.new && mv code.new code
  sleep 0.1
done
"#;

/// Allows curl to api.test:80, or nothing.
fn policy(allow: bool) -> String {
    let mut p = format!("version: 1\n{FS}");
    if allow {
        p.push_str("network_policies:\n  api:\n    endpoints: [{host: api.test, port: 80}]\n    binaries: [{path: /usr/bin/curl}]\n");
    }
    p
}

/// A test host serving api.test, and a gateway (process driver) whose proxies resolve it there.
async fn setup(tag: &str) -> (TestHost, openshell_testhost::Server, Harness) {
    let host = TestHost::new(tag, 19);
    let server = host.spawn("python3", &["-c", OK_SERVER_PY]);
    let up = eventually(Duration::from_secs(10), || async {
        std::net::TcpStream::connect_timeout(&(host.ip, 80).into(), Duration::from_millis(200)).is_ok()
    })
    .await;
    assert!(up, "the test host's server did not start");
    let ip = std::net::IpAddr::V4(host.ip);
    let h = Harness::process(|o| o.proxy_resolve = vec![("api.test".into(), ip)]).await;
    (host, server, h)
}

/// A running probe sandbox, denied at first; its working directory.
async fn probe(h: &Harness, a: &Api, name: &str) -> std::path::PathBuf {
    let req = pb::CreateSandboxRequest {
        name: name.into(),
        command: vec!["/bin/bash".into(), "-c".into(), PROBE.into()],
        policy_yaml: policy(false),
        ..Default::default()
    };
    let s = a.sandboxes().create_sandbox(a.req(req)).await.unwrap().into_inner().sandbox.unwrap();
    let work = h.workdir(&s.id);
    let denied = eventually(Duration::from_secs(30), || async { code(&work) == "403" }).await;
    assert!(denied, "the probe never saw its proxy refuse: {:?}\n{}", code(&work), log(h, &s.id));
    work
}

fn code(work: &std::path::Path) -> String {
    std::fs::read_to_string(work.join("code")).unwrap_or_default().trim().to_string()
}

fn log(h: &Harness, id: &str) -> String {
    std::fs::read_to_string(h.supervisor_log(id)).unwrap_or_default()
}

async fn set_policy(endpoint: &str, token: &str, sandbox: &str, allow: bool) {
    let a = Api::connect(endpoint, Some(token)).await;
    let req = a.req(pb::SetPolicyRequest { sandbox: sandbox.into(), policy_yaml: policy(allow) });
    PoliciesClient::new(a.channel()).set_policy(req).await.unwrap();
}

/// Waits (bounded, not timed) until the probe sees `want` from its proxy.
async fn until(work: &std::path::Path, want: &str, within: Duration) -> bool {
    eventually(within, || async { code(work) == want }).await
}

#[tokio::test]
async fn a_policy_write_reaches_the_running_proxy_by_push() {
    let (_host, _server, h) = setup("pu").await;
    let a = h.admin().await;
    let work = probe(&h, &a, "probe").await;
    let id = a.get("probe").await.unwrap().id;

    // Nothing polls (a_change_while_the_listen_session_is_gone_is_not_lost shows nothing
    // arrives unpushed): the supervisor holds one open stream, and a write is pushed at commit.
    let written = Instant::now();
    set_policy(&h.endpoint, &h.admin_token, "probe", true).await;
    assert!(until(&work, "200", Duration::from_secs(20)).await, "{:?}\n{}", code(&work), log(&h, &id));
    println!("policy write -> the proxy allows: {:?} (includes the probe's 100 ms period)", written.elapsed());
    assert!(log(&h, &id).contains("policy changed; the proxy enforces the new version"), "{}", log(&h, &id));

    // And back: a narrowing write is pushed the same way.
    set_policy(&h.endpoint, &h.admin_token, "probe", false).await;
    assert!(until(&work, "403", Duration::from_secs(20)).await, "{:?}\n{}", code(&work), log(&h, &id));
}

#[tokio::test]
async fn a_write_through_another_gateway_on_the_same_database_reaches_the_proxy() {
    let (_host, _server, mut h) = setup("pt").await;
    let a = h.admin().await;
    let work = probe(&h, &a, "probe").await;
    let id = a.get("probe").await.unwrap().id;

    // A second gateway on the same database: its own state directory and runner, no
    // sandboxes of its own (the null driver). The probe's supervisor stays connected to the
    // first.
    let state_b = TempDir::new("openshell-e2e-b");
    let mut opts = options(&h.db.url, &state_b.0);
    opts.driver = openshell_gateway::startup::DriverKind::Null;
    let mut b = Some(openshell_gateway::startup::start(&opts).await.expect("the second gateway starts"));
    let b_endpoint = b.as_ref().unwrap().endpoint.clone();

    set_policy(&b_endpoint, &h.admin_token, "probe", true).await;
    assert!(until(&work, "200", Duration::from_secs(20)).await, "{:?}\n{}", code(&work), log(&h, &id));
    set_policy(&b_endpoint, &h.admin_token, "probe", false).await;
    assert!(until(&work, "403", Duration::from_secs(20)).await, "{:?}\n{}", code(&work), log(&h, &id));

    if let Some(b) = b.take() {
        b.shutdown().await.unwrap();
    }
    h.shutdown().await;
}

#[tokio::test]
async fn a_change_while_the_listen_session_is_gone_is_not_lost() {
    let (_host, _server, h) = setup("pl").await;
    let a = h.admin().await;
    let work = probe(&h, &a, "probe").await;
    let id = a.get("probe").await.unwrap().id;
    let sql = h.sql().await;
    let listeners = "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'openshell-gateway listen' \
                     AND datname = current_database()";
    assert!(eventually(Duration::from_secs(10), || async { count(&sql, listeners).await == 1 }).await);

    // The LISTEN session is killed, and kept from coming back (no new session may connect to
    // the database; the pool's open ones go on) while a write commits: no gateway hears it.
    // (From another database: a session cannot disallow its own.)
    let server_url = format!("{}/postgres", h.db.url.rsplit_once('/').unwrap().0);
    let (server, conn) = tokio_postgres::connect(&server_url, tokio_postgres::NoTls).await.unwrap();
    tokio::spawn(conn);
    server.batch_execute(&format!("ALTER DATABASE \"{}\" WITH ALLOW_CONNECTIONS false", h.db.name)).await.unwrap();
    let killed: i64 = sql
        .query_one(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity \
             WHERE application_name = 'openshell-gateway listen' AND datname = current_database()",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(killed, 1);
    set_policy(&h.endpoint, &h.admin_token, "probe", true).await;
    // Unheard, so not pushed yet (the proof that the session's return, not the write's own
    // notification, carries it below).
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(code(&work), "403", "pushed with no LISTEN session: something else carried it");

    // Once the session is back the gateway treats everything as changed: the write arrives.
    server.batch_execute(&format!("ALTER DATABASE \"{}\" WITH ALLOW_CONNECTIONS true", h.db.name)).await.unwrap();
    assert!(until(&work, "200", Duration::from_secs(30)).await, "{:?}\n{}", code(&work), log(&h, &id));
    assert_eq!(count(&sql, listeners).await, 1, "one LISTEN session again");
}

#[tokio::test]
async fn a_proposal_long_poll_wakes_on_the_decision_and_at_the_expiry() {
    let h = Harness::fake().await;
    let admin = h.admin().await;
    let req = pb::CreateSandboxRequest {
        name: "asker".into(),
        command: vec!["sleep".into(), "600".into()],
        policy_yaml: policy(false),
        ..Default::default()
    };
    let s = admin.sandboxes().create_sandbox(admin.req(req)).await.unwrap().into_inner().sandbox.unwrap();
    let me = h.as_sandbox(&s.id, None).await;
    let sup = || SupervisorClient::new(me.channel());
    let propose = |key: &'static str| {
        let req = me.req(pb::ProposePolicyRequest {
            document: format!(
                "reason: to test waiting\nnetwork_policies:\n  {key}:\n    endpoints: [{{host: {key}.test, port: 80}}]\n    binaries: [{{path: /usr/bin/curl}}]\n"
            ),
            program: String::new(),
        });
        let mut c = sup();
        async move { c.propose_policy(req).await.unwrap().into_inner() }
    };
    let wait = |id: i64, timeout_ms: u32| {
        let req = me.req(pb::WaitOwnProposalRequest { id, timeout_ms });
        let mut c = sup();
        async move { c.wait_own_proposal(req).await.map(|r| r.into_inner()) }
    };

    // Woken by the approval's notification, well before its 30 s.
    let p = propose("one").await;
    let waiting = tokio::spawn(wait(p.id, 30_000));
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(!waiting.is_finished(), "the wait returned while the proposal was pending");
    let approve = pb::ApproveProposalRequest { id: p.id };
    PoliciesClient::new(admin.channel()).approve_proposal(admin.req(approve)).await.unwrap();
    let r = tokio::time::timeout(Duration::from_secs(20), waiting).await.expect("woken").unwrap().unwrap();
    assert_eq!((r.proposal.as_ref().unwrap().state.as_str(), r.timed_out), ("approved", false), "{r:?}");

    // Still pending at its timeout: returned as it is, timed out.
    let p = propose("two").await;
    let r = wait(p.id, 300).await.unwrap();
    assert_eq!((r.proposal.as_ref().unwrap().state.as_str(), r.timed_out), ("pending", true), "{r:?}");
    let r = wait(p.id, 0).await.unwrap();
    assert!(r.timed_out, "{r:?}");
    let s = refused(wait(p.id, 60_001).await, "INVALID_ARGUMENT");
    assert!(s.message().contains("timeout_ms"), "{s:?}");

    // Its expiry announces itself with no write (reading expires it): the wait wakes then.
    // The proposal is made to expire in a second (as the owner, past its fixed-row trigger).
    let sql = h.sql().await;
    sql.batch_execute(&format!(
        "ALTER TABLE policy_proposals DISABLE TRIGGER policy_proposals_decide_once;
         UPDATE policy_proposals SET expires_at = clock_timestamp() + interval '1 second' WHERE id = {};
         ALTER TABLE policy_proposals ENABLE TRIGGER policy_proposals_decide_once;",
        p.id
    ))
    .await
    .unwrap();
    let r = tokio::time::timeout(Duration::from_secs(20), wait(p.id, 30_000)).await.expect("woken").unwrap();
    assert_eq!((r.proposal.as_ref().unwrap().state.as_str(), r.timed_out), ("expired", false), "{r:?}");

    // Another sandbox's proposal is not found, waiting or not.
    let other = admin.root("other", None).await.unwrap();
    let them = h.as_sandbox(&other.id, None).await;
    let req = them.req(pb::WaitOwnProposalRequest { id: p.id, timeout_ms: 100 });
    refused(SupervisorClient::new(them.channel()).wait_own_proposal(req).await, "NOT_FOUND");
}
