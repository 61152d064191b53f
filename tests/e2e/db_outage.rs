//! The embedded PostgreSQL's postmaster is SIGKILLed (as an OOM kill would) while creates
//! stream in: the gateway restarts it and serves again within seconds, logs the outage once,
//! a running sandbox keeps running with its policy enforced, an interrupted create's retry
//! with the same request_id admits it once, and nothing admitted is lost. When the cluster
//! cannot be restarted, the gateway exits non-zero.

use std::io::BufRead;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use openshell_e2e::*;
use openshell_proto::v1 as pb;

/// The real `openshell-gateway` on its embedded default, its log in a file.
struct Embedded {
    child: std::process::Child,
    endpoint: String,
    state: PathBuf,
    log: PathBuf,
    config: PathBuf,
}

impl Embedded {
    fn start(dir: &Path) -> Embedded {
        let (state, log, config) = (dir.join("state"), dir.join("gateway.log"), dir.join("cli.json"));
        let mut child = std::process::Command::new(bin("openshell-gateway"))
            .args(["--listen", "127.0.0.1:0", "--reconcile-interval", "1", "--state-dir"])
            .arg(&state)
            .env("OPENSHELL_CONFIG", &config)
            .env_remove("OPENSHELL_DATABASE_URL")
            .env("RUST_LOG", "info")
            .stdout(std::process::Stdio::piped())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .expect("spawn openshell-gateway");
        let mut line = String::new();
        std::io::BufReader::new(child.stdout.take().unwrap()).read_line(&mut line).unwrap();
        let endpoint = line.trim().strip_prefix("gateway listening on ").unwrap_or_else(|| {
            panic!("the gateway did not start: {}", std::fs::read_to_string(&log).unwrap_or_default())
        });
        Embedded { endpoint: endpoint.to_string(), child, state, log, config }
    }

    fn data(&self) -> PathBuf {
        postgres_dir(&self.state).join("data")
    }

    fn postmaster(&self) -> i32 {
        let pid = std::fs::read_to_string(self.data().join("postmaster.pid")).unwrap();
        pid.lines().next().unwrap().trim().parse().unwrap()
    }

    /// The cluster's bootstrap superuser, as an operator with the disk would connect.
    async fn superuser(&self) -> tokio_postgres::Client {
        let pid = std::fs::read_to_string(self.data().join("postmaster.pid")).unwrap();
        let port = pid.lines().nth(3).unwrap().trim();
        let password = std::fs::read_to_string(self.state.join("postgres/password")).unwrap();
        let url = format!("host=127.0.0.1 port={port} user=openshell password={} dbname=openshell", password.trim());
        let (client, conn) = tokio_postgres::connect(&url, tokio_postgres::NoTls).await.unwrap();
        tokio::spawn(conn);
        client
    }

    fn log_lines(&self, needle: &str) -> usize {
        std::fs::read_to_string(&self.log).unwrap_or_default().lines().filter(|l| l.contains(needle)).count()
    }
}

impl Drop for Embedded {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        for pid in supervisor_pids(&self.state) {
            kill9(pid);
        }
        // The cluster outlives its gateway by design; the test's must not.
        let _ = std::process::Command::new("runuser")
            .args(["-u", "postgres", "--", "/usr/lib/postgresql/15/bin/pg_ctl", "stop", "-m", "immediate", "-D"])
            .arg(self.data())
            .output();
    }
}

fn kill9(pid: i32) {
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), nix::sys::signal::Signal::SIGKILL).unwrap();
}

/// One create, retried with its request_id while the gateway answers UNAVAILABLE: the child's
/// id and whether any attempt was refused UNAVAILABLE.
async fn create_until_admitted(api: &Api, parent: &str, name: &str, request_id: &str) -> (String, bool) {
    let deadline = Instant::now() + Duration::from_secs(90);
    let mut interrupted = false;
    loop {
        let r = api
            .child_req(pb::CreateChildSandboxRequest {
                parent: parent.into(),
                name: name.into(),
                kind: pb::SandboxKind::Agent as i32,
                command: vec!["sleep".into(), "600".into()],
                request_id: request_id.into(),
                ..Default::default()
            })
            .await;
        match r {
            Ok(r) => return (r.sandbox.unwrap().id, interrupted),
            Err(s) if code(&s) == "UNAVAILABLE" || code(&s) == "grpc:Unavailable" => {
                assert!(Instant::now() < deadline, "still unavailable after 90 s: {s:?}");
                interrupted = true;
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            Err(s) => panic!("{name}: {s:?}"),
        }
    }
}

#[tokio::test]
async fn a_killed_postmaster_is_restarted_and_nothing_admitted_is_lost() {
    let dir = TempDir::new("openshell-outage");
    let gw = Embedded::start(&dir.0);
    let api = Api::connect(&gw.endpoint, Some(&config_token(&gw.config))).await;

    // A lead whose agent keeps trying to read a file outside its policy through the outage.
    let secret = PathBuf::from("/var/tmp").join(format!("openshell-outage-secret-{}", std::process::id()));
    std::fs::write(&secret, "secret").unwrap();
    std::fs::set_permissions(&secret, std::os::unix::fs::PermissionsExt::from_mode(0o644)).unwrap();
    let script = format!(
        "while :; do if cat {} >/dev/null 2>&1; then echo read; else echo denied; fi >> attempts; sleep 0.05; done",
        secret.display()
    );
    let lead = api
        .sandboxes()
        .create_sandbox(api.req(pb::CreateSandboxRequest {
            name: "lead".into(),
            command: vec!["bash".into(), "-c".into(), script],
            policy_yaml: policy_reading(&[]),
            grant: Some(grant(1, 1000, 1000)),
            ..Default::default()
        }))
        .await
        .unwrap()
        .into_inner()
        .sandbox
        .unwrap();
    let attempts = workdir(&gw.state, &lead.id).join("attempts");
    assert!(eventually(Duration::from_secs(30), || async { attempts.exists() }).await, "the lead's agent runs");
    let supervisors_before = supervisor_pids(&gw.state);

    // Two streams of creates; the postmaster dies after the first few are admitted.
    let kill_after = 3;
    let (tx, mut admitted_rx) = tokio::sync::mpsc::unbounded_channel::<()>();
    let streams: Vec<_> = (0..2)
        .map(|s| {
            let (api, tx) = (api.clone(), tx.clone());
            tokio::spawn(async move {
                let mut out = Vec::new();
                for i in 0..8 {
                    let (name, rid) = (format!("c{s}-{i}"), format!("outage-{s}-{i}"));
                    let (id, interrupted) = create_until_admitted(&api, "lead", &name, &rid).await;
                    let _ = tx.send(());
                    out.push((rid, id, interrupted, Instant::now()));
                    tokio::time::sleep(Duration::from_millis(150)).await;
                }
                out
            })
        })
        .collect();
    drop(tx);
    for _ in 0..kill_after {
        admitted_rx.recv().await.unwrap();
    }
    let lead_phase = api.get("lead").await.unwrap().phase;
    let before = gw.postmaster();
    let killed = Instant::now();
    kill9(before);

    // Served again: the next create admitted after the kill, and a fresh postmaster.
    let mut results = Vec::new();
    for s in streams {
        results.extend(s.await.unwrap());
    }
    let recovered = results.iter().filter(|r| r.2).map(|r| r.3).min();
    let recovered = recovered.expect("a create was interrupted by the outage (the kill came mid-stream)");
    let recovery = recovered.duration_since(killed);
    println!("recovery: {:.2} s from SIGKILL to the first interrupted create admitted", recovery.as_secs_f64());
    assert!(recovery < Duration::from_secs(15), "served again within seconds, took {recovery:?}");
    assert_ne!(gw.postmaster(), before, "a new postmaster runs");

    // Nothing admitted is lost; each request id admitted one child, whose id its create returned.
    let sql = gw.superuser().await;
    for (rid, id, _, _) in &results {
        let rows = sql
            .query(
                "SELECT s.id::text FROM create_requests r JOIN sandboxes s ON s.id = r.sandbox_id WHERE r.request_id = $1",
                &[rid],
            )
            .await
            .unwrap();
        assert_eq!(rows.len(), 1, "{rid} admitted once");
        assert_eq!(&rows[0].get::<_, String>(0), id, "{rid}: the retry returned the first result");
        let receipts =
            count(&sql, &format!("SELECT count(*) FROM audit_log WHERE request_id = '{rid}' AND outcome = 'admitted'"))
                .await;
        assert_eq!(receipts, 1, "{rid}: one receipt");
    }
    let children = count(
        &sql,
        &format!("SELECT count(*) FROM sandboxes WHERE parent_id = '{}' AND phase NOT IN ('FAILED')", lead.id),
    )
    .await;
    assert_eq!(children as usize, results.len(), "every admitted child is there, and no other");

    // The lead ran through it, its policy held, and its supervisor is the same process.
    let lines_at_kill = std::fs::read_to_string(&attempts).unwrap().lines().count();
    tokio::time::sleep(Duration::from_millis(500)).await;
    let log = std::fs::read_to_string(&attempts).unwrap();
    assert!(log.lines().count() > lines_at_kill, "the lead's agent still runs");
    assert!(!log.contains("read") && log.contains("denied"), "the policy held throughout");
    let supervisors_after = supervisor_pids(&gw.state);
    assert!(supervisors_before.iter().all(|p| supervisors_after.contains(p)), "no supervisor restarted");
    assert_eq!(api.get("lead").await.unwrap().phase, lead_phase, "the lead's row did not change");

    // One line per outage, not one a second from the loops.
    let log = std::fs::read_to_string(&gw.log).unwrap();
    assert_eq!(gw.log_lines("the embedded PostgreSQL server died"), 1, "{log}");
    assert_eq!(gw.log_lines("the database stopped answering"), 1, "{log}");
    assert_eq!(gw.log_lines("idle stop:") + gw.log_lines("reconcile:"), 0, "{log}");

    let stop = pb::StopSandboxRequest { sandbox: "lead".into() };
    api.sandboxes().stop_sandbox(api.req(stop)).await.unwrap();
    let _ = std::fs::remove_file(&secret);
}

#[tokio::test]
async fn a_cluster_that_cannot_restart_stops_the_gateway_non_zero() {
    let dir = TempDir::new("openshell-outage");
    let mut gw = Embedded::start(&dir.0);
    // Its data can no longer start a server: every restart fails.
    let version = gw.data().join("PG_VERSION");
    std::fs::rename(&version, gw.data().join("PG_VERSION.away")).unwrap();
    kill9(gw.postmaster());
    let started = Instant::now();
    let status = loop {
        if let Some(status) = gw.child.try_wait().unwrap() {
            break status;
        }
        assert!(started.elapsed() < Duration::from_secs(90), "the gateway gave up within 90 s");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    std::fs::rename(gw.data().join("PG_VERSION.away"), &version).unwrap();
    assert!(!status.success(), "{status:?}");
    assert_eq!(gw.log_lines("starts in a row failed"), 1, "{}", std::fs::read_to_string(&gw.log).unwrap());
}
