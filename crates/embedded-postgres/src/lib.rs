//! A private PostgreSQL cluster for the gateway's embedded default.
//!
//! The cluster listens on 127.0.0.1 only, with scram-sha-256 and random passwords, so other
//! local users (and sandboxed agents) cannot connect. Run as root, the server runs as the
//! `postgres` user, since PostgreSQL refuses to run as root. The cluster outlives a gateway
//! crash; the next start finds it running and reuses it.
//!
//! Two folders: the passwords in `STATE/postgres` (the gateway's, 0700, inside its 0700 state
//! directory), and the cluster itself (data, socket, log) in a folder its owner can reach,
//! outside the state directory (default `STATE-postgres`, 0700, the owner's). Gateways before
//! this layout kept the data under `STATE/postgres` too; [`EmbeddedPostgres::start`] moves it.
//!
//! While the gateway runs, [`supervise`] restarts a cluster that died (an OOM kill of the
//! postmaster): PostgreSQL's crash recovery runs at that start, on the same port, so the
//! gateway's pool reconnects to the same URL.

mod supervise;
pub use supervise::{Restarts, supervise};

use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

#[derive(Debug, thiserror::Error)]
#[error("embedded PostgreSQL: {0}")]
pub struct Error(String);

/// The cluster's bootstrap superuser: migrations and role set-up only.
const USER: &str = "openshell";
/// The roles the migrations make (crates/store; what each may call: sql/roles.sql).
const GATEWAY: &str = "openshell_gateway";
const OPERATOR: &str = "openshell_operator";
const DATABASE: &str = "openshell";

/// A running private cluster.
#[derive(Debug)]
pub struct EmbeddedPostgres {
    bin: PathBuf,
    data: PathBuf,
    owner: Option<(u32, u32)>,
    port: u16,
    password: String,
    /// The passwords (the gateway's).
    secrets: PathBuf,
    /// The cluster's folder (its owner's): data, socket, log.
    cluster: PathBuf,
}

impl EmbeddedPostgres {
    /// Initializes (first time) and starts the cluster in `cluster`, its passwords in `secrets`.
    pub async fn start(secrets: &Path, cluster: &Path) -> Result<EmbeddedPostgres, Error> {
        let bin = find_bin_dir()?;
        let owner = if nix::unistd::geteuid().is_root() {
            let user = nix::unistd::User::from_name("postgres").ok().flatten().ok_or_else(|| {
                Error("running as root needs a `postgres` user to run the server (install postgresql)".into())
            })?;
            Some((user.uid.as_raw(), user.gid.as_raw()))
        } else {
            None
        };
        let me = (nix::unistd::geteuid().as_raw(), nix::unistd::getegid().as_raw());
        // An older gateway gave this folder to the cluster's owner: it is taken back.
        private_dir(secrets, me, &[me, owner.unwrap_or(me)])?;
        private_dir(cluster, owner.unwrap_or(me), &[me, owner.unwrap_or(me)])?;
        if owner.is_some() {
            passable(cluster)?;
        }
        let password_file = secrets.join("password");
        let password = match std::fs::read_to_string(&password_file) {
            Ok(p) => p.trim().to_string(),
            Err(_) => {
                let mut b = [0u8; 24];
                getrandom::fill(&mut b).map_err(|e| Error(format!("random: {e}")))?;
                let p = hex::encode(b);
                write_private(&password_file, &p, None)?;
                p
            }
        };
        // An older gateway's password file belonged to the cluster's owner.
        lchown(&password_file, me)?;
        let mut pg = EmbeddedPostgres {
            bin,
            data: cluster.join("data"),
            owner,
            port: 0,
            password,
            secrets: secrets.to_path_buf(),
            cluster: cluster.to_path_buf(),
        };
        pg.migrate_old_layout()?;
        if !pg.data.join("PG_VERSION").exists() {
            pg.initdb()?;
        }
        pg.port = match pg.running_port() {
            Some(port) => port,
            None => {
                let port = free_port()?;
                pg.start_server(port)?;
                port
            }
        };
        pg.ensure_database().await?;
        Ok(pg)
    }

    /// Moves an older gateway's cluster (`secrets/data`, where the cluster's owner had to
    /// reach it through the state directory) into the cluster's folder, stopping it first.
    fn migrate_old_layout(&self) -> Result<(), Error> {
        let old = self.secrets.join("data");
        if std::fs::symlink_metadata(&old).is_err() {
            return Ok(());
        }
        if std::fs::symlink_metadata(&self.data).is_ok() {
            return Err(Error(format!(
                "{} (an older gateway's cluster) and {} both exist: keep one (move the other away), then start again",
                old.display(),
                self.data.display()
            )));
        }
        stop_by_signal(&old)?;
        // What the server could not remove once the state directory closed (its sockets).
        for e in std::fs::read_dir(&self.secrets).map_err(|e| Error(e.to_string()))?.flatten() {
            if e.file_name().to_string_lossy().starts_with(".s.PGSQL.") {
                let _ = std::fs::remove_file(e.path());
            }
        }
        std::fs::rename(&old, &self.data).map_err(|e| {
            Error(format!(
                "moving the cluster {} to {} ({e}): the cluster's folder must be on the state directory's file                  system, or move it by hand (stopped)",
                old.display(),
                self.data.display()
            ))
        })?;
        let log = self.secrets.join("server.log");
        if std::fs::symlink_metadata(&log).is_ok() {
            let _ = std::fs::rename(&log, self.cluster.join("server.old.log"));
        }
        tracing::info!(from = %old.display(), to = %self.data.display(), "moved the cluster out of the state directory");
        Ok(())
    }

    /// The bootstrap superuser's URL, for migrations and role set-up at start only (holds
    /// the password: never print it).
    pub fn url(&self) -> String {
        format!("postgres://{USER}:{}@127.0.0.1:{}/{DATABASE}", self.password, self.port)
    }

    /// The operator role's URL (read-only, no password: it is in [`Self::pgpass_file`]).
    pub fn operator_url(&self) -> String {
        format!("postgres://{OPERATOR}@127.0.0.1:{}/{DATABASE}", self.port)
    }

    /// A pgpass file holding the operator role's password, for `PGPASSFILE=... psql URL`.
    pub fn pgpass_file(&self) -> PathBuf {
        self.secrets.join("pgpass")
    }

    /// Gives the gateway and operator roles (made by the migrations) their passwords, kept in
    /// 0600 files beside the cluster, and writes the operator's pgpass; returns the URL the
    /// gateway logs in with from now on.
    pub async fn provision_roles(&self) -> Result<String, Error> {
        let gateway = self.role_password("gateway-password")?;
        let operator = self.role_password("operator-password")?;
        let (client, conn) = tokio_postgres::connect(&self.url(), tokio_postgres::NoTls)
            .await
            .map_err(|e| Error(format!("connect: {e}")))?;
        let task = tokio::spawn(conn);
        // Hex passwords: nothing to quote.
        client
            .batch_execute(&format!(
                "ALTER ROLE {GATEWAY} LOGIN PASSWORD '{gateway}'; ALTER ROLE {OPERATOR} LOGIN PASSWORD '{operator}'"
            ))
            .await
            .map_err(|e| Error(format!("setting the roles' passwords: {e}")))?;
        drop(client);
        let _ = task.await;
        write_private(&self.pgpass_file(), &format!("127.0.0.1:{}:*:{OPERATOR}:{operator}\n", self.port), None)?;
        Ok(format!("postgres://{GATEWAY}:{gateway}@127.0.0.1:{}/{DATABASE}", self.port))
    }

    /// A role's password: made once, kept in a 0600 file readable by the gateway's user.
    fn role_password(&self, file: &str) -> Result<String, Error> {
        let path = self.secrets.join(file);
        if let Ok(p) = std::fs::read_to_string(&path)
            && !p.trim().is_empty()
        {
            return Ok(p.trim().to_string());
        }
        let mut b = [0u8; 24];
        getrandom::fill(&mut b).map_err(|e| Error(format!("random: {e}")))?;
        let p = hex::encode(b);
        write_private(&path, &p, None)?;
        Ok(p)
    }

    /// Stops the server (fast shutdown).
    pub fn stop(&self) -> Result<(), Error> {
        self.run("pg_ctl", &["stop", "-m", "fast", "-w", "-D", &self.data.to_string_lossy()])
    }

    fn command(&self, tool: &str) -> Command {
        let mut c = Command::new(self.bin.join(tool));
        if let Some((uid, gid)) = self.owner {
            c.uid(uid).gid(gid);
        }
        c.env_remove("PGPASSWORD").stdin(Stdio::null());
        c
    }

    fn run(&self, tool: &str, args: &[&str]) -> Result<(), Error> {
        let out = self.command(tool).args(args).output().map_err(|e| Error(format!("{tool}: {e}")))?;
        if !out.status.success() {
            return Err(Error(format!("{tool} failed: {}", String::from_utf8_lossy(&out.stderr).trim())));
        }
        Ok(())
    }

    fn initdb(&self) -> Result<(), Error> {
        tracing::info!(dir = %self.data.display(), "initializing the embedded PostgreSQL cluster");
        // initdb reads the password from a file its user can read: a copy in the cluster's
        // folder, for as long as initdb runs (that user owns the cluster anyway).
        let pwfile = self.cluster.join("initdb-password");
        let _ = std::fs::remove_file(&pwfile);
        write_private(&pwfile, &self.password, self.owner)?;
        let done = self.run(
            "initdb",
            &[
                "-D",
                &self.data.to_string_lossy(),
                "-U",
                USER,
                "--auth=scram-sha-256",
                &format!("--pwfile={}", pwfile.display()),
                "--encoding=UTF8",
                "--no-instructions",
            ],
        );
        let _ = std::fs::remove_file(&pwfile);
        done
    }

    /// The port of a server already running on this data directory.
    fn running_port(&self) -> Option<u16> {
        pid_alive(&self.data)
    }

    /// Whether the postmaster this cluster's postmaster.pid names is alive.
    pub fn is_running(&self) -> bool {
        self.running_port().is_some()
    }

    /// Starts the server again on its port, after it died: PostgreSQL's crash recovery runs.
    pub fn restart(&self) -> Result<(), Error> {
        self.start_server(self.port)
    }

    fn start_server(&self, port: u16) -> Result<(), Error> {
        let log = self.cluster.join("server.log");
        let options = format!("-p {port} -c listen_addresses=127.0.0.1 -k {}", self.cluster.display());
        self.run(
            "pg_ctl",
            &[
                "start",
                "-w",
                "-t",
                "60",
                "-D",
                &self.data.to_string_lossy(),
                "-l",
                &log.to_string_lossy(),
                "-o",
                &options,
            ],
        )
        .map_err(|e| Error(format!("{e} (see {})", log.display())))
    }

    async fn ensure_database(&self) -> Result<(), Error> {
        let admin = format!("postgres://{USER}:{}@127.0.0.1:{}/postgres", self.password, self.port);
        let (client, conn) =
            tokio_postgres::connect(&admin, tokio_postgres::NoTls).await.map_err(|e| Error(format!("connect: {e}")))?;
        let task = tokio::spawn(conn);
        let exists = client
            .query_opt("SELECT 1 FROM pg_database WHERE datname = $1", &[&DATABASE])
            .await
            .map_err(|e| Error(e.to_string()))?
            .is_some();
        if !exists {
            client.batch_execute(&format!("CREATE DATABASE {DATABASE}")).await.map_err(|e| Error(e.to_string()))?;
        }
        drop(client);
        let _ = task.await;
        Ok(())
    }
}

/// The port of a server running on `data` (its postmaster.pid names a live process).
fn pid_alive(data: &Path) -> Option<u16> {
    let pid = std::fs::read_to_string(data.join("postmaster.pid")).ok()?;
    let mut lines = pid.lines();
    let pid: i32 = lines.next()?.trim().parse().ok()?;
    let port = lines.nth(2)?.trim().parse().ok()?;
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), None).ok()?;
    // A killed postmaster nobody reaped (a container's init may not) is a zombie, and its pid
    // may since name another program: either way the server is dead.
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let (head, rest) = stat.rsplit_once(')')?;
    let state = rest.trim_start().chars().next();
    if !head.ends_with("(postgres") || matches!(state, Some('Z') | Some('X')) {
        return None;
    }
    Some(port)
}

/// Stops a server running on `data` by its postmaster's pid (SIGINT: a fast shutdown) and
/// waits until it is gone: `pg_ctl` would run as the owner, who may no longer reach `data`.
fn stop_by_signal(data: &Path) -> Result<(), Error> {
    let Some(pid) = std::fs::read_to_string(data.join("postmaster.pid"))
        .ok()
        .and_then(|t| t.lines().next()?.trim().parse::<i32>().ok())
        .filter(|_| pid_alive(data).is_some())
    else {
        return Ok(());
    };
    tracing::info!(dir = %data.display(), pid, "stopping the cluster an older gateway left running, to move it");
    let pid = nix::unistd::Pid::from_raw(pid);
    let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGINT);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while nix::sys::signal::kill(pid, None).is_ok() {
        if std::time::Instant::now() > deadline {
            return Err(Error(format!("the server on {} (pid {pid}) did not stop within 60 s", data.display())));
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    Ok(())
}

/// The gateway role's connection to a running embedded cluster through its Unix socket in
/// the cluster's folder (never the network), its password from `secrets`: for `openshell
/// gateway admin-token`, run as the gateway's own OS user, the only one that can read them.
pub fn local_gateway_url(secrets: &Path, cluster: &Path) -> Result<String, Error> {
    let port = pid_alive(&cluster.join("data"))
        .ok_or_else(|| Error(format!("no running embedded cluster in {}", cluster.display())))?;
    let password = std::fs::read_to_string(secrets.join("gateway-password"))
        .map_err(|e| Error(format!("{}: {e}", secrets.join("gateway-password").display())))?;
    Ok(format!("host={} port={port} user={GATEWAY} password={} dbname={DATABASE}", cluster.display(), password.trim()))
}

/// Server binaries on PATH, else the newest /usr/lib/postgresql/*/bin.
pub fn find_bin_dir() -> Result<PathBuf, Error> {
    let has_all = |d: &Path| ["initdb", "pg_ctl", "postgres"].iter().all(|t| d.join(t).is_file());
    if let Some(path) = std::env::var_os("PATH")
        && let Some(d) = std::env::split_paths(&path).find(|d| has_all(d))
    {
        return Ok(d);
    }
    let mut versions: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| Some((e.file_name().to_str()?.parse().ok()?, e.path().join("bin"))))
        .filter(|(_, d)| has_all(d))
        .collect();
    versions.sort();
    versions.pop().map(|(_, d)| d).ok_or_else(|| {
        Error(
            "PostgreSQL server binaries (initdb, pg_ctl, postgres) not found on PATH or under /usr/lib/postgresql/*/bin; \
             install them (`apt-get install postgresql`) or pass --database-url"
                .into(),
        )
    })
}

fn free_port() -> Result<u16, Error> {
    let l = std::net::TcpListener::bind("127.0.0.1:0").map_err(|e| Error(format!("no free port: {e}")))?;
    Ok(l.local_addr().map_err(|e| Error(e.to_string()))?.port())
}

/// Makes `dir` (or fixes it) a folder owned by `owner`, mode 0700. An existing one must be a
/// folder (not a symlink) of one of `trusted`: anyone else could swap what is inside.
fn private_dir(dir: &Path, owner: (u32, u32), trusted: &[(u32, u32)]) -> Result<(), Error> {
    match std::fs::symlink_metadata(dir) {
        Ok(m) if !m.is_dir() => return Err(Error(format!("{} is not a folder (a symlink?)", dir.display()))),
        Ok(m) if !trusted.iter().any(|(uid, _)| *uid == m.uid()) => {
            return Err(Error(format!(
                "{} belongs to uid {}, neither the gateway's user nor the cluster's owner: remove it",
                dir.display(),
                m.uid()
            )));
        }
        Ok(_) => {}
        Err(_) => std::fs::create_dir(dir).map_err(|e| Error(format!("creating {}: {e}", dir.display())))?,
    }
    lchown(dir, owner)?;
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))
        .map_err(|e| Error(format!("{}: {e}", dir.display())))
}

fn lchown(path: &Path, (uid, gid): (u32, u32)) -> Result<(), Error> {
    std::os::unix::fs::lchown(path, Some(uid), Some(gid)).map_err(|e| Error(format!("chown {}: {e}", path.display())))
}

/// The server's user must be able to reach its folder through every folder above it.
fn passable(dir: &Path) -> Result<(), Error> {
    for p in dir.ancestors().skip(1) {
        let mode = std::fs::metadata(p).map(|m| m.permissions().mode()).unwrap_or(0);
        if mode & 0o001 == 0 {
            return Err(Error(format!(
                "the postgres user cannot pass through {} (mode {:o}) to the cluster's folder {}: give others \
                 passage (chmod o+x) or pass another --postgres-dir",
                p.display(),
                mode & 0o777,
                dir.display()
            )));
        }
    }
    Ok(())
}

/// A new private file (0600, never through a symlink), given to `owner` when set.
fn write_private(path: &Path, content: &str, owner: Option<(u32, u32)>) -> Result<(), Error> {
    use std::io::Write;
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW)
        .open(path)
        .map_err(|e| Error(format!("{}: {e}", path.display())))?;
    // An existing file keeps its mode through open(): set it.
    f.set_permissions(std::fs::Permissions::from_mode(0o600)).map_err(|e| Error(e.to_string()))?;
    f.write_all(content.as_bytes()).map_err(|e| Error(e.to_string()))?;
    if let Some(ids) = owner {
        std::os::unix::fs::fchown(&f, Some(ids.0), Some(ids.1)).map_err(|e| Error(e.to_string()))?;
    }
    Ok(())
}
