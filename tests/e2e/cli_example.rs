//! The CLI walk-through in examples/cli.sh, run exactly as written against a gateway started
//! with `openshell gateway start` (its private PostgreSQL, the CLI configured by it), and the
//! secret it hands a child with `--env` found in no file the gateway, its database or the
//! supervisors wrote, nor in the gateway's log.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use openshell_e2e::*;

fn repo() -> PathBuf {
    std::fs::canonicalize(Path::new(env!("CARGO_MANIFEST_DIR")).join("..")).unwrap()
}

#[tokio::test]
async fn the_cli_example_runs_as_written_against_gateway_start() {
    let dir = TempDir::new("openshell-cli-example");
    let config = dir.0.join("cli/config.json");
    let state = dir.0.join("state");
    let log = dir.0.join("gateway.log");
    let port = free_port();
    let mut gateway = tokio::process::Command::new(bin("openshell"))
        .args(["gateway", "start", "--listen", &format!("127.0.0.1:{port}"), "--state-dir"])
        .arg(&state)
        .env("OPENSHELL_CONFIG", &config)
        .env("RUST_LOG", "debug")
        .env_remove("OPENSHELL_DATABASE_URL")
        .stdout(std::fs::File::create(dir.0.join("gateway.out")).unwrap())
        .stderr(std::fs::File::create(&log).unwrap())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let status = || {
        tokio::process::Command::new(bin("openshell"))
            .args(["gateway", "status"])
            .env("OPENSHELL_CONFIG", &config)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
    };
    let up = eventually(Duration::from_secs(60), || async { status().await.is_ok_and(|s| s.success()) }).await;
    assert!(up, "the gateway came up: {}", std::fs::read_to_string(&log).unwrap_or_default());

    let secret = format!("tok-{}", uuid::Uuid::new_v4().simple());
    let path = format!("{}:{}", bin("openshell").parent().unwrap().display(), std::env::var("PATH").unwrap());
    let out = tokio::process::Command::new("bash")
        .arg(repo().join("examples/cli.sh"))
        .env("PATH", path)
        .env("OPENSHELL_CONFIG", &config)
        .env("REPORT_TOKEN", &secret)
        .stdin(Stdio::null())
        .output()
        .await
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).to_string();
    let stderr = String::from_utf8_lossy(&out.stderr).to_string();
    assert!(out.status.success(), "examples/cli.sh failed:\n{stdout}\n{stderr}");

    // What each step shows.
    assert!(stdout.contains("Linux"), "exec in the tool child: {stdout}");
    assert!(stderr.contains("LIMIT_REACHED"), "the second child met the breadth: {stderr}");
    assert!(
        stdout.contains(&format!("hello: the writer holds a token of {} characters", secret.len())),
        "the child got both variables: {stdout}"
    );
    assert!(stderr.contains("POLICY_EXCEEDS_PARENT"), "the wider policy was refused: {stderr}");
    assert!(stderr.contains("pypi.org"), "with the counterexample: {stderr}");
    for name in ["lead", "tools", "writer"] {
        assert!(stdout.contains(name), "{name} in the tree: {stdout}");
    }

    // The secret reached the child only: not the script's output, the gateway's log (at
    // debug), its database files (WAL included) or the supervisors' logs.
    assert!(!stdout.contains(&secret) && !stderr.contains(&secret), "{stdout}\n{stderr}");
    let pid = nix::unistd::Pid::from_raw(gateway.id().unwrap() as i32);
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).unwrap();
    let stopped = tokio::time::timeout(Duration::from_secs(30), gateway.wait()).await;
    assert!(stopped.is_ok_and(|s| s.is_ok_and(|s| s.success())), "the gateway stops on TERM");
    assert_eq!(secrets::files_holding(&dir.0, &secret), Vec::<PathBuf>::new());
}
