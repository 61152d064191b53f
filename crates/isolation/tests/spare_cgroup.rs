//! A cgroup made ahead (`SpareCgroup`) on this host's real cgroups: it becomes a sandbox's
//! with its process in it and exactly the sandbox's limits, and what is left of it goes.
//! Needs root on a hybrid layout (the only one with spares); skipped elsewhere.

use std::path::Path;
use std::process::{Child, Command};
use std::sync::Mutex;
use std::time::Duration;

use openshell_isolation::cgroup::{Limits, SandboxCgroup, SpareCgroup};
use uuid::Uuid;

const ROOT: &str = "/sys/fs/cgroup";
const V1: [&str; 4] = ["pids", "memory", "cpu", "freezer"];

fn hybrid_root() -> bool {
    nix::unistd::geteuid().is_root()
        && Path::new(ROOT).join("pids/cgroup.procs").exists()
        && !Path::new(ROOT).join("cgroup.controllers").exists()
}

fn unified() -> bool {
    Path::new(ROOT).join("unified/cgroup.procs").exists()
}

/// The folder of `pid` in hierarchy `controller` ("" for the unified one), from /proc.
fn folder_of(pid: u32, controller: &str) -> String {
    let text = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).unwrap();
    let line = text.lines().find(|l| l.split(':').nth(1) == Some(controller)).unwrap_or_else(|| panic!("{text}"));
    line.splitn(3, ':').nth(2).unwrap().to_string()
}

fn file(controller: &str, folder: &str, name: &str) -> String {
    let path = format!("{ROOT}/{controller}{folder}/{name}");
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}")).trim().to_string()
}

fn sleeper() -> Child {
    Command::new("sleep").arg("60").spawn().unwrap()
}

/// One test at a time: the sweep of one would race another's spare while it is made.
static SERIAL: Mutex<()> = Mutex::new(());

const AHEAD: Limits = Limits { cpu_millis: None, memory_bytes: Some(2 << 30), pids: Some(1024) };

#[test]
fn a_spare_becomes_the_sandboxs_cgroup_with_its_process_in_it_and_its_own_limits() {
    if !hybrid_root() {
        return eprintln!("skipped: spares need root on a hybrid cgroup layout");
    }
    let _one = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let mut sleep = sleeper();
    let pid = sleep.id();
    let spare = SpareCgroup::make(pid as i32, &AHEAD).unwrap().expect("a hybrid host makes spares");
    let name = folder_of(pid, "pids");
    assert!(name.starts_with("/openshell/.spare-"), "made ahead under a spare name: {name}");
    for c in V1 {
        assert_eq!(folder_of(pid, c), name, "in the spare in {c}");
    }
    if unified() {
        assert_eq!(folder_of(pid, ""), name, "in the spare in the unified tree");
    }
    assert_eq!(file("pids", &name, "pids.max"), "1024", "the limits ahead are set");
    assert_eq!(file("memory", &name, "memory.limit_in_bytes"), (2u64 << 30).to_string());

    // More memory than ahead (memory and swap together must be raised first, or the kernel
    // refuses), no process limit, and a CPU limit.
    let id = Uuid::new_v4();
    let wanted = Limits { cpu_millis: Some(500), memory_bytes: Some(4 << 30), pids: None };
    let cgroup = spare.claim(id, &wanted).unwrap();
    let own = format!("/openshell/{id}");
    for c in V1 {
        assert_eq!(folder_of(pid, c), own, "renamed to the sandbox's id in {c}, its process with it");
    }
    assert!(!Path::new(&format!("{ROOT}/pids{name}")).exists(), "no spare is left in v1");
    if unified() {
        assert_eq!(folder_of(pid, ""), name, "the unified folder keeps its spare name");
    }
    assert_eq!(file("memory", &own, "memory.limit_in_bytes"), (4u64 << 30).to_string());
    if Path::new(&format!("{ROOT}/memory{own}/memory.memsw.limit_in_bytes")).exists() {
        assert_eq!(file("memory", &own, "memory.memsw.limit_in_bytes"), (4u64 << 30).to_string());
    }
    assert_eq!(file("pids", &own, "pids.max"), "max", "a limit set ahead that the sandbox lacks is lifted");
    assert_eq!(file("cpu", &own, "cpu.cfs_quota_us"), "50000");
    assert_eq!(cgroup.pids(), vec![pid as i32], "found by the sandbox's id");

    cgroup.kill_all().unwrap();
    assert!(sleep.wait().unwrap().code().is_none(), "killed");
    cgroup.remove().unwrap();
    for c in V1 {
        assert!(!Path::new(&format!("{ROOT}/{c}{own}")).exists(), "{c} folder removed");
    }
    assert!(!Path::new(&format!("{ROOT}/unified{name}")).exists(), "the unified spare removed with it");
    assert!(!SandboxCgroup::of(id).unwrap().exists());
}

#[test]
fn a_lower_memory_limit_than_ahead_is_set_on_memory_first() {
    if !hybrid_root() {
        return eprintln!("skipped: spares need root on a hybrid cgroup layout");
    }
    let _one = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let mut sleep = sleeper();
    let spare = SpareCgroup::make(sleep.id() as i32, &AHEAD).unwrap().unwrap();
    let id = Uuid::new_v4();
    let wanted = Limits { memory_bytes: Some(64 << 20), ..AHEAD };
    let cgroup = spare.claim(id, &wanted).unwrap();
    let own = format!("/openshell/{id}");
    assert_eq!(file("memory", &own, "memory.limit_in_bytes"), (64u64 << 20).to_string());
    assert_eq!(file("pids", &own, "pids.max"), "1024", "an unchanged limit stays");
    let _ = sleep.kill();
    let _ = sleep.wait();
    cgroup.remove().unwrap();
}

#[test]
fn spares_no_process_is_in_are_removed_and_those_in_use_stay() {
    if !hybrid_root() {
        return eprintln!("skipped: spares need root on a hybrid cgroup layout");
    }
    let _one = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let (mut dead, mut alive) = (sleeper(), sleeper());
    let left = SpareCgroup::make(dead.id() as i32, &AHEAD).unwrap().unwrap();
    let used = SpareCgroup::make(alive.id() as i32, &AHEAD).unwrap().unwrap();
    let (left_name, used_name) = (folder_of(dead.id(), "pids"), folder_of(alive.id(), "pids"));
    // Its maker died without removing it: its process ended, the folders stayed.
    std::mem::forget(left);
    let _ = dead.kill();
    let _ = dead.wait();
    SpareCgroup::remove_stale(Duration::from_secs(3600));
    assert!(Path::new(&format!("{ROOT}/pids{left_name}")).exists(), "a spare younger than asked stays");
    SpareCgroup::remove_stale(Duration::ZERO);
    for c in V1 {
        assert!(!Path::new(&format!("{ROOT}/{c}{left_name}")).exists(), "the empty spare in {c} is removed");
        assert!(Path::new(&format!("{ROOT}/{c}{used_name}")).exists(), "the spare in use in {c} stays");
    }
    // An unclaimed spare dropped after its process ended goes with it.
    let _ = alive.kill();
    let _ = alive.wait();
    drop(used);
    for c in V1 {
        assert!(!Path::new(&format!("{ROOT}/{c}{used_name}")).exists(), "the dropped spare in {c} is removed");
    }
}
