//! A real Prometheus (Debian's `prometheus`, scripts/setup.d/60-ops.sh) scrapes a gateway
//! that did a known set of creates and refusals; the values are read back through
//! Prometheus's HTTP query API, and no series carries a sandbox's id or name.

use std::time::Duration;

use openshell_e2e::*;
use openshell_proto::v1 as pb;

/// A Prometheus server on loopback scraping `target` every second; killed on drop.
struct Prometheus {
    child: std::process::Child,
    api: String,
    _dir: TempDir,
}

impl Prometheus {
    fn start(target: &str) -> Prometheus {
        let dir = TempDir::new("openshell-prometheus");
        let config = dir.0.join("prometheus.yml");
        std::fs::write(
            &config,
            format!(
                "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\nscrape_configs:\n  - job_name: openshell\n    \
                 metrics_path: /metrics\n    static_configs:\n      - targets: ['{target}']\n"
            ),
        )
        .unwrap();
        let port = free_port();
        let child = std::process::Command::new("prometheus")
            .arg(format!("--config.file={}", config.display()))
            .arg(format!("--storage.tsdb.path={}", dir.0.join("data").display()))
            .arg(format!("--web.listen-address=127.0.0.1:{port}"))
            .stdout(std::process::Stdio::null())
            .stderr(std::fs::File::create(dir.0.join("prometheus.log")).unwrap())
            .spawn()
            .expect("prometheus (apt-get install prometheus; scripts/setup.d/60-ops.sh)");
        Prometheus { child, api: format!("http://127.0.0.1:{port}/api/v1"), _dir: dir }
    }

    /// The instant query's samples: (labels, value).
    async fn query(&self, q: &str) -> Vec<(serde_json::Value, f64)> {
        let url = reqwest::Url::parse_with_params(&format!("{}/query", self.api), &[("query", q)]).unwrap();
        let Ok(resp) = reqwest::Client::new().get(url).send().await else { return Vec::new() };
        let body: serde_json::Value = serde_json::from_str(&resp.text().await.unwrap_or_default()).unwrap_or_default();
        body["data"]["result"]
            .as_array()
            .cloned()
            .unwrap_or_default()
            .into_iter()
            .map(|s| (s["metric"].clone(), s["value"][1].as_str().and_then(|v| v.parse().ok()).unwrap_or(f64::NAN)))
            .collect()
    }

    /// Waits until `q` has one sample equal to `want` (the scrape after the actions came in).
    async fn expect(&self, q: &str, want: f64) {
        let mut last = Vec::new();
        for _ in 0..120 {
            last = self.query(q).await;
            if last.len() == 1 && last[0].1 == want {
                return;
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
        panic!("{q}: wanted {want}, Prometheus has {last:?}");
    }
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[tokio::test]
async fn prometheus_scrapes_the_creates_and_refusals_it_was_shown() {
    let h = Harness::fake().await;
    let api = h.admin().await;
    api.root("lead", Some(grant(1, 2, 10))).await.unwrap();
    api.child("lead", "a", false).await.unwrap();
    // A child with a policy of its own is proved within its parent's: one proof.
    api.child_req(pb::CreateChildSandboxRequest {
        parent: "lead".into(),
        name: "b".into(),
        kind: pb::SandboxKind::Tool as i32,
        command: vec!["sleep".into(), "600".into()],
        policy_yaml: policy_reading(&[]),
        ..Default::default()
    })
    .await
    .unwrap();
    refused(api.child("lead", "c", false).await, "LIMIT_REACHED");
    refused(api.child("lead", "Bad Name", false).await, "INVALID_ARGUMENT");
    refused(api.child("nobody", "d", false).await, "NOT_FOUND");

    let target = h.endpoint.trim_start_matches("http://").to_string();
    let prom = Prometheus::start(&target);
    prom.expect("up{job=\"openshell\"}", 1.0).await;
    let creates = |kind: &str, outcome: &str, code: &str| {
        format!("openshell_creates_total{{kind=\"{kind}\",surface=\"grpc\",outcome=\"{outcome}\",code=\"{code}\"}}")
    };
    prom.expect(&creates("root", "admitted", "OK"), 1.0).await;
    prom.expect(&creates("child", "admitted", "OK"), 2.0).await;
    prom.expect(&creates("child", "refused", "LIMIT_REACHED"), 1.0).await;
    prom.expect(&creates("child", "refused", "INVALID_ARGUMENT"), 1.0).await;
    prom.expect(&creates("child", "refused", "NOT_FOUND"), 1.0).await;
    prom.expect("sum(openshell_creates_total)", 6.0).await;
    // The admitting SQL ran for the root and each child whose parent was found (a refusal
    // of the name or the limit comes from it too).
    prom.expect("openshell_admission_seconds_count", 5.0).await;
    prom.expect("openshell_proof_seconds_count", 1.0).await;
    // The fake driver starts nothing: three live sandboxes wait in PROVISIONING.
    prom.expect("openshell_sandboxes{phase=\"PROVISIONING\"}", 3.0).await;
    prom.expect("openshell_database_up", 1.0).await;
    prom.expect("openshell_database_outages_total", 0.0).await;
    prom.expect("openshell_database_pool_connections{state=\"max\"}", 64.0).await;

    // Bounded labels: no series names a sandbox by id or name.
    let all = prom.query("{__name__=~\"openshell_.*\"}").await;
    assert!(all.len() > 10, "{all:?}");
    let ids: Vec<String> =
        h.sql().await.query("SELECT id::text FROM sandboxes", &[]).await.unwrap().iter().map(|r| r.get(0)).collect();
    for (labels, _) in &all {
        for (k, v) in labels.as_object().unwrap() {
            let v = v.as_str().unwrap_or_default();
            assert!(!ids.iter().any(|id| v.contains(id)) && !["lead", "a", "b"].contains(&v), "{k}={v} in {labels}");
        }
    }

    // The metrics are served in the OpenMetrics text format.
    let text = reqwest::get(format!("{}/metrics", h.endpoint)).await.unwrap();
    assert!(text.headers()["content-type"].to_str().unwrap().starts_with("application/openmetrics-text"));
    assert!(text.text().await.unwrap().trim_end().ends_with("# EOF"));
}

#[tokio::test]
async fn metrics_listen_serves_them_on_their_own_address() {
    let port = free_port();
    let h = Harness::fake_with(|o| o.metrics_listen = Some(format!("127.0.0.1:{port}").parse().unwrap())).await;
    let own = reqwest::get(format!("http://127.0.0.1:{port}/metrics")).await.unwrap();
    assert!(own.status().is_success());
    assert!(own.text().await.unwrap().contains("openshell_database_up"));
    let main = reqwest::get(format!("{}/metrics", h.endpoint)).await.unwrap();
    assert!(!main.status().is_success() || !main.text().await.unwrap().contains("openshell_database_up"));
}
