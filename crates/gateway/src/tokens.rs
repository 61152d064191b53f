//! Bearer tokens: minted from the OS random source, stored only as SHA-256.

use sha2::{Digest, Sha256};

/// Prefix of a user's login token.
pub const USER_PREFIX: &str = "osu_";
/// Prefix of a sandbox credential (held by its supervisor only).
pub const SANDBOX_PREFIX: &str = "oss_";
/// Prefix of a door credential (audience `urn:openshell:gateway-mcp`; held by a supervisor
/// for its in-sandbox MCP door, short-lived).
pub const DOOR_PREFIX: &str = "osd_";
/// The audience a door credential is for: the gateway's MCP endpoint, nothing else.
pub const DOOR_AUDIENCE: &str = "urn:openshell:gateway-mcp";

/// A new token: prefix + 256 random bits in hex.
pub fn mint(prefix: &str) -> Result<String, getrandom::Error> {
    let mut b = [0u8; 32];
    getrandom::fill(&mut b)?;
    Ok(format!("{prefix}{}", hex::encode(b)))
}

pub fn hash(token: &str) -> [u8; 32] {
    Sha256::digest(token.as_bytes()).into()
}
