//! Escape attempts from sandboxes of a gateway that is not root: the real `openshell-gateway`
//! runs as the user `openshell-rootless`, each sandbox in a user namespace of its own with a
//! subordinate uid, its cgroup under the subtree the test delegates as root (as an operator
//! would). Each attempt is made by the sandbox's main command, as a prompt-injected agent
//! would, which writes what it saw into its working directory; the test reads it on the host.

use std::os::unix::fs::PermissionsExt;
use std::time::Duration;

use openshell_e2e::rootless::{self, RootlessGateway, USER};
use openshell_e2e::*;
use openshell_proto::v1 as pb;
use openshell_testhost::TestHost;

fn bash(script: &str) -> Vec<String> {
    vec!["/bin/bash".into(), "-c".into(), script.into()]
}

async fn gateway(extra: &[&str]) -> RootlessGateway {
    rootless::delegate(rootless::user(USER).uid.as_raw());
    RootlessGateway::start(USER, extra).await
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

    fn rc(&self, probe: &str) -> String {
        self.read(&format!("{probe}.rc")).trim().to_string()
    }
}

async fn run(g: &RootlessGateway, api: &Api, name: &str, policy: &str, script: &str) -> Sbx {
    run_in(g, api, name, policy, None, script).await
}

async fn run_in(
    g: &RootlessGateway,
    api: &Api,
    name: &str,
    policy: &str,
    template: Option<pb::Template>,
    script: &str,
) -> Sbx {
    let req = pb::CreateSandboxRequest {
        name: name.into(),
        command: bash(script),
        policy_yaml: policy.into(),
        template,
        ..Default::default()
    };
    let sandbox = api.sandboxes().create_sandbox(api.req(req)).await.unwrap().into_inner().sandbox.unwrap();
    let work = g.work(&sandbox.id);
    let log = g.log(&sandbox.id);
    Sbx { sandbox, work, log }
}

/// Waits until the agent wrote `done` (its attempts are over).
async fn finished(s: &Sbx) {
    let done = s.work.join("done");
    assert!(
        eventually(Duration::from_secs(30), || async { done.exists() }).await,
        "the agent in {} never finished; its log: {:?}",
        s.sandbox.name,
        std::fs::read_to_string(&s.log)
    );
}

#[track_caller]
fn assert_failed(s: &Sbx, probes: &[&str]) {
    for probe in probes {
        assert_ne!(s.rc(probe), "0", "{probe} succeeded: {}", s.read(&format!("{probe}.txt")));
    }
}

#[tokio::test]
async fn each_agent_runs_under_a_subordinate_uid_of_its_own_in_a_user_namespace() {
    let g = gateway(&[]).await;
    let a = g.admin().await;
    let script = "id -u > uid.txt; id -g > gid.txt; cat /proc/self/uid_map > uid_map.txt; \
                  grep -E '^(CapEff|CapPrm|CapBnd|CapAmb|NoNewPrivs|Seccomp):' /proc/self/status > status.txt; \
                  ls /proc | grep -c '^[0-9]' > pids.txt; ls -l /proc/$$/fd/ > fds.txt; \
                  touch done; sleep 600";
    let one = run(&g, &a, "one", "", script).await;
    let two = run(&g, &a, "two", "", script).await;
    finished(&one).await;
    finished(&two).await;
    let (first, count) = rootless::subuids(USER);
    let uid: u32 = one.read("uid.txt").trim().parse().unwrap();
    assert!(uid >= first && uid - first < count, "uid {uid} is not one of {USER}'s subordinate uids");
    assert_ne!(uid, g.uid, "the agent runs as the gateway's user");
    assert_eq!(one.read("gid.txt").trim(), uid.to_string(), "its gid is its subordinate gid");
    assert_ne!(one.read("uid.txt"), two.read("uid.txt"), "two live sandboxes share a uid");
    // Its namespace maps only the gateway's uid (its root, the init) and the agent's own.
    let map: Vec<Vec<String>> =
        one.read("uid_map.txt").lines().map(|l| l.split_whitespace().map(str::to_string).collect()).collect();
    let want =
        [vec!["0".to_string(), g.uid.to_string(), "1".into()], vec![uid.to_string(), uid.to_string(), "1".into()]];
    assert_eq!(map, want, "uid_map");
    let status = one.read("status.txt");
    for cap in ["CapEff", "CapPrm", "CapBnd", "CapAmb"] {
        assert!(status.contains(&format!("{cap}:\t0000000000000000")), "{status}");
    }
    assert!(status.contains("NoNewPrivs:\t1") && status.contains("Seccomp:\t2"), "{status}");
    let visible: usize = one.read("pids.txt").trim().parse().unwrap();
    assert!(visible <= 6, "the agent sees {visible} processes");
    // No descriptor of its init's channel to the supervisor (or any socket) reached it.
    assert!(!one.read("fds.txt").contains("socket:"), "{}", one.read("fds.txt"));
    // Its processes are in its cgroup, under the subtree delegated to the gateway's user.
    let procs = rootless::delegated_dir("pids", g.uid).join(&one.sandbox.id).join("cgroup.procs");
    assert!(!std::fs::read_to_string(&procs).unwrap().trim().is_empty(), "{}", procs.display());
    assert_eq!(started(&a, "one").await.phase, "READY");
}

#[tokio::test]
async fn the_agent_cannot_read_the_gateways_config_or_state_or_another_sandboxs_files() {
    let g = gateway(&[]).await;
    let a = g.admin().await;
    // World-readable inside the state directory: only Landlock keeps it from the agent.
    let open_file = g.state.join("open-file");
    std::fs::write(&open_file, "state-file-anyone-could-read").unwrap();
    std::fs::set_permissions(&open_file, std::fs::Permissions::from_mode(0o644)).unwrap();
    let other =
        run(&g, &a, "other", "", "echo other-sandbox-secret > mine.txt; chmod 644 mine.txt; touch done; sleep 600")
            .await;
    finished(&other).await;
    let script = format!(
        "cat {config} > config.txt 2>&1; echo $? > config.rc; \
         cat {state}/runner-id > runner.txt 2>&1; echo $? > runner.rc; \
         ls {state}/uids > uids.txt 2>&1; echo $? > uids.rc; \
         ls {state} > ls.txt 2>&1; echo $? > ls.rc; \
         cat {state}/open-file > open.txt 2>&1; echo $? > open.rc; \
         cat {other}/mine.txt > other.txt 2>&1; echo $? > other.rc; \
         cat /proc/1/environ > init_env.txt 2>&1; echo $? > init_env.rc; \
         touch done; sleep 600",
        config = g.config.display(),
        state = g.state.display(),
        other = other.work.display(),
    );
    let s = run(&g, &a, "reader", "", &script).await;
    finished(&s).await;
    assert_failed(&s, &["config", "runner", "uids", "ls", "open", "other", "init_env"]);
    assert!(!s.read("config.txt").contains(&g.token), "the admin token leaked");
    let runner = std::fs::read_to_string(g.state.join("runner-id")).unwrap();
    assert!(!s.read("runner.txt").contains(runner.trim()));
    assert!(!s.read("open.txt").contains("anyone-could-read"), "Landlock let an ungranted path through");
    assert!(!s.read("other.txt").contains("other-sandbox-secret"), "read another sandbox's files");

    // Even where its policy grants the gateway's folder, its uid is not the gateway's user:
    // the state directory (0700) is closed to it, even a file in it anyone could read, and in
    // the sandbox root (0711) it lists nothing and reads no other sandbox's workdir (0700).
    let policy = format!(
        "version: 1\nfilesystem_policy:\n  include_workdir: true\n  read_only: [/usr, /lib, /proc, /etc, {}]\n",
        g.dir.display()
    );
    std::fs::write(g.dir.join("open.txt"), "granted-and-world-readable").unwrap();
    std::fs::set_permissions(g.dir.join("open.txt"), std::fs::Permissions::from_mode(0o644)).unwrap();
    let root = sandbox_root(&g.state);
    let script = format!(
        "cat {config} > config.txt 2>&1; echo $? > config.rc; \
         cat {state}/runner-id > runner.txt 2>&1; echo $? > runner.rc; \
         ls {state}/uids > uids.txt 2>&1; echo $? > uids.rc; \
         ls {state} > ls.txt 2>&1; echo $? > ls.rc; \
         cat {state}/open-file > open.txt 2>&1; echo $? > open.rc; \
         cat {log} > log.txt 2>&1; echo $? > log.rc; \
         ls {root} > root.txt 2>&1; echo $? > root.rc; \
         ls {root}/{id} > other_dir.txt 2>&1; echo $? > other_dir.rc; \
         ls {other} > other_ls.txt 2>&1; echo $? > other_ls.rc; \
         cat {other}/mine.txt > other.txt 2>&1; echo $? > other.rc; \
         cat {dir}/open.txt > granted.txt 2>&1; echo $? > granted.rc; \
         touch done; sleep 600",
        config = g.config.display(),
        state = g.state.display(),
        log = g.log(&other.sandbox.id).display(),
        root = root.display(),
        id = other.sandbox.id,
        other = other.work.display(),
        dir = g.dir.display(),
    );
    let granted = run(&g, &a, "granted", &policy, &script).await;
    finished(&granted).await;
    // The policy does grant the folder: a file anyone may read there is readable.
    assert_eq!(granted.rc("granted"), "0", "{}", granted.read("granted.txt"));
    assert_failed(
        &granted,
        &["config", "runner", "uids", "ls", "open", "log", "root", "other_dir", "other_ls", "other"],
    );
    assert!(!granted.read("other.txt").contains("other-sandbox-secret"), "read another sandbox's files");
}

#[tokio::test]
async fn the_state_directory_is_0700_every_file_in_it_0600_and_workdirs_their_agents() {
    use std::os::unix::fs::MetadataExt;
    let g = gateway(&[]).await;
    let a = g.admin().await;
    let s = run(&g, &a, "one", "", "touch done; sleep 600").await;
    finished(&s).await;
    let meta = |p: &std::path::Path| std::fs::symlink_metadata(p).unwrap();
    let mut wrong = Vec::new();
    let mut todo = vec![g.state.clone()];
    while let Some(d) = todo.pop() {
        if meta(&d).mode() & 0o7777 != 0o700 || meta(&d).uid() != g.uid {
            wrong.push(format!("{} {:o} uid {}", d.display(), meta(&d).mode() & 0o7777, meta(&d).uid()));
        }
        for e in std::fs::read_dir(&d).unwrap().flatten() {
            let m = meta(&e.path());
            if m.is_dir() {
                todo.push(e.path());
            } else if m.mode() & 0o7777 != 0o600 || m.uid() != g.uid {
                wrong.push(format!("{} {:o} uid {}", e.path().display(), m.mode() & 0o7777, m.uid()));
            }
        }
    }
    assert!(wrong.is_empty(), "not the gateway's alone: {wrong:#?}");
    let root = sandbox_root(&g.state);
    assert_eq!((meta(&root).mode() & 0o7777, meta(&root).uid()), (0o711, g.uid), "the sandbox root");
    assert_eq!(meta(&s.work).mode() & 0o7777, 0o700);
    let (first, count) = rootless::subuids(USER);
    let owner = meta(&s.work).uid();
    assert!(owner >= first && owner - first < count, "the workdir belongs to the agent's subordinate uid, not {owner}");
}

#[tokio::test]
async fn the_agent_cannot_see_or_signal_its_supervisor_its_init_or_the_gateway() {
    let g = gateway(&[]).await;
    let a = g.admin().await;
    let supervisor_gone = format!("/proc/{}", std::process::id());
    let script = format!(
        "kill -0 {gw} 2> kill_gw.txt; echo $? > kill_gw.rc; \
         kill -KILL {gw} 2> killk_gw.txt; echo $? > killk_gw.rc; \
         kill -KILL 1 2> kill_init.txt; echo $? > kill_init.rc; \
         python3 -c 'import ctypes; l = ctypes.CDLL(None, use_errno=True); r = l.ptrace(16, 1, 0, 0); print(r, ctypes.get_errno())' > ptrace.txt 2>&1; \
         ls -l /proc/1/fd > init_fd.txt 2>&1; echo $? > init_fd.rc; \
         ls {test} > test.txt 2>&1; echo $? > test.rc; \
         touch done; sleep 600",
        gw = g.pid(),
        test = supervisor_gone,
    );
    let s = run(&g, &a, "signaller", "", &script).await;
    finished(&s).await;
    assert_failed(&s, &["kill_gw", "killk_gw", "kill_init", "init_fd"]);
    // Not there at all: its PID namespace holds only its own processes.
    assert!(s.read("kill_gw.txt").contains("No such process"), "{}", s.read("kill_gw.txt"));
    assert_ne!(s.rc("test"), "0", "the host's processes are visible: {}", s.read("test.txt"));
    assert_eq!(s.read("ptrace.txt").trim(), "-1 1", "ptrace is denied");
    // Everything is still up: the gateway, the supervisor and the sandbox.
    assert!(std::path::Path::new(&format!("/proc/{}", g.pid())).exists(), "the gateway was killed");
    assert_eq!(supervisor_pids(&g.state).len(), 1, "the supervisor was killed");
    assert_eq!(started(&a, "signaller").await.phase, "READY");
}

/// The gateway (from its first line) and each supervisor (before it reads its credential) are
/// not dumpable: another process of the gateway's own user can neither list their descriptors
/// (the credential pipe) nor read their environment, while it can read those of an ordinary
/// process of that user, which shows the probe itself works.
#[tokio::test]
async fn the_gateway_and_its_supervisors_are_closed_to_other_processes_of_its_user() {
    use std::os::unix::process::CommandExt;
    let g = gateway(&[]).await;
    let a = g.admin().await;
    let s = run(&g, &a, "one", "", "touch done; sleep 600").await;
    finished(&s).await;
    let supervisors = supervisor_pids(&g.state);
    assert_eq!(supervisors.len(), 1, "{supervisors:?}");
    let u = rootless::user(USER);
    let as_user = |program: &str, arg: &str| {
        std::process::Command::new(program)
            .arg(arg)
            .env_clear()
            .uid(u.uid.as_raw())
            .gid(u.gid.as_raw())
            .output()
            .unwrap()
    };
    let mut ordinary = std::process::Command::new("/bin/sleep")
        .arg("60")
        .env("OS_PROBE", "visible")
        .uid(u.uid.as_raw())
        .gid(u.gid.as_raw())
        .spawn()
        .unwrap();
    let control = as_user("/bin/cat", &format!("/proc/{}/environ", ordinary.id()));
    assert!(
        String::from_utf8_lossy(&control.stdout).contains("OS_PROBE=visible"),
        "the probe cannot read: {control:?}"
    );
    assert!(as_user("/bin/ls", &format!("/proc/{}/fd", ordinary.id())).status.success());
    let _ = ordinary.kill();
    let _ = ordinary.wait();
    for (what, pid) in [("the gateway", g.pid() as i32), ("the supervisor", supervisors[0])] {
        for (program, file) in [("/bin/ls", "fd"), ("/bin/cat", "environ")] {
            let out = as_user(program, &format!("/proc/{pid}/{file}"));
            assert!(
                !out.status.success() && String::from_utf8_lossy(&out.stderr).contains("Permission denied"),
                "{what}'s /proc/{pid}/{file} is open to its user: {out:?}"
            );
        }
    }
    assert_eq!(started(&a, "one").await.phase, "READY");
}

const SERVER: &str = r#"
import http.server, sys
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200); self.end_headers(); self.wfile.write(b"hello from the test host")
    def log_message(self, *a): pass
http.server.HTTPServer((sys.argv[1], 80), H).serve_forever()
"#;

#[tokio::test]
async fn the_proxy_is_the_only_way_out_and_enforces_the_policy_by_program() {
    let host = TestHost::new("rl", 19);
    let _server = host.spawn("python3", &["-c", SERVER, &host.ip.to_string()]);
    let up = eventually(Duration::from_secs(10), || async {
        std::net::TcpStream::connect_timeout(&(host.ip, 80).into(), Duration::from_millis(200)).is_ok()
    })
    .await;
    assert!(up, "the test host's server did not start");
    let resolve = format!("api.test={}", host.ip);
    let g = gateway(&["--proxy-resolve", &resolve]).await;
    let a = g.admin().await;
    let port: u16 = g.endpoint.rsplit(':').next().unwrap().parse().unwrap();
    let policy = "version: 1\nfilesystem_policy:\n  include_workdir: true\n  read_only: [/usr, /lib, /proc, /dev/urandom, /etc]\n  read_write: [/tmp, /dev/null]\nnetwork_policies:\n  api:\n    endpoints: [{host: api.test, port: 80}]\n    binaries: [{path: /usr/bin/curl}]\n";
    let script = format!(
        "curl -sS -m 5 -o allowed.txt -w '%{{http_code}}' http://api.test/ > allowed.code 2> allowed.err; \
         python3 -c 'import urllib.request as u; print(u.urlopen(\"http://api.test/\", timeout=5).status)' > python.txt 2>&1; echo $? > python.rc; \
         curl -sS -m 5 --noproxy '' -o gwproxy.txt -w '%{{http_code}}' http://127.0.0.1:{port}/ > gwproxy.code 2>&1; \
         (exec 3<>/dev/tcp/127.0.0.1/{port}) 2> gw.txt; echo $? > gw.rc; \
         (exec 3<>/dev/tcp/{ip}/80) 2> direct_ip.txt; echo $? > direct_ip.rc; \
         unset HTTP_PROXY HTTPS_PROXY ALL_PROXY http_proxy https_proxy all_proxy; \
         curl -sS -m 3 http://{ip}/ > bypass.txt 2>&1; echo $? > bypass.rc; \
         touch done; sleep 600",
        ip = host.ip,
    );
    let s = run(&g, &a, "net", policy, &script).await;
    finished(&s).await;
    // Allowed: the proxy found the calling program from the kernel, through the init.
    assert_eq!(s.read("allowed.code").trim(), "200", "{} {}", s.read("allowed.err"), s.read("allowed.txt"));
    assert_eq!(s.read("allowed.txt"), "hello from the test host");
    // Another program, the gateway's port (through the proxy or not), the host directly.
    assert_ne!(s.rc("python"), "0", "python reached a host only curl may: {}", s.read("python.txt"));
    assert!(s.read("python.txt").contains("403"), "{}", s.read("python.txt"));
    assert_eq!(s.read("gwproxy.code").trim(), "403", "the proxy let the agent reach the gateway's port");
    assert_failed(&s, &["gw", "direct_ip", "bypass"]);
    // The denial names the program the kernel reported (denials reach the gateway in batches).
    let python_denied = eventually(Duration::from_secs(10), || async {
        let req = a.req(pb::ListDenialsRequest { sandbox: "net".into(), ..Default::default() });
        let denials = a.sandboxes().list_denials(req).await.unwrap().into_inner().denials;
        denials.iter().any(|d| d.program.starts_with("/usr/bin/python3") && d.host == "api.test")
    })
    .await;
    assert!(python_denied, "no denial naming python3");
}

#[tokio::test]
async fn a_daemon_dies_with_its_sandbox_when_its_supervisor_is_killed() {
    let g = gateway(&[]).await;
    let a = g.admin().await;
    let script = "setsid env -i /bin/bash -c 'exec -a os-rootless-daemon /bin/bash -c \"while :; do sleep 1; done\"' & \
                  touch done; sleep 600";
    let s = run(&g, &a, "daemon", "", script).await;
    finished(&s).await;
    let daemons = || -> Vec<i32> {
        std::fs::read_dir("/proc")
            .unwrap()
            .flatten()
            .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
            .filter(|p| {
                std::fs::read(format!("/proc/{p}/cmdline")).is_ok_and(|c| c.starts_with(b"os-rootless-daemon"))
                    && !std::fs::read_to_string(format!("/proc/{p}/stat")).is_ok_and(|s| s.contains(") Z "))
            })
            .collect()
    };
    assert!(eventually(Duration::from_secs(20), || async { !daemons().is_empty() }).await, "the daemon started");
    // Killed once READY: a supervisor killed while PROVISIONING is failed only after the
    // provisioning timeout.
    assert_eq!(started(&a, "daemon").await.phase, "READY");
    for pid in supervisor_pids(&g.state) {
        let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), nix::sys::signal::Signal::SIGKILL);
    }
    assert!(
        eventually(Duration::from_secs(10), || async { daemons().is_empty() }).await,
        "the daemon outlived its sandbox"
    );
    assert!(
        eventually(Duration::from_secs(40), || async { a.get("daemon").await.is_ok_and(|s| s.phase == "ERROR") }).await,
        "the lost sandbox is failed"
    );
}

#[tokio::test]
async fn the_delegated_cgroup_holds_a_fork_bomb_to_its_pids_limit_and_a_memory_hog_to_its_memory() {
    let g = gateway(&[]).await;
    let a = g.admin().await;
    let bomb = "python3 -c '\nimport os, time\nn = 0\nfor _ in range(500):\n    try:\n        if os.fork() == 0:\n            time.sleep(60)\n            os._exit(0)\n        n += 1\n    except OSError:\n        break\nopen(\"forked.txt\", \"w\").write(str(n))\n'; touch done; sleep 600";
    let b = run_in(&g, &a, "bomb", "", Some(pb::Template { pids: 32, ..Default::default() }), bomb).await;
    let memory = Some(pb::Template { memory_bytes: 64 << 20, ..Default::default() });
    run_in(&g, &a, "hog", "", memory, "exec python3 -c 'b = bytearray(512 << 20)'").await;
    finished(&b).await;
    let forked: usize = b.read("forked.txt").trim().parse().unwrap();
    assert!(forked < 32, "forked {forked} processes under a limit of 32");
    let limit = rootless::delegated_dir("pids", g.uid).join(&b.sandbox.id).join("pids.max");
    assert_eq!(std::fs::read_to_string(limit).unwrap().trim(), "32");
    assert_eq!(started(&a, "bomb").await.phase, "READY");
    let failed =
        eventually(Duration::from_secs(30), || async { a.get("hog").await.is_ok_and(|s| s.phase == "ERROR") }).await;
    let hog = a.get("hog").await.unwrap();
    assert!(failed && hog.phase_reason.contains("memory limit"), "{hog:?}");
}
