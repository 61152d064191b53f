//! What only the container driver has: the image resolved once to its digest and a child on
//! exactly its parent's template (read back from the containers' configuration through the
//! engine's API), refusals of another image or more resources, no credential anywhere in a
//! container's configuration, and the reconciler's view of containers changed behind the
//! gateway's back. The lifecycle and escape suites run on this driver too
//! (`lifecycle_container`, `escape_container`).

use std::collections::HashMap;
use std::time::Duration;

use bollard::Docker;
use bollard::query_parameters::{CreateContainerOptions, KillContainerOptions, ListContainersOptions};
use openshell_e2e::*;
use openshell_proto::v1 as pb;

fn docker() -> Docker {
    Docker::connect_with_unix(&container_host(), 60, bollard::API_DEFAULT_VERSION).expect("container engine")
}

fn sh(script: &str) -> Vec<String> {
    vec!["/bin/sh".into(), "-c".into(), script.into()]
}

async fn phase_becomes(api: &Api, name: &str, phase: &str) -> pb::Sandbox {
    let ok =
        eventually(Duration::from_secs(30), || async { api.get(name).await.is_ok_and(|s| s.phase == phase) }).await;
    let s = api.get(name).await.unwrap();
    assert!(ok, "{name} should become {phase}: {s:?}");
    s
}

fn child(parent: &str, name: &str, template: Option<pb::Template>) -> pb::CreateChildSandboxRequest {
    pb::CreateChildSandboxRequest {
        parent: parent.into(),
        name: name.into(),
        command: sh("id -u > uid; touch done; sleep 600"),
        template,
        ..Default::default()
    }
}

/// The sandbox's container as the engine reports it (`docker inspect`).
async fn inspect(id: &str) -> bollard::models::ContainerInspectResponse {
    docker().inspect_container(&format!("openshell-{id}"), None).await.expect("container exists")
}

/// Containers (in any state) labelled with the sandbox's id.
async fn containers_of(sandbox: &str) -> usize {
    let filters = HashMap::from([("label".to_string(), vec![format!("org.openshell.sandbox={sandbox}")])]);
    let options = ListContainersOptions { all: true, filters: Some(filters), ..Default::default() };
    loop {
        match docker().list_containers(Some(options.clone())).await {
            Ok(list) => return list.len(),
            // Podman's `stopping` is not in the API's schema: it is there, and about to go.
            Err(bollard::errors::Error::JsonDataError { .. }) => tokio::time::sleep(Duration::from_millis(100)).await,
            Err(e) => panic!("list containers: {e}"),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_child_and_grandchild_run_the_roots_image_digest_with_its_resources_and_no_more() {
    let h = Harness::container_recording(|_| {}).await;
    let a = h.admin().await;
    let digest = docker().inspect_image(TEST_IMAGE).await.unwrap().id.unwrap();
    let template =
        pb::Template { image: TEST_IMAGE.into(), cpu_millis: 500, memory_bytes: 256 << 20, pids: 128, disk_bytes: 0 };
    let req = pb::CreateSandboxRequest {
        name: "lead".into(),
        command: sh("id -u > uid; grep CapEff /proc/self/status > caps; touch done; sleep 600"),
        grant: Some(grant(3, 5, 10)),
        template: Some(template),
        ..Default::default()
    };
    let lead = a.sandboxes().create_sandbox(a.req(req)).await.unwrap().into_inner().sandbox.unwrap();
    assert_eq!(lead.template.as_ref().unwrap().image, digest, "the tag is stored as the digest it named");
    phase_becomes(&a, "lead", "READY").await;
    let worker = a.child_req(child("lead", "worker", None)).await.unwrap().sandbox.unwrap();
    let smaller = pb::Template { memory_bytes: 128 << 20, image: TEST_IMAGE.into(), ..Default::default() };
    let helper = a.child_req(child("worker", "helper", Some(smaller))).await.unwrap().sandbox.unwrap();
    for n in ["worker", "helper"] {
        phase_becomes(&a, n, "READY").await;
    }
    // Read back from each container's configuration: the digest, the limits, the labels.
    for (s, memory) in [(&lead, 256i64 << 20), (&worker, 256 << 20), (&helper, 128 << 20)] {
        let c = inspect(&s.id).await;
        assert_eq!(c.image.as_deref(), Some(digest.as_str()), "{} runs the root's digest", s.name);
        let hc = c.host_config.clone().unwrap();
        assert_eq!(hc.memory, Some(memory), "{}", s.name);
        assert_eq!(hc.memory_swap, Some(memory), "{}: no swap beyond the limit", s.name);
        let supervisor = openshell_isolation::cgroup::SUPERVISOR_PIDS as i64;
        assert_eq!(hc.pids_limit, Some(128 + supervisor), "{}: the agent's 128 and the supervisor's", s.name);
        assert_eq!(hc.nano_cpus, Some(500_000_000), "{}", s.name);
        assert_ne!(hc.privileged, Some(true));
        assert!(hc.devices.unwrap_or_default().is_empty(), "no devices");
        assert!(hc.device_requests.unwrap_or_default().is_empty(), "no GPU");
        let caps = hc.cap_add.unwrap_or_default();
        assert!(!caps.iter().any(|c| c.contains("ALL") || c.contains("SYS_MODULE")), "{caps:?}");
        let labels = c.config.clone().unwrap().labels.unwrap();
        assert_eq!(labels.get("org.openshell.sandbox"), Some(&s.id));
        assert!(labels.get("org.openshell.runner").is_some_and(|r| r.starts_with("container:")));
        // No credential anywhere in what `docker inspect` shows, nor in the environment.
        let shown = serde_json::to_string(&c).unwrap();
        let id: uuid::Uuid = s.id.parse().unwrap();
        let credential = h.recorded.as_ref().unwrap().credential(id).unwrap();
        assert!(!shown.contains(&credential), "{}'s credential is in its container's configuration", s.name);
        assert!(!shown.contains("oss_"), "{}: a sandbox credential is in the configuration", s.name);
    }
    // The agent runs under a uid of its own, with no capability, inside the container.
    let work = h.workdir(&lead.id);
    assert!(eventually(Duration::from_secs(10), || async { work.join("done").exists() }).await);
    let uid: u32 = std::fs::read_to_string(work.join("uid")).unwrap().trim().parse().unwrap();
    assert!(uid >= openshell_driver::DEFAULT_RANGE.first, "{uid}");
    assert_eq!(std::fs::read_to_string(work.join("caps")).unwrap().trim(), "CapEff:\t0000000000000000");

    // Another image, or more than the parent has: refused naming the field; nothing created.
    let sql = h.sql().await;
    let before = count(&sql, "SELECT count(*) FROM sandboxes").await;
    let other = pb::Template { image: "localhost/openshell-postgres:15".into(), ..Default::default() };
    let s = refused(a.child_req(child("worker", "other", Some(other))).await, "NOT_ALLOWED");
    assert_eq!(details(&s).get("field").map(String::as_str), Some("template.image"), "{s:?}");
    let more = pb::Template { memory_bytes: 512 << 20, ..Default::default() };
    let s = refused(a.child_req(child("worker", "more", Some(more))).await, "NOT_ALLOWED");
    assert_eq!(details(&s).get("field").map(String::as_str), Some("template.memory_bytes"), "{s:?}");
    let more_cpu = pb::Template { cpu_millis: 1000, ..Default::default() };
    let s = refused(a.child_req(child("helper", "cpu", Some(more_cpu))).await, "NOT_ALLOWED");
    assert_eq!(details(&s).get("field").map(String::as_str), Some("template.cpu_millis"), "{s:?}");
    // The helper has 128 MiB: its own child may not take the worker's 256.
    let back_up = pb::Template { memory_bytes: 256 << 20, ..Default::default() };
    refused(a.child_req(child("helper", "up", Some(back_up))).await, "NOT_ALLOWED");
    assert_eq!(count(&sql, "SELECT count(*) FROM sandboxes").await, before, "a refusal creates no row");
    let refusals = a.audit_of("lead").await.into_iter().filter(|e| e.outcome == "refused").count();
    assert_eq!(refusals, 4, "each refusal has its receipt");

    // Stopping removes the containers and keeps their logs.
    a.sandboxes().stop_sandbox(a.req(pb::StopSandboxRequest { sandbox: "lead".into() })).await.unwrap();
    for s in [&lead, &worker, &helper] {
        assert_eq!(containers_of(&s.id).await, 0, "{}'s container is removed", s.name);
        let log = std::fs::read_to_string(h.supervisor_log(&s.id)).unwrap();
        assert!(log.contains("main command started"), "{}: {log}", s.name);
    }
}

#[tokio::test]
async fn a_container_sandbox_needs_an_image_the_host_has_and_a_process_one_refuses_an_image() {
    let h = Harness::on(Backend::Container, |_| {}).await;
    let a = h.admin().await;
    let create = |name: &str, image: &str| pb::CreateSandboxRequest {
        name: name.into(),
        command: sh("sleep 600"),
        template: Some(pb::Template { image: image.into(), ..Default::default() }),
        ..Default::default()
    };
    for (name, image, why) in [
        ("none", "", "--from"),
        ("missing", "localhost/openshell-no-such-image:never", "no image"),
        ("bad", "bad image\nref", "printable"),
    ] {
        let s = refused(a.sandboxes().create_sandbox(a.req(create(name, image))).await, "INVALID_ARGUMENT");
        assert_eq!(details(&s).get("field").map(String::as_str), Some("template.image"), "{s:?}");
        assert!(s.message().contains(why), "{}", s.message());
    }
    assert_eq!(count(&h.sql().await, "SELECT count(*) FROM sandboxes").await, 0);

    let p = Harness::process(|_| {}).await;
    let a = p.admin().await;
    let s = refused(a.sandboxes().create_sandbox(a.req(create("img", TEST_IMAGE))).await, "INVALID_ARGUMENT");
    assert!(s.message().contains("--driver container"), "{}", s.message());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn containers_changed_behind_the_gateways_back_are_reconciled() {
    let h = Harness::on(Backend::Container, |o| o.reconcile_interval = 1).await;
    let a = h.admin().await;
    let req = pb::CreateSandboxRequest {
        name: "lead".into(),
        command: sh("sleep 600"),
        grant: Some(grant(1, 5, 5)),
        template: Backend::Container.template(None),
        ..Default::default()
    };
    let lead = a.sandboxes().create_sandbox(a.req(req)).await.unwrap().into_inner().sandbox.unwrap();
    phase_becomes(&a, "lead", "READY").await;
    a.child_req(child("lead", "worker", None)).await.unwrap();
    phase_becomes(&a, "worker", "READY").await;

    // A container of this gateway's runner with no row (a crash between start and commit).
    let c = inspect(&lead.id).await;
    let runner = c.config.unwrap().labels.unwrap()["org.openshell.runner"].clone();
    let stray = uuid::Uuid::new_v4();
    let body = bollard::models::ContainerCreateBody {
        image: Some(TEST_IMAGE.into()),
        cmd: Some(sh("sleep 600")),
        labels: Some(HashMap::from([
            ("org.openshell.sandbox".to_string(), stray.to_string()),
            ("org.openshell.runner".to_string(), runner),
        ])),
        ..Default::default()
    };
    let name = format!("openshell-{stray}");
    let d = docker();
    d.create_container(Some(CreateContainerOptions { name: Some(name.clone()), ..Default::default() }), body)
        .await
        .unwrap();
    d.start_container(&name, None).await.unwrap();
    assert!(
        eventually(Duration::from_secs(20), || async { containers_of(&stray.to_string()).await == 0 }).await,
        "the reconciler removes a container with no live row"
    );

    // The lead's container is killed behind the gateway's back.
    d.kill_container(&format!("openshell-{}", lead.id), Some(KillContainerOptions { signal: "SIGKILL".into() }))
        .await
        .unwrap();
    let l = phase_becomes(&a, "lead", "ERROR").await;
    assert!(l.phase_reason.contains("gone"), "{l:?}");
    phase_becomes(&a, "worker", "STOPPED").await;
    assert!(
        eventually(Duration::from_secs(10), || async { containers_of(&lead.id).await == 0 }).await,
        "the lost sandbox's container is removed"
    );
    assert!(supervisor_pids(&h.state.0).is_empty());
}
