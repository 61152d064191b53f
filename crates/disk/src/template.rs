//! Formatted empty filesystems, one per size, made once with `mkfs.ext4` and copied for each
//! sandbox: a copy moves only the few hundred KiB mkfs wrote (the rest of the image is a hole),
//! so a sandbox's disk costs a sparse copy instead of a 15-40 ms mkfs.
//!
//! The filesystem: ext4 without a journal (a sandbox's disk never outlives a host crash: the
//! reconciler removes it), no blocks reserved for root (the limit is what the agent can write),
//! no online-resize reserve, inode tables left for the kernel to treat as unused
//! (`lazy_itable_init`, mounted `noinit_itable`, so nothing zeroes them into the host's disk).

use std::fs::File;
use std::io::{Seek, SeekFrom};
use std::os::fd::{AsFd, AsRawFd};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::SystemTime;

use crate::DiskError;

/// Templates kept at once (the least recently used beyond it are removed).
const KEPT: usize = 16;

/// `mkfs.ext4` on this host: PATH first, then the sbin folders a non-login PATH lacks.
pub fn mkfs() -> Result<PathBuf, DiskError> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain(["/usr/sbin", "/sbin"].map(PathBuf::from))
        .map(|d| d.join("mkfs.ext4"))
        .find(|p| p.is_file())
        .ok_or_else(|| DiskError("mkfs.ext4 not found (install e2fsprogs)".into()))
}

fn err(what: impl std::fmt::Display, e: impl std::fmt::Display) -> DiskError {
    DiskError(format!("{what}: {e}"))
}

/// The template of `bytes` in `dir`, made now if missing. Two gateways making the same one at
/// once each write their own and rename it into place: either copy is a whole template.
pub fn template(dir: &Path, mkfs: &Path, bytes: u64) -> Result<PathBuf, DiskError> {
    let path = dir.join(format!("ext4-{bytes}.img"));
    if path.is_file() {
        // Its use time, for the eviction below.
        let _ = File::options().write(true).open(&path).and_then(|f| f.set_modified(SystemTime::now()));
        return Ok(path);
    }
    let tmp = dir.join(format!(".ext4-{bytes}.{}.tmp", std::process::id()));
    let _ = std::fs::remove_file(&tmp);
    let made = (|| {
        let f = File::options()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW)
            .open(&tmp)
            .map_err(|e| err(tmp.display(), e))?;
        f.set_len(bytes).map_err(|e| err(tmp.display(), e))?;
        drop(f);
        let out = Command::new(mkfs)
            .args(["-q", "-F", "-m", "0", "-L", "openshell"])
            .args(["-O", "^has_journal,^resize_inode"])
            .args(["-E", "lazy_itable_init=1,nodiscard,root_owner=0:0"])
            .arg(&tmp)
            .stdin(Stdio::null())
            .output()
            .map_err(|e| err(mkfs.display(), e))?;
        if !out.status.success() {
            return Err(DiskError(format!(
                "{} of {bytes} bytes failed ({}): {}",
                mkfs.display(),
                out.status,
                String::from_utf8_lossy(&out.stderr).trim()
            )));
        }
        std::fs::rename(&tmp, &path).map_err(|e| err(path.display(), e))
    })();
    if made.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    made?;
    evict(dir);
    Ok(path)
}

/// Keeps the [`KEPT`] most recently used templates.
fn evict(dir: &Path) {
    let mut found: Vec<(SystemTime, PathBuf)> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| e.file_name().to_str().is_some_and(|n| n.starts_with("ext4-") && n.ends_with(".img")))
        .filter_map(|e| Some((e.metadata().ok()?.modified().ok()?, e.path())))
        .collect();
    found.sort_by_key(|f| std::cmp::Reverse(f.0));
    for (_, old) in found.into_iter().skip(KEPT) {
        let _ = std::fs::remove_file(old);
    }
}

/// Copies `from` to a new file `to` (0600, never through a symlink), keeping its holes: only
/// the data segments (`SEEK_DATA`/`SEEK_HOLE`) are copied, with `copy_file_range`.
pub fn sparse_copy(from: &Path, to: &Path) -> Result<(), DiskError> {
    let mut src = File::open(from).map_err(|e| err(from.display(), e))?;
    let len = src.metadata().map_err(|e| err(from.display(), e))?.len();
    let dst = File::options()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW)
        .open(to)
        .map_err(|e| err(to.display(), e))?;
    let copied = (|| {
        dst.set_len(len)?;
        let mut at = 0u64;
        while at < len {
            let data = match nix::unistd::lseek(src.as_fd(), at as i64, nix::unistd::Whence::SeekData) {
                Ok(o) => o as u64,
                // Nothing but a hole from here on.
                Err(nix::errno::Errno::ENXIO) => break,
                Err(e) => return Err(std::io::Error::from(e)),
            };
            let hole = nix::unistd::lseek(src.as_fd(), data as i64, nix::unistd::Whence::SeekHole)? as u64;
            let (mut off_in, mut off_out) = (data as i64, data as i64);
            let mut left = (hole - data) as usize;
            while left > 0 {
                // SAFETY: both descriptors are open files of ours; the kernel updates the offsets.
                let n = unsafe {
                    libc::copy_file_range(src.as_raw_fd(), &mut off_in, dst.as_raw_fd(), &mut off_out, left, 0)
                };
                if n < 0 {
                    return Err(std::io::Error::last_os_error());
                }
                let n = n as usize;
                if n == 0 {
                    return Err(std::io::Error::other("the template ended early"));
                }
                left -= n;
            }
            at = hole;
        }
        src.seek(SeekFrom::Start(0)).map(drop)
    })();
    copied.map_err(|e| {
        let _ = std::fs::remove_file(to);
        err(format!("copying {} to {}", from.display(), to.display()), e)
    })
}

#[cfg(test)]
mod tests {
    use std::io::{Read, Write};
    use std::os::unix::fs::MetadataExt;

    use super::*;

    #[test]
    fn a_sparse_copy_keeps_the_data_and_the_holes() {
        let dir = std::env::temp_dir().join(format!("os-disk-sparse-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let (a, b) = (dir.join("a"), dir.join("b"));
        let mut f = File::create(&a).unwrap();
        f.set_len(64 << 20).unwrap();
        for at in [0u64, 10 << 20, (64 << 20) - 4096] {
            f.seek(SeekFrom::Start(at)).unwrap();
            f.write_all(&[0xa5; 4096]).unwrap();
        }
        drop(f);
        sparse_copy(&a, &b).unwrap();
        let (ma, mb) = (std::fs::metadata(&a).unwrap(), std::fs::metadata(&b).unwrap());
        assert_eq!(ma.len(), mb.len());
        assert!(mb.blocks() * 512 < 1 << 20, "the copy allocated {} bytes", mb.blocks() * 512);
        let (mut x, mut y) = (Vec::new(), Vec::new());
        File::open(&a).unwrap().read_to_end(&mut x).unwrap();
        File::open(&b).unwrap().read_to_end(&mut y).unwrap();
        assert!(x == y, "the copy differs");
        assert!(sparse_copy(&a, &b).is_err(), "an existing file is never overwritten");
        std::fs::remove_dir_all(dir).unwrap();
    }
}
