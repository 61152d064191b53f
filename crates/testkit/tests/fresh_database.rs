//! `fresh_database` through the public API, in the mode the environment selects: a container
//! (the default) or the server in `OPENSHELL_TEST_DATABASE_URL`.

use std::time::{Duration, Instant};

use openshell_testkit::{DATABASE_URL_VAR, fresh_database, server_description};

fn mode_is_existing() -> bool {
    std::env::var(DATABASE_URL_VAR).is_ok_and(|v| !v.trim().is_empty())
}

#[tokio::test]
async fn two_fresh_databases_are_distinct_and_writable() {
    let a = fresh_database().await;
    let b = fresh_database().await;
    assert_ne!(a.name, b.name);
    assert_ne!(a.url, b.url);
    assert!(a.url.starts_with("postgres://"), "{}", a.url);
    assert!(a.url.ends_with(&format!("/{}", a.name)), "{}", a.url);

    let ca = a.connect().await;
    let cb = b.connect().await;
    ca.batch_execute("CREATE TABLE t (v text); INSERT INTO t VALUES ('a')").await.unwrap();
    // Fresh: nothing of `a` is visible in `b`.
    let tables: i64 =
        cb.query_one("SELECT count(*) FROM pg_tables WHERE schemaname = 'public'", &[]).await.unwrap().get(0);
    assert_eq!(tables, 0);
    cb.batch_execute("CREATE TABLE t (v text); INSERT INTO t VALUES ('b'), ('b')").await.unwrap();
    let na: i64 = ca.query_one("SELECT count(*) FROM t", &[]).await.unwrap().get(0);
    let nb: i64 = cb.query_one("SELECT count(*) FROM t", &[]).await.unwrap().get(0);
    assert_eq!((na, nb), (1, 2));
}

#[tokio::test]
async fn the_mode_follows_the_environment() {
    let _db = fresh_database().await;
    let description = server_description();
    if mode_is_existing() {
        assert!(description.contains(DATABASE_URL_VAR), "{description}");
    } else {
        assert!(description.starts_with("testcontainers "), "{description}");
        assert!(description.contains(" on port "), "{description}");
    }
}

#[tokio::test]
async fn the_server_is_tuned_for_tests() {
    let db = fresh_database().await;
    let client = db.connect().await;
    for (setting, want) in [("fsync", "off"), ("synchronous_commit", "off")] {
        let value: String = client.query_one(&format!("SHOW {setting}"), &[]).await.unwrap().get(0);
        if !mode_is_existing() {
            assert_eq!(value, want, "{setting}");
        }
    }
    let max: String = client.query_one("SHOW max_connections", &[]).await.unwrap().get(0);
    if !mode_is_existing() {
        assert!(max.parse::<u32>().unwrap() >= 500, "max_connections = {max}");
    }
}

/// Many tests at once, each opening many connections: unique names, no exhausted server.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_concurrent_databases_and_connections() {
    let started = Instant::now();
    let dbs = futures_join_all((0..12).map(|_| fresh_database())).await;
    let mut names: Vec<_> = dbs.iter().map(|d| d.name.clone()).collect();
    names.sort();
    names.dedup();
    assert_eq!(names.len(), dbs.len());
    eprintln!("12 concurrent databases in {:?}", started.elapsed());

    // 60 connections to one database, all live at once.
    let db = &dbs[0];
    let clients = futures_join_all((0..60).map(|_| {
        let url = db.url.clone();
        async move {
            let (client, connection) = tokio_postgres::connect(&url, tokio_postgres::NoTls).await.unwrap();
            tokio::spawn(connection);
            client
        }
    }))
    .await;
    let mut tasks = Vec::new();
    for (i, client) in clients.into_iter().enumerate() {
        tasks.push(tokio::spawn(async move {
            let n: i32 = client.query_one("SELECT $1::int + 1", &[&(i as i32)]).await.unwrap().get(0);
            assert_eq!(n, i as i32 + 1);
            client
        }));
    }
    for task in tasks {
        task.await.unwrap();
    }
}

/// Each `#[tokio::test]` has its own runtime, which ends with the test: the shared server
/// must outlive them. Several small tests in a row exercise that.
#[tokio::test]
async fn runtime_1() {
    let db = fresh_database().await;
    db.connect().await.batch_execute("SELECT 1").await.unwrap();
}
#[tokio::test]
async fn runtime_2() {
    let db = fresh_database().await;
    db.connect().await.batch_execute("SELECT 1").await.unwrap();
}
#[test]
fn runtime_3_current_thread_after_others() {
    for _ in 0..3 {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        rt.block_on(async {
            let db = fresh_database().await;
            db.connect().await.batch_execute("SELECT 1").await.unwrap();
        });
        // The runtime (and the TestDb's drop) are gone; the next round must still work.
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Runs the futures as tasks (in parallel) and collects their outputs in order.
async fn futures_join_all<F>(futures: impl IntoIterator<Item = F>) -> Vec<F::Output>
where
    F: std::future::Future + Send + 'static,
    F::Output: Send + 'static,
{
    let handles: Vec<_> = futures.into_iter().map(tokio::spawn).collect();
    let mut out = Vec::new();
    for handle in handles {
        out.push(handle.await.unwrap());
    }
    out
}
