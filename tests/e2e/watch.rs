//! WatchSandbox: the sandbox now, then each phase change, ending at READY (or failed); only
//! for callers who may see the sandbox.

use openshell_e2e::*;
use openshell_proto::v1 as pb;

#[tokio::test]
async fn watch_follows_a_new_sandbox_to_ready_and_refuses_strangers() {
    let h = Harness::process(|_| {}).await;
    let a = h.admin().await;
    let s = a.root("lead", None).await.unwrap();
    let mut phases = a
        .sandboxes()
        .watch_sandbox(a.req(pb::WatchSandboxRequest { sandbox: s.id.clone(), timeout_seconds: 30 }))
        .await
        .unwrap()
        .into_inner();
    let (mut seen, mut last) = (Vec::new(), None);
    while let Some(next) = phases.message().await.unwrap() {
        seen.push(next.phase.clone());
        last = Some(next);
    }
    assert_eq!(seen.last().map(String::as_str), Some("READY"), "{seen:?}");
    // READY comes from the report's own write, not a read: it is the row a read gives.
    let read = a.sandboxes().get_sandbox(a.req(pb::GetSandboxRequest { sandbox: s.id.clone() })).await.unwrap();
    assert_eq!(last.as_ref(), Some(read.get_ref()), "the watch's READY is the row as stored");
    let mut dedup = seen.clone();
    dedup.dedup();
    assert_eq!(dedup, seen, "one item per phase change: {seen:?}");

    // By name too: its sandbox is subscribed to after the first read, which is read again.
    let named = a.root("named", None).await.unwrap();
    let mut phases = a
        .sandboxes()
        .watch_sandbox(a.req(pb::WatchSandboxRequest { sandbox: "named".into(), timeout_seconds: 30 }))
        .await
        .unwrap()
        .into_inner();
    let mut last = None;
    while let Some(next) = phases.message().await.unwrap() {
        assert_eq!(next.id, named.id);
        last = Some(next.phase);
    }
    assert_eq!(last.as_deref(), Some("READY"));

    let stranger = h.user("mallory").await;
    let r = stranger
        .sandboxes()
        .watch_sandbox(stranger.req(pb::WatchSandboxRequest { sandbox: s.id.clone(), timeout_seconds: 1 }))
        .await;
    refused(r.map(|_| ()), "NOT_FOUND");
    let r = stranger
        .sandboxes()
        .watch_sandbox(stranger.req(pb::WatchSandboxRequest { sandbox: "named".into(), timeout_seconds: 1 }))
        .await;
    refused(r.map(|_| ()), "NOT_FOUND");
    let r = a.sandboxes().watch_sandbox(a.req(pb::WatchSandboxRequest { sandbox: s.id, timeout_seconds: 3601 })).await;
    refused(r.map(|_| ()), "INVALID_ARGUMENT");
}
