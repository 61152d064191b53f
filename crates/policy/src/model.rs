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
    /// Supervisor middlewares by name. This proxy runs none: traffic to a host that a
    /// middleware selects is denied unless the middleware says `on_error: fail_open`.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub network_middlewares: BTreeMap<String, Middleware>,
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

#[derive(Debug, Clone, Default, PartialEq, Eq, PartialOrd, Ord, Serialize)]
pub struct Endpoint {
    /// Lower-case host or host glob; empty only with `allowed_ips` (any host on the port).
    #[serde(skip_serializing_if = "String::is_empty")]
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
    // New fields below: each is skipped when default, so policies that do not use them keep
    // their canonical JSON and hash, and they sort after the old fields.
    /// A URL path glob the endpoint is limited to: only HTTP requests on it match.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    #[serde(skip_serializing_if = "Tls::is_default")]
    pub tls: Tls,
    /// Resolved addresses the connection may go to (sorted, deduplicated networks). When
    /// set, a request matches only with a known address inside one of them.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub allowed_ips: Vec<IpNet>,
    /// Credential handling and the settings of the other L7 protocols.
    #[serde(flatten)]
    pub options: EndpointOptions,
}

/// How the proxy treats TLS on an endpoint. It never changes which requests the matcher
/// allows: with `skip` the proxy sees no HTTP inside TLS, so only L4 authority passes it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Tls {
    /// Detect TLS and terminate it where L7 rules apply.
    #[default]
    Auto,
    /// Never terminate: the traffic stays opaque to the proxy.
    Skip,
}

impl Tls {
    pub fn is_default(&self) -> bool {
        *self == Tls::Auto
    }
}

/// An IPv4 or IPv6 network: the address with its host bits cleared, and the prefix length.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct IpNet {
    pub addr: std::net::IpAddr,
    pub prefix: u8,
}

impl IpNet {
    /// Whether the address lies in the network (IPv4-mapped IPv6 counts as IPv4).
    pub fn contains(&self, addr: &std::net::IpAddr) -> bool {
        let (lo, hi) = self.range();
        let a = crate::ip::to_u128(&addr.to_canonical());
        crate::ip::same_family(&self.addr, &addr.to_canonical()) && lo <= a && a <= hi
    }

    /// First and last address, as numbers within the family.
    pub fn range(&self) -> (u128, u128) {
        crate::ip::range(self)
    }
}

impl std::fmt::Display for IpNet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.addr, self.prefix)
    }
}

impl Serialize for IpNet {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

fn is_false(b: &bool) -> bool {
    !*b
}

/// Endpoint settings beyond host, port and HTTP rules. Each is skipped when unset.
#[derive(Debug, Clone, Default, PartialEq, Eq, PartialOrd, Ord, Serialize)]
pub struct EndpointOptions {
    /// Keep `%2F` inside path segments instead of refusing the request (proxy-side).
    #[serde(skip_serializing_if = "is_false")]
    pub allow_encoded_slash: bool,
    #[serde(skip_serializing_if = "is_false")]
    pub websocket_credential_rewrite: bool,
    #[serde(skip_serializing_if = "is_false")]
    pub request_body_credential_rewrite: bool,
    #[serde(skip_serializing_if = "is_false")]
    pub allow_uninspected_credentials: bool,
    /// Upstream injects the static credentials of this attached provider; this gateway
    /// has no providers, so the proxy cannot honour it (an enforced endpoint with it
    /// allows nothing).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub credential_binding: Option<CredentialBinding>,
    /// `sigv4`, `sigv4:body` or `sigv4:no_body`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub credential_signing: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub signing_service: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub signing_region: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub persisted_queries: Option<String>,
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub graphql_persisted_queries: BTreeMap<String, GraphqlOperation>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub graphql_max_body_bytes: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub json_rpc: Option<JsonRpcOptions>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mcp: Option<McpOptions>,
}

impl EndpointOptions {
    /// The options that hand credentials to, or sign for, the traffic: the matcher cannot
    /// judge them, so an enforced endpoint with one allows nothing here. Field names.
    pub fn credential_fields(&self) -> Vec<&'static str> {
        let mut v = Vec::new();
        if self.websocket_credential_rewrite {
            v.push("websocket_credential_rewrite");
        }
        if self.request_body_credential_rewrite {
            v.push("request_body_credential_rewrite");
        }
        if self.allow_uninspected_credentials {
            v.push("allow_uninspected_credentials");
        }
        if self.credential_binding.is_some() {
            v.push("credential_binding");
        }
        if self.credential_signing.is_some() {
            v.push("credential_signing");
        }
        v
    }
}

#[derive(Debug, Clone, Default, PartialEq, Eq, PartialOrd, Ord, Serialize)]
pub struct CredentialBinding {
    pub provider: String,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, PartialOrd, Ord, Serialize)]
pub struct GraphqlOperation {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub operation_type: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub operation_name: Option<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub fields: Vec<String>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, PartialOrd, Ord, Serialize)]
pub struct JsonRpcOptions {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_body_bytes: Option<u32>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, PartialOrd, Ord, Serialize)]
pub struct McpOptions {
    /// Accepted MCP revisions (sorted); empty means upstream's default, `2025-11-25`.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub versions: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_body_bytes: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub strict_tool_names: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub allow_all_known_mcp_methods: Option<bool>,
}

/// A supervisor middleware and the hosts it runs on.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Middleware {
    pub name: String,
    /// The implementation, e.g. `openshell/regex`.
    pub middleware: String,
    pub order: i64,
    pub on_error: OnError,
    pub endpoints: MiddlewareSelector,
    #[serde(skip_serializing_if = "serde_json::Map::is_empty")]
    pub config: serde_json::Map<String, serde_json::Value>,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum OnError {
    /// Traffic the middleware cannot handle is refused.
    #[default]
    FailClosed,
    FailOpen,
}

/// Host globs a middleware runs on: `include` minus `exclude`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct MiddlewareSelector {
    pub include: Vec<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub exclude: Vec<String>,
}

impl Endpoint {
    /// Whether this endpoint grants any traffic to its hosts and ports (L4 authority):
    /// plain TCP, or anything not enforced, unless it binds a provider's credentials.
    pub fn is_l4(&self) -> bool {
        self.options.credential_binding.is_none()
            && (self.protocol == Protocol::Tcp || self.enforcement == Enforcement::Audit)
    }

    /// Whether HTTP method and path rules decide what passes.
    pub fn is_enforced_rest(&self) -> bool {
        self.protocol == Protocol::Rest && self.enforcement == Enforcement::Enforce
    }

    /// An endpoint the matcher cannot evaluate: an enforced one of a protocol other than
    /// `tcp` and `rest` (websocket frames, GraphQL, SQL, JSON-RPC, MCP tools), or of `rest`
    /// with credential rewriting or signing; and any endpoint with `credential_binding`
    /// (the provider it names does not exist here, and upstream sends no uninspected
    /// traffic for a bound endpoint either). Fail closed: the matcher allows nothing
    /// through it.
    pub fn is_opaque(&self) -> bool {
        self.options.credential_binding.is_some()
            || self.enforcement == Enforcement::Enforce
                && match self.protocol {
                    Protocol::Tcp => false,
                    Protocol::Rest => !self.options.credential_fields().is_empty(),
                    Protocol::Other(_) => true,
                }
    }
}

/// `tcp` (also written as empty) is L4, `rest` is HTTP-aware, and `websocket`, `graphql`,
/// `sql`, `json-rpc` and `mcp` (kept in `Other`) have handlers of their own.
#[derive(Debug, Clone, Default, PartialEq, Eq, PartialOrd, Ord)]
pub enum Protocol {
    #[default]
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

/// An HTTP method (upper-case, or `*` for any) and a URL path glob, optionally query
/// matchers, and the fields other L7 protocols match on. (For JSON-RPC and MCP `method` is
/// the JSON-RPC method as written, e.g. `tools/call`.)
#[derive(Debug, Clone, Default, PartialEq, Eq, PartialOrd, Ord, Serialize)]
pub struct L7Match {
    pub method: String,
    pub path: String,
    /// Query parameter (decoded name) -> matcher. In an allow rule every listed key must be
    /// present with all its values matching; in a deny rule, some value of every listed key
    /// must match.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub query: BTreeMap<String, ValueMatcher>,
    /// SQL command.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub command: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub operation_type: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub operation_name: Option<String>,
    /// GraphQL fields.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub fields: Vec<String>,
    /// MCP tool name (`tools/call` params.name).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tool: Option<ValueMatcher>,
    /// JSON-RPC params by dotted key.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub params: BTreeMap<String, ValueMatcher>,
}

impl L7Match {
    /// An HTTP method and path and nothing else.
    pub fn http(method: impl Into<String>, path: impl Into<String>) -> Self {
        L7Match { method: method.into(), path: path.into(), ..L7Match::default() }
    }
}

/// Matches one string value: a glob, or any of several (`{any: [..]}`). Globs here have
/// no separator: `*` matches any run of characters.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub enum ValueMatcher {
    Glob(String),
    Any(Vec<String>),
}

impl ValueMatcher {
    pub fn globs(&self) -> &[String] {
        match self {
            ValueMatcher::Glob(g) => std::slice::from_ref(g),
            ValueMatcher::Any(v) => v,
        }
    }

    pub fn matches(&self, value: &str) -> bool {
        self.globs().iter().any(|g| crate::value_glob::matches(g, value))
    }
}

impl Serialize for ValueMatcher {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        match self {
            ValueMatcher::Glob(g) => s.serialize_str(g),
            ValueMatcher::Any(v) => {
                let mut m = s.serialize_map(Some(1))?;
                m.serialize_entry("any", v)?;
                m.end()
            }
        }
    }
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
            network_middlewares: BTreeMap::new(),
        }
    }
}
