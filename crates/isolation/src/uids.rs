//! Per-sandbox uids from a configured range. A live sandbox holds an exclusive lock on its
//! uid's lock file (in its supervisor, for the supervisor's whole life), so two live
//! sandboxes never share a uid, across gateway restarts and without any table to repair.

use std::fs::File;
use std::os::fd::AsRawFd;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;
use std::str::FromStr;

use crate::IsolationError;

/// A contiguous range of uids (and the gids of the same numbers).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UidRange {
    pub first: u32,
    pub count: u32,
}

/// Far above any account a host creates (and below 2^31, which some tools treat as signed).
pub const DEFAULT_RANGE: UidRange = UidRange { first: 2_000_000_000, count: 65_536 };

impl FromStr for UidRange {
    type Err = String;

    /// `FIRST-LAST`, inclusive.
    fn from_str(s: &str) -> Result<UidRange, String> {
        let (a, b) = s.split_once('-').ok_or("expected FIRST-LAST, e.g. 2000000000-2000065535")?;
        let first: u32 = a.trim().parse().map_err(|_| format!("{a:?} is not a uid"))?;
        let last: u32 = b.trim().parse().map_err(|_| format!("{b:?} is not a uid"))?;
        if first == 0 || last < first || last >= u32::MAX - 1 {
            return Err("the range must be non-empty, exclude 0 (root) and end below 4294967294".into());
        }
        Ok(UidRange { first, count: last - first + 1 })
    }
}

impl std::fmt::Display for UidRange {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}-{}", self.first, self.first + (self.count - 1))
    }
}

impl UidRange {
    fn contains(&self, id: u32) -> bool {
        id >= self.first && id - self.first < self.count
    }

    /// Refuses a range that overlaps an account or group of this host (`/etc/passwd`,
    /// `/etc/group`): an agent must never act as one of them.
    pub fn check_unused(&self) -> Result<(), IsolationError> {
        for file in ["/etc/passwd", "/etc/group"] {
            let text = std::fs::read_to_string(file).unwrap_or_default();
            for line in text.lines() {
                let id = line.split(':').nth(2).and_then(|v| v.parse::<u32>().ok());
                if let Some(id) = id.filter(|id| self.contains(*id)) {
                    let name = line.split(':').next().unwrap_or("");
                    return Err(IsolationError(format!(
                        "--sandbox-uid-range {self} contains {name} ({id}) from {file}: choose a range no account uses"
                    )));
                }
            }
        }
        Ok(())
    }
}

/// A uid held for one sandbox while this file (or a copy of its descriptor) stays open.
#[derive(Debug)]
pub struct UidLease {
    pub uid: u32,
    pub file: File,
}

/// Takes a free uid from `range`, starting at a random place. Lock files live in `dir`
/// (mode 0700, each file 0600, never followed through a symlink).
pub fn allocate(dir: &Path, range: UidRange) -> Result<UidLease, IsolationError> {
    std::fs::create_dir_all(dir).map_err(|e| IsolationError::io(dir.display(), e))?;
    std::fs::set_permissions(dir, std::os::unix::fs::PermissionsExt::from_mode(0o700))
        .map_err(|e| IsolationError::io(dir.display(), e))?;
    let mut seed = [0u8; 4];
    getrandom_fill(&mut seed);
    let start = u32::from_le_bytes(seed) % range.count;
    for i in 0..range.count {
        let uid = range.first + (start + i) % range.count;
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(dir.join(uid.to_string()))
            .map_err(|e| IsolationError::io(format!("uid lock file in {}", dir.display()), e))?;
        // SAFETY: flock on a descriptor we own.
        if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } == 0 {
            return Ok(UidLease { uid, file });
        }
    }
    Err(IsolationError(format!("every uid in {range} is held by a live sandbox")))
}

fn getrandom_fill(buf: &mut [u8]) {
    // SAFETY: getrandom writes at most buf.len() bytes into buf.
    let _ = unsafe { libc::getrandom(buf.as_mut_ptr().cast(), buf.len(), 0) };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_parse_and_refuse_root_and_empty() {
        assert_eq!("10-19".parse::<UidRange>().unwrap(), UidRange { first: 10, count: 10 });
        assert!("0-10".parse::<UidRange>().is_err());
        assert!("20-10".parse::<UidRange>().is_err());
        assert!("10".parse::<UidRange>().is_err());
        assert!("0-4294967295".parse::<UidRange>().is_err());
        assert!(UidRange { first: 0, count: 10 }.check_unused().is_err(), "root is an account");
    }

    #[test]
    fn two_leases_never_share_a_uid_and_a_released_one_is_reused() {
        let dir = std::env::temp_dir().join(format!("os-uids-{}", std::process::id()));
        let range = UidRange { first: 3_000_000_000, count: 2 };
        let a = allocate(&dir, range).unwrap();
        let b = allocate(&dir, range).unwrap();
        assert_ne!(a.uid, b.uid);
        assert!(allocate(&dir, range).is_err(), "the range is exhausted while both live");
        let freed = a.uid;
        drop(a);
        assert_eq!(allocate(&dir, range).unwrap().uid, freed);
        let _ = std::fs::remove_dir_all(dir);
    }
}
