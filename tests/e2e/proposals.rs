//! The policy.local proposal flow: a sandbox proposes network rules for itself, its user
//! decides, an approval becomes the next policy version only when proved within the
//! sandbox's boundary, and the running proxy follows. Over gRPC with sandbox credentials
//! (the fake driver: nothing needs to run) and from inside real sandboxes with curl through
//! the proxy (the process driver), ending with the parent that widens itself for a child.

use std::time::{Duration, Instant};

use openshell_e2e::*;
use openshell_proto::v1 as pb;
use openshell_proto::v1::policies_client::PoliciesClient;
use openshell_proto::v1::supervisor_client::SupervisorClient;
use tonic::transport::Channel;

const FS: &str = "filesystem_policy:
  include_workdir: true
  read_only: [/usr, /lib, /proc, /dev/urandom, /etc]
  read_write: [/tmp, /dev/null]
";

/// A policy with the filesystem above and these `network_policies` entries (YAML lines).
fn policy(network: &str) -> String {
    format!("version: 1\n{FS}network_policies:\n{network}")
}

const API: &str = "  api:\n    endpoints: [{host: api.test, port: 80}]\n    binaries: [{path: /usr/bin/curl}]\n";
const EXTRA: &str = "  extra:\n    endpoints: [{host: extra.test, port: 80}]\n    binaries: [{path: /usr/bin/curl}]\n";

fn proposal_yaml(reason: &str, rules: &str) -> String {
    format!("reason: {reason}\nnetwork_policies:\n{rules}")
}

fn policies(a: &Api) -> PoliciesClient<Channel> {
    PoliciesClient::new(a.channel())
}

fn supervisor(a: &Api) -> SupervisorClient<Channel> {
    SupervisorClient::new(a.channel())
}

async fn propose(s: &Api, document: &str) -> Result<pb::Proposal, tonic::Status> {
    let req = s.req(pb::ProposePolicyRequest { document: document.into(), program: String::new() });
    Ok(supervisor(s).propose_policy(req).await?.into_inner())
}

async fn approve(a: &Api, id: i64) -> Result<pb::Proposal, tonic::Status> {
    Ok(policies(a).approve_proposal(a.req(pb::ApproveProposalRequest { id })).await?.into_inner())
}

async fn reject(a: &Api, id: i64, reason: &str) -> Result<pb::Proposal, tonic::Status> {
    let req = a.req(pb::RejectProposalRequest { id, reason: reason.into() });
    Ok(policies(a).reject_proposal(req).await?.into_inner())
}

async fn own(s: &Api, id: i64) -> Result<pb::Proposal, tonic::Status> {
    Ok(supervisor(s).get_own_proposal(s.req(pb::GetOwnProposalRequest { id })).await?.into_inner())
}

async fn list(a: &Api, sandbox: &str, state: &str) -> Result<Vec<pb::Proposal>, tonic::Status> {
    let req = a.req(pb::ListProposalsRequest { sandbox: sandbox.into(), state: state.into(), limit: 0 });
    Ok(policies(a).list_proposals(req).await?.into_inner().proposals)
}

async fn policy_of(a: &Api, sandbox: &str) -> pb::PolicyResponse {
    policies(a).get_policy(a.req(pb::GetPolicyRequest { sandbox: sandbox.into() })).await.unwrap().into_inner()
}

#[tokio::test]
async fn proposals_are_decided_by_users_and_proved_within_the_boundary() {
    let h = Harness::fake().await;
    let admin = h.admin().await;
    let req = pb::CreateSandboxRequest {
        name: "lead".into(),
        command: vec!["sleep".into(), "600".into()],
        policy_yaml: policy(API),
        grant: Some(grant(1, 2, 2)),
        ..Default::default()
    };
    let lead = admin.sandboxes().create_sandbox(admin.req(req)).await.unwrap().into_inner().sandbox.unwrap();
    let kid = admin.child("lead", "kid", false).await.unwrap();
    let lead_s = h.as_sandbox(&lead.id, None).await;
    let kid_s = h.as_sandbox(&kid.id, None).await;
    let sql = h.sql().await;

    // Bad documents name the field and why; nothing is stored.
    let bad = [
        ("", "body"),
        ("[1, 2]", "body"),
        ("{not yaml", "body"),
        ("network_policies: {}\nreason: x", "network_policies"),
        (&*proposal_yaml("\"\"", EXTRA), "reason"),
        (&*format!("{}filesystem_policy: {{read_write: [/]}}\n", proposal_yaml("x", EXTRA)), "filesystem_policy"),
        (&*proposal_yaml("x", "  wide:\n    endpoints: [{host: \"*.com\", port: 443}]\n"), "network_policies.wide"),
        (&*proposal_yaml("x", "  w:\n    endpoints: [{host: a.test, port: 80, nope: 1}]\n"), "network_policies.w"),
    ];
    for (doc, field) in &bad {
        let s = refused(propose(&lead_s, doc).await, "INVALID_ARGUMENT");
        let f = details(&s).get("field").cloned().unwrap_or_default();
        assert!(f.starts_with(field), "{doc:?}: field {f:?}, want {field}: {s:?}");
    }
    let oversize = proposal_yaml(&"y".repeat(70 * 1024), EXTRA);
    let s = refused(propose(&lead_s, &oversize).await, "INVALID_ARGUMENT");
    assert_eq!(details(&s).get("field").map(String::as_str), Some("body"), "{s:?}");
    let many: String = (0..17).map(|i| format!("  r{i}:\n    endpoints: [{{host: a.test, port: 80}}]\n")).collect();
    let s = refused(propose(&lead_s, &proposal_yaml("x", &many)).await, "INVALID_ARGUMENT");
    assert_eq!(details(&s).get("field").map(String::as_str), Some("network_policies"), "{s:?}");
    assert_eq!(count(&sql, "SELECT count(*) FROM policy_proposals").await, 0);

    // Proposing is for sandboxes, deciding for users.
    refused(propose(&admin, &proposal_yaml("x", EXTRA)).await, "NOT_ALLOWED");
    let first = propose(&lead_s, &proposal_yaml("a child needs extra.test", EXTRA)).await.unwrap();
    assert_eq!((first.state.as_str(), first.sandbox_name.as_str()), ("pending", "lead"));
    // A newer proposal for the same rule supersedes it.
    let p = propose(&lead_s, &proposal_yaml("a child needs extra.test, really", EXTRA)).await.unwrap();
    let old = own(&lead_s, first.id).await.unwrap();
    assert_eq!((old.state.as_str(), old.superseded_by, old.decided_by.as_str()), ("superseded", p.id, "system"));

    // No sandbox decides, through any method; another sandbox cannot even see it.
    for s in [&lead_s, &kid_s] {
        refused(approve(s, p.id).await, "NOT_ALLOWED");
        refused(reject(s, p.id, "mine").await, "NOT_ALLOWED");
        refused(list(s, "", "").await, "NOT_ALLOWED");
        let w = s.req(pb::SetPolicyRequest { sandbox: "lead".into(), policy_yaml: policy(&format!("{API}{EXTRA}")) });
        assert!(policies(s).set_policy(w).await.is_err(), "a sandbox widened lead's policy");
    }
    refused(own(&kid_s, p.id).await, "NOT_FOUND");
    refused(own(&lead_s, 999_999).await, "NOT_FOUND");
    let bob = h.user("bob").await;
    refused(approve(&bob, p.id).await, "NOT_FOUND");
    refused(reject(&bob, p.id, "no").await, "NOT_FOUND");
    assert!(list(&bob, "", "").await.unwrap().is_empty());
    assert_eq!(own(&lead_s, p.id).await.unwrap().state, "pending");
    assert_eq!(policy_of(&admin, "lead").await.version, 1);

    // The kid asks for the same host, which its parent lacks: refused with the
    // counterexample, and the proposal stays pending.
    let kp = propose(&kid_s, &proposal_yaml("fetch from extra.test", EXTRA)).await.unwrap();
    let s = refused(approve(&admin, kp.id).await, "POLICY_EXCEEDS_PARENT");
    assert!(s.message().contains("extra.test"), "{s:?}");
    assert!(details(&s).get("counterexample").is_some_and(|c| c.contains("extra.test")), "{s:?}");
    assert_eq!(details(&s).get("proposal").map(String::as_str), Some(kp.id.to_string().as_str()), "{s:?}");
    assert_eq!(own(&kid_s, kp.id).await.unwrap().state, "pending");
    assert_eq!(policy_of(&admin, "kid").await.version, 1);

    // The user approves the lead's: the next version is the old policy plus the rule.
    let approved = approve(&admin, p.id).await.unwrap();
    assert_eq!((approved.state.as_str(), approved.policy_version), ("approved", 2));
    assert_eq!(approved.decided_by, "user:admin");
    let now = policy_of(&admin, "lead").await;
    assert_eq!(now.version, 2);
    assert!(now.policy_yaml.contains("extra.test") && now.policy_yaml.contains("api.test"), "{}", now.policy_yaml);
    refused(approve(&admin, p.id).await, "CONFLICT");
    refused(reject(&admin, p.id, "late").await, "CONFLICT");
    // Now within the parent's boundary, the kid's own approval goes through.
    assert_eq!(approve(&admin, kp.id).await.unwrap().policy_version, 2);

    // Reject: a reason is required; the sandbox reads it.
    let other = propose(&lead_s, &proposal_yaml("and other.test", &EXTRA.replace("extra", "other"))).await.unwrap();
    let s = refused(reject(&admin, other.id, " ").await, "INVALID_ARGUMENT");
    assert_eq!(details(&s).get("field").map(String::as_str), Some("reason"));
    let r = reject(&admin, other.id, "other.test is not needed").await.unwrap();
    assert_eq!(r.state, "rejected");
    let seen = own(&lead_s, other.id).await.unwrap();
    assert_eq!((seen.state.as_str(), seen.decision_reason.as_str()), ("rejected", "other.test is not needed"));
    refused(approve(&admin, other.id).await, "CONFLICT");

    // Listing: by sandbox and state; a bad state names the field.
    let pending = list(&admin, "", "pending").await.unwrap();
    assert!(pending.is_empty(), "{pending:?}");
    let all = list(&admin, "lead", "").await.unwrap();
    let states: Vec<_> = all.iter().map(|p| p.state.as_str()).collect();
    assert_eq!(states, ["rejected", "approved", "superseded"]);
    let s = refused(list(&admin, "", "maybe").await, "INVALID_ARGUMENT");
    assert_eq!(details(&s).get("field").map(String::as_str), Some("state"));

    // Every transition is audited with its actor, and the refused approval too.
    let audit = admin.audit_of("lead").await;
    let has = |action: &str, outcome: &str, actor: &str| {
        audit.iter().any(|a| a.action == action && a.outcome == outcome && a.actor == actor)
    };
    assert!(has("proposal.create", "done", "sandbox:lead"), "{audit:#?}");
    assert!(has("proposal.supersede", "done", "sandbox:lead"), "{audit:#?}");
    assert!(has("proposal.approve", "done", "user:admin"), "{audit:#?}");
    assert!(has("proposal.approve", "refused", "user:admin"), "{audit:#?}");
    assert!(has("proposal.reject", "done", "user:admin"), "{audit:#?}");
    assert!(has("policy.set", "done", "user:admin"), "{audit:#?}");

    // The database holds the rules whoever writes: the gateway's role cannot touch the table,
    // a decision is final even for the owner, and operators read the view.
    sql.batch_execute("SET ROLE openshell_gateway").await.unwrap();
    let e = sql.execute("UPDATE policy_proposals SET state = 'pending', decided_at = NULL", &[]).await;
    assert!(format!("{:?}", e.unwrap_err()).contains("permission denied"));
    sql.batch_execute("RESET ROLE; SET ROLE openshell_owner").await.unwrap();
    let e = sql
        .execute("UPDATE policy_proposals SET decision_reason = 'changed' WHERE state = 'rejected'", &[])
        .await
        .unwrap_err();
    assert!(format!("{e:?}").contains("decision is final"), "{e:?}");
    let e = sql.execute("DELETE FROM policy_proposals", &[]).await;
    assert!(e.is_err());
    sql.batch_execute("RESET ROLE; SET ROLE openshell_operator").await.unwrap();
    let n: i64 = sql.query_one("SELECT count(*) FROM proposal_view", &[]).await.unwrap().get(0);
    assert_eq!(n, 4);
    assert!(sql.query_one("SELECT count(*) FROM policy_proposals", &[]).await.is_err());
    // The operator report, as docs/operators.md runs it.
    let (scheme, rest) = h.db.url.split_once("://").unwrap();
    let url = format!("{scheme}://openshell_operator@{}", rest.split_once('@').map_or(rest, |(_, host)| host));
    let report = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../sql/reports/proposals.sql");
    let out = tokio::process::Command::new("psql")
        .arg(&url)
        .args(["-X", "-v", "ON_ERROR_STOP=1", "-v", "root=lead", "-v", "state=rejected", "-f"])
        .arg(report)
        .output()
        .await
        .expect("psql is installed");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{}{text}", String::from_utf8_lossy(&out.stderr));
    assert!(text.contains("other.test is not needed") && text.contains("(1 row)"), "{text}");
}

/// The lead's main command: reach extra.test (refused), wait for the test's go, propose the
/// rule from inside with curl, long-poll for the decision, reach extra.test again.
const LEAD: &str = r#"
cd "$HOME"
reach() { curl -s -o /dev/null -w '%{http_code}' -m 10 http://extra.test/x; }
get() { curl -s -o "$1" -w '%{http_code}' -m 150 "${@:2}"; }
echo "before $(reach)" > reach.txt
while [ ! -e go ]; do sleep 0.1; done
get current1.json http://policy.local/v1/policy/current > current1.code
get proposal.json -X POST -H 'content-type: application/json' --data-binary "$PROPOSAL" \
  http://policy.local/v1/proposals > proposal.code
touch proposed
id=$(python3 -c 'import json; print(json.load(open("proposal.json"))["id"])')
get waited.json "http://policy.local/v1/proposals/$id/wait?timeout=120" > waited.code
touch waited
sleep 1.2
echo "after $(reach)" >> reach.txt
get current2.json http://policy.local/v1/policy/current > current2.code
touch done
sleep 600
"#;

fn read(path: &std::path::Path) -> String {
    std::fs::read_to_string(path).unwrap_or_default()
}

fn json(path: &std::path::Path) -> serde_json::Value {
    serde_json::from_str(&read(path)).unwrap_or_else(|e| panic!("{}: {e}: {}", path.display(), read(path)))
}

/// Runs the CLI without blocking the runtime the in-process gateway serves on.
async fn cli(h: &Harness, args: &[&str]) -> (i32, String) {
    let out = tokio::process::Command::new(bin("openshell"))
        .env("OPENSHELL_ENDPOINT", &h.endpoint)
        .env("OPENSHELL_TOKEN", &h.admin_token)
        .args(args)
        .output()
        .await
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr),
    )
}

#[tokio::test]
async fn a_parent_widens_itself_through_policy_local_then_creates_the_child() {
    let host = openshell_testhost::TestHost::new("pp", 19);
    let _server = host.spawn("python3", &["-c", OK_SERVER_PY]);
    let up = eventually(Duration::from_secs(10), || async {
        std::net::TcpStream::connect_timeout(&(host.ip, 80).into(), Duration::from_millis(200)).is_ok()
    })
    .await;
    assert!(up, "the test host's server did not start");
    let proxy = openshell_driver::ProxySettings {
        extra_ca: None,
        resolve: vec![("extra.test".into(), std::net::IpAddr::V4(host.ip))],
    };
    let h = Harness::process_recording_with(proxy, |_| {}).await;
    let admin = h.admin().await;
    let rule = r#"{"reason": "my child fetches from extra.test", "network_policies": {"extra": {"endpoints": [{"host": "extra.test", "port": 80}], "binaries": [{"path": "/usr/bin/curl"}]}}}"#;
    let script = format!("export PROPOSAL='{rule}'\n{LEAD}");
    let req = pb::CreateSandboxRequest {
        name: "lead".into(),
        command: vec!["/bin/bash".into(), "-c".into(), script],
        policy_yaml: policy(API),
        grant: Some(grant(1, 2, 2)),
        ..Default::default()
    };
    let lead = admin.sandboxes().create_sandbox(admin.req(req)).await.unwrap().into_inner().sandbox.unwrap();
    let work = h.workdir(&lead.id);
    let log = || read(&h.supervisor_log(&lead.id));
    assert!(eventually(Duration::from_secs(60), || async { work.join("reach.txt").exists() }).await, "{}", log());

    // The parent asks for a child that reaches a host it lacks: refused, with the counterexample.
    let lead_door = h.as_sandbox(&lead.id, Some("/usr/bin/python3")).await;
    let child = pb::CreateChildSandboxRequest {
        name: "fetcher".into(),
        kind: pb::SandboxKind::Agent as i32,
        command: vec!["sleep".into(), "600".into()],
        policy_yaml: policy(EXTRA),
        request_id: "fetcher-1".into(),
        ..Default::default()
    };
    let s = refused(lead_door.child_req(child.clone()).await, "POLICY_EXCEEDS_PARENT");
    assert!(details(&s).get("counterexample").is_some_and(|c| c.contains("extra.test")), "{s:?}");

    // It proposes that rule for itself from inside, with curl, and long-polls.
    std::fs::write(work.join("go"), "").unwrap();
    assert!(eventually(Duration::from_secs(30), || async { work.join("proposed").exists() }).await, "{}", log());
    assert_eq!(read(&work.join("current1.code")), "200");
    assert_eq!(json(&work.join("current1.json"))["version"], 1);
    assert_eq!(read(&work.join("proposal.code")), "201", "{}", read(&work.join("proposal.json")));
    let proposal = json(&work.join("proposal.json"));
    assert_eq!(proposal["state"], "pending", "{proposal}");
    let id = proposal["id"].as_i64().unwrap();

    // The user sees it and approves with the CLI; the parent's long-poll returns.
    let (code, out) =
        cli(&h, &["policy", "proposals", "--sandbox", "lead", "--state", "pending", "--output", "json"]).await;
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("my child fetches from extra.test"), "{out}");
    assert!(!work.join("waited").exists(), "the long-poll returned before a decision");
    let approved_at = Instant::now();
    let (code, out) = cli(&h, &["policy", "approve", &id.to_string()]).await;
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("approved"), "{out}");
    assert!(eventually(Duration::from_secs(10), || async { work.join("waited").exists() }).await, "{}", log());
    assert!(approved_at.elapsed() < Duration::from_secs(5), "the long-poll took {:?}", approved_at.elapsed());
    assert_eq!(read(&work.join("waited.code")), "200");
    let waited = json(&work.join("waited.json"));
    assert_eq!(
        (&waited["state"], &waited["timed_out"], &waited["policy_version"]),
        (&"approved".into(), &false.into(), &2.into()),
        "{waited}"
    );
    assert_eq!(waited["decided_by"], "user:admin");

    // The running proxy follows: extra.test is reached from inside now.
    assert!(eventually(Duration::from_secs(30), || async { work.join("done").exists() }).await, "{}", log());
    let reach = read(&work.join("reach.txt"));
    assert_eq!(reach, "before 403\nafter 200\n", "{}", log());
    assert_eq!(json(&work.join("current2.json"))["version"], 2);

    // The retried create succeeds.
    let created = lead_door.child_req(child).await.unwrap();
    assert!(!created.replayed);
    assert_eq!(created.sandbox.unwrap().parent_name, "lead");

    // The audit shows every step with its actor, in order.
    let mut audit = admin.audit_of("lead").await;
    audit.reverse();
    let steps: Vec<(String, String, String)> = audit
        .iter()
        .filter(|a| a.action.starts_with("proposal.") || a.action == "sandbox.create_child" || a.action == "policy.set")
        .map(|a| (a.action.clone(), a.outcome.clone(), a.actor.clone()))
        .collect();
    let want = [
        ("sandbox.create_child", "refused", "sandbox:lead program:/usr/bin/python3"),
        ("proposal.create", "done", "sandbox:lead program:/usr/bin/curl"),
        ("policy.set", "done", "user:admin"),
        ("proposal.approve", "done", "user:admin"),
        ("sandbox.create_child", "admitted", "sandbox:lead program:/usr/bin/python3"),
    ];
    let want: Vec<(String, String, String)> =
        want.iter().map(|(a, b, c)| (a.to_string(), b.to_string(), c.to_string())).collect();
    assert_eq!(steps, want, "{audit:#?}");
}

/// Each line: `case http_code` and the body after it, for the bad-input cases.
const PROBE: &str = r#"
cd "$HOME"
t() { name=$1; shift; code=$(curl -s -o body -w '%{http_code}' -m 30 "$@"); echo "$name $code $(tr -d '\n' < body)" >> cases.txt; }
t current_put -X PUT http://policy.local/v1/policy/current
t unknown_path http://policy.local/v1/other
t approve_path -X POST -d x http://policy.local/v1/proposals/1/approve
t bad_json -X POST -H 'content-type: application/json' -d '{"reason": ' http://policy.local/v1/proposals
t no_reason -X POST -d 'network_policies: {a: {endpoints: [{host: a.test, port: 80}]}}' http://policy.local/v1/proposals
t not_network -X POST -d 'reason: x
process: {run_as_user: "0"}' http://policy.local/v1/proposals
python3 -c 'print("reason: " + "a" * 70000)' > big
t oversize -X POST --data-binary @big http://policy.local/v1/proposals
t unknown_id http://policy.local/v1/proposals/999999
t bad_id http://policy.local/v1/proposals/abc
t wait_too_long 'http://policy.local/v1/proposals/1/wait?timeout=121'
t wait_not_number 'http://policy.local/v1/proposals/1/wait?timeout=soon'
t wait_unknown_param 'http://policy.local/v1/proposals/1/wait?timeout=1&x=2'
t denials_zero 'http://policy.local/v1/denials?last=0'
t denials_ok 'http://policy.local/v1/denials?last=5'
t propose -X POST -d 'reason: to test waiting
network_policies: {a: {endpoints: [{host: a.test, port: 80}], binaries: [{path: /usr/bin/curl}]}}' http://policy.local/v1/proposals
id=$(python3 -c 'import json; print(json.load(open("body"))["id"])')
# Four long-polls at once per sandbox; a fifth is refused.
for i in 1 2 3 4; do curl -s -o /dev/null -m 30 "http://policy.local/v1/proposals/$id/wait?timeout=4" & done
sleep 1
t fifth_wait "http://policy.local/v1/proposals/$id/wait?timeout=1"
wait
start=$(date +%s%N)
t wait_times_out "http://policy.local/v1/proposals/$id/wait?timeout=1"
echo "waited_ms $(( ($(date +%s%N) - start) / 1000000 ))" >> cases.txt
# A body that never finishes: the read times out.
python3 - >> cases.txt <<'EOF'
import os, socket, time
s = socket.create_connection(("127.0.0.1", 3128))
s.sendall(b"POST http://policy.local/v1/proposals HTTP/1.1\r\nHost: policy.local\r\nContent-Length: 100\r\n\r\nreason: x\n")
s.settimeout(30)
t = time.time()
reply = s.recv(4096).decode(errors="replace")
print("slow_body", reply.split(" ")[1] if " " in reply else "none", int(time.time() - t))
EOF
touch done
sleep 600
"#;

#[tokio::test]
async fn policy_local_bounds_and_explains_bad_input() {
    let h = Harness::process_recording().await;
    let admin = h.admin().await;
    let req = pb::CreateSandboxRequest {
        name: "probe".into(),
        command: vec!["/bin/bash".into(), "-c".into(), PROBE.into()],
        policy_yaml: policy(API),
        ..Default::default()
    };
    let s = admin.sandboxes().create_sandbox(admin.req(req)).await.unwrap().into_inner().sandbox.unwrap();
    let work = h.workdir(&s.id);
    let log = || read(&h.supervisor_log(&s.id));
    assert!(eventually(Duration::from_secs(90), || async { work.join("done").exists() }).await, "{}", log());
    let text = read(&work.join("cases.txt"));
    let cases: std::collections::HashMap<&str, (&str, &str)> = text
        .lines()
        .filter_map(|l| {
            let (name, rest) = l.split_once(' ')?;
            let (code, body) = rest.split_once(' ').unwrap_or((rest, ""));
            Some((name, (code, body)))
        })
        .collect();
    let check = |case: &str, status: &str, code: &str, field: Option<&str>| {
        let (got, body) = cases.get(case).copied().unwrap_or_else(|| panic!("{case} missing: {text}"));
        assert_eq!(got, status, "{case}: {body}");
        let v: serde_json::Value = serde_json::from_str(body).unwrap_or_else(|e| panic!("{case}: {e}: {body}"));
        assert_eq!(v["code"], code, "{case}: {body}");
        assert!(v["message"].as_str().is_some_and(|m| !m.is_empty()), "{case}: {body}");
        if let Some(f) = field {
            assert!(v["details"]["field"].as_str().is_some_and(|x| x.starts_with(f)), "{case}: {body}");
        }
    };
    check("current_put", "405", "INVALID_ARGUMENT", Some("method"));
    check("unknown_path", "404", "NOT_FOUND", None);
    check("approve_path", "404", "NOT_FOUND", None);
    check("bad_json", "400", "INVALID_ARGUMENT", Some("body"));
    check("no_reason", "400", "INVALID_ARGUMENT", Some("reason"));
    check("not_network", "400", "INVALID_ARGUMENT", Some("process"));
    check("oversize", "413", "INVALID_ARGUMENT", Some("body"));
    check("unknown_id", "404", "NOT_FOUND", None);
    check("bad_id", "400", "INVALID_ARGUMENT", Some("id"));
    check("wait_too_long", "400", "INVALID_ARGUMENT", Some("timeout"));
    check("wait_not_number", "400", "INVALID_ARGUMENT", Some("timeout"));
    check("wait_unknown_param", "400", "INVALID_ARGUMENT", Some("x"));
    check("denials_zero", "400", "INVALID_ARGUMENT", Some("last"));
    check("fifth_wait", "429", "LIMIT_REACHED", None);
    assert_eq!(cases["denials_ok"].0, "200", "{text}");
    assert_eq!(cases["propose"].0, "201", "{text}");
    let (code, body) = cases["wait_times_out"];
    assert_eq!(code, "200", "{body}");
    let v: serde_json::Value = serde_json::from_str(body).unwrap();
    assert_eq!((&v["state"], &v["timed_out"]), (&"pending".into(), &true.into()), "{body}");
    let waited: u64 = cases["waited_ms"].0.parse().unwrap();
    assert!((900..5000).contains(&waited), "waited {waited} ms for a 1 s long-poll");
    let (code, secs) = cases["slow_body"];
    assert_eq!(code, "408", "{text}");
    assert!(secs.parse::<u64>().unwrap() >= 9, "{text}");
    // Only the well-formed proposal was stored.
    assert_eq!(count(&h.sql().await, "SELECT count(*) FROM policy_proposals").await, 1);
}

#[tokio::test]
async fn concurrent_approvals_decide_once_and_never_lose_a_rule() {
    let h = Harness::fake().await;
    let admin = h.admin().await;
    let req = pb::CreateSandboxRequest {
        name: "lead".into(),
        command: vec!["sleep".into(), "600".into()],
        policy_yaml: policy(API),
        ..Default::default()
    };
    let lead = admin.sandboxes().create_sandbox(admin.req(req)).await.unwrap().into_inner().sandbox.unwrap();
    let lead_s = h.as_sandbox(&lead.id, None).await;

    // One proposal, approved by four callers at once: exactly one approval, one new version.
    let p = propose(&lead_s, &proposal_yaml("x", EXTRA)).await.unwrap();
    let tasks: Vec<_> = (0..4)
        .map(|_| {
            let a = admin.clone();
            tokio::spawn(async move { approve(&a, p.id).await })
        })
        .collect();
    let mut outcomes = Vec::new();
    for t in tasks {
        outcomes.push(match t.await.unwrap() {
            Ok(p) => format!("approved {}", p.policy_version),
            Err(s) => code(&s),
        });
    }
    outcomes.sort();
    assert_eq!(outcomes, ["CONFLICT", "CONFLICT", "CONFLICT", "approved 2"]);
    assert_eq!(policy_of(&admin, "lead").await.version, 2);

    // Three proposals for different rules, approved at once: each is proved against the
    // version it lands on, and the last version holds every rule.
    let names = ["one", "two", "three"];
    let mut ids = Vec::new();
    for n in names {
        ids.push(propose(&lead_s, &proposal_yaml(n, &EXTRA.replace("extra", n))).await.unwrap().id);
    }
    let tasks: Vec<_> = ids
        .iter()
        .map(|&id| {
            let a = admin.clone();
            tokio::spawn(async move { approve(&a, id).await })
        })
        .collect();
    let mut versions = Vec::new();
    for t in tasks {
        versions.push(t.await.unwrap().unwrap().policy_version);
    }
    versions.sort();
    assert_eq!(versions, [3, 4, 5]);
    let now = policy_of(&admin, "lead").await;
    assert_eq!(now.version, 5);
    for n in ["api.test", "extra.test", "one.test", "two.test", "three.test"] {
        assert!(now.policy_yaml.contains(n), "{n} lost: {}", now.policy_yaml);
    }

    // A sandbox proposes at most 100 times an hour (superseded ones count too).
    let mut made = 4;
    let refusal = loop {
        match propose(&lead_s, &proposal_yaml("again", &EXTRA.replace("extra", "again"))).await {
            Ok(_) => made += 1,
            Err(s) => break s,
        }
        assert!(made <= 100, "no cap on proposals");
    };
    assert_eq!(code(&refusal), "LIMIT_REACHED", "{refusal:?}");
    assert_eq!(details(&refusal).get("limit").map(String::as_str), Some("proposals_per_hour"));
    assert_eq!(made, 100);
    let pending = list(&admin, "lead", "pending").await.unwrap();
    assert_eq!(pending.len(), 1, "each newer proposal superseded the one before");
}
