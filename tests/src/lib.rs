//! End-to-end harness: starts a real gateway over a fresh database and talks to it as users and sandboxes.
//!
//! Each test gets its own database (testkit), state directory and in-process gateway on an
//! ephemeral port. Admission tests may use [`CapturingDriver`], a named fake that runs no
//! process and hands the test each sandbox's credential so the test can act as that
//! sandbox's supervisor; lifecycle tests use the real process driver, and the suites that
//! matter on both run each case again on the real container driver (podman): see [`Backend`].

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use openshell_client::{Client, Endpoint, Refusal};
use openshell_driver::{Driver, DriverError, StartSpec};
use openshell_gateway::startup::{DriverKind, Options, Running};
use openshell_proto::v1 as pb;
use openshell_proto::v1::{
    audit_client::AuditClient, grants_client::GrantsClient, health_client::HealthClient,
    sandboxes_client::SandboxesClient, supervisor_client::SupervisorClient, users_client::UsersClient,
};
use openshell_testkit::TestDb;
use tonic::transport::Channel;
use uuid::Uuid;

pub use openshell_testkit;

pub mod inside;
pub mod rootless;
pub mod secrets;
pub mod storm;

/// A fake driver for admission tests: starts nothing, remembers each credential.
#[derive(Default)]
pub struct CapturingDriver {
    credentials: Mutex<HashMap<Uuid, String>>,
    running: Mutex<Vec<Uuid>>,
}

impl CapturingDriver {
    pub fn credential(&self, id: Uuid) -> Option<String> {
        self.credentials.lock().unwrap().get(&id).cloned()
    }
}

#[async_trait::async_trait]
impl Driver for CapturingDriver {
    fn name(&self) -> &'static str {
        "capturing-fake"
    }
    async fn start(&self, spec: StartSpec) -> Result<(), DriverError> {
        self.credentials.lock().unwrap().insert(spec.id, spec.credential);
        self.running.lock().unwrap().push(spec.id);
        Ok(())
    }
    async fn stop(&self, id: Uuid, _grace: Duration) -> Result<(), DriverError> {
        self.running.lock().unwrap().retain(|r| *r != id);
        Ok(())
    }
    async fn list(&self) -> Result<Vec<Uuid>, DriverError> {
        Ok(self.running.lock().unwrap().clone())
    }
}

/// The real process driver, also remembering each credential it hands a supervisor, so a
/// test can call the gateway as a running sandbox's supervisor does (ExecChildSandbox).
pub struct RecordingDriver {
    inner: Arc<dyn Driver>,
    credentials: Mutex<HashMap<Uuid, String>>,
}

impl RecordingDriver {
    pub fn credential(&self, id: Uuid) -> Option<String> {
        self.credentials.lock().unwrap().get(&id).cloned()
    }
}

#[async_trait::async_trait]
impl Driver for RecordingDriver {
    fn name(&self) -> &'static str {
        self.inner.name()
    }
    async fn start(&self, spec: StartSpec) -> Result<(), DriverError> {
        self.credentials.lock().unwrap().insert(spec.id, spec.credential.clone());
        self.inner.start(spec).await
    }
    async fn stop(&self, id: Uuid, grace: Duration) -> Result<(), DriverError> {
        self.inner.stop(id, grace).await
    }
    async fn list(&self) -> Result<Vec<Uuid>, DriverError> {
        self.inner.list().await
    }
    async fn resolve_image(&self, reference: &str) -> Result<Option<String>, DriverError> {
        self.inner.resolve_image(reference).await
    }
    fn needs_image(&self) -> bool {
        self.inner.needs_image()
    }
    fn room(&self, disk_bytes: Option<u64>) -> Result<(), openshell_driver::Shortage> {
        self.inner.room(disk_bytes)
    }
    async fn remove(&self, id: Uuid) -> Result<(), DriverError> {
        self.inner.remove(id).await
    }
    fn with_files(&self) -> Vec<Uuid> {
        self.inner.with_files()
    }
    fn disk_usage(&self) -> Option<(openshell_driver::DiskBackend, openshell_driver::DiskUsage)> {
        self.inner.disk_usage()
    }
}

/// Marks a state directory whose sandboxes are containers (removed with it). Mode 0600, as
/// every file in a state directory.
pub fn mark_containers(state: &std::path::Path) {
    use std::os::unix::fs::OpenOptionsExt;
    let _ =
        std::fs::OpenOptions::new().write(true).create(true).truncate(true).mode(0o600).open(state.join("containers"));
}

/// The default sandbox root of a gateway whose state directory is `state` (beside it).
pub fn sandbox_root(state: &std::path::Path) -> PathBuf {
    openshell_driver::layout::beside(state, "sandboxes")
}

/// The default embedded cluster's folder of a gateway whose state directory is `state`.
pub fn postgres_dir(state: &std::path::Path) -> PathBuf {
    openshell_driver::layout::beside(state, "postgres")
}

/// A sandbox's working directory, for a gateway with the default sandbox root.
pub fn workdir(state: &std::path::Path, id: &str) -> PathBuf {
    sandbox_root(state).join(id).join("work")
}

/// A sandbox's supervisor log, in the state directory.
pub fn supervisor_log(state: &std::path::Path, id: &str) -> PathBuf {
    state.join("sandboxes").join(id).join("supervisor.log")
}

/// A fresh directory under /tmp (reachable by the postgres user; removed on drop).
pub struct TempDir(pub PathBuf);

impl TempDir {
    pub fn new(prefix: &str) -> TempDir {
        let mut b = [0u8; 6];
        getrandom_fill(&mut b);
        // Not under /tmp: a sandbox gets a private /tmp, which would hide the state directory
        // from it and let isolation tests pass for the wrong reason.
        let p = std::path::Path::new("/var/tmp")
            .join(format!("{prefix}-{}", b.iter().map(|x| format!("{x:02x}")).collect::<String>()));
        std::fs::create_dir_all(&p).unwrap();
        TempDir(p)
    }
}

/// The image container-driver tests run sandboxes from (built by scripts/setup.d/21-agent-image.sh).
pub const TEST_IMAGE: &str = "localhost/openshell-test-agent:local";

/// A test host's web server (`python3 -c OK_SERVER_PY`): every GET on port 80 answers 200 `ok`.
pub const OK_SERVER_PY: &str = r#"
import http.server
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200)
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"ok")
    def log_message(self, *a):
        pass
http.server.ThreadingHTTPServer(("0.0.0.0", 80), H).serve_forever()
"#;

/// The container engine tests use: DOCKER_HOST, else the podman service set-up starts.
pub fn container_host() -> String {
    std::env::var("DOCKER_HOST")
        .ok()
        .filter(|h| h.starts_with("unix://"))
        .unwrap_or_else(|| "unix:///run/openshell-podman.sock".into())
}

/// The real driver a suite's case runs its sandboxes on: the suites that hold on both take it
/// as an `rstest` case (`#[case::process(Backend::Process)] #[case::container(Backend::Container)]`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Backend {
    /// The process driver, the embedded default.
    Process,
    /// The container driver on the local podman (each sandbox a container of [`TEST_IMAGE`]).
    Container,
}

impl Backend {
    pub fn is_container(self) -> bool {
        self == Backend::Container
    }

    /// `t` with the test image on the container driver (a container sandbox needs one).
    pub fn template(self, t: Option<pb::Template>) -> Option<pb::Template> {
        if !self.is_container() {
            return t;
        }
        Some(pb::Template { image: TEST_IMAGE.into(), ..t.unwrap_or_default() })
    }
}

/// Containers of the sandboxes under `state` (named `openshell-ID`), removed with their
/// supervisors' deaths: a test leaves no container behind.
fn remove_containers_of(ids: &[Uuid]) {
    if ids.is_empty() || !std::path::Path::new("/run/openshell-podman.sock").exists() {
        return;
    }
    let names: Vec<String> = ids.iter().map(|id| format!("openshell-{id}")).collect();
    let _ = std::process::Command::new("podman")
        .args(["rm", "--force", "--ignore", "--time", "0"])
        .args(&names)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status();
}

/// Sandboxes outlive their gateway by design; a test's do not outlive its state directory.
/// Their supervisors are killed (their inits, and so everything inside, die with them) and
/// their cgroups removed, so runs leave no process, uid lease or cgroup behind.
fn stop_sandboxes_of(state: &std::path::Path) {
    for pid in supervisor_pids(state) {
        let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), nix::sys::signal::Signal::SIGKILL);
    }
    let ids: Vec<Uuid> = std::fs::read_dir(state.join("sandboxes"))
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<Uuid>().ok())
        .collect();
    for id in &ids {
        if let Ok(cgroup) = openshell_isolation::cgroup::SandboxCgroup::of(*id) {
            let _ = cgroup.remove();
        }
    }
    if state.join("containers").exists() {
        remove_containers_of(&ids);
    }
}

/// Unmounts every filesystem mounted at or below `dir` (sandboxes' disks), deepest first, so
/// removing a test's folders never descends into one or trips over its mount point.
pub fn unmount_under(dir: &std::path::Path) {
    let Ok(info) = std::fs::read_to_string("/proc/self/mountinfo") else { return };
    let mut points: Vec<PathBuf> =
        info.lines().filter_map(|l| l.split(' ').nth(4)).map(PathBuf::from).filter(|p| p.starts_with(dir)).collect();
    points.sort_by_key(|p| std::cmp::Reverse(p.components().count()));
    for p in points {
        let _ = nix::mount::umount2(&p, nix::mount::MntFlags::MNT_DETACH);
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        stop_sandboxes_of(&self.0);
        unmount_under(&self.0);
        unmount_under(&sandbox_root(&self.0));
        let _ = std::fs::remove_dir_all(&self.0);
        // The folders a gateway made beside it, when it was a state directory itself (a
        // cluster a killed gateway left running stops first).
        stop_cluster(&postgres_dir(&self.0).join("data"));
        let _ = std::fs::remove_dir_all(sandbox_root(&self.0));
        let _ = std::fs::remove_dir_all(postgres_dir(&self.0));
    }
}

/// SIGINT (a fast shutdown) to the postmaster running on `data`, if any, and a wait for it.
fn stop_cluster(data: &std::path::Path) {
    let Some(pid) = std::fs::read_to_string(data.join("postmaster.pid"))
        .ok()
        .and_then(|t| t.lines().next()?.trim().parse::<i32>().ok())
        .map(nix::unistd::Pid::from_raw)
    else {
        return;
    };
    if nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGINT).is_err() {
        return;
    }
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while nix::sys::signal::kill(pid, None).is_ok() && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn getrandom_fill(b: &mut [u8]) {
    use std::io::Read;
    std::fs::File::open("/dev/urandom").unwrap().read_exact(b).unwrap();
}

/// The suite's default disk, small: admission counts each running sandbox's whole disk against
/// the host's free space, and a suite runs many at once on a shared machine.
pub const SUITE_DISK: u64 = 256 << 20;

/// The real process driver for a gateway whose state directory is `state`: the workspace's
/// supervisor, sandboxes beside the state directory, the default uid range.
pub fn process_driver(
    state: &std::path::Path,
    proxy: openshell_driver::ProxySettings,
) -> openshell_driver::ProcessDriver {
    openshell_driver::ProcessDriver::new(
        bin("openshell-supervisor"),
        openshell_driver::Layout::beside(state).expect("sandbox root"),
        Duration::from_secs(2),
        openshell_driver::DEFAULT_RANGE,
        proxy,
    )
    .and_then(|d| d.with_pool(sandbox_pool().into(), SUITE_DISK, openshell_gateway::template::DEFAULT_LIMITS))
    .expect("process driver")
}

/// Where cargo put the workspace binaries (next to the test's deps/ folder).
pub fn bin(name: &str) -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let dir = exe.parent().unwrap().parent().unwrap();
    let p = dir.join(name);
    assert!(p.is_file(), "{} not built: run `cargo build --workspace --bins` before the tests", p.display());
    p
}

pub struct Harness {
    pub db: TestDb,
    pub state: TempDir,
    pub running: Option<Running>,
    pub endpoint: String,
    pub admin_token: String,
    pub capture: Option<Arc<CapturingDriver>>,
    pub recorded: Option<Arc<RecordingDriver>>,
    /// The real driver its sandboxes run on (the fakes count as the process driver's).
    pub on: Backend,
}

impl Harness {
    /// A gateway with the capturing fake driver.
    pub async fn fake() -> Harness {
        let capture = Arc::new(CapturingDriver::default());
        let mut h = Harness::start(Some(capture.clone() as Arc<dyn Driver>), |_| {}).await;
        h.capture = Some(capture);
        h
    }

    /// A gateway with the capturing fake driver and options of the test's choosing.
    pub async fn fake_with(tweak: impl FnOnce(&mut Options)) -> Harness {
        let capture = Arc::new(CapturingDriver::default());
        let mut h = Harness::start(Some(capture.clone() as Arc<dyn Driver>), tweak).await;
        h.capture = Some(capture);
        h
    }

    /// A gateway with the real process driver.
    pub async fn process(tweak: impl FnOnce(&mut Options)) -> Harness {
        Harness::start(None, tweak).await
    }

    /// A gateway with the real driver `on`.
    pub async fn on(on: Backend, tweak: impl FnOnce(&mut Options)) -> Harness {
        Harness::on_in(on, TempDir::new("openshell-e2e"), tweak).await
    }

    /// [`Harness::on`] with the state directory of the test's choosing (on a filesystem of
    /// its own, say).
    pub async fn on_in(on: Backend, state: TempDir, tweak: impl FnOnce(&mut Options)) -> Harness {
        if !on.is_container() {
            return Harness::start_in(state, None, tweak).await;
        }
        mark_containers(&state.0);
        let mut h = Harness::start_in(state, None, |o| {
            o.driver = DriverKind::Container;
            o.sandbox_pool = 0;
            o.container_host = Some(container_host());
            tweak(o)
        })
        .await;
        h.on = Backend::Container;
        h
    }

    /// A gateway with the real container driver whose credentials [`Harness::as_sandbox`] can
    /// use (the tests read them to check no container configuration shows them).
    pub async fn container_recording(tweak: impl FnOnce(&mut Options)) -> Harness {
        let state = TempDir::new("openshell-e2e");
        mark_containers(&state.0);
        let runner = format!("container:test-{}", Uuid::new_v4());
        let inner = openshell_driver::ContainerDriver::new(
            &container_host(),
            bin("openshell-supervisor"),
            openshell_driver::Layout::beside(&state.0).expect("sandbox root"),
            Duration::from_secs(2),
            openshell_driver::DEFAULT_RANGE,
            openshell_driver::ProxySettings::default(),
            runner,
        )
        .expect("container driver");
        let recorded = Arc::new(RecordingDriver { inner: Arc::new(inner), credentials: Mutex::default() });
        let mut h = Harness::start_in(state, Some(recorded.clone() as Arc<dyn Driver>), tweak).await;
        h.recorded = Some(recorded);
        h.on = Backend::Container;
        h
    }

    /// A gateway with the real process driver whose credentials [`Harness::as_sandbox`] can use.
    pub async fn process_recording() -> Harness {
        Harness::process_recording_with(openshell_driver::ProxySettings::default(), |_| {}).await
    }

    /// [`Harness::process_recording`] with the sandboxes' proxies set up by `proxy` and
    /// options of the test's choosing.
    pub async fn process_recording_with(
        proxy: openshell_driver::ProxySettings,
        tweak: impl FnOnce(&mut Options),
    ) -> Harness {
        let state = TempDir::new("openshell-e2e");
        let inner = process_driver(&state.0, proxy);
        let recorded = Arc::new(RecordingDriver { inner: Arc::new(inner), credentials: Mutex::default() });
        let mut h = Harness::start_in(state, Some(recorded.clone() as Arc<dyn Driver>), tweak).await;
        h.recorded = Some(recorded);
        h
    }

    /// A gateway with a driver the caller builds for the harness's state directory.
    pub async fn with_driver(
        driver: impl FnOnce(&std::path::Path) -> Arc<dyn Driver>,
        tweak: impl FnOnce(&mut Options),
    ) -> Harness {
        let state = TempDir::new("openshell-e2e");
        let driver = driver(&state.0);
        Harness::start_in(state, Some(driver), tweak).await
    }

    async fn start(driver: Option<Arc<dyn Driver>>, tweak: impl FnOnce(&mut Options)) -> Harness {
        Harness::start_in(TempDir::new("openshell-e2e"), driver, tweak).await
    }

    async fn start_in(state: TempDir, driver: Option<Arc<dyn Driver>>, tweak: impl FnOnce(&mut Options)) -> Harness {
        let db = openshell_testkit::fresh_database().await;
        let mut opts = options(&db.url, &state.0);
        tweak(&mut opts);
        let running = openshell_gateway::startup::start_with_driver(&opts, driver).await.expect("gateway starts");
        // A pooled run's first start claims a prepared supervisor too (unless the test gave a
        // supervisor binary the pool must refuse to start).
        let pool = opts.sandbox_pool.into();
        let filled = || async { pooled_supervisors(&state.0).len() >= pool };
        if opts.supervisor_bin == Some(bin("openshell-supervisor")) {
            assert!(eventually(Duration::from_secs(20), filled).await, "the sandbox pool did not fill");
        }
        let endpoint = running.endpoint.clone();
        let admin_token = running.admin_token.clone().expect("fresh database bootstraps an admin");
        Harness {
            db,
            state,
            running: Some(running),
            endpoint,
            admin_token,
            capture: None,
            recorded: None,
            on: Backend::Process,
        }
    }

    /// A sandbox's working directory (the default sandbox root beside the state directory).
    pub fn workdir(&self, id: &str) -> PathBuf {
        workdir(&self.state.0, id)
    }

    /// A sandbox's supervisor log.
    pub fn supervisor_log(&self, id: &str) -> PathBuf {
        supervisor_log(&self.state.0, id)
    }

    pub async fn client(&self, token: &str) -> Api {
        Api::connect(&self.endpoint, Some(token)).await
    }

    pub async fn admin(&self) -> Api {
        self.client(&self.admin_token).await
    }

    pub async fn anonymous(&self) -> Api {
        Api::connect(&self.endpoint, None).await
    }

    /// A new non-admin user's client.
    pub async fn user(&self, name: &str) -> Api {
        let admin = self.admin().await;
        let token = admin
            .users()
            .create_user(admin.req(pb::CreateUserRequest { name: name.into(), admin: false }))
            .await
            .expect("admin creates user")
            .into_inner()
            .token;
        self.client(&token).await
    }

    /// A client calling as a sandbox's supervisor: with `program`, through the in-sandbox
    /// door (a door credential exchanged for the sandbox credential, plus the program);
    /// without, with the sandbox credential itself.
    pub async fn as_sandbox(&self, id: &str, program: Option<&str>) -> Api {
        let cred = self.sandbox_credential(id);
        match program {
            None => Api::connect(&self.endpoint, Some(&cred)).await,
            Some(program) => {
                let supervisor = Api::connect(&self.endpoint, Some(&cred)).await;
                let door = supervisor.door_credential().await.expect("exchange for a door credential");
                Api::connect(&self.endpoint, None).await.with_token(&door.token, Some(program))
            }
        }
    }

    /// The credential the driver handed a sandbox's supervisor.
    pub fn sandbox_credential(&self, id: &str) -> String {
        let id: Uuid = id.parse().unwrap();
        match (&self.capture, &self.recorded) {
            (Some(c), _) => c.credential(id),
            (_, Some(r)) => r.credential(id),
            _ => panic!("as_sandbox needs Harness::fake or Harness::process_recording"),
        }
        .expect("credential captured")
    }

    /// Direct SQL on the test database, as an operator would.
    pub async fn sql(&self) -> tokio_postgres::Client {
        self.db.connect().await
    }

    pub async fn shutdown(&mut self) {
        if let Some(r) = self.running.take() {
            r.shutdown().await.unwrap();
        }
    }
}

pub fn options(url: &str, state: &std::path::Path) -> Options {
    let mut opts = Options::new(Some(url.to_string()), state.to_path_buf());
    opts.listen = "127.0.0.1:0".parse().unwrap();
    opts.no_client_config = true;
    opts.supervisor_bin = Some(bin("openshell-supervisor"));
    opts.driver = DriverKind::Process;
    opts.stop_grace = 2;
    opts.max_connections = 64;
    opts.default_disk = SUITE_DISK;
    // The test server's URL is a superuser's; the pool still acts as openshell_gateway.
    opts.allow_superuser = true;
    opts.sandbox_pool = sandbox_pool();
    opts
}

/// Supervisors of the gateway whose state directory is `state` prepared ahead and claimed by
/// no sandbox yet, each with its init cloned (crates/driver/src/pool.rs).
pub fn pooled_supervisors(state: &std::path::Path) -> Vec<i32> {
    let dir = std::fs::canonicalize(state).unwrap_or(state.to_path_buf()).to_string_lossy().into_owned();
    let unclaimed = format!("--sandbox-id {}", uuid::Uuid::nil());
    let Ok(procs) = std::fs::read_dir("/proc") else { return Vec::new() };
    procs
        .flatten()
        .filter(|e| {
            let cmd = std::fs::read(e.path().join("cmdline")).unwrap_or_default();
            let cmd = String::from_utf8_lossy(&cmd).replace('\0', " ");
            let init = std::fs::read_to_string(e.path().join("task").join(e.file_name()).join("children"));
            cmd.contains(" --pooled --state-dir ")
                && cmd.contains(&dir)
                && cmd.contains(&unclaimed)
                && init.is_ok_and(|c| !c.trim().is_empty())
        })
        .filter_map(|e| e.file_name().to_str()?.parse().ok())
        .collect()
}

/// `OPENSHELL_TEST_SANDBOX_POOL=N` runs the suite's root process drivers with N pooled
/// supervisors (the escape suite against claimed ones: scripts/test.sh runs it both ways).
pub fn sandbox_pool() -> u16 {
    let asked = std::env::var("OPENSHELL_TEST_SANDBOX_POOL").ok().and_then(|n| n.parse().ok()).unwrap_or(0);
    if nix::unistd::geteuid().is_root() { asked } else { 0 }
}

/// gRPC clients with one principal's credentials (the shared client crate's, as the CLI and
/// the supervisor use it).
#[derive(Clone)]
pub struct Api {
    client: Client,
}

impl Api {
    pub async fn connect(endpoint: &str, token: Option<&str>) -> Api {
        let endpoint = Endpoint::parse(endpoint).expect("the gateway's endpoint");
        Api { client: endpoint.connect(token).await.expect("connect to gateway") }
    }

    /// Exchanges this (sandbox) credential for a door credential, as a supervisor does.
    pub async fn door_credential(&self) -> Result<pb::DoorCredential, tonic::Status> {
        Ok(self
            .supervisor()
            .exchange_door_credential(self.req(pb::ExchangeDoorCredentialRequest {}))
            .await?
            .into_inner())
    }

    /// The same channel with another token and program (e.g. a door credential).
    pub fn with_token(&self, token: &str, program: Option<&str>) -> Api {
        Api { client: self.client.with_token(Some(token), program).expect("a token and program fit in headers") }
    }

    pub fn req<T>(&self, body: T) -> tonic::Request<T> {
        self.client.request(body)
    }

    pub fn channel(&self) -> Channel {
        self.client.channel()
    }

    pub fn sandboxes(&self) -> SandboxesClient<Channel> {
        self.client.sandboxes()
    }
    pub fn grants(&self) -> GrantsClient<Channel> {
        self.client.grants()
    }
    pub fn audit(&self) -> AuditClient<Channel> {
        self.client.audit()
    }
    pub fn users(&self) -> UsersClient<Channel> {
        self.client.users()
    }
    pub fn supervisor(&self) -> SupervisorClient<Channel> {
        self.client.supervisor()
    }
    pub fn health(&self) -> HealthClient<Channel> {
        self.client.health()
    }

    /// Creates a root with a grant.
    pub async fn root(&self, name: &str, grant: Option<pb::GrantSpec>) -> Result<pb::Sandbox, tonic::Status> {
        let req = pb::CreateSandboxRequest {
            name: name.into(),
            command: vec!["sleep".into(), "600".into()],
            grant,
            ..Default::default()
        };
        Ok(self.sandboxes().create_sandbox(self.req(req)).await?.into_inner().sandbox.unwrap())
    }

    /// Creates a child (agent unless `tool`).
    pub async fn child(&self, parent: &str, name: &str, tool: bool) -> Result<pb::Sandbox, tonic::Status> {
        self.child_req(pb::CreateChildSandboxRequest {
            parent: parent.into(),
            name: name.into(),
            kind: if tool { pb::SandboxKind::Tool } else { pb::SandboxKind::Agent } as i32,
            command: vec!["sleep".into(), "600".into()],
            ..Default::default()
        })
        .await
        .map(|r| r.sandbox.unwrap())
    }

    pub async fn child_req(
        &self,
        req: pb::CreateChildSandboxRequest,
    ) -> Result<pb::CreateSandboxResponse, tonic::Status> {
        Ok(self.sandboxes().create_child_sandbox(self.req(req)).await?.into_inner())
    }

    pub async fn tree(&self, name: &str) -> Vec<pb::Sandbox> {
        self.sandboxes()
            .list_children(self.req(pb::ListChildrenRequest { sandbox: name.into() }))
            .await
            .expect("list children")
            .into_inner()
            .sandboxes
    }

    pub async fn get(&self, name: &str) -> Result<pb::Sandbox, tonic::Status> {
        Ok(self.sandboxes().get_sandbox(self.req(pb::GetSandboxRequest { sandbox: name.into() })).await?.into_inner())
    }

    pub async fn audit_of(&self, sandbox: &str) -> Vec<pb::AuditEntry> {
        self.audit()
            .list_audit(self.req(pb::ListAuditRequest {
                sandbox: sandbox.into(),
                page_size: 1000,
                ..Default::default()
            }))
            .await
            .expect("audit")
            .into_inner()
            .entries
    }
}

/// A grant spec with an expiry in an hour and program /usr/bin/python3.
pub fn grant(max_depth: i32, max_breadth: i32, max_total: i32) -> pb::GrantSpec {
    pb::GrantSpec {
        max_depth,
        max_breadth,
        max_total,
        expires: "1h".into(),
        program: "/usr/bin/python3".into(),
        ..Default::default()
    }
}

/// The project error code a status carries (the gateway's ErrorInfo reason), else
/// `grpc:` and the status code.
pub fn code(s: &tonic::Status) -> String {
    match Refusal::from(s) {
        Refusal { code: Some(c), from_gateway: true, .. } => c.as_str().to_string(),
        _ => format!("grpc:{:?}", s.code()),
    }
}

/// The ErrorInfo metadata of a status.
pub fn details(s: &tonic::Status) -> HashMap<String, String> {
    Refusal::from(s).details.into_iter().collect()
}

/// Asserts a result is a refusal with `expected` code; returns the status.
#[track_caller]
pub fn refused<T: std::fmt::Debug>(r: Result<T, tonic::Status>, expected: &str) -> tonic::Status {
    match r {
        Ok(v) => panic!("expected {expected}, got success: {v:?}"),
        Err(s) => {
            assert_eq!(code(&s), expected, "status: {s:?}");
            s
        }
    }
}

/// Polls until `f` holds or `timeout` passes.
pub async fn eventually<F, Fut>(timeout: Duration, mut f: F) -> bool
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        if f().await {
            return true;
        }
        if tokio::time::Instant::now() > deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

/// The cgroup folder of `pid` in hierarchy `controller` ("" for the unified one), if any.
pub fn cgroup_folder(pid: i32, controller: &str) -> Option<String> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).ok()?;
    let line = text.lines().find(|l| l.split(':').nth(1) == Some(controller))?;
    Some(line.splitn(3, ':').nth(2)?.to_string()).filter(|f| f != "/")
}

/// The children of `pid`.
pub fn children(pid: i32) -> Vec<i32> {
    let tasks = std::fs::read_dir(format!("/proc/{pid}/task")).into_iter().flatten().flatten();
    let mut kids = Vec::new();
    for t in tasks {
        let text = std::fs::read_to_string(t.path().join("children")).unwrap_or_default();
        kids.extend(text.split_whitespace().filter_map(|p| p.parse::<i32>().ok()));
    }
    kids
}

/// Pids of supervisor processes started for `state_dir` (an independent /proc scan, not the
/// driver's).
pub fn supervisor_pids(state_dir: &std::path::Path) -> Vec<i32> {
    let dir = std::fs::canonicalize(state_dir).unwrap_or(state_dir.to_path_buf());
    let needle = dir.to_string_lossy().into_owned();
    let mut pids = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Some(pid) = entry.file_name().to_str().and_then(|s| s.parse::<i32>().ok()) else {
            continue;
        };
        let Ok(cmd) = std::fs::read(entry.path().join("cmdline")) else {
            continue;
        };
        let cmd = String::from_utf8_lossy(&cmd).replace('\0', " ");
        let zombie = std::fs::read_to_string(entry.path().join("stat")).is_ok_and(|s| s.contains(") Z "));
        // A pooled supervisor not claimed yet names the nil id: it runs no sandbox.
        let unclaimed = cmd.contains(&uuid::Uuid::nil().to_string());
        if !zombie && !unclaimed && cmd.contains("openshell-supervisor") && cmd.contains(&needle) {
            pids.push(pid);
        }
    }
    // A sandbox's init shows its supervisor's arguments from its clone to its exec.
    let parent = |pid: i32| {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        stat.rsplit_once(')').and_then(|(_, rest)| rest.split_whitespace().nth(1)?.parse::<i32>().ok())
    };
    let all = pids.clone();
    pids.retain(|pid| parent(*pid).is_none_or(|p| !all.contains(&p)));
    pids
}

/// A free TCP port on 127.0.0.1.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// The sandbox once it left PROVISIONING (within 20 s): READY comes a moment after its main
/// command starts (once the proxy and the work channel are up too), so a test that saw the
/// agent act asks this rather than the phase at that instant.
pub async fn started(api: &Api, name: &str) -> pb::Sandbox {
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    loop {
        let s = api.get(name).await.unwrap_or_else(|e| panic!("{name}: {e}"));
        if s.phase != "PROVISIONING" || std::time::Instant::now() > deadline {
            return s;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// `SELECT count(*) ...` as an i64.
pub async fn count(sql: &tokio_postgres::Client, query: &str) -> i64 {
    sql.query_one(query, &[]).await.unwrap().get(0)
}

/// The real `openshell-gateway` binary on a database, killable with SIGKILL; killed on drop.
pub struct GatewayProcess {
    child: std::process::Child,
    pub endpoint: String,
}

impl GatewayProcess {
    /// Listens on `listen` (port 0 for any). With `config`, a first start writes the admin's
    /// token there (see [`config_token`]); `extra` are further `openshell-gateway` flags.
    pub fn spawn(
        db_url: &str,
        state: &std::path::Path,
        listen: &str,
        config: Option<&std::path::Path>,
        extra: &[&str],
    ) -> GatewayProcess {
        use std::io::BufRead;
        let mut cmd = std::process::Command::new(bin("openshell-gateway"));
        cmd.args(["--database-url", db_url, "--allow-superuser", "--listen", listen, "--state-dir"])
            .arg(state)
            .args(extra)
            .env("RUST_LOG", "warn")
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::inherit());
        match config {
            Some(c) => cmd.env("OPENSHELL_CONFIG", c),
            None => cmd.arg("--no-client-config"),
        };
        let mut child = cmd.spawn().expect("spawn openshell-gateway");
        let mut line = String::new();
        std::io::BufReader::new(child.stdout.take().unwrap()).read_line(&mut line).unwrap();
        let endpoint =
            line.trim().strip_prefix("gateway listening on ").expect("the gateway prints its endpoint").to_string();
        GatewayProcess { child, endpoint }
    }

    pub fn kill9(mut self) {
        self.child.kill().unwrap();
        self.child.wait().unwrap();
    }
}

impl Drop for GatewayProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The token a gateway's first start wrote to a CLI config file.
pub fn config_token(config: &std::path::Path) -> String {
    let v: serde_json::Value = serde_json::from_slice(&std::fs::read(config).unwrap()).unwrap();
    v["token"].as_str().unwrap().to_string()
}

/// The Python (a venv of /usr/bin/python3 with the official MCP SDK, made by
/// scripts/setup.d/45-mcp-clients.sh) that sandboxes run.
pub fn sandbox_python() -> PathBuf {
    PathBuf::from("/opt/openshell-test/py-sandbox/bin/python")
}

/// A lead's policy for a test that runs a client inside it: the system folders read-only,
/// /tmp writable, Landlock best effort, and read access to each of `readable` (an SDK's
/// install, the scripts) too.
pub fn policy_reading(readable: &[&std::path::Path]) -> String {
    let extra: String = readable.iter().map(|p| format!(", {}", p.display())).collect();
    format!(
        "version: 1
filesystem_policy:
  include_workdir: true
  read_only: [/usr, /lib, /proc, /dev/urandom, /etc{extra}]
  read_write: [/tmp, /dev/null]
landlock: {{ compatibility: best_effort }}
"
    )
}

/// A copy of the files of `dir` that sandboxes can read: the checkout may sit under /tmp,
/// which every sandbox replaces with a private one. The copy is under /var/tmp, world-readable,
/// named by this process; copies of test processes that are gone are removed first (some
/// copies live in statics, which no destructor ends).
pub fn sandbox_visible(dir: &std::path::Path) -> PathBuf {
    use std::os::unix::fs::PermissionsExt;
    const PREFIX: &str = "openshell-e2e-files-";
    static SWEPT: std::sync::Once = std::sync::Once::new();
    SWEPT.call_once(|| {
        for e in std::fs::read_dir("/var/tmp").into_iter().flatten().flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            let pid = name.strip_prefix(PREFIX).and_then(|rest| rest.split('-').next()?.parse::<u32>().ok());
            let gone = |pid: u32| !std::path::Path::new("/proc").join(pid.to_string()).exists();
            // Older copies carry no pid: theirs are gone too.
            if name.starts_with(PREFIX) && pid.is_none_or(gone) {
                let _ = std::fs::remove_dir_all(e.path());
            }
        }
    });
    let to = PathBuf::from("/var/tmp").join(format!("{PREFIX}{}-{}", std::process::id(), Uuid::new_v4()));
    std::fs::create_dir_all(&to).unwrap();
    std::fs::set_permissions(&to, std::fs::Permissions::from_mode(0o755)).unwrap();
    for e in std::fs::read_dir(dir).unwrap() {
        let e = e.unwrap();
        if e.file_type().unwrap().is_file() {
            let dest = to.join(e.file_name());
            std::fs::copy(e.path(), &dest).unwrap();
            std::fs::set_permissions(&dest, std::fs::Permissions::from_mode(0o644)).unwrap();
        }
    }
    to
}
