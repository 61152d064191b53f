//! Files of running agent children (GetFile) through the real process driver: the file as it
//! is now, read by the child's supervisor as the child's own user beneath its workdir or a
//! read_write path; traversal, absolute paths outside, symlinks, special files and oversize
//! refused; only the parent (or the tree's user) may read, never a tool child.

use std::time::{Duration, Instant};

use openshell_e2e::*;
use openshell_proto::v1 as pb;
use pb::file_chunk::Chunk;

/// What the agent child leaves in its workdir and /tmp before it loops on a counter.
const SETUP: &str = "set -e
echo hello > note.txt
mkdir -p sub && echo inner > sub/x.txt
ln -s sub sub-link
ln -s /etc/hostname out-link
ln -s /etc etc-dir
ln -s note.txt in-link
mkdir -p /tmp/data && echo tmpdata > /tmp/data/t.txt
mkfifo fifo
truncate -s 20000000 big.bin
echo secret > secret && chmod 000 secret
touch ready
i=0; while true; do i=$((i+1)); echo $i > counter.tmp; mv counter.tmp counter; sleep 0.1; done";

async fn read(api: &Api, sandbox: &str, path: &str, max_bytes: u64) -> Result<(pb::FileInfo, Vec<u8>), tonic::Status> {
    let req = pb::GetFileRequest { sandbox: sandbox.into(), path: path.into(), max_bytes };
    let mut stream = api.sandboxes().get_file(api.req(req)).await?.into_inner();
    let (mut info, mut data) = (None, Vec::new());
    while let Some(chunk) = stream.message().await? {
        match chunk.chunk {
            Some(Chunk::Info(i)) => {
                assert!(info.is_none() && data.is_empty(), "info comes first, once");
                info = Some(i);
            }
            Some(Chunk::Data(d)) => data.extend(d),
            None => {}
        }
    }
    Ok((info.expect("an info chunk"), data))
}

fn text((_, data): (pb::FileInfo, Vec<u8>)) -> String {
    String::from_utf8(data).unwrap()
}

/// A refusal naming the path, with the expected code.
#[track_caller]
fn refused_path(r: Result<(pb::FileInfo, Vec<u8>), tonic::Status>, code: &str, path: &str, why: &str) {
    let s = refused(r, code);
    assert!(s.message().contains(path) && s.message().contains(why), "{path}: {s:?}");
}

async fn ready(a: &Api, name: &str) {
    let up =
        eventually(Duration::from_secs(20), || async { a.get(name).await.is_ok_and(|s| s.phase == "READY") }).await;
    assert!(up, "{name} should be READY: {:?}", a.get(name).await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_parent_reads_its_agent_childs_files_as_the_child_could_and_nothing_else() {
    let h = Harness::process_recording().await;
    let a = h.admin().await;
    a.root("lead", Some(grant(2, 5, 5))).await.unwrap();
    a.root("other", Some(grant(2, 5, 5))).await.unwrap();
    let worker = pb::CreateChildSandboxRequest {
        parent: "lead".into(),
        name: "worker".into(),
        kind: pb::SandboxKind::Agent as i32,
        command: vec!["/bin/bash".into(), "-c".into(), SETUP.into()],
        ..Default::default()
    };
    a.child_req(worker).await.unwrap();
    a.child("lead", "sib", false).await.unwrap();
    a.child("lead", "tool", true).await.unwrap();
    for n in ["lead", "other", "worker", "sib", "tool"] {
        ready(&a, n).await;
    }
    let lead = h.as_sandbox(&a.get("lead").await.unwrap().id, None).await;
    let set_up = eventually(Duration::from_secs(20), || async { read(&a, "worker", "ready", 0).await.is_ok() }).await;
    assert!(set_up, "the agent child set up its files: {:?}", read(&a, "worker", "ready", 0).await);

    // The parent (through its own principal) and the user read it, relative to the
    // workdir or absolute beneath a read_write path; a symlink that stays inside is followed.
    let (info, data) = read(&lead, "worker", "note.txt", 0).await.unwrap();
    assert_eq!((info.size, data.as_slice()), (6, b"hello\n".as_slice()));
    assert_eq!(text(read(&a, "worker", "note.txt", 0).await.unwrap()), "hello\n");
    assert_eq!(text(read(&lead, "worker", "sub/x.txt", 0).await.unwrap()), "inner\n");
    assert_eq!(text(read(&lead, "worker", "sub-link/x.txt", 0).await.unwrap()), "inner\n");
    // /tmp is the child's own private /tmp, not the host's.
    assert_eq!(text(read(&lead, "worker", "/tmp/data/t.txt", 0).await.unwrap()), "tmpdata\n");

    // The file as it is now, while the agent runs.
    let n1: u64 = text(read(&lead, "worker", "counter", 0).await.unwrap()).trim().parse().unwrap();
    tokio::time::sleep(Duration::from_millis(600)).await;
    let n2: u64 = text(read(&lead, "worker", "counter", 0).await.unwrap()).trim().parse().unwrap();
    assert!(n2 > n1, "{n1} then {n2}");

    // Traversal, absolute paths outside, symlinks out, special files: INVALID_ARGUMENT
    // naming the path.
    for (path, why) in [
        ("../../../../etc/passwd", "leads outside"),
        ("sub/../../note.txt", "leads outside"),
        ("/tmp/../etc/passwd", "leads outside"),
        ("/etc/passwd", "not inside"),
        ("/proc/self/environ", "not inside"),
        ("out-link", "symbolic link"),
        ("in-link", "symbolic link"),
        ("etc-dir/hostname", "leads outside"),
        ("sub", "directory"),
        ("/dev/null", "character device"),
    ] {
        refused_path(read(&lead, "worker", path, 0).await, "INVALID_ARGUMENT", path, why);
    }
    let t0 = Instant::now();
    refused_path(read(&lead, "worker", "fifo", 0).await, "INVALID_ARGUMENT", "fifo", "FIFO");
    assert!(t0.elapsed() < Duration::from_secs(5), "opening a FIFO must not wait for a writer");
    // What the child's own user may not read, its supervisor (root) does not read for it.
    refused_path(read(&lead, "worker", "secret", 0).await, "NOT_ALLOWED", "secret", "may not read");
    refused_path(read(&lead, "worker", "missing.txt", 0).await, "NOT_FOUND", "missing.txt", "no such file");

    // Oversize: refused with its size; a larger cap (within the gateway's maximum) reads it.
    let s = refused(read(&lead, "worker", "big.bin", 0).await, "LIMIT_REACHED");
    assert!(s.message().contains("20000000"), "{s:?}");
    assert_eq!(details(&s).get("size").map(String::as_str), Some("20000000"), "{s:?}");
    let (info, data) = read(&lead, "worker", "big.bin", 32 << 20).await.unwrap();
    assert_eq!((info.size, data.len()), (20_000_000, 20_000_000));
    assert!(data.iter().all(|b| *b == 0));
    let s = refused(read(&lead, "worker", "big.bin", 1 << 40).await, "INVALID_ARGUMENT");
    assert_eq!(details(&s).get("field").map(String::as_str), Some("max_bytes"), "{s:?}");
    let s = refused(read(&lead, "worker", "", 0).await, "INVALID_ARGUMENT");
    assert_eq!(details(&s).get("field").map(String::as_str), Some("path"), "{s:?}");

    // The CLI: to standard output, to a file, and a refusal's exit code.
    let cli = |args: Vec<String>| {
        tokio::process::Command::new(bin("openshell"))
            .args(args)
            .env("OPENSHELL_ENDPOINT", &h.endpoint)
            .env("OPENSHELL_TOKEN", &h.admin_token)
            .env_remove("OPENSHELL_CONFIG")
            .output()
    };
    let args = |a: &[&str]| a.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    let out = cli(args(&["sandbox", "download", "worker", "note.txt", "-"])).await.unwrap();
    assert!(out.status.success(), "{out:?}");
    assert_eq!(out.stdout, b"hello\n");
    let dir = TempDir::new("openshell-download");
    let dest = dir.0.join("x.txt");
    let out = cli(args(&["sandbox", "download", "worker", "sub/x.txt", dest.to_str().unwrap()])).await.unwrap();
    assert!(out.status.success(), "{out:?}");
    assert_eq!(std::fs::read_to_string(&dest).unwrap(), "inner\n");
    let out = cli(args(&["sandbox", "download", "worker", "/etc/passwd", "-"])).await.unwrap();
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    assert!(String::from_utf8_lossy(&out.stderr).contains("/etc/passwd"), "{out:?}");
    assert!(out.stdout.is_empty());
    let refused_dest = dir.0.join("big.bin");
    let out = cli(args(&["sandbox", "download", "worker", "big.bin", refused_dest.to_str().unwrap()])).await.unwrap();
    assert_eq!(out.status.code(), Some(5), "{out:?}");
    assert_eq!(std::fs::read_dir(&dir.0).unwrap().count(), 1, "a refused download leaves no file behind");

    // Who may: not a sibling, not another tree, not another user; a tool child is never read.
    let before = count(&h.sql().await, "SELECT count(*) FROM audit_log WHERE action = 'sandbox.get_file'").await;
    let sib = h.as_sandbox(&a.get("sib").await.unwrap().id, None).await;
    let other = h.as_sandbox(&a.get("other").await.unwrap().id, None).await;
    let worker = h.as_sandbox(&a.get("worker").await.unwrap().id, None).await;
    refused(read(&sib, "worker", "note.txt", 0).await, "NOT_ALLOWED");
    refused(read(&worker, "worker", "note.txt", 0).await, "NOT_ALLOWED");
    refused(read(&worker, "lead", "note.txt", 0).await, "NOT_ALLOWED");
    refused(read(&other, "worker", "note.txt", 0).await, "NOT_FOUND");
    let stranger = h.user("mallory").await;
    refused(read(&stranger, "worker", "note.txt", 0).await, "NOT_FOUND");
    let s = refused(read(&lead, "tool", "anything", 0).await, "NOT_ALLOWED");
    assert!(s.message().contains("tool"), "{s:?}");
    refused(read(&a, "tool", "anything", 0).await, "NOT_ALLOWED");
    // Every refusal left a receipt.
    let sql = h.sql().await;
    let after =
        count(&sql, "SELECT count(*) FROM audit_log WHERE action = 'sandbox.get_file' AND outcome = 'refused'").await;
    assert!(after - before >= 7, "receipts: {before} then {after}");
}
