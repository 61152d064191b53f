//! The gateway: authentication, the typed operations, gRPC and MCP over them, driver calls and reconciliation.
//!
//! Every operation lives in `ops/`, one module each; `grpc/` and `mcp/` only translate to
//! them; `startup` starts a gateway; `lifecycle` (the reconciler) and `idle` are its loops.
//! The map of every module: docs/design.md#the-code-map.
//!
//! It keeps no authoritative state in memory: every decision is a call into the store,
//! where PostgreSQL enforces the rules, so several gateways can share one database.

pub mod argv;
pub mod auth;
pub mod changes;
pub mod client_config;
mod convert;
mod database_watch;
mod grpc;
mod idle;
pub mod init_db;
mod input;
mod lifecycle;
pub mod logging;
pub mod mcp;
pub mod metrics;
pub mod ops;
mod phases;
mod program;
mod rate;
pub mod startup;
mod status;
pub mod template;
pub mod tokens;
mod work;

use std::sync::Arc;
use std::time::Duration;

use openshell_driver::Driver;
use openshell_store::Store;

pub use auth::PROGRAM_HEADER;
pub use grpc::{Api, check_response};
pub use ops::DEFAULT_POLICY_YAML;
pub use ops::{ChildRequest, RootRequest};
pub use status::{DOMAIN, from_status, grpc_code, to_status};

/// Tunables of one gateway process.
#[derive(Debug, Clone)]
pub struct Settings {
    /// Where supervisors reach this gateway (its gRPC endpoint).
    pub endpoint: String,
    /// This gateway's driver instance: it judges only the workloads it runs.
    pub runner: String,
    /// Between TERM and KILL when stopping a workload.
    pub stop_grace: Duration,
    /// A PROVISIONING sandbox with no workload after this long has failed.
    pub provision_timeout: Duration,
    /// A READY sandbox whose workload vanished is failed after this long unchanged.
    pub reconcile_grace: Duration,
    pub reconcile_interval: Duration,
    /// The database URL without its password, for `gateway status`.
    pub database_public_url: String,
    /// How long one containment proof may take before it refuses as inconclusive.
    pub proof_timeout: Duration,
    /// Largest file a GetFile may ask for.
    pub max_file_bytes: u64,
    /// How long a door credential lives (its supervisor renews it well before).
    pub door_ttl: Duration,
    /// The MCP endpoint's largest request body, told to doors with their credential.
    pub mcp_max_body_bytes: usize,
    /// Proofs run at once; more wait for a slot.
    pub proof_concurrency: usize,
    /// How long a proof waits for a slot before it is refused UNAVAILABLE.
    pub proof_queue_wait: Duration,
    /// CheckPolicy calls one principal may make (a token bucket of this size).
    pub check_policy_rate: openshell_store::Rate,
    /// A root's disk when it asks for none, and the largest any sandbox may have.
    pub disk: template::DiskBounds,
    /// How long a stopped or failed sandbox's files are kept before they are removed.
    pub keep_stopped_files: Duration,
}

impl Default for Settings {
    fn default() -> Settings {
        Settings {
            endpoint: String::new(),
            runner: String::new(),
            stop_grace: Duration::from_secs(5),
            provision_timeout: Duration::from_secs(30),
            reconcile_grace: Duration::from_secs(2),
            reconcile_interval: Duration::from_secs(10),
            database_public_url: String::new(),
            proof_timeout: Duration::from_secs(5),
            max_file_bytes: ops::DEFAULT_MAX_FILE_BYTES,
            door_ttl: Duration::from_secs(600),
            mcp_max_body_bytes: mcp::McpSettings::default().max_body_bytes,
            proof_concurrency: std::thread::available_parallelism().map_or(2, |n| n.get()),
            proof_queue_wait: Duration::from_secs(2),
            check_policy_rate: openshell_store::Rate { calls: 30, period_s: 60 },
            disk: template::DiskBounds {
                default_bytes: template::DEFAULT_DISK_BYTES,
                max_bytes: openshell_disk::DEFAULT_MAX_BYTES,
            },
            keep_stopped_files: Duration::from_secs(15 * 60),
        }
    }
}

/// The gateway's shared handles; cheap to clone.
#[derive(Clone)]
pub struct Gateway {
    pub store: Store,
    pub driver: Arc<dyn Driver>,
    pub settings: Arc<Settings>,
    /// Verdicts are cached by the pair of policy hashes, across calls.
    pub prover: Arc<openshell_prover::Prover>,
    /// The work channels of the supervisors attached to this gateway (not state: a
    /// supervisor re-attaches to whichever gateway it reaches).
    pub(crate) work: Arc<work::Work>,
    /// Who in this process waits on which sandbox's changes, woken by the database's
    /// notifications (changes.rs).
    pub changes: Arc<changes::Changes>,
    /// Verified tokens (briefly) and failed authentications per peer.
    pub auth: Arc<auth::Guard>,
    /// Free proof slots (see [`Settings::proof_concurrency`]).
    pub proof_slots: Arc<tokio::sync::Semaphore>,
    /// CheckPolicy calls per principal (this process's CPU, so kept per replica).
    pub(crate) check_rate: Arc<rate::Limiter>,
    /// What /metrics reports (metrics.rs).
    pub metrics: Arc<metrics::Metrics>,
    /// Where users' named parents were last found (a hint, see `ops::create::ParentIds`).
    pub(crate) parent_ids: Arc<ops::create::ParentIds>,
    /// A supervisor's report changed a sandbox's phase here (READY, ERROR): this gateway's
    /// watches look at once instead of at their next poll (phases.rs).
    pub(crate) phases: Arc<phases::Phases>,
    /// The global maximum's version when this gateway last read it and none was set, or
    /// [`ops::create::UNKNOWN`]: a root's create then skips that read (see `create_root`).
    pub(crate) global_unset: Arc<std::sync::atomic::AtomicI32>,
}

impl Gateway {
    pub fn new(store: Store, driver: Arc<dyn Driver>, settings: Settings) -> Gateway {
        let prover = Arc::new(openshell_prover::Prover::new(settings.proof_timeout));
        let proof_slots = Arc::new(tokio::sync::Semaphore::new(settings.proof_concurrency.max(1)));
        let check_rate = Arc::new(rate::Limiter::new(settings.check_policy_rate));
        Gateway {
            store,
            driver,
            settings: Arc::new(settings),
            prover,
            work: Arc::default(),
            changes: Arc::default(),
            auth: Default::default(),
            proof_slots,
            check_rate,
            metrics: Arc::default(),
            parent_ids: Arc::default(),
            phases: Arc::default(),
            global_unset: Arc::new(std::sync::atomic::AtomicI32::new(ops::create::UNKNOWN)),
        }
    }

    /// The prover behind this gateway's cap on concurrent proofs.
    pub(crate) fn proofs(&self) -> ops::policies::gate::ProofGate {
        ops::policies::gate::ProofGate {
            prover: self.prover.clone(),
            slots: self.proof_slots.clone(),
            timeout: self.settings.proof_timeout,
            wait: self.settings.proof_queue_wait,
            metrics: self.metrics.clone(),
        }
    }
}
