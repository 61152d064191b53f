//! The limits hold under concurrent creates, retries and two gateway processes on one
//! database, because PostgreSQL decides (SERIALIZABLE, retried on 40001).

use futures::future::join_all;
use openshell_e2e::*;
use openshell_proto::v1 as pb;

/// Rounds per scenario: each round is a fresh tree racing from scratch.
const ROUNDS: usize = 5;

async fn race(apis: &[Api], parent: &str, n: usize) -> (usize, usize) {
    let results = join_all((0..n).map(|i| {
        let api = apis[i % apis.len()].clone();
        let parent = parent.to_string();
        async move { api.child(&parent, &format!("{parent}-c{i}"), false).await }
    }))
    .await;
    let admitted = results.iter().filter(|r| r.is_ok()).count();
    let limit = results.iter().filter(|r| matches!(r, Err(s) if code(s) == "LIMIT_REACHED")).count();
    let other: Vec<_> =
        results.iter().filter_map(|r| r.as_ref().err()).filter(|s| code(s) != "LIMIT_REACHED").collect();
    assert!(other.is_empty(), "only LIMIT_REACHED refusals expected: {other:?}");
    (admitted, limit)
}

async fn live_children(h: &Harness, parent: &str) -> i64 {
    h.sql()
        .await
        .query_one(
            "SELECT count(*) FROM sandboxes c JOIN sandboxes p ON p.id = c.parent_id \
              WHERE p.name = $1 AND c.phase IN ('PROVISIONING', 'READY', 'STOPPING')",
            &[&parent],
        )
        .await
        .unwrap()
        .get(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn fifty_parallel_creates_under_breadth_five_admit_exactly_five() {
    let h = Harness::fake().await;
    let a = h.admin().await;
    for round in 0..ROUNDS {
        let lead = format!("lead{round}");
        a.root(&lead, Some(grant(1, 5, 100))).await.unwrap();
        let (admitted, limited) = race(std::slice::from_ref(&a), &lead, 50).await;
        assert_eq!((admitted, limited), (5, 45), "round {round}");
        assert_eq!(live_children(&h, &lead).await, 5);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn fifty_parallel_creates_across_a_tree_stop_at_max_total() {
    let h = Harness::fake().await;
    let a = h.admin().await;
    for round in 0..ROUNDS {
        let lead = format!("lead{round}");
        a.root(&lead, Some(grant(3, 50, 7))).await.unwrap();
        let parents: Vec<String> = (0..3).map(|i| format!("{lead}-p{i}")).collect();
        for p in &parents {
            a.child(&lead, p, false).await.unwrap();
        }
        // 4 slots left in the tree; 50 racers spread over 3 parents and depth 2.
        let results = join_all((0..50).map(|i| {
            let a = a.clone();
            let parent = parents[i % 3].clone();
            async move { a.child(&parent, &format!("{parent}-g{i}"), false).await }
        }))
        .await;
        assert_eq!(results.iter().filter(|r| r.is_ok()).count(), 4, "round {round}");
        for r in results.iter().filter_map(|r| r.as_ref().err()) {
            assert_eq!(code(r), "LIMIT_REACHED");
            assert_eq!(details(r)["limit"], "total");
        }
        assert_eq!(a.tree(&lead).await.len(), 1 + 7);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn parallel_creates_at_every_depth_never_pass_max_depth() {
    let h = Harness::fake().await;
    let a = h.admin().await;
    for round in 0..ROUNDS {
        let lead = format!("lead{round}");
        a.root(&lead, Some(grant(2, 20, 100))).await.unwrap();
        let d1 = a.child(&lead, &format!("{lead}-d1"), false).await.unwrap();
        let d2 = a.child(&d1.name, &format!("{lead}-d2"), false).await.unwrap();
        let parents = [lead.clone(), d1.name.clone(), d2.name.clone()];
        let results = join_all((0..30).map(|i| {
            let a = a.clone();
            let parent = parents[i % 3].clone();
            async move { (i % 3, a.child(&parent, &format!("{parent}-x{i}"), false).await) }
        }))
        .await;
        for (depth_of_parent, r) in results {
            match depth_of_parent {
                2 => assert_eq!(details(&refused(r, "LIMIT_REACHED"))["limit"], "depth"),
                _ => assert!(r.unwrap().depth <= 2),
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn twenty_concurrent_repeats_of_one_request_id_create_one_child() {
    let h = Harness::fake().await;
    let a = h.admin().await;
    for round in 0..ROUNDS {
        let lead = format!("lead{round}");
        a.root(&lead, Some(grant(1, 50, 50))).await.unwrap();
        let req = pb::CreateChildSandboxRequest {
            parent: lead.clone(),
            name: format!("{lead}-only"),
            command: vec!["sleep".into(), "600".into()],
            request_id: format!("req-{round}"),
            ..Default::default()
        };
        let results = join_all((0..20).map(|_| {
            let a = a.clone();
            let req = req.clone();
            async move { a.child_req(req).await }
        }))
        .await;
        let ids: std::collections::HashSet<String> = results
            .iter()
            .map(|r| r.as_ref().expect("every repeat answers").sandbox.as_ref().unwrap().id.clone())
            .collect();
        assert_eq!(ids.len(), 1, "round {round}");
        assert_eq!(results.iter().filter(|r| !r.as_ref().unwrap().replayed).count(), 1);
        assert_eq!(live_children(&h, &lead).await, 1);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_gateway_processes_on_one_database_keep_the_same_limits() {
    let db = openshell_testkit::fresh_database().await;
    let dir = TempDir::new("openshell-cfg");
    let config = dir.0.join("config.json");
    let (state1, state2) = (TempDir::new("openshell-gw"), TempDir::new("openshell-gw"));
    let null = ["--driver", "null"];
    let g1 = GatewayProcess::spawn(&db.url, &state1.0, "127.0.0.1:0", Some(&config), &null);
    let g2 = GatewayProcess::spawn(&db.url, &state2.0, "127.0.0.1:0", None, &null);
    let token = config_token(&config);
    let apis = [Api::connect(&g1.endpoint, Some(&token)).await, Api::connect(&g2.endpoint, Some(&token)).await];
    for round in 0..ROUNDS {
        let lead = format!("lead{round}");
        apis[round % 2].root(&lead, Some(grant(1, 5, 100))).await.unwrap();
        let (admitted, limited) = race(&apis, &lead, 50).await;
        assert_eq!((admitted, limited), (5, 45), "round {round}");
    }
}
