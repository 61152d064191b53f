//! The policy document as written (YAML or JSON): optional fields, unknown fields refused.
//! `validate` turns it into a [`crate::Policy`].

use std::collections::BTreeMap;

use serde::Deserialize;

use crate::model::{AccessPreset, Enforcement, LandlockCompatibility};

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PolicyDoc {
    // Required, as upstream: a file without it is a fragment (proposals take those).
    pub version: u64,
    #[serde(default)]
    pub filesystem_policy: Option<FilesystemDoc>,
    #[serde(default)]
    pub landlock: Option<LandlockDoc>,
    #[serde(default)]
    pub process: Option<ProcessDoc>,
    #[serde(default)]
    pub network_policies: Option<BTreeMap<String, NetworkPolicyDoc>>,
    #[serde(default)]
    pub network_middlewares: Option<BTreeMap<String, MiddlewareDoc>>,
}

/// A supervisor middleware (upstream `network_middlewares`): runs on the traffic of the
/// hosts its selector names.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MiddlewareDoc {
    #[serde(default)]
    pub name: Option<String>,
    #[serde(default)]
    pub middleware: Option<String>,
    #[serde(default)]
    pub order: Option<i64>,
    #[serde(default)]
    pub on_error: Option<String>,
    #[serde(default)]
    pub endpoints: Option<SelectorDoc>,
    /// Owned by the middleware implementation; kept as written.
    #[serde(default)]
    pub config: Option<serde_json::Map<String, serde_json::Value>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SelectorDoc {
    #[serde(default)]
    pub include: Option<Vec<String>>,
    #[serde(default)]
    pub exclude: Option<Vec<String>>,
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
    /// Deprecated upstream and ignored there; accepted with a warning.
    #[serde(default)]
    pub harness: Option<bool>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EndpointDoc {
    /// Optional when `allowed_ips` is given: then any host on the port.
    #[serde(default)]
    pub host: Option<String>,
    #[serde(default)]
    pub path: Option<String>,
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
    #[serde(default)]
    pub tls: Option<String>,
    #[serde(default)]
    pub allowed_ips: Option<Vec<String>>,
    #[serde(default)]
    pub allow_encoded_slash: Option<bool>,
    #[serde(default)]
    pub websocket_credential_rewrite: Option<bool>,
    #[serde(default)]
    pub request_body_credential_rewrite: Option<bool>,
    #[serde(default)]
    pub allow_uninspected_credentials: Option<bool>,
    #[serde(default)]
    pub credential_binding: Option<CredentialBindingDoc>,
    #[serde(default)]
    pub credential_signing: Option<String>,
    #[serde(default)]
    pub signing_service: Option<String>,
    #[serde(default)]
    pub signing_region: Option<String>,
    #[serde(default)]
    pub persisted_queries: Option<String>,
    #[serde(default)]
    pub graphql_persisted_queries: Option<BTreeMap<String, GraphqlOperationDoc>>,
    #[serde(default)]
    pub graphql_max_body_bytes: Option<i64>,
    #[serde(default)]
    pub json_rpc: Option<JsonRpcDoc>,
    #[serde(default)]
    pub mcp: Option<McpDoc>,
}

/// Binds the static credentials of a provider attached upstream to this endpoint.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CredentialBindingDoc {
    pub provider: String,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GraphqlOperationDoc {
    #[serde(default)]
    pub operation_type: Option<String>,
    #[serde(default)]
    pub operation_name: Option<String>,
    #[serde(default)]
    pub fields: Option<Vec<String>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct JsonRpcDoc {
    #[serde(default)]
    pub max_body_bytes: Option<i64>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct McpDoc {
    /// MCP revisions the endpoint accepts.
    #[serde(default)]
    pub versions: Option<Vec<String>>,
    #[serde(default)]
    pub max_body_bytes: Option<i64>,
    #[serde(default)]
    pub strict_tool_names: Option<bool>,
    #[serde(default)]
    pub allow_all_known_mcp_methods: Option<bool>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RuleDoc {
    pub allow: MatchDoc,
}

/// An allow or deny entry: HTTP method and path, query, and the fields of the other L7
/// protocols (SQL `command`, GraphQL operations, MCP `tool` and JSON-RPC `params`).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MatchDoc {
    #[serde(default)]
    pub method: Option<String>,
    #[serde(default)]
    pub path: Option<String>,
    #[serde(default)]
    pub query: Option<BTreeMap<String, MatcherDoc>>,
    #[serde(default)]
    pub command: Option<String>,
    #[serde(default)]
    pub operation_type: Option<String>,
    #[serde(default)]
    pub operation_name: Option<String>,
    #[serde(default)]
    pub fields: Option<Vec<String>>,
    #[serde(default)]
    pub tool: Option<MatcherDoc>,
    #[serde(default)]
    pub params: Option<BTreeMap<String, ParamDoc>>,
}

/// A value matcher: one glob, `{glob: g}`, or `{any: [globs]}`.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub enum MatcherDoc {
    Glob(String),
    Object(MatcherObjectDoc),
}

/// Upstream's object form: exactly one of `glob` and `any`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MatcherObjectDoc {
    #[serde(default)]
    pub glob: Option<String>,
    #[serde(default)]
    pub any: Option<Vec<String>>,
}

/// JSON-RPC params: a matcher, or a nested map of them (flattened to dotted keys).
#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub enum ParamDoc {
    Matcher(MatcherDoc),
    Object(BTreeMap<String, ParamDoc>),
}
