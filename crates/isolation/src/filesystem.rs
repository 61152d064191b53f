//! Landlock rules from a policy's `filesystem_policy`, with every granted path resolved first.
//!
//! The prover proves paths as written, so a granted path that is a symlink could point
//! anywhere. Each path is opened with `openat2(O_PATH, RESOLVE_NO_MAGICLINKS)`, its resolved
//! location is checked against the resolved paths of the boundary it was proved within, and
//! the Landlock rule is added on that same descriptor, so nothing can swap the path between
//! the check and the rule.

use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::path::{Path, PathBuf};

use landlock::{
    ABI, Access, AccessFs, CompatLevel, Compatible, PathBeneath, Ruleset, RulesetAttr, RulesetCreatedAttr,
    RulesetStatus, Scope,
};
use nix::fcntl::{AT_FDCWD, OFlag, OpenHow, ResolveFlag, openat2};
use openshell_policy::{FilesystemPolicy, LandlockCompatibility};

use serde::{Deserialize, Serialize};

use crate::IsolationError;

/// The newest Landlock ABI whose rights we ask for (best effort beyond `NEEDED`).
const WANTED: ABI = ABI::V6;
/// The ABI whose rights `hard_requirement` needs: a read-only path must not be truncated
/// (ABI 3), nor a file moved in or out of a folder the policy names (ABI 2).
const NEEDED: ABI = ABI::V3;

/// Granted paths as a policy writes them.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Paths {
    pub read_only: Vec<String>,
    pub read_write: Vec<String>,
}

impl From<&FilesystemPolicy> for Paths {
    fn from(fs: &FilesystemPolicy) -> Paths {
        Paths { read_only: fs.read_only.clone(), read_write: fs.read_write.clone() }
    }
}

/// What one sandbox may touch on disk.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct FsRules {
    /// The sandbox's own policy's paths.
    pub policy: Paths,
    pub include_workdir: bool,
    pub compatibility: LandlockCompatibility,
    /// Its working directory (granted read-write when the policy includes it).
    pub workdir: PathBuf,
    /// Files the runtime itself provides to the agent read-only (the CA bundle).
    pub runtime_read: Vec<PathBuf>,
    /// What the policy was proved within: every resolved path must lie beneath a resolved
    /// path that each of these grants (the parent's policy, the global maximum).
    pub boundaries: Vec<Paths>,
}

/// One path ready for a rule: its descriptor and whether it may be written.
pub struct Opened {
    fd: OwnedFd,
    write: bool,
    dir: bool,
}

/// Granted paths opened and checked; `skipped` lists those that do not exist here.
pub struct Prepared {
    opened: Vec<Opened>,
    pub skipped: Vec<String>,
    compatibility: LandlockCompatibility,
}

fn open_path(path: &Path) -> nix::Result<OwnedFd> {
    openat2(
        AT_FDCWD,
        path,
        OpenHow::new().flags(OFlag::O_PATH | OFlag::O_CLOEXEC).resolve(ResolveFlag::RESOLVE_NO_MAGICLINKS),
    )
}

/// Where an open descriptor really is.
fn resolved(fd: &OwnedFd) -> Result<PathBuf, IsolationError> {
    std::fs::read_link(format!("/proc/self/fd/{}", fd.as_raw_fd()))
        .map_err(|e| IsolationError::io("resolving a granted path through /proc/self/fd", e))
}

fn beneath(path: &Path, root: &Path) -> bool {
    path.starts_with(root)
}

/// Resolved roots a boundary grants, for reading (`write == false`) or writing.
fn boundary_roots(b: &Paths, write: bool) -> Vec<PathBuf> {
    let mut paths: Vec<&String> = b.read_write.iter().collect();
    if !write {
        paths.extend(b.read_only.iter());
    }
    paths.into_iter().filter_map(|p| std::fs::canonicalize(p).ok()).collect()
}

impl FsRules {
    /// Opens and checks every granted path. A path that resolves outside its boundary
    /// refuses the start, naming both paths.
    pub fn prepare(&self) -> Result<Prepared, IsolationError> {
        let fs = &self.policy;
        let mut opened = Vec::new();
        let mut skipped = Vec::new();
        let granted = fs.read_only.iter().map(|p| (p, false)).chain(fs.read_write.iter().map(|p| (p, true)));
        for (path, write) in granted {
            let field = if write { "read_write" } else { "read_only" };
            let fd = match open_path(Path::new(path)) {
                Ok(fd) => fd,
                Err(nix::errno::Errno::ENOENT) => {
                    skipped.push(path.clone());
                    continue;
                }
                Err(e) => return Err(IsolationError(format!("filesystem_policy.{field} {path}: {e}"))),
            };
            let real = resolved(&fd)?;
            for b in &self.boundaries {
                if !boundary_roots(b, write).iter().any(|root| beneath(&real, root)) {
                    return Err(IsolationError(format!(
                        "filesystem_policy.{field} {path} resolves to {}, outside what its boundary grants",
                        real.display()
                    )));
                }
            }
            opened.push(Opened { dir: is_dir(&fd), fd, write });
        }
        // The runtime's own paths: created by the driver, not by the policy's author.
        let own = (self.include_workdir.then_some((&self.workdir, true)).into_iter())
            .chain(self.runtime_read.iter().map(|p| (p, false)));
        for (path, write) in own {
            let fd = open_path(path).map_err(|e| IsolationError(format!("{}: {e}", path.display())))?;
            opened.push(Opened { dir: is_dir(&fd), fd, write });
        }
        Ok(Prepared { opened, skipped, compatibility: self.compatibility })
    }
}

fn is_dir(fd: &OwnedFd) -> bool {
    nix::sys::stat::fstat(fd.as_fd()).is_ok_and(|s| s.st_mode & libc::S_IFMT == libc::S_IFDIR)
}

/// What Landlock enforced, for the sandbox's status.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LandlockReport {
    /// `enforced`, `partially enforced` or `not enforced`.
    pub state: String,
    /// Why it is not fully enforced, when it is not.
    pub detail: String,
}

impl Prepared {
    /// Restricts the calling thread (and everything it execs) to the prepared paths. With
    /// `hard_requirement` anything less than full enforcement of the filesystem rules is an
    /// error; with `best_effort` the report says what the kernel could not apply.
    pub fn restrict_self(self) -> Result<LandlockReport, IsolationError> {
        let hard = self.compatibility == LandlockCompatibility::HardRequirement;
        let fail = |e: landlock::RulesetError| IsolationError(format!("Landlock: {e}"));
        let first = if hard { CompatLevel::HardRequirement } else { CompatLevel::BestEffort };
        let mut ruleset = Ruleset::default()
            .set_compatibility(first)
            .handle_access(AccessFs::from_all(if hard { NEEDED } else { ABI::V1 }))
            .map_err(|e| IsolationError(format!("Landlock (hard_requirement needs ABI {NEEDED:?}): {e}")))?
            .set_compatibility(CompatLevel::BestEffort)
            .handle_access(AccessFs::from_all(WANTED))
            .map_err(fail)?
            // Signals and abstract unix sockets stay within the sandbox's own domain.
            .scope(Scope::from_all(WANTED))
            .map_err(fail)?
            .create()
            .map_err(fail)?;
        for o in self.opened {
            let mut access = if o.write { AccessFs::from_all(WANTED) } else { AccessFs::from_read(WANTED) };
            if !o.dir {
                access &= AccessFs::from_file(WANTED);
            }
            ruleset = ruleset.add_rule(PathBeneath::new(o.fd, access)).map_err(fail)?;
        }
        let status = ruleset.restrict_self().map_err(fail)?;
        let (state, detail) = match status.ruleset {
            RulesetStatus::FullyEnforced => ("enforced", String::new()),
            RulesetStatus::PartiallyEnforced => (
                "partially enforced",
                format!("the kernel's Landlock lacks some rights of ABI {WANTED:?}: {:?}", status.landlock),
            ),
            RulesetStatus::NotEnforced => {
                ("not enforced", format!("the kernel has no usable Landlock: {:?}", status.landlock))
            }
        };
        if hard && status.ruleset == RulesetStatus::NotEnforced {
            return Err(IsolationError(format!("landlock.compatibility is hard_requirement, but {detail}")));
        }
        Ok(LandlockReport { state: state.into(), detail })
    }
}
