//! The supervisor binary is trusted with every sandbox credential, so it must be one that
//! only root (or the gateway's own user) could have put there.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use crate::DriverError;

/// Resolves `path` and checks that it and every folder above it are owned by root or by
/// this process's user and writable by no one else. A sticky folder (such as /tmp) may be
/// world-writable: no one else can rename or remove what root or we own inside it, and what
/// is inside is checked in turn. Returns the resolved path to execute.
pub fn trusted(path: &Path) -> Result<PathBuf, DriverError> {
    let real =
        std::fs::canonicalize(path).map_err(|e| DriverError(format!("supervisor binary {}: {e}", path.display())))?;
    let me = nix::unistd::geteuid().as_raw();
    let meta =
        std::fs::metadata(&real).map_err(|e| DriverError(format!("supervisor binary {}: {e}", real.display())))?;
    if !meta.is_file() || meta.mode() & 0o111 == 0 {
        return Err(DriverError(format!("supervisor binary {} is not an executable file", real.display())));
    }
    for p in real.ancestors() {
        let m = std::fs::metadata(p).map_err(|e| DriverError(format!("{}: {e}", p.display())))?;
        if m.uid() != 0 && m.uid() != me {
            return Err(DriverError(format!(
                "refusing the supervisor binary {}: {} is owned by uid {}, not root or this gateway's user",
                real.display(),
                p.display(),
                m.uid()
            )));
        }
        let sticky_folder = m.is_dir() && m.mode() & 0o1000 != 0;
        if m.mode() & 0o022 != 0 && !sticky_folder {
            return Err(DriverError(format!(
                "refusing the supervisor binary {}: {} is writable by group or others (mode {:o})",
                real.display(),
                p.display(),
                m.mode() & 0o7777
            )));
        }
    }
    Ok(real)
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt;

    use super::*;

    #[test]
    fn a_binary_others_could_replace_is_refused() {
        let dir = std::env::temp_dir().join(format!("os-bin-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
        let bin = dir.join("sup");
        std::fs::write(&bin, b"#!/bin/sh\n").unwrap();
        std::fs::set_permissions(&bin, std::fs::Permissions::from_mode(0o755)).unwrap();
        // Under the sticky /tmp, in a folder of our own: accepted.
        assert!(trusted(&bin).is_ok(), "{:?}", trusted(&bin));
        // A folder anyone may write to (not sticky): anyone could swap the binary.
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o777)).unwrap();
        let err = trusted(&bin).unwrap_err().to_string();
        assert!(err.contains("writable by group or others"), "{err}");
        // The binary itself writable by others.
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
        std::fs::set_permissions(&bin, std::fs::Permissions::from_mode(0o777)).unwrap();
        assert!(trusted(&bin).is_err());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_root_owned_binary_in_root_owned_folders_is_accepted() {
        assert!(trusted(Path::new("/usr/bin/env")).is_ok());
        assert!(trusted(Path::new("/nonexistent/supervisor")).is_err());
    }
}
