//! Admission benchmark: child creates through `Store::admit_child` (and through the gateway's
//! gRPC `CreateChildSandbox` with the `NullDriver`, a named fake driver that runs nothing),
//! next to the floor, a bare single-row SERIALIZABLE insert, all in one run against one
//! database.
//!
//! ```sh
//! OPENSHELL_TEST_DATABASE_URL=postgres://postgres@127.0.0.1:55432/postgres \
//!   cargo bench -p openshell-store --bench admission
//! ```
//!
//! Rows:
//!
//! * floor: `INSERT` of one row into a table of the bench's own, one statement per round
//!   trip, through a pool built like the store's (`default_transaction_isolation=serializable`,
//!   cached prepared statement), sequential and with `BENCH_TASKS` tasks;
//! * admission latency on uncontended trees: one task, creates spread over many roots with
//!   large grants, three ways taking turns in one loop (so the machine's drift falls on each
//!   alike): `Store::admit_child`; `Store::create_child` inheriting the parent's policy, the one
//!   SQL call gRPC CreateChild makes, so the gRPC row's gap splits into SQL and the rest; gRPC
//!   `CreateChildSandbox` on an in-process gateway with the NullDriver;
//! * admitted creates per second, `BENCH_TASKS` tasks each on its own tree, through
//!   `Store::admit_child` and through gRPC `CreateChildSandbox` (so the gateway's own overhead
//!   is visible), the two taking turns `BENCH_ROUNDS` times: their ratio is a target, and the
//!   machine's drift then falls on both alike;
//! * admitted creates per second, `BENCH_TASKS` tasks on one tree (limits high enough that
//!   nothing is refused).
//!
//! Retries are counted from `pg_stat_database.xact_rollback` of the bench's own database:
//! every phase runs on a fresh pool that is closed (flushing its backends' statistics)
//! before the counters are read, and every failed attempt of a one-statement transaction
//! is one rollback. Nothing in the bench is refused, so rollbacks are serialization
//! failures (40001) or deadlocks (40P01) that the store retried.
//!
//! Environment: `BENCH_TASKS` (default 32), `BENCH_SEQ` (sequential operations per row,
//! default 2000), `BENCH_PER_TASK` (operations per task in the parallel rows, default 60),
//! `BENCH_ROUNDS` (turns of the two across-trees rows, each `BENCH_PER_TASK` a task, default 4),
//! `BENCH_KEEP_DB=1` keeps the database and prints its URL (for EXPLAIN ANALYZE afterwards),
//! `BENCH_AUDIT_CHAIN=off` disables the audit chain's trigger (its cost: run both in one sitting,
//! or `scripts/bench-audit-chain.sh`).

use std::sync::Arc;
use std::time::{Duration, Instant};

use chrono::Utc;
use deadpool_postgres::{Manager, ManagerConfig, Pool, RecyclingMethod};
use openshell_driver::NullDriver;
use openshell_proto::v1 as pb;
use openshell_proto::v1::sandboxes_client::SandboxesClient;
use openshell_store::{
    AdmissionProof, ChildCreated, ChildPolicy, CreateChild, GrantValues, NewChild, NewRoot, Principal, RootProof,
    Store, Verdict,
};
use sha2::{Digest, Sha256};
use tokio_postgres::NoTls;
use tokio_postgres::error::SqlState;
use tonic::transport::{Channel, Endpoint};

/// Pool size of every store and of the floor's pool (the gateway's default is 32).
const POOL: usize = 64;
const WARMUP: usize = 100;
const PROGRAM: &str = "/usr/bin/python3";
const RUNNER: &str = "bench-null";

struct Config {
    tasks: usize,
    seq: usize,
    per_task: usize,
    rounds: usize,
    keep_db: bool,
}

impl Config {
    fn from_env() -> Config {
        let n = |k: &str, d: usize| std::env::var(k).ok().and_then(|v| v.parse().ok()).unwrap_or(d);
        Config {
            tasks: n("BENCH_TASKS", 32).max(1),
            seq: n("BENCH_SEQ", 2000).max(10),
            per_task: n("BENCH_PER_TASK", 60).max(1),
            rounds: n("BENCH_ROUNDS", 4).max(1),
            keep_db: std::env::var("BENCH_KEEP_DB").is_ok_and(|v| v == "1"),
        }
    }
}

/// What one row of the table measured.
struct Row {
    name: String,
    ops: usize,
    wall: Duration,
    lat: Vec<Duration>,
    retries: Option<i64>,
    /// The floor row this one is compared with (index into the rows).
    floor: Option<usize>,
}

impl Row {
    /// A parallel row, empty, compared with the parallel floor at `floor`.
    fn parallel(name: String, floor: usize) -> Row {
        Row { name, ops: 0, wall: Duration::ZERO, lat: Vec::new(), retries: Some(0), floor: Some(floor) }
    }

    /// One more turn of a parallel row: its wall time, latencies and retries.
    fn add(&mut self, (wall, lat): (Duration, Vec<Duration>), retries: i64) {
        self.ops += lat.len();
        self.wall += wall;
        self.lat.extend(lat);
        self.retries = self.retries.map(|r| r + retries);
    }

    fn pct(&self, p: f64) -> Duration {
        let mut v = self.lat.clone();
        v.sort();
        let i = ((p / 100.0) * v.len() as f64).ceil() as usize;
        v[i.clamp(1, v.len()) - 1]
    }
    fn rate(&self) -> f64 {
        self.ops as f64 / self.wall.as_secs_f64()
    }
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

fn random32() -> [u8; 32] {
    let mut b = [0u8; 32];
    getrandom::fill(&mut b).expect("OS random source");
    b
}

fn sha(s: &str) -> [u8; 32] {
    Sha256::digest(s.as_bytes()).into()
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// A pool with the store's connection settings (see crates/store/src/pool.rs).
fn floor_pool(url: &str) -> Pool {
    let mut config: tokio_postgres::Config = url.parse().expect("database URL");
    config.options("-c default_transaction_isolation=serializable");
    config.application_name("openshell-bench-floor");
    let manager = Manager::from_config(config, NoTls, ManagerConfig { recycling_method: RecyclingMethod::Fast });
    Pool::builder(manager).max_size(POOL).runtime(deadpool_postgres::Runtime::Tokio1).build().expect("pool")
}

const FLOOR_SQL: &str = "INSERT INTO bench_floor (id, payload) VALUES ($1, $2)";

/// One bare single-row insert, its own SERIALIZABLE transaction, retried on 40001 like the store.
async fn floor_insert(pool: &Pool) {
    loop {
        let client = pool.get().await.expect("floor connection");
        let stmt = client.prepare_cached(FLOOR_SQL).await.expect("prepare");
        let id = uuid::Uuid::new_v4();
        match client.execute(&stmt, &[&id, &random32().as_slice()]).await {
            Ok(_) => return,
            Err(e) if e.code() == Some(&SqlState::T_R_SERIALIZATION_FAILURE) => continue,
            Err(e) => panic!("floor insert: {e}"),
        }
    }
}

/// The shared fixtures: the admin principal and the policy every sandbox takes.
struct World {
    url: String,
    admin: Principal,
    admin_token: String,
    policy: serde_json::Value,
    policy_hash: [u8; 32],
    /// Root ids by name: a proof names the parent it was made against.
    roots: std::sync::Mutex<std::collections::HashMap<String, uuid::Uuid>>,
}

impl World {
    async fn root(&self, store: &Store, name: &str) {
        let grant = GrantValues {
            max_depth: 8,
            max_breadth: 10_000,
            max_total: 100_000,
            expires_at: Utc::now() + chrono::Duration::hours(4),
            program: PROGRAM.to_string(),
            tool_idle_seconds: None,
            program_resolved: PROGRAM.to_string(),
            rate: Default::default(),
        };
        let command = vec!["python3".to_string(), "agent.py".to_string()];
        let request_id = format!("root-{name}");
        let args = sha(&format!("{name}|{command:?}|{}", hex(&self.policy_hash)));
        let (sandbox, replayed) = store
            .create_root(
                &self.admin,
                &NewRoot {
                    name,
                    command: &command,
                    policy: &self.policy,
                    policy_hash: &self.policy_hash,
                    credential_hash: &random32(),
                    request_id: Some(&request_id),
                    args_hash: &args,
                    grant: Some(&grant),
                    template: &serde_json::json!({}),
                    runner: RUNNER,
                    proof: RootProof { global_version: 0, verdict: Verdict::NoGlobalMax },
                },
            )
            .await
            .unwrap_or_else(|e| panic!("create_root {name}: {e}"));
        assert!(!replayed);
        self.roots.lock().unwrap().insert(name.to_string(), sandbox.id);
    }

    /// One admitted child under `parent`; its latency.
    async fn child(&self, store: &Store, parent: &str, name: &str) -> Duration {
        let command = vec!["sleep".to_string(), "600".to_string()];
        let request_id = format!("req-{name}");
        let args = sha(&format!("{parent}|{name}|agent|{command:?}"));
        let credential = random32();
        let parent_id = self.roots.lock().unwrap()[parent];
        let proof = AdmissionProof { parent_id, parent_version: 1, global_version: 0, verdict: Verdict::Inherited };
        let started = Instant::now();
        let (_, replayed) = store
            .admit_child(
                &self.admin,
                &NewChild {
                    parent,
                    name: Some(name),
                    kind: openshell_store::Kind::Agent,
                    command: &command,
                    policy: &self.policy,
                    policy_hash: &self.policy_hash,
                    proof,
                    credential_hash: &credential,
                    request_id: Some(&request_id),
                    args_hash: &args,
                    runner: RUNNER,
                    template: None,
                },
            )
            .await
            .unwrap_or_else(|e| panic!("admit_child {name} under {parent}: {e}"));
        let took = started.elapsed();
        assert!(!replayed, "{name} was replayed");
        took
    }

    /// One child through `call` under its `r`th sequential root, named by `tag`; its latency.
    async fn create(&self, call: Call, store: &Store, gateway: &Gateway, r: usize, tag: &str) -> Duration {
        match call {
            Call::Admit => self.child(store, &format!("seq-{r}"), &format!("seq-{tag}")).await,
            Call::Inherit => self.inheriting_child(store, &format!("seq-i{r}"), &format!("seq-i{tag}")).await,
            Call::Grpc => gateway.child(format!("grpc-seq-{r}"), format!("grpc-seq-{tag}")).await,
        }
    }

    /// One child under `parent` through `Store::create_child`, inheriting its parent's policy:
    /// the one SQL call gRPC CreateChild makes (the parent found by name, the whole row
    /// returned); its latency.
    async fn inheriting_child(&self, store: &Store, parent: &str, name: &str) -> Duration {
        let command = vec!["sleep".to_string(), "600".to_string()];
        let request_id = format!("req-{name}");
        let args = sha(&format!("{parent}|{name}|agent|{command:?}|inherit"));
        let credential = random32();
        let started = Instant::now();
        let created = store
            .create_child(
                &self.admin,
                &CreateChild {
                    parent,
                    parent_id: None,
                    door: None,
                    name: Some(name),
                    kind: openshell_store::Kind::Agent,
                    command: &command,
                    policy: ChildPolicy::Inherit,
                    credential_hash: &credential,
                    request_id: Some(&request_id),
                    args_hash: &args,
                    runner: RUNNER,
                    template: None,
                },
            )
            .await
            .unwrap_or_else(|e| panic!("create_child {name} under {parent}: {e}"));
        let took = started.elapsed();
        assert!(matches!(created, ChildCreated::Admitted { replayed: false, .. }), "{name} was not admitted");
        took
    }

    async fn store(&self) -> Store {
        let store = Store::connect(&self.url, POOL).expect("store");
        assert!(store.ping().await);
        store
    }
}

/// The rollback counter of the bench's database. Backends flush their statistics when they
/// exit, or at the latest 10 s after they went idle (PostgreSQL 15's PGSTAT_IDLE_INTERVAL):
/// with `settle`, wait for both (no store connection left, or 10.5 s of quiet).
async fn rollbacks(stats: &tokio_postgres::Client, db: &str, settle: bool) -> i64 {
    let read = || async {
        let row = stats
            .query_one(
                "SELECT xact_rollback, \
                        (SELECT count(*) FROM pg_stat_activity WHERE datname = $1 \
                            AND application_name = 'openshell-gateway') AS busy \
                   FROM pg_stat_database WHERE datname = $1",
                &[&db],
            )
            .await
            .expect("pg_stat_database");
        (row.get::<_, i64>(0), row.get::<_, i64>(1))
    };
    if settle {
        let deadline = Instant::now() + Duration::from_millis(10_500);
        while read().await.1 > 0 && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    read().await.0
}

/// Runs `warm` then `measure` on one fresh store; returns what `measure` returned and the
/// rollbacks (retried serialization failures) during `measure` alone.
async fn measured<W, WF, U, M, MF, T>(
    world: &World,
    stats: &tokio_postgres::Client,
    db: &str,
    warm: W,
    measure: M,
) -> (T, i64)
where
    W: FnOnce(Store) -> WF,
    WF: std::future::Future<Output = U>,
    M: FnOnce(Store) -> MF,
    MF: std::future::Future<Output = T>,
{
    let store = world.store().await;
    let _ = warm(store.clone()).await;
    let r0 = rollbacks(stats, db, true).await;
    let out = measure(store).await; // the store's last clone goes with `measure`
    let r1 = rollbacks(stats, db, true).await;
    (out, r1 - r0)
}

/// `tasks` tasks, each making `each` creates one after another under `parent(task)`; the
/// wall time and every create's latency. Child names are `{parent}-{task}-{tag}{i}`.
async fn creates(
    world: Arc<World>,
    store: Store,
    tasks: usize,
    each: usize,
    parent: impl Fn(usize) -> String,
    tag: String,
) -> (Duration, Vec<Duration>) {
    let jobs: Vec<_> = (0..tasks).map(|t| (world.clone(), store.clone(), parent(t), t)).collect();
    drop(store);
    let mut jobs = jobs.into_iter();
    parallel(tasks, move |_| {
        let (world, store, parent, t) = jobs.next().expect("one job a task");
        let tag = tag.clone();
        async move {
            let mut lat = Vec::with_capacity(each);
            for i in 0..each {
                lat.push(world.child(&store, &parent, &format!("{parent}-{t}-{tag}{i}")).await);
            }
            lat
        }
    })
    .await
}

async fn parallel<F, Fut>(tasks: usize, mut f: F) -> (Duration, Vec<Duration>)
where
    F: FnMut(usize) -> Fut,
    Fut: std::future::Future<Output = Vec<Duration>> + Send + 'static,
{
    let started = Instant::now();
    let handles: Vec<_> = (0..tasks).map(|t| tokio::spawn(f(t))).collect();
    drop(f);
    let mut lat = Vec::new();
    for h in handles {
        lat.extend(h.await.expect("task"));
    }
    (started.elapsed(), lat)
}

async fn run(cfg: Config) {
    let db = openshell_testkit::fresh_database().await;
    let url = db.url.clone();
    let stats = db.connect().await;

    // ---------------------------------------------------------------- setup
    let setup = Store::connect(&url, 4).expect("store");
    setup.migrate().await.expect("migrations");
    let admin_token = format!("osu_{}", hex(&random32()));
    assert!(setup.bootstrap_admin("bench", &sha(&admin_token)).await.expect("bootstrap"));
    let admin = setup.authenticate(&sha(&admin_token)).await.expect("authenticate").expect("admin principal");
    let policy = openshell_policy::Policy::default();
    let world = Arc::new(World {
        url: url.clone(),
        admin,
        admin_token,
        policy: policy.canonical_json(),
        policy_hash: policy.hash(),
        roots: Default::default(),
    });
    stats
        .batch_execute(
            "CREATE TABLE bench_floor (id uuid PRIMARY KEY, payload bytea NOT NULL, \
                                       at timestamptz NOT NULL DEFAULT now())",
        )
        .await
        .expect("floor table");
    // The audit chain's cost (sql/audit.sql): BENCH_AUDIT_CHAIN=off runs the same rows with its
    // trigger disabled, the floor to compare a normal run of the same sitting with.
    if std::env::var("BENCH_AUDIT_CHAIN").as_deref() == Ok("off") {
        stats.batch_execute("ALTER TABLE audit_log DISABLE TRIGGER audit_log_z_link").await.expect("chain off");
        eprintln!("bench: the audit chain's trigger is off (BENCH_AUDIT_CHAIN=off)");
    }
    drop(setup);

    let tasks = cfg.tasks;
    let per_task = cfg.per_task;
    let mut rows: Vec<Row> = Vec::new();
    eprintln!("bench: database {} ({} tasks, {} sequential, {} per task)", db.name, tasks, cfg.seq, per_task);

    // ---------------------------------------------------------------- 1. the floor
    let pool = floor_pool(&url);
    for _ in 0..WARMUP {
        floor_insert(&pool).await;
    }
    let mut lat = Vec::with_capacity(cfg.seq);
    let started = Instant::now();
    for _ in 0..cfg.seq {
        let t = Instant::now();
        floor_insert(&pool).await;
        lat.push(t.elapsed());
    }
    rows.push(Row {
        name: "floor: bare insert, 1 task".into(),
        ops: cfg.seq,
        wall: started.elapsed(),
        lat,
        retries: None,
        floor: None,
    });
    let floor_seq = 0;
    {
        let pool = pool.clone();
        let (wall, lat) = parallel(tasks, move |_| {
            let pool = pool.clone();
            async move {
                let mut lat = Vec::with_capacity(per_task);
                for _ in 0..per_task {
                    let t = Instant::now();
                    floor_insert(&pool).await;
                    lat.push(t.elapsed());
                }
                lat
            }
        })
        .await;
        rows.push(Row {
            name: format!("floor: bare insert, {tasks} tasks"),
            ops: tasks * per_task,
            wall,
            lat,
            retries: None,
            floor: None,
        });
    }
    let floor_par = 1;
    drop(pool);

    // ---------------------------------------------------------------- 2. uncontended latency
    // Creates spread over many roots with large grants (20 children a tree), one at a time,
    // three ways taking turns in one loop, so that the machine's drift falls on all three
    // alike: admit_child; the one SQL call gRPC CreateChild makes (what the thin path's gap is
    // made of); gRPC CreateChild itself.
    let roots = cfg.seq.div_ceil(20).max(1);
    {
        let store = world.store().await;
        for r in 0..roots {
            world.root(&store, &format!("seq-{r}")).await;
            world.root(&store, &format!("seq-i{r}")).await;
            world.root(&store, &format!("grpc-seq-{r}")).await;
        }
        for t in 0..tasks {
            world.root(&store, &format!("grpc-par-{t}")).await;
        }
    }
    let gateway = Gateway::start(&world).await;
    let w = world.clone();
    let g = &gateway;
    let warm = move |store: Store| async move {
        for i in 0..WARMUP {
            for call in Call::ALL {
                w.create(call, &store, g, i % roots, &format!("warm-{i}")).await;
            }
        }
    };
    let w = world.clone();
    let measure = move |store: Store| async move {
        let mut lat: [Vec<Duration>; 3] = std::array::from_fn(|_| Vec::with_capacity(cfg.seq));
        for i in 0..cfg.seq {
            // Each call goes first, second and third in turn.
            for k in 0..Call::ALL.len() {
                let call = Call::ALL[(i + k) % Call::ALL.len()];
                lat[call as usize].push(w.create(call, &store, g, i % roots, &format!("c{i}")).await);
            }
        }
        lat
    };
    let (lat, retries) = measured(&world, &stats, &db.name, warm, measure).await;
    for (call, lat) in Call::ALL.into_iter().zip(lat) {
        rows.push(Row {
            name: format!("{}, 1 task ({roots} trees)", call.label()),
            ops: cfg.seq,
            // Its own share of the loop's time.
            wall: lat.iter().sum(),
            lat,
            // The loop's retries, on its first row.
            retries: matches!(call, Call::Admit).then_some(retries),
            floor: Some(floor_seq),
        });
    }

    // ---------------------------------------------------------------- 3. many trees in parallel
    // admit_child and gRPC CreateChild, each task on its own tree, take turns `rounds` times,
    // so that the machine's drift falls on both alike: their ratio is a target.
    {
        let store = world.store().await;
        for t in 0..tasks {
            world.root(&store, &format!("par-{t}")).await;
        }
    }
    grpc_creates(&gateway.client, &gateway.token, tasks, 2, "grpc-par", "warm").await;
    let mut admit = Row::parallel(format!("admit_child, {tasks} tasks, own tree each"), floor_par);
    let mut grpc = Row::parallel(format!("gRPC CreateChild, NullDriver, {tasks} tasks, own tree each"), floor_par);
    for round in 0..cfg.rounds {
        let tag = format!("c{round}-");
        let (timed, retries) = measured(
            &world,
            &stats,
            &db.name,
            |store| creates(world.clone(), store, tasks, 2, |t| format!("par-{t}"), format!("warm{round}-")),
            |store| creates(world.clone(), store, tasks, per_task, |t| format!("par-{t}"), tag.clone()),
        )
        .await;
        admit.add(timed, retries);
        let r0 = rollbacks(&stats, &db.name, true).await;
        let timed = grpc_creates(&gateway.client, &gateway.token, tasks, per_task, "grpc-par", &tag).await;
        grpc.add(timed, rollbacks(&stats, &db.name, true).await - r0);
    }
    rows.push(admit);

    // ---------------------------------------------------------------- 4. one contended tree
    {
        let store = world.store().await;
        world.root(&store, "hot").await;
    }
    let ((wall, lat), retries) = measured(
        &world,
        &stats,
        &db.name,
        |store| creates(world.clone(), store, tasks, 2, |_| "hot".to_string(), "warm".into()),
        |store| creates(world.clone(), store, tasks, per_task, |_| "hot".to_string(), "c".into()),
    )
    .await;
    rows.push(Row {
        name: format!("admit_child, {tasks} tasks, one tree"),
        ops: tasks * per_task,
        wall,
        lat,
        retries: Some(retries),
        floor: Some(floor_par),
    });

    rows.push(grpc);
    gateway.stop().await;

    // ---------------------------------------------------------------- the table
    print_table(&rows, tasks);
    let total: i64 = stats
        .query_one("SELECT count(*) FROM sandboxes WHERE parent_id IS NOT NULL AND phase = 'PROVISIONING'", &[])
        .await
        .expect("count")
        .get(0);
    let refused: i64 =
        stats.query_one("SELECT count(*) FROM audit_log WHERE outcome = 'refused'", &[]).await.expect("count").get(0);
    println!("children admitted in the database: {total}; refusals recorded: {refused}");
    if cfg.keep_db {
        println!("database kept: {}", db.url);
        std::mem::forget(db);
    }
}

/// How a sequential row admits a child: `Store::admit_child` with its proof,
/// `Store::create_child` inheriting the parent's policy, or gRPC CreateChildSandbox.
#[derive(Clone, Copy)]
enum Call {
    Admit,
    Inherit,
    Grpc,
}

impl Call {
    const ALL: [Call; 3] = [Call::Admit, Call::Inherit, Call::Grpc];

    fn label(self) -> &'static str {
        match self {
            Call::Admit => "admit_child",
            Call::Inherit => "create_child (inherit)",
            Call::Grpc => "gRPC CreateChild, NullDriver",
        }
    }
}

/// The gateway in this process, with the NullDriver, and a client of it as the admin user.
struct Gateway {
    running: openshell_gateway::startup::Running,
    client: SandboxesClient<Channel>,
    token: Arc<str>,
    state: std::path::PathBuf,
}

impl Gateway {
    async fn start(world: &World) -> Gateway {
        let state = std::env::temp_dir().join(format!("openshell-bench-{}", std::process::id()));
        let mut opts = openshell_gateway::startup::Options::new(Some(world.url.clone()), state.clone());
        opts.listen = "127.0.0.1:0".parse().expect("address");
        opts.no_client_config = true;
        opts.max_connections = POOL;
        opts.allow_superuser = true;
        let running = openshell_gateway::startup::start_with_driver(&opts, Some(Arc::new(NullDriver::default())))
            .await
            .expect("gateway starts");
        let channel =
            Endpoint::from_shared(running.endpoint.clone()).expect("endpoint").connect().await.expect("connect");
        Gateway { running, client: SandboxesClient::new(channel), token: world.admin_token.as_str().into(), state }
    }

    async fn child(&self, parent: String, name: String) -> Duration {
        grpc_child(self.client.clone(), self.token.clone(), parent, name).await
    }

    async fn stop(self) {
        drop(self.client);
        self.running.shutdown().await.expect("gateway shutdown");
        let _ = std::fs::remove_dir_all(&self.state);
    }
}

/// One CreateChildSandbox call as the admin user; its latency.
async fn grpc_child(mut client: SandboxesClient<Channel>, token: Arc<str>, parent: String, name: String) -> Duration {
    let mut req = tonic::Request::new(pb::CreateChildSandboxRequest {
        parent,
        name: name.clone(),
        kind: pb::SandboxKind::Agent as i32,
        command: vec!["sleep".into(), "600".into()],
        policy_yaml: String::new(),
        request_id: format!("req-{name}"),
        template: None,
        env: Default::default(),
    });
    req.metadata_mut().insert("authorization", format!("Bearer {token}").parse().expect("header"));
    let started = Instant::now();
    let resp = client.create_child_sandbox(req).await.unwrap_or_else(|s| panic!("CreateChildSandbox {name}: {s:?}"));
    let took = started.elapsed();
    assert!(!resp.into_inner().replayed, "{name} was replayed");
    took
}

/// `tasks` tasks, each making `each` gRPC creates under its own tree `{prefix}-{task}`.
async fn grpc_creates(
    client: &SandboxesClient<Channel>,
    token: &Arc<str>,
    tasks: usize,
    each: usize,
    prefix: &str,
    tag: &str,
) -> (Duration, Vec<Duration>) {
    parallel(tasks, |t| {
        let (client, token) = (client.clone(), token.clone());
        let parent = format!("{prefix}-{t}");
        let tag = tag.to_string();
        async move {
            let mut lat = Vec::with_capacity(each);
            for i in 0..each {
                lat.push(grpc_child(client.clone(), token.clone(), parent.clone(), format!("{parent}-{tag}{i}")).await);
            }
            lat
        }
    })
    .await
}

fn print_table(rows: &[Row], tasks: usize) {
    println!();
    println!(
        "{:<52} {:>6} {:>8} {:>8} {:>9} {:>8} {:>10} {:>8}",
        "row", "ops", "p50 ms", "p99 ms", "ops/s", "retries", "p99/floor", "x floor/s"
    );
    println!("{}", "-".repeat(116));
    for r in rows {
        let (p99r, rater) = match r.floor {
            Some(f) => {
                (format!("{:.2}", ms(r.pct(99.0)) / ms(rows[f].pct(99.0))), format!("{:.3}", r.rate() / rows[f].rate()))
            }
            None => ("-".into(), "-".into()),
        };
        println!(
            "{:<52} {:>6} {:>8.3} {:>8.3} {:>9.0} {:>8} {:>10} {:>8}",
            r.name,
            r.ops,
            ms(r.pct(50.0)),
            ms(r.pct(99.0)),
            r.rate(),
            r.retries.map_or("-".to_string(), |n| n.to_string()),
            p99r,
            rater
        );
    }
    println!();
    println!("ratios: sequential rows against the 1-task floor, parallel rows against the {tasks}-task floor.");
    let seq = rows.iter().find(|r| r.name.starts_with("admit_child, 1 task"));
    let par = rows.iter().find(|r| r.name.contains("own tree each") && r.name.starts_with("admit_child"));
    let one = rows.iter().find(|r| r.name.contains("one tree") && r.name.starts_with("admit_child"));
    let retry_pct = |r: &Row| 100.0 * r.retries.unwrap_or(0) as f64 / (r.ops as f64 + r.retries.unwrap_or(0) as f64);
    if let (Some(seq), Some(par), Some(one)) = (seq, par, one) {
        let p99 = ms(seq.pct(99.0)) / ms(rows[0].pct(99.0));
        let x = par.rate() / rows[1].rate();
        let met = |b: bool| if b { "met" } else { "MISSED" };
        println!("sequential admission p99: {p99:.2}x the floor");
        // The regression guard of issue 18 (the 0.3x target was retired as blocked).
        println!(
            "across trees: {x:.3}x the {tasks}-task floor -> {} (guard 0.1x); retries {:.2}% of attempts -> {} (guard 2%)",
            met(x >= 0.1),
            retry_pct(par),
            met(retry_pct(par) < 2.0)
        );
        println!(
            "one tree: {:.0}/s -> {} (target 470/s); retries {:.2}% of attempts",
            one.rate(),
            met(one.rate() >= 470.0),
            retry_pct(one)
        );
        // The thin create path: gRPC CreateChild against admit_child alone, same run.
        let grpc_seq = rows.iter().find(|r| r.name.starts_with("gRPC CreateChild") && r.name.contains("1 task"));
        let grpc_par = rows.iter().find(|r| r.name.starts_with("gRPC CreateChild") && r.name.contains("own tree each"));
        if let (Some(gs), Some(gp)) = (grpc_seq, grpc_par) {
            let p50 = ms(gs.pct(50.0)) / ms(seq.pct(50.0));
            let rate = gp.rate() / par.rate();
            println!("gRPC CreateChild p50: {p50:.2}x admit_child's -> {} (target 2x)", met(p50 <= 2.0));
            if let Some(call) = rows.iter().find(|r| r.name.starts_with("create_child (inherit)")) {
                let (sql, all) = (ms(call.pct(50.0)), ms(gs.pct(50.0)));
                println!(
                    "  of its p50: the create_child call {sql:.3} ms ({:.2}x admit_child's), the rest (gRPC, gateway) \
                     {:.3} ms",
                    sql / ms(seq.pct(50.0)),
                    all - sql
                );
            }
            println!(
                "gRPC CreateChild across trees: {rate:.2}x admit_child's throughput -> {} (target 0.7x); retries {:.2}%",
                met(rate >= 0.7),
                retry_pct(gp)
            );
        }
    }
}

fn main() {
    let cfg = Config::from_env();
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().expect("runtime");
    rt.block_on(run(cfg));
}
