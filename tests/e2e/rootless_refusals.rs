//! A gateway that is not root refuses every create with `UNAVAILABLE` naming what its host
//! lacks for a sandbox in a user namespace, and runs nothing: here, subordinate ids for its
//! user, a cgroup subtree delegated to it, and passage for the sandboxes' uids to their
//! folders. Its users are not `rootless`'s, whose sandboxes run meanwhile in the same binary.

use openshell_e2e::rootless::{self, NO_SUBID_USER, RootlessGateway, UNDELEGATED_USER};
use openshell_e2e::*;
use openshell_proto::v1 as pb;

async fn refused_create(g: &RootlessGateway) -> tonic::Status {
    let a = g.admin().await;
    let req = pb::CreateSandboxRequest {
        name: "lead".into(),
        command: vec!["/bin/bash".into(), "-c".into(), "touch ran; sleep 600".into()],
        ..Default::default()
    };
    let s = refused(a.sandboxes().create_sandbox(a.req(req)).await, "UNAVAILABLE");
    assert!(supervisor_pids(&g.state).is_empty(), "a supervisor ran");
    let lead = a.get("lead").await.unwrap();
    assert_eq!(lead.phase, "ERROR");
    assert!(!g.work(&lead.id).join("ran").exists(), "the main command ran");
    s
}

#[tokio::test]
async fn a_gateway_user_without_subordinate_ids_is_refused_unavailable() {
    // Everything else is there: the cgroup subtree is delegated to it.
    let uid = rootless::user(NO_SUBID_USER).uid.as_raw();
    rootless::delegate(uid);
    let g = RootlessGateway::start(NO_SUBID_USER, &[]).await;
    let s = refused_create(&g).await;
    for needle in ["/etc/subuid", "/etc/subgid", NO_SUBID_USER, "not root"] {
        assert!(s.message().contains(needle), "{needle:?} not in {}", s.message());
    }
    assert!(!s.message().contains("cgroup"), "only the subordinate ids are missing: {}", s.message());
    drop(g);
    rootless::undelegate(uid);
}

#[tokio::test]
async fn a_gateway_without_a_delegated_cgroup_subtree_or_passage_to_its_state_is_refused_unavailable() {
    let uid = rootless::user(UNDELEGATED_USER).uid.as_raw();
    rootless::undelegate(uid);
    let g = RootlessGateway::start(UNDELEGATED_USER, &[]).await;
    let s = refused_create(&g).await;
    let pids = rootless::delegated_dir("pids", uid);
    for needle in ["no cgroup subtree delegated", pids.to_str().unwrap(), "chown"] {
        assert!(s.message().contains(needle), "{needle:?} not in {}", s.message());
    }
    assert!(!s.message().contains("/etc/subuid"), "only the delegation is missing: {}", s.message());
    drop(g);

    // With the delegation, a state directory the sandboxes' uids cannot pass through (here in
    // this test, since the two need the same user's delegation in turn).
    rootless::delegate(uid);
    let g = RootlessGateway::start(UNDELEGATED_USER, &[]).await;
    std::fs::set_permissions(&g.dir, std::os::unix::fs::PermissionsExt::from_mode(0o700)).unwrap();
    let s = refused_create(&g).await;
    for needle in [g.dir.to_str().unwrap(), "cannot pass through", "700"] {
        assert!(s.message().contains(needle), "{needle:?} not in {}", s.message());
    }
    drop(g);
    rootless::undelegate(uid);
}
