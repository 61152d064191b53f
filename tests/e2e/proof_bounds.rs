//! Proof work is bounded: a cap on concurrent proofs (excess waits, then UNAVAILABLE), a
//! proof whose caller went away stops, and a per-principal rate on CheckPolicy. Adversarial
//! policies (many endpoints x many free-text methods) do not keep the gateway from
//! answering other callers.

use std::time::{Duration, Instant};

use openshell_e2e::*;
use openshell_proto::v1 as pb;
use openshell_proto::v1::policies_client::PoliciesClient;
use tonic_types::StatusExt;

/// A boundary of `n` hosts whose `m` free-text methods are spread over `parts` endpoints
/// per host, and a candidate asking for all `m` per host: within only by a union. The
/// prover's cells decide two parts per host; over 64 they leave it to z3 (slower, and
/// small in bytes). `salt` makes each pair distinct (no cached verdict).
fn adversarial(n: usize, m: usize, parts: usize, salt: usize) -> (String, String) {
    let method = |mut k: usize| {
        let mut s = String::from("X");
        loop {
            s.push((b'A' + (k % 26) as u8) as char);
            k /= 26;
            if k == 0 {
                return s;
            }
        }
    };
    let rules = |ks: std::ops::Range<usize>, path: &str| -> String {
        ks.map(|k| format!("{{allow: {{method: '{}', path: '{path}'}}}}", method(k))).collect::<Vec<_>>().join(", ")
    };
    let mut b = String::from("version: 1\nnetwork_policies:\n");
    let mut c = b.clone();
    for i in 0..n {
        // At most 60 endpoints per named rule (the schema allows 64).
        let parts: Vec<usize> = (0..parts).collect();
        for (k, chunk) in parts.chunks(60).enumerate() {
            let eps: String = chunk
                .iter()
                .map(|&p| {
                    format!(
                        "      - {{host: '*.h{i}.s{salt}.example.com', port: 443, protocol: rest, enforcement: enforce, rules: [{}]}}\n",
                        rules(p * m / parts.len()..(p + 1) * m / parts.len(), "/a/**")
                    )
                })
                .collect();
            b.push_str(&format!("  r{i}p{k}:\n    endpoints:\n{eps}    binaries: [{{path: '/usr/bin/*'}}]\n"));
        }
        c.push_str(&format!(
            "  r{i}:\n    endpoints:\n      - {{host: 'x.h{i}.s{salt}.example.com', port: 443, protocol: rest, enforcement: enforce, rules: [{}]}}\n    binaries: [{{path: '/usr/bin/python3'}}]\n",
            rules(0..m, "/a/*/b/**")
        ));
    }
    (b, c)
}

async fn check(
    api: &Api,
    (boundary_yaml, candidate_yaml): (String, String),
) -> Result<pb::CheckPolicyResponse, tonic::Status> {
    let req = pb::CheckPolicyRequest { boundary_yaml, candidate_yaml, ..Default::default() };
    Ok(PoliciesClient::new(api.channel()).check_policy(api.req(req)).await?.into_inner())
}

const TRIVIAL: &str = "version: 1\n";

/// The two tests that load the prover take turns: each measures against its own load only.
static HEAVY: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn adversarial_proofs_do_not_keep_the_gateway_from_answering_others() {
    let _turn = HEAVY.lock().await;
    let h = Harness::fake_with(|o| {
        o.proof_concurrency = Some(1);
        // Under a proof's time here (about 150 ms on a fast machine): with six callers on
        // one slot, the excess is sure to wait longer and be refused.
        o.proof_queue_ms = 100;
        o.proof_timeout_ms = 3000;
        o.check_policy_rate = "1000/s".parse().unwrap();
    })
    .await;
    let a = h.admin().await;
    a.root("lead", Some(grant(2, 50, 50))).await.unwrap();
    let mut attackers = Vec::new();
    for k in 0..6 {
        let api = h.user(&format!("mallory{k}")).await;
        attackers.push(tokio::spawn(async move {
            let (mut answered, mut busy) = (0, 0);
            let until = Instant::now() + Duration::from_secs(5);
            let mut salt = k * 1000;
            while Instant::now() < until {
                salt += 1;
                match check(&api, adversarial(4, 120, 120, salt)).await {
                    Ok(_) => answered += 1,
                    Err(s) if code(&s) == "UNAVAILABLE" => {
                        assert!(s.message().contains("prover is busy"), "{s:?}");
                        busy += 1
                    }
                    Err(s) => panic!("{s:?}"),
                }
            }
            (answered, busy)
        }));
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    // Meanwhile everyone else is answered, each call within a second.
    for i in 0..8 {
        let within = |what: &'static str| {
            move |r: Result<(), tokio::time::error::Elapsed>| {
                assert!(r.is_ok(), "{what} (round {i}) was not answered within a second");
            }
        };
        within("WhoAmI")(
            tokio::time::timeout(Duration::from_secs(1), async {
                a.users().who_am_i(a.req(pb::WhoAmIRequest {})).await.unwrap();
            })
            .await,
        );
        within("GetSandbox")(
            tokio::time::timeout(Duration::from_secs(1), async {
                a.get("lead").await.unwrap();
            })
            .await,
        );
        within("CreateChildSandbox (inherited policy)")(
            tokio::time::timeout(Duration::from_secs(1), async {
                a.child("lead", &format!("w{i}"), false).await.unwrap();
            })
            .await,
        );
        tokio::time::sleep(Duration::from_millis(400)).await;
    }
    let mut busy = 0;
    for t in attackers {
        busy += t.await.unwrap().1;
    }
    assert!(busy > 0, "six callers on one proof slot: the excess waited and was refused");
    assert_eq!(a.tree("lead").await.len(), 9);
}

#[tokio::test]
async fn a_proof_whose_caller_went_away_stops_and_frees_its_slot() {
    let _turn = HEAVY.lock().await;
    let h = Harness::fake_with(|o| {
        o.proof_concurrency = Some(1);
        // A waiting call waits for the slot as long as it takes: how soon it gets the slot
        // is what this test measures.
        o.proof_queue_ms = 60_000;
        o.proof_timeout_ms = 60_000;
        o.check_policy_rate = "1000/s".parse().unwrap();
    })
    .await;
    let a = h.admin().await;
    // How long this adversarial proof takes here, run to the end; then the same pair again,
    // a cached verdict: what the call costs besides the proof (parsing, hashing, the RPC),
    // none of it holding the slot. Timed here, as this machine runs it, never assumed.
    let t = Instant::now();
    assert_eq!(check(&a, adversarial(4, 128, 128, 1)).await.unwrap().verdict, "within");
    let full = t.elapsed();
    let t = Instant::now();
    assert_eq!(check(&a, adversarial(4, 128, 128, 1)).await.unwrap().verdict, "within");
    let around = t.elapsed().min(full);
    let proof = full - around;
    assert!(
        // The shape goes to z3 (the cells decide only up to 64 endpoints per host) and is at
        // the prover's bounds (512 boundary endpoints), so it cannot grow.
        proof > Duration::from_millis(45),
        "the proof must take a while for this test to mean anything: {proof:?} of {full:?}"
    );

    // A caller starts a fresh one and goes away a quarter into its proof.
    let gone = {
        let a = a.clone();
        tokio::spawn(async move { check(&a, adversarial(4, 128, 128, 2)).await })
    };
    tokio::time::sleep(around + proof / 4).await;
    gone.abort();
    // Its proof stops: the one slot is free again long before that proof would have ended
    // (three quarters of it were left).
    let t = Instant::now();
    let r = check(&a, (TRIVIAL.into(), TRIVIAL.into())).await.unwrap();
    assert_eq!(r.verdict, "within");
    let freed = t.elapsed();
    assert!(freed < proof / 2, "the slot freed after {freed:?}; the proof takes {proof:?} of {full:?}");
}

#[tokio::test]
async fn check_policy_has_a_rate_per_principal() {
    let h = Harness::fake_with(|o| o.check_policy_rate = "3/min".parse().unwrap()).await;
    let alice = h.user("alice").await;
    let bob = h.user("bob").await;
    for _ in 0..3 {
        check(&alice, (TRIVIAL.into(), TRIVIAL.into())).await.unwrap();
    }
    let s = refused(check(&alice, (TRIVIAL.into(), TRIVIAL.into())).await, "LIMIT_REACHED");
    assert_eq!(s.code(), tonic::Code::ResourceExhausted);
    assert!(s.message().contains("3/min"), "{s:?}");
    let d = details(&s);
    assert_eq!((d["limit"].as_str(), d["rate"].as_str()), ("check_policy_rate", "3/min"));
    let retry: u64 = d["retry_after_ms"].parse().unwrap();
    assert!((1..=20_000).contains(&retry), "{retry}");
    let info = s.get_details_retry_info().expect("RetryInfo");
    assert!(info.retry_delay.is_some_and(|d| d <= Duration::from_secs(20)));
    // Another principal has its own.
    check(&bob, (TRIVIAL.into(), TRIVIAL.into())).await.unwrap();
}
