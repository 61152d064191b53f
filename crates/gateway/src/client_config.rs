//! The CLI's configuration file: where the gateway is and the user's token (mode 0600).

use std::os::unix::fs::OpenOptionsExt;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct ClientConfig {
    pub endpoint: String,
    pub user: String,
    pub token: String,
}

/// `$OPENSHELL_CONFIG`, else `$XDG_CONFIG_HOME/openshell/config.json`, else
/// `~/.config/openshell/config.json`.
pub fn path() -> PathBuf {
    if let Some(p) = std::env::var_os("OPENSHELL_CONFIG") {
        return PathBuf::from(p);
    }
    let base = std::env::var_os("XDG_CONFIG_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".config")))
        .unwrap_or_else(|| PathBuf::from("."));
    base.join("openshell").join("config.json")
}

pub fn load() -> std::io::Result<Option<ClientConfig>> {
    match std::fs::read(path()) {
        Ok(bytes) => serde_json::from_slice(&bytes)
            .map(Some)
            .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, format!("{}: {e}", path().display()))),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e),
    }
}

/// Writes the file with mode 0600 (created so, never widened).
pub fn save(config: &ClientConfig) -> std::io::Result<PathBuf> {
    use std::io::Write;
    let path = path();
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    let tmp = path.with_extension("json.tmp");
    let _ = std::fs::remove_file(&tmp);
    let mut f = std::fs::OpenOptions::new().write(true).create_new(true).mode(0o600).open(&tmp)?;
    f.write_all(serde_json::to_string_pretty(config)?.as_bytes())?;
    f.sync_all()?;
    std::fs::rename(&tmp, &path)?;
    Ok(path)
}
