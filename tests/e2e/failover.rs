//! Failover: Patroni with etcd (Debian's packages, scripts/setup.d/60-ops.sh) runs a primary
//! and a synchronous standby on loopback; two `openshell-gateway` processes share it through
//! a multi-host URL (`target_session_attrs=read-write`) while a storm of creates, stops and
//! request_id repeats runs across both. The primary's Patroni and postmaster are SIGKILLed;
//! Patroni promotes the standby once the leader key expires. Afterwards, on the new primary:
//! no limit was passed, every admitted child has one receipt and one policy row, no request
//! id produced two children, and every create that returned success is there (synchronous
//! replication). It prints the seconds of unavailability the clients saw, beside the
//! promotion's own time (the floor). `scripts/bench-failover.sh` runs a longer storm.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use openshell_e2e::*;
use openshell_proto::v1 as pb;

const PASSWORD: &str = "failover-test";

struct Ha {
    dir: TempDir,
    etcd: std::process::Child,
    etcd_port: u16,
    nodes: Vec<Node>,
}

struct Node {
    patroni: Option<std::process::Child>,
    port: u16,
    data: PathBuf,
}

/// `program` as the postgres user, itself the child (not under `runuser`, whose death would
/// leave it running) and leading its own process group, which `kill_group` ends whole.
fn as_postgres(program: &str) -> std::process::Command {
    use std::os::unix::process::CommandExt;
    let user = nix::unistd::User::from_name("postgres").unwrap().expect("a postgres user");
    let mut c = std::process::Command::new(program);
    c.uid(user.uid.as_raw()).gid(user.gid.as_raw()).env("HOME", &user.dir).process_group(0);
    c
}

fn kill_group(child: &mut std::process::Child) {
    let group = nix::unistd::Pid::from_raw(child.id() as i32);
    let _ = nix::sys::signal::killpg(group, nix::sys::signal::Signal::SIGKILL);
    let _ = child.wait();
}

impl Ha {
    fn start() -> Ha {
        let dir = TempDir::new("openshell-failover");
        nix::unistd::chown(&dir.0, nix::unistd::User::from_name("postgres").unwrap().map(|u| u.uid), None).unwrap();
        let (etcd_port, peer) = (free_port(), free_port());
        let etcd = as_postgres("etcd")
            .arg(format!("--data-dir={}", dir.0.join("etcd").display()))
            .arg(format!("--listen-client-urls=http://127.0.0.1:{etcd_port}"))
            .arg(format!("--advertise-client-urls=http://127.0.0.1:{etcd_port}"))
            .arg(format!("--listen-peer-urls=http://127.0.0.1:{peer}"))
            .arg(format!("--initial-advertise-peer-urls=http://127.0.0.1:{peer}"))
            .arg(format!("--initial-cluster=default=http://127.0.0.1:{peer}"))
            .stdout(std::process::Stdio::null())
            .stderr(std::fs::File::create(dir.0.join("etcd.log")).unwrap())
            .spawn()
            .expect("etcd (apt-get install etcd-server; scripts/setup.d/60-ops.sh)");
        Ha { dir, etcd, etcd_port, nodes: Vec::new() }
    }

    /// Starts Patroni node `i` (0-based) of the cluster.
    fn add_node(&mut self, i: usize) {
        let (port, rest) = (free_port(), free_port());
        let d = &self.dir.0;
        let data = d.join(format!("data{i}"));
        let config = d.join(format!("node{i}.yml"));
        std::fs::write(
            &config,
            format!(
                "scope: openshell-failover
name: node{i}
restapi: {{listen: '127.0.0.1:{rest}', connect_address: '127.0.0.1:{rest}'}}
etcd3: {{hosts: ['127.0.0.1:{etcd}']}}
bootstrap:
  dcs:
    ttl: 20
    loop_wait: 1
    retry_timeout: 5
    synchronous_mode: true
    postgresql:
      use_pg_rewind: false
      parameters: {{max_connections: 300, wal_level: replica, hot_standby: 'on', max_wal_senders: 5, max_replication_slots: 5}}
  initdb: [{{encoding: UTF8}}]
postgresql:
  listen: '127.0.0.1:{port}'
  connect_address: '127.0.0.1:{port}'
  data_dir: {data}
  bin_dir: /usr/lib/postgresql/15/bin
  pgpass: {d}/pgpass{i}
  authentication:
    superuser: {{username: postgres, password: {PASSWORD}}}
    replication: {{username: replicator, password: {PASSWORD}}}
  pg_hba:
    - local all all trust
    - host all all 127.0.0.1/32 scram-sha-256
    - host replication replicator 127.0.0.1/32 scram-sha-256
  parameters: {{unix_socket_directories: '{d}'}}
",
                etcd = self.etcd_port,
                data = data.display(),
                d = d.display(),
            ),
        )
        .unwrap();
        let patroni = as_postgres("patroni")
            .arg(&config)
            .stdout(std::fs::File::create(d.join(format!("patroni{i}.log"))).unwrap())
            .stderr(std::process::Stdio::inherit())
            .spawn()
            .expect("patroni (apt-get install patroni; scripts/setup.d/60-ops.sh)");
        self.nodes.push(Node { patroni: Some(patroni), port, data });
    }

    fn superuser_url(&self, node: usize, db: &str) -> String {
        format!(
            "host=127.0.0.1 port={} user=postgres password={PASSWORD} dbname={db} connect_timeout=2",
            self.nodes[node].port
        )
    }

    /// Both nodes, as the gateways reach them.
    fn gateway_url(&self) -> String {
        let hosts: Vec<String> = self.nodes.iter().map(|n| format!("127.0.0.1:{}", n.port)).collect();
        format!(
            "postgres://postgres:{PASSWORD}@{}/openshell?target_session_attrs=read-write&connect_timeout=2",
            hosts.join(",")
        )
    }

    async fn query_one(&self, node: usize, sql: &str) -> Option<String> {
        let (client, conn) =
            tokio_postgres::connect(&self.superuser_url(node, "postgres"), tokio_postgres::NoTls).await.ok()?;
        tokio::spawn(conn);
        client.query_one(sql, &[]).await.ok().map(|r| r.get::<_, String>(0))
    }

    /// Waits until node `i` is the primary.
    async fn until_primary(&self, i: usize, within: Duration) -> bool {
        eventually(within, || async {
            self.query_one(i, "SELECT pg_is_in_recovery()::text").await.as_deref() == Some("false")
        })
        .await
    }

    /// Kills node `i`'s Patroni and postmaster (SIGKILL both).
    fn kill(&mut self, i: usize) {
        let node = &mut self.nodes[i];
        let pid = std::fs::read_to_string(node.data.join("postmaster.pid")).unwrap();
        let pid: i32 = pid.lines().next().unwrap().trim().parse().unwrap();
        if let Some(mut p) = node.patroni.take() {
            kill_group(&mut p);
        }
        let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), nix::sys::signal::Signal::SIGKILL);
    }
}

impl Drop for Ha {
    fn drop(&mut self) {
        for n in &mut self.nodes {
            if let Some(mut p) = n.patroni.take() {
                kill_group(&mut p);
            }
            if let Some(pid) = std::fs::read_to_string(n.data.join("postmaster.pid"))
                .ok()
                .and_then(|t| t.lines().next()?.trim().parse::<i32>().ok())
            {
                let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), nix::sys::signal::Signal::SIGKILL);
            }
        }
        kill_group(&mut self.etcd);
    }
}

/// What the storm saw.
#[derive(Default)]
struct Seen {
    /// request id -> the child its create returned.
    admitted: HashMap<String, String>,
    /// Answers to a repeat of a request id that named another child.
    mismatched: Vec<String>,
    unavailable: usize,
    limit_reached: usize,
    stops: usize,
    odd: Vec<String>,
    /// When a create was last refused UNAVAILABLE, and when one was next admitted.
    last_unavailable: Option<Instant>,
    first_ok_after_kill: Option<Instant>,
}

fn env_or(name: &str, default: u64) -> u64 {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_primary_killed_under_a_storm_fails_over_and_loses_nothing() {
    let tasks = env_or("FAILOVER_TASKS", 6) as usize;
    let after = Duration::from_secs(env_or("FAILOVER_SECONDS_AFTER", 6));
    let mut ha = Ha::start();
    ha.add_node(0);
    assert!(ha.until_primary(0, Duration::from_secs(60)).await, "node0 became the primary");
    ha.add_node(1);
    let synced = eventually(Duration::from_secs(60), || async {
        ha.query_one(0, "SELECT coalesce(string_agg(sync_state, ','), '') FROM pg_stat_replication").await.as_deref()
            == Some("sync")
    })
    .await;
    assert!(synced, "node1 streams from node0 as its synchronous standby");
    let (client, conn) =
        tokio_postgres::connect(&ha.superuser_url(0, "postgres"), tokio_postgres::NoTls).await.unwrap();
    tokio::spawn(conn);
    client.batch_execute("CREATE DATABASE openshell").await.unwrap();

    let url = ha.gateway_url();
    let config = ha.dir.0.join("cli.json");
    let flags = ["--driver", "null", "--provision-timeout", "3600", "--reconcile-interval", "1"];
    let g0 = GatewayProcess::spawn(&url, &ha.dir.0.join("g0"), "127.0.0.1:0", Some(&config), &flags);
    let g1 = GatewayProcess::spawn(&url, &ha.dir.0.join("g1"), "127.0.0.1:0", None, &flags);
    let token = config_token(&config);
    let apis = [Api::connect(&g0.endpoint, Some(&token)).await, Api::connect(&g1.endpoint, Some(&token)).await];
    // Fewer live children allowed than tasks creating them: the limits are met under the storm.
    let (max_total, max_breadth) = (4, 4);
    apis[0].root("lead", Some(grant(1, max_breadth, max_total))).await.unwrap();

    let seen = Arc::new(Mutex::new(Seen::default()));
    let killed_at: Arc<Mutex<Option<Instant>>> = Arc::default();
    let stop_at: Arc<Mutex<Option<Instant>>> = Arc::default();
    let storm: Vec<_> = (0..tasks)
        .map(|t| {
            let (apis, seen, killed_at, stop_at) = (apis.clone(), seen.clone(), killed_at.clone(), stop_at.clone());
            tokio::spawn(async move {
                let mut n = 0usize;
                let mut pending: Option<String> = None;
                loop {
                    if stop_at.lock().unwrap().is_some_and(|s| Instant::now() > s) {
                        break;
                    }
                    // A create interrupted by the outage is retried with its request id.
                    let rid = pending.take().unwrap_or_else(|| {
                        n += 1;
                        format!("storm-{t}-{n}")
                    });
                    let api = &apis[(t + n) % 2];
                    let req = pb::CreateChildSandboxRequest {
                        parent: "lead".into(),
                        name: rid.clone(),
                        kind: pb::SandboxKind::Agent as i32,
                        command: vec!["sleep".into(), "600".into()],
                        request_id: rid.clone(),
                        ..Default::default()
                    };
                    match api.child_req(req.clone()).await {
                        Ok(r) => {
                            let id = r.sandbox.unwrap().id;
                            {
                                let mut s = seen.lock().unwrap();
                                if let Some(first) = s.admitted.get(&rid)
                                    && *first != id
                                {
                                    s.mismatched.push(rid.clone());
                                }
                                s.admitted.insert(rid.clone(), id.clone());
                                if killed_at.lock().unwrap().is_some() && s.first_ok_after_kill.is_none() {
                                    s.first_ok_after_kill = Some(Instant::now());
                                }
                            }
                            // Every third create is repeated on the other gateway; each child
                            // is stopped there, making room under the limits again.
                            let other = &apis[(t + n + 1) % 2];
                            if n.is_multiple_of(3)
                                && let Ok(again) = other.child_req(req).await
                                && again.sandbox.unwrap().id != id
                            {
                                seen.lock().unwrap().mismatched.push(rid.clone());
                            }
                            let stop = pb::StopSandboxRequest { sandbox: id };
                            if other.sandboxes().stop_sandbox(other.req(stop)).await.is_ok() {
                                seen.lock().unwrap().stops += 1;
                            }
                        }
                        Err(s) if code(&s) == "UNAVAILABLE" || code(&s).starts_with("grpc:") => {
                            {
                                let mut seen = seen.lock().unwrap();
                                seen.unavailable += 1;
                                seen.last_unavailable = Some(Instant::now());
                            }
                            pending = Some(rid);
                            tokio::time::sleep(Duration::from_millis(100)).await;
                        }
                        Err(s) if code(&s) == "LIMIT_REACHED" => {
                            seen.lock().unwrap().limit_reached += 1;
                            tokio::time::sleep(Duration::from_millis(50)).await;
                        }
                        Err(s) => seen.lock().unwrap().odd.push(format!("{}: {}", code(&s), s.message())),
                    }
                }
            })
        })
        .collect();

    // The storm runs on the first primary, then the primary dies.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let admitted_before = seen.lock().unwrap().admitted.len();
    assert!(admitted_before > 0, "creates were admitted before the kill");
    let kill = Instant::now();
    *killed_at.lock().unwrap() = Some(kill);
    ha.kill(0);
    assert!(ha.until_primary(1, Duration::from_secs(90)).await, "Patroni promoted node1");
    let promoted = kill.elapsed();
    let recovered =
        eventually(Duration::from_secs(60), || async { seen.lock().unwrap().first_ok_after_kill.is_some() }).await;
    assert!(recovered, "the gateways serve again after the failover");
    *stop_at.lock().unwrap() = Some(Instant::now() + after);
    for t in storm {
        t.await.unwrap();
    }

    // Taken out of the lock: the checks below await.
    let s = std::mem::take(&mut *seen.lock().unwrap());
    let unavailable = s.first_ok_after_kill.unwrap().duration_since(kill);
    println!(
        "failover: unavailable {:.1} s (floor: Patroni promoted the standby after {:.1} s; ratio {:.2}); \
         {} admitted, {} stops, {} UNAVAILABLE answers, {} LIMIT_REACHED",
        unavailable.as_secs_f64(),
        promoted.as_secs_f64(),
        unavailable.as_secs_f64() / promoted.as_secs_f64(),
        s.admitted.len(),
        s.stops,
        s.unavailable,
        s.limit_reached
    );
    assert!(s.odd.is_empty(), "unexpected refusals: {:?}", s.odd);
    assert!(s.mismatched.is_empty(), "a request id answered with two children: {:?}", s.mismatched);
    assert!(s.unavailable > 0, "the kill interrupted the storm");
    assert!(s.admitted.len() > admitted_before, "creates were admitted after the failover");

    // On the new primary.
    let (sql, conn) = tokio_postgres::connect(&ha.superuser_url(1, "openshell"), tokio_postgres::NoTls).await.unwrap();
    tokio::spawn(conn);
    let violations = sql
        .query(
            "SELECT invariant, violations, example FROM os_invariants(interval '1 hour', NULL) WHERE violations <> 0",
            &[],
        )
        .await
        .unwrap();
    let violations: Vec<(String, i64, Option<String>)> =
        violations.iter().map(|r| (r.get(0), r.get(1), r.get(2))).collect();
    assert!(violations.is_empty(), "invariants (limits, receipts, policies, request ids): {violations:?}");
    let per_child = count(
        &sql,
        "SELECT count(*) FROM sandboxes s WHERE s.parent_id IS NOT NULL AND (
           (SELECT count(*) FROM audit_log a WHERE a.sandbox_id = s.id AND a.action = 'sandbox.create_child'
               AND a.outcome = 'admitted') <> 1
           OR (SELECT count(*) FROM sandbox_policies p WHERE p.sandbox_id = s.id AND p.version = 1) <> 1)",
    )
    .await;
    assert_eq!(per_child, 0, "every admitted child has exactly one receipt and one first policy row");
    let twice = count(
        &sql,
        "SELECT count(*) FROM (SELECT 1 FROM create_requests GROUP BY caller, request_id HAVING count(*) > 1) d",
    )
    .await;
    assert_eq!(twice, 0, "no request id produced two children");
    for (rid, id) in &s.admitted {
        let rows =
            sql.query("SELECT sandbox_id::text FROM create_requests WHERE request_id = $1", &[rid]).await.unwrap();
        assert_eq!(rows.len(), 1, "{rid}, whose create returned success, is on the new primary");
        assert_eq!(&rows[0].get::<_, String>(0), id, "{rid}");
    }
    let broken = count(&sql, "SELECT count(*) FROM os_verify_audit() WHERE problem IS NOT NULL").await;
    assert_eq!(broken, 0, "the audit chains came through the failover intact");
    drop((g0, g1));
}
