//! Container mode only: the container of a test process goes away by itself after the
//! process exits (the static holding it is never dropped). Skipped when
//! `OPENSHELL_TEST_DATABASE_URL` selects an existing server.

use std::collections::HashMap;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use openshell_testkit::{DATABASE_URL_VAR, DEFAULT_DOCKER_HOST, PID_LABEL, fresh_database, server_description};
use testcontainers_modules::testcontainers::bollard::Docker;
use testcontainers_modules::testcontainers::bollard::query_parameters::ListContainersOptions;

const CHILD_VAR: &str = "OPENSHELL_TESTKIT_LIFECYCLE_CHILD";

fn container_mode() -> bool {
    std::env::var(DATABASE_URL_VAR).map_or(true, |v| v.trim().is_empty())
}

/// Run by the parent test in a child process; a no-op otherwise.
#[tokio::test]
async fn child_uses_a_database_then_exits() {
    if std::env::var_os(CHILD_VAR).is_none() {
        return;
    }
    let db = fresh_database().await;
    db.connect().await.batch_execute("SELECT 1").await.unwrap();
    println!("CHILD-SERVER: {}", server_description());
}

#[tokio::test]
async fn the_container_goes_away_after_its_process_exits() {
    if !container_mode() || std::env::var_os(CHILD_VAR).is_some() {
        return;
    }
    let child = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "child_uses_a_database_then_exits", "--nocapture"])
        .env(CHILD_VAR, "1")
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let pid = child.id();
    let output = child.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "child failed: {stdout}");
    assert!(stdout.contains("CHILD-SERVER: testcontainers"), "{stdout}");

    // Not through fresh_database(): starting a container here would remove the child's as a
    // leftover (its process is gone) and so hide whether it stops by itself.
    let docker = match std::env::var("DOCKER_HOST") {
        Ok(host) if !host.is_empty() => Docker::connect_with_defaults().unwrap(),
        _ => Docker::connect_with_unix(
            DEFAULT_DOCKER_HOST,
            60,
            testcontainers_modules::testcontainers::bollard::API_DEFAULT_VERSION,
        )
        .unwrap(),
    };
    let options = ListContainersOptions {
        all: true,
        filters: Some(HashMap::from([("label".to_string(), vec![format!("{PID_LABEL}={pid}")])])),
        ..Default::default()
    };
    let exited = Instant::now();
    loop {
        let left = docker.list_containers(Some(options.clone())).await.unwrap();
        if left.is_empty() {
            eprintln!("the child's container was gone {:?} after it exited", exited.elapsed());
            break;
        }
        assert!(exited.elapsed() < Duration::from_secs(40), "the child's container is still there: {left:?}");
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}
