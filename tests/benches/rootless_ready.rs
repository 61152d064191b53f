//! create -> READY on a gateway that is not root (a user namespace per sandbox, subordinate
//! uids, a delegated cgroup subtree) beside the same on a root gateway, in the same run.
//!
//! ```sh
//! cargo build --release -p openshell-gateway -p openshell-supervisor
//! cargo bench -p openshell-e2e --bench rootless_ready
//! ```
//!
//! Both are the real `openshell-gateway` binary (the release one beside this bench) with the
//! process driver and full isolation, each on a fresh database of the same test server: the
//! root one as root, the rootless one as the user `openshell-rootless`
//! (scripts/setup.d/50-rootless-users.sh) with a cgroup subtree delegated as an operator
//! would. Sandboxes run `sleep 600`; the two gateways take turns, one create each, so drift
//! hits both alike. The clock starts just before `CreateSandbox` is sent and stops when
//! `GetSandbox` (polled every millisecond) shows READY: the supervisor connected back after
//! it set up its sandbox (namespaces, and without root the user namespace and its id maps).
//! Each sandbox is stopped before the next create; the stop is not in the figures.
//!
//! Environment: `BENCH_N` (sandboxes per gateway, default 30), `BENCH_WARMUP` (default 2).

use std::time::{Duration, Instant};

use openshell_e2e::rootless::{self, RootlessGateway, USER};
use openshell_e2e::{Api, GatewayProcess, TempDir, config_token};
use openshell_proto::v1 as pb;

const TIMEOUT: Duration = Duration::from_secs(30);

fn stats(mut v: Vec<Duration>) -> (Duration, Duration, Duration) {
    v.sort();
    let rank = |q: f64| v[((q * v.len() as f64).ceil() as usize).clamp(1, v.len()) - 1];
    let mean = v.iter().sum::<Duration>() / v.len() as u32;
    (rank(0.5), rank(0.99), mean)
}

fn ms(d: Duration) -> String {
    format!("{:.1}", d.as_secs_f64() * 1000.0)
}

/// One create -> READY, then the stop (not timed).
async fn ready(api: &Api, name: &str) -> Duration {
    let req = pb::CreateSandboxRequest {
        name: name.into(),
        command: vec!["sleep".into(), "600".into()],
        ..Default::default()
    };
    let t = Instant::now();
    api.sandboxes().create_sandbox(api.req(req)).await.expect("create");
    loop {
        let s = api.get(name).await.expect("get");
        match s.phase.as_str() {
            "READY" => break,
            "PROVISIONING" => {}
            other => panic!("{name} went {other}: {}", s.phase_reason),
        }
        assert!(t.elapsed() < TIMEOUT, "{name} not READY within {TIMEOUT:?}");
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    let took = t.elapsed();
    api.sandboxes().stop_sandbox(api.req(pb::StopSandboxRequest { sandbox: name.into() })).await.expect("stop");
    took
}

#[tokio::main]
async fn main() {
    let n = |k: &str, d: usize| std::env::var(k).ok().and_then(|v| v.parse().ok()).unwrap_or(d);
    let (count, warmup) = (n("BENCH_N", 30).max(1), n("BENCH_WARMUP", 2));

    let db = openshell_testkit::fresh_database().await;
    let tmp = TempDir::new("openshell-bench-root");
    let config = tmp.0.join("config.json");
    let root_gw =
        GatewayProcess::spawn(&db.url, &tmp.0.join("state"), "127.0.0.1:0", Some(&config), &["--stop-grace", "1"]);
    let root = Api::connect(&root_gw.endpoint, Some(&config_token(&config))).await;
    let uid = rootless::user(USER).uid.as_raw();
    rootless::delegate(uid);
    let user_gw = RootlessGateway::start(USER, &["--stop-grace", "1"]).await;
    let user = user_gw.admin().await;

    let (mut as_root, mut as_user) = (Vec::new(), Vec::new());
    for i in 0..warmup + count {
        let r = ready(&root, &format!("r{i}")).await;
        let u = ready(&user, &format!("u{i}")).await;
        if i >= warmup {
            as_root.push(r);
            as_user.push(u);
        }
    }
    let (r50, r99, rmean) = stats(as_root);
    let (u50, u99, umean) = stats(as_user);
    println!("create -> READY, process driver, full isolation, {count} sandboxes each (ms)");
    println!("  {:<44} {:>8} {:>8} {:>8}", "", "p50", "p99", "mean");
    println!("  {:<44} {:>8} {:>8} {:>8}", "root gateway (the floor)", ms(r50), ms(r99), ms(rmean));
    println!("  {:<44} {:>8} {:>8} {:>8}", format!("gateway as {USER} (user namespace)"), ms(u50), ms(u99), ms(umean));
    println!(
        "  rootless / root: p50 {:.2}x, p99 {:.2}x",
        u50.as_secs_f64() / r50.as_secs_f64(),
        u99.as_secs_f64() / r99.as_secs_f64()
    );
    drop(user);
    drop(user_gw);
    rootless::undelegate(uid);
    drop(root);
    drop(root_gw);
}
