//! One concept: **a fresh, empty, real PostgreSQL database per test.**
//!
//! [`fresh_database`] hands each test a brand-new database (`CREATE DATABASE … TEMPLATE
//! template0`, a few tens of milliseconds) on one PostgreSQL server shared by the whole test
//! process, and drops it again (best effort) when the [`TestDb`] is dropped. The server is
//!
//! * **an existing server** when `OPENSHELL_TEST_DATABASE_URL` holds an admin URL such as
//!   `postgres://postgres@127.0.0.1:5432/postgres` (a role that may create databases); or
//! * **one container per test process**, started with testcontainers from the local image
//!   `localhost/openshell-postgres:15` that `scripts/setup.sh` builds (no registry is needed),
//!   through the container engine at `DOCKER_HOST`, which defaults to
//!   `unix:///run/openshell-podman.sock` when that socket exists. The container runs with
//!   `fsync=off`, `synchronous_commit=off`, `full_page_writes=off` and `max_connections=500`.
//!
//! ```no_run
//! # async fn demo() {
//! let db = openshell_testkit::fresh_database().await;
//! let (client, connection) = tokio_postgres::connect(&db.url, tokio_postgres::NoTls).await.unwrap();
//! tokio::spawn(connection);
//! client.batch_execute("CREATE TABLE t (id int)").await.unwrap();
//! # }
//! ```
//!
//! Environment:
//!
//! | variable | effect |
//! |---|---|
//! | `OPENSHELL_TEST_DATABASE_URL` | use this existing server instead of a container |
//! | `DOCKER_HOST` | container engine API (default `unix:///run/openshell-podman.sock` if it exists) |
//! | `OPENSHELL_TEST_PG_IMAGE` | image to run (default `localhost/openshell-postgres:15`; it must behave like `docker/postgres/entry.sh`) |
//!
//! The server is set up on the first call, on a runtime of this crate's own that lives as long
//! as the process, so it does not depend on any one test's runtime (each `#[tokio::test]` has
//! its own, which ends with the test).

use std::collections::HashMap;
use std::fmt;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, OnceLock};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use testcontainers_modules::testcontainers::bollard::Docker;
use testcontainers_modules::testcontainers::bollard::models::ContainerSummaryStateEnum;
use testcontainers_modules::testcontainers::bollard::query_parameters::{
    ListContainersOptions, RemoveContainerOptions,
};
use testcontainers_modules::testcontainers::core::logs::LogFrame;
use testcontainers_modules::testcontainers::core::{IntoContainerPort, WaitFor};
use testcontainers_modules::testcontainers::runners::AsyncRunner;
use testcontainers_modules::testcontainers::{ContainerAsync, GenericImage, ImageExt};
use tokio::sync::watch;
use tokio_postgres::NoTls;
use tokio_postgres::config::Host;

/// The variable naming an existing server (an admin URL) to create the test databases on.
pub const DATABASE_URL_VAR: &str = "OPENSHELL_TEST_DATABASE_URL";
/// The variable overriding the image of the test container.
pub const IMAGE_VAR: &str = "OPENSHELL_TEST_PG_IMAGE";
/// The image `scripts/setup.sh` builds (`docker/postgres/`).
pub const DEFAULT_IMAGE: &str = "localhost/openshell-postgres:15";
/// The podman API socket `scripts/setup.d/20-podman.sh` starts; used when `DOCKER_HOST` is unset.
pub const DEFAULT_DOCKER_HOST: &str = "unix:///run/openshell-podman.sock";
/// Label on every test container (value `postgres`); see [`fresh_database`] for the clean-up.
pub const CONTAINER_LABEL: &str = "org.openshell.testkit";
/// Label holding the process id of the test process that started the container.
pub const PID_LABEL: &str = "org.openshell.testkit.pid";
/// Prefix of every test database's name: `openshell_test_<unix secs>_<pid>_<n>`.
pub const DATABASE_PREFIX: &str = "openshell_test_";

const READY_MESSAGE: &str = "database system is ready to accept connections";
const SERVER_SETTINGS: &[(&str, &str)] = &[
    ("fsync", "off"),
    ("synchronous_commit", "off"),
    ("full_page_writes", "off"),
    ("max_connections", "500"),
    ("jit", "off"),
];
/// The container stops itself once no client has been connected for this long.
const EXIT_WHEN_IDLE_SECS: u32 = 5;
/// ... or this long after its start if no client ever connected.
const START_GRACE_SECS: u32 = 90;

/// A brand-new empty database on the shared test server; dropped (best effort) when the
/// value drops.
pub struct TestDb {
    /// `postgres://user@127.0.0.1:PORT/dbname`, usable by tokio-postgres and psql.
    pub url: String,
    /// The database's name (unique in the server: `openshell_test_<secs>_<pid>_<n>`).
    pub name: String,
    server: Arc<Server>,
}

impl TestDb {
    /// A connection to this database, its driver spawned on the caller's runtime.
    pub async fn connect(&self) -> tokio_postgres::Client {
        let (client, connection) = tokio_postgres::connect(&self.url, NoTls)
            .await
            .unwrap_or_else(|e| panic!("openshell-testkit: cannot connect to {}: {e}", self.url));
        tokio::spawn(async move {
            let _ = connection.await;
        });
        client
    }
}

impl fmt::Debug for TestDb {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TestDb").field("url", &self.url).field("name", &self.name).finish()
    }
}

impl Drop for TestDb {
    fn drop(&mut self) {
        self.server.drop_database(std::mem::take(&mut self.name));
    }
}

/// A brand-new empty database on the shared test server (started on first use).
///
/// Safe to call from many tests at once, on any runtime: names are unique per process and
/// per server (unix time, process id, counter), and each call uses its own connection.
///
/// # Containers do not pile up
///
/// The container lives in a process-wide static, which is never dropped, so testcontainers
/// never gets to remove it. Three things make up for that:
///
/// 1. **It stops itself.** This crate holds one connection to it for the life of the test
///    process; the image's entry point (`OPENSHELL_PG_EXIT_WHEN_IDLE`) stops PostgreSQL
///    once no TCP client has been connected for 5 s, so the container ends ~5 s after the
///    test process exits, however it exits (even `kill -9`), or 90 s after its start if no
///    client ever came. This needs no extra image (testcontainers' "ryuk" reaper image is not
///    available here) and no cooperation from the test harness.
/// 2. **It is removed when it stops** (`AutoRemove`), so no stopped container is left over.
/// 3. **Leftovers are cleaned at start.** Containers carry [`CONTAINER_LABEL`] and
///    [`PID_LABEL`]; before starting its own, a test process removes labelled containers that
///    have exited, and, when the engine is on a local socket, any whose process is gone
///    (covering an image or engine that did not do 1 or 2).
///
/// With an existing server, the databases of a process are dropped in the background as the
/// [`TestDb`]s drop and waited for (10 s at most) when the process exits; at start,
/// databases left by processes that were killed are dropped (those older than 10 minutes
/// whose process is gone, if the server is on this machine; any older than a day).
///
/// # Panics
///
/// With a message saying what is missing, if no server can be had: neither
/// `OPENSHELL_TEST_DATABASE_URL` nor a container engine, the image not built, the server not
/// answering, or `CREATE DATABASE` failing.
pub async fn fresh_database() -> TestDb {
    let server = shared_server().await;
    server.create_database().await.unwrap_or_else(|e| panic!("openshell-testkit: {e}"))
}

/// Which server the tests use, e.g. `testcontainers localhost/openshell-postgres:15 on port
/// 41234 (…)` or `existing server from OPENSHELL_TEST_DATABASE_URL (…)`. Before the first
/// [`fresh_database`] it says which one would be used.
pub fn server_description() -> String {
    if let Some(rx) = START.get() {
        match &*rx.borrow() {
            Some(Ok(server)) => return server.description.clone(),
            Some(Err(e)) => return format!("no server: {e}"),
            None => {}
        }
    }
    match existing_url() {
        Some(url) => format!("existing server from {DATABASE_URL_VAR} ({})", redact(&url)),
        None => {
            format!("testcontainers {} (not started yet) via {}", image_name(), docker_host().unwrap_or_else(|e| e))
        }
    }
}

// ---------------------------------------------------------------------------------------
// The shared server.

type Started = Option<Result<Arc<Server>, String>>;

static START: OnceLock<watch::Receiver<Started>> = OnceLock::new();

/// This crate's own runtime: never shut down, so the server's connections outlive any test's.
fn runtime() -> &'static tokio::runtime::Runtime {
    static RUNTIME: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    RUNTIME.get_or_init(|| {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("openshell-testkit")
            .enable_all()
            .build()
            .expect("openshell-testkit: cannot build its tokio runtime")
    })
}

async fn shared_server() -> Arc<Server> {
    let mut rx = START
        .get_or_init(|| {
            let (tx, rx) = watch::channel(None);
            runtime().spawn(async move {
                let result = match tokio::spawn(start_from_env()).await {
                    Ok(result) => result.map(Arc::new),
                    Err(e) => Err(format!("starting the test server panicked: {e}")),
                };
                tx.send_replace(Some(result));
            });
            rx
        })
        .clone();
    let started = rx.wait_for(Option::is_some).await.expect("openshell-testkit: the start-up task vanished");
    match started.as_ref().expect("checked by wait_for") {
        Ok(server) => server.clone(),
        Err(e) => panic!("openshell-testkit: no PostgreSQL for the tests: {e}"),
    }
}

async fn start_from_env() -> Result<Server, String> {
    match existing_url() {
        Some(url) => Server::existing(&url).await,
        None => Server::container().await,
    }
}

fn existing_url() -> Option<String> {
    std::env::var(DATABASE_URL_VAR).ok().map(|v| v.trim().to_string()).filter(|v| !v.is_empty())
}

fn image_name() -> String {
    std::env::var(IMAGE_VAR).ok().filter(|v| !v.trim().is_empty()).unwrap_or_else(|| DEFAULT_IMAGE.to_string())
}

const SETUP_HINT: &str = "run `bash scripts/setup.sh` as root (it starts podman on \
    /run/openshell-podman.sock and builds localhost/openshell-postgres:15), or set \
    OPENSHELL_TEST_DATABASE_URL to an existing server's admin URL, e.g. \
    postgres://postgres@127.0.0.1:5432/postgres";

/// The container engine to use: `DOCKER_HOST`, else the podman socket from setup, else
/// Docker's default socket.
fn docker_host() -> Result<String, String> {
    if let Some(host) = std::env::var("DOCKER_HOST").ok().filter(|h| !h.is_empty()) {
        return Ok(host);
    }
    for host in [DEFAULT_DOCKER_HOST, "unix:///var/run/docker.sock"] {
        if Path::new(host.trim_start_matches("unix://")).exists() {
            return Ok(host.to_string());
        }
    }
    Err(format!(
        "{DATABASE_URL_VAR} is not set, DOCKER_HOST is not set and there is no container \
         engine socket at {DEFAULT_DOCKER_HOST}: {SETUP_HINT}"
    ))
}

struct Server {
    /// Admin URL (database `postgres` for a container).
    admin_url: String,
    description: String,
    /// Held for the life of the process: it is the container's lease (see
    /// [`fresh_database`]) and runs the background `DROP DATABASE`s.
    admin: tokio_postgres::Client,
    /// Whether process exit waits for pending drops (an existing server keeps its data).
    wait_for_drops_at_exit: bool,
    /// Appended to `CREATE DATABASE … TEMPLATE template0`.
    create_options: &'static str,
    /// Never dropped while in the static; kept so that a `Server` that is dropped removes it.
    _container: Option<ContainerAsync<GenericImage>>,
}

impl Server {
    async fn existing(url: &str) -> Result<Server, String> {
        if !url.starts_with("postgres://") && !url.starts_with("postgresql://") {
            return Err(format!("{DATABASE_URL_VAR} must be a postgres:// URL, not {}", redact(url)));
        }
        let admin = connect(url, Duration::from_secs(10))
            .await
            .map_err(|e| format!("cannot connect to the server in {DATABASE_URL_VAR} ({}): {e}", redact(url)))?;
        let local = is_local(url);
        remove_stale_databases(&admin, local).await;
        register_exit_flush();
        Ok(Server {
            admin_url: url.to_string(),
            description: format!("existing server from {DATABASE_URL_VAR} ({})", redact(url)),
            admin,
            wait_for_drops_at_exit: true,
            // The server's default strategy: it may be older than 15, or fsync its checkpoints.
            create_options: "",
            _container: None,
        })
    }

    async fn container() -> Result<Server, String> {
        let docker_host = docker_host()?;
        if std::env::var_os("DOCKER_HOST").is_none() {
            // testcontainers reads its engine only from the environment. SAFETY: set once,
            // before any container is started; other threads reading the environment at this
            // moment is the accepted risk of doing this in a test process.
            unsafe { std::env::set_var("DOCKER_HOST", &docker_host) };
        }
        let image = image_name();
        let docker = Docker::connect_with_defaults()
            .map_err(|e| format!("cannot use the container engine at {docker_host} ({e}): {SETUP_HINT}"))?;
        if let Err(e) = docker.ping().await {
            return Err(format!("the container engine at {docker_host} does not answer ({e}): {SETUP_HINT}"));
        }
        if let Err(e) = docker.inspect_image(&image).await {
            return Err(format!("image {image} is not available on {docker_host} ({e}): {SETUP_HINT}"));
        }
        remove_leftover_containers(&docker, docker_host.starts_with("unix://")).await;

        let (name, tag) = split_image(&image);
        let mut last_error = String::new();
        for _attempt in 0..3 {
            let port = free_port().map_err(|e| format!("no free local port: {e}"))?;
            let logs = Arc::new(Mutex::new(String::new()));
            let collected = logs.clone();
            let mut args = Vec::new();
            for (key, value) in SERVER_SETTINGS {
                args.push("-c".to_string());
                args.push(format!("{key}={value}"));
            }
            let request = GenericImage::new(name.clone(), tag.clone())
                .with_exposed_port(5432.tcp())
                .with_wait_for(WaitFor::message_on_stderr(READY_MESSAGE))
                .with_cmd(args)
                // podman reports an empty HostIp, so testcontainers cannot read the port it
                // picked: choose it here.
                .with_mapped_port(port, 5432.tcp())
                .with_label(CONTAINER_LABEL, "postgres")
                .with_label(PID_LABEL, std::process::id().to_string())
                .with_env_var("OPENSHELL_PG_EXIT_WHEN_IDLE", EXIT_WHEN_IDLE_SECS.to_string())
                .with_env_var("OPENSHELL_PG_START_GRACE", START_GRACE_SECS.to_string())
                .with_startup_timeout(Duration::from_secs(60))
                .with_log_consumer(move |frame: &LogFrame| {
                    let bytes = match frame {
                        LogFrame::StdOut(b) | LogFrame::StdErr(b) => b,
                    };
                    let mut logs = collected.lock().unwrap_or_else(|e| e.into_inner());
                    if logs.len() < 16 * 1024 {
                        logs.push_str(&String::from_utf8_lossy(bytes));
                    }
                })
                .with_host_config_modifier(|host_config| {
                    host_config.auto_remove = Some(true);
                    // The cluster lives in /tmp: on tmpfs, CREATE DATABASE takes ~7 ms instead
                    // of ~100 ms on the overlay file system.
                    host_config.tmpfs = Some(HashMap::from([("/tmp".to_string(), "rw,mode=1777".to_string())]));
                    // Trust authentication: listen on loopback only.
                    for bindings in host_config.port_bindings.iter_mut().flat_map(|m| m.values_mut()) {
                        for binding in bindings.iter_mut().flatten() {
                            binding.host_ip = Some("127.0.0.1".to_string());
                        }
                    }
                });
            let container = match request.start().await {
                Ok(container) => container,
                Err(e) => {
                    let logs = logs.lock().unwrap_or_else(|e| e.into_inner()).clone();
                    last_error = format!("starting {image} via {docker_host} failed: {e}\ncontainer output:\n{logs}");
                    if last_error.contains("address already in use") {
                        continue;
                    }
                    return Err(last_error);
                }
            };
            let admin_url = format!("postgres://postgres@127.0.0.1:{port}/postgres");
            let admin = connect_with_retries(&admin_url, Duration::from_secs(15))
                .await
                .map_err(|e| format!("{image} started but {admin_url} does not answer: {e}"))?;
            let id: String = container.id().chars().take(12).collect();
            return Ok(Server {
                description: format!("testcontainers {image} on port {port} (container {id} via {docker_host})"),
                admin_url,
                admin,
                wait_for_drops_at_exit: false,
                // Two checkpoints, cheap on tmpfs without fsync, instead of WAL-logging the
                // template's ~7 MB.
                create_options: " STRATEGY = FILE_COPY",
                _container: Some(container),
            });
        }
        Err(last_error)
    }

    async fn create_database(self: &Arc<Self>) -> Result<TestDb, String> {
        let server = self.clone();
        let task = runtime().spawn(async move {
            let name = unique_name();
            let client = connect(&server.admin_url, Duration::from_secs(10))
                .await
                .map_err(|e| format!("cannot connect to {}: {e}", server.description))?;
            client
                .batch_execute(&format!("CREATE DATABASE \"{name}\" TEMPLATE template0{}", server.create_options))
                .await
                .map_err(|e| format!("CREATE DATABASE {name} on {}: {e}", server.description))?;
            Ok(TestDb { url: with_database(&server.admin_url, &name), name, server })
        });
        task.await.unwrap_or_else(|e| Err(format!("creating a database panicked: {e}")))
    }

    fn drop_database(self: &Arc<Self>, name: String) {
        if name.is_empty() {
            return;
        }
        let server = self.clone();
        let pending = self.wait_for_drops_at_exit.then(PendingDrops::start);
        runtime().spawn(async move {
            let _ = server.admin.batch_execute(&format!("DROP DATABASE IF EXISTS \"{name}\" WITH (FORCE)")).await;
            drop(pending);
        });
    }
}

impl fmt::Debug for Server {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.description)
    }
}

// ---------------------------------------------------------------------------------------
// Connections and names.

async fn connect(url: &str, timeout: Duration) -> Result<tokio_postgres::Client, String> {
    let mut config: tokio_postgres::Config = url.parse().map_err(|e| format!("{e}"))?;
    config.connect_timeout(timeout);
    let (client, connection) = config.connect(NoTls).await.map_err(|e| format!("{e}"))?;
    // On this crate's runtime, whichever runtime asked: the connection must outlive the caller's.
    runtime().spawn(async move {
        let _ = connection.await;
    });
    Ok(client)
}

async fn connect_with_retries(url: &str, patience: Duration) -> Result<tokio_postgres::Client, String> {
    let deadline = Instant::now() + patience;
    loop {
        match connect(url, Duration::from_secs(5)).await {
            Ok(client) => return Ok(client),
            Err(e) if Instant::now() >= deadline => return Err(e),
            Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
        }
    }
}

fn unique_name() -> String {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    format!("{DATABASE_PREFIX}{}_{}_{n}", unix_now(), std::process::id())
}

fn unix_now() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0)
}

/// `(unix secs, pid)` of a name made by [`unique_name`].
fn parse_name(name: &str) -> Option<(u64, u32)> {
    let mut parts = name.strip_prefix(DATABASE_PREFIX)?.split('_');
    let secs = parts.next()?.parse().ok()?;
    let pid = parts.next()?.parse().ok()?;
    parts.next()?.parse::<u64>().ok()?;
    parts.next().is_none().then_some((secs, pid))
}

/// Whether a test database left on an existing server belongs to nobody any more.
fn is_stale(created: u64, pid: u32, now: u64, local: bool, alive: impl Fn(u32) -> bool) -> bool {
    let age = now.saturating_sub(created);
    age > 24 * 3600 || (local && age > 600 && !alive(pid))
}

fn process_alive(pid: u32) -> bool {
    Path::new(&format!("/proc/{pid}")).exists()
}

/// The URL with its database replaced (`postgres://user:pw@host:port/db?params`).
fn with_database(url: &str, database: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_string();
    };
    let (main, query) = match rest.find('?') {
        Some(i) => rest.split_at(i),
        None => (rest, ""),
    };
    let authority = main.split('/').next().unwrap_or(main);
    format!("{scheme}://{authority}/{database}{query}")
}

/// The URL without its password.
fn redact(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_string();
    };
    let authority_end = rest.find(['/', '?']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(authority_end);
    match authority.rsplit_once('@') {
        Some((userinfo, host)) => match userinfo.split_once(':') {
            Some((user, _password)) => format!("{scheme}://{user}:***@{host}{tail}"),
            None => url.to_string(),
        },
        None => url.to_string(),
    }
}

/// Whether every host of the URL is on this machine (loopback or a Unix socket).
fn is_local(url: &str) -> bool {
    let Ok(config) = url.parse::<tokio_postgres::Config>() else {
        return false;
    };
    !config.get_hosts().is_empty()
        && config.get_hosts().iter().all(|host| match host {
            Host::Tcp(name) => {
                name == "localhost"
                    || name.trim_matches(['[', ']']).parse::<std::net::IpAddr>().is_ok_and(|ip| ip.is_loopback())
            }
            Host::Unix(_) => true,
        })
}

fn split_image(image: &str) -> (String, String) {
    match image.rsplit_once(':') {
        Some((name, tag)) if !tag.contains('/') => (name.to_string(), tag.to_string()),
        _ => (image.to_string(), "latest".to_string()),
    }
}

fn free_port() -> std::io::Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

// ---------------------------------------------------------------------------------------
// Clean-up.

async fn remove_leftover_containers(docker: &Docker, engine_is_local: bool) {
    let options = ListContainersOptions {
        all: true,
        filters: Some(HashMap::from([("label".to_string(), vec![CONTAINER_LABEL.to_string()])])),
        ..Default::default()
    };
    let Ok(containers) = docker.list_containers(Some(options)).await else {
        return;
    };
    for container in containers {
        let Some(id) = container.id else { continue };
        // Not "created": another test process may be starting that one right now.
        let finished =
            matches!(container.state, Some(ContainerSummaryStateEnum::EXITED | ContainerSummaryStateEnum::DEAD));
        let owner_gone = engine_is_local
            && container
                .labels
                .as_ref()
                .and_then(|labels| labels.get(PID_LABEL))
                .and_then(|pid| pid.parse::<u32>().ok())
                .is_some_and(|pid| pid != std::process::id() && !process_alive(pid));
        if finished || owner_gone {
            let options = RemoveContainerOptions { force: true, ..Default::default() };
            let _ = docker.remove_container(&id, Some(options)).await;
        }
    }
}

async fn remove_stale_databases(admin: &tokio_postgres::Client, local: bool) {
    let Ok(rows) = admin.query("SELECT datname FROM pg_database WHERE datname LIKE 'openshell\\_test\\_%'", &[]).await
    else {
        return;
    };
    let now = unix_now();
    for row in rows {
        let name: String = row.get(0);
        if let Some((created, pid)) = parse_name(&name)
            && is_stale(created, pid, now, local, process_alive)
        {
            let _ = admin.batch_execute(&format!("DROP DATABASE IF EXISTS \"{name}\" WITH (FORCE)")).await;
        }
    }
}

/// Drops still running against an existing server; process exit waits for them.
struct PendingDrops;

static PENDING: (Mutex<usize>, Condvar) = (Mutex::new(0), Condvar::new());

impl PendingDrops {
    fn start() -> PendingDrops {
        *PENDING.0.lock().unwrap_or_else(|e| e.into_inner()) += 1;
        PendingDrops
    }
}

impl Drop for PendingDrops {
    fn drop(&mut self) {
        *PENDING.0.lock().unwrap_or_else(|e| e.into_inner()) -= 1;
        PENDING.1.notify_all();
    }
}

fn register_exit_flush() {
    static REGISTERED: OnceLock<()> = OnceLock::new();
    REGISTERED.get_or_init(|| {
        // SAFETY: registers a plain function with no arguments; it only waits on a condvar.
        unsafe { libc::atexit(wait_for_pending_drops) };
    });
}

extern "C" fn wait_for_pending_drops() {
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut pending = PENDING.0.lock().unwrap_or_else(|e| e.into_inner());
    while *pending > 0 {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            break;
        }
        pending = match PENDING.1.wait_timeout(pending, left) {
            Ok((guard, _)) => guard,
            Err(e) => e.into_inner().0,
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_unique_and_parse_back() {
        let a = unique_name();
        let b = unique_name();
        assert_ne!(a, b);
        assert!(a.len() < 64, "{a} is longer than a PostgreSQL identifier");
        let (secs, pid) = parse_name(&a).unwrap();
        assert_eq!(pid, std::process::id());
        assert!(unix_now() - secs < 5);
        assert_eq!(parse_name("openshell_test_x_1_2"), None);
        assert_eq!(parse_name("other_1_2_3"), None);
    }

    #[test]
    fn staleness() {
        let now = 1_000_000;
        let dead = |_| false;
        let alive = |_| true;
        assert!(!is_stale(now - 60, 1, now, true, dead), "young: kept");
        assert!(is_stale(now - 700, 1, now, true, dead), "old, owner gone");
        assert!(!is_stale(now - 700, 1, now, true, alive), "owner alive");
        assert!(!is_stale(now - 700, 1, now, false, dead), "remote: pid unknown");
        assert!(is_stale(now - 90_000, 1, now, false, alive), "older than a day");
    }

    #[test]
    fn urls() {
        assert_eq!(
            with_database("postgres://postgres@127.0.0.1:5432/postgres", "x"),
            "postgres://postgres@127.0.0.1:5432/x"
        );
        assert_eq!(
            with_database("postgresql://u:p@h:1?sslmode=disable", "x"),
            "postgresql://u:p@h:1/x?sslmode=disable"
        );
        assert_eq!(redact("postgres://u:secret@h:1/db"), "postgres://u:***@h:1/db");
        assert_eq!(redact("postgres://u@h/db"), "postgres://u@h/db");
        assert!(is_local("postgres://u@127.0.0.1:5432/db"));
        assert!(is_local("postgres://u@localhost/db"));
        assert!(!is_local("postgres://u@db.example:5432/db"));
        assert_eq!(
            split_image("localhost/openshell-postgres:15"),
            ("localhost/openshell-postgres".into(), "15".into())
        );
        assert_eq!(split_image("localhost:5000/pg"), ("localhost:5000/pg".into(), "latest".into()));
    }

    /// The existing-server code path, pointed at whatever server this process uses (the
    /// container, normally), so it runs without `OPENSHELL_TEST_DATABASE_URL`.
    #[tokio::test]
    async fn existing_server_mode_against_the_shared_server() {
        let shared = shared_server().await;
        let existing = Arc::new(Server::existing(&shared.admin_url).await.unwrap());
        assert!(existing.description.contains(DATABASE_URL_VAR));
        let a = existing.create_database().await.unwrap();
        let b = existing.create_database().await.unwrap();
        assert_ne!(a.name, b.name);
        for db in [&a, &b] {
            let client = db.connect().await;
            client.batch_execute("CREATE TABLE t (v text); INSERT INTO t VALUES ('x')").await.unwrap();
            let name: String = client.query_one("SELECT current_database()", &[]).await.unwrap().get(0);
            assert_eq!(name, db.name);
        }
        let name = a.name.clone();
        drop(a);
        // The drop runs in the background: wait for it.
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let left: i64 = shared
                .admin
                .query_one("SELECT count(*) FROM pg_database WHERE datname = $1", &[&name])
                .await
                .unwrap()
                .get(0);
            if left == 0 {
                break;
            }
            assert!(Instant::now() < deadline, "{name} was not dropped");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}
