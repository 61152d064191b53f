//! A storm that anything lost would show: three stores on one database (as three gateway
//! replicas would have), twenty trees with small limits, tasks on every store firing creates
//! (a fifth of them repeats of an earlier request id), stops and grant updates, while a
//! killer terminates random store connections mid-transaction (what a gateway crash leaves
//! the database with). Afterwards the invariants are checked in SQL: receipts replayed in
//! commit order never exceed a limit and match the counts they recorded, the counters equal
//! a recount, every child has exactly one receipt and one first policy, and no request id
//! admitted twice.
//!
//! `STORM_CREATES` sets the number of create attempts (default 1000, what CI runs);
//! `scripts/bench-storm.sh` runs it with 10000 and prints the figures.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

use common::{Db, grant, h};
use openshell_store::{AdmissionProof, Code, GrantChange, Kind, NewChild, Store, Verdict};
use uuid::Uuid;

const TREES: usize = 20;
const STORES: usize = 3;
const TASKS_PER_STORE: usize = 6;

struct Rng(u64);
impl Rng {
    fn next(&mut self, n: usize) -> usize {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 % n as u64) as usize
    }
}

#[derive(Default)]
struct Tally {
    admitted: AtomicUsize,
    replayed: AtomicUsize,
    refused: AtomicUsize,
    unavailable: AtomicUsize,
    stops: AtomicUsize,
    grant_updates: AtomicUsize,
    kills: AtomicUsize,
}

async fn query_ids(
    sql: &tokio_postgres::Client,
    q: &str,
    p: &[&(dyn tokio_postgres::types::ToSql + Sync)],
) -> Vec<Uuid> {
    sql.query(q, p).await.unwrap().iter().map(|r| r.get(0)).collect()
}

async fn count(sql: &tokio_postgres::Client, q: &str) -> i64 {
    sql.query_one(q, &[]).await.unwrap_or_else(|e| panic!("{q}: {e}")).get(0)
}

/// One task: `n` operations on random trees through `store`.
async fn storm_task(d: Arc<Db>, store: Store, roots: Arc<Vec<Uuid>>, seed: u64, n: usize, tally: Arc<Tally>) {
    let sql = d.db.connect().await;
    let mut rng = Rng(seed);
    // (request id, parent, name, kind) of this task's earlier creates, to repeat.
    let mut issued: Vec<(String, Uuid, String, Kind)> = Vec::new();
    for i in 0..n {
        let root = roots[rng.next(roots.len())];
        match rng.next(20) {
            0 => {
                let victims = query_ids(
                    &sql,
                    "SELECT id FROM sandboxes WHERE root_id = $1 AND parent_id IS NOT NULL \
                        AND phase IN ('PROVISIONING', 'READY')",
                    &[&root],
                )
                .await;
                if let Some(&v) = victims.get(rng.next(victims.len().max(1))) {
                    // A stop, then the reconciler's part: deepest first.
                    if let Ok(items) = store.system_stop(v, "storm").await {
                        for it in items {
                            let _ = store.finish_stop(it.id).await;
                        }
                        tally.stops.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }
            1 => {
                let change = GrantChange {
                    max_breadth: Some(1 + rng.next(4) as i32),
                    max_total: Some(2 + rng.next(7) as i32),
                    ..Default::default()
                };
                if store.update_grant(&d.admin, &root.to_string(), &change).await.is_ok() {
                    tally.grant_updates.fetch_add(1, Ordering::Relaxed);
                }
            }
            _ => {
                let (request_id, parent, name, kind) = if !issued.is_empty() && rng.next(5) == 0 {
                    issued[rng.next(issued.len())].clone()
                } else {
                    let parents = query_ids(
                        &sql,
                        "SELECT id FROM sandboxes WHERE root_id = $1 AND kind = 'agent' \
                            AND phase IN ('PROVISIONING', 'READY')",
                        &[&root],
                    )
                    .await;
                    let parent = parents.get(rng.next(parents.len().max(1))).copied().unwrap_or(root);
                    let kind = if rng.next(4) == 0 { Kind::Tool } else { Kind::Agent };
                    let req = (format!("s{seed}-{i}"), parent, format!("c{seed}-{i}"), kind);
                    issued.push(req.clone());
                    req
                };
                let version: i32 = sql
                    .query_one("SELECT policy_version FROM sandboxes WHERE id = $1", &[&parent])
                    .await
                    .unwrap()
                    .get(0);
                // A create cut off by a kill is retried as a client would: the same request id.
                let mut tries = 0;
                let result = loop {
                    tries += 1;
                    let r = store
                        .admit_child(
                            &d.admin,
                            &NewChild {
                                parent: &parent.to_string(),
                                name: Some(&name),
                                kind,
                                command: &["sleep".into()],
                                policy: &serde_json::json!({"version": 1}),
                                policy_hash: &h("p"),
                                proof: AdmissionProof {
                                    parent_id: parent,
                                    parent_version: version,
                                    global_version: 0,
                                    verdict: Verdict::Inherited,
                                },
                                credential_hash: &h(&format!("cred-{name}")),
                                request_id: Some(&request_id),
                                args_hash: &h(&format!("{parent}|{name}|{kind}")),
                                runner: "storm",
                                template: None,
                            },
                        )
                        .await;
                    match r {
                        Err(e) if e.code == Code::Unavailable && tries < 5 => {
                            if tally.unavailable.fetch_add(1, Ordering::Relaxed) == 0 {
                                eprintln!("first create cut off: {e}");
                            }
                        }
                        r => break r,
                    }
                };
                match result {
                    Ok((_, false)) => tally.admitted.fetch_add(1, Ordering::Relaxed),
                    Ok((_, true)) => tally.replayed.fetch_add(1, Ordering::Relaxed),
                    Err(_) => tally.refused.fetch_add(1, Ordering::Relaxed),
                };
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_storm_of_creates_stops_grant_changes_and_killed_connections_loses_nothing() {
    let creates: usize = std::env::var("STORM_CREATES").ok().and_then(|v| v.parse().ok()).unwrap_or(1000);
    let d = Arc::new(common::db(4).await);
    let mut roots = Vec::new();
    for t in 0..TREES {
        roots.push(common::root(&d, &format!("tree{t}"), Some(grant(2, 3, 6))).await);
    }
    let roots = Arc::new(roots);
    let stores: Vec<Store> = (0..STORES).map(|_| Store::connect(&d.db.url, 8).unwrap()).collect();
    let tally = Arc::new(Tally::default());
    let rollbacks_before: i64 = d
        .sql
        .query_one("SELECT xact_rollback FROM pg_stat_database WHERE datname = current_database()", &[])
        .await
        .unwrap()
        .get(0);

    let started = Instant::now();
    let tasks = STORES * TASKS_PER_STORE;
    // Creates are 18 of every 20 operations.
    let per_task = (creates * 20 / 18).div_ceil(tasks);
    let mut handles = Vec::new();
    for (s, store) in stores.iter().enumerate() {
        for t in 0..TASKS_PER_STORE {
            let seed = 0x9e37_79b9_7f4a_7c15u64.wrapping_mul((s * TASKS_PER_STORE + t + 1) as u64);
            handles.push(tokio::spawn(storm_task(
                d.clone(),
                store.clone(),
                roots.clone(),
                seed,
                per_task,
                tally.clone(),
            )));
        }
    }
    // The crashes: a store connection terminated mid-flight, a bounded number of times.
    let killer = {
        let (d, tally) = (d.clone(), tally.clone());
        let done = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let stop = done.clone();
        let h = tokio::spawn(async move {
            let sql = d.db.connect().await;
            let mut rng = Rng(7);
            for _ in 0..200 {
                if stop.load(Ordering::Relaxed) {
                    break;
                }
                tokio::time::sleep(std::time::Duration::from_millis(20 + rng.next(60) as u64)).await;
                let n: i64 = sql
                    .query_one(
                        "SELECT count(pg_terminate_backend(pid)) FROM (SELECT pid FROM pg_stat_activity \
                          WHERE datname = current_database() AND application_name = 'openshell-gateway' \
                            AND state = 'active' ORDER BY random() LIMIT 1) v",
                        &[],
                    )
                    .await
                    .unwrap()
                    .get(0);
                tally.kills.fetch_add(n as usize, Ordering::Relaxed);
            }
        });
        (h, done)
    };
    for h in handles {
        h.await.unwrap();
    }
    killer.1.store(true, Ordering::Relaxed);
    killer.0.await.unwrap();
    let wall = started.elapsed();
    for s in &stores {
        s.close();
    }
    drop(stores);

    // ------------------------------------------------------------ the invariants, in SQL
    let sql = &d.sql;
    let drift = count(sql, "SELECT count(*) FROM os_recount()").await;
    // Receipts replayed per tree in commit order (everything that changes a tree's count
    // holds its row: audit ids are in commit order within a tree). Every admission's
    // recorded live_total equals the replayed count, which never passes the largest
    // max_total the grant ever had; the same per parent for live_children and max_breadth.
    let replay_total = count(
        sql,
        "WITH ev AS ( \
            SELECT a.id, a.root_id, a.parent_id, a.sandbox_id, a.details, \
                   CASE WHEN a.action = 'sandbox.create_child' THEN 1 ELSE -1 END AS delta, \
                   a.action = 'sandbox.create_child' AS admit \
              FROM audit_log a JOIN sandboxes s ON s.id = a.sandbox_id \
             WHERE s.parent_id IS NOT NULL AND ((a.action = 'sandbox.create_child' AND a.outcome = 'admitted') \
                   OR a.action IN ('sandbox.stopped', 'sandbox.error'))), \
         run AS (SELECT *, sum(delta) OVER (PARTITION BY root_id ORDER BY id) AS live FROM ev), \
         most AS (SELECT root_id, max(max_total) AS m FROM grant_history GROUP BY root_id) \
         SELECT count(*) FROM run JOIN most USING (root_id) \
          WHERE live < 0 OR live > most.m OR (admit AND (details->>'live_total')::int <> live)",
    )
    .await;
    let replay_breadth = count(
        sql,
        "WITH ev AS ( \
            SELECT a.id, s.root_id, s.parent_id, a.details, \
                   CASE WHEN a.action = 'sandbox.create_child' THEN 1 ELSE -1 END AS delta, \
                   a.action = 'sandbox.create_child' AS admit \
              FROM audit_log a JOIN sandboxes s ON s.id = a.sandbox_id \
             WHERE s.parent_id IS NOT NULL AND ((a.action = 'sandbox.create_child' AND a.outcome = 'admitted') \
                   OR a.action IN ('sandbox.stopped', 'sandbox.error'))), \
         run AS (SELECT *, sum(delta) OVER (PARTITION BY parent_id ORDER BY id) AS live FROM ev), \
         most AS (SELECT root_id, max(max_breadth) AS m FROM grant_history GROUP BY root_id) \
         SELECT count(*) FROM run JOIN most USING (root_id) \
          WHERE live < 0 OR live > most.m OR (admit AND (details->>'live_children')::int <> live)",
    )
    .await;
    let too_deep = count(
        sql,
        "SELECT count(*) FROM sandboxes s WHERE s.kind = 'agent' AND s.parent_id IS NOT NULL \
            AND s.depth > (SELECT max(max_depth) FROM grant_history h WHERE h.root_id = s.root_id)",
    )
    .await;
    let receipts = count(
        sql,
        "SELECT count(*) FROM sandboxes s WHERE s.parent_id IS NOT NULL AND ( \
            (SELECT count(*) FROM audit_log a WHERE a.action = 'sandbox.create_child' AND a.outcome = 'admitted' \
               AND a.sandbox_id = s.id) <> 1 \
            OR (SELECT count(*) FROM sandbox_policies p WHERE p.sandbox_id = s.id AND p.version = 1) <> 1)",
    )
    .await;
    let orphans = count(
        sql,
        "SELECT (SELECT count(*) FROM audit_log a WHERE a.action = 'sandbox.create_child' AND a.outcome = 'admitted' \
                   AND NOT EXISTS (SELECT 1 FROM sandboxes s WHERE s.id = a.sandbox_id)) \
              + (SELECT count(*) FROM create_requests r WHERE NOT EXISTS (SELECT 1 FROM sandboxes s WHERE s.id = r.sandbox_id)) \
              + (SELECT count(*) FROM sandbox_policies p WHERE NOT EXISTS (SELECT 1 FROM sandboxes s WHERE s.id = p.sandbox_id))",
    )
    .await;
    let twice = count(
        sql,
        "SELECT count(*) FROM (SELECT actor_user, actor_sandbox, request_id FROM audit_log \
          WHERE action = 'sandbox.create_child' AND outcome = 'admitted' AND request_id IS NOT NULL \
          GROUP BY 1, 2, 3 HAVING count(*) > 1) x",
    )
    .await;
    let children = count(sql, "SELECT count(*) FROM sandboxes WHERE parent_id IS NOT NULL").await;
    let rollbacks: i64 = sql
        .query_one("SELECT xact_rollback FROM pg_stat_database WHERE datname = current_database()", &[])
        .await
        .unwrap()
        .get(0);

    let t = |a: &AtomicUsize| a.load(Ordering::Relaxed);
    let attempts = t(&tally.admitted) + t(&tally.replayed) + t(&tally.refused);
    println!(
        "storm: {attempts} create attempts in {:.1} s ({:.0}/s): {} admitted, {} replayed, {} refused, {} cut off by a kill and retried; \
         {} stops, {} grant updates, {} connections killed; rollbacks (retried conflicts, refusals, kills) {}",
        wall.as_secs_f64(),
        attempts as f64 / wall.as_secs_f64(),
        t(&tally.admitted),
        t(&tally.replayed),
        t(&tally.refused),
        t(&tally.unavailable),
        t(&tally.stops),
        t(&tally.grant_updates),
        t(&tally.kills),
        rollbacks - rollbacks_before,
    );
    println!(
        "invariants: drift {drift}, replayed over a limit or off the recorded count: total {replay_total}, breadth \
         {replay_breadth}; too deep {too_deep}; children without exactly one receipt and first policy {receipts}; \
         rows naming no sandbox {orphans}; request ids admitted twice {twice}"
    );
    assert_eq!((drift, replay_total, replay_breadth, too_deep, receipts, orphans, twice), (0, 0, 0, 0, 0, 0, 0));
    // The same, and the limits each receipt recorded, by the function operators run.
    let broken: Vec<(String, i64, Option<String>)> = sql
        .query("SELECT invariant, violations, example FROM os_invariants() WHERE violations > 0", &[])
        .await
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1), r.get(2)))
        .collect();
    assert!(broken.is_empty(), "os_invariants(): {broken:?}");
    let unrecorded = count(
        sql,
        "SELECT count(*) FROM audit_log WHERE action = 'sandbox.create_child' AND outcome = 'admitted' \
            AND NOT (details ?& array['max_depth', 'max_breadth', 'max_total'])",
    )
    .await;
    assert_eq!(unrecorded, 0, "every admission's receipt records the limits it was admitted under");
    // A create whose commit a kill hid from its caller is answered by the retry as a replay.
    assert!(children as usize >= t(&tally.admitted) && children as usize <= t(&tally.admitted) + t(&tally.replayed));
    assert!(t(&tally.admitted) > 50 && t(&tally.refused) > 50, "the storm reached the limits both ways");
    assert!(t(&tally.replayed) > 0 && t(&tally.stops) > 0 && t(&tally.grant_updates) > 0);
}
