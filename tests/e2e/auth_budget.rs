//! The failed-authentication budget per address is kept per kind of credential: sandbox
//! credentials that stopped working (supervisors of stopping sandboxes still calling, all
//! from the gateway's host) cannot lock a user out of the same address, even one whose token
//! this gateway process has not verified yet (its first call, or after a restart). Found by
//! the storm (tests/e2e/storm.rs): a restarted gateway refused the admin's valid token.

use openshell_e2e::*;
use openshell_proto::v1 as pb;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

/// 24 clients presenting sandbox credentials that no longer work, counting the refusals that
/// say the address's budget is spent.
struct Flood {
    stop: Arc<AtomicBool>,
    limited: Arc<AtomicUsize>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Flood {
    async fn start(endpoint: &str, most: Duration) -> Flood {
        let (stop, limited) = (Arc::new(AtomicBool::new(false)), Arc::new(AtomicUsize::new(0)));
        let mut tasks = Vec::new();
        for f in 0..24 {
            let stale = Api::connect(endpoint, Some(&format!("oss_{f:064x}"))).await;
            let (stop, limited) = (stop.clone(), limited.clone());
            tasks.push(tokio::spawn(async move {
                let deadline = std::time::Instant::now() + most;
                while !stop.load(Ordering::Relaxed) && std::time::Instant::now() < deadline {
                    let s = stale.users().who_am_i(stale.req(pb::WhoAmIRequest {})).await.unwrap_err();
                    assert_eq!(s.code(), tonic::Code::Unauthenticated, "{s:?}");
                    let r = openshell_client::Refusal::from(&s);
                    if r.details.get("reason").map(String::as_str) == Some("auth_budget") {
                        limited.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }));
        }
        Flood { stop, limited, tasks }
    }

    /// Until the stale credentials are being refused early: the budget is spent.
    async fn spent(&self) -> bool {
        eventually(Duration::from_secs(10), || async { self.limited.load(Ordering::Relaxed) > 50 }).await
    }

    async fn end(self) {
        self.stop.store(true, Ordering::Relaxed);
        for t in self.tasks {
            t.await.unwrap();
        }
    }
}

#[tokio::test]
async fn failing_sandbox_credentials_do_not_lock_out_a_users_first_call() {
    let h = Harness::fake().await;
    let alice = h.user("alice").await;
    let flood = Flood::start(&h.endpoint, Duration::from_secs(20)).await;
    assert!(flood.spent().await);
    // alice's token was never presented to this gateway: her first calls still go through.
    let first = alice.users().who_am_i(alice.req(pb::WhoAmIRequest {})).await;
    let root = alice.root("lead", Some(grant(1, 2, 2))).await;
    flood.end().await;
    first.expect("a user's first call while sandbox credentials fail from the same address");
    root.expect("and a create");
    // A flood of bad user tokens still meets its own budget (authz.rs covers that it is
    // refused early while a known user goes on).
}

/// A supervisor whose first connect meets the address's spent budget (other sandboxes' dead
/// credentials from the same host, as after a gateway restart) retries instead of exiting:
/// the refusal says it is the budget's, and its sandbox becomes READY once the flood ends.
#[tokio::test]
async fn a_supervisor_refused_by_a_spent_budget_retries_and_connects() {
    let h = Harness::process(|_| {}).await;
    let a = h.admin().await;
    let flood = Flood::start(&h.endpoint, Duration::from_secs(30)).await;
    assert!(flood.spent().await);
    // The lead's supervisor starts while the budget is spent, and meets it for a while.
    a.root("lead", None).await.unwrap();
    tokio::time::sleep(Duration::from_secs(3)).await;
    flood.end().await;
    let up =
        eventually(Duration::from_secs(20), || async { a.get("lead").await.is_ok_and(|s| s.phase == "READY") }).await;
    assert!(up, "the supervisor kept trying and connected: {:?}", a.get("lead").await);
}
