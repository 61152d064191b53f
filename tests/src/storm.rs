//! The storm that anything lost would show, against real gateway processes.
//!
//! One database (the harness's: testcontainers on podman, or `OPENSHELL_TEST_DATABASE_URL`),
//! three `openshell-gateway` processes on it (the debug or release binaries next to the test,
//! each with the real process driver, full isolation, and a state directory of its own),
//! twenty trees with small limits. Client tasks spread over the three gateways fire creates
//! (a fifth repeat an earlier request id, through whichever gateway answers), stops and
//! grant updates; a killer SIGKILLs each gateway at random points of the storm and restarts
//! it on its port and state directory. A call cut off by a kill is retried on another
//! gateway with the same request id, as a client would.
//!
//! Afterwards the gateways settle (their reconcilers fail what never started, finish
//! interrupted stops and kill orphans), and `os_invariants()` (sql/invariants.sql) is asked, with
//! the ids of every workload still running (supervisor processes of the three state
//! directories, and sandbox cgroups of this database's sandboxes): no tree was ever over a
//! limit its receipts were admitted under, the counters equal a recount, every child has one
//! receipt and one first policy, no request id admitted twice, nothing PROVISIONING or
//! STOPPING past the provision timeout, no workload without a live row and no READY row
//! without a workload. The clients check too that every answer to one request id named the
//! same sandbox.

use std::collections::{HashMap, HashSet};
use std::io::BufRead;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use openshell_proto::v1 as pb;
use uuid::Uuid;

use crate::{Api, TempDir, bin, code, free_port};

/// What a storm does.
#[derive(Debug, Clone)]
pub struct Config {
    /// Create attempts (a repeat counts; roughly 18 of 20 operations are creates).
    pub creates: usize,
    pub trees: usize,
    /// Client tasks per gateway.
    pub tasks_per_gateway: usize,
    /// SIGKILL and restart of each gateway, at random points of the storm.
    pub kills_per_gateway: usize,
    /// The gateways' `--provision-timeout`, seconds.
    pub provision_timeout: u64,
    /// How long the gateways may take to settle after the storm.
    pub settle: Duration,
    /// Calls of the floor: a read (GetSandbox) per call through the same clients.
    pub floor_calls: usize,
    pub seed: u64,
}

impl Config {
    /// The short storm CI runs.
    pub fn short() -> Config {
        Config {
            creates: 1000,
            trees: 20,
            tasks_per_gateway: 4,
            kills_per_gateway: 2,
            provision_timeout: 5,
            settle: Duration::from_secs(90),
            floor_calls: 600,
            seed: 0x5eed,
        }
    }
}

pub const GATEWAYS: usize = 3;

/// What happened, and what the database says about it.
#[derive(Debug, Default)]
pub struct Report {
    pub attempts: usize,
    pub admitted: usize,
    pub replayed: usize,
    pub refused: usize,
    /// Calls cut off by a kill (transport errors), retried on another gateway.
    pub cut_off: usize,
    /// Project errors other than refusals (UNAVAILABLE: driver, retries exhausted).
    pub unavailable: usize,
    pub stops: usize,
    pub grant_updates: usize,
    pub kills: usize,
    pub storm: Duration,
    pub settled_in: Duration,
    /// Transactions rolled back during the storm (serialization retries, refusals, kills).
    pub rollbacks: i64,
    /// Floor: GetSandbox calls per second through the same clients and gateways.
    pub floor_per_s: f64,
    /// Different sandboxes answered for one request id (client side): must be empty.
    pub request_id_splits: Vec<String>,
    /// Unexpected refusal codes, with a count each.
    pub odd_codes: HashMap<String, usize>,
    /// `os_invariants()`: (invariant, violations, example).
    pub invariants: Vec<(String, i64, Option<String>)>,
    /// Admission receipts without the limits they were admitted under.
    pub unrecorded_limits: i64,
    pub children: i64,
    pub workloads: usize,
    /// Sandboxes failed (ERROR), by reason: what the kills left for the reconcilers.
    pub failed: Vec<(String, i64)>,
}

impl Report {
    pub fn violations(&self) -> Vec<&(String, i64, Option<String>)> {
        self.invariants.iter().filter(|(_, n, _)| *n != 0).collect()
    }

    pub fn print(&self) {
        let s = self.storm.as_secs_f64();
        println!(
            "storm: {} create attempts in {s:.1} s ({:.0}/s; {:.1} admitted/s): {} admitted, {} replayed, {} refused, \
             {} cut off by a kill and retried, {} unavailable; {} stops, {} grant updates, {} gateway kills; \
             rollbacks {} (retries ~ rollbacks - refused = {}); settled in {:.1} s",
            self.attempts,
            self.attempts as f64 / s,
            self.admitted as f64 / s,
            self.admitted,
            self.replayed,
            self.refused,
            self.cut_off,
            self.unavailable,
            self.stops,
            self.grant_updates,
            self.kills,
            self.rollbacks,
            (self.rollbacks - self.refused as i64).max(0),
            self.settled_in.as_secs_f64(),
        );
        println!(
            "floor: {:.0} GetSandbox calls/s through the same clients; storm create attempts/s = {:.3} x floor",
            self.floor_per_s,
            self.attempts as f64 / s / self.floor_per_s.max(1e-9)
        );
        println!("refusal codes other than LIMIT_REACHED and NOT_ALLOWED: {:?}", self.odd_codes);
        println!("invariants ({} children, {} workloads running at the check):", self.children, self.workloads);
        for (name, n, example) in &self.invariants {
            println!("  {name:<28} {n:>6}  {}", example.as_deref().unwrap_or(""));
        }
        println!("  {:<28} {:>6}", "receipts_without_limits", self.unrecorded_limits);
        println!(
            "  {:<28} {:>6}  {:?}",
            "request_id_answered_twice",
            self.request_id_splits.len(),
            self.request_id_splits.first()
        );
        for (reason, n) in &self.failed {
            println!("failed (ERROR) {n:>5}: {reason}");
        }
    }
}

/// xorshift: the storm is reproducible from its seed (up to scheduling).
struct Rng(u64);
impl Rng {
    fn next(&mut self, n: usize) -> usize {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 % n.max(1) as u64) as usize
    }
}

/// One `openshell-gateway` process: its port and state directory outlive kills.
struct Replica {
    listen: String,
    endpoint: String,
    state: PathBuf,
    log: PathBuf,
    child: Option<std::process::Child>,
}

impl Replica {
    /// Starts it (again) on its port; retried while the port is briefly taken (a connection
    /// of another process may hold it as its ephemeral port).
    fn start(&mut self, db_url: &str, provision_timeout: u64, config: Option<&Path>) {
        for _ in 0..20 {
            if self.try_start(db_url, provision_timeout, config) {
                return;
            }
            std::thread::sleep(Duration::from_millis(500));
        }
        panic!("the gateway on {} did not start; see {}", self.listen, self.log.display());
    }

    fn try_start(&mut self, db_url: &str, provision_timeout: u64, config: Option<&Path>) -> bool {
        let log = std::fs::OpenOptions::new().create(true).append(true).open(&self.log).unwrap();
        let mut cmd = std::process::Command::new(bin("openshell-gateway"));
        cmd.args(["--database-url", db_url, "--allow-superuser", "--listen", &self.listen, "--state-dir"])
            .arg(&self.state)
            .args([
                "--driver",
                "process",
                "--reconcile-interval",
                "1",
                "--stop-grace",
                "1",
                "--max-connections",
                "16",
                "--default-disk",
                "64M",
            ])
            .args(["--provision-timeout", &provision_timeout.to_string()])
            .env("RUST_LOG", "warn")
            .stdout(std::process::Stdio::piped())
            .stderr(log);
        match config {
            Some(c) => cmd.env("OPENSHELL_CONFIG", c),
            None => cmd.arg("--no-client-config"),
        };
        let mut child = cmd.spawn().expect("spawn openshell-gateway");
        let mut line = String::new();
        let _ = std::io::BufReader::new(child.stdout.take().unwrap()).read_line(&mut line);
        match line.trim().strip_prefix("gateway listening on ") {
            Some(endpoint) => {
                assert_eq!(endpoint, self.endpoint, "a restarted gateway listens where it did");
                self.child = Some(child);
                true
            }
            None => {
                let _ = child.kill();
                let _ = child.wait();
                false
            }
        }
    }

    fn kill9(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

impl Drop for Replica {
    fn drop(&mut self) {
        self.kill9();
    }
}

#[derive(Default)]
struct Tally {
    attempts: AtomicUsize,
    admitted: AtomicUsize,
    replayed: AtomicUsize,
    refused: AtomicUsize,
    cut_off: AtomicUsize,
    unavailable: AtomicUsize,
    stops: AtomicUsize,
    grant_updates: AtomicUsize,
    kills: AtomicUsize,
    /// Operations done (the killer picks its moments by progress, not time).
    ops: AtomicUsize,
    answers: Mutex<HashMap<String, String>>,
    splits: Mutex<Vec<String>>,
    odd: Mutex<HashMap<String, usize>>,
}

/// Whether a status is a transport fault (the gateway went away), not an answer.
fn cut_off(s: &tonic::Status) -> bool {
    code(s).starts_with("grpc:")
}

/// Calls `f` on the task's gateway, moving on to the next on a transport fault (a kill),
/// for at most ~30 s.
async fn call<T, F, Fut>(apis: &[Api], home: usize, tally: &Tally, mut f: F) -> Result<T, tonic::Status>
where
    F: FnMut(Api) -> Fut,
    Fut: std::future::Future<Output = Result<T, tonic::Status>>,
{
    let mut g = home;
    for attempt in 0..60 {
        match f(apis[g % apis.len()].clone()).await {
            Err(s) if cut_off(&s) && attempt < 59 => {
                tally.cut_off.fetch_add(1, Ordering::Relaxed);
                g += 1;
                tokio::time::sleep(Duration::from_millis(50 * (attempt as u64 % 10 + 1))).await;
            }
            r => return r,
        }
    }
    unreachable!()
}

async fn ids(sql: &tokio_postgres::Client, q: &str, root: Uuid) -> Vec<(Uuid, String)> {
    match sql.query(q, &[&root]).await {
        Ok(rows) => rows.iter().map(|r| (r.get(0), r.get(1))).collect(),
        Err(_) => Vec::new(),
    }
}

struct Task {
    apis: Arc<Vec<Api>>,
    home: usize,
    roots: Arc<Vec<(Uuid, String)>>,
    sql: tokio_postgres::Client,
    seed: u64,
    ops: usize,
    tag: String,
}

async fn storm_task(t: Task, tally: Arc<Tally>) {
    let mut rng = Rng(t.seed);
    // Earlier creates of this task, to repeat: (request id, parent reference, name, tool).
    let mut issued: Vec<(String, String, String, bool)> = Vec::new();
    for i in 0..t.ops {
        let (root, root_name) = t.roots[rng.next(t.roots.len())].clone();
        match rng.next(20) {
            0 => {
                let live = ids(
                    &t.sql,
                    "SELECT id, name FROM sandboxes WHERE root_id = $1 AND parent_id IS NOT NULL \
                        AND phase IN ('PROVISIONING', 'READY')",
                    root,
                )
                .await;
                if !live.is_empty() {
                    let victim = live[rng.next(live.len())].0.to_string();
                    let r = call(&t.apis, t.home, &tally, |api| {
                        let victim = victim.clone();
                        async move {
                            api.sandboxes().stop_sandbox(api.req(pb::StopSandboxRequest { sandbox: victim })).await
                        }
                    })
                    .await;
                    if r.is_ok() {
                        tally.stops.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }
            1 => {
                let up = pb::UpdateGrantRequest {
                    sandbox: root_name.clone(),
                    max_breadth: Some(1 + rng.next(4) as i32),
                    max_total: Some(2 + rng.next(7) as i32),
                    ..Default::default()
                };
                let r = call(&t.apis, t.home, &tally, |api| {
                    let up = up.clone();
                    async move { api.grants().update_grant(api.req(up)).await }
                })
                .await;
                if r.is_ok() {
                    tally.grant_updates.fetch_add(1, Ordering::Relaxed);
                }
            }
            _ => {
                let (request_id, parent, name, tool) = if !issued.is_empty() && rng.next(5) == 0 {
                    issued[rng.next(issued.len())].clone()
                } else {
                    let parents = ids(
                        &t.sql,
                        "SELECT id, name FROM sandboxes WHERE root_id = $1 AND kind = 'agent' \
                            AND phase IN ('PROVISIONING', 'READY')",
                        root,
                    )
                    .await;
                    let parent = parents.get(rng.next(parents.len())).map(|p| p.1.clone()).unwrap_or(root_name);
                    let req = (format!("{}-{i}", t.tag), parent, format!("c{}-{i}", t.tag), rng.next(4) == 0);
                    issued.push(req.clone());
                    req
                };
                let req = pb::CreateChildSandboxRequest {
                    parent,
                    name,
                    kind: if tool { pb::SandboxKind::Tool } else { pb::SandboxKind::Agent } as i32,
                    command: vec!["sleep".into(), "86400".into()],
                    request_id: request_id.clone(),
                    ..Default::default()
                };
                tally.attempts.fetch_add(1, Ordering::Relaxed);
                let r = call(&t.apis, t.home, &tally, |api| {
                    let req = req.clone();
                    async move { api.child_req(req).await }
                })
                .await;
                match r {
                    Ok(resp) => {
                        let id = resp.sandbox.map(|s| s.id).unwrap_or_default();
                        let mut answers = tally.answers.lock().unwrap();
                        match answers.get(&request_id) {
                            Some(first) if *first != id => {
                                tally.splits.lock().unwrap().push(format!("{request_id}: {first} then {id}"));
                            }
                            Some(_) => {}
                            None => {
                                answers.insert(request_id, id);
                            }
                        }
                        let n = if resp.replayed { &tally.replayed } else { &tally.admitted };
                        n.fetch_add(1, Ordering::Relaxed);
                    }
                    Err(s) => {
                        let c = code(&s);
                        match c.as_str() {
                            "LIMIT_REACHED" | "NOT_ALLOWED" => {}
                            "UNAVAILABLE" => {
                                tally.unavailable.fetch_add(1, Ordering::Relaxed);
                            }
                            _ => *tally.odd.lock().unwrap().entry(format!("{c}: {}", s.message())).or_default() += 1,
                        }
                        tally.refused.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }
        }
        tally.ops.fetch_add(1, Ordering::Relaxed);
    }
}

/// Sandbox ids with a workload of one of `states` on this host: supervisor processes (known
/// by their `--state-dir` and `--sandbox-id`, as the process driver knows them) and sandbox
/// cgroups of `known` (other tests on this host have cgroups of their own).
pub fn workloads(states: &[PathBuf], known: &HashSet<Uuid>) -> HashSet<Uuid> {
    let states: Vec<String> =
        states.iter().map(|s| std::fs::canonicalize(s).unwrap_or(s.clone()).to_string_lossy().into_owned()).collect();
    let mut found = HashSet::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        if entry.file_name().to_str().and_then(|s| s.parse::<u32>().ok()).is_none() {
            continue;
        }
        let zombie = std::fs::read_to_string(entry.path().join("stat"))
            .is_ok_and(|s| s.rfind(')').is_some_and(|i| s[i + 1..].split_whitespace().next() == Some("Z")));
        let Ok(raw) = std::fs::read(entry.path().join("cmdline")) else { continue };
        let args: Vec<&[u8]> = raw.split(|b| *b == 0).collect();
        let value = |flag: &[u8]| args.iter().position(|a| *a == flag).and_then(|i| args.get(i + 1)).copied();
        let ours = value(b"--state-dir").is_some_and(|v| states.iter().any(|s| s.as_bytes() == v));
        if zombie || !ours {
            continue;
        }
        if let Some(id) = value(b"--sandbox-id").and_then(|v| std::str::from_utf8(v).ok()?.parse().ok()) {
            found.insert(id);
        }
    }
    found.extend(openshell_isolation::cgroup::SandboxCgroup::present().into_iter().filter(|id| known.contains(id)));
    found
}

async fn scalar(sql: &tokio_postgres::Client, q: &str) -> i64 {
    sql.query_one(q, &[]).await.unwrap_or_else(|e| panic!("{q}: {e}")).get(0)
}

/// Runs a storm on a fresh database and returns what it found.
pub async fn run(cfg: &Config) -> Report {
    let db = openshell_testkit::fresh_database().await;
    let sql = db.connect().await;
    let logs = TempDir::new("openshell-storm-logs");
    let states: Vec<TempDir> = (0..GATEWAYS).map(|_| TempDir::new("openshell-storm")).collect();
    let state_paths: Vec<PathBuf> = states.iter().map(|s| s.0.clone()).collect();
    let config = logs.0.join("config.json");
    let mut replicas: Vec<Replica> = (0..GATEWAYS)
        .map(|g| {
            let port = free_port();
            Replica {
                listen: format!("127.0.0.1:{port}"),
                endpoint: format!("http://127.0.0.1:{port}"),
                state: state_paths[g].clone(),
                log: logs.0.join(format!("gateway{g}.log")),
                child: None,
            }
        })
        .collect();
    // The first start migrates and makes the admin; the others find both.
    for (g, r) in replicas.iter_mut().enumerate() {
        r.start(&db.url, cfg.provision_timeout, (g == 0).then_some(config.as_path()));
    }
    let token = crate::config_token(&config);
    let mut apis = Vec::new();
    for r in &replicas {
        apis.push(Api::connect(&r.endpoint, Some(&token)).await);
    }
    let apis = Arc::new(apis);

    let mut roots = Vec::new();
    for t in 0..cfg.trees {
        let name = format!("tree{t}");
        // Its main command outlives any storm (a root that exits stops its tree).
        let api = &apis[t % GATEWAYS];
        let req = pb::CreateSandboxRequest {
            name: name.clone(),
            command: vec!["sleep".into(), "86400".into()],
            grant: Some(crate::grant(2, 3, 6)),
            ..Default::default()
        };
        let root = api.sandboxes().create_sandbox(api.req(req)).await.expect("root with a grant").into_inner();
        roots.push((root.sandbox.unwrap().id.parse::<Uuid>().unwrap(), name));
    }
    let roots = Arc::new(roots);

    // The floor: reads through the same clients and gateways, before the storm.
    let floor_started = Instant::now();
    let per = cfg.floor_calls.div_ceil(GATEWAYS * cfg.tasks_per_gateway);
    let mut floor = Vec::new();
    for k in 0..GATEWAYS * cfg.tasks_per_gateway {
        let (api, roots) = (apis[k % GATEWAYS].clone(), roots.clone());
        floor.push(tokio::spawn(async move {
            for i in 0..per {
                api.get(&roots[(k + i) % roots.len()].1).await.expect("floor read");
            }
        }));
    }
    for f in floor {
        f.await.unwrap();
    }
    let floor_per_s = (per * GATEWAYS * cfg.tasks_per_gateway) as f64 / floor_started.elapsed().as_secs_f64();

    let rollbacks_before =
        scalar(&sql, "SELECT xact_rollback FROM pg_stat_database WHERE datname = current_database()").await;
    let tally = Arc::new(Tally::default());
    let tasks = GATEWAYS * cfg.tasks_per_gateway;
    // Creates are 18 of every 20 operations.
    let per_task = (cfg.creates * 20 / 18).div_ceil(tasks);
    let total_ops = per_task * tasks;
    let started = Instant::now();
    let mut handles = Vec::new();
    for k in 0..tasks {
        let task = Task {
            apis: apis.clone(),
            home: k % GATEWAYS,
            roots: roots.clone(),
            sql: db.connect().await,
            seed: cfg.seed.wrapping_mul(0x9e37_79b9_7f4a_7c15).wrapping_add(k as u64 + 1) | 1,
            ops: per_task,
            tag: format!("t{k}"),
        };
        handles.push(tokio::spawn(storm_task(task, tally.clone())));
    }

    // The kills: each gateway `kills_per_gateway` times, at random points between 5% and 90%
    // of the storm's operations, down for 0.1 to 1 s.
    let mut rng = Rng(cfg.seed ^ 0xdead_beef);
    let mut moments: Vec<(usize, usize, u64)> = (0..GATEWAYS * cfg.kills_per_gateway)
        .map(|k| (total_ops * (5 + rng.next(86)) / 100, k % GATEWAYS, 100 + rng.next(900) as u64))
        .collect();
    moments.sort();
    for (at, g, down_ms) in moments {
        while tally.ops.load(Ordering::Relaxed) < at && !handles.iter().all(|h| h.is_finished()) {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        replicas[g].kill9();
        tally.kills.fetch_add(1, Ordering::Relaxed);
        tokio::time::sleep(Duration::from_millis(down_ms)).await;
        let (url, timeout) = (db.url.clone(), cfg.provision_timeout);
        let mut r = std::mem::replace(
            &mut replicas[g],
            Replica {
                listen: String::new(),
                endpoint: String::new(),
                state: PathBuf::new(),
                log: PathBuf::new(),
                child: None,
            },
        );
        r = tokio::task::spawn_blocking(move || {
            r.start(&url, timeout, None);
            r
        })
        .await
        .unwrap();
        replicas[g] = r;
    }
    for h in handles {
        h.await.expect("storm task");
    }
    let storm = started.elapsed();
    let rollbacks = scalar(&sql, "SELECT xact_rollback FROM pg_stat_database WHERE datname = current_database()").await
        - rollbacks_before;

    // Settle: every gateway up, reconcilers at work; then the invariants, with the workloads.
    let settle_started = Instant::now();
    let timeout = format!("{} seconds", cfg.provision_timeout + 2);
    let check = |workloads: Vec<Uuid>| {
        let (sql, timeout) = (&sql, timeout.clone());
        async move {
            sql.query(
                "SELECT invariant, violations, example FROM os_invariants($1::text::interval, $2)",
                &[&timeout, &workloads],
            )
            .await
            .expect("os_invariants")
            .iter()
            .map(|r| (r.get::<_, String>(0), r.get::<_, i64>(1), r.get::<_, Option<String>>(2)))
            .collect::<Vec<_>>()
        }
    };
    let known = || async {
        sql.query("SELECT id FROM sandboxes", &[]).await.unwrap().iter().map(|r| r.get(0)).collect::<HashSet<Uuid>>()
    };
    let (invariants, running) = loop {
        let running: Vec<Uuid> = workloads(&state_paths, &known().await).into_iter().collect();
        let transient =
            scalar(&sql, "SELECT count(*) FROM sandboxes WHERE phase IN ('PROVISIONING', 'STOPPING')").await;
        let found = check(running.clone()).await;
        let clean = found.iter().all(|(_, n, _)| *n == 0);
        if (clean && transient == 0) || settle_started.elapsed() > cfg.settle {
            break (found, running.len());
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    let settled_in = settle_started.elapsed();
    let unrecorded_limits = scalar(
        &sql,
        "SELECT count(*) FROM audit_log WHERE action = 'sandbox.create_child' AND outcome = 'admitted' \
            AND NOT (details ?& array['max_depth', 'max_breadth', 'max_total'])",
    )
    .await;
    let children = scalar(&sql, "SELECT count(*) FROM sandboxes WHERE parent_id IS NOT NULL").await;
    let failed = sql
        .query("SELECT phase_reason, count(*) FROM sandboxes WHERE phase = 'ERROR' GROUP BY 1 ORDER BY 2 DESC", &[])
        .await
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect();

    let t = |a: &AtomicUsize| a.load(Ordering::Relaxed);
    let report = Report {
        attempts: t(&tally.attempts),
        admitted: t(&tally.admitted),
        replayed: t(&tally.replayed),
        refused: t(&tally.refused),
        cut_off: t(&tally.cut_off),
        unavailable: t(&tally.unavailable),
        stops: t(&tally.stops),
        grant_updates: t(&tally.grant_updates),
        kills: t(&tally.kills),
        storm,
        settled_in,
        rollbacks,
        floor_per_s,
        request_id_splits: tally.splits.lock().unwrap().clone(),
        odd_codes: tally.odd.lock().unwrap().clone(),
        invariants,
        unrecorded_limits,
        children,
        workloads: running,
        failed,
    };
    if !report.violations().is_empty() {
        eprintln!("gateway logs kept in {}", logs.0.display());
        std::mem::forget(logs);
    }
    // Gateways first, then the state directories (their drop kills the supervisors).
    drop(replicas);
    drop(states);
    report
}
