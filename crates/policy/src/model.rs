//! The validated, normalized policy. Every value here is already canonical (hosts lower-case,
//! `port` folded into `ports`, lists sorted and deduplicated, defaults explicit), so the
//! serialized form of a [`Policy`] *is* its canonical form and `==` means "same policy".

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::document::PolicyDoc;

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "PolicyDoc")]
pub struct Policy {
    /// Always 1.
    pub version: u32,
    pub filesystem_policy: FilesystemPolicy,
    pub landlock: Landlock,
    pub process: Process,
    /// Named rules; a network request is allowed when one of them allows it.
    pub network_policies: BTreeMap<String, NetworkPolicy>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct FilesystemPolicy {
    /// Grants read and write on the sandbox's working directory, wherever it is.
    pub include_workdir: bool,
    /// Absolute paths readable with everything beneath them.
    pub read_only: Vec<String>,
    /// Absolute paths readable and writable with everything beneath them.
    pub read_write: Vec<String>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Landlock {
    pub compatibility: LandlockCompatibility,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LandlockCompatibility {
    /// Apply Landlock when the kernel has it, run without it otherwise.
    #[default]
    BestEffort,
    /// Refuse to start without Landlock.
    HardRequirement,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Process {
    pub run_as_user: String,
    pub run_as_group: String,
}

/// The unprivileged account agents run as when a policy does not name one.
pub const DEFAULT_RUN_AS: &str = "sandbox";

impl Default for Process {
    fn default() -> Self {
        Process { run_as_user: DEFAULT_RUN_AS.into(), run_as_group: DEFAULT_RUN_AS.into() }
    }
}

/// One named network rule: every listed program may reach every listed endpoint.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct NetworkPolicy {
    /// Display name; defaults to the map key.
    pub name: String,
    pub endpoints: Vec<Endpoint>,
    /// Program path globs. A request matches when its program or one of its ancestor
    /// programs matches one of them; an empty list lets no program use the rule.
    pub binaries: Vec<Binary>,
}

#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize)]
pub struct Binary {
    pub path: String,
}

#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize)]
pub struct Endpoint {
    /// Lower-case host or host glob.
    pub host: String,
    /// Sorted, deduplicated, each in 1..=65535.
    pub ports: Vec<u16>,
    pub protocol: Protocol,
    pub enforcement: Enforcement,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub access: Option<AccessPreset>,
    /// Allow rules (only with `rest`; never empty when present).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub rules: Vec<L7Rule>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub deny_rules: Vec<L7Match>,
}

impl Endpoint {
    /// Whether this endpoint grants any traffic to its hosts and ports (L4 authority):
    /// plain TCP, or anything not enforced.
    pub fn is_l4(&self) -> bool {
        self.protocol == Protocol::Tcp || self.enforcement == Enforcement::Audit
    }

    /// Whether HTTP method and path rules decide what passes.
    pub fn is_enforced_rest(&self) -> bool {
        self.protocol == Protocol::Rest && self.enforcement == Enforcement::Enforce
    }

    /// An enforced endpoint of a protocol this crate does not model (e.g. `mcp`): its own
    /// handler decides, and the matcher allows nothing through it.
    pub fn is_opaque(&self) -> bool {
        matches!(self.protocol, Protocol::Other(_)) && self.enforcement == Enforcement::Enforce
    }
}

/// `tcp` (also written as empty) is L4, `rest` is HTTP-aware, anything else is a protocol
/// with its own handler.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub enum Protocol {
    Tcp,
    Rest,
    Other(String),
}

impl Protocol {
    pub fn as_str(&self) -> &str {
        match self {
            Protocol::Tcp => "tcp",
            Protocol::Rest => "rest",
            Protocol::Other(s) => s,
        }
    }
}

impl Serialize for Protocol {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Enforcement {
    /// Log L7 decisions but let all traffic through: L4 authority.
    #[default]
    Audit,
    Enforce,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum AccessPreset {
    /// GET, HEAD, OPTIONS on any path.
    ReadOnly,
    /// Read-only plus POST, PUT, PATCH.
    ReadWrite,
    /// Any method, any path.
    Full,
}

impl AccessPreset {
    /// The methods the preset allows on any path; `None` means any method.
    pub fn methods(self) -> Option<&'static [&'static str]> {
        match self {
            AccessPreset::ReadOnly => Some(&["GET", "HEAD", "OPTIONS"]),
            AccessPreset::ReadWrite => Some(&["GET", "HEAD", "OPTIONS", "POST", "PUT", "PATCH"]),
            AccessPreset::Full => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            AccessPreset::ReadOnly => "read-only",
            AccessPreset::ReadWrite => "read-write",
            AccessPreset::Full => "full",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize)]
pub struct L7Rule {
    pub allow: L7Match,
}

/// An HTTP method (upper-case, or `*` for any) and a URL path glob.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize)]
pub struct L7Match {
    pub method: String,
    pub path: String,
}

/// Method `*` matches any method.
pub const ANY_METHOD: &str = "*";
/// Path glob matching every path.
pub const ANY_PATH: &str = "/**";

impl Default for Policy {
    /// The empty policy: version 1, no filesystem access, no network, default process.
    fn default() -> Self {
        Policy {
            version: 1,
            filesystem_policy: FilesystemPolicy::default(),
            landlock: Landlock::default(),
            process: Process::default(),
            network_policies: BTreeMap::new(),
        }
    }
}
