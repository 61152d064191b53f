//! A private PostgreSQL cluster under a state directory, for the gateway's embedded default.
//!
//! The cluster listens on 127.0.0.1 only, with scram-sha-256 and a random password kept in
//! a 0600 file, so other local users (and sandboxed agents) cannot connect. Run as root,
//! the server runs as the `postgres` user, since PostgreSQL refuses to run as root. The
//! cluster outlives a gateway crash; the next start finds it running and reuses it.

use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

#[derive(Debug, thiserror::Error)]
#[error("embedded PostgreSQL: {0}")]
pub struct Error(String);

/// The cluster's bootstrap superuser: migrations and role set-up only.
const USER: &str = "openshell";
/// The roles the migrations make (crates/store, migrations/V6__roles.sql).
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
    dir: PathBuf,
}

impl EmbeddedPostgres {
    /// Initializes (first time) and starts the cluster under `state_dir/postgres`.
    pub async fn start(state_dir: &Path) -> Result<EmbeddedPostgres, Error> {
        let bin = find_bin_dir()?;
        let dir = state_dir.join("postgres");
        let data = dir.join("data");
        std::fs::create_dir_all(&dir).map_err(|e| Error(format!("{}: {e}", dir.display())))?;
        let owner = if nix::unistd::geteuid().is_root() {
            let user = nix::unistd::User::from_name("postgres").ok().flatten().ok_or_else(|| {
                Error("running as root needs a `postgres` user to run the server (install postgresql)".into())
            })?;
            let ids = (user.uid.as_raw(), user.gid.as_raw());
            chown(&dir, ids)?;
            Some(ids)
        } else {
            None
        };
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700)).map_err(|e| Error(e.to_string()))?;
        let password_file = dir.join("password");
        let password = match std::fs::read_to_string(&password_file) {
            Ok(p) => p.trim().to_string(),
            Err(_) => {
                let mut b = [0u8; 24];
                getrandom::fill(&mut b).map_err(|e| Error(format!("random: {e}")))?;
                let p = hex::encode(b);
                write_private(&password_file, &p, owner)?;
                p
            }
        };
        let mut pg = EmbeddedPostgres { bin, data, owner, port: 0, password, dir };
        if !pg.data.join("PG_VERSION").exists() {
            pg.initdb(&password_file)?;
        }
        pg.port = match pg.running_port() {
            Some(port) => port,
            None => pg.start_server()?,
        };
        pg.ensure_database().await?;
        Ok(pg)
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
        self.dir.join("pgpass")
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
        let path = self.dir.join(file);
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

    fn initdb(&self, password_file: &Path) -> Result<(), Error> {
        tracing::info!(dir = %self.data.display(), "initializing the embedded PostgreSQL cluster");
        self.run(
            "initdb",
            &[
                "-D",
                &self.data.to_string_lossy(),
                "-U",
                USER,
                "--auth=scram-sha-256",
                &format!("--pwfile={}", password_file.display()),
                "--encoding=UTF8",
                "--no-instructions",
            ],
        )
    }

    /// The port of a server already running on this data directory.
    fn running_port(&self) -> Option<u16> {
        let pid = std::fs::read_to_string(self.data.join("postmaster.pid")).ok()?;
        let mut lines = pid.lines();
        let pid: i32 = lines.next()?.trim().parse().ok()?;
        let port = lines.nth(2)?.trim().parse().ok()?;
        nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), None).ok()?;
        Some(port)
    }

    fn start_server(&self) -> Result<u16, Error> {
        let port = free_port()?;
        let log = self.dir.join("server.log");
        let options = format!("-p {port} -c listen_addresses=127.0.0.1 -k {}", self.dir.display());
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
        .map_err(|e| Error(format!("{e} (see {})", log.display())))?;
        Ok(port)
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

/// The gateway role's connection to a running embedded cluster through its Unix socket in
/// `state_dir/postgres` (never the network): for `openshell gateway admin-token`, run as the
/// gateway's own OS user, the only one that can read that directory.
pub fn local_gateway_url(state_dir: &Path) -> Result<String, Error> {
    let dir = state_dir.join("postgres");
    let pid = std::fs::read_to_string(dir.join("data/postmaster.pid"))
        .map_err(|e| Error(format!("no running embedded cluster under {} ({e})", dir.display())))?;
    let port: u16 = pid
        .lines()
        .nth(3)
        .and_then(|l| l.trim().parse().ok())
        .ok_or_else(|| Error("postmaster.pid has no port".into()))?;
    let password = std::fs::read_to_string(dir.join("gateway-password"))
        .map_err(|e| Error(format!("{}: {e}", dir.join("gateway-password").display())))?;
    Ok(format!("host={} port={port} user={GATEWAY} password={} dbname={DATABASE}", dir.display(), password.trim()))
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

fn chown(path: &Path, (uid, gid): (u32, u32)) -> Result<(), Error> {
    std::os::unix::fs::chown(path, Some(uid), Some(gid))
        .map_err(|e| Error(format!("chown {}: {e}", path.display())))?;
    // The server user must be able to reach the directory through its ancestors.
    let mut p = path.parent();
    while let Some(dir) = p {
        let mode = std::fs::metadata(dir).map(|m| m.permissions().mode()).unwrap_or(0);
        if mode & 0o001 == 0 {
            return Err(Error(format!(
                "the postgres user cannot enter {} (mode {:o}); choose a --state-dir it can reach, such as /var/lib/openshell",
                dir.display(),
                mode & 0o777
            )));
        }
        p = dir.parent();
    }
    Ok(())
}

fn write_private(path: &Path, content: &str, owner: Option<(u32, u32)>) -> Result<(), Error> {
    use std::io::Write;
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(path)
        .map_err(|e| Error(format!("{}: {e}", path.display())))?;
    f.write_all(content.as_bytes()).map_err(|e| Error(e.to_string()))?;
    if let Some(ids) = owner {
        std::os::unix::fs::chown(path, Some(ids.0), Some(ids.1)).map_err(|e| Error(e.to_string()))?;
    }
    Ok(())
}
