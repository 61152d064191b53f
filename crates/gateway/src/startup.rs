//! Starting a gateway: database (embedded or given), migrations, first admin, driver, the
//! loops (reconciler, idle stop), and the listener that serves gRPC, MCP and metrics.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use openshell_driver::{ContainerDriver, Driver, NullDriver, ProcessDriver};
use openshell_embedded_postgres::EmbeddedPostgres;
use openshell_proto::v1::{
    FILE_DESCRIPTOR_SET, audit_server::AuditServer, grants_server::GrantsServer, health_server::HealthServer,
    policies_server::PoliciesServer, sandboxes_server::SandboxesServer, supervisor_server::SupervisorServer,
    users_server::UsersServer,
};
use openshell_store::Store;
use tokio::sync::oneshot;

use crate::client_config::{self, ClientConfig};
use crate::mcp::McpSettings;
use crate::{Api, Gateway, Settings, tokens};

/// Which compute driver runs sandboxes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum DriverKind {
    /// Supervisors as processes on this host (the default).
    Process,
    /// Each sandbox a container from its template's image (Docker Engine API: Docker or
    /// Podman), the same supervisor inside.
    Container,
    /// Runs nothing: a named fake, for benchmarks of admission alone.
    Null,
}

/// Everything `openshell gateway start` can set.
#[derive(Debug, Clone, clap::Args)]
pub struct Options {
    /// How the log on stderr is written: text (coloured only on a terminal) or json (one
    /// object a line, for log shippers). RUST_LOG filters it.
    #[arg(long, value_enum, default_value_t = crate::logging::LogFormat::Text, env = "OPENSHELL_LOG_FORMAT")]
    pub log_format: crate::logging::LogFormat,
    /// Address to serve gRPC and MCP (at /mcp) on.
    #[arg(long, default_value = "127.0.0.1:7570", env = "OPENSHELL_LISTEN")]
    pub listen: SocketAddr,
    /// PostgreSQL URL; without it a private cluster runs in --postgres-dir. A URL
    /// with a password on the command line is visible to every local user in
    /// /proc/*/cmdline: prefer --database-url-file or OPENSHELL_DATABASE_URL.
    #[arg(long, env = "OPENSHELL_DATABASE_URL", hide_env_values = true, conflicts_with = "database_url_file")]
    pub database_url: Option<String>,
    /// A file (mode 0600) holding the PostgreSQL URL, so its password stays off the command line.
    #[arg(long, env = "OPENSHELL_DATABASE_URL_FILE")]
    pub database_url_file: Option<PathBuf>,
    /// Run even when the database URL logs in as a superuser (the pool still acts as the
    /// openshell_gateway role). Without it, a superuser URL is refused: create the roles
    /// with `openshell gateway init-db` and pass the gateway role's URL.
    #[arg(long)]
    pub allow_superuser: bool,
    /// Where the gateway's own files live (tokens' and passwords' files, sandbox logs), mode
    /// 0700: no other uid enters it
    /// [default: /var/lib/openshell as root, else ~/.local/state/openshell].
    #[arg(long, env = "OPENSHELL_STATE_DIR")]
    pub state_dir: Option<PathBuf>,
    /// Where sandboxes' working directories live, mode 0711 (each agent passes through to its
    /// own folder, lists nothing); not inside the state directory [default: STATE-sandboxes,
    /// beside the state directory].
    #[arg(long, env = "OPENSHELL_SANDBOX_ROOT")]
    pub sandbox_root: Option<PathBuf>,
    /// The embedded PostgreSQL cluster's folder (data, socket, log), owned by the cluster's
    /// owner (the postgres user as root), mode 0700; not inside the state directory
    /// [default: STATE-postgres, beside the state directory].
    #[arg(long, env = "OPENSHELL_POSTGRES_DIR")]
    pub postgres_dir: Option<PathBuf>,
    /// The openshell-supervisor binary [default: next to this program].
    #[arg(long, env = "OPENSHELL_SUPERVISOR_BIN")]
    pub supervisor_bin: Option<PathBuf>,
    #[arg(long, value_enum, default_value_t = DriverKind::Process)]
    pub driver: DriverKind,
    /// The container engine's socket for `--driver container` (unix:///PATH)
    /// [default: DOCKER_HOST, else the local Docker or Podman socket].
    #[arg(long, env = "OPENSHELL_CONTAINER_HOST")]
    pub container_host: Option<String>,
    /// Database connections in the pool.
    #[arg(long, default_value_t = 32)]
    pub max_connections: usize,
    /// Seconds between TERM and KILL when stopping a sandbox.
    #[arg(long, default_value_t = 5)]
    pub stop_grace: u64,
    /// Seconds a sandbox may stay PROVISIONING without a workload before it is failed.
    #[arg(long, default_value_t = 30)]
    pub provision_timeout: u64,
    /// Seconds between reconciler passes.
    #[arg(long, default_value_t = 10)]
    pub reconcile_interval: u64,
    /// Milliseconds one policy containment proof may take before it refuses as inconclusive.
    #[arg(long, default_value_t = 5000)]
    pub proof_timeout_ms: u64,
    /// Proofs (z3) run at once [default: the number of CPUs]; more wait for a slot.
    #[arg(long)]
    pub proof_concurrency: Option<usize>,
    /// Milliseconds a proof waits for a slot before it is refused UNAVAILABLE.
    #[arg(long, default_value_t = 2000)]
    pub proof_queue_ms: u64,
    /// CheckPolicy calls each user or sandbox may make: N/s or N/min.
    #[arg(long, default_value = "30/min")]
    pub check_policy_rate: openshell_store::Rate,
    /// Seconds a door credential (what a sandbox's MCP door authenticates with) lives, 1 to
    /// 3600; supervisors renew theirs well before it expires.
    #[arg(long, default_value_t = 600)]
    pub door_ttl_secs: u64,
    /// Do not write the CLI configuration file at first start.
    #[arg(long)]
    pub no_client_config: bool,
    /// Supervisors the process driver prepares ahead of their sandboxes (a root gateway only):
    /// each is loaded, connected to the gateway and has its sandbox's init cloned into new
    /// namespaces, holding no sandbox, uid, folder or credential until a start claims it. A
    /// claimed start then isolates exactly as a cold one does, a few milliseconds sooner
    /// (docs/sandbox.md#start-up-time). 0, the default, starts every supervisor cold.
    #[arg(long, default_value_t = 0, value_parser = clap::value_parser!(u16).range(0..=64))]
    pub sandbox_pool: u16,
    /// The uids (and gids of the same numbers) sandboxes run as, one per live sandbox:
    /// FIRST-LAST, a range no account of this host uses.
    #[arg(long, default_value_t = openshell_driver::DEFAULT_RANGE, env = "OPENSHELL_SANDBOX_UID_RANGE")]
    pub sandbox_uid_range: openshell_driver::UidRange,
    /// A PEM file of certificate authorities the egress proxies trust for upstream servers,
    /// besides the host's trust store (e.g. a company's own CA).
    #[arg(long, env = "OPENSHELL_PROXY_EXTRA_CA")]
    pub proxy_extra_ca: Option<PathBuf>,
    /// A `Host` the MCP endpoint accepts besides loopback names and the listen address
    /// (host or host:port; repeatable). Others are refused (DNS rebinding protection).
    #[arg(long = "mcp-allowed-host", env = "OPENSHELL_MCP_ALLOWED_HOSTS", value_delimiter = ',')]
    pub mcp_allowed_hosts: Vec<String>,
    /// A browser `Origin` the MCP endpoint accepts besides loopback pages
    /// (scheme://host:port; repeatable); a request carrying any other Origin is refused.
    #[arg(long = "mcp-allowed-origin", env = "OPENSHELL_MCP_ALLOWED_ORIGINS", value_delimiter = ',')]
    pub mcp_allowed_origins: Vec<String>,
    /// Largest MCP request body in bytes.
    #[arg(long, default_value_t = 64 * 1024)]
    pub mcp_max_body_bytes: usize,
    /// Seconds an unused MCP session lives.
    #[arg(long, default_value_t = 600)]
    pub mcp_session_idle: u64,
    /// For tests: the egress proxies resolve HOST to IP (HOST=IP, repeatable), so tests can
    /// point names at test hosts of their own.
    #[arg(long, hide = true, value_parser = parse_resolve)]
    pub proxy_resolve: Vec<(String, std::net::IpAddr)>,
    /// Serve Prometheus metrics (OpenMetrics text at /metrics) on this address instead of on
    /// --listen (e.g. 0.0.0.0:9570 for a scraper on another host; the metrics carry no ids,
    /// names or secrets).
    #[arg(long, env = "OPENSHELL_METRICS_LISTEN")]
    pub metrics_listen: Option<SocketAddr>,
    /// Largest file one GetFile (`sandbox download`) may ask for, in bytes.
    #[arg(long, default_value_t = crate::ops::DEFAULT_MAX_FILE_BYTES)]
    pub max_file_bytes: u64,
    /// A root's disk when it asks for none (`--disk` on create): the size of its own
    /// filesystem, which holds its working directory and /tmp; children get their parent's.
    #[arg(long, value_parser = openshell_disk::parse_size, default_value = "2G")]
    pub default_disk: u64,
    /// The largest disk any sandbox may have; a request for more is refused NOT_ALLOWED.
    #[arg(long, value_parser = openshell_disk::parse_size, default_value = "64G")]
    pub max_disk: u64,
    /// Free space kept on the filesystem of the sandboxes' disks (the state directory's): a
    /// sandbox is admitted only if, beside what running sandboxes may still write, this stays
    /// free, for the gateway, its logs and (on the same filesystem) the embedded database.
    #[arg(long, value_parser = openshell_disk::parse_size, default_value = "2G")]
    pub disk_reserve: u64,
    /// How many times the free space the disks of running sandboxes may add up to. 1 (the
    /// default): every sandbox can always write its whole disk; more admits more sandboxes
    /// that are not expected to fill theirs (one that tries may then meet a full host disk).
    #[arg(long, default_value_t = 1.0, value_parser = parse_overcommit)]
    pub disk_overcommit: f64,
    /// Where sandboxes' disks are kept: `image` (a sparse ext4 image on a loop device each,
    /// needs root) or `memory` (a tmpfs each, charged to its memory; files go at stop)
    /// [default: image as root, else memory].
    #[arg(long, value_enum)]
    pub disk_backend: Option<DiskBackendArg>,
    /// How long a stopped or failed sandbox's files (its disk, working directory and log)
    /// are kept before the reconciler removes them; a delete removes them at once.
    #[arg(long, value_parser = humantime::parse_duration, default_value = "15m")]
    pub keep_stopped_files: Duration,
}

/// `--disk-backend`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum DiskBackendArg {
    Image,
    Memory,
    /// No disk of its own: the working directory on the host's disk, unbounded. Only for
    /// benchmarks that measure what a disk costs (tests/benches/ready.rs).
    #[value(hide = true)]
    Unbounded,
}

fn parse_overcommit(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(r) if (1.0..=1000.0).contains(&r) => Ok(r),
        _ => Err(format!("{s:?}: a ratio from 1 to 1000")),
    }
}

fn parse_resolve(s: &str) -> Result<(String, std::net::IpAddr), String> {
    let (host, ip) = s.split_once('=').ok_or("expected HOST=IP")?;
    Ok((host.to_ascii_lowercase(), ip.parse().map_err(|_| format!("{ip:?} is not an IP address"))?))
}

/// Makes this process non-dumpable: no core dumps, and processes of the same user cannot
/// ptrace it or read its memory, environment or descriptors through /proc.
pub fn not_dumpable() -> anyhow::Result<()> {
    nix::sys::prctl::set_dumpable(false).context("prctl(PR_SET_DUMPABLE, 0)")
}

impl Options {
    /// The defaults of `openshell gateway start`, for a given database and state directory.
    pub fn new(database_url: Option<String>, state_dir: PathBuf) -> Options {
        #[derive(clap::Parser)]
        struct Wrapper {
            #[command(flatten)]
            options: Options,
        }
        let mut o = <Wrapper as clap::Parser>::parse_from(["openshell-gateway"]).options;
        o.database_url = database_url;
        o.state_dir = Some(state_dir);
        o
    }

    /// The MCP endpoint's bounds and allow-lists from these options.
    pub fn mcp_settings(&self) -> McpSettings {
        let mut settings = McpSettings::default();
        if !self.listen.ip().is_unspecified() {
            settings.allowed_hosts.push(self.listen.ip().to_string());
        }
        settings.allowed_hosts.extend(self.mcp_allowed_hosts.iter().cloned());
        settings.allowed_origins.extend(self.mcp_allowed_origins.iter().cloned());
        settings.max_body_bytes = self.mcp_max_body_bytes;
        settings.session_idle = Duration::from_secs(self.mcp_session_idle.max(1));
        settings
    }

    /// How the driver keeps sandboxes' disks, from these options.
    pub fn disk_settings(&self) -> openshell_driver::DiskSettings {
        let mut settings = openshell_driver::DiskSettings {
            max_bytes: self.max_disk,
            reserve_bytes: self.disk_reserve,
            overcommit: self.disk_overcommit,
            ..openshell_driver::DiskSettings::default()
        };
        match self.disk_backend {
            Some(DiskBackendArg::Image) => settings.backend = openshell_driver::DiskBackend::Image,
            Some(DiskBackendArg::Memory) => settings.backend = openshell_driver::DiskBackend::Memory,
            Some(DiskBackendArg::Unbounded) => settings.backend = openshell_driver::DiskBackend::Unbounded,
            None => {}
        }
        settings
    }

    pub fn state_dir(&self) -> PathBuf {
        self.state_dir.clone().unwrap_or_else(default_state_dir)
    }

    /// `--sandbox-root`, else `STATE-sandboxes` beside `state_dir`.
    pub fn sandbox_root(&self, state_dir: &std::path::Path) -> PathBuf {
        self.sandbox_root.clone().unwrap_or_else(|| openshell_driver::layout::beside(state_dir, "sandboxes"))
    }

    /// `--postgres-dir`, else `STATE-postgres` beside `state_dir`.
    pub fn postgres_dir(&self, state_dir: &std::path::Path) -> PathBuf {
        postgres_dir(self.postgres_dir.as_deref(), state_dir)
    }

    /// The database URL from --database-url or --database-url-file.
    pub fn database_url(&self) -> anyhow::Result<Option<String>> {
        if let Some(url) = &self.database_url {
            return Ok(Some(url.clone()));
        }
        let Some(path) = &self.database_url_file else { return Ok(None) };
        let text = std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
        let url = text.trim().to_string();
        anyhow::ensure!(!url.is_empty(), "{} is empty: it must hold a postgres:// URL", path.display());
        Ok(Some(url))
    }
}

/// The embedded cluster's folder: `given`, else `STATE-postgres` beside the state directory.
pub fn postgres_dir(given: Option<&std::path::Path>, state_dir: &std::path::Path) -> PathBuf {
    given.map(PathBuf::from).unwrap_or_else(|| openshell_driver::layout::beside(state_dir, "postgres"))
}

pub fn default_state_dir() -> PathBuf {
    if nix::unistd::geteuid().is_root() {
        return PathBuf::from("/var/lib/openshell");
    }
    std::env::var_os("XDG_STATE_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".local/state")))
        .unwrap_or_else(|| PathBuf::from("."))
        .join("openshell")
}

/// A running gateway.
pub struct Running {
    pub endpoint: String,
    pub gateway: Gateway,
    /// The first admin's token, when this start created the admin.
    pub admin_token: Option<String>,
    pub database_public_url: String,
    shutdown: Option<oneshot::Sender<()>>,
    server: tokio::task::JoinHandle<Result<(), tonic::transport::Error>>,
    reconciler: tokio::task::JoinHandle<()>,
    metrics_server: Option<tokio::task::JoinHandle<()>>,
    embedded: Option<Embedded>,
}

/// The embedded cluster and its supervisor (see database_watch.rs).
struct Embedded {
    pg: Arc<EmbeddedPostgres>,
    watcher: tokio::task::JoinHandle<()>,
    failed: tokio::sync::watch::Receiver<Option<String>>,
}

impl Running {
    /// Serves until SIGTERM or SIGINT, then shuts down; or until the embedded cluster could
    /// not be restarted, then shuts down and fails (so the process exits non-zero).
    pub async fn serve_until_stopped(mut self, mut signals: StopSignals) -> anyhow::Result<()> {
        let failed = self.embedded.as_ref().map(|e| e.failed.clone());
        let fatal = async move {
            match failed {
                Some(mut rx) => match rx.wait_for(|f| f.is_some()).await {
                    Ok(f) => f.clone().unwrap_or_default(),
                    Err(_) => std::future::pending().await,
                },
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            _ = signals.recv() => self.shutdown().await,
            reason = fatal => {
                if let Some(e) = self.embedded.as_mut() {
                    e.watcher.abort();
                }
                let _ = self.shutdown().await;
                anyhow::bail!("{reason}")
            }
        }
    }

    /// Stops serving (in-flight calls finish), stops the reconciler and the embedded
    /// database. Sandboxes keep running; the next start reconciles them.
    pub async fn shutdown(mut self) -> anyhow::Result<()> {
        self.gateway.work.close_all();
        self.gateway.changes.close_all();
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
        self.reconciler.abort();
        if let Some(m) = self.metrics_server.take() {
            m.abort();
        }
        // Open calls get a moment to finish; a stream that never ends (a supervisor's, an MCP
        // session's) must not hold the stop. Sandboxes keep running and reconnect at the next start.
        match tokio::time::timeout(SHUTDOWN_GRACE, &mut self.server).await {
            Ok(served) => served??,
            Err(_) => {
                tracing::warn!(grace = ?SHUTDOWN_GRACE, "calls still open after the grace period; closing them");
                self.server.abort();
            }
        }
        self.gateway.store.close();
        if let Some(e) = self.embedded.take() {
            // Not restarted while it stops.
            e.watcher.abort();
            let _ = e.watcher.await;
            if e.pg.is_running() {
                e.pg.stop()?;
            }
        }
        Ok(())
    }
}

/// How long a stop waits for open calls before it closes them.
const SHUTDOWN_GRACE: std::time::Duration = std::time::Duration::from_secs(3);

pub async fn start(opts: &Options) -> anyhow::Result<Running> {
    start_with_driver(opts, None).await
}

/// Raises this process's soft limit of open files to its hard limit, and returns the limit
/// now in force. Each live sandbox holds a connection (and a reaper) here, and 1,024, a common
/// soft default, would stop a host at a few hundred sandboxes.
pub fn raise_open_files() -> u64 {
    let mut limit = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: getrlimit and setrlimit read and write the struct we pass.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) != 0 {
            return 0;
        }
        if limit.rlim_cur < limit.rlim_max {
            let raised = libc::rlimit { rlim_cur: limit.rlim_max, rlim_max: limit.rlim_max };
            if libc::setrlimit(libc::RLIMIT_NOFILE, &raised) == 0 {
                limit = raised;
            }
        }
    }
    limit.rlim_cur
}

/// Like [`start`], with a driver supplied by the caller (tests isolate admission this way).
pub async fn start_with_driver(opts: &Options, driver: Option<Arc<dyn Driver>>) -> anyhow::Result<Running> {
    let open_files = raise_open_files();
    if open_files < 4096 {
        tracing::warn!(open_files, "few open files allowed (RLIMIT_NOFILE): each live sandbox holds about two here");
    }
    let state_dir = opts.state_dir();
    std::fs::create_dir_all(&state_dir).with_context(|| format!("creating state directory {}", state_dir.display()))?;
    let state_dir = std::fs::canonicalize(&state_dir)?;
    let layout = openshell_driver::Layout::new(&state_dir, &opts.sandbox_root(&state_dir))?;
    let runner_id = runner_id(&state_dir)?;
    let driver = make_driver(opts, driver, &layout, &runner_id)?;
    // What an older gateway left in the state directory moves out before it closes.
    let running = driver.list().await.context("listing the sandboxes that run now")?;
    layout.migrate(&running)?;
    // The gateway's alone: its sandboxes' folders and the cluster's live elsewhere.
    std::fs::set_permissions(&state_dir, std::os::unix::fs::PermissionsExt::from_mode(0o700))
        .with_context(|| format!("setting the mode of {}", state_dir.display()))?;

    let (store, public_url, embedded) = match opts.database_url()? {
        Some(url) => {
            let store = Store::connect(&url, opts.max_connections)?;
            if store.login_is_superuser().await? && !opts.allow_superuser {
                anyhow::bail!(
                    "the database URL logs in as a superuser ({}); the gateway refuses to run with one. Create the \
                     roles with `openshell gateway init-db --database-url SUPERUSER_URL` and pass the \
                     openshell_gateway role's URL, or pass --allow-superuser",
                    redact(&url)
                );
            }
            store.migrate().await.context("applying migrations")?;
            (store, operator_url(&url), None)
        }
        None => {
            // Migrations and the roles' passwords as the cluster's bootstrap superuser; from
            // then on the gateway logs in as openshell_gateway only.
            let cluster = opts.postgres_dir(&state_dir);
            if cluster.starts_with(&state_dir) {
                anyhow::bail!(
                    "--postgres-dir {} is inside the state directory, which only the gateway's user may enter",
                    cluster.display()
                );
            }
            let pg = EmbeddedPostgres::start(&state_dir.join("postgres"), &cluster).await?;
            let bootstrap = Store::connect(&pg.url(), 1)?;
            bootstrap.migrate().await.context("applying migrations")?;
            drop(bootstrap);
            let gateway_url = pg.provision_roles().await?;
            let store = Store::connect(&gateway_url, opts.max_connections)?;
            let pg = Arc::new(pg);
            let (watcher, failed) = crate::database_watch::watch_embedded(pg.clone(), Default::default());
            (store, pg.operator_url(), Some(Embedded { pg, watcher, failed }))
        }
    };

    let listener = tokio::net::TcpListener::bind(opts.listen)
        .await
        .with_context(|| format!("cannot listen on {} (another gateway running? pass --listen)", opts.listen))?;
    let addr = listener.local_addr()?;
    let endpoint = format!("http://{addr}");
    driver.serving(&endpoint);

    let admin_token = bootstrap(&store, &endpoint, !opts.no_client_config).await?;

    let settings = Settings {
        endpoint: endpoint.clone(),
        runner: format!("{}:{runner_id}", driver.name()),
        stop_grace: Duration::from_secs(opts.stop_grace),
        provision_timeout: Duration::from_secs(opts.provision_timeout),
        reconcile_interval: Duration::from_secs(opts.reconcile_interval.max(1)),
        database_public_url: public_url.clone(),
        proof_timeout: Duration::from_millis(opts.proof_timeout_ms.max(1)),
        max_file_bytes: opts.max_file_bytes,
        door_ttl: Duration::from_secs(opts.door_ttl_secs.clamp(1, 3600)),
        mcp_max_body_bytes: opts.mcp_max_body_bytes,
        proof_concurrency: opts.proof_concurrency.unwrap_or_else(|| Settings::default().proof_concurrency).max(1),
        proof_queue_wait: Duration::from_millis(opts.proof_queue_ms),
        check_policy_rate: opts.check_policy_rate,
        disk: crate::template::DiskBounds { default_bytes: opts.default_disk, max_bytes: opts.max_disk },
        keep_stopped_files: opts.keep_stopped_files,
        ..Settings::default()
    };
    let gateway = Gateway::new(store, driver, settings);

    let (tx, rx) = oneshot::channel::<()>();
    let router = router(gateway.clone(), &opts.mcp_settings(), opts.metrics_listen.is_none())?;
    let metrics_server = match opts.metrics_listen {
        Some(at) => {
            let l = tokio::net::TcpListener::bind(at)
                .await
                .with_context(|| format!("cannot listen on {at} for metrics (--metrics-listen)"))?;
            tracing::info!(metrics = %l.local_addr()?, "serving metrics");
            let app = crate::metrics::router(gateway.clone());
            Some(tokio::spawn(async move {
                if let Err(e) = axum::serve(l, app).await {
                    tracing::error!("the metrics listener failed: {e}");
                }
            }))
        }
        None => None,
    };
    // Without TCP_NODELAY every small reply waits ~40 ms for the peer's delayed ACK.
    let incoming = tonic::transport::server::TcpIncoming::from(listener).with_nodelay(Some(true));
    let server = tokio::spawn(router.serve_with_incoming_shutdown(incoming, async {
        let _ = rx.await;
    }));
    // The execs a previous run relayed are gone; idle timers of the others carry on.
    gateway.store.execs_reset(&gateway.settings.runner).await.context("resetting exec counts")?;
    // The first pass finishes what a previous run left (interrupted stops, orphans).
    let (reconcile, idle) = (gateway.clone().reconcile_forever(), gateway.clone().idle_forever());
    let listen = gateway.clone().listen_forever();
    let reconciler = tokio::spawn(async move {
        tokio::join!(reconcile, idle, listen);
    });
    tracing::info!(%endpoint, database = %public_url, driver = gateway.driver.name(), "gateway serving");
    Ok(Running {
        endpoint,
        gateway,
        admin_token,
        database_public_url: public_url,
        shutdown: Some(tx),
        server,
        reconciler,
        metrics_server,
        embedded,
    })
}

/// The driver the options name (or the caller's), its sandboxes' files where `layout` says.
fn make_driver(
    opts: &Options,
    given: Option<Arc<dyn Driver>>,
    layout: &openshell_driver::Layout,
    runner_id: &str,
) -> anyhow::Result<Arc<dyn Driver>> {
    let supervisor_bin = || -> anyhow::Result<PathBuf> {
        Ok(match &opts.supervisor_bin {
            Some(b) => b.clone(),
            None => std::env::current_exe()?.with_file_name("openshell-supervisor"),
        })
    };
    let proxy =
        openshell_driver::ProxySettings { extra_ca: opts.proxy_extra_ca.clone(), resolve: opts.proxy_resolve.clone() };
    if given.is_none() && opts.sandbox_pool > 0 && opts.driver != DriverKind::Process {
        anyhow::bail!("--sandbox-pool prepares the process driver's supervisors: pass --driver process, or no pool");
    }
    Ok(match (given, opts.driver) {
        (Some(d), _) => d,
        (None, DriverKind::Container) => {
            let host = opts.container_host.clone().unwrap_or_else(openshell_driver::container::default_host);
            Arc::new(
                ContainerDriver::new(
                    &host,
                    supervisor_bin()?,
                    layout.clone(),
                    Duration::from_secs(opts.stop_grace),
                    opts.sandbox_uid_range,
                    proxy,
                    format!("container:{runner_id}"),
                )?
                .with_disks(opts.disk_settings())?,
            )
        }
        (None, DriverKind::Process) => Arc::new(
            ProcessDriver::new(
                supervisor_bin()?,
                layout.clone(),
                Duration::from_secs(opts.stop_grace),
                opts.sandbox_uid_range,
                proxy,
            )?
            .with_disks(opts.disk_settings())?
            .with_pool(opts.sandbox_pool.into(), opts.default_disk, crate::template::DEFAULT_LIMITS)?,
        ),
        (None, DriverKind::Null) => Arc::new(NullDriver::default()),
    })
}

/// The gRPC services with server reflection, and MCP at `/mcp`: one listener for both
/// (gRPC over HTTP/2, MCP's streamable HTTP over HTTP/1.1 or HTTP/2).
pub fn router(
    gateway: Gateway,
    mcp: &McpSettings,
    with_metrics: bool,
) -> anyhow::Result<tonic::transport::server::Router> {
    let api = Api(gateway.clone());
    let reflection_v1 = tonic_reflection::server::Builder::configure()
        .register_encoded_file_descriptor_set(FILE_DESCRIPTOR_SET)
        .build_v1()?;
    let reflection_v1alpha = tonic_reflection::server::Builder::configure()
        .register_encoded_file_descriptor_set(FILE_DESCRIPTOR_SET)
        .build_v1alpha()?;
    let grpc = tonic::service::Routes::new(SandboxesServer::new(api.clone()))
        .add_service(GrantsServer::new(api.clone()))
        .add_service(PoliciesServer::new(api.clone()))
        .add_service(AuditServer::new(api.clone()))
        .add_service(UsersServer::new(api.clone()))
        .add_service(SupervisorServer::new(api.clone()))
        .add_service(HealthServer::new(api))
        .add_service(reflection_v1)
        .add_service(reflection_v1alpha);
    let mut app = grpc.into_axum_router().merge(crate::mcp::router(gateway.clone(), mcp));
    if with_metrics {
        app = app.merge(crate::metrics::router(gateway));
    }
    let app = app.fallback(crate::mcp::fallback);
    Ok(tonic::transport::Server::builder().accept_http1(true).timeout(Duration::from_secs(120)).add_routes(app.into()))
}

/// SIGTERM and SIGINT, how a foreground gateway is asked to stop. Caught from before
/// start-up on, so a stop asked for while the gateway starts is taken once it has started,
/// never the default (death, leaving its embedded database behind).
pub struct StopSignals {
    term: tokio::signal::unix::Signal,
    int: tokio::signal::unix::Signal,
}

impl StopSignals {
    /// Catches both signals from now on (needs a Tokio runtime).
    pub fn install() -> std::io::Result<StopSignals> {
        use tokio::signal::unix::{SignalKind, signal};
        Ok(StopSignals { term: signal(SignalKind::terminate())?, int: signal(SignalKind::interrupt())? })
    }

    /// Returns once either signal came (at once if one came already).
    async fn recv(&mut self) {
        tokio::select! {
            _ = self.term.recv() => {},
            _ = self.int.recv() => {},
        }
    }
}

/// Creates the first admin on an empty database and hands its token to the CLI config;
/// on later starts only refreshes the endpoint in an existing config.
async fn bootstrap(store: &Store, endpoint: &str, write_config: bool) -> anyhow::Result<Option<String>> {
    let token = tokens::mint(tokens::USER_PREFIX)?;
    let created = store.bootstrap_admin("admin", &tokens::hash(&token)).await?;
    if !write_config {
        return Ok(created.then_some(token));
    }
    if created {
        let path = client_config::save(&ClientConfig {
            endpoint: endpoint.into(),
            user: "admin".into(),
            token: token.clone(),
        })?;
        tracing::info!(config = %path.display(), "created the admin user; its token is in the CLI config (mode 0600)");
        return Ok(Some(token));
    }
    if let Ok(Some(mut cfg)) = client_config::load()
        && cfg.endpoint != endpoint
    {
        cfg.endpoint = endpoint.into();
        client_config::save(&cfg)?;
    }
    Ok(None)
}

/// This state directory's runner id: random, made once and kept, so it survives a new
/// hostname (a container restart) and never collides with another gateway's.
fn runner_id(state_dir: &std::path::Path) -> anyhow::Result<String> {
    let path = state_dir.join("runner-id");
    if let Ok(id) = std::fs::read_to_string(&path) {
        return Ok(id.trim().to_string());
    }
    let id = uuid::Uuid::new_v4().to_string();
    write_private(&path, id.as_bytes())?;
    Ok(id)
}

/// Writes a new file of the state directory: mode 0600, never through a symlink.
fn write_private(path: &std::path::Path, bytes: &[u8]) -> anyhow::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW)
        .open(path)
        .with_context(|| format!("creating {}", path.display()))?;
    f.write_all(bytes).with_context(|| format!("writing {}", path.display()))
}

/// A database URL without its password: rebuilt from user, hosts, ports and database only,
/// so no parameter of the original (`?password=`) can slip through.
pub fn redact(url: &str) -> String {
    let Ok(config) = url.parse::<tokio_postgres::Config>() else { return "<database url>".into() };
    let hosts: Vec<String> = config
        .get_hosts()
        .iter()
        .zip(config.get_ports().iter().chain(std::iter::repeat(&5432)))
        .map(|(h, p)| match h {
            tokio_postgres::config::Host::Tcp(h) => format!("{h}:{p}"),
            tokio_postgres::config::Host::Unix(path) => format!("[{}]:{p}", path.display()),
        })
        .collect();
    format!("postgres://{}@{}/{}", config.get_user().unwrap_or(""), hosts.join(","), config.get_dbname().unwrap_or(""))
}

/// The read-only operator role's URL on the same server and database (no password), for
/// `gateway status` and psql.
pub fn operator_url(url: &str) -> String {
    let public = redact(url);
    match public.split_once('@') {
        Some((_, rest)) => format!("postgres://{}@{rest}", openshell_store::OPERATOR_ROLE),
        None => public,
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn redact_drops_the_password_and_keeps_the_rest() {
        assert_eq!(super::redact("postgres://u:secret@h:5432/db"), "postgres://u@h:5432/db");
        assert_eq!(super::redact("postgres://u@h/db"), "postgres://u@h:5432/db");
        assert_eq!(super::redact("postgres://h/db?user=u&password=secret"), "postgres://u@h:5432/db");
        assert_eq!(super::redact("postgres://u:p%40ss@h/db"), "postgres://u@h:5432/db");
        assert_eq!(super::redact("host=/tmp password=secret"), "postgres://@[/tmp]:5432/");
        assert_eq!(super::redact("not a url"), "<database url>");
        assert_eq!(super::operator_url("postgres://u:secret@h:5432/db"), "postgres://openshell_operator@h:5432/db");
    }
}
