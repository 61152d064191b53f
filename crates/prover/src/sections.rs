//! Filesystem, process and Landlock: exact decisions without a solver (each is a finite
//! comparison), with counterexamples in the matcher's own terms.
//!
//! Filesystem paths are whole subtrees (Landlock grants beneath a path), so a candidate path
//! is within when it equals or lies beneath a boundary path of the same or wider access;
//! that path itself is the counterexample otherwise. Symlinks are not followed here: the
//! supervisor must re-check at start that each granted path, resolved, stays beneath a
//! resolved boundary path, and add the Landlock rule on that same opened file descriptor.

use openshell_policy::{Access, FileMode, Policy, is_beneath};

use crate::verdict::Section;

/// A candidate access the boundary refuses, with the hint.
pub struct Excess {
    pub section: Section,
    pub access: Access,
    pub hint: String,
}

pub fn landlock(boundary: &Policy, candidate: &Policy) -> Option<Excess> {
    let access = Access::WithoutLandlock;
    (candidate.allows(&access) && !boundary.allows(&access)).then(|| Excess {
        section: Section::Landlock,
        access,
        hint: "candidate landlock is best_effort; the boundary requires \
               `compatibility: hard_requirement`"
            .into(),
    })
}

pub fn process(boundary: &Policy, candidate: &Policy) -> Option<Excess> {
    let (c, b) = (&candidate.process, &boundary.process);
    let access = Access::RunAs { user: c.run_as_user.clone(), group: c.run_as_group.clone() };
    (!boundary.allows(&access)).then(|| Excess {
        section: Section::Process,
        access,
        hint: format!(
            "candidate runs as user {} group {}; the boundary allows only user {} group {}",
            c.run_as_user, c.run_as_group, b.run_as_user, b.run_as_group
        ),
    })
}

pub fn filesystem(boundary: &Policy, candidate: &Policy) -> Option<Excess> {
    let fs = &candidate.filesystem_policy;
    let grants =
        fs.read_write.iter().map(|p| (FileMode::Write, p)).chain(fs.read_only.iter().map(|p| (FileMode::Read, p)));
    for (mode, path) in grants {
        let access = Access::File { mode, path: path.clone() };
        if !boundary.allows(&access) {
            let list = if mode == FileMode::Write { "read_write" } else { "read_only" };
            return Some(Excess {
                section: Section::Filesystem,
                access,
                hint: format!("candidate {list} grants {path}; {}", nearest_path(boundary, mode, path)),
            });
        }
    }
    let access = Access::Workdir { mode: FileMode::Write };
    if fs.include_workdir && !boundary.allows(&access) {
        return Some(Excess {
            section: Section::Filesystem,
            access,
            hint: "candidate sets include_workdir; the boundary does not".into(),
        });
    }
    None
}

fn nearest_path(boundary: &Policy, mode: FileMode, path: &str) -> String {
    use openshell_policy::Access::File;
    let fs = &boundary.filesystem_policy;
    if mode == FileMode::Write && boundary.allows(&File { mode: FileMode::Read, path: path.into() }) {
        let root =
            fs.read_only.iter().filter(|r| is_beneath(path, r)).max_by_key(|r| r.len()).cloned().unwrap_or_default();
        return format!("the boundary grants {root} read-only");
    }
    let inner: Vec<&String> = fs.read_only.iter().chain(&fs.read_write).filter(|r| is_beneath(r, path)).collect();
    if inner.is_empty() {
        "the boundary grants nothing at or above it".into()
    } else {
        let names: Vec<&str> = inner.iter().take(3).map(|s| s.as_str()).collect();
        format!("the boundary grants only {} beneath it", names.join(", "))
    }
}
