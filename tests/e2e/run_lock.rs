//! The process driver's run locks (`STATE/run/ID`, crates/driver/src/run_lock.rs) with real
//! supervisors: one supervisor per sandbox whatever the starts race, found by its run file,
//! and by a scan when the file names nothing. The supervisors reach no gateway (they retry
//! for about a minute), which is all a driver needs of them.

use std::os::unix::fs::MetadataExt;
use std::sync::Arc;
use std::time::Duration;

use openshell_driver::{DiskBackend, DiskSettings, Driver, ProcessDriver, StartSpec};
use openshell_e2e::*;
use uuid::Uuid;

fn driver(state: &TempDir) -> ProcessDriver {
    process_driver(&state.0, openshell_driver::ProxySettings::default())
        .with_disks(DiskSettings { backend: DiskBackend::Unbounded, ..DiskSettings::default() })
        .unwrap()
}

fn spec(id: Uuid) -> StartSpec {
    StartSpec {
        id,
        name: "runlock".into(),
        command: vec!["sleep".into(), "600".into()],
        credential: "oss_not-a-real-credential".into(),
        gateway: "http://127.0.0.1:9".into(),
        limits: Default::default(),
        image: None,
        disk_bytes: 1 << 30,
        env: Vec::new(),
        start_data: None,
    }
}

/// Live supervisors of sandbox `id` (an independent /proc scan).
fn supervisors(state: &TempDir, id: Uuid) -> Vec<i32> {
    supervisor_pids(&state.0)
        .into_iter()
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/cmdline"))
                .is_ok_and(|c| c.windows(36).any(|w| w == id.to_string().as_bytes()))
        })
        .collect()
}

fn run_file(state: &TempDir, id: Uuid) -> std::path::PathBuf {
    std::fs::canonicalize(&state.0).unwrap().join("run").join(id.to_string())
}

/// `PID START` of a live process, as the run file names it.
fn named(pid: i32) -> String {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    let start = stat[stat.rfind(')').unwrap() + 1..].split_whitespace().nth(19).unwrap().to_string();
    format!("{pid} {start}\n")
}

async fn gone(state: &TempDir, id: Uuid) -> bool {
    eventually(Duration::from_secs(5), || async { supervisors(state, id).is_empty() }).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn racing_starts_of_one_sandbox_run_one_supervisor_named_in_its_run_file() {
    let state = TempDir::new("openshell-e2e-runlock");
    let d = Arc::new(driver(&state));
    let id = Uuid::new_v4();
    let starts: Vec<_> = (0..8)
        .map(|_| {
            tokio::spawn({
                let d = d.clone();
                async move { d.start(spec(id)).await }
            })
        })
        .collect();
    for s in starts {
        s.await.unwrap().expect("every start succeeds: the losers find one running");
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    let pids = supervisors(&state, id);
    assert_eq!(pids.len(), 1, "one supervisor: {pids:?}");
    let file = run_file(&state, id);
    assert_eq!(std::fs::read_to_string(&file).unwrap(), named(pids[0]));
    assert_eq!(std::fs::metadata(&file).unwrap().mode() & 0o7777, 0o600);
    // The supervisor holds the lock on its descriptor 4.
    assert_eq!(std::fs::read_link(format!("/proc/{}/fd/4", pids[0])).unwrap(), file);

    d.start(spec(id)).await.unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(supervisors(&state, id), pids, "a start while it lives is a no-op");
    assert_eq!(d.list().await.unwrap(), vec![id]);
    let refused = d.remove(id).await.unwrap_err();
    assert!(refused.0.contains("still runs"), "{refused}");

    d.stop(id, Duration::from_secs(1)).await.unwrap();
    assert!(gone(&state, id).await, "stopped by its run file");
    d.remove(id).await.unwrap();
    assert!(!file.exists(), "removed with the sandbox's files");
}

#[tokio::test]
async fn a_supervisor_its_run_file_does_not_name_is_found_by_the_scan() {
    let state = TempDir::new("openshell-e2e-runlock");
    let d = driver(&state);
    let id = Uuid::new_v4();
    d.start(spec(id)).await.unwrap();
    let pids = supervisors(&state, id);
    assert_eq!(pids.len(), 1);
    // A gateway that died between the spawn and the write: the lock held, nothing named.
    std::fs::OpenOptions::new().write(true).open(run_file(&state, id)).unwrap().set_len(0).unwrap();
    d.start(spec(id)).await.unwrap();
    assert_eq!(supervisors(&state, id), pids, "the held lock alone keeps a second one out");
    d.stop(id, Duration::from_secs(1)).await.unwrap();
    assert!(gone(&state, id).await, "the scan found it");
}

/// A supervisor from before run locks (its uid lock by path, no run lock on descriptor 4) is
/// named in its run file when a driver starts: a start is a no-op and a stop finds it.
#[tokio::test]
async fn a_supervisor_from_before_run_locks_is_adopted() {
    let state = TempDir::new("openshell-e2e-runlock");
    let layout_state = std::fs::canonicalize(&state.0).unwrap();
    let _ = driver(&state);
    let id = Uuid::new_v4();
    let uid_lock = layout_state.join("legacy-uid-lock");
    std::fs::write(&uid_lock, "").unwrap();
    let mut old = std::process::Command::new(bin("openshell-supervisor"))
        .args(["--sandbox-id", &id.to_string(), "--state-dir"])
        .arg(&layout_state)
        .args(["--gateway", "http://127.0.0.1:9", "--uid", "2000065000", "--workdir", "/nonexistent", "--uid-lock"])
        .arg(&uid_lock)
        .args(["--", "sleep", "600"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    {
        use std::io::Write;
        old.stdin.take().unwrap().write_all(b"oss_not-a-real-credential\n").unwrap();
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(supervisors(&state, id), vec![old.id() as i32], "it runs");

    let d = driver(&state);
    assert_eq!(std::fs::read_to_string(run_file(&state, id)).unwrap(), named(old.id() as i32));
    d.start(spec(id)).await.unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(supervisors(&state, id), vec![old.id() as i32], "no second supervisor");
    d.stop(id, Duration::from_secs(1)).await.unwrap();
    let _ = old.wait();
    assert!(gone(&state, id).await);
}

/// An agent names a sibling sandbox in its own process's arguments, as a supervisor's are:
/// the driver's scan does not take it for that sibling's supervisor (the reconciler would keep
/// a dead sibling looking alive) and a stop of the sibling does not signal it.
#[tokio::test]
async fn a_process_posing_as_a_supervisor_by_its_arguments_is_not_one() {
    use std::os::unix::process::CommandExt;
    let state = TempDir::new("openshell-e2e-runlock");
    let layout_state = std::fs::canonicalize(&state.0).unwrap();
    let d = driver(&state);
    let sibling = Uuid::new_v4();
    // As a sandbox's agent runs: its own uid, any arguments it likes.
    let mut impostor = std::process::Command::new("python3")
        .args(["-c", "import time; time.sleep(600)", "--state-dir"])
        .arg(&layout_state)
        .args(["--sandbox-id", &sibling.to_string()])
        .uid(2_000_065_001)
        .gid(2_000_065_001)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let pid = impostor.id() as i32;
    let args = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap();
    assert!(args.windows(36).any(|w| w == sibling.to_string().as_bytes()), "it runs, naming the sibling");

    assert!(!d.list().await.unwrap().contains(&sibling), "listed as the sibling's supervisor");
    d.stop(sibling, Duration::from_secs(1)).await.unwrap();
    assert!(impostor.try_wait().unwrap().is_none(), "the sibling's stop signalled the impostor");
    let _ = impostor.kill();
    let _ = impostor.wait();
}
