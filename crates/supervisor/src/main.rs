//! The supervisor: first process of every sandbox; isolates and runs its main command and
//! reports to the gateway.
//!
//! It reads the sandbox credential from standard input (never argv or the environment) after
//! making itself non-dumpable, connects back to the gateway with it (the supervisor learns its
//! policy), then starts the sandbox's init in new namespaces inside the sandbox's cgroup. The
//! init runs the main command under the sandbox's own uid, Landlock and seccomp; the only way
//! out of its network namespace is the egress proxy the supervisor serves on a listener inside
//! it. Once the main command runs, the proxy serves and the work channel is attached, the
//! supervisor reports the sandbox READY; a main command that could not start is reported as
//! the sandbox's failure, with its reason. The supervisor reports how the main command ended,
//! and stops it on TERM (TERM inside, then kill-all after the grace).

mod claim;
mod disk_tree;
mod door;
mod door_credential;
mod egress;
mod exec;
mod files;
mod gateway;
mod identity;
mod init;
mod policy_local;
mod pool;
mod protocol;
mod sandbox;

use std::io::{BufRead, Read};
use std::path::PathBuf;
use std::time::Duration;

use clap::Parser;
use nix::sys::signal::{Signal, kill};
use openshell_isolation::cgroup::Limits;
use openshell_isolation::filesystem::{FsRules, Paths};
use openshell_isolation::userns::IdMap;
use openshell_policy::Policy;
use openshell_proto::v1::ReportIsolationRequest;
use tokio::signal::unix::{SignalKind, signal};

use crate::protocol::{Disk, Spec, ToSupervisor};
use crate::sandbox::{Sandbox, StartError};

#[derive(Parser, Debug)]
#[command(
    name = "openshell-supervisor",
    about = "Isolates and runs one sandbox's main command for the gateway (started by the process driver)."
)]
struct Args {
    /// The sandbox this supervisor runs.
    #[arg(long)]
    sandbox_id: uuid::Uuid,
    /// The driver's state directory (identifies this gateway's supervisors).
    #[arg(long)]
    state_dir: PathBuf,
    /// The sandbox's name, for logs.
    #[arg(long, default_value = "")]
    name: String,
    /// The gateway's gRPC endpoint.
    #[arg(long)]
    gateway: String,
    /// Seconds between TERM and KILL when stopping the main command.
    #[arg(long, default_value_t = 5)]
    grace: u64,
    /// The agent's uid (and gid unless --gid), held by the lock on descriptor 3.
    #[arg(long)]
    uid: u32,
    /// The agent's gid (default: its uid).
    #[arg(long)]
    gid: Option<u32>,
    /// The gateway is not root: the sandbox gets a user namespace of its own, in which the
    /// agent's uid and gid (subordinate ids of this user) map to themselves, and its cgroup is
    /// under the subtree delegated to this user.
    #[arg(long)]
    userns: bool,
    /// The agent's working directory (its HOME), owned by its uid.
    #[arg(long)]
    workdir: PathBuf,
    #[command(flatten)]
    limits: LimitFlags,
    /// Extra certificate authorities (PEM) the proxy trusts for upstream servers.
    #[arg(long)]
    proxy_extra_ca: Option<PathBuf>,
    /// HOST=IP: the proxy resolves HOST to IP (tests point names at their test hosts).
    #[arg(long)]
    proxy_resolve: Vec<String>,
    /// Take the uid's lock from this file (locked here, for the supervisor's life) instead
    /// of descriptor 3: how a supervisor in a container holds its uid (the container
    /// driver binds the host's lock file in).
    #[arg(long)]
    uid_lock: Option<PathBuf>,
    /// The sandbox's cgroup is the container this supervisor runs in (made and limited by the
    /// container engine, checked here) instead of one it creates on the host.
    #[arg(long)]
    container_cgroup: bool,
    /// The sandbox's own filesystem is mounted at the workdir's parent folder (by the driver):
    /// the agent's /tmp is its `tmp/`, bounded with the workdir by its size.
    #[arg(long, conflicts_with = "disk_tmpfs")]
    tmp_on_disk: bool,
    /// The sandbox's filesystem is a tmpfs of this many bytes, mounted by its init at the
    /// workdir's parent folder in the sandbox's own mount namespace (charged to its memory;
    /// a gateway that is not root). Without this or --tmp-on-disk the workdir is the host's.
    #[arg(long)]
    disk_tmpfs: Option<u64>,
    /// Take the uid and run locks from the claim on stdin (a Unix socket) instead of
    /// descriptors 3 and 4, and after the credential wait for the driver's "start" line (the
    /// sandbox's disk is mounted): how the process driver starts a supervisor (see claim.rs).
    #[arg(long)]
    claim: bool,
    /// The driver's "start" line brings what the supervisor starts with (its policy, version
    /// and boundaries, read by the gateway for this credential meanwhile): it asks the
    /// gateway only when the line comes without it.
    #[arg(long, requires = "claim")]
    start_data: bool,
    /// The main command and its arguments.
    #[arg(last = true, required = true)]
    command: Vec<String>,
}

/// The sandbox's cgroup limits (a pooled supervisor's: those its cgroup is made with ahead).
#[derive(clap::Args, Debug)]
pub struct LimitFlags {
    /// CPU limit in thousandths of a CPU.
    #[arg(long)]
    cpu_millis: Option<u32>,
    /// Memory limit in bytes.
    #[arg(long)]
    memory_bytes: Option<u64>,
    /// Process limit.
    #[arg(long)]
    pids: Option<u64>,
}

impl LimitFlags {
    pub fn limits(&self) -> Limits {
        Limits { cpu_millis: self.cpu_millis, memory_bytes: self.memory_bytes, pids: self.pids }
    }
}

/// Where the proxy listens inside every sandbox.
const PROXY_PORT: u16 = 3128;
/// The private /dev/shm of a sandbox (and its /tmp without a disk of its own), charged to
/// its memory limit.
const TMP_BYTES: u64 = 256 * 1024 * 1024;
/// The uid lock the driver hands over; held open for the supervisor's life.
const UID_LOCK_FD: i32 = 3;
/// The sandbox's run lock the process driver hands over (crates/driver/src/run_lock.rs): held
/// open, never used, for the supervisor's life, so the driver knows it lives. A supervisor in
/// a container has none.
const RUN_LOCK_FD: i32 = 4;

/// Exit codes: 0 the sandbox ran (its outcome is reported to the gateway), 2 bad start,
/// 3 the gateway refused this sandbox (stopped or unknown).
fn main() {
    match std::env::args().nth(1).as_deref() {
        Some("__init") => init::main(),
        Some("__init-userns") => init::remap(),
        _ => {}
    }
    // The supervisor: whatever descriptors the gateway's own parent left open stay here: none reaches a
    // sandbox (the uid lock on 3 is made close-on-exec below too; the init gets its channel
    // by dup2).
    // SAFETY: close_range with integer arguments; it only sets flags.
    unsafe { libc::close_range(3, u32::MAX, libc::CLOSE_RANGE_CLOEXEC as libc::c_int) };
    // Again for the run lock, should close_range be missing (before Linux 5.11): a sandbox
    // holding it would look, to the driver, like a supervisor still running.
    // SAFETY: fcntl on a descriptor number; a missing descriptor only fails.
    unsafe { libc::fcntl(RUN_LOCK_FD, libc::F_SETFD, libc::FD_CLOEXEC) };
    // Info by default: every proxy decision goes to the sandbox's supervisor log.
    let filter = tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into());
    tracing_subscriber::fmt().with_env_filter(filter).with_ansi(false).init();
    // A cold supervisor's locks go on descriptors 3 and 4 before the runtime opens any; a
    // pooled one's arrive later, on placeholders held for them meanwhile.
    let cold = match pool::is_pooled() {
        true => match pool::hold_lock_descriptors() {
            Ok(()) => None,
            Err(e) => {
                tracing::error!("{e}");
                std::process::exit(2);
            }
        },
        false => {
            let args = Args::parse();
            if let Some(Err(e)) = args.claim.then(claim::receive) {
                tracing::error!("{e}");
                std::process::exit(2);
            }
            Some(args)
        }
    };
    // One worker runs the tasks (first, the gateway's answer) while this thread, which
    // clones the sandbox's init (see `Sandbox::spawn`), blocks on that clone.
    let runtime = match tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build() {
        Ok(r) => r,
        Err(e) => {
            tracing::error!("tokio runtime: {e}");
            std::process::exit(2);
        }
    };
    let (args, prepared) = if let Some(args) = cold {
        (args, pool::Prepared::default())
    } else {
        let claimed = pool::prepare_and_wait(&runtime).and_then(|c| {
            c.map(|(args, prepared)| {
                let argv = std::iter::once("openshell-supervisor".to_string()).chain(args);
                let args = Args::try_parse_from(argv).map_err(|e| format!("the claim's arguments: {e}"))?;
                // Its init was cloned with no user namespace, outside any container.
                if args.userns || args.container_cgroup {
                    return Err("a pooled supervisor runs a root gateway's process sandboxes only".to_string());
                }
                Ok((args, prepared))
            })
            .transpose()
        });
        match claimed {
            Ok(Some(claimed)) => claimed,
            // The driver went away before claiming it: nothing ran.
            Ok(None) => std::process::exit(0),
            Err(e) => {
                tracing::error!("{e}");
                std::process::exit(2);
            }
        }
    };
    let code = match runtime.block_on(run(args, prepared)) {
        Ok(()) => 0,
        Err(Failure::Refused(m)) => {
            tracing::error!("gateway refused this sandbox: {m}");
            3
        }
        Err(Failure::Start(m)) => {
            tracing::error!("{m}");
            2
        }
    };
    std::process::exit(code);
}

pub enum Failure {
    Start(String),
    Refused(String),
}

async fn run(args: Args, prepared: pool::Prepared) -> Result<(), Failure> {
    // Not dumpable before the credential is read: nothing can ptrace it or read its memory.
    nix::sys::prctl::set_dumpable(false).map_err(|e| Failure::Start(format!("prctl(PR_SET_DUMPABLE): {e}")))?;
    // The uid lock stays here; the sandbox's init must not inherit it.
    let _uid_lock = match &args.uid_lock {
        Some(path) => Some(lock_uid(path)?),
        // SAFETY: fcntl on a descriptor number; a missing descriptor only fails.
        None if unsafe { libc::fcntl(UID_LOCK_FD, libc::F_SETFD, libc::FD_CLOEXEC) } < 0 => {
            return Err(Failure::Start(
                "no uid lock on descriptor 3; the supervisor is started by the gateway's driver".into(),
            ));
        }
        None => None,
    };
    // A failure before the init is handed on ends this process, and a pooled init with it
    // (its parent-death signal).
    let (credential, extra_env) = read_handoff()?;
    // The start's steps, for the ready bench's breakdown (tests/benches/ready.rs).
    tracing::debug!("start: handoff read");
    let pool::Prepared { init: cloned, cgroup: spare, gateway: connected, ca } = prepared;
    let opened = match connected {
        Some(opening) => opening.await.ok().flatten(),
        None => None,
    };
    let mut client = match opened {
        Some(channel) => gateway::Client::over(&channel, &credential)?,
        None => gateway::Client::new(&args.gateway, &credential)?,
    };
    let mut term = signal(SignalKind::terminate()).map_err(|e| Failure::Start(format!("signal handler: {e}")))?;
    let mut int = signal(SignalKind::interrupt()).map_err(|e| Failure::Start(format!("signal handler: {e}")))?;

    // The sandbox's cgroup and init get ready while the gateway answers; the init runs nothing
    // of the sandbox before its spec, sent once what the sandbox starts with is known (read by
    // the gateway for this live credential, or asked for here): a stopped or unknown sandbox
    // runs nothing.
    let limits = args.limits.limits();
    // So are the sandbox's CA and trust bundle, unless made before the claim.
    let making = ca.unwrap_or_else(|| tokio::task::spawn_blocking(egress::make_ca));
    let ask = |client: &gateway::Client| {
        let mut asking = client.clone();
        tokio::spawn(async move { asking.connect().await })
    };
    let mut connecting = (!args.start_data).then(|| ask(&client));
    let uid = args.uid;
    let userns = args.userns.then_some(IdMap { uid, gid: args.gid.unwrap_or(uid) });
    let starting = Sandbox::spawn(args.sandbox_id, args.container_cgroup, userns, &limits, cloned, spare);
    tracing::debug!("start: init cloned");
    // The init was cloned while the driver may still be making the disk: from here the
    // sandbox's files are used, so wait until they are in place, and hand the init the disk
    // as a detached tree (its mount namespace may predate the mount; see disk_tree.rs).
    let given = match args.claim.then(claim::files_in_place) {
        Some(Err(e)) => {
            if let Ok(s) = starting {
                s.abort();
            }
            return Err(Failure::Start(e));
        }
        Some(Ok(given)) => given,
        None => None,
    };
    tracing::debug!("start: files in place");
    let sandbox_dir = args.workdir.parent().map(std::path::Path::to_path_buf).unwrap_or_default();
    let disk = match (args.claim && args.tmp_on_disk).then(|| disk_tree::detach(&sandbox_dir)).transpose() {
        Ok(disk) => disk,
        Err(e) => {
            if let Ok(s) = starting {
                s.abort();
            }
            let reason = format!("cannot start the sandbox: its disk at {}: {e}", sandbox_dir.display());
            tracing::error!(sandbox = %args.sandbox_id, "{reason}");
            client.report_exit(126, &reason).await;
            return Ok(());
        }
    };
    let connected = match given {
        Some(data) => {
            if let Some(asked) = connecting.take() {
                asked.abort();
            }
            data.into_response(args.sandbox_id.to_string(), args.name.clone())
        }
        None => {
            let mut connecting = connecting.take().unwrap_or_else(|| ask(&client));
            let connected = tokio::select! {
                r = &mut connecting => Some(r.unwrap_or_else(|e| Err(Failure::Start(format!("connecting: {e}"))))),
                _ = term.recv() => None,
                _ = int.recv() => None,
            };
            match connected {
                Some(Ok(c)) => c,
                // Refused (stopped, unknown) or told to stop: nothing of it ran.
                other => {
                    connecting.abort();
                    if let Ok(s) = starting {
                        s.abort();
                    }
                    return other.map_or(Ok(()), |r| r.map(|_| ()));
                }
            }
        }
    };
    tracing::debug!("start: policy known");
    let starting = match starting {
        Ok(s) => s,
        Err(StartError::Setup(reason) | StartError::Command(reason)) => {
            let reason = format!("cannot start the sandbox: {reason}");
            tracing::error!(sandbox = %args.sandbox_id, "{reason}");
            client.report_exit(126, &reason).await;
            return Ok(());
        }
    };
    let made = making.await.unwrap_or_else(|e| Err(format!("making the sandbox's CA: {e}")));
    let trusted = made.and_then(|ca| egress::trust(ca, args.proxy_extra_ca.as_deref()));
    let (trust, bundle) = match trusted.and_then(|t| t.write(&sandbox_dir).map(|b| (t, b))) {
        Ok(t) => t,
        Err(reason) => {
            starting.abort();
            client.report_exit(126, &format!("cannot set up the egress proxy: {reason}")).await;
            return Ok(());
        }
    };
    let (policy, spec) = match spec(&args, &connected, &bundle, extra_env) {
        Ok(s) => s,
        Err(reason) => {
            starting.abort();
            client.report_exit(126, &reason).await;
            return Ok(());
        }
    };
    // The work channel opens while the init sets up (its tasks wait until the sandbox runs),
    // so READY follows the start by one report.
    let (execs_tx, execs_rx) = tokio::sync::oneshot::channel();
    let (attached_tx, attached) = tokio::sync::oneshot::channel();
    let _attach = tokio::spawn(exec::attach(client.clone(), execs_rx, attached_tx));
    // The host's addresses, which the proxy refuses, are listed while the init works.
    let listing = tokio::task::spawn_blocking(egress::host_addresses);
    // Waited for on this thread, which has nothing else to do meanwhile (the runtime's worker
    // runs the tasks): a blocking thread's wake-up would come between the init's report and
    // READY.
    let mut sandbox = match starting.finish(&spec, disk) {
        Ok(s) => s,
        Err(e) => {
            // The create that waits for READY fails with this reason (the sandbox's ERROR).
            let reason = match e {
                StartError::Setup(reason) => format!("cannot start the sandbox: {reason}"),
                StartError::Command(reason) => format!("main command could not start: {reason}"),
            };
            tracing::error!(sandbox = %args.sandbox_id, "{reason}");
            client.report_exit(126, &reason).await;
            return Ok(());
        }
    };
    // A start always carries its report (Starting::finish returns only on it).
    let running = match &sandbox.started {
        ToSupervisor::Started { landlock, skipped } => {
            tracing::info!(sandbox = %args.sandbox_id, name = %args.name, landlock = %landlock.state,
                detail = %landlock.detail, ?skipped, "main command started");
            ReportIsolationRequest {
                landlock: landlock.state.clone(),
                detail: landlock.detail.clone(),
                skipped: skipped.clone(),
            }
        }
        _ => ReportIsolationRequest::default(),
    };
    let (policy_tx, policy_rx) = tokio::sync::watch::channel(std::sync::Arc::new(policy));
    // What the sandbox needs only once it runs starts after its READY report, so as not to
    // delay it: the policy stream (it sends a write made meanwhile when opened) and the door's
    // credential (a door call waits for it).
    let (reported_tx, reported) = tokio::sync::watch::channel(());
    let after_ready = move || {
        let mut reported = reported.clone();
        async move {
            let _ = reported.changed().await;
        }
    };
    let door_credential = door_credential::DoorCredential::spawn(client.clone(), after_ready());
    let watching = watch_policy(client.clone(), connected.policy_version, policy_tx);
    let started = after_ready();
    let _watch = tokio::spawn(async move {
        started.await;
        watching.await
    });
    let door = match door::Door::handler(&args.gateway, door_credential) {
        Ok(d) => Some(d),
        Err(reason) => {
            tracing::error!("no MCP door in this sandbox: {reason}");
            None
        }
    };
    let (denials_tx, denials_rx) = tokio::sync::mpsc::channel(1024);
    let _denials = tokio::spawn(forward_denials(client.clone(), denials_rx));
    let resolve = args
        .proxy_resolve
        .iter()
        .filter_map(|r| r.split_once('=').and_then(|(h, ip)| Some((h.to_string(), ip.parse().ok()?))))
        .collect();
    let blocked = listing.await.unwrap_or_else(|e| Err(format!("listing the host's addresses: {e}")));
    let listener = sandbox.listener.take().ok_or_else(|| "the init handed over no proxy listener".to_string());
    let proxy =
        listener.and_then(|listener| blocked.map(|blocked| (listener, blocked))).and_then(|(listener, blocked)| {
            egress::start(egress::Setup {
                listener,
                identity: sandbox.identity.take(),
                ca: trust.ca,
                roots: egress::upstream_roots(trust.extra, after_ready()),
                resolve,
                blocked,
                policy: policy_rx,
                denials: denials_tx,
                virtual_hosts: openshell_proxy::VirtualHosts {
                    policy: Some(policy_local::handler(client.clone(), args.sandbox_id.to_string())),
                    openshell: door,
                },
            })
        });
    let (channel, mut reaped) = sandbox.split().map_err(|e| Failure::Start(format!("channel: {e}")))?;
    let _proxy = match proxy {
        Ok(task) => task,
        Err(reason) => {
            // No proxy, no sandbox: the agent must never run without its one way out decided.
            tracing::error!("{reason}");
            stop(&sandbox, reaped, 0).await?;
            client.report_exit(126, &format!("cannot start the egress proxy: {reason}")).await;
            return Ok(());
        }
    };
    let channel = std::sync::Arc::new(channel);
    let execs = exec::Execs::new(channel.clone());
    let (main_tx, mut main_rx) = tokio::sync::oneshot::channel();
    let _dispatch = tokio::spawn(exec::dispatch(channel, execs.clone(), main_tx));
    let _ = execs_tx.send(execs);
    // READY means usable: the main command runs in its isolation, the proxy serves, and the
    // gateway reaches this sandbox for exec and files once the work channel is attached.
    let mut ready_client = client.clone();
    let (refused_tx, mut refused) = tokio::sync::oneshot::channel();
    let ready = tokio::spawn(async move {
        // Refused (the work channel or READY itself): the sandbox is no longer live.
        if !(attached.await.is_ok() && ready_client.report_running(running).await) {
            let _ = refused_tx.send(());
            return;
        }
        tracing::debug!("start: READY reported");
        drop(reported_tx);
    });

    // The main command's code as the init reported it, else how the init itself ended.
    let code = tokio::select! {
        c = &mut main_rx => match c {
            Ok(c) => c,
            Err(_) => (&mut reaped).await.unwrap_or(255),
        },
        // The init exits right after reporting: its report may still be on its way.
        c = &mut reaped => match tokio::time::timeout(Duration::from_secs(1), &mut main_rx).await {
            Ok(Ok(code)) => code,
            _ => c.unwrap_or(255),
        },
        _ = term.recv() => return stop(&sandbox, reaped, args.grace).await,
        _ = int.recv() => return stop(&sandbox, reaped, args.grace).await,
        // Stopped while it started (the gateway refused its work channel or READY): it must
        // not run on.
        Ok(()) = &mut refused => return stop(&sandbox, reaped, args.grace).await,
    };
    let oom = sandbox.cgroup.oom_kills();
    if let Err(e) = sandbox.cgroup.remove() {
        tracing::warn!("{e}");
    }
    let error = match (oom, limits.memory_bytes) {
        (0, _) => String::new(),
        (n, limit) => format!(
            "the sandbox met its memory limit ({} bytes): the kernel killed {n} process(es)",
            limit.map_or("unset".into(), |l| l.to_string())
        ),
    };
    tracing::info!(code, %error, "main command exited");
    // A command that ends at once still ran in its isolation: its READY, with the isolation
    // report, goes before its exit (bounded, should the gateway not answer).
    let _ = tokio::time::timeout(READY_BEFORE_EXIT, ready).await;
    client.report_exit(code, &error).await;
    Ok(())
}

/// How long an exit report waits for the READY report before it.
const READY_BEFORE_EXIT: Duration = Duration::from_secs(5);

/// Back-off between attempts to (re)open the policy stream.
const WATCH_RETRY_FIRST: Duration = Duration::from_millis(100);
const WATCH_RETRY_LAST: Duration = Duration::from_secs(5);
/// A stream that stayed open this long ended for a reason of its own: retry at once.
const WATCH_LIVED: Duration = Duration::from_secs(10);
/// How often the policy is asked for from a gateway that cannot push it (an older build).
const POLICY_POLL: Duration = Duration::from_millis(500);

/// Keeps `tx` at the sandbox's current policy, as the gateway pushes it (WatchPolicy): an
/// idle sandbox asks nothing. Whenever the stream ends (the gateway restarted, the connection
/// broke) it is opened again with the version the proxy enforces, and the gateway sends the
/// current one if it differs, so a write made meanwhile is not missed. A gateway without
/// WatchPolicy is polled instead. A policy that does not parse keeps the previous one (and
/// is logged); the gateway proved it.
async fn watch_policy(
    mut client: gateway::Client,
    mut known: i32,
    tx: tokio::sync::watch::Sender<std::sync::Arc<Policy>>,
) {
    let mut retry = WATCH_RETRY_FIRST;
    loop {
        match client.watch_policy(known).await {
            Ok(mut pushed) => {
                let opened = std::time::Instant::now();
                loop {
                    match pushed.message().await {
                        Ok(Some(r)) => {
                            if !apply_policy(&mut known, r.version, &r.policy_json, &tx) {
                                return;
                            }
                        }
                        Ok(None) => break,
                        Err(s) => {
                            tracing::warn!("the policy stream ended: {}", s.message());
                            break;
                        }
                    }
                }
                if opened.elapsed() >= WATCH_LIVED {
                    retry = WATCH_RETRY_FIRST;
                }
            }
            Err(s) if s.code() == tonic::Code::Unimplemented => {
                tracing::warn!("the gateway cannot push policy changes (an older build): asking every {POLICY_POLL:?}");
                return poll_policy(client, known, tx).await;
            }
            Err(s) => tracing::warn!("opening the policy stream: {}", s.message()),
        }
        if tx.is_closed() {
            return;
        }
        tokio::time::sleep(retry).await;
        retry = (retry * 2).min(WATCH_RETRY_LAST);
    }
}

/// Polls a gateway that cannot push (what every supervisor did before WatchPolicy).
async fn poll_policy(
    mut client: gateway::Client,
    mut known: i32,
    tx: tokio::sync::watch::Sender<std::sync::Arc<Policy>>,
) {
    loop {
        tokio::time::sleep(POLICY_POLL).await;
        match client.current_policy(known).await {
            Ok(Some((version, json))) => {
                if !apply_policy(&mut known, version, &json, &tx) {
                    return;
                }
            }
            Ok(None) => {}
            Err(s) => tracing::warn!("asking for the current policy: {}", s.message()),
        }
    }
}

/// Hands a new version to the proxy; false once the proxy is gone.
fn apply_policy(
    known: &mut i32,
    version: i32,
    json: &str,
    tx: &tokio::sync::watch::Sender<std::sync::Arc<Policy>>,
) -> bool {
    if version == *known || json.is_empty() {
        return true;
    }
    tracing::info!(version, "policy changed; the proxy enforces the new version");
    *known = version;
    tx.send(std::sync::Arc::new(egress::enforced(version, json))).is_ok()
}

/// Most denials reported per second; the rest are counted in the log, so an agent that
/// hammers a refused host cannot flood the gateway's database.
const DENIALS_PER_SECOND: usize = 100;

/// Sends the proxy's denials to the gateway in batches, at most once a second.
async fn forward_denials(
    mut client: gateway::Client,
    mut rx: tokio::sync::mpsc::Receiver<openshell_proto::v1::Denial>,
) {
    let mut dropped = 0u64;
    loop {
        let Some(first) = rx.recv().await else { return };
        let mut batch = vec![first];
        let window = tokio::time::sleep(Duration::from_secs(1));
        tokio::pin!(window);
        loop {
            tokio::select! {
                d = rx.recv() => match d {
                    Some(d) if batch.len() < DENIALS_PER_SECOND => batch.push(d),
                    Some(_) => dropped += 1,
                    None => break,
                },
                _ = &mut window => break,
            }
        }
        if dropped > 0 {
            tracing::warn!(dropped, "denials beyond {DENIALS_PER_SECOND}/s were not reported");
            dropped = 0;
        }
        if let Err(s) = client.report_denials(batch).await {
            tracing::warn!("reporting denials: {}", s.message());
        }
    }
}

/// TERM to everything in the sandbox, kill-all after the grace period, then clean up.
async fn stop(sandbox: &Sandbox, mut waiting: tokio::task::JoinHandle<i32>, grace: u64) -> Result<(), Failure> {
    let _ = kill(sandbox.init, Signal::SIGTERM);
    let ended = tokio::time::timeout(Duration::from_secs(grace), &mut waiting).await.is_ok();
    if !ended {
        tracing::warn!("main command ignored TERM for {grace}s; killing the sandbox");
    }
    // Whatever is left in the cgroup goes, whatever it did to its process group.
    if let Err(e) = sandbox.cgroup.kill_all() {
        tracing::error!("{e}");
    }
    if !ended {
        let _ = waiting.await;
    }
    if let Err(e) = sandbox.cgroup.remove() {
        tracing::warn!("{e}");
    }
    Ok(())
}

/// The init's instructions: the agent's identity, environment and filesystem rules.
fn spec(
    args: &Args,
    connected: &openshell_proto::v1::ConnectResponse,
    bundle: &std::path::Path,
    extra_env: Vec<(String, String)>,
) -> Result<(Policy, Spec), String> {
    let policy: Policy =
        serde_json::from_str(&connected.policy_json).map_err(|e| format!("the sandbox's policy is unusable: {e}"))?;
    let boundaries: Vec<Paths> = if connected.boundaries_json.is_empty() {
        Vec::new()
    } else {
        serde_json::from_str(&connected.boundaries_json).map_err(|e| format!("the policy boundary is unusable: {e}"))?
    };
    let home = args.workdir.to_string_lossy().into_owned();
    let proxy = format!("http://127.0.0.1:{PROXY_PORT}");
    let mut env: Vec<(String, String)> = vec![
        ("PATH".into(), "/usr/local/bin:/usr/bin:/bin".into()),
        ("HOME".into(), home),
        ("USER".into(), "sandbox".into()),
        ("LANG".into(), "C.UTF-8".into()),
        ("TMPDIR".into(), "/tmp".into()),
        ("OPENSHELL_SANDBOX_ID".into(), args.sandbox_id.to_string()),
        ("OPENSHELL_SANDBOX_NAME".into(), args.name.clone()),
    ];
    env.extend(egress::environment(&proxy, bundle));
    // The creator's variables: a runtime name never (checked again here), others replace
    // a default of the same name (PATH).
    for (name, value) in extra_env {
        if openshell_proto::sandbox_env::runtime_owned(&name) {
            return Err(format!("the environment sets {name}, which the sandbox runtime owns"));
        }
        match env.iter_mut().find(|(k, _)| *k == name) {
            Some(slot) => slot.1 = value,
            None => env.push((name, value)),
        }
    }
    let fs = FsRules {
        policy: Paths::from(&policy.filesystem_policy),
        include_workdir: policy.filesystem_policy.include_workdir,
        compatibility: policy.landlock.compatibility,
        workdir: args.workdir.clone(),
        runtime_read: vec![bundle.to_path_buf()],
        boundaries,
    };
    let spec = Spec {
        uid: args.uid,
        gid: args.gid.unwrap_or(args.uid),
        workdir: args.workdir.clone(),
        command: args.command.clone(),
        env,
        fs,
        hostname: "sandbox".into(),
        proxy_port: PROXY_PORT,
        tmp_bytes: TMP_BYTES,
        nproc: if args.container_cgroup { args.limits.pids } else { None },
        chown_workdir: args.userns,
        disk: match (args.disk_tmpfs, args.tmp_on_disk) {
            (Some(bytes), _) => Disk::Tmpfs(bytes),
            (None, true) => Disk::Mounted,
            (None, false) => Disk::Unbounded,
        },
    };
    Ok((policy, spec))
}

/// Holds the uid's lock file (opened without following a symlink, close-on-exec): another
/// live sandbox holding it means the uid is taken, and this one does not start.
fn lock_uid(path: &std::path::Path) -> Result<std::fs::File, Failure> {
    use std::os::fd::AsRawFd;
    use std::os::unix::fs::OpenOptionsExt;
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(path)
        .map_err(|e| Failure::Start(format!("uid lock {}: {e}", path.display())))?;
    // SAFETY: flock on a descriptor we own.
    if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } != 0 {
        return Err(Failure::Start(format!(
            "uid lock {}: {} (another live sandbox holds this uid)",
            path.display(),
            std::io::Error::last_os_error()
        )));
    }
    Ok(file)
}

/// Longest environment line accepted on stdin (the gateway bounds it well below).
const MAX_ENV_LINE: u64 = 2 * openshell_proto::sandbox_env::MAX_TOTAL_BYTES as u64;

/// The credential (first line of stdin) and the creator's variables for the main command
/// (an optional second line, one JSON object), as the driver hands them over.
fn read_handoff() -> Result<(String, Vec<(String, String)>), Failure> {
    let stdin = std::io::stdin();
    let mut lock = stdin.lock();
    let mut line = String::new();
    (&mut lock)
        .take(512)
        .read_line(&mut line)
        .map_err(|e| Failure::Start(format!("reading the credential from stdin: {e}")))?;
    let credential = line.trim().to_string();
    if credential.is_empty() {
        return Err(Failure::Start("no credential on stdin; the supervisor is started by the gateway's driver".into()));
    }
    let mut line = String::new();
    (&mut lock)
        .take(MAX_ENV_LINE)
        .read_line(&mut line)
        .map_err(|e| Failure::Start(format!("reading the environment from stdin: {e}")))?;
    if line.trim().is_empty() {
        return Ok((credential, Vec::new()));
    }
    // The error never quotes the line: values may be secrets.
    let env: std::collections::BTreeMap<String, String> = serde_json::from_str(&line).map_err(|e| {
        Failure::Start(format!(
            "the environment on stdin is not a JSON object of strings (line {}, column {})",
            e.line(),
            e.column()
        ))
    })?;
    if let Some(why) = openshell_proto::sandbox_env::problem(env.iter().map(|(k, v)| (k.as_str(), v.as_str()))) {
        return Err(Failure::Start(format!("the environment on stdin is refused: {why}")));
    }
    Ok((credential, env.into_iter().collect()))
}
