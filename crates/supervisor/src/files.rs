//! Reading a file of this sandbox for the gateway (GetFile), with no more access than the
//! agent has. The init forks a reader inside the sandbox's namespaces that becomes the
//! sandbox's uid under its Landlock rules, opens the file with `openat2(RESOLVE_BENEATH |
//! RESOLVE_NO_MAGICLINKS, O_NOFOLLOW)` from a descriptor of the allowed root (the workdir or
//! a `read_write` path of the policy), accepts only a regular file within the size cap, and
//! hands the open descriptor to the supervisor, which streams it.

use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::time::Duration;

use nix::fcntl::{AT_FDCWD, OFlag, OpenHow, ResolveFlag, openat2};
use nix::sys::socket::{AddressFamily, SockFlag, SockType, socketpair};
use nix::unistd::{ForkResult, fork};
use openshell_codes::Code;
use openshell_isolation::privileges;
use serde::{Deserialize, Serialize};

use crate::protocol::{self, Spec, ToInit};
use crate::sandbox::Channel;

/// How long the reader may take to answer.
const OPEN_TIMEOUT: Duration = Duration::from_secs(20);

/// The reader's answer, with the open file attached to `Opened`.
#[derive(Debug, Serialize, Deserialize)]
pub enum Reply {
    Opened { path: String, size: u64 },
    Refused { code: String, message: String, details: serde_json::Value },
}

fn refused(code: Code, message: String, details: serde_json::Value) -> Reply {
    Reply::Refused { code: code.as_str().into(), message, details }
}

fn invalid(path: &str, why: impl std::fmt::Display) -> Reply {
    refused(Code::InvalidArgument, format!("path {path}: {why}"), serde_json::json!({ "field": "path", "path": path }))
}

/// Supervisor side: asks the init to open `path`; the open file and its size, or the refusal.
pub async fn open(channel: &Channel, id: u64, path: &str, max_bytes: u64) -> Result<(std::fs::File, Reply), Reply> {
    let unavailable = |e: String| refused(Code::Unavailable, e, serde_json::json!({}));
    let (ours, theirs) = socketpair(AddressFamily::Unix, SockType::Datagram, None, SockFlag::SOCK_CLOEXEC)
        .map_err(|e| unavailable(format!("socketpair: {e}")))?;
    let msg = ToInit::Open { id, path: path.to_string(), max_bytes };
    channel.send(&msg, &[theirs.as_raw_fd()]).await.map_err(|e| unavailable(format!("asking the sandbox: {e}")))?;
    drop(theirs);
    let answer = tokio::task::spawn_blocking(move || {
        let timeout = nix::sys::time::TimeVal::new(OPEN_TIMEOUT.as_secs() as i64, 0);
        let _ = nix::sys::socket::setsockopt(&ours, nix::sys::socket::sockopt::ReceiveTimeout, &timeout);
        protocol::recv::<Reply>(ours.as_fd())
    })
    .await
    .map_err(|e| unavailable(format!("waiting for the sandbox: {e}")))?;
    match answer {
        Ok((reply @ Reply::Opened { .. }, mut fds)) if fds.len() == 1 => {
            Ok((std::fs::File::from(fds.remove(0)), reply))
        }
        Ok((reply @ Reply::Refused { .. }, _)) => Err(reply),
        Ok(_) => Err(unavailable("the sandbox answered without the file".into())),
        Err(e) => Err(unavailable(format!("the sandbox did not open the file: {e}"))),
    }
}

/// Init side: forks the reader, which answers on `reply` and exits. Never blocks the init.
pub fn open_as_agent(spec: &Spec, reply: OwnedFd, path: &str, max_bytes: u64) {
    let answer = |r: Reply, fds: &[i32]| {
        let _ = protocol::send(reply.as_fd(), &r, fds);
    };
    let prepared = match spec.fs.prepare() {
        Ok(p) => p,
        Err(e) => return answer(refused(Code::Unavailable, e.to_string(), serde_json::json!({})), &[]),
    };
    // SAFETY: the init is single-threaded, so the child may do anything before it exits.
    match unsafe { fork() } {
        Ok(ForkResult::Child) => {
            let _ = nix::sys::prctl::set_pdeathsig(nix::sys::signal::Signal::SIGKILL);
            // As the agent: its uid (no capability) and its Landlock rules.
            let setup = privileges::drop_to(spec.uid, spec.gid).and_then(|_| prepared.restrict_self()).map_err(|e| {
                refused(Code::Unavailable, format!("becoming the sandbox's user: {e}"), serde_json::json!({}))
            });
            match setup.and_then(|_| open_beneath(spec, path, max_bytes)) {
                Ok((file, r)) => answer(r, &[file.as_raw_fd()]),
                Err(r) => answer(r, &[]),
            }
            // SAFETY: leave at once, without running the init's exit handlers.
            unsafe { libc::_exit(0) }
        }
        Ok(ForkResult::Parent { .. }) => {}
        Err(e) => answer(refused(Code::Unavailable, format!("fork: {e}"), serde_json::json!({})), &[]),
    }
}

/// The allowed roots: the workdir and the policy's `read_write` paths.
fn roots(spec: &Spec) -> Vec<PathBuf> {
    std::iter::once(spec.workdir.clone()).chain(spec.fs.policy.read_write.iter().map(PathBuf::from)).collect()
}

/// Which root `path` lies in (the longest that contains it) and the rest of it: a relative
/// path is in the workdir. Nothing is resolved here; `..` is left for openat2 to refuse.
pub fn locate(path: &str, workdir: &Path, roots: &[PathBuf]) -> Option<(PathBuf, PathBuf)> {
    let p = Path::new(path);
    if p.is_relative() {
        return Some((workdir.to_path_buf(), p.to_path_buf()));
    }
    let root = roots.iter().filter(|r| r.is_absolute() && p.starts_with(r)).max_by_key(|r| r.components().count())?;
    Some((root.clone(), p.strip_prefix(root).ok()?.to_path_buf()))
}

fn errno_reply(path: &str, root: &Path, e: nix::errno::Errno) -> Reply {
    use nix::errno::Errno;
    match e {
        Errno::EXDEV => invalid(path, format!("leads outside {} (`..` or a symbolic link out)", root.display())),
        Errno::ELOOP => invalid(path, "is a symbolic link (or one to follow through a magic link)"),
        Errno::ENOTDIR => invalid(path, "a part of it is not a directory"),
        Errno::ENXIO | Errno::ENODEV => invalid(path, "not a regular file"),
        Errno::ENOENT => {
            refused(Code::NotFound, format!("path {path}: no such file"), serde_json::json!({ "path": path }))
        }
        Errno::EACCES | Errno::EPERM => refused(
            Code::NotAllowed,
            format!("path {path}: the sandbox's user may not read it"),
            serde_json::json!({ "path": path }),
        ),
        e => invalid(path, e),
    }
}

/// In the reader, as the agent: opens the file beneath its root and checks what it is.
fn open_beneath(spec: &Spec, path: &str, max_bytes: u64) -> Result<(OwnedFd, Reply), Reply> {
    let roots = roots(spec);
    let (root, rest) = locate(path, &spec.workdir, &roots).ok_or_else(|| {
        invalid(path, "not inside the sandbox's working directory or a read_write path of its policy")
    })?;
    let flags = OFlag::O_RDONLY | OFlag::O_NOFOLLOW | OFlag::O_NONBLOCK | OFlag::O_CLOEXEC | OFlag::O_NOCTTY;
    let file = if rest.as_os_str().is_empty() {
        // The root itself (a read_write path may be a file).
        openat2(AT_FDCWD, &root, OpenHow::new().flags(flags).resolve(ResolveFlag::RESOLVE_NO_MAGICLINKS))
    } else {
        let dir = openat2(
            AT_FDCWD,
            &root,
            OpenHow::new()
                .flags(OFlag::O_PATH | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC)
                .resolve(ResolveFlag::RESOLVE_NO_MAGICLINKS),
        )
        .map_err(|e| errno_reply(path, &root, e))?;
        let how = ResolveFlag::RESOLVE_BENEATH | ResolveFlag::RESOLVE_NO_MAGICLINKS;
        openat2(dir, &rest, OpenHow::new().flags(flags).resolve(how))
    }
    .map_err(|e| errno_reply(path, &root, e))?;
    let st = nix::sys::stat::fstat(file.as_fd()).map_err(|e| errno_reply(path, &root, e))?;
    let kind = match st.st_mode & libc::S_IFMT {
        libc::S_IFREG => None,
        libc::S_IFDIR => Some("a directory"),
        libc::S_IFIFO => Some("a FIFO"),
        libc::S_IFCHR => Some("a character device"),
        libc::S_IFBLK => Some("a block device"),
        libc::S_IFSOCK => Some("a socket"),
        _ => Some("not a regular file"),
    };
    if let Some(kind) = kind {
        return Err(invalid(path, format!("is {kind}; only regular files can be read")));
    }
    let size = st.st_size.max(0) as u64;
    if size > max_bytes {
        return Err(refused(
            Code::LimitReached,
            format!("path {path}: the file is {size} bytes, more than max_bytes {max_bytes}"),
            serde_json::json!({ "limit": "max_bytes", "size": size, "max_bytes": max_bytes, "path": path }),
        ));
    }
    Ok((file, Reply::Opened { path: path.to_string(), size }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn locate_picks_the_longest_root_and_leaves_dotdot_to_openat2() {
        let roots = vec![PathBuf::from("/work"), PathBuf::from("/tmp"), PathBuf::from("/tmp/deep")];
        let w = Path::new("/work");
        assert_eq!(locate("a/b", w, &roots), Some((PathBuf::from("/work"), PathBuf::from("a/b"))));
        assert_eq!(locate("/tmp/deep/x", w, &roots), Some((PathBuf::from("/tmp/deep"), PathBuf::from("x"))));
        assert_eq!(
            locate("/tmp/../etc/passwd", w, &roots),
            Some((PathBuf::from("/tmp"), PathBuf::from("../etc/passwd")))
        );
        assert_eq!(locate("/tmpx/a", w, &roots), None);
        assert_eq!(locate("/etc/passwd", w, &roots), None);
        assert_eq!(locate("/tmp", w, &roots), Some((PathBuf::from("/tmp"), PathBuf::new())));
    }
}
