//! The gateway's folders as `openshell gateway start` (root, embedded PostgreSQL, process
//! driver) lays them out: the state directory 0700 with every folder in it 0700 and every file
//! 0600; the sandbox root beside it 0711, each sandbox's workdir 0700 and its own; the
//! cluster's folder 0700 and the postgres user's. An agent whose policy grants all three
//! (so Landlock lets everything through and only the modes stand) lists and reads none of
//! them, nor another sandbox's files. And an older gateway's layout (everything under a
//! 0711 state directory) is moved out at start, or refused while its sandboxes run.

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use openshell_e2e::*;
use openshell_proto::v1 as pb;

struct Gateway {
    child: tokio::process::Child,
    api: Api,
    err: std::path::PathBuf,
}

/// `openshell gateway start` on `state` with the embedded cluster; `None` when it exits
/// first (its stderr is in `dir/gateway-N.err`).
async fn start(dir: &Path, n: u32) -> Result<Gateway, String> {
    let (config, port) = (dir.join("cli/config.json"), free_port());
    let err = dir.join(format!("gateway-{n}.err"));
    let mut child = tokio::process::Command::new(bin("openshell"))
        // The older layout predates sandboxes' disks, whose files live in their images.
        .args(["gateway", "start", "--disk-backend", "unbounded", "--listen", &format!("127.0.0.1:{port}")])
        .arg("--state-dir")
        .arg(dir.join("state"))
        .env("OPENSHELL_CONFIG", &config)
        .env_remove("OPENSHELL_DATABASE_URL")
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&err).unwrap())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let endpoint = format!("http://127.0.0.1:{port}");
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    loop {
        if let Ok(Some(status)) = child.try_wait() {
            return Err(format!("{status}: {}", std::fs::read_to_string(&err).unwrap_or_default()));
        }
        // Listening, and the first start's admin token written.
        if std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() && config.exists() {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the gateway never listened: {}",
            std::fs::read_to_string(&err).unwrap()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let api = Api::connect(&endpoint, Some(&config_token(&config))).await;
    Ok(Gateway { child, api, err })
}

impl Gateway {
    /// TERM: the gateway stops its cluster; sandboxes keep running.
    async fn stop(self) {
        // Our own connection closes first: the gateway lets open calls finish.
        let Gateway { mut child, api, err } = self;
        drop(api);
        let pid = nix::unistd::Pid::from_raw(child.id().unwrap() as i32);
        nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).unwrap();
        let status = tokio::time::timeout(Duration::from_secs(30), child.wait())
            .await
            .unwrap_or_else(|_| panic!("no stop on TERM: {}", std::fs::read_to_string(&err).unwrap()))
            .unwrap();
        assert!(status.success(), "{status:?}");
    }

    /// SIGKILL, as a crash: the cluster keeps running (and is stopped here, as `pg_ctl stop`).
    async fn crash(self, state: &Path) {
        let Gateway { mut child, .. } = self;
        child.kill().await.unwrap();
        let bin = openshell_embedded_postgres::find_bin_dir().unwrap();
        let out = std::process::Command::new("runuser")
            .args(["-u", "postgres", "--"])
            .arg(bin.join("pg_ctl"))
            .args(["stop", "-m", "fast", "-w", "-D"])
            .arg(postgres_dir(state).join("data"))
            .output()
            .unwrap();
        assert!(out.status.success(), "{out:?}");
    }

    async fn create(&self, name: &str, policy: &str, script: &str) -> pb::Sandbox {
        let req = pb::CreateSandboxRequest {
            name: name.into(),
            command: vec!["/bin/bash".into(), "-c".into(), script.into()],
            policy_yaml: policy.into(),
            ..Default::default()
        };
        self.api.sandboxes().create_sandbox(self.api.req(req)).await.unwrap().into_inner().sandbox.unwrap()
    }
}

fn mode(p: &Path) -> u32 {
    std::fs::symlink_metadata(p).unwrap_or_else(|e| panic!("{}: {e}", p.display())).mode() & 0o7777
}

fn owner(p: &Path) -> u32 {
    std::fs::symlink_metadata(p).unwrap().uid()
}

/// Every folder under `dir` (and it) not 0700, every file not 0600, as "path mode".
fn open_modes(dir: &Path) -> Vec<String> {
    let mut wrong = Vec::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        if mode(&d) != 0o700 {
            wrong.push(format!("{} {:o}", d.display(), mode(&d)));
        }
        for e in std::fs::read_dir(&d).unwrap().flatten() {
            let t = e.file_type().unwrap();
            if t.is_dir() {
                todo.push(e.path());
            } else if mode(&e.path()) != 0o600 {
                wrong.push(format!("{} {:o}", e.path().display(), mode(&e.path())));
            }
        }
    }
    wrong
}

async fn wait_for(file: &Path, log: &Path) {
    let found = eventually(Duration::from_secs(30), || async { file.exists() }).await;
    assert!(found, "{} never appeared; log: {:?}", file.display(), std::fs::read_to_string(log));
}

#[tokio::test]
async fn the_state_directory_is_the_gateways_alone_and_an_agent_reaches_only_its_own_folder() {
    let tmp = TempDir::new("openshell-layout");
    // The folder holding all three is granted to the reader below, and so its parent passable.
    std::fs::set_permissions(&tmp.0, std::fs::Permissions::from_mode(0o755)).unwrap();
    let g = start(&tmp.0, 1).await.unwrap();
    let state = tmp.0.join("state");
    let (root, cluster) = (sandbox_root(&state), postgres_dir(&state));
    let other =
        g.create("other", "", "echo other-sandbox-secret > mine.txt; chmod 644 mine.txt; touch done; sleep 600").await;
    wait_for(&workdir(&state, &other.id).join("done"), &supervisor_log(&state, &other.id)).await;
    // World-readable beside the three folders: the policy grants it, so this one must work.
    std::fs::write(tmp.0.join("open.txt"), "granted-and-world-readable").unwrap();
    std::fs::set_permissions(tmp.0.join("open.txt"), std::fs::Permissions::from_mode(0o644)).unwrap();

    let policy = format!(
        "version: 1\nfilesystem_policy:\n  include_workdir: true\n  read_only: [/usr, /lib, /proc, /etc, {}]\n",
        tmp.0.display()
    );
    let probes: Vec<(&str, String)> = vec![
        ("ls_state", format!("ls -a {}", state.display())),
        ("runner_id", format!("cat {}/runner-id", state.display())),
        ("gateway_password", format!("cat {}/postgres/gateway-password", state.display())),
        ("pgpass", format!("cat {}/postgres/pgpass", state.display())),
        ("ls_logs", format!("ls -a {}/sandboxes", state.display())),
        ("other_log", format!("cat {}", supervisor_log(&state, &other.id).display())),
        ("ls_root", format!("ls -a {}", root.display())),
        ("ls_other", format!("ls -a {}/{}", root.display(), other.id)),
        ("ls_other_work", format!("ls -a {}", workdir(&state, &other.id).display())),
        ("other_file", format!("cat {}/mine.txt", workdir(&state, &other.id).display())),
        ("ls_cluster", format!("ls -a {}", cluster.display())),
        ("cluster_version", format!("cat {}/data/PG_VERSION", cluster.display())),
        ("cluster_log", format!("cat {}/server.log", cluster.display())),
        ("cluster_conf", format!("cat {}/data/pg_hba.conf", cluster.display())),
    ];
    let mut script: String =
        probes.iter().map(|(name, cmd)| format!("{cmd} > {name}.txt 2>&1; echo $? > {name}.rc; ")).collect();
    script.push_str(&format!(
        "cat {}/open.txt > open.txt 2>&1; echo $? > open.rc; ls -a $HOME > home.txt; touch done; sleep 600",
        tmp.0.display()
    ));
    let reader = g.create("reader", &policy, &script).await;
    let work = workdir(&state, &reader.id);
    wait_for(&work.join("done"), &supervisor_log(&state, &reader.id)).await;
    let read = |f: &str| std::fs::read_to_string(work.join(f)).unwrap_or_else(|e| panic!("{f}: {e}"));
    // The policy really grants the folder: only the modes keep the agent out below.
    assert_eq!(read("open.rc").trim(), "0", "{}", read("open.txt"));
    assert!(read("home.txt").contains("open.txt"), "its own workdir is its own");
    let leaked: Vec<String> = probes
        .iter()
        .filter(|(name, _)| read(&format!("{name}.rc")).trim() == "0")
        .map(|(name, _)| format!("{name}: {}", read(&format!("{name}.txt"))))
        .collect();
    assert!(leaked.is_empty(), "the agent reached what is not its own: {leaked:#?}");
    assert!(!read("other_file.txt").contains("other-sandbox-secret"));

    // On the host: the modes and owners themselves.
    assert_eq!(open_modes(&state), Vec::<String>::new(), "the state directory's folders 0700, files 0600");
    assert_eq!((mode(&root), owner(&root)), (0o711, 0), "the sandbox root");
    assert_eq!((mode(&root.join(&other.id)), owner(&root.join(&other.id))), (0o711, 0));
    let other_work = workdir(&state, &other.id);
    assert_eq!(mode(&other_work), 0o700);
    assert_ne!(owner(&other_work), 0, "the workdir is the agent's own");
    assert_ne!(owner(&other_work), owner(&work), "two sandboxes' workdirs, two uids");
    let postgres = nix::unistd::User::from_name("postgres").unwrap().unwrap().uid.as_raw();
    assert_eq!((mode(&cluster), owner(&cluster)), (0o700, postgres), "the cluster's folder");
    assert!(cluster.join("data/PG_VERSION").exists() && !state.join("postgres/data").exists());
    g.stop().await;
}

/// Rebuilds what an older gateway left: the workdir and CA bundle under the state directory,
/// the cluster's data in `STATE/postgres` (the postgres user's), the state directory 0711.
fn to_old_layout(state: &Path, ids: &[&str]) {
    let (root, cluster) = (sandbox_root(state), postgres_dir(state));
    for id in ids {
        let (from, to) = (root.join(id), state.join("sandboxes").join(id));
        for f in ["work", "ca-bundle.pem"] {
            std::fs::rename(from.join(f), to.join(f)).unwrap();
        }
        std::fs::remove_dir(&from).unwrap();
        std::fs::set_permissions(&to, std::fs::Permissions::from_mode(0o711)).unwrap();
    }
    std::fs::set_permissions(state.join("sandboxes"), std::fs::Permissions::from_mode(0o711)).unwrap();
    std::fs::rename(cluster.join("data"), state.join("postgres/data")).unwrap();
    std::fs::remove_dir_all(&cluster).unwrap();
    let pg = nix::unistd::User::from_name("postgres").unwrap().unwrap();
    std::os::unix::fs::chown(state.join("postgres"), Some(pg.uid.as_raw()), Some(pg.gid.as_raw())).unwrap();
    std::fs::set_permissions(state, std::fs::Permissions::from_mode(0o711)).unwrap();
}

/// The old cluster running from its old place, as an older gateway leaves it.
fn start_old_cluster(state: &Path) {
    let dir = state.join("postgres");
    let bin = openshell_embedded_postgres::find_bin_dir().unwrap();
    let out = std::process::Command::new("runuser")
        .args(["-u", "postgres", "--"])
        .arg(bin.join("pg_ctl"))
        .args(["start", "-w", "-D"])
        .arg(dir.join("data"))
        .arg("-l")
        .arg(dir.join("server.log"))
        .arg("-o")
        .arg(format!("-p {} -c listen_addresses=127.0.0.1 -k {}", free_port(), dir.display()))
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
}

#[tokio::test]
async fn an_older_layout_moves_out_of_the_state_directory_and_is_refused_while_its_sandboxes_run() {
    let tmp = TempDir::new("openshell-layout-old");
    let state = tmp.0.join("state");
    let g = start(&tmp.0, 1).await.unwrap();
    let done = g.create("done", "", "echo kept > record.txt; sleep 600").await;
    let live = g.create("live", "", "touch started; sleep 600").await;
    // Both running, so each has the folders an older gateway would have left.
    wait_for(&workdir(&state, &done.id).join("record.txt"), &supervisor_log(&state, &done.id)).await;
    wait_for(&workdir(&state, &live.id).join("started"), &supervisor_log(&state, &live.id)).await;
    g.api.sandboxes().stop_sandbox(g.api.req(pb::StopSandboxRequest { sandbox: "done".into() })).await.unwrap();
    let token = config_token(&tmp.0.join("cli/config.json"));
    g.crash(&state).await;
    to_old_layout(&state, &[&done.id, &live.id]);
    start_old_cluster(&state);

    // `live` still runs from its folder under the state directory: nothing moves.
    let refused = start(&tmp.0, 2).await.err().expect("the gateway refuses to start");
    assert!(refused.contains(&live.id) && !refused.contains(&done.id) && refused.contains("Stop them"), "{refused}");
    assert_eq!(mode(&state), 0o711, "a refusal leaves the old layout as it was");
    assert!(state.join("sandboxes").join(&live.id).join("work").is_dir());

    for pid in supervisor_pids(&state) {
        nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), nix::sys::signal::Signal::SIGKILL).unwrap();
    }
    assert!(eventually(Duration::from_secs(10), || async { supervisor_pids(&state).is_empty() }).await);
    let g = start(&tmp.0, 3).await.unwrap();
    // The same cluster (stopped, moved, started again) and the same admin.
    assert_eq!(config_token(&tmp.0.join("cli/config.json")), token);
    assert_eq!(g.api.get("done").await.unwrap().phase, "STOPPED");
    let postgres = nix::unistd::User::from_name("postgres").unwrap().unwrap().uid.as_raw();
    let cluster = postgres_dir(&state);
    assert_eq!((mode(&cluster), owner(&cluster)), (0o700, postgres));
    assert!(cluster.join("data/PG_VERSION").exists());
    assert_eq!(std::fs::read_to_string(workdir(&state, &done.id).join("record.txt")).unwrap(), "kept\n");
    assert_eq!(owner(&state.join("postgres")), 0, "the passwords' folder is the gateway's again");
    assert_eq!(open_modes(&state), Vec::<String>::new(), "the state directory's folders 0700, files 0600");
    // New sandboxes start in the new layout.
    let next = g.create("next", "", "touch done; sleep 600").await;
    wait_for(&workdir(&state, &next.id).join("done"), &supervisor_log(&state, &next.id)).await;
    g.crash(&state).await;
}
