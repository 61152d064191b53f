//! The container driver: each sandbox is a container (Docker Engine API: Docker or Podman)
//! from its template's image, whose first process is the same `openshell-supervisor` the
//! process driver runs, bound in read-only from the host.
//!
//! The container carries only what the supervisor needs to isolate its agent (a few
//! capabilities it drops before the agent starts, no devices, the engine's default seccomp
//! profile, `no-new-privileges`, a read-only root) and the template's CPU, memory and process
//! limits, which the supervisor checks are in force. The sandbox credential goes through the
//! container's attached stdin: never in the image, the container's configuration or its
//! environment. Containers are found by their labels (sandbox id, runner id), so a restarted
//! gateway finds them again; a stopped sandbox's container is removed and its log kept under
//! the state directory. Only the sandbox's folder in the sandbox root is bound in ([`Layout`]):
//! the sandbox's own disk, mounted there before the container starts, so its working
//! directory and /tmp are bounded as on the process driver. The container's root is
//! read-only, so its writable layer takes no writes at all (podman's overlay driver on a
//! filesystem without project quotas, as here, cannot bound one anyway), and its output log
//! is capped by the engine.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use bollard::Docker;
use bollard::models::{ContainerCreateBody, HostConfig};
use bollard::query_parameters::{
    AttachContainerOptions, CreateContainerOptions, ListContainersOptions, LogsOptions, RemoveContainerOptions,
    StopContainerOptions,
};
use futures::StreamExt;
use openshell_disk::{Disks, Shortage};
use openshell_isolation::cgroup::SUPERVISOR_PIDS;
use openshell_isolation::uids::{self, UidRange};
use tokio::io::AsyncWriteExt;
use uuid::Uuid;

use crate::layout::Layout;
use crate::{DiskBackend, DiskSettings, DiskUsage, Driver, DriverError, ProxySettings, StartSpec, binary, files};

/// Labels every sandbox container carries.
pub const LABEL_SANDBOX: &str = "org.openshell.sandbox";
pub const LABEL_RUNNER: &str = "org.openshell.runner";
/// Where the runtime's files appear inside the container.
const SUPERVISOR: &str = "/.openshell/openshell-supervisor";
const UID_LOCK: &str = "/.openshell/uid.lock";
const EXTRA_CA: &str = "/.openshell/extra-ca.pem";
/// What the supervisor needs to set up the agent's isolation, and nothing more: namespaces,
/// mounts and the host name (SYS_ADMIN), loopback in the new network namespace (NET_ADMIN),
/// the agent's uid (SETUID, SETGID), an empty bounding set (SETPCAP), stopping and
/// identifying the agent's processes, which run as another uid (KILL, SYS_PTRACE, and
/// DAC_OVERRIDE: an agent's `/proc/PID/fd` is its uid's, mode 0500, so the init lists it only
/// past the permission bits; not DAC_READ_SEARCH, which the engine's seccomp profile pairs
/// with `open_by_handle_at`). The agent gets none of them.
const CAPABILITIES: &[&str] =
    &["SYS_ADMIN", "NET_ADMIN", "SETUID", "SETGID", "SETPCAP", "KILL", "SYS_PTRACE", "DAC_OVERRIDE"];
/// Most bytes of a container's log kept when it is removed.
const LOG_CAP: usize = 16 << 20;

pub struct ContainerDriver {
    docker: Docker,
    supervisor: PathBuf,
    layout: Layout,
    grace: Duration,
    uids: UidRange,
    proxy: ProxySettings,
    runner: String,
    disks: Arc<Disks>,
}

fn err(what: impl std::fmt::Display, e: impl std::fmt::Display) -> DriverError {
    DriverError(format!("{what}: {e}"))
}

fn not_found(e: &bollard::errors::Error) -> bool {
    matches!(e, bollard::errors::Error::DockerResponseServerError { status_code: 404, .. })
}

/// The engine's socket: `--container-host`, else `DOCKER_HOST`, else the local Docker
/// socket, else rootful Podman's.
pub fn default_host() -> String {
    if let Ok(h) = std::env::var("DOCKER_HOST")
        && !h.is_empty()
    {
        return h;
    }
    for sock in ["/var/run/docker.sock", "/run/podman/podman.sock"] {
        if Path::new(sock).exists() {
            return format!("unix://{sock}");
        }
    }
    "unix:///var/run/docker.sock".into()
}

impl ContainerDriver {
    /// `host` is the engine's socket (`unix:///...`); `runner` labels this gateway's
    /// containers. Other arguments as for the process driver.
    pub fn new(
        host: &str,
        supervisor: PathBuf,
        layout: Layout,
        grace: Duration,
        uids: UidRange,
        proxy: ProxySettings,
        runner: String,
    ) -> Result<ContainerDriver, DriverError> {
        let path = host
            .strip_prefix("unix://")
            .ok_or_else(|| DriverError(format!("--container-host {host:?}: only unix:// sockets are supported")))?;
        let docker = Docker::connect_with_unix(path, 120, bollard::API_DEFAULT_VERSION)
            .map_err(|e| err(format!("container engine at {host}"), e))?;
        if !supervisor.is_file() {
            return Err(DriverError(format!(
                "supervisor binary not found at {} (build it with `cargo build -p openshell-supervisor`, or pass --supervisor-bin)",
                supervisor.display()
            )));
        }
        uids.check_unused().map_err(|e| DriverError(e.to_string()))?;
        let disks = Arc::new(Disks::new(&layout.disks(), DiskSettings::default()).map_err(|e| DriverError(e.0))?);
        Ok(ContainerDriver { docker, supervisor, layout, grace, uids, proxy, runner, disks })
    }

    /// The same driver with sandboxes' disks kept as `settings` say.
    pub fn with_disks(mut self, settings: DiskSettings) -> Result<ContainerDriver, DriverError> {
        self.disks = Arc::new(Disks::new(&self.layout.disks(), settings).map_err(|e| DriverError(e.0))?);
        Ok(self)
    }

    /// The container's name for a sandbox.
    pub fn container_name(id: Uuid) -> String {
        format!("openshell-{id}")
    }

    /// Whether the sandbox's container runs now (`None`: there is none).
    async fn running(&self, id: Uuid) -> Result<Option<bool>, DriverError> {
        let mut tries = 0;
        loop {
            match self.docker.inspect_container(&Self::container_name(id), None).await {
                Ok(c) => return Ok(Some(c.state.and_then(|s| s.running).unwrap_or(false))),
                Err(e) if not_found(&e) => return Ok(None),
                // Podman reports transitional states (`stopping`) the API's schema lacks:
                // ask again once it settled.
                Err(bollard::errors::Error::JsonDataError { .. }) if tries < 100 => {
                    tries += 1;
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                Err(e) => return Err(err("container engine", e)),
            }
        }
    }

    /// The container's configuration: the supervisor as its entry point, the runtime's files
    /// bound in, the template's limits.
    fn config(&self, spec: &StartSpec, image: &str, uid: u32, supervisor: &Path) -> ContainerCreateBody {
        let dir = self.layout.sandbox_dir(spec.id);
        let work = self.layout.workdir(spec.id);
        let mut cmd: Vec<String> = vec![
            "--sandbox-id".into(),
            spec.id.to_string(),
            "--state-dir".into(),
            self.layout.state_dir().display().to_string(),
            "--name".into(),
            spec.name.clone(),
            "--gateway".into(),
            spec.gateway.clone(),
            "--grace".into(),
            self.grace.as_secs().max(1).to_string(),
            "--uid".into(),
            uid.to_string(),
            "--uid-lock".into(),
            UID_LOCK.into(),
            "--workdir".into(),
            work.display().to_string(),
            "--container-cgroup".into(),
        ];
        for (flag, value) in [
            ("--cpu-millis", spec.limits.cpu_millis.map(u64::from)),
            ("--memory-bytes", spec.limits.memory_bytes),
            ("--pids", spec.limits.pids),
        ] {
            if let Some(v) = value {
                cmd.push(flag.into());
                cmd.push(v.to_string());
            }
        }
        let mut binds = vec![
            format!("{}:{SUPERVISOR}:ro", supervisor.display()),
            format!("{}:{UID_LOCK}:ro", self.layout.uids().join(uid.to_string()).display()),
            // The sandbox's folder at the same path as on the host: its workdir, CA, files.
            format!("{}:{}:rw", dir.display(), dir.display()),
        ];
        if let Some(ca) = &self.proxy.extra_ca {
            binds.push(format!("{}:{EXTRA_CA}:ro", ca.display()));
            cmd.push("--proxy-extra-ca".into());
            cmd.push(EXTRA_CA.into());
        }
        for (host, ip) in &self.proxy.resolve {
            cmd.push("--proxy-resolve".into());
            cmd.push(format!("{host}={ip}"));
        }
        cmd.extend(files::supervisor_flags(self.disks.settings().backend, spec.disk_bytes));
        cmd.push("--".into());
        cmd.extend(spec.command.iter().cloned());
        let memory = spec.limits.memory_bytes.map(|m| m as i64);
        let labels = HashMap::from([
            (LABEL_SANDBOX.to_string(), spec.id.to_string()),
            (LABEL_RUNNER.to_string(), self.runner.clone()),
        ]);
        ContainerCreateBody {
            image: Some(image.into()),
            entrypoint: Some(vec![SUPERVISOR.into()]),
            cmd: Some(cmd),
            user: Some("0:0".into()),
            working_dir: Some(dir.display().to_string()),
            // The credential arrives on stdin, once; nothing of it is in this configuration.
            open_stdin: Some(true),
            stdin_once: Some(true),
            attach_stdin: Some(true),
            tty: Some(false),
            env: Some(vec!["PATH=/usr/local/bin:/usr/bin:/bin".into()]),
            labels: Some(labels),
            host_config: Some(HostConfig {
                binds: Some(binds),
                // The supervisor's own network: its gateway connection and the proxy's
                // upstream traffic. The agent is in a network namespace of its own whose
                // only way out is the proxy.
                network_mode: Some("host".into()),
                cap_drop: Some(vec!["ALL".into()]),
                cap_add: Some(CAPABILITIES.iter().map(|c| c.to_string()).collect()),
                security_opt: Some(vec!["no-new-privileges".into()]),
                privileged: Some(false),
                readonly_rootfs: Some(true),
                devices: Some(vec![]),
                device_requests: Some(vec![]),
                memory,
                // No swap: the limit is the limit.
                memory_swap: memory,
                nano_cpus: spec.limits.cpu_millis.map(|m| i64::from(m) * 1_000_000),
                // The agent's own limit is its uid's RLIMIT_NPROC (set by the supervisor): the
                // container also holds the supervisor, which a fork bomb must not starve.
                pids_limit: spec.limits.pids.map(|p| (p + SUPERVISOR_PIDS) as i64),
                // What the main command prints is kept by the engine: capped, so it cannot
                // fill the host's disk either.
                log_config: Some(bollard::models::HostConfigLogConfig {
                    typ: Some("k8s-file".into()),
                    config: Some(HashMap::from([("max-size".to_string(), LOG_CAP.to_string())])),
                }),
                auto_remove: Some(false),
                init: Some(false),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    /// Appends the container's output (the supervisor's log and the main command's output)
    /// to the sandbox's `supervisor.log`, as the process driver writes it.
    async fn keep_logs(&self, id: Uuid) {
        let options = LogsOptions { stdout: true, stderr: true, ..Default::default() };
        let mut stream = self.docker.logs(&Self::container_name(id), Some(options));
        let mut text = Vec::new();
        while let Some(chunk) = stream.next().await {
            match chunk {
                Ok(out) => text.extend_from_slice(&out.into_bytes()),
                Err(_) => break,
            }
            if text.len() > LOG_CAP {
                text.truncate(LOG_CAP);
                text.extend_from_slice(b"\n[log truncated]\n");
                break;
            }
        }
        if text.is_empty() {
            return;
        }
        if !self.layout.log_dir(id).is_dir() {
            return;
        }
        if let Ok(mut f) = self.layout.open_log(id) {
            let _ = std::io::Write::write_all(&mut f, &text);
        }
    }

    async fn remove_container(&self, id: Uuid) -> Result<(), DriverError> {
        let options = RemoveContainerOptions { force: true, v: true, ..Default::default() };
        match self.docker.remove_container(&Self::container_name(id), Some(options)).await {
            Ok(()) => Ok(()),
            Err(e) if not_found(&e) => Ok(()),
            Err(e) => Err(err(format!("removing the container of sandbox {id}"), e)),
        }
    }

    async fn launch(&self, spec: &StartSpec, image: &str) -> Result<(), DriverError> {
        let supervisor = binary::trusted(&self.supervisor)?;
        self.disks.check_host().map_err(|e| DriverError(e.0))?;
        self.layout.prepare(spec.id, self.disks.settings().backend != openshell_disk::Backend::Image)?;
        // Mounted before the container is made: the bind of its folder is its disk.
        files::make_disk(&self.disks, &self.layout, spec, None).await?;
        let lease = uids::allocate(&self.layout.uids(), self.uids).map_err(|e| DriverError(e.to_string()))?;
        let work = self.layout.workdir(spec.id);
        std::os::unix::fs::chown(&work, Some(lease.uid), Some(lease.uid)).map_err(|e| err(work.display(), e))?;
        let config = self.config(spec, image, lease.uid, &supervisor);
        let name = Self::container_name(spec.id);
        let options = CreateContainerOptions { name: Some(name.clone()), ..Default::default() };
        self.docker.create_container(Some(options), config).await.map_err(|e| err("creating the container", e))?;
        // The supervisor takes the uid's lock itself, for as long as it lives.
        drop(lease);
        self.docker.start_container(&name, None).await.map_err(|e| err("starting the container", e))?;
        // The credential (and the creator's variables) go through the attached stdin, which
        // closes once written.
        let attach = AttachContainerOptions { stdin: true, stream: true, ..Default::default() };
        let mut io = self.docker.attach_container(&name, Some(attach)).await.map_err(|e| err("attaching stdin", e))?;
        let mut line = spec.handoff();
        let written = async {
            io.input.write_all(&line).await?;
            io.input.flush().await?;
            io.input.shutdown().await
        }
        .await;
        line.fill(0);
        drop(io);
        written.map_err(|e| err("handing the credential to the supervisor", e))
    }
}

#[async_trait::async_trait]
impl Driver for ContainerDriver {
    fn name(&self) -> &'static str {
        "container"
    }

    fn needs_image(&self) -> bool {
        true
    }

    async fn resolve_image(&self, reference: &str) -> Result<Option<String>, DriverError> {
        match self.docker.inspect_image(reference).await {
            Ok(image) => image.id.map(Some).ok_or_else(|| DriverError(format!("image {reference:?} has no id"))),
            Err(e) if not_found(&e) => Ok(None),
            Err(e) => Err(err("container engine", e)),
        }
    }

    async fn start(&self, spec: StartSpec) -> Result<(), DriverError> {
        let Some(image) = spec.image.clone() else {
            return Err(DriverError("the container driver runs sandboxes from an image, and this one has none".into()));
        };
        match self.running(spec.id).await? {
            Some(true) => return Ok(()),
            // A container that never ran (a start interrupted before): start afresh.
            Some(false) => self.remove_container(spec.id).await?,
            None => {}
        }
        let started = self.launch(&spec, &image).await;
        if started.is_err() {
            // Nothing half-started stays behind; its files are kept, unmounted.
            let _ = self.remove_container(spec.id).await;
            let _ = files::release_disk(&self.disks, &self.layout, spec.id).await;
        }
        started
    }

    async fn stop(&self, id: Uuid, grace: Duration) -> Result<(), DriverError> {
        let name = Self::container_name(id);
        match self.running(id).await? {
            None => return files::release_disk(&self.disks, &self.layout, id).await,
            Some(true) => {
                // TERM to the supervisor (it gives its main command `grace`), KILL after.
                let t = (grace.as_secs() + 2).min(i32::MAX as u64) as i32;
                let options = StopContainerOptions { t: Some(t), signal: None };
                if let Err(e) = self.docker.stop_container(&name, Some(options)).await
                    && !not_found(&e)
                {
                    tracing::warn!(sandbox = %id, "stopping the container: {e}");
                }
            }
            Some(false) => {}
        }
        self.keep_logs(id).await;
        self.remove_container(id).await?;
        // Its files stay for the record, out of reach of a later sandbox given the same uid.
        let work = self.layout.workdir(id);
        if std::fs::symlink_metadata(&work).is_ok_and(|m| m.is_dir()) {
            let _ = std::os::unix::fs::chown(&work, Some(0), Some(0));
        }
        files::release_disk(&self.disks, &self.layout, id).await
    }

    fn room(&self, disk_bytes: Option<u64>) -> Result<(), Shortage> {
        self.disks.room(disk_bytes)
    }

    async fn remove(&self, id: Uuid) -> Result<(), DriverError> {
        if self.running(id).await?.is_some() {
            return Err(DriverError(format!("sandbox {id} still has a container: stop it before removing its files")));
        }
        files::remove(&self.disks, &self.layout, id).await
    }

    fn with_files(&self) -> Vec<Uuid> {
        files::with_files(&self.disks, &self.layout)
    }

    fn disk_usage(&self) -> Option<(DiskBackend, DiskUsage)> {
        Some((self.disks.settings().backend, self.disks.usage()))
    }

    async fn list(&self) -> Result<Vec<Uuid>, DriverError> {
        // Running ones only (podman's transitional states do not parse as the API's schema).
        let filters = HashMap::from([
            ("label".to_string(), vec![format!("{LABEL_RUNNER}={}", self.runner)]),
            ("status".to_string(), vec!["running".to_string()]),
        ]);
        let options = ListContainersOptions { all: false, filters: Some(filters), ..Default::default() };
        let containers = self.docker.list_containers(Some(options)).await.map_err(|e| err("container engine", e))?;
        let mut ids: Vec<Uuid> =
            containers.iter().filter_map(|c| c.labels.as_ref()?.get(LABEL_SANDBOX)?.parse().ok()).collect();
        ids.sort();
        ids.dedup();
        Ok(ids)
    }
}
