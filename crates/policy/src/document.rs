//! The policy document as written (YAML or JSON): optional fields, unknown fields refused.
//! `validate` turns it into a [`crate::Policy`].

use std::collections::BTreeMap;

use serde::Deserialize;

use crate::model::{AccessPreset, Enforcement, LandlockCompatibility};

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PolicyDoc {
    pub version: u64,
    #[serde(default)]
    pub filesystem_policy: Option<FilesystemDoc>,
    #[serde(default)]
    pub landlock: Option<LandlockDoc>,
    #[serde(default)]
    pub process: Option<ProcessDoc>,
    #[serde(default)]
    pub network_policies: Option<BTreeMap<String, NetworkPolicyDoc>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FilesystemDoc {
    #[serde(default)]
    pub include_workdir: Option<bool>,
    #[serde(default)]
    pub read_only: Option<Vec<String>>,
    #[serde(default)]
    pub read_write: Option<Vec<String>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LandlockDoc {
    #[serde(default)]
    pub compatibility: Option<LandlockCompatibility>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProcessDoc {
    #[serde(default)]
    pub run_as_user: Option<String>,
    #[serde(default)]
    pub run_as_group: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NetworkPolicyDoc {
    #[serde(default)]
    pub name: Option<String>,
    #[serde(default)]
    pub endpoints: Option<Vec<EndpointDoc>>,
    #[serde(default)]
    pub binaries: Option<Vec<BinaryDoc>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BinaryDoc {
    pub path: String,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EndpointDoc {
    pub host: String,
    // Wider than u16 so an out-of-range port gets our message, not a type error.
    #[serde(default)]
    pub port: Option<i64>,
    #[serde(default)]
    pub ports: Option<Vec<i64>>,
    #[serde(default)]
    pub protocol: Option<String>,
    #[serde(default)]
    pub enforcement: Option<Enforcement>,
    #[serde(default)]
    pub access: Option<AccessPreset>,
    #[serde(default)]
    pub rules: Option<Vec<RuleDoc>>,
    #[serde(default)]
    pub deny_rules: Option<Vec<MatchDoc>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RuleDoc {
    pub allow: MatchDoc,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MatchDoc {
    #[serde(default)]
    pub method: Option<String>,
    #[serde(default)]
    pub path: Option<String>,
}
