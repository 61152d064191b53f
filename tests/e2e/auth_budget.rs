//! The failed-authentication budget per address is kept per kind of credential: sandbox
//! credentials that stopped working (supervisors of stopping sandboxes still calling, all
//! from the gateway's host) cannot lock a user out of the same address, even one whose token
//! this gateway process has not verified yet (its first call, or after a restart). Found by
//! the storm (tests/e2e/storm.rs): a restarted gateway refused the admin's valid token.
//! Nor can they hold back a sandbox this gateway starts: its credential was minted here, so
//! its supervisor's first connect is exempt (found by the ready bench's p99).

use openshell_driver::{Driver, DriverError, StartSpec};
use openshell_e2e::*;
use openshell_proto::v1 as pb;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

/// Which call the flood's stale credentials make.
#[derive(Clone, Copy)]
enum Call {
    /// WhoAmI: authenticated before the call, as every API call is.
    WhoAmI,
    /// The supervisor's connect, whose database call checks the credential itself.
    SupervisorConnect,
}

/// 24 clients presenting sandbox credentials that no longer work, counting the refusals that
/// say the address's budget is spent.
struct Flood {
    stop: Arc<AtomicBool>,
    limited: Arc<AtomicUsize>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Flood {
    async fn start(endpoint: &str, most: Duration) -> Flood {
        Flood::calling(endpoint, most, Call::WhoAmI).await
    }

    async fn calling(endpoint: &str, most: Duration, call: Call) -> Flood {
        let (stop, limited) = (Arc::new(AtomicBool::new(false)), Arc::new(AtomicUsize::new(0)));
        let mut tasks = Vec::new();
        for f in 0..24 {
            let stale = Api::connect(endpoint, Some(&format!("oss_{f:064x}"))).await;
            let (stop, limited) = (stop.clone(), limited.clone());
            tasks.push(tokio::spawn(async move {
                let deadline = std::time::Instant::now() + most;
                while !stop.load(Ordering::Relaxed) && std::time::Instant::now() < deadline {
                    let s = match call {
                        Call::WhoAmI => stale.users().who_am_i(stale.req(pb::WhoAmIRequest {})).await.map(drop),
                        Call::SupervisorConnect => stale
                            .supervisor()
                            .supervisor_connect(stale.req(pb::ConnectRequest { pid: 1 }))
                            .await
                            .map(drop),
                    }
                    .unwrap_err();
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

/// Sends every supervisor it starts to another gateway, a replica on the same database, which
/// did not mint its credential (as after a restart between the start and the connect).
struct ToReplica {
    inner: Arc<dyn Driver>,
    endpoint: Arc<std::sync::Mutex<String>>,
}

#[async_trait::async_trait]
impl Driver for ToReplica {
    fn name(&self) -> &'static str {
        self.inner.name()
    }
    async fn start(&self, mut spec: StartSpec) -> Result<(), DriverError> {
        spec.gateway = self.endpoint.lock().unwrap().clone();
        self.inner.start(spec).await
    }
    async fn stop(&self, id: uuid::Uuid, grace: Duration) -> Result<(), DriverError> {
        self.inner.stop(id, grace).await
    }
    async fn list(&self) -> Result<Vec<uuid::Uuid>, DriverError> {
        self.inner.list().await
    }
}

/// A supervisor whose credential the gateway it reaches did not mint meets a spent budget:
/// the refusal says it is the budget's, the supervisor keeps trying, and its sandbox becomes
/// READY once the flood ends.
#[tokio::test]
async fn a_supervisor_refused_by_a_spent_budget_retries_and_connects() {
    let endpoint = Arc::new(std::sync::Mutex::new(String::new()));
    let to = endpoint.clone();
    let h = Harness::with_driver(
        move |state| {
            let inner = process_driver(state, openshell_driver::ProxySettings::default());
            Arc::new(ToReplica { inner: Arc::new(inner), endpoint: to }) as Arc<dyn Driver>
        },
        |_| {},
    )
    .await;
    let replica_state = TempDir::new("openshell-e2e-replica");
    let replica = openshell_gateway::startup::start_with_driver(&options(&h.db.url, &replica_state.0), None)
        .await
        .expect("the replica starts");
    *endpoint.lock().unwrap() = replica.endpoint.clone();
    let a = h.admin().await;
    let flood = Flood::start(&replica.endpoint, Duration::from_secs(30)).await;
    assert!(flood.spent().await);
    // The lead's supervisor starts while the replica's budget is spent, and meets it.
    let lead = a.root("lead", None).await.unwrap();
    let log = h.supervisor_log(&lead.id);
    let met = eventually(Duration::from_secs(10), || async {
        std::fs::read_to_string(&log).is_ok_and(|l| l.contains("refuses this address for a moment"))
    })
    .await;
    flood.end().await;
    assert!(met, "the supervisor never met the spent budget: {:?}", std::fs::read_to_string(&log));
    let up =
        eventually(Duration::from_secs(20), || async { a.get("lead").await.is_ok_and(|s| s.phase == "READY") }).await;
    assert!(up, "the supervisor kept trying and connected: {:?}", a.get("lead").await);
    replica.shutdown().await.unwrap();
}

/// A sandbox this gateway starts is not held back by a budget others spent: its credential
/// was minted here, so its supervisor's first connect is no guess. Supervisors of stopping
/// sandboxes on the same host spend the budget that way; without the exemption every create
/// meanwhile waited for the budget's window (create -> READY p99 of 0.77 s in the ready
/// bench) or, under a steady churn of stops, for ever.
#[tokio::test]
async fn a_sandbox_started_while_the_budget_is_spent_connects_at_once() {
    let h = Harness::process(|_| {}).await;
    let a = h.admin().await;
    let flood = Flood::start(&h.endpoint, Duration::from_secs(60)).await;
    assert!(flood.spent().await);
    let lead = a.root("lead", None).await.unwrap();
    let up =
        eventually(Duration::from_secs(20), || async { a.get("lead").await.is_ok_and(|s| s.phase == "READY") }).await;
    let log = std::fs::read_to_string(h.supervisor_log(&lead.id)).unwrap_or_default();
    let limited = flood.limited.load(Ordering::Relaxed);
    flood.end().await;
    assert!(up, "READY while the flood went on: {:?}\n{log}", a.get("lead").await);
    assert!(!log.contains("refuses this address"), "{log}");
    assert!(limited > 50, "the budget stayed spent ({limited} refusals)");
}

/// The supervisor's connect checks its credential in its own database call (one round trip
/// on the start path); unknown credentials presented there still spend the address's budget,
/// so a flood of guesses at it is refused before the database is asked.
#[tokio::test]
async fn guesses_at_the_supervisors_connect_spend_the_budget() {
    let h = Harness::process(|_| {}).await;
    let flood = Flood::calling(&h.endpoint, Duration::from_secs(30), Call::SupervisorConnect).await;
    let spent = flood.spent().await;
    let limited = flood.limited.load(Ordering::Relaxed);
    flood.end().await;
    assert!(spent, "the connect's refusals never spent the budget ({limited} refused early)");
}
