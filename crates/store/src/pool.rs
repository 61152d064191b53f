//! Connections whose every statement runs SERIALIZABLE, and the retry on 40001.
//!
//! Each store operation is one SQL function call. With `default_transaction_isolation`
//! set to serializable on the connection, that call is its own SERIALIZABLE transaction in
//! one round trip, and a serialization failure (raised at the statement or its implicit
//! commit) leaves nothing behind: the whole call is simply run again.

use std::time::{Duration, Instant};

use deadpool_postgres::{Manager, ManagerConfig, Pool, RecyclingMethod};
use tokio_postgres::error::SqlState;
use tokio_postgres::types::ToSql;
use tokio_postgres::{NoTls, Row};

use crate::error::Error;
use crate::health::{Health, Seen, unreachable};

/// How long one operation may keep retrying serialization failures before giving up.
const RETRY_BUDGET: Duration = Duration::from_secs(20);

/// The role every pooled connection acts as: it may only execute the gateway's functions.
pub const GATEWAY_ROLE: &str = "openshell_gateway";

pub(crate) fn parse(url: &str) -> Result<tokio_postgres::Config, Error> {
    url.parse().map_err(|e| Error::invalid("database_url", format!("not a PostgreSQL URL ({e})")))
}

/// How every session of the gateway logs in: as the gateway role, SERIALIZABLE, named.
pub(crate) fn session(url: &str) -> Result<tokio_postgres::Config, Error> {
    let mut config = parse(url)?;
    // Whatever the login (the gateway role itself, or a superuser allowed with
    // --allow-superuser), the pool acts as the gateway role.
    let ours = format!("-c default_transaction_isolation=serializable -c role={GATEWAY_ROLE}");
    let options = match config.get_options() {
        Some(o) if !o.is_empty() => format!("{o} {ours}"),
        _ => ours,
    };
    config.options(&options);
    if config.get_application_name().is_none() {
        config.application_name("openshell-gateway");
    }
    if config.get_connect_timeout().is_none() {
        config.connect_timeout(Duration::from_secs(10));
    }
    Ok(config)
}

pub(crate) fn build(config: tokio_postgres::Config, max_size: usize) -> Result<Pool, Error> {
    let manager = Manager::from_config(config, NoTls, ManagerConfig { recycling_method: RecyclingMethod::Fast });
    // The connection used last goes out first: calls one after another stay on one warm
    // backend (its caches, its CPU) instead of waking each idle one in turn. The admission
    // bench's interleaved rows measured gRPC CreateChild at 1.69-1.73x admit_child's p50
    // this way against 1.92-1.93x first in, first out.
    Pool::builder(manager)
        .queue_mode(deadpool_postgres::QueueMode::Lifo)
        .max_size(max_size)
        .wait_timeout(Some(Duration::from_secs(30)))
        .create_timeout(Some(Duration::from_secs(10)))
        .runtime(deadpool_postgres::Runtime::Tokio1)
        .build()
        .map_err(Error::database)
}

fn retryable(e: &tokio_postgres::Error) -> bool {
    matches!(e.code(), Some(c) if *c == SqlState::T_R_SERIALIZATION_FAILURE || *c == SqlState::T_R_DEADLOCK_DETECTED)
}

/// Runs one statement as its own SERIALIZABLE transaction, retrying serialization
/// failures with jittered exponential backoff until `RETRY_BUDGET` is spent.
/// Each outcome is reported to `health` (see health.rs).
pub(crate) async fn call(
    pool: &Pool,
    health: &Health,
    sql: &str,
    params: &[&(dyn ToSql + Sync)],
) -> Result<Vec<Row>, Error> {
    let started = Instant::now();
    let mut attempt: u32 = 0;
    loop {
        let client = match pool.get().await {
            Ok(c) => c,
            Err(e) => {
                saw_pool_error(health, &e);
                return Err(e.into());
            }
        };
        let outcome = match client.prepare_cached(sql).await {
            Ok(stmt) => client.query(&stmt, params).await,
            Err(e) => Err(e),
        };
        if let Err(e) = &outcome
            && unreachable(e)
        {
            health.saw(Seen::Unreachable(e.to_string()));
        } else {
            health.saw(Seen::Answered(made(&client)));
        }
        match outcome {
            Err(e) if unreachable(&e) => {
                // Not back into the pool: a connection to a server that went away, or to a
                // primary demoted to a standby, would fail the next call too.
                let _ = deadpool_postgres::Object::take(client);
                return Err(e.into());
            }
            Ok(rows) => return Ok(rows),
            Err(e) if retryable(&e) && started.elapsed() < RETRY_BUDGET => {
                drop(client);
                attempt += 1;
                health.retried();
                tokio::time::sleep(backoff(attempt)).await;
            }
            Err(e) if retryable(&e) => {
                return Err(Error::database(format!("still conflicting after {attempt} retries; try again")));
            }
            Err(e) => return Err(e.into()),
        }
    }
}

/// Runs one read-only statement at READ COMMITTED: for the long reads of whole tables
/// (verifying the audit chains, counting sandboxes for metrics), which under SERIALIZABLE
/// would take predicate locks that make concurrent admissions fail and retry. One statement
/// (a STABLE function) still reads one snapshot.
pub(crate) async fn read(
    pool: &Pool,
    health: &Health,
    sql: &str,
    params: &[&(dyn ToSql + Sync)],
) -> Result<Vec<Row>, Error> {
    let mut client = match pool.get().await {
        Ok(c) => c,
        Err(e) => {
            saw_pool_error(health, &e);
            return Err(e.into());
        }
    };
    let made = made(&client);
    let outcome = async {
        let tx = client
            .build_transaction()
            .isolation_level(tokio_postgres::IsolationLevel::ReadCommitted)
            .read_only(true)
            .start()
            .await?;
        let rows = tx.query(sql, params).await?;
        tx.commit().await?;
        Ok::<_, tokio_postgres::Error>(rows)
    }
    .await;
    match &outcome {
        Err(e) if unreachable(e) => health.saw(Seen::Unreachable(e.to_string())),
        _ => health.saw(Seen::Answered(made)),
    }
    Ok(outcome?)
}

fn made(client: &deadpool_postgres::Object) -> Instant {
    deadpool_postgres::Object::metrics(client).created
}

/// A pool that could not hand out a connection: unreachable, unless every connection was
/// simply busy for the whole wait (load, not an outage).
fn saw_pool_error(health: &Health, e: &deadpool_postgres::PoolError) {
    if !matches!(e, deadpool_postgres::PoolError::Timeout(deadpool_postgres::TimeoutType::Wait)) {
        health.saw(Seen::Unreachable(e.to_string()));
    }
}

fn backoff(attempt: u32) -> Duration {
    let cap_us = 200u64 << attempt.min(6); // 0.4 ms .. 12.8 ms
    let mut b = [0u8; 8];
    let jitter = match getrandom::fill(&mut b) {
        Ok(()) => u64::from_le_bytes(b) % cap_us,
        Err(_) => cap_us / 2,
    };
    Duration::from_micros(jitter + 50)
}
