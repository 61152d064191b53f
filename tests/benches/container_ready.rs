//! Container start-up benchmark: create -> READY on the container driver, beside its floor,
//! starting the same image with a trivial command through the same engine API, both
//! measured in the same run.
//!
//! ```sh
//! cargo build --release --workspace --bins
//! DOCKER_HOST=unix:///run/openshell-podman.sock cargo bench -p openshell-e2e --bench container_ready
//! ```
//!
//! A real gateway (in this process) with `--driver container` on a fresh test database
//! creates `BENCH_N` roots from the test image (`localhost/openshell-test-agent:local`)
//! running `sleep 600`, one after the other; each is timed from just before `CreateSandbox`
//! until `GetSandbox` (polled every millisecond) shows READY: admission, container create and
//! start, the credential over the attached stdin, and the supervisor connecting back. Each is
//! stopped (container removed) before the next; the stop is not in the figures.
//!
//! Floors: the same image created and started with `true` as its command through the same
//! API client (bollard), timed until `start` returned (the engine ran the process: the
//! stricter floor, the ratio's) and until the engine reported it exited; half the floor runs
//! come before the sandboxes and half after, to even out drift. The issue's target: READY
//! within 1.5x the floor.
//!
//! Environment: `BENCH_N` (default 30), `BENCH_WARMUP` (discarded sandboxes first, default 2).

use std::time::{Duration, Instant};

use bollard::Docker;
use bollard::query_parameters::{CreateContainerOptions, RemoveContainerOptions, WaitContainerOptions};
use futures::StreamExt;
use openshell_e2e::{Backend, Harness, TEST_IMAGE, container_host};
use openshell_proto::v1 as pb;

const TIMEOUT: Duration = Duration::from_secs(60);

struct Stats {
    p50: Duration,
    p99: Duration,
    mean: Duration,
}

fn stats(samples: &[Duration]) -> Stats {
    let mut v = samples.to_vec();
    v.sort();
    let rank = |q: f64| v[((q * v.len() as f64).ceil() as usize).clamp(1, v.len()) - 1];
    Stats { p50: rank(0.50), p99: rank(0.99), mean: v.iter().sum::<Duration>() / v.len() as u32 }
}

fn ms(d: Duration) -> String {
    format!("{:.1}", d.as_secs_f64() * 1000.0)
}

/// Create, start (first duration) and wait for the exit (second) of `true` in the test
/// image; the container is removed afterwards (not timed).
async fn floor_once(docker: &Docker, i: usize) -> (Duration, Duration) {
    let name = format!("openshell-bench-floor-{}-{i}", std::process::id());
    let body = bollard::models::ContainerCreateBody {
        image: Some(TEST_IMAGE.into()),
        cmd: Some(vec!["/usr/bin/true".into()]),
        ..Default::default()
    };
    let t = Instant::now();
    docker
        .create_container(Some(CreateContainerOptions { name: Some(name.clone()), ..Default::default() }), body)
        .await
        .expect("create floor container");
    docker.start_container(&name, None).await.expect("start floor container");
    let started = t.elapsed();
    let mut wait = docker.wait_container(&name, Some(WaitContainerOptions { condition: "not-running".into() }));
    while let Some(r) = wait.next().await {
        if r.is_err() {
            break;
        }
    }
    let took = t.elapsed();
    let _ = docker.remove_container(&name, Some(RemoveContainerOptions { force: true, ..Default::default() })).await;
    (started, took)
}

fn main() {
    let n = std::env::var("BENCH_N").ok().and_then(|v| v.parse().ok()).unwrap_or(30usize).max(2);
    let warmup = std::env::var("BENCH_WARMUP").ok().and_then(|v| v.parse().ok()).unwrap_or(2usize);
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    rt.block_on(async move {
        let docker = Docker::connect_with_unix(&container_host(), 120, bollard::API_DEFAULT_VERSION).unwrap();
        let h = Harness::on(Backend::Container, |o| o.stop_grace = 1).await;
        let a = h.admin().await;
        let mut floor = Vec::new();
        for i in 0..warmup {
            floor_once(&docker, 10_000 + i).await;
        }
        for i in 0..n / 2 {
            floor.push(floor_once(&docker, i).await);
        }
        let mut ready = Vec::new();
        for i in 0..warmup + n {
            let name = format!("b{i}");
            let req = pb::CreateSandboxRequest {
                name: name.clone(),
                command: vec!["sleep".into(), "600".into()],
                template: Backend::Container.template(None),
                ..Default::default()
            };
            let t = Instant::now();
            a.sandboxes().create_sandbox(a.req(req)).await.expect("create");
            loop {
                let s = a.get(&name).await.expect("get");
                if s.phase == "READY" {
                    break;
                }
                assert!(s.phase == "PROVISIONING", "{name}: {s:?}");
                assert!(t.elapsed() < TIMEOUT, "{name} not READY after {TIMEOUT:?}");
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
            let took = t.elapsed();
            if i >= warmup {
                ready.push(took);
            }
            a.sandboxes().stop_sandbox(a.req(pb::StopSandboxRequest { sandbox: name })).await.expect("stop");
        }
        for i in n / 2..n {
            floor.push(floor_once(&docker, i).await);
        }
        let started: Vec<Duration> = floor.iter().map(|f| f.0).collect();
        let exited: Vec<Duration> = floor.iter().map(|f| f.1).collect();
        let (r, f, x) = (stats(&ready), stats(&started), stats(&exited));
        println!("container driver, {n} sandboxes (after {warmup} warm-up), image {TEST_IMAGE}");
        println!("{:<44} {:>9} {:>9} {:>9}", "", "p50 ms", "p99 ms", "mean ms");
        println!("{:<44} {:>9} {:>9} {:>9}", "create -> READY", ms(r.p50), ms(r.p99), ms(r.mean));
        for (what, s) in [("floor: create+start of `true` (same API)", &f), ("floor: ... until it exited", &x)] {
            println!("{:<44} {:>9} {:>9} {:>9}", what, ms(s.p50), ms(s.p99), ms(s.mean));
        }
        println!(
            "ratio READY / create+start floor: p50 {:.2}x, p99 {:.2}x (target: p50 within 1.5x)",
            r.p50.as_secs_f64() / f.p50.as_secs_f64(),
            r.p99.as_secs_f64() / f.p99.as_secs_f64()
        );
        drop(h);
    });
}
