//! Escape attempts from inside real sandboxes of the process driver, one per test, each
//! made by the sandbox's main command as a prompt-injected agent would. Every attempt must
//! fail, and the test checks what it could have changed did not change.
//!
//! The agent writes what it saw into its working directory; the test reads it on the host.
//!
//! Most attempts run again on the real container driver (podman; their `container` case),
//! the supervisor inside a container of the test image.

use std::os::unix::fs::PermissionsExt;
use std::time::Duration;

use openshell_e2e::*;
use openshell_proto::v1 as pb;
use rstest::rstest;

fn bash(script: &str) -> Vec<String> {
    vec!["/bin/bash".into(), "-c".into(), script.into()]
}

struct Sbx {
    sandbox: pb::Sandbox,
    work: std::path::PathBuf,
    log: std::path::PathBuf,
}

impl Sbx {
    fn read(&self, file: &str) -> String {
        std::fs::read_to_string(self.work.join(file)).unwrap_or_else(|e| panic!("{file}: {e}"))
    }

    /// Each probe's script step failed (its `PROBE.rc` is not 0), else "PROBE `done`: output".
    fn refused(&self, probes: &[&str], done: &str) {
        for probe in probes {
            assert_ne!(
                self.read(&format!("{probe}.rc")).trim(),
                "0",
                "{probe} {done}: {}",
                self.read(&format!("{probe}.txt"))
            );
        }
    }
}

async fn run(h: &Harness, api: &Api, name: &str, policy: &str, template: Option<pb::Template>, script: &str) -> Sbx {
    let req = pb::CreateSandboxRequest {
        name: name.into(),
        command: bash(script),
        policy_yaml: policy.into(),
        template: h.on.template(template),
        ..Default::default()
    };
    let sandbox = api.sandboxes().create_sandbox(api.req(req)).await.unwrap().into_inner().sandbox.unwrap();
    let work = h.workdir(&sandbox.id);
    let log = h.supervisor_log(&sandbox.id);
    Sbx { sandbox, work, log }
}

/// Seen from the host: the sandbox's supervisor holds its run lock (descriptor 4), and nothing
/// in its cgroup (its init, the agent and its children) holds that or any run or uid lock (the
/// pool's made ahead among them): a sandbox holding its run lock would look to the driver like
/// a supervisor still running.
/// Nor does any hold a socket for its standard input: the supervisor's is the driver's
/// socket, which carried the credential (crates/driver/src/claim.rs); nor the root of the
/// sandbox's disk, which its init received as a detached mount (crates/supervisor/src/
/// disk_tree.rs) and must close once attached.
fn no_lock_in_the_sandbox(state: &std::path::Path, id: &str, work: &std::path::Path) {
    use std::os::unix::fs::MetadataExt;
    let root = std::fs::metadata(work.parent().unwrap()).map(|m| (m.dev(), m.ino())).unwrap();
    let state = std::fs::canonicalize(state).unwrap();
    let (run, uids) = (state.join("run").join(id), state.join("uids"));
    let mine = |pid: &i32| {
        std::fs::read(format!("/proc/{pid}/cmdline")).is_ok_and(|c| c.windows(id.len()).any(|w| w == id.as_bytes()))
    };
    let supervisor = supervisor_pids(&state).into_iter().find(mine).expect("its supervisor");
    assert_eq!(std::fs::read_link(format!("/proc/{supervisor}/fd/4")).unwrap(), run);
    let inside: Vec<i32> = std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| {
            std::fs::read_to_string(format!("/proc/{pid}/cgroup")).is_ok_and(|c| c.contains(&format!("/{id}")))
        })
        .collect();
    assert!(inside.len() >= 2, "its init and agent: {inside:?}");
    for pid in inside {
        let stdin = std::fs::read_link(format!("/proc/{pid}/fd/0")).unwrap_or_default();
        assert!(!stdin.to_string_lossy().starts_with("socket:"), "process {pid} reads {}", stdin.display());
        for fd in std::fs::read_dir(format!("/proc/{pid}/fd")).unwrap().flatten() {
            let Ok(target) = std::fs::read_link(fd.path()) else { continue };
            // Its own run file, or any other: spares the pool made ahead are there too.
            let locks = [run.parent().unwrap(), uids.as_path()];
            assert!(!locks.iter().any(|l| target.starts_with(l)), "process {pid} holds {}", target.display());
            let held = std::fs::metadata(fd.path()).map(|m| (m.dev(), m.ino()));
            assert!(held.ok() != Some(root), "process {pid} holds the sandbox's disk root ({})", target.display());
        }
    }
}

/// Waits until the agent wrote `done` (its attempts are over).
async fn finished(s: &Sbx) {
    let done = s.work.join("done");
    assert!(
        eventually(Duration::from_secs(20), || async { done.exists() }).await,
        "the agent in {} never finished; its log: {:?}",
        s.sandbox.name,
        std::fs::read_to_string(&s.log)
    );
}

/// A file outside every policy, readable by anyone by its mode: only Landlock keeps it out.
/// `on` keys the folder: both driver cases run at once in one process.
fn planted(on: Backend, name: &str, text: &str) -> std::path::PathBuf {
    let dir = std::path::PathBuf::from("/var/tmp").join(format!("os-escape-{}-{on:?}-{name}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    let f = dir.join("secret");
    std::fs::write(&f, text).unwrap();
    std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o644)).unwrap();
    f
}

#[rstest]
#[case::process(Backend::Process)]
#[case::container(Backend::Container)]
#[tokio::test]
async fn the_agent_cannot_read_the_gateways_secrets_or_state(#[case] on: Backend) {
    let h = Harness::on(on, |_| {}).await;
    let a = h.admin().await;
    let state = std::fs::canonicalize(&h.state.0).unwrap();
    let config = openshell_gateway::client_config::path();
    let world = planted(on, "read", "world-readable-but-not-granted");
    // World-readable inside the state directory: only Landlock keeps it from the agent.
    let open_file = state.join("open-file");
    std::fs::write(&open_file, "state-file-anyone-could-read").unwrap();
    std::fs::set_permissions(&open_file, std::fs::Permissions::from_mode(0o644)).unwrap();
    let script = format!(
        "cat {state}/runner-id > runner.txt 2>&1; echo $? > runner.rc; \
         cat {state}/open-file > open.txt 2>&1; echo $? > open.rc; \
         ls {state} > ls.txt 2>&1; echo $? > ls.rc; \
         cat {config} > config.txt 2>&1; echo $? > config.rc; \
         cat {world} > world.txt 2>&1; echo $? > world.rc; \
         cat /proc/1/environ > init_env.txt 2>&1; echo $? > init_env.rc; \
         touch done; sleep 600",
        state = state.display(),
        config = config.display(),
        world = world.display(),
    );
    let s = run(&h, &a, "reader", "", None, &script).await;
    finished(&s).await;
    s.refused(&["runner", "open", "ls", "config", "world", "init_env"], "succeeded");
    let runner = std::fs::read_to_string(state.join("runner-id")).unwrap();
    assert!(!s.read("runner.txt").contains(runner.trim()));
    assert!(!s.read("world.txt").contains("world-readable"), "Landlock let an ungranted path through");
    let _ = std::fs::remove_dir_all(world.parent().unwrap());
}

#[rstest]
#[case::process(Backend::Process)]
#[case::container(Backend::Container)]
#[tokio::test]
async fn the_agent_runs_as_its_own_uid_with_no_privileges_and_sees_only_its_sandbox(#[case] on: Backend) {
    let h = Harness::on(on, |_| {}).await;
    let a = h.admin().await;
    let gateway_pid = std::process::id();
    let script = format!(
        "id -u > uid.txt; id -g > gid.txt; grep -E '^(CapEff|CapPrm|CapBnd|CapAmb|NoNewPrivs|Seccomp):' /proc/self/status > status.txt; \
         ls /proc | grep -c '^[0-9]' > pids.txt; \
         kill -0 {gateway_pid} 2> kill_gw.txt; echo $? > kill_gw.rc; \
         kill -TERM 1 2> kill_init.txt; echo $? > kill_init.rc; \
         cat /proc/1/fd/0 > init_stdin.txt 2> init_stdin.err; echo $? > init_stdin.rc; \
         hostname > hostname.txt; echo $HOME > home.txt; ls -l /proc/$$/fd/ > fds.txt; env > env.txt; \
         touch done; sleep 600"
    );
    let one = run(&h, &a, "one", "", None, &script).await;
    let two = run(&h, &a, "two", "", None, &script).await;
    finished(&one).await;
    finished(&two).await;
    let uid: u32 = one.read("uid.txt").trim().parse().unwrap();
    let range = openshell_driver::DEFAULT_RANGE;
    assert!(uid >= range.first && uid - range.first < range.count, "uid {uid} outside {range}");
    assert_eq!(one.read("gid.txt").trim(), uid.to_string());
    assert_ne!(one.read("uid.txt"), two.read("uid.txt"), "two live sandboxes share a uid");
    let status = one.read("status.txt");
    for cap in ["CapEff", "CapPrm", "CapBnd", "CapAmb"] {
        assert!(status.contains(&format!("{cap}:\t0000000000000000")), "{status}");
    }
    assert!(status.contains("NoNewPrivs:\t1"), "{status}");
    assert!(status.contains("Seccomp:\t2"), "{status}");
    // Its PID namespace holds its init, its shell and the few commands it runs: not the host's.
    let visible: usize = one.read("pids.txt").trim().parse().unwrap();
    assert!(visible <= 6, "the agent sees {visible} processes");
    assert_ne!(one.read("kill_gw.rc").trim(), "0", "the gateway is visible to the agent");
    // The agent tries its init's standard input (whatever it is; the host-side check below
    // sees it is no socket): out of reach.
    assert_ne!(one.read("init_stdin.rc").trim(), "0", "the agent read its init's stdin");
    assert!(one.read("init_stdin.err").contains("Permission denied"), "{}", one.read("init_stdin.err"));
    assert!(one.read("init_stdin.txt").is_empty(), "the init's stdin gave the agent {:?}", one.read("init_stdin.txt"));
    // TERM to its init is ignored (process 1 with no handler for the agent's uid): still up.
    assert_eq!(started(&a, "one").await.phase, "READY");
    assert_eq!(one.read("hostname.txt").trim(), "sandbox");
    // No descriptor of its init's channel to the supervisor (or any socket) reached it.
    assert!(!one.read("fds.txt").contains("socket:"), "{}", one.read("fds.txt"));
    if !on.is_container() {
        no_lock_in_the_sandbox(&h.state.0, &one.sandbox.id, &one.work);
    }
    // Its status says what was applied.
    let isolation: serde_json::Value = serde_json::from_str(&a.get("one").await.unwrap().isolation).unwrap();
    assert_eq!(isolation["landlock"], "enforced", "{isolation}");
    assert!(isolation["skipped"].as_array().unwrap().iter().any(|p| p == "/app"), "{isolation}");
    assert_eq!(one.read("home.txt").trim(), std::fs::canonicalize(&one.work).unwrap().to_string_lossy());
    // Its clients are pointed at the proxy and trust the sandbox's CA, in every spelling.
    let env: std::collections::HashMap<String, String> = one
        .read("env.txt")
        .lines()
        .filter_map(|l| l.split_once('=').map(|(k, v)| (k.to_string(), v.to_string())))
        .collect();
    let proxy = &env["HTTP_PROXY"];
    assert!(proxy.starts_with("http://127.0.0.1:"), "{env:?}");
    for key in ["HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY"] {
        assert_eq!(env.get(key), Some(proxy), "{key}: {env:?}");
        assert_eq!(env.get(&key.to_lowercase()), Some(proxy), "{key} in lower case: {env:?}");
    }
    for key in ["NO_PROXY", "no_proxy"] {
        assert_eq!(env.get(key).map(String::as_str), Some("localhost,127.0.0.1,::1"), "{key}: {env:?}");
    }
    let bundle = &env["SSL_CERT_FILE"];
    for key in ["REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE", "NODE_EXTRA_CA_CERTS"] {
        assert_eq!(env.get(key), Some(bundle), "{key}: {env:?}");
    }
    assert!(
        std::fs::read_to_string(bundle).is_ok_and(|b| b.contains("BEGIN CERTIFICATE")) || on.is_container(),
        "{bundle}"
    );
}

#[rstest]
#[case::process(Backend::Process)]
#[case::container(Backend::Container)]
#[tokio::test]
async fn the_agent_cannot_reach_the_gateway_loopback_link_local_or_a_raw_socket(#[case] on: Backend) {
    let h = Harness::on(on, |_| {}).await;
    let a = h.admin().await;
    let port: u16 = h.endpoint.rsplit(':').next().unwrap().parse().unwrap();
    let script = format!(
        "(exec 3<>/dev/tcp/127.0.0.1/{port}) 2> gw.txt; echo $? > gw.rc; \
         (exec 3<>/dev/tcp/169.254.169.254/80) 2> meta.txt; echo $? > meta.rc; \
         (exec 3<>/dev/tcp/198.18.0.1/80) 2> out.txt; echo $? > out.rc; \
         unset HTTP_PROXY HTTPS_PROXY ALL_PROXY http_proxy https_proxy all_proxy; \
         curl -sS -m 3 http://198.18.0.1/ > direct.txt 2>&1; echo $? > direct.rc; \
         python3 -c 'import socket; socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP)' 2> raw.txt; echo $? > raw.rc; \
         python3 -c 'import socket; socket.socket(socket.AF_PACKET, socket.SOCK_RAW)' 2> packet.txt; echo $? > packet.rc; \
         python3 -c 'import socket; socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, 9)' 2> audit.txt; echo $? > audit.rc; \
         python3 -c 'import socket; socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, 0)' 2> route.txt; echo $? > route.rc; \
         ip -o link > links.txt 2>&1; \
         touch done; sleep 600"
    );
    let s = run(&h, &a, "net", "", None, &script).await;
    finished(&s).await;
    s.refused(&["gw", "meta", "out", "direct", "raw", "packet", "audit"], "went through");
    assert!(s.read("raw.txt").contains("Operation not permitted"), "{}", s.read("raw.txt"));
    // NETLINK_ROUTE stays (programs list their interfaces), and only loopback is there.
    assert_eq!(s.read("route.rc").trim(), "0", "{}", s.read("route.txt"));
    let links = s.read("links.txt");
    assert!(links.contains("lo:") && links.lines().count() == 1, "{links}");
}

#[rstest]
#[case::process(Backend::Process)]
#[case::container(Backend::Container)]
#[tokio::test]
async fn the_agent_cannot_write_outside_read_write_nor_use_kernel_interfaces_seccomp_denies(#[case] on: Backend) {
    let h = Harness::on(on, |_| {}).await;
    let a = h.admin().await;
    let outside = format!("/var/tmp/os-escape-write-{}-{on:?}", std::process::id());
    let _ = std::fs::remove_file(&outside);
    let script = format!(
        "touch /etc/os-escape 2> etc.txt; echo $? > etc.rc; \
                  touch /usr/os-escape 2> usr.txt; echo $? > usr.rc; \
                  touch {outside} 2> vartmp.txt; echo $? > vartmp.rc; \
                  touch /tmp/ok 2> tmp.txt; echo $? > tmp.rc; \
                  touch $HOME/ok 2> home.txt; echo $? > home.rc; \
                  unshare -U true 2> userns.txt; echo $? > userns.rc; \
                  unshare -n true 2> netns.txt; echo $? > netns.rc; \
                  python3 -c 'import ctypes; l = ctypes.CDLL(None, use_errno=True); r = l.ptrace(16, 1, 0, 0); print(r, ctypes.get_errno())' > ptrace.txt 2>&1; \
                  python3 -c 'import ctypes; l = ctypes.CDLL(None, use_errno=True); r = l.syscall(425, 8, 0); print(r, ctypes.get_errno())' > uring.txt 2>&1; \
                  python3 -c 'import ctypes; l = ctypes.CDLL(None, use_errno=True); r = l.syscall(0x40000000 | 101, 16, 1, 0, 0); print(r, ctypes.get_errno())' > x32.txt 2>&1; \
                  touch done; sleep 600"
    );
    let s = run(&h, &a, "writer", "", None, &script).await;
    finished(&s).await;
    s.refused(&["etc", "usr", "vartmp", "userns", "netns"], "succeeded");
    assert!(!std::path::Path::new("/etc/os-escape").exists());
    assert!(!std::path::Path::new(&outside).exists());
    assert_eq!(s.read("tmp.rc").trim(), "0", "{}", s.read("tmp.txt"));
    assert_eq!(s.read("home.rc").trim(), "0", "{}", s.read("home.txt"));
    // ptrace(PTRACE_ATTACH) and io_uring_setup fail with EPERM (1) from the filter.
    assert_eq!(s.read("ptrace.txt").trim(), "-1 1");
    assert_eq!(s.read("uring.txt").trim(), "-1 1");
    // ptrace by its x32 number: EPERM from the filter (this kernel alone would say ENOSYS).
    assert_eq!(s.read("x32.txt").trim(), "-1 1");
}

/// Each call the filter denies that an agent without capabilities could otherwise make (or
/// whose error would differ): without the filter, add_key and keyctl return a key, request_key
/// ENOKEY, userfaultfd (user-mode only) and perf_event_open (its own process, user space) a
/// descriptor, process_vm_readv (its own memory) a byte count, name_to_handle_at a handle,
/// setns of no descriptor EBADF, clone with CLONE_NEWUSER and clone3 a child. The calls that
/// need a capability anyway (mount, kexec, modules) meet the empty bounding set first.
const SECCOMP_PROBES: &str = r#"
import ctypes, os, struct
l = ctypes.CDLL(None, use_errno=True)
l.syscall.restype = ctypes.c_long
def arg(a):
    if isinstance(a, int):
        return ctypes.c_long(a)
    return a
def call(name, nr, *args):
    ctypes.set_errno(0)
    r = l.syscall(ctypes.c_long(nr), *[arg(a) for a in args])
    e = ctypes.get_errno() if r < 0 else 0
    if r == 0 and name.startswith("clone"):
        os._exit(0)  # the child, had the call gone through
    if r > 0 and name.startswith("clone"):
        os.waitpid(r, 0)
    print(name, r if r < 0 else "ok", e, flush=True)
buf = ctypes.create_string_buffer(b"os-escape", 64)
out = ctypes.create_string_buffer(64)
call("add_key", 248, b"user", b"os-escape", b"x", 1, -2)
call("request_key", 249, b"user", b"os-escape-none", None, -2)
call("keyctl", 250, 0, -2, 1)
call("userfaultfd", 323, 0x80000 | 1)
attr = ctypes.create_string_buffer(128)
struct.pack_into("<IIQ", attr, 0, 1, 128, 0)
struct.pack_into("<Q", attr, 40, 1 | 32 | 64)
call("perf_event_open", 298, attr, 0, -1, -1, 0)
local = (ctypes.c_void_p * 2)(ctypes.cast(out, ctypes.c_void_p), ctypes.c_void_p(64))
remote = (ctypes.c_void_p * 2)(ctypes.cast(buf, ctypes.c_void_p), ctypes.c_void_p(64))
call("process_vm_readv", 310, os.getpid(), local, 1, remote, 1, 0)
call("process_vm_writev", 311, os.getpid(), local, 1, remote, 1, 0)
call("setns", 308, -1, 0)
handle = ctypes.create_string_buffer(8 + 128)
struct.pack_into("<I", handle, 0, 128)
mount_id = ctypes.c_int(0)
call("name_to_handle_at", 303, -100, os.getcwd().encode(), handle, ctypes.byref(mount_id), 0)
call("bpf", 321, 0, ctypes.create_string_buffer(72), 72)
call("clone_newuser", 56, 0x10000000 | 17, 0, 0, 0, 0)
args = ctypes.create_string_buffer(88)
struct.pack_into("<Q", args, 32, 17)
call("clone3", 435, args, 88)
"#;

#[rstest]
#[case::process(Backend::Process)]
#[case::container(Backend::Container)]
#[tokio::test]
async fn the_agent_meets_seccomp_on_every_listed_call_it_could_otherwise_make(#[case] on: Backend) {
    let h = Harness::on(on, |_| {}).await;
    let a = h.admin().await;
    let script = format!("python3 - > seccomp.txt 2>&1 <<'EOF'\n{SECCOMP_PROBES}\nEOF\ntouch done; sleep 600");
    let s = run(&h, &a, "syscalls", "", None, &script).await;
    finished(&s).await;
    let seen: std::collections::BTreeMap<String, String> = s
        .read("seccomp.txt")
        .lines()
        .filter_map(|l| l.split_once(' ').map(|(k, v)| (k.to_string(), v.to_string())))
        .collect();
    let eperm = [
        "add_key",
        "request_key",
        "keyctl",
        "userfaultfd",
        "perf_event_open",
        "process_vm_readv",
        "process_vm_writev",
        "setns",
        "name_to_handle_at",
        "bpf",
        "clone_newuser",
    ];
    for name in eperm {
        assert_eq!(seen.get(name).map(String::as_str), Some("-1 1"), "{name} (want EPERM): {}", s.read("seccomp.txt"));
    }
    // clone3's flags are in memory the filter cannot read: ENOSYS sends libc back to clone.
    assert_eq!(seen.get("clone3").map(String::as_str), Some("-1 38"), "{}", s.read("seccomp.txt"));
}

/// Process driver only. The planted folder is the host's: a container's filesystem is its image's.
#[tokio::test]
async fn a_granted_path_that_is_a_symlink_out_of_the_parents_grant_refuses_the_start() {
    let h = Harness::process(|_| {}).await;
    let a = h.admin().await;
    let dir = std::path::PathBuf::from("/var/tmp").join(format!("os-escape-{}-link", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let link = dir.join("etc");
    let _ = std::fs::remove_file(&link);
    std::os::unix::fs::symlink("/etc", &link).unwrap();
    let parent_policy = format!(
        "version: 1\nfilesystem_policy:\n  include_workdir: true\n  read_only: [/usr, /lib, /proc, {}]\n",
        dir.display()
    );
    let req = pb::CreateSandboxRequest {
        name: "lead".into(),
        command: bash("sleep 600"),
        policy_yaml: parent_policy,
        grant: Some(grant(1, 2, 2)),
        ..Default::default()
    };
    a.sandboxes().create_sandbox(a.req(req)).await.unwrap();
    // Proved as written (beneath the parent's folder), but it resolves to /etc.
    let child_policy = format!(
        "version: 1\nfilesystem_policy:\n  include_workdir: true\n  read_only: [/usr, /lib, {}]\n",
        link.display()
    );
    let req = pb::CreateChildSandboxRequest {
        parent: "lead".into(),
        name: "sneaky".into(),
        command: bash("cat /etc/hostname > leaked.txt; sleep 600"),
        policy_yaml: child_policy,
        ..Default::default()
    };
    let child = a.child_req(req).await.expect("the prover admits the path as written").sandbox.unwrap();
    let failed =
        eventually(Duration::from_secs(20), || async { a.get("sneaky").await.is_ok_and(|s| s.phase == "ERROR") }).await;
    let s = a.get("sneaky").await.unwrap();
    assert!(failed, "the start should fail: {s:?}");
    assert!(
        s.phase_reason.contains(&link.display().to_string()) && s.phase_reason.contains("/etc"),
        "{}",
        s.phase_reason
    );
    let work = h.workdir(&child.id);
    assert!(!work.join("leaked.txt").exists(), "the main command ran");
    let _ = std::fs::remove_dir_all(dir);
}

#[rstest]
#[case::process(Backend::Process)]
#[case::container(Backend::Container)]
#[tokio::test]
async fn a_daemon_dies_with_its_sandbox_even_when_the_supervisor_is_killed(#[case] on: Backend) {
    let h = Harness::on(on, |_| {}).await;
    let a = h.admin().await;
    // The daemon leaves the session, clears its environment and renames itself.
    // (bash, not sleep, carries the new name: a busybox sleep would look its applet up by it.)
    let script = "setsid env -i /bin/bash -c 'exec -a os-escape-daemon /bin/bash -c \"while :; do sleep 1; done\"' & \
                  touch done; sleep 600";
    let s = run(&h, &a, "daemon", "", None, script).await;
    finished(&s).await;
    let daemons = || -> Vec<i32> {
        std::fs::read_dir("/proc")
            .unwrap()
            .flatten()
            .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
            .filter(|p| {
                std::fs::read(format!("/proc/{p}/cmdline")).is_ok_and(|c| c.starts_with(b"os-escape-daemon"))
                    && !std::fs::read_to_string(format!("/proc/{p}/stat")).is_ok_and(|s| s.contains(") Z "))
            })
            .collect()
    };
    assert!(eventually(Duration::from_secs(20), || async { !daemons().is_empty() }).await, "the daemon started");
    // Killed once READY: a supervisor killed while PROVISIONING is failed only after the
    // provisioning timeout.
    assert_eq!(started(&a, "daemon").await.phase, "READY");
    for pid in supervisor_pids(&h.state.0) {
        let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), nix::sys::signal::Signal::SIGKILL);
    }
    assert!(
        eventually(Duration::from_secs(10), || async { daemons().is_empty() }).await,
        "the daemon outlived its sandbox"
    );
    assert!(
        eventually(Duration::from_secs(30), || async { a.get("daemon").await.is_ok_and(|s| s.phase == "ERROR") }).await,
        "the lost sandbox is failed"
    );
}

#[rstest]
#[case::process(Backend::Process)]
#[case::container(Backend::Container)]
#[tokio::test]
async fn a_fork_bomb_meets_the_pids_limit_and_a_memory_hog_the_memory_limit(#[case] on: Backend) {
    let h = Harness::on(on, |_| {}).await;
    let a = h.admin().await;
    let bomb = "python3 -c '\nimport os, time\nn = 0\nfor _ in range(500):\n    try:\n        if os.fork() == 0:\n            time.sleep(60)\n            os._exit(0)\n        n += 1\n    except OSError:\n        break\nopen(\"forked.txt\", \"w\").write(str(n))\n'; touch done; sleep 600";
    let pids = pb::Template { pids: 32, ..Default::default() };
    let b = run(&h, &a, "bomb", "", Some(pids), bomb).await;
    let hog = "python3 -c 'b = bytearray(512 << 20); print(len(b))' > hog.txt 2>&1; echo $? > hog.rc; sleep 600";
    let memory = pb::Template { memory_bytes: 64 << 20, ..Default::default() };
    let m = run(&h, &a, "hog", "", Some(memory), hog).await;
    finished(&b).await;
    let forked: usize = b.read("forked.txt").trim().parse().unwrap();
    assert!(forked < 32, "forked {forked} processes under a limit of 32");
    // The sandbox lives on, and so do the gateway and its other sandboxes.
    assert_eq!(started(&a, "bomb").await.phase, "READY");
    assert!(eventually(Duration::from_secs(20), || async { m.work.join("hog.rc").exists() }).await);
    assert_ne!(m.read("hog.rc").trim(), "0", "allocated past the limit: {}", m.read("hog.txt"));
    let other = run(&h, &a, "bystander", "", None, "touch done; sleep 600").await;
    finished(&other).await;
    // The kernel killed the hog inside: the sandbox reports it when its main command ends.
    let _ = a.sandboxes().stop_sandbox(a.req(pb::StopSandboxRequest { sandbox: "bomb".into() })).await.unwrap();
    assert_eq!(a.get("bomb").await.unwrap().phase, "STOPPED");
}

/// One limit of a sandbox's cgroup as the kernel holds it (hybrid v1 or unified v2 layout).
fn cgroup_limit(id: &str, controller: &str, v1_file: &str, v2_file: &str) -> String {
    let v2 = std::path::Path::new("/sys/fs/cgroup/cgroup.controllers").exists();
    let path = if v2 {
        format!("/sys/fs/cgroup/openshell/{id}/{v2_file}")
    } else {
        format!("/sys/fs/cgroup/{controller}/openshell/{id}/{v1_file}")
    };
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}")).trim().to_string()
}

/// (cpu quota, memory, pids) of a running sandbox's cgroup, in v1's spelling.
async fn cgroup_limits(id: &str) -> (String, String, String) {
    let procs = ["/sys/fs/cgroup/openshell", "/sys/fs/cgroup/pids/openshell"].map(|d| format!("{d}/{id}/cgroup.procs"));
    let running = eventually(Duration::from_secs(20), || async {
        procs.iter().any(|p| std::fs::read_to_string(p).is_ok_and(|s| !s.trim().is_empty()))
    })
    .await;
    assert!(running, "sandbox {id} has no cgroup with processes");
    let cpu = cgroup_limit(id, "cpu", "cpu.cfs_quota_us", "cpu.max");
    let cpu = cpu.split_whitespace().next().unwrap_or_default().replace("max", "-1");
    (
        cpu,
        cgroup_limit(id, "memory", "memory.limit_in_bytes", "memory.max"),
        cgroup_limit(id, "pids", "pids.max", "pids.max"),
    )
}

/// Process driver only. The container's cgroup is its engine's: the container suite checks those limits.
#[tokio::test]
async fn the_template_limits_the_cgroup_and_a_child_runs_on_its_parents() {
    let h = Harness::process(|_| {}).await;
    let a = h.admin().await;
    let limited = pb::Template { cpu_millis: 500, memory_bytes: 256 << 20, pids: 128, ..Default::default() };
    let req = pb::CreateSandboxRequest {
        name: "lead".into(),
        command: bash("sleep 600"),
        template: Some(limited),
        grant: Some(grant(1, 2, 2)),
        ..Default::default()
    };
    let lead = a.sandboxes().create_sandbox(a.req(req)).await.unwrap().into_inner().sandbox.unwrap();
    let child = |name: &str, template: Option<pb::Template>| pb::CreateChildSandboxRequest {
        parent: "lead".into(),
        name: name.into(),
        command: bash("sleep 600"),
        template,
        ..Default::default()
    };
    let heir = a.child_req(child("heir", None)).await.unwrap().sandbox.unwrap();
    let less = pb::Template { memory_bytes: 128 << 20, ..Default::default() };
    let smaller = a.child_req(child("smaller", Some(less))).await.unwrap().sandbox.unwrap();
    let plain = run(&h, &a, "plain", "", None, "sleep 600").await.sandbox;
    let mib = |n: u64| (n << 20).to_string();
    let want = |cpu: &str, memory: String, pids: &str| (cpu.to_string(), memory, pids.to_string());
    assert_eq!(cgroup_limits(&lead.id).await, want("50000", mib(256), "128"), "the root's template");
    assert_eq!(cgroup_limits(&heir.id).await, want("50000", mib(256), "128"), "a child without a template");
    assert_eq!(cgroup_limits(&smaller.id).await, want("50000", mib(128), "128"), "a child asking for less memory");
    assert_eq!(cgroup_limits(&plain.id).await, want("-1", mib(2048), "1024"), "the defaults");
}

#[rstest]
#[case::process(Backend::Process)]
#[case::container(Backend::Container)]
#[tokio::test]
async fn a_memory_hog_main_command_sends_its_sandbox_to_error_with_the_reason(#[case] on: Backend) {
    let h = Harness::on(on, |_| {}).await;
    let a = h.admin().await;
    let memory = pb::Template { memory_bytes: 64 << 20, ..Default::default() };
    run(&h, &a, "hog", "", Some(memory), "exec python3 -c 'b = bytearray(512 << 20)'").await;
    let failed =
        eventually(Duration::from_secs(30), || async { a.get("hog").await.is_ok_and(|s| s.phase == "ERROR") }).await;
    let s = a.get("hog").await.unwrap();
    assert!(failed, "{s:?}");
    assert!(s.phase_reason.contains("memory limit"), "{}", s.phase_reason);
}

#[rstest]
#[case::process(Backend::Process)]
#[case::container(Backend::Container)]
#[tokio::test]
async fn a_supervisor_binary_others_could_replace_refuses_every_start(#[case] on: Backend) {
    // A copy of the real supervisor in a folder its group may write to: anyone in that group
    // could swap it and receive every later credential.
    let dir = std::path::PathBuf::from("/var/tmp").join(format!("os-escape-{}-{on:?}-bin", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o775)).unwrap();
    let copy = dir.join("openshell-supervisor");
    std::fs::copy(bin("openshell-supervisor"), &copy).unwrap();
    let h = Harness::on(on, |o| o.supervisor_bin = Some(copy.clone())).await;
    let a = h.admin().await;
    let req = pb::CreateSandboxRequest {
        name: "lead".into(),
        command: bash("sleep 600"),
        template: h.on.template(None),
        ..Default::default()
    };
    let s = refused(a.sandboxes().create_sandbox(a.req(req)).await, "UNAVAILABLE");
    assert!(s.message().contains("writable by group or others"), "{}", s.message());
    assert!(supervisor_pids(&h.state.0).is_empty(), "nothing ran");
    assert_eq!(a.get("lead").await.unwrap().phase, "ERROR");
    let _ = std::fs::remove_dir_all(dir);
}

/// An agent that learned a neighbour's id (the door lists its own tree's) goes for that
/// sandbox's files by their host path: its world-writable /tmp, its working directory, its
/// disk's root. Each sandbox's init may hold a copy of the neighbour's disk mount (its mount
/// namespace was cloned from the host's), and a pooled init was cloned before either sandbox
/// existed: nothing of the neighbour's is readable or writable either way.
#[tokio::test]
async fn the_agent_cannot_reach_a_neighbours_tmp_workdir_or_disk() {
    let h = Harness::on(Backend::Process, |_| {}).await;
    let a = h.admin().await;
    let victim =
        run(&h, &a, "victim", "", None, "echo mine > /tmp/secret; echo mine > secret; touch done; sleep 600").await;
    finished(&victim).await;
    let theirs = victim.work.parent().unwrap().to_path_buf();
    let d = theirs.display();
    // The sandbox root, where a pooled gateway keeps the next sandboxes' folders (.spare-*):
    // listed to find them, planted to pre-empt one, and one entered by a name learned.
    let root = theirs.parent().unwrap().to_path_buf();
    let r = root.display();
    let spare = std::fs::read_dir(&root).unwrap().flatten().map(|e| e.file_name().to_string_lossy().into_owned());
    let spare = spare.into_iter().find(|n| n.starts_with(".spare-")).unwrap_or_else(|| ".spare-none".into());
    let script = format!(
        "cat {d}/tmp/secret > tmp_read.txt 2>&1; echo $? > tmp_read.rc; \
         ls {d}/tmp > tmp_list.txt 2>&1; echo $? > tmp_list.rc; \
         echo planted > {d}/tmp/planted 2> tmp_write.txt; echo $? > tmp_write.rc; \
         cat {d}/work/secret > work_read.txt 2>&1; echo $? > work_read.rc; \
         ls {d} > root_list.txt 2>&1; echo $? > root_list.rc; \
         echo planted > {d}/planted 2> root_write.txt; echo $? > root_write.rc; \
         ls -a {r} > sandboxes_list.txt 2>&1; echo $? > sandboxes_list.rc; \
         mkdir {r}/.spare-planted > spare_plant.txt 2>&1; echo $? > spare_plant.rc; \
         echo planted > {r}/{spare}/planted 2> spare_write.txt; echo $? > spare_write.rc; \
         touch done; sleep 600"
    );
    let prober = run(&h, &a, "prober", "", None, &script).await;
    finished(&prober).await;
    prober.refused(
        &["tmp_read", "tmp_list", "tmp_write", "work_read", "root_list", "root_write"],
        "reached the neighbour",
    );
    prober.refused(&["sandboxes_list", "spare_plant", "spare_write"], "reached the sandbox root");
    assert!(!root.join(".spare-planted").exists(), "the agent planted a folder for a later sandbox");
    assert!(!prober.read("tmp_read.txt").contains("mine"), "{}", prober.read("tmp_read.txt"));
    assert!(!theirs.join("tmp/planted").exists(), "the agent wrote into its neighbour's /tmp");
    assert!(!theirs.join("planted").exists(), "the agent wrote into its neighbour's disk");
    assert_eq!(std::fs::read_to_string(theirs.join("tmp/secret")).unwrap(), "mine\n");
}

/// A pooled sandbox's agent against the cgroups made ahead (crates/isolation/src/cgroup.rs,
/// `SpareCgroup`). It reads its own folders from /proc/self/cgroup, and is handed the spare of
/// the pooled supervisor waiting beside it (as if it had guessed the random name). It tries to
/// move itself to the root cgroup or into that spare, to kill the waiting init through the
/// spare's `cgroup.kill`, to lift its own process limit, and to remove or rename the spare.
/// Every attempt fails, and from the host nothing moved. Root gateway, hybrid layout.
#[tokio::test]
async fn a_pooled_agent_cannot_leave_its_cgroup_nor_touch_one_made_ahead() {
    let hybrid = std::path::Path::new("/sys/fs/cgroup/pids/cgroup.procs").exists()
        && !std::path::Path::new("/sys/fs/cgroup/cgroup.controllers").exists();
    if !nix::unistd::geteuid().is_root() || !hybrid {
        return eprintln!("skipped: cgroups made ahead need a root gateway on a hybrid cgroup layout");
    }
    let h = Harness::process(|o| o.sandbox_pool = 1).await;
    let a = h.admin().await;
    let script = r#"while [ ! -s target ]; do sleep 0.1; done; t=$(cat target)
        cat /proc/self/cgroup > cgroup.txt
        { echo $$ > /sys/fs/cgroup/pids/cgroup.procs; } 2> root.txt; echo $? > root.rc
        { echo $$ > /sys/fs/cgroup/pids$t/cgroup.procs; } 2> spare.txt; echo $? > spare.rc
        { echo $$ > /sys/fs/cgroup/unified$t/cgroup.procs; } 2> uspare.txt; echo $? > uspare.rc
        { echo 1 > /sys/fs/cgroup/unified$t/cgroup.kill; } 2> kill.txt; echo $? > kill.rc
        { echo max > /sys/fs/cgroup/pids/openshell/$OPENSHELL_SANDBOX_ID/pids.max; } 2> lift.txt; echo $? > lift.rc
        rmdir /sys/fs/cgroup/pids$t 2> rmdir.txt; echo $? > rmdir.rc
        mv /sys/fs/cgroup/pids$t /sys/fs/cgroup/pids/openshell/taken 2> rename.txt; echo $? > rename.rc
        touch done; sleep 600"#;
    // Its policy even grants it the cgroup tree read-write (Landlock steps aside): the folders'
    // owner and modes, root's alone, are what must hold.
    let policy = "version: 1\nfilesystem_policy:\n  include_workdir: true\n  read_only: [/usr, /lib, /bin, /etc, /proc]\n  read_write: [/sys/fs/cgroup, /tmp]\n";
    let s = run(&h, &a, "pooled-attacker", policy, None, script).await;
    // The replacement the pool starts after this claim: its init waits in a spare.
    let waiting = || pooled_supervisors(&h.state.0).into_iter().flat_map(children).next();
    let spare = || waiting().and_then(|init| Some((init, cgroup_folder(init, "pids")?)));
    assert!(eventually(Duration::from_secs(20), || async { spare().is_some() }).await, "a pooled init waits");
    let (init, target) = spare().unwrap();
    assert!(target.starts_with("/openshell/.spare-"), "{target}");
    std::fs::write(s.work.join("target"), &target).unwrap();
    finished(&s).await;
    s.refused(&["root", "spare", "uspare", "kill", "lift", "rmdir", "rename"], "succeeded");
    let own = format!("/openshell/{}", s.sandbox.id);
    assert!(s.read("cgroup.txt").contains(&format!("pids:{own}")), "its own cgroup: {}", s.read("cgroup.txt"));
    let agents = openshell_isolation::cgroup::SandboxCgroup::of(s.sandbox.id.parse().unwrap()).unwrap().pids();
    assert!(agents.len() >= 2, "its init and agent are still in its cgroup: {agents:?}");
    let limit = std::fs::read_to_string(format!("/sys/fs/cgroup/pids{own}/pids.max")).unwrap();
    assert_eq!(limit.trim(), "1024", "its process limit is the default still");
    assert_eq!(cgroup_folder(init, "pids").as_deref(), Some(target.as_str()), "the waiting init is where it was");
    assert_eq!(cgroup_folder(init, "").as_deref(), Some(target.as_str()), "in the unified spare too, alive");
    let procs = std::fs::read_to_string(format!("/sys/fs/cgroup/unified{target}/cgroup.procs")).unwrap();
    assert_eq!(procs.trim(), init.to_string(), "the spare holds the waiting init alone");
}
