//! READY means usable: a create that waits (the CLI, gRPC `WatchSandbox`, MCP `create_sandbox`)
//! returns once the main command runs in its full isolation, so exec, files and the proxy work
//! at once; and a main command that cannot start fails its create on every surface with the
//! reason ("main command could not start: EACCES on /usr/bin/sleep"), never READY first.

use std::process::Stdio;

use openshell_e2e::*;
use openshell_proto::v1 as pb;
use pb::exec_input::Input;
use pb::exec_output::Output;

/// A policy that lets the agent read nothing but its working directory: no program runs.
const NOTHING_RUNS: &str = "version: 1\nfilesystem_policy:\n  include_workdir: true\n";
/// The reason such a sandbox fails with (sleep is found in the agent's PATH at /usr/bin).
const REASON: &str = "main command could not start: EACCES on /usr/bin/sleep";

async fn cli(h: &Harness, args: &[&str]) -> (i32, String, String) {
    let out = tokio::process::Command::new(bin("openshell"))
        .args(["--endpoint", &h.endpoint, "--token", &h.admin_token])
        .args(args)
        .env_remove("OPENSHELL_CONFIG")
        .env("HOME", &h.state.0)
        .stdin(Stdio::null())
        .output()
        .await
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into(),
        String::from_utf8_lossy(&out.stderr).into(),
    )
}

/// `sleep 600` as `name`, as gRPC `CreateSandbox` answers (at admission).
async fn create_sleeping(api: &Api, name: &str) -> pb::Sandbox {
    let req = pb::CreateSandboxRequest {
        name: name.into(),
        command: vec!["sleep".into(), "600".into()],
        ..Default::default()
    };
    api.sandboxes().create_sandbox(api.req(req)).await.unwrap().into_inner().sandbox.unwrap()
}

/// The one pooled supervisor of the gateway whose state directory is `state` (the harness
/// waits until the pool is full).
fn the_pooled_supervisor(state: &std::path::Path) -> i32 {
    let pooled = pooled_supervisors(state);
    assert_eq!(pooled.len(), 1, "one pooled supervisor waits, its init cloned: {pooled:?}");
    pooled[0]
}

/// Every phase `WatchSandbox` reports for `id`, the last one in full.
async fn watched(api: &Api, id: &str) -> (Vec<String>, pb::Sandbox) {
    let req = pb::WatchSandboxRequest { sandbox: id.into(), timeout_seconds: 60 };
    let mut phases = api.sandboxes().watch_sandbox(api.req(req)).await.unwrap().into_inner();
    let (mut seen, mut last) = (Vec::new(), None);
    while let Some(next) = phases.message().await.unwrap() {
        seen.push(next.phase.clone());
        last = Some(next);
    }
    (seen, last.expect("the watch reported the sandbox"))
}

/// Runs `command` in `sandbox` once (no retry); its exit code and stdout.
async fn exec(api: &Api, sandbox: &str, command: &[&str]) -> (i32, String) {
    let start = pb::ExecStart {
        sandbox: sandbox.into(),
        command: command.iter().map(|s| s.to_string()).collect(),
        ..Default::default()
    };
    let input = tokio_stream::iter([pb::ExecInput { input: Some(Input::Start(start)) }]);
    let mut out = api.sandboxes().exec_sandbox(api.req(input)).await.unwrap().into_inner();
    let mut stdout = Vec::new();
    while let Some(msg) = out.message().await.unwrap() {
        match msg.output {
            Some(Output::Stdout(d)) => stdout.extend(d),
            Some(Output::Exit(x)) => return (x.code, String::from_utf8_lossy(&stdout).into_owned()),
            _ => {}
        }
    }
    panic!("the exec in {sandbox} ended without an exit");
}

/// At the moment a create says READY: the main command runs (its isolation is reported in
/// the same answer, and no supervisor is still cloning its init), and exec, files and the
/// proxy answer on the first try.
async fn usable_now(h: &Harness, a: &Api, s: &pb::Sandbox, supervisors: usize) {
    assert_eq!(s.phase, "READY", "{s:?}");
    assert!(!s.isolation.is_empty(), "READY carries the isolation the running main command got: {s:?}");
    assert_eq!(supervisor_pids(&h.state.0).len(), supervisors, "one supervisor process per sandbox, none mid-start");
    let cgroup = openshell_isolation::cgroup::SandboxCgroup::of(s.id.parse().unwrap()).unwrap();
    let comms: Vec<String> = cgroup
        .pids()
        .iter()
        .filter_map(|p| std::fs::read_to_string(format!("/proc/{p}/comm")).ok())
        .map(|c| c.trim().to_string())
        .collect();
    assert!(comms.iter().any(|c| c == "sleep"), "the main command runs in the sandbox's cgroup at READY: {comms:?}");
    let (code, _) = exec(a, &s.name, &["sh", "-c", "echo usable > usable.txt"]).await;
    assert_eq!(code, 0, "exec works at READY");
    let req = pb::GetFileRequest { sandbox: s.name.clone(), path: "usable.txt".into(), max_bytes: 0 };
    let mut chunks = a.sandboxes().get_file(a.req(req)).await.expect("get_file works at READY").into_inner();
    let mut data = Vec::new();
    while let Some(c) = chunks.message().await.unwrap() {
        if let Some(pb::file_chunk::Chunk::Data(d)) = c.chunk {
            data.extend(d);
        }
    }
    assert_eq!(data, b"usable\n");
    // The proxy answers (policy.local is served by it; without a proxy curl reports 000).
    let (code, status) =
        exec(a, &s.name, &["curl", "-s", "-o", "/dev/null", "-w", "%{http_code}", "http://policy.local/v1/policy"])
            .await;
    assert!(code == 0 && status != "000", "the proxy answers at READY: curl {code}, HTTP {status}");
}

#[tokio::test]
async fn a_create_returns_ready_only_once_the_sandbox_is_usable() {
    let h = Harness::process(|_| {}).await;
    let a = h.admin().await;
    // The CLI waits for READY.
    let (code, out, err) =
        cli(&h, &["--output", "json", "sandbox", "create", "--name", "cli", "--", "sleep", "600"]).await;
    assert_eq!(code, 0, "{out}\n{err}");
    let created: serde_json::Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"));
    let s = a.get("cli").await.unwrap();
    assert_eq!(created["sandbox"]["phase"], "READY", "{out}");
    assert!(created["sandbox"]["isolation"].as_str().is_some_and(|i| !i.is_empty()), "{out}");
    usable_now(&h, &a, &s, 1).await;
    // gRPC: CreateSandbox returns at admission; WatchSandbox ends at READY.
    let s = create_sleeping(&a, "grpc").await;
    let (seen, s) = watched(&a, &s.id).await;
    assert_eq!(seen.last().map(String::as_str), Some("READY"), "{seen:?}");
    usable_now(&h, &a, &s, 2).await;
}

#[tokio::test]
async fn a_main_command_that_cannot_start_fails_its_create_with_the_reason() {
    let h = Harness::process(|_| {}).await;
    let a = h.admin().await;
    // The CLI: no READY, the reason, the exit code of a failed start.
    let file = h.state.0.join("nothing-runs.yaml");
    std::fs::write(&file, NOTHING_RUNS).unwrap();
    let file = file.to_str().unwrap();
    let (code, out, err) =
        cli(&h, &["sandbox", "create", "--name", "cli", "--policy", file, "--", "sleep", "600"]).await;
    assert_eq!(code, 8, "{out}\n{err}");
    assert!(err.contains(REASON), "the CLI says why: {err}");
    assert!(!out.contains("READY") && !err.contains("READY"), "never READY: {out}\n{err}");
    let s = a.get("cli").await.unwrap();
    assert_eq!(s.phase, "ERROR", "{s:?}");
    assert!(s.phase_reason.starts_with(REASON), "{s:?}");

    // gRPC: the watch ends at ERROR with the reason, never passing READY.
    let req = pb::CreateSandboxRequest {
        name: "grpc".into(),
        command: vec!["sleep".into(), "600".into()],
        policy_yaml: NOTHING_RUNS.into(),
        ..Default::default()
    };
    let s = a.sandboxes().create_sandbox(a.req(req)).await.unwrap().into_inner().sandbox.unwrap();
    let (seen, last) = watched(&a, &s.id).await;
    assert!(!seen.iter().any(|p| p == "READY"), "never READY: {seen:?}");
    assert_eq!(last.phase, "ERROR", "{seen:?} {last:?}");
    assert!(last.phase_reason.starts_with(REASON), "{last:?}");

    // MCP from the host (a child of a running lead): create_sandbox's result is the failure,
    // with the reason.
    a.root("lead", Some(grant(1, 5, 5))).await.unwrap();
    let (_, lead) = watched(&a, "lead").await;
    assert_eq!(lead.phase, "READY", "{lead:?}");
    use rmcp::ServiceExt;
    use rmcp::transport::StreamableHttpClientTransport;
    use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
    let config =
        StreamableHttpClientTransportConfig::with_uri(format!("{}/mcp", h.endpoint)).auth_header(h.admin_token.clone());
    let mcp = ().serve(StreamableHttpClientTransport::from_config(config)).await.expect("MCP session");
    let args =
        serde_json::json!({"parent": "lead", "name": "mcp", "command": ["sleep", "600"], "policy": NOTHING_RUNS});
    let r = mcp
        .call_tool(
            rmcp::model::CallToolRequestParams::new("create_sandbox").with_arguments(args.as_object().unwrap().clone()),
        )
        .await
        .expect("tool call");
    assert_eq!(r.is_error, Some(true), "{r:?}");
    let refusal = r.structured_content.expect("structured result");
    assert!(refusal["details"]["reason"].as_str().is_some_and(|m| m.starts_with(REASON)), "{refusal}");
    assert_eq!(refusal["details"]["phase"], "ERROR", "{refusal}");
    mcp.cancel().await.ok();
    // Nothing of the three runs: only the lead's supervisor is left.
    assert!(eventually(std::time::Duration::from_secs(10), || async { supervisor_pids(&h.state.0).len() == 1 }).await);
}

/// `--sandbox-pool`: the next start claims a supervisor prepared ahead, whose init was cloned
/// before the sandbox existed, and from there runs as a cold start does: the supervisor is
/// named by its sandbox's id (so it is found and stopped as any other), the sandbox is usable at
/// READY, its agent runs under its own uid on its own disk, and the main command's output goes
/// to the sandbox's log (the init had none when it was cloned). Another one takes its place,
/// and those left end with their gateway, their inits with them.
#[tokio::test]
async fn a_pooled_supervisor_is_claimed_and_runs_its_sandbox_as_a_cold_one_would() {
    if !nix::unistd::geteuid().is_root() {
        return eprintln!("skipped: the sandbox pool needs a root gateway");
    }
    let mut h = Harness::process(|o| o.sandbox_pool = 1).await;
    let state = h.state.0.clone();
    let pooled = the_pooled_supervisor(&state);
    let init = children(pooled)[0];
    assert!(supervisor_pids(&state).is_empty(), "a pooled supervisor runs no sandbox: {:?}", supervisor_pids(&state));
    // Its init is in a cgroup made ahead (a hybrid layout's; cgroup v2 alone cannot rename one).
    let spare = cgroup_folder(init, "pids");
    if let Some(spare) = &spare {
        assert!(spare.starts_with("/openshell/.spare-"), "the pooled init waits in a spare cgroup: {spare}");
    }
    let unified_ahead = cgroup_folder(init, "");

    let disks = state.join("disks");
    let prepared = || -> Vec<(String, u64)> {
        use std::os::unix::fs::MetadataExt;
        let images = std::fs::read_dir(&disks).unwrap().flatten();
        let named = images.filter_map(|e| Some((e.file_name().into_string().ok()?, e.metadata().ok()?.ino())));
        named.filter(|(n, _)| n.starts_with("prepared-") && n.ends_with(".img")).collect()
    };
    // The pool makes its disk last, after the supervisor the harness waited for.
    let one_disk = || async { prepared().len() == 1 };
    assert!(eventually(std::time::Duration::from_secs(20), one_disk).await, "one disk waits, made ahead");
    let made_ahead = prepared();
    // A sandbox's folders and run file made ahead: its log folder (listed first), its folder
    // and its run file (listed last).
    let spares = || -> Vec<u64> {
        use std::os::unix::fs::MetadataExt;
        let folders = [state.join("sandboxes"), sandbox_root(&state), state.join("run")];
        let folders = folders.into_iter().flat_map(std::fs::read_dir);
        let spare =
            folders.flat_map(|d| d.flatten()).filter(|e| e.file_name().to_string_lossy().starts_with(".spare-"));
        spare.filter_map(|e| Some(e.metadata().ok()?.ino())).collect()
    };
    let folders_ahead = spares();
    assert_eq!(folders_ahead.len(), 3, "one sandbox's folders and run file wait, made ahead");
    // And a uid leased ahead: its lock file is made with the lease.
    let uids_ahead: Vec<String> = std::fs::read_dir(state.join("uids"))
        .unwrap()
        .flatten()
        .filter_map(|e| e.file_name().into_string().ok())
        .collect();

    let a = h.admin().await;
    let req = pb::CreateSandboxRequest {
        name: "pooled".into(),
        command: vec!["sh".into(), "-c".into(), "echo the main command speaks; exec sleep 600".into()],
        ..Default::default()
    };
    let s = a.sandboxes().create_sandbox(a.req(req)).await.unwrap().into_inner().sandbox.unwrap();
    let (seen, s) = watched(&a, &s.id).await;
    assert_eq!(s.phase, "READY", "{seen:?} {s:?}");
    assert_eq!(supervisor_pids(&state), vec![pooled], "the pooled supervisor runs the new sandbox");
    let cmdline = std::fs::read(format!("/proc/{pooled}/cmdline")).unwrap();
    assert!(String::from_utf8_lossy(&cmdline).contains(&s.id), "its arguments name its sandbox now");
    assert_eq!(children(pooled), vec![init], "the init cloned ahead runs the sandbox");
    if spare.is_some() {
        for c in ["pids", "memory", "cpu", "freezer"] {
            let own = format!("/openshell/{}", s.id);
            assert_eq!(
                cgroup_folder(init, c).as_deref(),
                Some(own.as_str()),
                "the spare became the sandbox's {c} cgroup"
            );
        }
        assert_eq!(cgroup_folder(init, ""), unified_ahead, "the unified folder keeps its spare name");
        let limit = std::fs::read_to_string(format!("/sys/fs/cgroup/pids/openshell/{}/pids.max", s.id)).unwrap();
        assert_eq!(limit.trim(), openshell_gateway::template::DEFAULT_PIDS.to_string(), "with the sandbox's limits");
    }
    let image = std::fs::metadata(disks.join(format!("{}.img", s.id))).expect("the sandbox's image");
    assert_eq!(std::os::unix::fs::MetadataExt::ino(&image), made_ahead[0].1, "the disk made ahead is the sandbox's");
    // (Its folder in the sandbox root has its disk mounted over it.)
    let log = std::fs::metadata(h.supervisor_log(&s.id).parent().unwrap()).expect("the sandbox's log folder");
    assert_eq!(std::os::unix::fs::MetadataExt::ino(&log), folders_ahead[0], "the folders made ahead are the sandbox's");
    let run = std::fs::metadata(state.join("run").join(&s.id)).expect("the sandbox's run file");
    assert_eq!(std::os::unix::fs::MetadataExt::ino(&run), folders_ahead[2], "the run file made ahead is the sandbox's");
    usable_now(&h, &a, &s, 1).await;
    let (code, uid) = exec(&a, &s.name, &["id", "-u"]).await;
    assert_eq!(code, 0);
    assert!(uid.trim().parse::<u32>().is_ok_and(|u| u >= 100_000), "the agent runs under its sandbox's uid: {uid}");
    assert!(
        uids_ahead.contains(&uid.trim().to_string()),
        "the uid leased ahead ({uids_ahead:?}) is the agent's: {uid}"
    );
    let (code, mounts) = exec(&a, &s.name, &["cat", "/proc/self/mountinfo"]).await;
    assert_eq!(code, 0);
    let work = std::path::Path::new(&workdir(&state, &s.id)).parent().unwrap().to_string_lossy().into_owned();
    assert!(mounts.lines().any(|l| l.split(' ').nth(4) == Some(work.as_str())), "its own disk at {work}:\n{mounts}");
    let logged = || async {
        std::fs::read_to_string(h.supervisor_log(&s.id)).is_ok_and(|l| l.contains("the main command speaks"))
    };
    assert!(
        eventually(std::time::Duration::from_secs(5), logged).await,
        "the main command's output is in the sandbox's log"
    );
    let refilled = || async { pooled_supervisors(&state).iter().any(|p| *p != pooled) };
    assert!(
        eventually(std::time::Duration::from_secs(10), refilled).await,
        "another pooled supervisor takes its place"
    );

    a.sandboxes().stop_sandbox(a.req(pb::StopSandboxRequest { sandbox: s.name.clone() })).await.unwrap();
    let stopped = || async { supervisor_pids(&state).is_empty() };
    assert!(
        eventually(std::time::Duration::from_secs(10), stopped).await,
        "the claimed supervisor stops with its sandbox"
    );
    let left: Vec<i32> = pooled_supervisors(&state).into_iter().flat_map(|p| [vec![p], children(p)].concat()).collect();
    assert_eq!(left.len(), 2, "one pooled supervisor and its init wait: {left:?}");
    let waiting = left.iter().filter_map(|p| cgroup_folder(*p, "pids")).filter(|f| f.contains(".spare-"));
    let cgroups: Vec<String> = waiting.map(|f| format!("/sys/fs/cgroup/pids{f}")).collect();
    h.shutdown().await;
    let ended = || async {
        left.iter().all(|p| !std::path::Path::new(&format!("/proc/{p}")).exists())
            && prepared().is_empty()
            && spares().is_empty()
            && cgroups.iter().all(|c| !std::path::Path::new(c).exists())
    };
    assert!(
        eventually(std::time::Duration::from_secs(10), ended).await,
        "pooled supervisors, their inits, and disks, folders and cgroups made ahead end with their gateway: {cgroups:?}"
    );
}

/// A pooled supervisor that takes its claim yet never answers (stopped here, as a hung one
/// would be) is killed after the answer's bound, and the start goes cold: the sandbox runs
/// under a supervisor spawned for it.
#[tokio::test]
async fn a_pooled_supervisor_that_does_not_answer_its_claim_is_replaced_by_a_cold_start() {
    if !nix::unistd::geteuid().is_root() {
        return eprintln!("skipped: the sandbox pool needs a root gateway");
    }
    let h = Harness::process(|o| o.sandbox_pool = 1).await;
    let state = h.state.0.clone();
    let pooled = the_pooled_supervisor(&state);
    let spare = cgroup_folder(children(pooled)[0], "pids").map(|f| format!("/sys/fs/cgroup/pids{f}"));
    let hung = nix::unistd::Pid::from_raw(pooled);
    nix::sys::signal::kill(hung, nix::sys::signal::Signal::SIGSTOP).unwrap();

    let a = h.admin().await;
    let s = create_sleeping(&a, "passed-over").await;
    let (seen, s) = watched(&a, &s.id).await;
    assert_eq!(s.phase, "READY", "{seen:?} {s:?}");
    let running = supervisor_pids(&state);
    assert_eq!(running.len(), 1, "one supervisor runs the sandbox: {running:?}");
    assert_ne!(running[0], pooled, "not the one that did not answer");
    let cmdline =
        String::from_utf8_lossy(&std::fs::read(format!("/proc/{}/cmdline", running[0])).unwrap()).into_owned();
    assert!(cmdline.contains(&s.id) && !cmdline.contains("--pooled"), "a cold supervisor of the sandbox: {cmdline:?}");
    let gone = || async {
        std::fs::read_to_string(format!("/proc/{}/stat", pooled))
            .map_or(true, |st| st.rsplit_once(')').is_some_and(|(_, rest)| rest.trim_start().starts_with('Z')))
    };
    assert!(eventually(std::time::Duration::from_secs(5), gone).await, "the one that did not answer was killed");
    let swept = || async { spare.as_ref().is_none_or(|c| !std::path::Path::new(c).exists()) };
    assert!(eventually(std::time::Duration::from_secs(5), swept).await, "its cgroup made ahead is removed: {spare:?}");
    usable_now(&h, &a, &s, 1).await;
}

/// A sandbox stopped while it starts does not run on: its start line carries the policy as
/// admitted, so the stop is seen at READY, which the gateway refuses for a sandbox no longer
/// live, and the supervisor then stops what it started. Here the stop commits in SQL alone
/// (no driver stop, no reconciler pass) while the sandbox's init is held, as a stop that
/// commits before its driver started it would.
#[tokio::test]
async fn a_sandbox_stopped_while_it_starts_does_not_run_on() {
    if !nix::unistd::geteuid().is_root() {
        return eprintln!("skipped: the sandbox pool needs a root gateway");
    }
    let h = Harness::process(|o| {
        o.sandbox_pool = 1;
        o.reconcile_interval = 3600;
    })
    .await;
    let state = h.state.0.clone();
    let inits = children(the_pooled_supervisor(&state));
    assert_eq!(inits.len(), 1, "its init is cloned ahead: {inits:?}");
    let init = nix::unistd::Pid::from_raw(inits[0]);
    nix::sys::signal::kill(init, nix::sys::signal::Signal::SIGSTOP).unwrap();

    let a = h.admin().await;
    let s = create_sleeping(&a, "stopped-early").await;
    let id: uuid::Uuid = s.id.parse().unwrap();
    let db = h.sql().await;
    db.query("SELECT * FROM system_stop($1, 'stopped while it started')", &[&id]).await.unwrap();
    nix::sys::signal::kill(init, nix::sys::signal::Signal::SIGCONT).unwrap();

    let gone = || async { supervisor_pids(&state).is_empty() };
    assert!(
        eventually(std::time::Duration::from_secs(10), gone).await,
        "the supervisor of a sandbox stopped while it started still runs: {:?}",
        supervisor_pids(&state)
    );
    let phase: String = db.query_one("SELECT phase FROM sandboxes WHERE id = $1", &[&id]).await.unwrap().get(0);
    assert_eq!(phase, "STOPPING", "never READY");
    let log = std::fs::read_to_string(h.supervisor_log(&s.id)).unwrap();
    assert!(log.contains("main command started"), "it ran as far as its main command: {log}");
    assert!(log.contains("the gateway refused"), "{log}");
}
