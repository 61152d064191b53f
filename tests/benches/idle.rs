//! A thousand live sandboxes on one host, idle: what they cost the gateway and its database,
//! what a create costs beside them, each one's memory, and how fast a policy write reaches a
//! proxy among them.
//!
//! ```sh
//! cargo build --release -p openshell-supervisor
//! cargo bench -p openshell-e2e --bench idle
//! ```
//!
//! A real gateway (in this process) on its embedded PostgreSQL, process driver, every sandbox
//! `sleep`ing under full isolation (no disk of its own: `--disk-backend unbounded`; the
//! default image backend reserves each sandbox's whole disk against the host's free space,
//! which the bench prints). In order:
//!
//! 1. **idle at 0 live** (FLOOR for the CPU rows): the gateway process's and the database's
//!    CPU (the postmaster and its children, from /proc) over `BENCH_IDLE_S` seconds;
//! 2. **create -> running at 0 live** (FLOOR for the create row): `BENCH_PROBES` sandboxes one
//!    at a time, each created, waited for until its isolation is reported (`GetSandbox` every
//!    5 ms), then stopped;
//! 3. `BENCH_N` (default 1000) sandboxes started, `BENCH_CONCURRENCY` creates in flight, all
//!    waited for until running;
//! 4. **idle at N live**: the same CPU figures over `BENCH_IDLE_S` seconds (target: gateway
//!    and database together at most 5% of one core), and the supervisors' own CPU;
//! 5. **memory**: the PSS of each sandbox's supervisor processes (the supervisor and its
//!    init), beside a `sleep`'s (reference);
//! 6. **create -> running at N live**, as in 2 (target: within 1.5x of 2);
//! 7. **policy write -> proxy**: `SetPolicy` on `BENCH_WRITES` sandboxes, from the call to the
//!    supervisor's "policy changed" log line (wall clock), beside the `SetPolicy` call alone
//!    (FLOOR; target: under a second).
//!
//! Environment: `BENCH_N`, `BENCH_CONCURRENCY` (default 4), `BENCH_IDLE_S` (default 30),
//! `BENCH_PROBES` (default 20), `BENCH_WRITES` (default 20).

use std::path::Path;
use std::time::{Duration, Instant, SystemTime};

use futures::StreamExt;
use openshell_e2e::{Api, TempDir, bin, supervisor_pids};
use openshell_gateway::startup::{DiskBackendArg, DriverKind, Options};
use openshell_proto::v1 as pb;

/// Every sandbox's filesystem policy (a write may change only its network part).
const FS: &str = "filesystem_policy:
  include_workdir: true
  read_only: [/usr, /lib, /proc, /dev/urandom, /etc]
  read_write: [/tmp, /dev/null]
";

fn env(k: &str, d: usize) -> usize {
    std::env::var(k).ok().and_then(|v| v.parse().ok()).unwrap_or(d)
}

struct Stats {
    p50: Duration,
    p99: Duration,
    n: usize,
}

fn stats(samples: &[Duration]) -> Stats {
    let mut v = samples.to_vec();
    v.sort();
    let rank = |q: f64| v[((q * v.len() as f64).ceil() as usize).clamp(1, v.len()) - 1];
    Stats { p50: rank(0.50), p99: rank(0.99), n: v.len() }
}

fn ms(d: Duration) -> String {
    format!("{:.2}", d.as_secs_f64() * 1000.0)
}

/// Clock ticks of CPU (user + system) of `pid`, with its reaped children's when `children`.
fn ticks(pid: i32, children: bool) -> u64 {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else { return 0 };
    let Some(rest) = stat.rfind(')').map(|i| &stat[i + 1..]) else { return 0 };
    let f: Vec<u64> = rest.split_whitespace().map(|x| x.parse().unwrap_or(0)).collect();
    // After the name: state=0, ..., utime=11, stime=12, cutime=13, cstime=14.
    f[11] + f[12] + if children { f[13] + f[14] } else { 0 }
}

fn ppid(pid: i32) -> Option<i32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat[stat.rfind(')')? + 1..].split_whitespace().nth(1)?.parse().ok()
}

fn all_pids() -> Vec<i32> {
    std::fs::read_dir("/proc").unwrap().flatten().filter_map(|e| e.file_name().to_str()?.parse().ok()).collect()
}

/// The embedded cluster's postmaster and its children (backends, background workers).
fn database_pids(postmaster: i32) -> Vec<i32> {
    let mut v: Vec<i32> = all_pids().into_iter().filter(|p| ppid(*p) == Some(postmaster)).collect();
    v.push(postmaster);
    v
}

/// CPU of the gateway (this process), the database and the supervisors, as a share of one
/// core, over `secs` of doing nothing.
struct Idle {
    gateway: f64,
    database: f64,
    supervisors: f64,
}

async fn idle(secs: u64, postmaster: i32, state: &Path) -> Idle {
    let me = std::process::id() as i32;
    let db = |pids: &[i32]| pids.iter().map(|p| ticks(*p, *p == postmaster)).sum::<u64>();
    let sups = supervisor_pids(state);
    let sup_ticks = |pids: &[i32]| pids.iter().map(|p| ticks(*p, false)).sum::<u64>();
    let (g0, dbp) = (ticks(me, false), database_pids(postmaster));
    let (d0, s0) = (db(&dbp), sup_ticks(&sups));
    let t0 = Instant::now();
    tokio::time::sleep(Duration::from_secs(secs)).await;
    let wall = t0.elapsed().as_secs_f64();
    let (g1, d1, s1) = (ticks(me, false), db(&database_pids(postmaster)), sup_ticks(&sups));
    // /proc counts in USER_HZ, 100 on Linux.
    let hz = 100.0;
    let share = |a: u64, b: u64| (b.saturating_sub(a)) as f64 / hz / wall * 100.0;
    Idle { gateway: share(g0, g1), database: share(d0, d1), supervisors: share(s0, s1) }
}

/// PSS in KiB of a process (smaps_rollup).
fn pss_kib(pid: i32) -> u64 {
    let text = std::fs::read_to_string(format!("/proc/{pid}/smaps_rollup")).unwrap_or_default();
    text.lines().find(|l| l.starts_with("Pss:")).and_then(|l| l.split_whitespace().nth(1)?.parse().ok()).unwrap_or(0)
}

/// A sandbox's supervisor processes: the supervisor and its children running the same binary
/// (the init).
fn sandbox_pss(supervisor: i32) -> u64 {
    let exe = std::fs::read_link(format!("/proc/{supervisor}/exe")).ok();
    let children: Vec<i32> = all_pids()
        .into_iter()
        .filter(|p| ppid(*p) == Some(supervisor) && std::fs::read_link(format!("/proc/{p}/exe")).ok() == exe)
        .collect();
    pss_kib(supervisor) + children.iter().map(|p| pss_kib(*p)).sum::<u64>()
}

async fn create(api: &Api, name: &str) {
    let req = pb::CreateSandboxRequest {
        name: name.into(),
        command: vec!["sleep".into(), "1000000".into()],
        policy_yaml: format!("version: 1\n{FS}"),
        ..Default::default()
    };
    api.sandboxes().create_sandbox(api.req(req)).await.unwrap_or_else(|s| panic!("create {name}: {s:?}"));
}

async fn running(api: &Api, name: &str, within: Duration) {
    let deadline = Instant::now() + within;
    loop {
        if let Ok(s) = api.get(name).await {
            if !s.isolation.is_empty() {
                return;
            }
            assert!(s.phase == "PROVISIONING" || s.phase == "READY", "{name}: {} {}", s.phase, s.phase_reason);
        }
        assert!(Instant::now() < deadline, "{name} not running after {within:?}");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// Create -> running of `n` sandboxes one at a time, each stopped after.
async fn probes(api: &Api, tag: &str, n: usize) -> Vec<Duration> {
    let mut out = Vec::new();
    for i in 0..n + 2 {
        let name = format!("probe-{tag}-{i}");
        let t = Instant::now();
        create(api, &name).await;
        running(api, &name, Duration::from_secs(60)).await;
        let d = t.elapsed();
        // Two warm-ups first.
        if i >= 2 {
            out.push(d);
        }
        api.sandboxes().stop_sandbox(api.req(pb::StopSandboxRequest { sandbox: name })).await.expect("stop");
    }
    out
}

/// The wall-clock time of a supervisor log's first line containing `what` after `after`.
fn logged(log: &Path, what: &str, after: SystemTime) -> Option<SystemTime> {
    let text = std::fs::read_to_string(log).ok()?;
    text.lines().filter(|l| l.contains(what)).find_map(|l| {
        let stamp = l.split_whitespace().next()?;
        let at = SystemTime::from(chrono::DateTime::parse_from_rfc3339(stamp).ok()?);
        (at >= after).then_some(at)
    })
}

fn print_row(name: &str, s: &Stats, floor: Duration) {
    println!(
        "{name:<58} {:>5} {:>9} {:>9} {:>10.2}x",
        s.n,
        ms(s.p50),
        ms(s.p99),
        s.p50.as_secs_f64() / floor.as_secs_f64()
    );
}

async fn run() {
    let n = env("BENCH_N", 1000);
    let concurrency = env("BENCH_CONCURRENCY", 4).max(1);
    let idle_s = env("BENCH_IDLE_S", 30) as u64;
    let probes_n = env("BENCH_PROBES", 20).max(1);
    let writes = env("BENCH_WRITES", 20).clamp(1, n.max(1));

    let state = TempDir::new("openshell-bench-idle");
    let mut opts = Options::new(None, state.0.clone());
    opts.listen = "127.0.0.1:0".parse().unwrap();
    opts.no_client_config = true;
    opts.supervisor_bin = Some(bin("openshell-supervisor"));
    opts.driver = DriverKind::Process;
    opts.stop_grace = 1;
    opts.disk_backend = Some(DiskBackendArg::Unbounded);
    let running_gw = openshell_gateway::startup::start(&opts).await.expect("gateway starts");
    let api = Api::connect(&running_gw.endpoint, running_gw.admin_token.as_deref()).await;
    let postgres_dir = opts.postgres_dir(&std::fs::canonicalize(&state.0).unwrap());
    let postmaster: i32 = std::fs::read_to_string(postgres_dir.join("data/postmaster.pid"))
        .expect("the embedded cluster's postmaster.pid")
        .lines()
        .next()
        .and_then(|l| l.trim().parse().ok())
        .expect("a pid");

    // What the host allows, said at the start.
    let nofile = std::fs::read_to_string("/proc/self/limits")
        .unwrap_or_default()
        .lines()
        .find(|l| l.starts_with("Max open files"))
        .and_then(|l| l.split_whitespace().nth(3).map(str::to_string))
        .unwrap_or_default();
    let pid_max = std::fs::read_to_string("/proc/sys/kernel/pid_max").unwrap_or_default();
    let free = nix::sys::statvfs::statvfs(&state.0).map(|s| s.blocks_available() * s.fragment_size()).unwrap_or(0);
    println!(
        "idle: {n} live sandboxes `sleep` on the process driver, embedded PostgreSQL, {concurrency} creates in flight"
    );
    println!(
        "limits: sandbox uids {}; open files {} (the gateway raises its soft limit to the hard one); \
         pid_max {}; pool {} connections + 1 LISTEN session",
        opts.sandbox_uid_range,
        nofile,
        pid_max.trim(),
        opts.max_connections
    );
    println!(
        "disk: the default image backend would admit about {} sandboxes of 2 GiB here ({} GiB free, \
         --disk-overcommit 1); this bench gives them none (--disk-backend unbounded)",
        free.saturating_sub(2 << 30) / (2 << 30),
        free >> 30
    );

    // 1, 2: the floors, with nothing live.
    let idle0 = idle(idle_s.min(10), postmaster, &state.0).await;
    let probes0 = probes(&api, "zero", probes_n).await;

    // 3: the fleet.
    let t = Instant::now();
    let names: Vec<String> = (0..n).map(|i| format!("idle-{i}")).collect();
    futures::stream::iter(names.iter().cloned())
        .for_each_concurrent(concurrency, |name| {
            let api = api.clone();
            async move {
                create(&api, &name).await;
                running(&api, &name, Duration::from_secs(120)).await;
            }
        })
        .await;
    let started = t.elapsed();
    let live = supervisor_pids(&state.0).len();
    println!("started {n} sandboxes in {:.1} s ({live} supervisors live)", started.as_secs_f64());

    // 4, 5: idle, memory.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let idle_n = idle(idle_s, postmaster, &state.0).await;
    let sups = supervisor_pids(&state.0);
    let mut pss: Vec<u64> = sups.iter().map(|p| sandbox_pss(*p)).collect();
    pss.sort();
    let sleep_pss = {
        let mut c = std::process::Command::new("sleep").arg("30").spawn().unwrap();
        std::thread::sleep(Duration::from_millis(100));
        let v = pss_kib(c.id() as i32);
        let _ = c.kill();
        let _ = c.wait();
        v
    };

    // 6: creates beside the fleet.
    let probes_n_live = probes(&api, "live", probes_n).await;

    // 7: policy writes.
    let (mut latency, mut call) = (Vec::new(), Vec::new());
    let policies = openshell_proto::v1::policies_client::PoliciesClient::new(api.channel());
    for name in names.iter().take(writes) {
        let s = api.get(name).await.unwrap();
        let policy = format!(
            "version: 1\n{FS}network_policies:\n  a:\n    endpoints: [{{host: a.test, port: 80}}]\n    binaries: [{{path: /usr/bin/curl}}]\n"
        );
        let wall = SystemTime::now();
        let t = Instant::now();
        let req = pb::SetPolicyRequest { sandbox: name.clone(), policy_yaml: policy };
        policies.clone().set_policy(api.req(req)).await.expect("SetPolicy");
        call.push(t.elapsed());
        let log = openshell_e2e::supervisor_log(&state.0, &s.id);
        let deadline = Instant::now() + Duration::from_secs(10);
        let at = loop {
            if let Some(at) = logged(&log, "policy changed", wall) {
                break at;
            }
            assert!(Instant::now() < deadline, "{name}: the write did not reach its supervisor in 10 s");
            tokio::time::sleep(Duration::from_millis(5)).await;
        };
        latency.push(at.duration_since(wall).unwrap_or_default());
    }

    println!();
    println!("{:<58} {:>8} {:>8} {:>8}", "idle CPU, % of one core", "gateway", "database", "total");
    let row = |name: &str, i: &Idle| {
        println!("{name:<58} {:>8.2} {:>8.2} {:>8.2}", i.gateway, i.database, i.gateway + i.database);
    };
    row(&format!("0 live, {} s (FLOOR)", idle_s.min(10)), &idle0);
    row(&format!("{live} live, {idle_s} s"), &idle_n);
    println!(
        "{live} live: the supervisors together {:.2}% of one core; target gateway + database <= 5%: {} ({:.2}%, {:.1}x the floor)",
        idle_n.supervisors,
        if idle_n.gateway + idle_n.database <= 5.0 { "met" } else { "NOT met" },
        idle_n.gateway + idle_n.database,
        (idle_n.gateway + idle_n.database) / (idle0.gateway + idle0.database).max(0.01)
    );
    println!();
    let kib = |k: u64| format!("{:.2} MiB", k as f64 / 1024.0);
    if !pss.is_empty() {
        println!(
            "memory per sandbox (PSS of supervisor + init, {} sandboxes): p50 {}, max {}, all {}; a `sleep`: {}",
            pss.len(),
            kib(pss[pss.len() / 2]),
            kib(*pss.last().unwrap()),
            kib(pss.iter().sum()),
            kib(sleep_pss)
        );
    }
    println!();
    let floor = stats(&probes0).p50;
    println!("{:<58} {:>5} {:>9} {:>9} {:>11}", "metric (ms)", "n", "p50", "p99", "p50 / floor");
    print_row("create -> running at 0 live (FLOOR)", &stats(&probes0), floor);
    let at_n = stats(&probes_n_live);
    print_row(&format!("create -> running at {live} live"), &at_n, floor);
    let call_s = stats(&call);
    print_row("SetPolicy call alone (FLOOR of the next row)", &call_s, call_s.p50);
    let lat = stats(&latency);
    print_row("policy write -> the supervisor hands it to its proxy", &lat, call_s.p50);
    println!();
    println!(
        "target create -> running at {live} live within 1.5x of 0 live: {} ({:.2}x)",
        if at_n.p50.as_secs_f64() <= 1.5 * floor.as_secs_f64() { "met" } else { "NOT met" },
        at_n.p50.as_secs_f64() / floor.as_secs_f64()
    );
    println!(
        "target policy write -> proxy under 1 s: {} (p99 {} ms)",
        if lat.p99 < Duration::from_secs(1) { "met" } else { "NOT met" },
        ms(lat.p99)
    );

    // Stop everything (not measured).
    let t = Instant::now();
    futures::stream::iter(names)
        .for_each_concurrent(8, |name| {
            let api = api.clone();
            async move {
                let _ = api.sandboxes().stop_sandbox(api.req(pb::StopSandboxRequest { sandbox: name })).await;
            }
        })
        .await;
    let _ =
        openshell_e2e::eventually(Duration::from_secs(120), || async { supervisor_pids(&state.0).is_empty() }).await;
    println!("stopped them in {:.1} s", t.elapsed().as_secs_f64());
    running_gw.shutdown().await.expect("shutdown");
}

fn main() {
    // `cargo bench` passes --bench; `cargo test --benches` does not: nothing to do then.
    if !std::env::args().any(|a| a == "--bench") {
        println!("idle: run with `cargo bench -p openshell-e2e --bench idle`");
        return;
    }
    if std::env::var_os("RUST_LOG").is_none() {
        // SAFETY: single-threaded here, before the runtime starts.
        unsafe { std::env::set_var("RUST_LOG", "info") };
    }
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().expect("runtime");
    rt.block_on(run());
}
