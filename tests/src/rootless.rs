//! A gateway run as an ordinary user: the users `scripts/setup.d/50-rootless-users.sh` makes,
//! the cgroup subtree root delegates to one (as an operator would), and the real
//! `openshell-gateway` binary started as that user on a fresh database.

use std::io::BufRead;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};

use openshell_testkit::TestDb;

use crate::{Api, TempDir, bin, config_token, supervisor_pids};

/// Has subordinate ids (65536 from 1000000000).
pub const USER: &str = "openshell-rootless";
/// Has none.
pub const NO_SUBID_USER: &str = "openshell-nosubid";
/// Has subordinate ids of its own (65536 from 1000065536): the refusal tests take its
/// delegation away, which `USER`'s sandboxes, running at the same time, need.
pub const UNDELEGATED_USER: &str = "openshell-undelegated";

/// The controllers a non-root gateway needs delegated (see `SandboxCgroup::check_delegation`).
const CONTROLLERS: [&str; 4] = ["pids", "memory", "cpu", "freezer"];

pub fn user(name: &str) -> nix::unistd::User {
    nix::unistd::User::from_name(name)
        .unwrap()
        .unwrap_or_else(|| panic!("no user {name}: run scripts/setup.sh (setup.d/50-rootless-users.sh)"))
}

/// The user's subordinate uids in /etc/subuid: (first, count).
pub fn subuids(name: &str) -> (u32, u32) {
    let text = std::fs::read_to_string("/etc/subuid").unwrap();
    text.lines()
        .find_map(|l| {
            let f: Vec<&str> = l.split(':').collect();
            (f.len() == 3 && f[0] == name).then(|| (f[1].parse().unwrap(), f[2].parse().unwrap()))
        })
        .unwrap_or_else(|| panic!("{name} has no range in /etc/subuid: run scripts/setup.sh"))
}

/// The folder of `uid`'s delegated subtree in a controller's hierarchy.
pub fn delegated_dir(controller: &str, uid: u32) -> PathBuf {
    Path::new("/sys/fs/cgroup").join(controller).join(format!("openshell-{uid}"))
}

/// As root, delegates a cgroup subtree to `uid` in each controller the gateway needs.
pub fn delegate(uid: u32) {
    for c in CONTROLLERS {
        let d = delegated_dir(c, uid);
        std::fs::create_dir_all(&d).unwrap();
        std::os::unix::fs::chown(&d, Some(uid), None).unwrap();
    }
}

/// Takes the delegation back (its sandboxes' folders, empty by then, first).
pub fn undelegate(uid: u32) {
    for c in CONTROLLERS {
        let d = delegated_dir(c, uid);
        for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            if e.path().is_dir() {
                let _ = std::fs::remove_dir(e.path());
            }
        }
        match std::fs::remove_dir(&d) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => panic!("removing {}: {e}", d.display()),
        }
    }
}

/// The real gateway binary running as a non-root user, its state in a folder of its own.
pub struct RootlessGateway {
    child: std::process::Child,
    pub endpoint: String,
    pub uid: u32,
    pub token: String,
    /// The gateway's folder: its CLI config and its state directory.
    pub dir: PathBuf,
    pub state: PathBuf,
    pub config: PathBuf,
    _db: TestDb,
    _tmp: TempDir,
}

impl RootlessGateway {
    /// Starts `openshell-gateway` as `user` (with `extra` flags) on a fresh database.
    pub async fn start(user_name: &str, extra: &[&str]) -> RootlessGateway {
        let u = user(user_name);
        let db = openshell_testkit::fresh_database().await;
        let tmp = TempDir::new("openshell-rootless");
        let dir = tmp.0.clone();
        std::os::unix::fs::chown(&dir, Some(u.uid.as_raw()), Some(u.gid.as_raw())).unwrap();
        // Passage for the sandboxes' uids to their folders in the sandbox root beside the
        // state directory, nothing more.
        std::fs::set_permissions(&dir, std::os::unix::fs::PermissionsExt::from_mode(0o711)).unwrap();
        let (state, config) = (dir.join("state"), dir.join("config.json"));
        let mut cmd = std::process::Command::new(reachable_bins(&dir).join("openshell-gateway"));
        cmd.args(["--database-url", &db.url, "--allow-superuser", "--listen", "127.0.0.1:0", "--state-dir"])
            .arg(&state)
            .args(extra)
            .env_clear()
            .env("PATH", "/usr/local/bin:/usr/bin:/bin")
            .env("HOME", &dir)
            .env("RUST_LOG", "warn")
            .env("OPENSHELL_CONFIG", &config)
            .current_dir(&dir)
            .uid(u.uid.as_raw())
            .gid(u.gid.as_raw())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::inherit());
        let mut child = cmd.spawn().expect("spawn openshell-gateway as the test user");
        let mut line = String::new();
        std::io::BufReader::new(child.stdout.take().unwrap()).read_line(&mut line).unwrap();
        let endpoint = line
            .trim()
            .strip_prefix("gateway listening on ")
            .unwrap_or_else(|| panic!("the gateway did not start: {line:?}"))
            .to_string();
        let token = config_token(&config);
        RootlessGateway {
            child,
            endpoint,
            uid: u.uid.as_raw(),
            token,
            dir,
            state: state.canonicalize().unwrap(),
            config,
            _db: db,
            _tmp: tmp,
        }
    }

    pub async fn admin(&self) -> Api {
        Api::connect(&self.endpoint, Some(&self.token)).await
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// A sandbox's working directory (the default sandbox root beside the state directory).
    pub fn work(&self, id: &str) -> PathBuf {
        crate::workdir(&self.state, id)
    }

    /// A sandbox's supervisor log, in the state directory.
    pub fn log(&self, id: &str) -> PathBuf {
        crate::supervisor_log(&self.state, id)
    }
}

/// The gateway and supervisor binaries where the test user can run them (the checkout may
/// sit below a folder only root may enter): `dir/bin`, root's, mode 0755; hard links when
/// the file system allows, else copies. The gateway finds its supervisor beside itself.
fn reachable_bins(dir: &Path) -> PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let to = dir.join("bin");
    std::fs::create_dir_all(&to).unwrap();
    std::fs::set_permissions(&to, std::fs::Permissions::from_mode(0o755)).unwrap();
    for name in ["openshell-gateway", "openshell-supervisor"] {
        let (from, dest) = (bin(name), to.join(name));
        if std::fs::hard_link(&from, &dest).is_err() {
            std::fs::copy(&from, &dest).unwrap();
            std::fs::set_permissions(&dest, std::fs::Permissions::from_mode(0o755)).unwrap();
        }
    }
    to
}

impl Drop for RootlessGateway {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        for pid in supervisor_pids(&self.state) {
            let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), nix::sys::signal::Signal::SIGKILL);
        }
        let ids = std::fs::read_dir(self.state.join("sandboxes")).into_iter().flatten().flatten();
        for id in ids.filter_map(|e| e.file_name().to_str()?.parse::<uuid::Uuid>().ok()) {
            if let Ok(cg) = openshell_isolation::cgroup::SandboxCgroup::delegated(id, self.uid) {
                let _ = cg.remove();
            }
        }
    }
}
