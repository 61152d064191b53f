//! The supervisor: first process of every sandbox; runs its main command and reports to the gateway.
//!
//! It reads the sandbox credential from standard input (never argv or the environment),
//! connects back to the gateway with it (the sandbox becomes READY), then runs the main
//! command in a process group of its own with none of that credential, reports how it
//! exited, and stops it on TERM (TERM to its group, KILL after the grace period).

use std::io::{BufRead, Read};
use std::os::unix::process::ExitStatusExt;
use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use clap::Parser;
use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use openshell_proto::v1::supervisor_client::SupervisorClient;
use openshell_proto::v1::{ConnectRequest, ReportExitRequest};
use tokio::signal::unix::{SignalKind, signal};
use tonic::metadata::MetadataValue;
use tonic::transport::Channel;

#[derive(Parser, Debug)]
#[command(
    name = "openshell-supervisor",
    about = "Runs one sandbox's main command for the gateway (started by the process driver)."
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
    /// The main command and its arguments.
    #[arg(last = true, required = true)]
    command: Vec<String>,
}

/// Exit codes: 0 main command ran (its own code is reported to the gateway), 2 bad start,
/// 3 the gateway refused this sandbox (stopped or unknown).
#[tokio::main(flavor = "current_thread")]
async fn main() {
    tracing_subscriber::fmt().with_env_filter(tracing_subscriber::EnvFilter::from_default_env()).init();
    let args = Args::parse();
    let code = match run(args).await {
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

enum Failure {
    Start(String),
    Refused(String),
}

async fn run(args: Args) -> Result<(), Failure> {
    // Not dumpable: processes of the same user cannot ptrace it or read its memory through
    // /proc, where the credential lives (root-level isolation comes with the sandbox's
    // unprivileged user).
    nix::sys::prctl::set_dumpable(false).map_err(|e| Failure::Start(format!("prctl(PR_SET_DUMPABLE): {e}")))?;
    // Every process the main command orphans (double fork, setsid) is reparented here, so
    // none outlives the sandbox.
    nix::sys::prctl::set_child_subreaper(true)
        .map_err(|e| Failure::Start(format!("prctl(PR_SET_CHILD_SUBREAPER): {e}")))?;
    let credential = read_credential()?;
    let mut term = signal(SignalKind::terminate()).map_err(|e| Failure::Start(format!("signal handler: {e}")))?;
    let mut int = signal(SignalKind::interrupt()).map_err(|e| Failure::Start(format!("signal handler: {e}")))?;
    let mut client = Client::new(&args.gateway, &credential)?;

    // READY before the main command runs: a stopped or unknown sandbox runs nothing.
    tokio::select! {
        r = client.connect() => r?,
        _ = term.recv() => return Ok(()),
        _ = int.recv() => return Ok(()),
    }
    tracing::info!(sandbox = %args.sandbox_id, name = %args.name, "connected; starting main command");

    let work = args.state_dir.join("sandboxes").join(args.sandbox_id.to_string()).join("work");
    std::fs::create_dir_all(&work).map_err(|e| Failure::Start(format!("{}: {e}", work.display())))?;
    let mut cmd = tokio::process::Command::new(&args.command[0]);
    cmd.args(&args.command[1..])
        .current_dir(&work)
        .env("OPENSHELL_SANDBOX_ID", args.sandbox_id.to_string())
        .env("OPENSHELL_SANDBOX_NAME", &args.name)
        .stdin(Stdio::null())
        .stdout(Stdio::inherit())
        .stderr(Stdio::inherit());
    // SAFETY: only async-signal-safe calls (setsid, prctl) between fork and exec.
    unsafe {
        cmd.pre_exec(|| {
            nix::unistd::setsid().map_err(std::io::Error::from)?;
            // If the supervisor dies, so does the main command: no orphan outlives it.
            nix::sys::prctl::set_pdeathsig(Signal::SIGKILL).map_err(std::io::Error::from)?;
            Ok(())
        });
    }
    let mut child = match cmd.spawn() {
        Ok(c) => c,
        Err(e) => {
            tracing::error!("cannot start {}: {e}", args.command[0]);
            client.report_exit(127).await;
            return Ok(());
        }
    };
    let pid = Pid::from_raw(child.id().map(|p| p as i32).unwrap_or(0));

    let status = tokio::select! {
        s = child.wait() => s,
        _ = term.recv() => return stop(&mut child, pid, args.grace).await,
        _ = int.recv() => return stop(&mut child, pid, args.grace).await,
    };
    let code = match status {
        Ok(s) => s.code().unwrap_or_else(|| 128 + s.signal().unwrap_or(0)),
        Err(_) => 255,
    };
    tracing::info!(code, "main command exited");
    // The sandbox ends with its main command: nothing it started keeps running.
    kill_descendants();
    client.report_exit(code).await;
    Ok(())
}

/// TERM to the main command's group, KILL after the grace period.
async fn stop(child: &mut tokio::process::Child, pid: Pid, grace: u64) -> Result<(), Failure> {
    let _ = killpg(pid, Signal::SIGTERM);
    if tokio::time::timeout(Duration::from_secs(grace), child.wait()).await.is_err() {
        tracing::warn!("main command ignored TERM for {grace}s; killing");
        let _ = killpg(pid, Signal::SIGKILL);
        let _ = child.wait().await;
    }
    // Whatever else is left, in its group or reparented here, goes too.
    let _ = killpg(pid, Signal::SIGKILL);
    kill_descendants();
    Ok(())
}

/// Kills and reaps every descendant. As a subreaper, orphans become our children when
/// their parent dies, so repeat until none is left (bounded: a fork bomb cannot hold us).
fn kill_descendants() {
    use nix::sys::wait::{WaitPidFlag, WaitStatus, waitpid};
    let me = std::process::id().to_string();
    for _ in 0..200 {
        let children: Vec<Pid> = std::fs::read_dir("/proc")
            .into_iter()
            .flatten()
            .flatten()
            .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
            .filter(|pid| {
                std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
                    stat.rfind(')').is_some_and(|i| stat[i + 1..].split_whitespace().nth(1) == Some(me.as_str()))
                })
            })
            .map(Pid::from_raw)
            .collect();
        if children.is_empty() {
            return;
        }
        for c in &children {
            let _ = nix::sys::signal::kill(*c, Signal::SIGKILL);
        }
        while let Ok(status) = waitpid(None, Some(WaitPidFlag::WNOHANG)) {
            if status == WaitStatus::StillAlive {
                break;
            }
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

fn read_credential() -> Result<String, Failure> {
    let mut line = String::new();
    std::io::stdin()
        .lock()
        .take(512)
        .read_line(&mut line)
        .map_err(|e| Failure::Start(format!("reading the credential from stdin: {e}")))?;
    let credential = line.trim().to_string();
    if credential.is_empty() {
        return Err(Failure::Start("no credential on stdin; the supervisor is started by the gateway's driver".into()));
    }
    Ok(credential)
}

struct Client {
    inner: SupervisorClient<Channel>,
    auth: MetadataValue<tonic::metadata::Ascii>,
}

impl Client {
    fn new(endpoint: &str, credential: &str) -> Result<Client, Failure> {
        let channel = Channel::from_shared(endpoint.to_string())
            .map_err(|e| Failure::Start(format!("gateway endpoint {endpoint}: {e}")))?
            .connect_timeout(Duration::from_secs(5))
            .timeout(Duration::from_secs(30))
            .connect_lazy();
        let auth = format!("Bearer {credential}")
            .parse()
            .map_err(|_| Failure::Start("credential is not valid ASCII".into()))?;
        Ok(Client { inner: SupervisorClient::new(channel), auth })
    }

    fn request<T>(&self, body: T) -> tonic::Request<T> {
        let mut r = tonic::Request::new(body);
        r.metadata_mut().insert("authorization", self.auth.clone());
        r
    }

    /// Retries transport faults for a while; a refusal is final.
    async fn connect(&mut self) -> Result<(), Failure> {
        let mut delay = Duration::from_millis(50);
        for _ in 0..40 {
            let req = self.request(ConnectRequest { pid: std::process::id() as i32 });
            match self.inner.supervisor_connect(req).await {
                Ok(_) => return Ok(()),
                Err(s) if refused(&s) => return Err(Failure::Refused(s.message().to_string())),
                Err(s) => tracing::warn!("gateway not reachable yet: {}", s.message()),
            }
            tokio::time::sleep(delay).await;
            delay = (delay * 2).min(Duration::from_secs(2));
        }
        Err(Failure::Refused("gateway unreachable".into()))
    }

    async fn report_exit(&mut self, exit_code: i32) {
        for _ in 0..10 {
            match self.inner.report_exit(self.request(ReportExitRequest { exit_code })).await {
                Ok(_) => return,
                // Already stopping: the gateway no longer needs the report.
                Err(s) if refused(&s) => return,
                Err(s) => tracing::warn!("reporting exit: {}", s.message()),
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
}

fn refused(s: &tonic::Status) -> bool {
    matches!(
        s.code(),
        tonic::Code::Unauthenticated
            | tonic::Code::PermissionDenied
            | tonic::Code::NotFound
            | tonic::Code::InvalidArgument
    )
}
