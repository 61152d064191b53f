//! The lifecycle through the real process driver: READY once the supervisor connects, the
//! main command's exit reported, stops cascading deepest first, and a gateway killed
//! mid-create or mid-cascade leaving no orphan and no half-recorded child after restart.
//!
//! Each test runs again on the real container driver (podman; its `container` case): a
//! supervisor killed there is its container killed behind the gateway's back.

use std::time::Duration;

use openshell_e2e::*;
use openshell_proto::v1 as pb;
use rstest::rstest;

fn sh(script: &str) -> Vec<String> {
    vec!["/bin/sh".into(), "-c".into(), script.into()]
}

async fn root_running(on: Backend, api: &Api, name: &str, script: &str, g: Option<pb::GrantSpec>) -> pb::Sandbox {
    let req = pb::CreateSandboxRequest {
        name: name.into(),
        command: sh(script),
        grant: g,
        template: on.template(None),
        ..Default::default()
    };
    api.sandboxes().create_sandbox(api.req(req)).await.unwrap().into_inner().sandbox.unwrap()
}

async fn child_running(api: &Api, parent: &str, name: &str, script: &str) -> pb::Sandbox {
    let req = pb::CreateChildSandboxRequest {
        parent: parent.into(),
        name: name.into(),
        command: sh(script),
        ..Default::default()
    };
    api.child_req(req).await.unwrap().sandbox.unwrap()
}

async fn phase_becomes(api: &Api, name: &str, phase: &str) -> pb::Sandbox {
    let ok =
        eventually(Duration::from_secs(20), || async { api.get(name).await.is_ok_and(|s| s.phase == phase) }).await;
    let s = api.get(name).await.unwrap();
    assert!(ok, "{name} should become {phase}: {s:?}");
    s
}

#[rstest]
#[case::process(Backend::Process)]
#[case::container(Backend::Container)]
#[tokio::test]
async fn ready_once_running_and_the_credential_never_reaches_the_main_command(#[case] on: Backend) {
    let h = Harness::on(on, |_| {}).await;
    let a = h.admin().await;
    // The main command looks for the credential everywhere it could: its environment, its
    // arguments, the supervisor's environment and arguments.
    let script = "env > env.txt; cat /proc/$PPID/environ > parent_env.txt; \
                  tr '\\0' ' ' < /proc/$PPID/cmdline > parent_cmd.txt; cat /proc/self/cmdline > self_cmd.txt; \
                  touch done; sleep 600";
    let s = root_running(on, &a, "lead", script, None).await;
    phase_becomes(&a, "lead", "READY").await;
    let work = h.workdir(&s.id);
    assert!(eventually(Duration::from_secs(10), || async { work.join("done").exists() }).await);
    let env = std::fs::read_to_string(work.join("env.txt")).unwrap();
    assert!(env.contains(&format!("OPENSHELL_SANDBOX_ID={}", s.id)), "{env}");
    for f in ["env.txt", "parent_env.txt", "parent_cmd.txt", "self_cmd.txt"] {
        let text = String::from_utf8_lossy(&std::fs::read(work.join(f)).unwrap()).into_owned();
        assert!(!text.contains("oss_"), "{f} holds a sandbox credential: {text}");
        assert!(!text.contains(&h.db.url), "{f} holds the database URL: {text}");
        assert!(!text.contains("OPENSHELL_TEST_DATABASE_URL"), "{f} inherited the gateway's environment");
    }
    // The credential is stored hashed: no row holds it in clear.
    let sql = h.sql().await;
    let hashed =
        count(&sql, "SELECT count(*) FROM sandboxes WHERE length(credential_hash) = 32 AND name = 'lead'").await;
    assert_eq!(hashed, 1);
    assert_eq!(supervisor_pids(&h.state.0).len(), 1);
}

#[rstest]
#[case::process(Backend::Process)]
#[case::container(Backend::Container)]
#[tokio::test]
async fn the_main_command_exit_is_reported_and_stops_its_subtree(#[case] on: Backend) {
    let h = Harness::on(on, |_| {}).await;
    let a = h.admin().await;
    root_running(on, &a, "lead", "sleep 600", Some(grant(2, 5, 5))).await;
    phase_becomes(&a, "lead", "READY").await;
    child_running(&a, "lead", "worker", "while [ ! -e go ]; do sleep 0.05; done; exit 7").await;
    child_running(&a, "worker", "helper", "sleep 600").await;
    phase_becomes(&a, "helper", "READY").await;
    let worker = a.get("worker").await.unwrap();
    std::fs::write(h.workdir(&worker.id).join("go"), "").unwrap();
    let w = phase_becomes(&a, "worker", "STOPPED").await;
    assert_eq!(w.exit_code, Some(7));
    assert!(w.phase_reason.contains("exited with code 7"), "{w:?}");
    let helper = phase_becomes(&a, "helper", "STOPPED").await;
    assert!(helper.phase_reason.contains("ancestor worker"), "{helper:?}");
    assert_eq!(a.get("lead").await.unwrap().phase, "READY");
    let actions: Vec<_> = a.audit_of("lead").await.into_iter().map(|e| (e.action, e.sandbox_name)).collect();
    assert!(actions.contains(&("sandbox.exit".to_string(), "worker".to_string())), "{actions:?}");
    assert!(eventually(Duration::from_secs(10), || async { supervisor_pids(&h.state.0).len() == 1 }).await);
}

#[rstest]
#[case::process(Backend::Process)]
#[case::container(Backend::Container)]
#[tokio::test]
async fn stop_cascades_deepest_first_and_leaves_no_process(#[case] on: Backend) {
    let h = Harness::on(on, |_| {}).await;
    let a = h.admin().await;
    root_running(on, &a, "lead", "sleep 600", Some(grant(3, 5, 10))).await;
    phase_becomes(&a, "lead", "READY").await;
    child_running(&a, "lead", "a", "sleep 600").await;
    child_running(&a, "lead", "b", "trap '' TERM; sleep 600").await;
    child_running(&a, "a", "a1", "sleep 600").await;
    child_running(&a, "a1", "a11", "sleep 600").await;
    for n in ["a", "b", "a1", "a11"] {
        phase_becomes(&a, n, "READY").await;
    }
    assert_eq!(supervisor_pids(&h.state.0).len(), 5);
    let stopped = a
        .sandboxes()
        .stop_sandbox(a.req(pb::StopSandboxRequest { sandbox: "lead".into() }))
        .await
        .unwrap()
        .into_inner()
        .stopped;
    let depths: Vec<i32> = stopped.iter().map(|s| s.depth).collect();
    assert!(depths.windows(2).all(|w| w[0] >= w[1]), "deepest first: {depths:?}");
    assert!(stopped.iter().all(|s| s.phase == "STOPPED"), "{stopped:?}");
    assert!(supervisor_pids(&h.state.0).is_empty(), "no supervisor survives the stop");
    // The receipts show each sandbox stopped only after every descendant of it was.
    let order: Vec<String> = a
        .audit_of("lead")
        .await
        .into_iter()
        .rev()
        .filter(|e| e.action == "sandbox.stopped")
        .map(|e| e.sandbox_name)
        .collect();
    let pos = |n: &str| order.iter().position(|x| x == n).unwrap_or_else(|| panic!("{n} not stopped: {order:?}"));
    assert!(
        pos("a11") < pos("a1") && pos("a1") < pos("a") && pos("a") < pos("lead") && pos("b") < pos("lead"),
        "{order:?}"
    );
    // A delete marks them DELETED and keeps the rows.
    a.sandboxes().delete_sandbox(a.req(pb::DeleteSandboxRequest { sandbox: "lead".into() })).await.unwrap();
    let phases: Vec<String> = h
        .sql()
        .await
        .query("SELECT phase FROM sandboxes ORDER BY depth", &[])
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(phases, vec!["DELETED"; 5]);
}

/// A crash rig: the real gateway binary with the process driver on a fresh database, on a
/// fixed port so a restart is found by the supervisors of the run it replaces.
struct Rig {
    db: openshell_testkit::TestDb,
    state: TempDir,
    config: std::path::PathBuf,
    listen: String,
    on: Backend,
}

impl Rig {
    async fn new(on: Backend) -> Rig {
        let state = TempDir::new("openshell-crash");
        let config = state.0.join("config.json");
        Rig {
            db: openshell_testkit::fresh_database().await,
            state,
            config,
            listen: format!("127.0.0.1:{}", free_port()),
            on,
        }
    }

    fn start(&self) -> GatewayProcess {
        let mut flags = vec!["--stop-grace", "3", "--provision-timeout", "2", "--reconcile-interval", "1"];
        let host = container_host();
        if self.on.is_container() {
            mark_containers(&self.state.0);
            flags.extend(["--driver", "container", "--container-host", host.as_str()]);
        }
        GatewayProcess::spawn(&self.db.url, &self.state.0, &self.listen, Some(&self.config), &flags)
    }

    async fn admin(&self) -> Api {
        Api::connect(&format!("http://{}", self.listen), Some(&config_token(&self.config))).await
    }
}

#[rstest]
#[case::process(Backend::Process)]
#[case::container(Backend::Container)]
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_gateway_killed_mid_cascade_finishes_the_stop_after_restart(#[case] on: Backend) {
    let rig = Rig::new(on).await;
    let (db, state) = (&rig.db, &rig.state);
    let gw = rig.start();
    let a = rig.admin().await;
    root_running(on, &a, "lead", "sleep 600", Some(grant(3, 5, 10))).await;
    // The deepest level ignores TERM, so its stop takes the whole grace period.
    child_running(&a, "lead", "mid", "sleep 600").await;
    child_running(&a, "mid", "deep", "trap '' TERM; sleep 600").await;
    for n in ["lead", "mid", "deep"] {
        phase_becomes(&a, n, "READY").await;
    }
    let stopper = {
        let a = a.clone();
        tokio::spawn(async move {
            a.sandboxes().stop_sandbox(a.req(pb::StopSandboxRequest { sandbox: "lead".into() })).await
        })
    };
    let sql = db.connect().await;
    let all_stopping = eventually(Duration::from_secs(5), || async {
        let n = count(&sql, "SELECT count(*) FROM sandboxes WHERE phase = 'STOPPING'").await;
        n == 3
    })
    .await;
    assert!(all_stopping, "one transaction marks the whole subtree");
    tokio::time::sleep(Duration::from_millis(300)).await;
    gw.kill9();
    assert!(stopper.await.unwrap().is_err(), "the caller sees the gateway die");
    // The upper levels are still running, marked STOPPING, their supervisors alive.
    assert!(supervisor_pids(&state.0).len() >= 2, "supervisors outlive the gateway");

    let _gw = rig.start();
    let done = eventually(Duration::from_secs(30), || async {
        let n = count(&sql, "SELECT count(*) FROM sandboxes WHERE phase <> 'STOPPED'").await;
        n == 0
    })
    .await;
    assert!(done, "the reconciler finishes the stop");
    assert!(eventually(Duration::from_secs(5), || async { supervisor_pids(&state.0).is_empty() }).await, "no orphan");
    let order: Vec<String> = sql
        .query("SELECT s.name FROM audit_log a JOIN sandboxes s ON s.id = a.sandbox_id WHERE a.action = 'sandbox.stopped' ORDER BY a.id", &[])
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(order, ["deep", "mid", "lead"]);
}

#[rstest]
#[case::process(Backend::Process)]
#[case::container(Backend::Container)]
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_gateway_killed_mid_create_leaves_no_orphan_and_no_half_recorded_child(#[case] on: Backend) {
    let rig = Rig::new(on).await;
    let (db, state) = (&rig.db, &rig.state);
    let gw = rig.start();
    let a = rig.admin().await;
    root_running(on, &a, "lead", "sleep 600", Some(grant(1, 40, 40))).await;
    phase_becomes(&a, "lead", "READY").await;
    let creates: Vec<_> = (0..20)
        .map(|i| {
            let a = a.clone();
            tokio::spawn(async move { a.child("lead", &format!("c{i}"), false).await })
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(40)).await;
    gw.kill9();
    for c in creates {
        let _ = c.await;
    }
    // A workload whose row never committed, as a crash between spawn and commit would leave
    // (a process driver's: the container driver's own orphans are the creates cut off above).
    let stray = uuid::Uuid::new_v4();
    let mut orphan = (!on.is_container()).then(|| {
        let mut orphan = std::process::Command::new(bin("openshell-supervisor"))
            .args(["--sandbox-id", &stray.to_string(), "--state-dir"])
            .arg(std::fs::canonicalize(&state.0).unwrap())
            .args(["--gateway", "http://127.0.0.1:9", "--", "sleep", "600"])
            .stdin(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        use std::io::Write;
        // It may have given up already (no uid lock on descriptor 3): a closed pipe then.
        let _ = orphan.stdin.take().unwrap().write_all(b"oss_not-a-real-credential\n");
        orphan
    });

    let _gw = rig.start();
    let sql = db.connect().await;
    // Every row settles: READY with a running supervisor, or ERROR; nothing stays
    // PROVISIONING, and every supervisor belongs to a live row.
    let settled = eventually(Duration::from_secs(30), || async {
        let n = count(&sql, "SELECT count(*) FROM sandboxes WHERE phase = 'PROVISIONING'").await;
        n == 0
    })
    .await;
    assert!(settled, "no child stays half-created");
    if let Some(orphan) = orphan.as_mut() {
        let _ = orphan.wait();
    }
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let ready = count(&sql, "SELECT count(*) FROM sandboxes WHERE phase = 'READY'").await;
    let pids = supervisor_pids(&state.0);
    assert_eq!(pids.len() as i64, ready, "one supervisor per READY sandbox, no orphan (stray {stray})");
    let rows = count(&sql, "SELECT count(*) FROM sandboxes").await;
    let policies = count(&sql, "SELECT count(*) FROM sandbox_policies").await;
    let receipts = count(&sql, "SELECT count(*) FROM audit_log WHERE action IN ('sandbox.create', 'sandbox.create_child') AND outcome = 'admitted'").await;
    assert_eq!(policies, rows, "every child has its policy");
    assert_eq!(receipts, rows, "every child has its receipt");
}

/// Processes carrying a sandbox's id in their environment (an independent /proc scan).
fn processes_of(id: &str) -> Vec<i32> {
    let marker = format!("OPENSHELL_SANDBOX_ID={id}");
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| {
            let zombie = std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| s.contains(") Z "));
            !zombie
                && std::fs::read(format!("/proc/{pid}/environ"))
                    .is_ok_and(|env| env.split(|b| *b == 0).any(|v| v == marker.as_bytes()))
        })
        .collect()
}

#[rstest]
#[case::process(Backend::Process)]
#[case::container(Backend::Container)]
#[tokio::test]
async fn nothing_a_sandbox_started_outlives_it_not_even_daemons(#[case] on: Backend) {
    let h = Harness::on(on, |_| {}).await;
    let a = h.admin().await;
    // A main command that leaves background and setsid'd daemons behind, then exits.
    let exits =
        root_running(on, &a, "exits", "sleep 1000 & setsid sleep 1001 & touch started; sleep 0.5; exit 0", None).await;
    // One that daemonizes and keeps running until stopped.
    let stopped = root_running(on, &a, "stopped", "setsid sh -c 'sleep 1002' & (sleep 1003 &) ; sleep 600", None).await;
    phase_becomes(&a, "stopped", "READY").await;
    assert!(eventually(Duration::from_secs(10), || async { processes_of(&stopped.id).len() >= 3 }).await);
    phase_becomes(&a, "exits", "STOPPED").await;
    assert!(
        eventually(Duration::from_secs(5), || async { processes_of(&exits.id).is_empty() }).await,
        "left behind: {:?}",
        processes_of(&exits.id)
    );
    a.sandboxes().stop_sandbox(a.req(pb::StopSandboxRequest { sandbox: "stopped".into() })).await.unwrap();
    assert_eq!(processes_of(&stopped.id), Vec::<i32>::new());
}

#[rstest]
#[case::process(Backend::Process)]
#[case::container(Backend::Container)]
#[tokio::test]
async fn a_killed_supervisor_leaves_nothing_running_and_its_subtree_stops(#[case] on: Backend) {
    let h = Harness::on(on, |o| o.reconcile_interval = 1).await;
    let a = h.admin().await;
    let lead = root_running(on, &a, "lead", "setsid sleep 1004 & sleep 600", Some(grant(1, 5, 5))).await;
    phase_becomes(&a, "lead", "READY").await;
    child_running(&a, "lead", "worker", "sleep 600").await;
    phase_becomes(&a, "worker", "READY").await;
    assert!(eventually(Duration::from_secs(10), || async { processes_of(&lead.id).len() >= 2 }).await);
    // The supervisor dies without a word (OOM killer, operator, crash).
    let pid = supervisor_pids(&h.state.0)
        .into_iter()
        .find(|p| std::fs::read_to_string(format!("/proc/{p}/cmdline")).unwrap().contains(&lead.id))
        .unwrap();
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), nix::sys::signal::Signal::SIGKILL).unwrap();
    let l = phase_becomes(&a, "lead", "ERROR").await;
    assert!(l.phase_reason.contains("gone"), "{l:?}");
    phase_becomes(&a, "worker", "STOPPED").await;
    assert!(
        eventually(Duration::from_secs(10), || async { processes_of(&lead.id).is_empty() }).await,
        "the daemon the lost sandbox left is killed: {:?}",
        processes_of(&lead.id)
    );
    assert!(supervisor_pids(&h.state.0).is_empty());
}
