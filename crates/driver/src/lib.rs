//! Compute drivers: start, stop and list sandbox workloads (the process driver is the default).
//!
//! A driver knows nothing of grants or lineage: the gateway decides, the driver runs.
//! Every call is idempotent, so the reconciler can repeat any of them after a crash.

mod binary;
mod claim;
pub mod container;
mod files;
pub mod layout;
mod null;
mod pool;
mod process;
mod run_lock;

use std::time::Duration;

use uuid::Uuid;

pub use container::ContainerDriver;
pub use layout::Layout;
pub use null::NullDriver;
pub use openshell_disk::{Backend as DiskBackend, Settings as DiskSettings, Shortage, Usage as DiskUsage};
pub use openshell_isolation::cgroup::Limits;
pub use openshell_isolation::uids::{DEFAULT_RANGE, UidRange};
pub use process::ProcessDriver;

/// What a driver needs to start one sandbox.
pub struct StartSpec {
    pub id: Uuid,
    pub name: String,
    pub command: Vec<String>,
    /// The sandbox credential: handed to the supervisor only, never to the main command.
    pub credential: String,
    /// Where the supervisor reaches the gateway.
    pub gateway: String,
    /// The sandbox's resources (its template's CPU, memory and process limits).
    pub limits: Limits,
    /// The image (by digest) a container driver runs it from; a process driver runs none.
    pub image: Option<String>,
    /// The size of the sandbox's own filesystem (its working directory and /tmp).
    pub disk_bytes: u64,
    /// Variables for the main command, given by its creator (validated by the gateway).
    /// Values may be secrets: like the credential they reach the supervisor only through
    /// its standard input, and are never shown.
    pub env: Vec<(String, String)>,
    /// What the supervisor starts with, as the admission wrote it: one JSON object of its
    /// policy, the policy's version and the boundaries its filesystem rules are cut to (what a
    /// supervisor's connect returns). A driver that can hands it over with the start, so the
    /// supervisor waits for no call of its own; otherwise (or `None`) the supervisor connects
    /// and asks.
    pub start_data: Option<String>,
}

impl StartSpec {
    /// What the supervisor reads on its standard input: the credential on the first line,
    /// the environment as one JSON object on the second. The caller wipes it after writing.
    pub fn handoff(&self) -> Vec<u8> {
        let env: serde_json::Map<String, serde_json::Value> =
            self.env.iter().map(|(k, v)| (k.clone(), serde_json::Value::String(v.clone()))).collect();
        let mut bytes = Vec::with_capacity(self.credential.len() + 2);
        bytes.extend_from_slice(self.credential.as_bytes());
        bytes.push(b'\n');
        // Always written (`{}` when empty), so a line the driver sends after it is never
        // taken for it. serde_json escapes newlines inside strings: the object is one line.
        bytes.extend_from_slice(serde_json::Value::Object(env).to_string().as_bytes());
        bytes.push(b'\n');
        bytes
    }
}

impl std::fmt::Debug for StartSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StartSpec")
            .field("id", &self.id)
            .field("name", &self.name)
            .field("command", &self.command)
            .field("credential", &"<redacted>")
            .field("gateway", &self.gateway)
            .field("limits", &self.limits)
            .field("image", &self.image)
            .field("disk_bytes", &self.disk_bytes)
            .field("env", &self.env.iter().map(|(k, _)| k.as_str()).collect::<Vec<_>>())
            .field("start_data", &self.start_data.is_some())
            .finish()
    }
}

#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct DriverError(pub String);

/// How every sandbox's egress proxy is set up on this host.
#[derive(Debug, Clone, Default)]
pub struct ProxySettings {
    /// Extra certificate authorities (PEM) trusted for upstream servers.
    pub extra_ca: Option<std::path::PathBuf>,
    /// Names the proxy resolves to fixed addresses (tests point names at test hosts).
    pub resolve: Vec<(String, std::net::IpAddr)>,
}

#[async_trait::async_trait]
pub trait Driver: Send + Sync + 'static {
    /// Short name shown by `gateway status`.
    fn name(&self) -> &'static str;
    /// The gateway serves at `endpoint` (where sandboxes' supervisors connect): called once,
    /// before any start.
    fn serving(&self, _endpoint: &str) {}
    /// Starts the workload; returns once it was launched (READY comes from the supervisor).
    async fn start(&self, spec: StartSpec) -> Result<(), DriverError>;
    /// Stops the workload (TERM, then KILL after `grace`) and returns once it is gone.
    /// Stopping a workload that does not exist succeeds.
    async fn stop(&self, id: Uuid, grace: Duration) -> Result<(), DriverError>;
    /// The sandboxes whose workloads are running now.
    async fn list(&self) -> Result<Vec<Uuid>, DriverError>;
    /// Resolves an image reference to the digest every start names: `Ok(None)` when the
    /// host has no such image. Drivers that run no image refuse.
    async fn resolve_image(&self, reference: &str) -> Result<Option<String>, DriverError> {
        Err(DriverError(format!("the {} driver runs no image (asked for {reference:?})", self.name())))
    }
    /// Whether every sandbox needs an image (a template without one cannot start).
    fn needs_image(&self) -> bool {
        false
    }
    /// Whether this host has room for a new sandbox whose disk is `disk_bytes` (`None`: its
    /// size is not known before admission). Admission asks first; the start decides.
    fn room(&self, _disk_bytes: Option<u64>) -> Result<(), Shortage> {
        Ok(())
    }
    /// Removes a stopped sandbox's files: its disk, its folder and its log. Removing what is
    /// already gone succeeds; a sandbox whose workload still runs is refused.
    async fn remove(&self, _id: Uuid) -> Result<(), DriverError> {
        Ok(())
    }
    /// The sandboxes that still have files here (running, or kept after a stop).
    fn with_files(&self) -> Vec<Uuid> {
        Vec::new()
    }
    /// How sandboxes' disks are kept here, and the space they use (`None`: no disks).
    fn disk_usage(&self) -> Option<(DiskBackend, DiskUsage)> {
        None
    }
}
