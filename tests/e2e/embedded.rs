//! `openshell gateway start` with no flags but a state directory: a private PostgreSQL is
//! initialized (as the postgres user when run as root), the first admin's token lands in the
//! CLI config (0600), the CLI then works without flags, and a restart reuses everything.

use std::os::unix::fs::PermissionsExt;
use std::process::Stdio;
use std::time::Duration;

use openshell_e2e::*;

struct Gateway(tokio::process::Child);

impl Gateway {
    async fn start(state: &std::path::Path, config: &std::path::Path, port: u16) -> Gateway {
        let child = tokio::process::Command::new(bin("openshell"))
            .args(["gateway", "start", "--listen", &format!("127.0.0.1:{port}"), "--state-dir"])
            .arg(state)
            .env("OPENSHELL_CONFIG", config)
            .env_remove("OPENSHELL_DATABASE_URL")
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        Gateway(child)
    }

    async fn stop(mut self) {
        nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(self.0.id().unwrap() as i32),
            nix::sys::signal::Signal::SIGTERM,
        )
        .unwrap();
        let status =
            tokio::time::timeout(Duration::from_secs(30), self.0.wait()).await.expect("stops on TERM").unwrap();
        assert!(status.success(), "{status:?}");
    }
}

async fn cli(config: &std::path::Path, args: &[&str]) -> (bool, String) {
    let out = tokio::process::Command::new(bin("openshell"))
        .args(args)
        .env("OPENSHELL_CONFIG", config)
        .output()
        .await
        .unwrap();
    (out.status.success(), format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr)))
}

#[tokio::test]
async fn gateway_start_runs_a_private_database_and_configures_the_cli() {
    let state = TempDir::new("openshell-embedded");
    let config = state.0.join("cli/config.json");
    let port = free_port();
    let gw = Gateway::start(&state.0.join("state"), &config, port).await;
    let up = eventually(Duration::from_secs(60), || async { cli(&config, &["gateway", "status"]).await.0 }).await;
    assert!(up, "gateway came up: {}", cli(&config, &["gateway", "status"]).await.1);
    assert_eq!(std::fs::metadata(&config).unwrap().permissions().mode() & 0o777, 0o600);

    let (ok, status) = cli(&config, &["gateway", "status"]).await;
    assert!(ok, "{status}");
    let password = std::fs::read_to_string(state.0.join("state/postgres/password")).unwrap();
    assert!(!status.contains(password.trim()), "status never shows the password: {status}");
    assert!(status.contains("postgres://openshell_operator@127.0.0.1:") && status.contains("reachable"), "{status}");

    let (ok, out) = cli(&config, &["sandbox", "create", "--name", "lead", "--", "sleep", "600"]).await;
    assert!(ok, "{out}");
    let (ok, out) = cli(&config, &["-o", "json", "whoami"]).await;
    assert!(ok && out.contains("\"admin\""), "{out}");

    // Operators reach the same database with psql and the pgpass file.
    let url = status
        .lines()
        .find_map(|l| l.strip_prefix("database:"))
        .unwrap()
        .split_whitespace()
        .next()
        .unwrap()
        .to_string();
    let psql = tokio::process::Command::new("psql")
        .args([&url, "-XAtc", "SELECT name, phase FROM sandbox_view"])
        .env("PGPASSFILE", state.0.join("state/postgres/pgpass"))
        .output()
        .await
        .unwrap();
    assert!(String::from_utf8_lossy(&psql.stdout).starts_with("lead|"), "{psql:?}");
    // ... as the read-only operator role: the tables themselves (credential hashes) are closed.
    let psql = tokio::process::Command::new("psql")
        .args([&url, "-XAtc", "SELECT credential_hash FROM sandboxes"])
        .env("PGPASSFILE", state.0.join("state/postgres/pgpass"))
        .output()
        .await
        .unwrap();
    assert!(String::from_utf8_lossy(&psql.stderr).contains("permission denied"), "{psql:?}");
    let pgpass = std::fs::read_to_string(state.0.join("state/postgres/pgpass")).unwrap();
    assert!(!pgpass.contains(password.trim()), "the superuser's password is not handed to operators");
    // Without the password, no one else gets in.
    let denied = tokio::process::Command::new("psql")
        .args([&url, "-XAtc", "SELECT 1"])
        .env("PGPASSFILE", "/nonexistent")
        .env("PGCONNECT_TIMEOUT", "5")
        .stdin(Stdio::null())
        .output()
        .await
        .unwrap();
    assert!(!denied.status.success());

    // The admin lost the CLI config: the gateway's OS user mints a new token locally,
    // through the state directory, and the mint is audited.
    std::fs::remove_file(&config).unwrap();
    let out = tokio::process::Command::new(bin("openshell"))
        .args(["gateway", "admin-token", "--state-dir"])
        .arg(state.0.join("state"))
        .env("OPENSHELL_CONFIG", &config)
        .output()
        .await
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    assert_eq!(std::fs::metadata(&config).unwrap().permissions().mode() & 0o777, 0o600);
    // (With no config left, it names the default endpoint; this gateway listens elsewhere.)
    let mut c: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&config).unwrap()).unwrap();
    c["endpoint"] = format!("http://127.0.0.1:{port}").into();
    std::fs::write(&config, c.to_string()).unwrap();
    let (ok, out) = cli(&config, &["--endpoint", &format!("http://127.0.0.1:{port}"), "-o", "json", "whoami"]).await;
    assert!(ok && out.contains("\"admin\""), "{out}");
    let (ok, out) = cli(&config, &["--endpoint", &format!("http://127.0.0.1:{port}"), "audit", "list"]).await;
    assert!(ok && out.contains("system.token_create"), "{out}");

    gw.stop().await;
    let token_before = std::fs::read_to_string(&config).unwrap();

    // A restart reuses the cluster and the admin, and keeps the sandbox.
    let gw = Gateway::start(&state.0.join("state"), &config, port).await;
    assert!(eventually(Duration::from_secs(60), || async { cli(&config, &["gateway", "status"]).await.0 }).await);
    assert_eq!(std::fs::read_to_string(&config).unwrap(), token_before, "no second admin, same token");
    let (ok, out) = cli(&config, &["sandbox", "get", "lead"]).await;
    assert!(ok && out.contains("lead"), "{out}");
    let (ok, out) = cli(&config, &["sandbox", "stop", "lead"]).await;
    assert!(ok, "{out}");
    gw.stop().await;
}
