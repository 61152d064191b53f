//! The storm against real gateway processes, short (CI): 1,000 create attempts from clients
//! on three `openshell-gateway` processes sharing one database, each gateway SIGKILLed and
//! restarted twice (`STORM_CREATES`, `STORM_KILLS` per gateway override both), then every invariant checked in SQL (`os_invariants()`, sql/invariants.sql)
//! once the gateways settled. `scripts/bench-storm.sh` runs the long one (10,000).
//! See `openshell_e2e::storm` for what it does and checks.

use openshell_e2e::storm::{Config, run};

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn three_gateways_killed_and_restarted_under_a_storm_lose_nothing() {
    let mut cfg = Config::short();
    let env = |name: &str| std::env::var(name).ok().and_then(|v| v.parse().ok());
    // scripts/bench-storm.sh runs the long one.
    if let Some(n) = env("STORM_CREATES") {
        cfg.creates = n;
    }
    if let Some(n) = env("STORM_KILLS") {
        cfg.kills_per_gateway = n;
    }
    let report = run(&cfg).await;
    report.print();
    assert!(report.violations().is_empty(), "invariants broken: {:?}", report.violations());
    assert_eq!(report.unrecorded_limits, 0, "every admission's receipt records its limits");
    assert!(report.request_id_splits.is_empty(), "one request id, two sandboxes: {:?}", report.request_id_splits);
    assert!(report.odd_codes.is_empty(), "refusals other than the limits: {:?}", report.odd_codes);
    // The storm reached everything it is meant to: both sides of the limits, repeats, stops,
    // grant changes, and every kill with calls cut off by it.
    assert_eq!(report.kills, 3 * cfg.kills_per_gateway);
    assert!(report.admitted > 50 && report.refused > 50, "{report:?}");
    assert!(report.replayed > 0 && report.stops > 0 && report.grant_updates > 0, "{report:?}");
    // Every child was admitted by a call some client saw, or by one a kill cut off.
    assert!(report.children as usize >= report.admitted, "{report:?}");
}
