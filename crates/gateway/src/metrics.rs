//! The gateway's Prometheus metrics (OpenMetrics text at `/metrics`, prometheus-client).
//!
//! Every label takes values from a fixed set (a surface, an outcome, a code of the project's
//! vocabulary, a phase, a driver): no sandbox id or name, so a series count does not grow
//! with use. Call sites record with one line each; what the database knows (live sandboxes
//! by phase) is read at scrape time, and the store's own counts (outages, retries, the pool)
//! are copied in then too.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use openshell_store::Error;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;
use uuid::Uuid;

use crate::Gateway;

/// Where a call came in.
#[derive(Clone, Copy, Debug)]
pub enum Surface {
    Grpc,
    /// MCP from the host, with a user's login.
    Mcp,
    /// MCP through a sandbox's door.
    Door,
}

impl Surface {
    fn as_str(self) -> &'static str {
        match self {
            Surface::Grpc => "grpc",
            Surface::Mcp => "mcp",
            Surface::Door => "door",
        }
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct CreateLabels {
    kind: &'static str,
    surface: &'static str,
    outcome: &'static str,
    code: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct OutcomeLabels {
    outcome: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ActionLabels {
    action: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PhaseLabels {
    phase: String,
    driver: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PoolLabels {
    state: &'static str,
}

/// Sandboxes admitted here whose READY has not come yet, for the create → ready histogram:
/// at most this many are followed (a start that never reports is forgotten past it).
const FOLLOWED: usize = 10_000;

pub struct Metrics {
    registry: Registry,
    creates: Family<CreateLabels, Counter>,
    admission: Histogram,
    proof: Histogram,
    to_ready: Histogram,
    retries: Counter,
    outages: Counter,
    database_up: Gauge,
    pool: Family<PoolLabels, Gauge>,
    sandboxes: Family<PhaseLabels, Gauge>,
    door_calls: Family<OutcomeLabels, Counter>,
    rate_refusals: Counter,
    reconciler: Family<ActionLabels, Counter>,
    idle_stops: Counter,
    starting: Mutex<HashMap<Uuid, Instant>>,
}

impl Default for Metrics {
    fn default() -> Metrics {
        let seconds = || Histogram::new(exponential_buckets(0.001, 2.0, 16)); // 1 ms .. 33 s
        let mut m = Metrics {
            registry: Registry::with_prefix("openshell"),
            creates: Family::default(),
            admission: seconds(),
            proof: seconds(),
            to_ready: Histogram::new(exponential_buckets(0.01, 2.0, 14)), // 10 ms .. 82 s
            retries: Counter::default(),
            outages: Counter::default(),
            database_up: Gauge::default(),
            pool: Family::default(),
            sandboxes: Family::default(),
            door_calls: Family::default(),
            rate_refusals: Counter::default(),
            reconciler: Family::default(),
            idle_stops: Counter::default(),
            starting: Mutex::default(),
        };
        let r = &mut m.registry;
        r.register("creates", "Sandbox creates answered, by kind, surface, outcome and code", m.creates.clone());
        r.register(
            "admission_seconds",
            "Time of the admitting SQL call (create_child when it admits, create_root)",
            m.admission.clone(),
        );
        r.register("proof_seconds", "Time of one policy containment proof (z3), queue wait included", m.proof.clone());
        r.register(
            "create_to_ready_seconds",
            "From a create's admission to its supervisor's first connect (READY), for sandboxes this gateway started",
            m.to_ready.clone(),
        );
        r.register("serialization_retries", "SERIALIZABLE transactions retried after 40001", m.retries.clone());
        r.register("database_outages", "Times the database stopped answering", m.outages.clone());
        r.register("database_up", "1 when the last database call got an answer", m.database_up.clone());
        r.register("database_pool_connections", "The pool's connections: open, idle and max", m.pool.clone());
        r.register("sandboxes", "Live sandboxes of every gateway, by phase and driver", m.sandboxes.clone());
        r.register("door_calls", "Tool calls through sandboxes' MCP doors, by outcome", m.door_calls.clone());
        r.register("rate_limit_refusals", "Tool calls refused by their door's rate", m.rate_refusals.clone());
        r.register("reconciler_actions", "What reconciler passes did, by action", m.reconciler.clone());
        r.register("idle_stops", "Tool children stopped for being idle", m.idle_stops.clone());
        m
    }
}

fn outcome_code(result: Result<(), &Error>) -> (&'static str, &'static str) {
    match result {
        Ok(()) => ("admitted", "OK"),
        Err(e) => ("refused", e.code.as_str()),
    }
}

impl Metrics {
    /// A create answered.
    pub fn create<T>(&self, kind: &'static str, surface: Surface, result: &Result<T, Error>) {
        let (outcome, code) = outcome_code(result.as_ref().map(|_| ()));
        self.creates.get_or_create(&CreateLabels { kind, surface: surface.as_str(), outcome, code }).inc();
    }

    pub fn admission(&self, took: Duration) {
        self.admission.observe(took.as_secs_f64());
    }

    pub fn proof(&self, took: Duration) {
        self.proof.observe(took.as_secs_f64());
    }

    /// A sandbox this gateway admitted, now starting.
    pub fn starting(&self, id: Uuid) {
        let mut s = self.starting.lock().unwrap_or_else(|p| p.into_inner());
        if s.len() < FOLLOWED {
            s.insert(id, Instant::now());
        }
    }

    /// A supervisor's connect: the first one ends its sandbox's create → ready time.
    pub fn ready(&self, id: Uuid) {
        let started = self.starting.lock().unwrap_or_else(|p| p.into_inner()).remove(&id);
        if let Some(t) = started {
            self.to_ready.observe(t.elapsed().as_secs_f64());
        }
    }

    /// A tool call through a door, and whether its rate refused it.
    pub fn door_call<T>(&self, result: &Result<T, Error>) {
        let outcome = match result {
            Ok(_) => "ok",
            Err(e) if e.code == openshell_store::Code::LimitReached && e.details["limit"] == "rate" => {
                self.rate_refusals.inc();
                "rate_limited"
            }
            Err(_) => "refused",
        };
        self.door_calls.get_or_create(&OutcomeLabels { outcome }).inc();
    }

    /// A reconciler action: `orphan_stopped`, `stop_finished` or `lost_failed`.
    pub fn reconciled(&self, action: &'static str, n: usize) {
        self.reconciler.get_or_create(&ActionLabels { action }).inc_by(n as u64);
    }

    pub fn idle_stopped(&self, n: usize) {
        self.idle_stops.inc_by(n as u64);
    }
}

/// Sets a counter kept elsewhere (the store's) to `total`.
fn catch_up(counter: &Counter, total: u64) {
    let now = counter.get();
    if total > now {
        counter.inc_by(total - now);
    }
}

impl Gateway {
    /// The metrics in OpenMetrics text, with what the database and the store know now.
    pub async fn metrics_text(&self) -> String {
        let m = &self.metrics;
        let health = self.store.health();
        catch_up(&m.retries, health.serialization_retries());
        catch_up(&m.outages, health.outages());
        let (open, idle, max) = self.store.pool_use();
        for (state, n) in [("open", open), ("idle", idle), ("max", max)] {
            m.pool.get_or_create(&PoolLabels { state }).set(n as i64);
        }
        match self.store.live_sandbox_counts().await {
            Ok(counts) => {
                m.sandboxes.clear();
                for (phase, driver, n) in counts {
                    m.sandboxes.get_or_create(&PhaseLabels { phase, driver }).set(n);
                }
            }
            Err(e) => tracing::debug!("metrics: live sandboxes: {e}"),
        }
        m.database_up.set(i64::from(!health.is_down()));
        let mut out = String::new();
        if let Err(e) = prometheus_client::encoding::text::encode(&mut out, &m.registry) {
            tracing::error!("encoding metrics: {e}");
        }
        out
    }
}

/// `/metrics` on an axum router.
pub fn router(gateway: Gateway) -> axum::Router {
    axum::Router::new().route(
        "/metrics",
        axum::routing::get(move || {
            let gw = gateway.clone();
            async move {
                (
                    [(http::header::CONTENT_TYPE, "application/openmetrics-text; version=1.0.0; charset=utf-8")],
                    gw.metrics_text().await,
                )
            }
        }),
    )
}
