//! Exec round-trip benchmark: `ExecSandbox` of `true` in a running sandbox on the process
//! driver (full isolation), next to spawning a plain `true` and `unshare ... true` in the
//! same run.
//!
//! ```sh
//! cargo build --release --workspace --bins
//! cargo bench -p openshell-e2e --bench exec
//! ```
//!
//! A real gateway (in this process, as in the e2e suite) on a fresh test database runs one
//! root sandbox (`sleep 600`). Each sample is one exec of `true` as a user: from just before
//! the `ExecSandbox` call until its exit arrives (the gateway checks and counts it in SQL
//! (`exec_begin`), relays it over the supervisor's work channel, the init forks the command
//! under the sandbox's uid, Landlock and seccomp, and the exit comes back, then `exec_end`).
//! One exec at a time. Floors (half before, half after the execs, to even out drift):
//! `std::process::Command` spawn-and-wait of `true` (FLOOR) and of
//! `unshare --pid --fork --mount --net --ipc --uts --mount-proc true`.
//!
//! Environment: `BENCH_N` (execs, default 200), `BENCH_WARMUP` (discarded first, default 10).

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use openshell_e2e::{Api, Harness, eventually};
use openshell_proto::v1 as pb;
use pb::exec_input::Input;
use pb::exec_output::Output;

struct Stats {
    p50: Duration,
    p99: Duration,
    mean: Duration,
    n: usize,
}

fn stats(samples: &[Duration]) -> Stats {
    let mut v = samples.to_vec();
    v.sort();
    let rank = |q: f64| v[((q * v.len() as f64).ceil() as usize).clamp(1, v.len()) - 1];
    let mean = v.iter().sum::<Duration>() / v.len() as u32;
    Stats { p50: rank(0.50), p99: rank(0.99), mean, n: v.len() }
}

fn ms(d: Duration) -> String {
    format!("{:.2}", d.as_secs_f64() * 1000.0)
}

fn spawn_times(program: &str, args: &[&str], n: usize) -> Vec<Duration> {
    (0..n)
        .map(|_| {
            let t = Instant::now();
            let status = Command::new(program)
                .args(args)
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status()
                .unwrap_or_else(|e| panic!("{program}: {e}"));
            let d = t.elapsed();
            assert!(status.success(), "{program} {args:?}: {status}");
            d
        })
        .collect()
}

const UNSHARE: &[&str] = &["--pid", "--fork", "--mount", "--net", "--ipc", "--uts", "--mount-proc", "true"];

/// One exec of `true` to its exit.
async fn exec_true(api: &Api) -> Duration {
    let start = pb::ExecStart { sandbox: "box".into(), command: vec!["true".into()], ..Default::default() };
    let t = Instant::now();
    let input = tokio_stream::iter([pb::ExecInput { input: Some(Input::Start(start)) }]);
    let mut out = api.sandboxes().exec_sandbox(api.req(input)).await.expect("ExecSandbox").into_inner();
    while let Some(msg) = out.message().await.expect("exec stream") {
        if let Some(Output::Exit(x)) = msg.output {
            let d = t.elapsed();
            assert_eq!((x.code, x.error.as_str()), (0, ""), "{x:?}");
            return d;
        }
    }
    panic!("the exec ended without an exit");
}

async fn run(n: usize, warmup: usize) {
    println!("exec: {n} execs (+{warmup} warm-up) of `true` in one running sandbox, one at a time");
    let half = n.div_ceil(2).max(10);
    spawn_times("true", &[], 1);
    spawn_times("unshare", UNSHARE, 1);
    let (mut plain, mut namespaces) = (spawn_times("true", &[], half), spawn_times("unshare", UNSHARE, half));

    let mut h = Harness::process(|_| {}).await;
    let api = h.admin().await;
    let req = pb::CreateSandboxRequest {
        name: "box".into(),
        command: vec!["sleep".into(), "600".into()],
        ..Default::default()
    };
    api.sandboxes().create_sandbox(api.req(req)).await.expect("CreateSandbox");
    let up = eventually(Duration::from_secs(30), || async {
        api.get("box").await.is_ok_and(|s| s.phase == "READY" && !s.isolation.is_empty())
    })
    .await;
    assert!(up, "the sandbox did not start");
    let mut samples = Vec::with_capacity(n);
    for i in 0..warmup + n {
        let d = exec_true(&api).await;
        if i >= warmup {
            samples.push(d);
        }
    }
    api.sandboxes().stop_sandbox(api.req(pb::StopSandboxRequest { sandbox: "box".into() })).await.expect("stop");
    h.shutdown().await;
    plain.extend(spawn_times("true", &[], half));
    namespaces.extend(spawn_times("unshare", UNSHARE, half));

    let floor = stats(&plain);
    let rows = [
        ("spawn `true` (FLOOR)", floor),
        ("spawn `unshare -pf -m -n -i -u --mount-proc true`", stats(&namespaces)),
        ("ExecSandbox `true` round trip (call -> exit)", stats(&samples)),
    ];
    let floor_p50 = rows[0].1.p50;
    println!();
    println!("{:<52} {:>5} {:>9} {:>9} {:>9} {:>12}", "metric (ms)", "n", "p50", "p99", "mean", "p50 / floor");
    for (name, s) in &rows {
        let ratio = s.p50.as_secs_f64() / floor_p50.as_secs_f64();
        println!("{name:<52} {:>5} {:>9} {:>9} {:>9} {:>11.1}x", s.n, ms(s.p50), ms(s.p99), ms(s.mean), ratio);
    }
    println!("p99 is the nearest rank. 2 shared cores: expect noise.");
}

fn main() {
    // `cargo bench` passes --bench; `cargo test --benches` does not: nothing to do then.
    if !std::env::args().any(|a| a == "--bench") {
        println!("exec: run with `cargo bench -p openshell-e2e --bench exec`");
        return;
    }
    let n = |k: &str, d: usize| std::env::var(k).ok().and_then(|v| v.parse().ok()).unwrap_or(d);
    let (count, warmup) = (n("BENCH_N", 200).max(1), n("BENCH_WARMUP", 10));
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().expect("runtime");
    rt.block_on(run(count, warmup));
}
