//! A sandbox's own disk (crates/disk): attacks from inside real sandboxes on both drivers.
//! A write past the limit fails with ENOSPC inside and the host barely notices; a child cannot
//! ask for more disk than its parent; a sandbox's files go with a delete, after the retention
//! once stopped, and after a gateway crash when no live row names them; and a nearly full
//! disk (a small loop filesystem of the test's own) refuses new sandboxes, naming the disk,
//! while the gateway still answers.

use std::path::{Path, PathBuf};
use std::time::Duration;

use openshell_e2e::inside::run_in;
use openshell_e2e::*;
use openshell_proto::v1 as pb;
use rstest::rstest;

const MIB: u64 = 1 << 20;

fn sh(script: &str) -> Vec<String> {
    vec!["/bin/sh".into(), "-c".into(), script.into()]
}

fn disk(on: Backend, bytes: u64) -> Option<pb::Template> {
    on.template(Some(pb::Template { disk_bytes: bytes, ..Default::default() }))
}

/// A shell command writing `bytes` to `path` and printing the errno the kernel answered
/// (`errno=ENOSPC`; `rc=0` when all was written) and the file's size (`size=N`). Python, not
/// busybox `head`, whose message for a failed write to stdout is a generic "I/O error".
fn fill(path: &str, bytes: u64) -> String {
    format!(
        "python3 -c \"
import errno, os, sys
fd = os.open(sys.argv[1], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
left, chunk = int(sys.argv[2]), b'0123456789abcdef' * 4096
try:
    while left > 0:
        left -= os.write(fd, chunk[:left])
    os.fsync(fd)
    print('rc=0')
except OSError as e:
    print('errno=' + errno.errorcode.get(e.errno, str(e.errno)))
print('size=%d' % os.fstat(fd).st_size)
\" {path} {bytes}"
    )
}

/// The size `fill` printed.
fn size_of(out: &str) -> u64 {
    out.lines()
        .find_map(|l| l.strip_prefix("size="))
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or_else(|| panic!("no size in {out:?}"))
}

async fn ready(api: &Api, name: &str) -> pb::Sandbox {
    let ok =
        eventually(Duration::from_secs(60), || async { api.get(name).await.is_ok_and(|s| s.phase == "READY") }).await;
    let s = api.get(name).await;
    assert!(ok, "{name} should be READY: {s:?}");
    s.unwrap()
}

async fn root(api: &Api, on: Backend, name: &str, disk_bytes: u64) -> pb::Sandbox {
    let req = pb::CreateSandboxRequest {
        name: name.into(),
        command: sh("exec sleep 600"),
        grant: Some(grant(2, 2, 3)),
        template: disk(on, disk_bytes),
        ..Default::default()
    };
    api.sandboxes().create_sandbox(api.req(req)).await.expect("root with a disk");
    ready(api, name).await
}

/// Free bytes on the filesystem holding `path`.
fn free(path: &Path) -> u64 {
    let fs = nix::sys::statvfs::statvfs(path).unwrap();
    fs.blocks_available() * fs.fragment_size()
}

/// Every path of a sandbox's files on the host: its folder, its log folder, its disk images.
fn files_of(state: &Path, id: &str) -> Vec<PathBuf> {
    vec![
        sandbox_root(state).join(id),
        state.join("sandboxes").join(id),
        state.join("disks").join(format!("{id}.img")),
        state.join("disks").join(format!("{id}.kept.img")),
        // The process driver's run lock.
        state.join("run").join(id),
    ]
}

fn left(state: &Path, id: &str) -> Vec<PathBuf> {
    files_of(state, id).into_iter().filter(|p| std::fs::symlink_metadata(p).is_ok()).collect()
}

#[rstest]
#[case::process(Backend::Process)]
#[case::container(Backend::Container)]
#[tokio::test]
async fn a_write_past_the_disk_fails_enospc_and_the_host_barely_notices(#[case] on: Backend) {
    let h = Harness::on(on, |_| {}).await;
    let a = h.admin().await;
    let s = root(&a, on, "filler", 64 * MIB).await;
    let image = h.state.0.join("disks").join(format!("{}.img", s.id));
    let before = free(&h.state.0);
    // 600 MiB into the working directory: an unbounded one would take it all from the host.
    let (_, out, err) = run_in(&a, "filler", sh(&fill("big", 600 * MIB))).await;
    let after = free(&h.state.0);
    assert!(out.contains("errno=ENOSPC"), "the write past the disk: {out} {err}");
    let written = size_of(&out);
    assert!(written <= 64 * MIB, "wrote {written} bytes on a 64 MiB disk");
    // The image holds at most its size, whatever the agent does.
    use std::os::unix::fs::MetadataExt;
    let held = std::fs::metadata(&image).map(|m| m.blocks() * 512);
    assert!(held.as_ref().is_ok_and(|b| *b <= 64 * MIB + MIB), "the image holds {held:?}");
    // Other engineers' builds share this disk: a margin for them, far below the 600 MiB an
    // unbounded write takes.
    let dropped = before.saturating_sub(after);
    assert!(dropped <= 64 * MIB + 256 * MIB, "the host lost {dropped} bytes to a 64 MiB disk");
    // /tmp is the same disk: full too, then free again once the agent removes its file.
    let (code, out, _) = run_in(&a, "filler", sh(&fill("/tmp/more", 8 * MIB))).await;
    assert!(out.contains("errno=ENOSPC"), "{code} {out}");
    let (_, out, _) = run_in(&a, "filler", sh(&format!("rm -f big /tmp/more; {}", fill("/tmp/big", 600 * MIB)))).await;
    assert!(out.contains("errno=ENOSPC"), "/tmp is bounded too: {out}");
    assert!(size_of(&out) <= 64 * MIB, "{out}");
    // Nothing else in the sandbox is writable: not its root (a container's writable layer).
    let (_, out, _) = run_in(&a, "filler", sh("echo x > /outside 2>&1; echo rc=$?")).await;
    assert!(!out.contains("rc=0"), "wrote outside its disk: {out}");
    // The gateway still answers, and says what its sandboxes hold.
    let status = a.health().get_status(a.req(pb::GetStatusRequest {})).await.unwrap().into_inner();
    let d = status.disk.expect("status shows the sandboxes' disks");
    assert_eq!((d.backend.as_str(), d.running), ("image", 1), "{d:?}");
    assert!(d.used_bytes > 0 && d.used_bytes <= 66 * MIB, "{d:?}");
}

#[rstest]
#[case::process(Backend::Process)]
#[case::container(Backend::Container)]
#[tokio::test]
async fn a_child_cannot_ask_for_more_disk_than_its_parent(#[case] on: Backend) {
    let h = Harness::on(on, |_| {}).await;
    let a = h.admin().await;
    root(&a, on, "lead", 64 * MIB).await;
    let child = |name: &str, bytes: u64| pb::CreateChildSandboxRequest {
        parent: "lead".into(),
        name: name.into(),
        command: sh("exec sleep 600"),
        template: disk(on, bytes),
        ..Default::default()
    };
    let s = refused(a.child_req(child("greedy", 128 * MIB)).await, "NOT_ALLOWED");
    assert_eq!(details(&s).get("field").map(String::as_str), Some("template.disk_bytes"), "{s:?}");
    // Less is fine, and none is the parent's.
    a.child_req(child("smaller", 32 * MIB)).await.expect("a smaller disk");
    let plain = pb::CreateChildSandboxRequest {
        parent: "lead".into(),
        name: "plain".into(),
        command: sh("exec sleep 600"),
        template: on.template(None),
        ..Default::default()
    };
    a.child_req(plain).await.expect("the parent's disk");
    let sql = h.sql().await;
    let size = |name: &'static str| {
        let sql = &sql;
        async move {
            sql.query_one("SELECT (template->>'disk_bytes')::int8 FROM sandboxes WHERE name = $1", &[&name])
                .await
                .unwrap()
                .get::<_, i64>(0) as u64
        }
    };
    assert_eq!(size("smaller").await, 32 * MIB);
    assert_eq!(size("plain").await, 64 * MIB, "a child gets its parent's disk");
    // The database holds the rule, whoever inserts.
    let e = sql
        .query_one(
            "SELECT os_fit_template('{\"disk_bytes\": 1048576}'::jsonb, '{\"disk_bytes\": 2097152}'::jsonb)",
            &[],
        )
        .await
        .unwrap_err();
    assert!(format!("{e:?}").contains("template.disk_bytes"), "{e:?}");
    // The child's disk really is the smaller one.
    ready(&a, "smaller").await;
    let (_, out, _) = run_in(&a, "smaller", sh(&fill("big", 100 * MIB))).await;
    assert!(out.contains("errno=ENOSPC"), "{out}");
    let written = size_of(&out);
    assert!(written <= 32 * MIB, "the child wrote {written} bytes on a 32 MiB disk: {out}");
}

#[rstest]
#[case::process(Backend::Process)]
#[case::container(Backend::Container)]
#[tokio::test]
async fn a_delete_removes_the_sandboxs_files_and_a_stop_after_the_retention(#[case] on: Backend) {
    let h = Harness::on(on, |o| {
        o.keep_stopped_files = Duration::from_secs(4);
        o.reconcile_interval = 1;
    })
    .await;
    let a = h.admin().await;
    let gone = root(&a, on, "gone", 32 * MIB).await;
    let kept = root(&a, on, "kept", 32 * MIB).await;
    for name in ["gone", "kept"] {
        let (code, out, err) = run_in(&a, name, sh("head -c 5000000 /dev/urandom > data && ls -l data")).await;
        assert_eq!(code, 0, "{out} {err}");
    }
    a.sandboxes().delete_sandbox(a.req(pb::DeleteSandboxRequest { sandbox: "gone".into() })).await.unwrap();
    assert!(left(&h.state.0, &gone.id).is_empty(), "a delete left {:?}", left(&h.state.0, &gone.id));
    a.sandboxes().stop_sandbox(a.req(pb::StopSandboxRequest { sandbox: "kept".into() })).await.unwrap();
    // Kept a while after the stop: its image, unmounted.
    let image = h.state.0.join("disks").join(format!("{}.kept.img", kept.id));
    assert!(image.is_file(), "a stop keeps the files for the retention: {:?}", left(&h.state.0, &kept.id));
    assert!(
        !openshell_disk::mount::is_mounted(&sandbox_root(&h.state.0).join(&kept.id)),
        "a stopped disk is unmounted"
    );
    let removed = eventually(Duration::from_secs(30), || async { left(&h.state.0, &kept.id).is_empty() }).await;
    assert!(removed, "the retention passed and {:?} is still there", left(&h.state.0, &kept.id));
    let status = a.health().get_status(a.req(pb::GetStatusRequest {})).await.unwrap().into_inner();
    let d = status.disk.unwrap();
    assert_eq!((d.running, d.kept), (0, 0), "{d:?}");
}

#[rstest]
#[case::process("process")]
#[case::container("container")]
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn after_a_gateway_sigkill_and_restart_orphaned_files_are_removed(#[case] driver: &str) {
    let state = TempDir::new("openshell-disk");
    if driver == "container" {
        mark_containers(&state.0);
    }
    let config = state.0.join("config.json");
    let db = openshell_testkit::fresh_database().await;
    let listen = format!("127.0.0.1:{}", free_port());
    let host = container_host();
    let mut flags = vec!["--driver", driver, "--reconcile-interval", "1", "--stop-grace", "1", "--default-disk", "32M"];
    if driver == "container" {
        flags.extend(["--container-host", host.as_str()]);
    }
    let on = if driver == "container" { Backend::Container } else { Backend::Process };
    let gw = GatewayProcess::spawn(&db.url, &state.0, &listen, Some(&config), &flags);
    let a = Api::connect(&format!("http://{listen}"), Some(&config_token(&config))).await;
    let doomed = root(&a, on, "doomed", 32 * MIB).await;
    let alive = root(&a, on, "alive", 32 * MIB).await;
    let (code, _, err) = run_in(&a, "doomed", sh("head -c 3000000 /dev/urandom > data")).await;
    assert_eq!(code, 0, "{err}");
    gw.kill9();
    // What a crash leaves: a delete committed whose files were not removed yet, and files of
    // a sandbox no row names at all (another database's, or one never admitted).
    let sql = db.connect().await;
    for phase in ["STOPPING", "STOPPED", "DELETED"] {
        sql.execute("UPDATE sandboxes SET phase = $1 WHERE name = 'doomed'", &[&phase]).await.unwrap();
    }
    let stray = uuid::Uuid::new_v4().to_string();
    std::fs::create_dir_all(sandbox_root(&state.0).join(&stray).join("work")).unwrap();
    std::fs::write(sandbox_root(&state.0).join(&stray).join("work").join("left"), b"x").unwrap();
    std::fs::write(state.0.join("disks").join(format!("{stray}.kept.img")), b"").unwrap();
    let _gw = GatewayProcess::spawn(&db.url, &state.0, &listen, Some(&config), &flags);
    let cleaned = eventually(Duration::from_secs(60), || async {
        left(&state.0, &doomed.id).is_empty() && left(&state.0, &stray).is_empty()
    })
    .await;
    assert!(cleaned, "orphans left: {:?} {:?}", left(&state.0, &doomed.id), left(&state.0, &stray));
    // A live sandbox keeps its files and its disk.
    assert!(ready(&a, "alive").await.phase == "READY");
    let (code, out, _) = run_in(&a, "alive", sh("echo still > here && cat here")).await;
    assert_eq!((code, out.trim()), (0, "still"));
    assert!(state.0.join("disks").join(format!("{}.img", alive.id)).is_file());
}

/// A small ext4 filesystem of the test's own, loop-mounted at a fresh folder: the "nearly
/// full" host disk, never the machine's real one. Unmounted and removed on drop.
struct SmallFs {
    image: PathBuf,
    at: PathBuf,
}

impl SmallFs {
    fn new(bytes: u64) -> (SmallFs, TempDir) {
        let at = TempDir::new("openshell-disk-state");
        let image = PathBuf::from(format!("{}.fs.img", at.0.display()));
        std::fs::File::create(&image).unwrap().set_len(bytes).unwrap();
        let run = |cmd: &mut std::process::Command| {
            let out = cmd.output().unwrap();
            assert!(out.status.success(), "{cmd:?}: {}", String::from_utf8_lossy(&out.stderr));
        };
        run(std::process::Command::new("mkfs.ext4").args(["-q", "-F", "-m", "0"]).arg(&image));
        run(std::process::Command::new("mount").args(["-o", "loop"]).arg(&image).arg(&at.0));
        (SmallFs { image, at: at.0.clone() }, at)
    }
}

impl Drop for SmallFs {
    fn drop(&mut self) {
        unmount_under(&self.at);
        let _ = std::fs::remove_file(&self.image);
    }
}

#[rstest]
#[case::process(Backend::Process)]
#[case::container(Backend::Container)]
#[tokio::test]
async fn on_a_nearly_full_disk_a_create_is_refused_naming_the_disk_and_the_gateway_answers(#[case] on: Backend) {
    let (small, state) = SmallFs::new(512 * MIB);
    let h = Harness::on_in(on, state, |o| {
        o.disk_reserve = 128 * MIB;
        o.default_disk = 64 * MIB;
    })
    .await;
    let a = h.admin().await;
    root(&a, on, "first", 64 * MIB).await;
    // Fill the filesystem until less than the reserve plus one disk is free.
    let filler = small.at.join("filler");
    let room = free(&small.at).saturating_sub(128 * MIB + 32 * MIB);
    std::fs::write(&filler, vec![7u8; room as usize]).unwrap();
    let req = pb::CreateSandboxRequest {
        name: "second".into(),
        command: sh("exec sleep 600"),
        template: disk(on, 64 * MIB),
        ..Default::default()
    };
    let s = refused(a.sandboxes().create_sandbox(a.req(req.clone())).await, "UNAVAILABLE");
    assert!(s.message().contains("disk"), "the refusal names the disk: {s:?}");
    assert_eq!(details(&s).get("resource").map(String::as_str), Some("disk"), "{s:?}");
    // A child is refused the same way; the gateway still answers and the first still runs.
    let child = pb::CreateChildSandboxRequest {
        parent: "first".into(),
        name: "kid".into(),
        command: sh("sleep 600"),
        ..Default::default()
    };
    refused(a.child_req(child).await, "UNAVAILABLE");
    let status = a.health().get_status(a.req(pb::GetStatusRequest {})).await.unwrap().into_inner();
    assert!(status.database_ok && status.disk.is_some(), "{status:?}");
    assert_eq!(a.get("first").await.unwrap().phase, "READY");
    let (code, out, _) = run_in(&a, "first", sh("echo fine")).await;
    assert_eq!((code, out.trim()), (0, "fine"));
    // Room again once the space is back.
    std::fs::remove_file(&filler).unwrap();
    a.sandboxes().create_sandbox(a.req(req)).await.expect("room again");
    ready(&a, "second").await;
    drop(h);
}
