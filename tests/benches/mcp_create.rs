//! `create_sandbox` latency through MCP, from the host (a login) and through the in-sandbox
//! door, beside the same create over gRPC, all in the same run: p50 and p99 of each, the
//! ratio of MCP to gRPC (target: within 1.5x) and what the door adds to MCP from the host
//! (target: under 1 ms).
//!
//! ```sh
//! cargo build --release --workspace --bins
//! cargo bench -p openshell-e2e --bench mcp_create
//! ```
//!
//! A real gateway (in this process) on a fresh test database. The lead sandbox is a real
//! process-driver sandbox (its supervisor serves the door); its children are started by a
//! named fake, [`LeadOnly`], which hands every sandbox but the lead to the null driver, so the
//! figures are the surfaces, authentication, the proof and admission in PostgreSQL, and not
//! a supervisor's start (see the `ready` bench for that). Every create is a tool child of the
//! lead with the same arguments, returning at admission (gRPC `CreateChildSandbox`; MCP
//! `create_sandbox` with `wait: false`).
//!
//! The clients: tonic for gRPC (in this process, one channel); for MCP the official Rust SDK's
//! client (rmcp, one session), the `openshell-bench-mcp` binary, run on the host with the admin
//! login and inside the lead as the grant's program through `http://openshell.local/mcp`
//! (the lead's proxy and door add the door credential and the kernel-resolved program, and
//! the gateway takes each call from the lead's rate bucket). The floor is the gRPC create,
//! and for the door the MCP create from the host. The three paths take turns in blocks, to
//! even out drift.
//!
//! Environment: `BENCH_N` (creates per path, default 300), `BENCH_BLOCK` (creates per turn,
//! default 50), `BENCH_WARMUP` (discarded creates per path first, default 20).

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use openshell_driver::{Driver, DriverError, NullDriver, ProcessDriver, StartSpec};
use openshell_e2e::inside::json_of;
use openshell_e2e::{Api, Harness, bin, eventually, grant, process_driver};
use openshell_proto::v1 as pb;
use uuid::Uuid;

const LEAD: &str = "lead";
const DOOR: &str = "http://openshell.local/mcp";

/// A named fake for this bench: the real process driver for the lead, the null driver
/// (starts nothing) for every other sandbox.
struct LeadOnly {
    process: ProcessDriver,
    null: NullDriver,
    lead: std::sync::Mutex<Option<Uuid>>,
}

#[async_trait::async_trait]
impl Driver for LeadOnly {
    fn name(&self) -> &'static str {
        "lead-only-fake"
    }
    async fn start(&self, spec: StartSpec) -> Result<(), DriverError> {
        if spec.name == LEAD {
            *self.lead.lock().unwrap() = Some(spec.id);
            self.process.start(spec).await
        } else {
            self.null.start(spec).await
        }
    }
    async fn stop(&self, id: Uuid, grace: Duration) -> Result<(), DriverError> {
        if *self.lead.lock().unwrap() == Some(id) {
            self.process.stop(id, grace).await
        } else {
            self.null.stop(id, grace).await
        }
    }
    async fn list(&self) -> Result<Vec<Uuid>, DriverError> {
        let mut all = self.process.list().await?;
        all.extend(self.null.list().await?);
        Ok(all)
    }
}

fn env(key: &str, default: usize) -> usize {
    std::env::var(key).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

/// The client binary where the lead can run it (a checkout under /tmp is hidden from it).
fn staged_client() -> std::path::PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let dir = Path::new("/var/tmp").join(format!("openshell-bench-mcp-{}", Uuid::new_v4().simple()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    let to = dir.join("openshell-bench-mcp");
    std::fs::copy(bin("openshell-bench-mcp"), &to).unwrap();
    std::fs::set_permissions(&to, std::fs::Permissions::from_mode(0o755)).unwrap();
    to
}

async fn grpc_block(api: &Api, prefix: &str, n: usize) -> Vec<u64> {
    let mut micros = Vec::with_capacity(n);
    for i in 0..n {
        let req = pb::CreateChildSandboxRequest {
            parent: LEAD.into(),
            name: format!("{prefix}-{i}"),
            kind: pb::SandboxKind::Tool as i32,
            command: vec!["sleep".into(), "600".into()],
            ..Default::default()
        };
        let t = Instant::now();
        api.sandboxes().create_child_sandbox(api.req(req)).await.expect("gRPC create");
        micros.push(t.elapsed().as_micros() as u64);
    }
    micros
}

async fn host_block(client: &Path, url: &str, token: &str, prefix: &str, n: usize) -> Vec<u64> {
    let out = tokio::process::Command::new(client)
        .args([url, &n.to_string(), prefix, "--parent", LEAD])
        .env("OPENSHELL_TOKEN", token)
        .output()
        .await
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "host MCP client: {stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    micros(&serde_json::from_str(stdout.lines().last().unwrap()).unwrap())
}

async fn door_block(api: &Api, client: &Path, prefix: &str, n: usize) -> Vec<u64> {
    let command = vec![client.display().to_string(), DOOR.into(), n.to_string(), prefix.into()];
    micros(&json_of(api, LEAD, command).await)
}

fn micros(v: &serde_json::Value) -> Vec<u64> {
    v["micros"].as_array().unwrap_or_else(|| panic!("{v}")).iter().map(|m| m.as_u64().unwrap()).collect()
}

fn pct(sorted: &[u64], p: f64) -> f64 {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i] as f64 / 1000.0
}

struct Figures {
    p50: f64,
    p99: f64,
}

fn figures(name: &str, mut v: Vec<u64>) -> Figures {
    v.sort_unstable();
    let f = Figures { p50: pct(&v, 0.50), p99: pct(&v, 0.99) };
    println!(
        "{name:<22} n={:<5} p50 {:>7.3} ms   p99 {:>7.3} ms   min {:>7.3} ms",
        v.len(),
        f.p50,
        f.p99,
        pct(&v, 0.0)
    );
    f
}

#[tokio::main]
async fn main() {
    let (n, block, warmup) = (env("BENCH_N", 300), env("BENCH_BLOCK", 50).max(1), env("BENCH_WARMUP", 20));
    let h = Harness::with_driver(
        |state| {
            let process = process_driver(state, openshell_driver::ProxySettings::default());
            Arc::new(LeadOnly { process, null: NullDriver::default(), lead: Default::default() })
        },
        |_| {},
    )
    .await;
    let a = h.admin().await;
    let client = staged_client();
    let policy = format!(
        "version: 1\nfilesystem_policy:\n  include_workdir: true\n  read_only: [/usr, /lib, /proc, /dev/urandom, /etc, {}]\n  read_write: [/tmp, /dev/null]\nlandlock: {{ compatibility: best_effort }}\n",
        client.parent().unwrap().display()
    );
    let total = (3 * (n + warmup) + 10) as i32;
    let spec = pb::GrantSpec {
        program: client.display().to_string(),
        rate: "100000/s".into(),
        ..grant(1, total.min(10_000), total)
    };
    let req = pb::CreateSandboxRequest {
        name: LEAD.into(),
        command: vec!["sleep".into(), "3600".into()],
        policy_yaml: policy,
        grant: Some(spec),
        ..Default::default()
    };
    a.sandboxes().create_sandbox(a.req(req)).await.expect("lead");
    let up =
        eventually(Duration::from_secs(30), || async { a.get(LEAD).await.is_ok_and(|s| s.phase == "READY") }).await;
    assert!(up, "the lead runs: {:?}", a.get(LEAD).await);
    let url = format!("{}/mcp", h.endpoint);

    println!("mcp_create: {n} creates per path in blocks of {block} (after {warmup} discarded), same run");
    grpc_block(&a, "wg", warmup).await;
    host_block(&client, &url, &h.admin_token, "wm", warmup).await;
    door_block(&a, &client, "wd", warmup).await;
    let (mut grpc, mut host, mut door) = (Vec::new(), Vec::new(), Vec::new());
    let mut round = 0;
    while grpc.len() < n {
        let b = block.min(n - grpc.len());
        grpc.extend(grpc_block(&a, &format!("g{round}"), b).await);
        host.extend(host_block(&client, &url, &h.admin_token, &format!("m{round}"), b).await);
        door.extend(door_block(&a, &client, &format!("d{round}"), b).await);
        round += 1;
    }
    let g = figures("gRPC (floor)", grpc);
    let m = figures("MCP from the host", host);
    let d = figures("MCP through the door", door);
    println!("MCP / gRPC:            p50 {:.2}x   p99 {:.2}x   (target: within 1.5x)", m.p50 / g.p50, m.p99 / g.p99);
    println!(
        "door - MCP host:       p50 {:+.3} ms   p99 {:+.3} ms   (target: under 1 ms); door / MCP host p50 {:.2}x",
        d.p50 - m.p50,
        d.p99 - m.p99,
        d.p50 / m.p50
    );
    let _ = std::fs::remove_dir_all(client.parent().unwrap());
}
