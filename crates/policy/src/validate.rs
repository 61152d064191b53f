//! Semantic validation: turns a parsed [`PolicyDoc`] into a normalized [`Policy`], or says
//! which field is wrong and why (paths in the same form serde_path_to_error prints).
//!
//! What upstream OpenShell refuses is refused here; what upstream accepts but ignores (a
//! field another protocol gives meaning to) or accepts as a deprecated alias is accepted
//! with a [`PolicyWarning`] naming it, the ignored field left out of the result.

use std::collections::BTreeMap;

use crate::document::{EndpointDoc, MatchDoc, MatcherDoc, MiddlewareDoc, NetworkPolicyDoc, ParamDoc, PolicyDoc};
use crate::glob::{Domain, Glob};
use crate::limits::*;
use crate::model::*;
use crate::{PolicyError, PolicyWarning};

type Result<T> = std::result::Result<T, PolicyError>;

fn err(path: impl Into<String>, reason: impl Into<String>) -> PolicyError {
    PolicyError { path: path.into(), reason: reason.into() }
}

/// Warnings collected while validating one document.
type Warnings = Vec<PolicyWarning>;

fn warn(w: &mut Warnings, path: impl Into<String>, message: impl Into<String>) {
    w.push(PolicyWarning { path: path.into(), message: message.into() });
}

/// Upstream's prefix for rules its providers contribute; a policy may not use it.
const PROVIDER_RULE_PREFIX: &str = "_provider_";

/// The MCP revisions upstream's `mcp.versions` takes.
pub const MCP_VERSIONS: &[&str] = &["2025-03-26", "2025-06-18", "2025-11-25", "2026-07-28"];

fn bounded<T>(path: &str, items: &[T], max: usize, what: &str) -> Result<()> {
    if items.len() > max {
        return Err(err(path, format!("{} {what}; the limit is {max}", items.len())));
    }
    Ok(())
}

pub fn policy(doc: PolicyDoc, w: &mut Warnings) -> Result<Policy> {
    if doc.version != 1 {
        return Err(err("version", format!("unsupported version {}; only 1 exists", doc.version)));
    }
    let filesystem_policy = match doc.filesystem_policy {
        // Upstream: a policy without the section still gets its working directory.
        None => FilesystemPolicy { include_workdir: true, ..FilesystemPolicy::default() },
        Some(fs) => {
            let count = fs.read_only.as_ref().map_or(0, Vec::len) + fs.read_write.as_ref().map_or(0, Vec::len);
            if count > MAX_FILESYSTEM_PATHS {
                return Err(err(
                    "filesystem_policy",
                    format!("{count} paths in read_only and read_write; the limit is {MAX_FILESYSTEM_PATHS}"),
                ));
            }
            FilesystemPolicy {
                include_workdir: fs.include_workdir.unwrap_or(false),
                read_only: fs_paths("filesystem_policy.read_only", fs.read_only)?,
                read_write: fs_paths("filesystem_policy.read_write", fs.read_write)?,
            }
        }
    };
    let landlock = Landlock { compatibility: doc.landlock.and_then(|l| l.compatibility).unwrap_or_default() };
    let process = doc.process.map_or(Ok(Process::default()), |p| {
        Ok::<_, PolicyError>(Process {
            run_as_user: account("process.run_as_user", p.run_as_user)?,
            run_as_group: account("process.run_as_group", p.run_as_group)?,
        })
    })?;
    let docs = doc.network_policies.unwrap_or_default();
    if docs.len() > MAX_NETWORK_POLICIES {
        return Err(err("network_policies", format!("{} rules; the limit is {MAX_NETWORK_POLICIES}", docs.len())));
    }
    let mut network_policies = BTreeMap::new();
    let mut total_endpoints = 0;
    for (key, np) in docs {
        let path = format!("network_policies.{key}");
        let np = network_policy(&path, &key, np, w)?;
        total_endpoints += np.endpoints.len();
        if total_endpoints > MAX_ENDPOINTS_TOTAL {
            return Err(err(path, format!("more than {MAX_ENDPOINTS_TOTAL} endpoints in the whole policy")));
        }
        network_policies.insert(key, np);
    }
    let network_middlewares = middlewares(doc.network_middlewares.unwrap_or_default())?;
    Ok(Policy { version: 1, filesystem_policy, landlock, process, network_policies, network_middlewares })
}

fn middlewares(docs: BTreeMap<String, MiddlewareDoc>) -> Result<BTreeMap<String, Middleware>> {
    if docs.len() > MAX_MIDDLEWARES {
        return Err(err("network_middlewares", format!("{} middlewares; the limit is {MAX_MIDDLEWARES}", docs.len())));
    }
    let mut out = BTreeMap::new();
    let mut orders: BTreeMap<i64, String> = BTreeMap::new();
    for (key, m) in docs {
        let path = format!("network_middlewares.{key}");
        if key.is_empty() || key.len() > MAX_NAME_LEN || key.chars().any(char::is_control) {
            return Err(err(&path, format!("a middleware name must be 1 to {MAX_NAME_LEN} printable characters")));
        }
        let name = printable(&format!("{path}.name"), m.name)?.unwrap_or_else(|| key.clone());
        let middleware = printable(&format!("{path}.middleware"), m.middleware)?.ok_or_else(|| {
            err(format!("{path}.middleware"), "is required (the implementation, e.g. openshell/regex)")
        })?;
        let order = m.order.unwrap_or(0);
        if let Some(first) = orders.insert(order, key.clone()) {
            return Err(err(format!("{path}.order"), format!("order {order} is already used by middleware `{first}`")));
        }
        let on_error = match m.on_error.as_deref() {
            None | Some("") | Some("fail_closed") => OnError::FailClosed,
            Some("fail_open") => OnError::FailOpen,
            Some(other) => {
                return Err(err(format!("{path}.on_error"), format!("`{other}` is not fail_closed or fail_open")));
            }
        };
        let Some(sel) = m.endpoints else {
            return Err(err(format!("{path}.endpoints"), "is required (`include:` the hosts it runs on)"));
        };
        let include = sel.include.unwrap_or_default();
        let exclude = sel.exclude.unwrap_or_default();
        if include.is_empty() {
            return Err(err(format!("{path}.endpoints.include"), "must list at least one host pattern"));
        }
        if include.len() + exclude.len() > MAX_MIDDLEWARE_SELECTOR_PATTERNS {
            return Err(err(
                format!("{path}.endpoints"),
                format!("more than {MAX_MIDDLEWARE_SELECTOR_PATTERNS} include and exclude patterns"),
            ));
        }
        let hosts = |list: Vec<String>, field: &str| -> Result<Vec<String>> {
            let mut v = Vec::with_capacity(list.len());
            for (i, h) in list.into_iter().enumerate() {
                Glob::host(&h).map_err(|r| err(format!("{path}.endpoints.{field}[{i}]"), r))?;
                v.push(h.to_ascii_lowercase());
            }
            v.sort();
            v.dedup();
            Ok(v)
        };
        let endpoints = MiddlewareSelector { include: hosts(include, "include")?, exclude: hosts(exclude, "exclude")? };
        let config = m.config.unwrap_or_default();
        out.insert(key, Middleware { name, middleware, order, on_error, endpoints, config });
    }
    Ok(out)
}

/// An optional short printable string; empty counts as unset.
fn printable(path: &str, s: Option<String>) -> Result<Option<String>> {
    match s {
        None => Ok(None),
        Some(s) if s.is_empty() => Ok(None),
        Some(s) if s.len() > MAX_NAME_LEN * 4 || s.chars().any(char::is_control) => {
            Err(err(path, format!("must be at most {} printable characters", MAX_NAME_LEN * 4)))
        }
        Some(s) => Ok(Some(s)),
    }
}

fn fs_paths(path: &str, list: Option<Vec<String>>) -> Result<Vec<String>> {
    let list = list.unwrap_or_default();
    bounded(path, &list, MAX_FILESYSTEM_PATHS, "paths")?;
    let mut out = Vec::with_capacity(list.len());
    for (i, p) in list.into_iter().enumerate() {
        out.push(fs_path(&format!("{path}[{i}]"), &p)?);
    }
    out.sort();
    out.dedup();
    Ok(out)
}

/// A filesystem path: absolute, normalized, no globs (Landlock grants whole subtrees).
fn fs_path(path: &str, p: &str) -> Result<String> {
    if !p.starts_with('/') {
        return Err(err(path, format!("`{p}` must be an absolute path")));
    }
    if p.len() > MAX_FILESYSTEM_PATH_LEN {
        return Err(err(path, format!("path is {} bytes; the limit is {MAX_FILESYSTEM_PATH_LEN}", p.len())));
    }
    if p.contains('\0') {
        return Err(err(path, "path contains a NUL byte"));
    }
    if p.contains(['*', '?', '[', '{']) {
        return Err(err(path, format!("`{p}`: filesystem paths are not globs; everything beneath a path is granted")));
    }
    let trimmed = if p.len() > 1 { p.trim_end_matches('/') } else { p };
    let trimmed = if trimmed.is_empty() { "/" } else { trimmed };
    if trimmed.len() > 1 {
        for seg in trimmed[1..].split('/') {
            if seg.is_empty() || seg == "." || seg == ".." {
                return Err(err(path, format!("`{p}` is not normalized (empty, `.` or `..` segment)")));
            }
        }
    }
    Ok(trimmed.to_string())
}

/// A user or group: a POSIX-style name or a numeric id, never root.
fn account(path: &str, name: Option<String>) -> Result<String> {
    let Some(name) = name else {
        return Ok(DEFAULT_RUN_AS.into());
    };
    let numeric = !name.is_empty() && name.len() <= 10 && name.bytes().all(|c| c.is_ascii_digit());
    let named = (1..=32).contains(&name.len())
        && name.bytes().next().is_some_and(|c| c.is_ascii_lowercase() || c == b'_')
        && name.bytes().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == b'_' || c == b'-');
    if !numeric && !named {
        return Err(err(
            path,
            format!("`{name}` is not a user or group name (`[a-z_][a-z0-9_-]*`, at most 32) or numeric id"),
        ));
    }
    if numeric && name.parse::<u64>().ok() == Some(0) || name == "root" {
        return Err(err(path, "sandboxes never run as root"));
    }
    Ok(name)
}

fn network_policy(path: &str, key: &str, np: NetworkPolicyDoc, w: &mut Warnings) -> Result<NetworkPolicy> {
    let name_ok = (1..=MAX_NAME_LEN).contains(&key.len())
        && key.bytes().all(|c| c.is_ascii_alphanumeric() || matches!(c, b'_' | b'-' | b'.'));
    if !name_ok {
        return Err(err(path, format!("rule name `{key}` must be 1 to {MAX_NAME_LEN} of `[A-Za-z0-9_.-]`")));
    }
    if key.starts_with(PROVIDER_RULE_PREFIX) {
        return Err(err(path, format!("rule names starting with `{PROVIDER_RULE_PREFIX}` are reserved for providers")));
    }
    let name = match np.name {
        None => key.to_string(),
        Some(n) if n.is_empty() || n.len() > MAX_NAME_LEN || n.chars().any(char::is_control) => {
            return Err(err(format!("{path}.name"), format!("must be 1 to {MAX_NAME_LEN} printable characters")));
        }
        Some(n) => n,
    };
    let eps = np.endpoints.unwrap_or_default();
    bounded(&format!("{path}.endpoints"), &eps, MAX_ENDPOINTS_PER_POLICY, "endpoints")?;
    let mut endpoints = Vec::with_capacity(eps.len());
    for (i, ep) in eps.into_iter().enumerate() {
        endpoints.push(endpoint(&format!("{path}.endpoints[{i}]"), ep, w)?);
    }
    endpoints.sort();
    endpoints.dedup();
    let bins = np.binaries.unwrap_or_default();
    bounded(&format!("{path}.binaries"), &bins, MAX_BINARIES_PER_POLICY, "binaries")?;
    let mut binaries = Vec::with_capacity(bins.len());
    for (i, b) in bins.into_iter().enumerate() {
        let p = format!("{path}.binaries[{i}].path");
        Glob::path(&b.path, Domain::Program).map_err(|r| err(&p, r))?;
        if b.harness.is_some() {
            warn(w, format!("{path}.binaries[{i}].harness"), "is deprecated upstream and has no effect; remove it");
        }
        binaries.push(Binary { path: b.path });
    }
    binaries.sort();
    binaries.dedup();
    Ok(NetworkPolicy { name, endpoints, binaries })
}

/// The L7 protocols upstream knows; `tcp` (or empty) is L4.
const L7_PROTOCOLS: &[&str] = &["rest", "websocket", "graphql", "sql", "json-rpc", "mcp"];

fn endpoint(path: &str, mut ep: EndpointDoc, w: &mut Warnings) -> Result<Endpoint> {
    let written = ep.protocol.as_deref().unwrap_or("").to_ascii_lowercase();
    let protocol = match written.as_str() {
        "" | "tcp" => Protocol::Tcp,
        "rest" => Protocol::Rest,
        other if L7_PROTOCOLS.contains(&other) => Protocol::Other(other.to_string()),
        _ => {
            return Err(err(
                format!("{path}.protocol"),
                format!(
                    "`{}` is not a protocol (tcp, rest, websocket, graphql, sql, json-rpc or mcp)",
                    ep.protocol.unwrap_or_default().chars().take(32).collect::<String>()
                ),
            ));
        }
    };
    let pname = protocol.as_str().to_string();
    // Upstream: an explicit `tcp` takes no inspection field at all; without `protocol` they
    // are ignored, and so are the fields of another protocol.
    let explicit_tcp = written == "tcp";
    drop_foreign_fields(path, &mut ep, &pname, explicit_tcp, w)?;
    let options = endpoint_options(path, &ep)?;
    let allowed_ips = allowed_ips(&format!("{path}.allowed_ips"), ep.allowed_ips)?;
    let host = match ep.host.as_deref() {
        None | Some("") if !allowed_ips.is_empty() => String::new(),
        None | Some("") => return Err(err(format!("{path}.host"), "is required (or give `allowed_ips`)")),
        Some(h) => {
            Glob::host(h).map_err(|r| err(format!("{path}.host"), r))?;
            h.to_ascii_lowercase()
        }
    };

    let ports = match (ep.port, ep.ports) {
        (None, None) => return Err(err(path, "`port` or `ports` is required")),
        (Some(p), None) => vec![port(&format!("{path}.port"), p)?],
        (Some(_), Some(_)) => {
            return Err(err(path, "give `port` or `ports`, not both (`ports` for several)"));
        }
        (None, Some(list)) => {
            if list.is_empty() {
                return Err(err(format!("{path}.ports"), "must list at least one port"));
            }
            bounded(&format!("{path}.ports"), &list, MAX_PORTS_PER_ENDPOINT, "ports")?;
            let mut out = Vec::with_capacity(list.len());
            for (i, p) in list.into_iter().enumerate() {
                out.push(port(&format!("{path}.ports[{i}]"), p)?);
            }
            out.sort();
            out.dedup();
            out
        }
    };

    let enforcement = ep.enforcement.unwrap_or_default();
    if explicit_tcp && enforcement == Enforcement::Enforce {
        return Err(err(
            format!("{path}.enforcement"),
            "protocol tcp is never inspected; `enforce` needs an L7 protocol (leave enforcement out)",
        ));
    }
    let tls = match ep.tls.as_deref() {
        None | Some("") => Tls::Auto,
        Some("skip") => Tls::Skip,
        Some(alias @ ("terminate" | "passthrough")) => {
            warn(
                w,
                format!("{path}.tls"),
                format!(
                    "`tls: {alias}` is deprecated upstream and means automatic TLS (terminated where L7 \
                     rules apply); remove the field, or use `tls: skip` to keep the traffic opaque"
                ),
            );
            Tls::Auto
        }
        Some(other) => {
            return Err(err(
                format!("{path}.tls"),
                format!("unsupported tls value `{other}`; remove the field to keep automatic TLS termination"),
            ));
        }
    };
    if tls == Tls::Skip && protocol != Protocol::Tcp && ports.contains(&443) {
        warn(w, format!("{path}.tls"), "`tls: skip` on port 443 keeps HTTPS opaque: L7 rules cannot be checked there");
    }

    if ep.access.is_some() && ep.rules.is_some() {
        return Err(err(path, "give `access` or `rules`, not both"));
    }
    // Upstream asks every L7 endpoint for rules or access; this crate always accepted
    // rule-less endpoints of the other protocols (stored policies have them, and through
    // the matcher they allow nothing), so only `rest` is held to it.
    if protocol == Protocol::Rest && enforcement == Enforcement::Enforce && ep.access.is_none() && ep.rules.is_none() {
        return Err(err(path, "an enforced rest endpoint needs `access` or `rules` (otherwise it allows nothing)"));
    }
    if matches!(pname.as_str(), "json-rpc" | "mcp") && ep.access.is_some() {
        return Err(err(
            format!("{path}.access"),
            format!("protocol {pname} takes no access preset; use rules (`method: \"*\"` for any method)"),
        ));
    }
    if ep.deny_rules.is_some() && ep.rules.is_none() && ep.access.is_none() && pname != "mcp" {
        return Err(err(
            format!("{path}.deny_rules"),
            "needs `rules` or `access` beside it: deny rules only take away from what those allow",
        ));
    }
    let endpoint_path = match ep.path.as_deref() {
        None | Some("") => None,
        // Upstream's spelling of "every path".
        Some("**") => Some(ANY_PATH.to_string()),
        Some(p) => {
            Glob::path(p, Domain::UrlPath).map_err(|r| err(format!("{path}.path"), r))?;
            Some(p.to_string())
        }
    };
    let allow_all_mcp = options.mcp.as_ref().and_then(|m| m.allow_all_known_mcp_methods) == Some(true);
    let mut rules = Vec::new();
    if let Some(list) = ep.rules {
        if list.is_empty() {
            return Err(err(
                format!("{path}.rules"),
                "must not be empty (an endpoint that allows nothing is better left out)",
            ));
        }
        bounded(&format!("{path}.rules"), &list, MAX_RULES_PER_ENDPOINT, "rules")?;
        for (i, r) in list.into_iter().enumerate() {
            let at = format!("{path}.rules[{i}].allow");
            rules.push(L7Rule { allow: l7_match(&at, &pname, allow_all_mcp, r.allow, w)? });
        }
    }
    rules.sort();
    rules.dedup();
    let mut deny_rules = Vec::new();
    if let Some(list) = ep.deny_rules {
        if list.is_empty() {
            return Err(err(format!("{path}.deny_rules"), "must not be empty (leave it out if nothing is denied)"));
        }
        bounded(&format!("{path}.deny_rules"), &list, MAX_RULES_PER_ENDPOINT, "deny rules")?;
        for (i, r) in list.into_iter().enumerate() {
            deny_rules.push(l7_match(&format!("{path}.deny_rules[{i}]"), &pname, allow_all_mcp, r, w)?);
        }
    }
    deny_rules.sort();
    deny_rules.dedup();
    let options = EndpointOptions {
        allow_encoded_slash: ep.allow_encoded_slash.unwrap_or(false),
        websocket_credential_rewrite: ep.websocket_credential_rewrite.unwrap_or(false),
        request_body_credential_rewrite: ep.request_body_credential_rewrite.unwrap_or(false),
        allow_uninspected_credentials: ep.allow_uninspected_credentials.unwrap_or(false),
        ..options
    };
    if options.credential_signing.is_some() && options.request_body_credential_rewrite {
        return Err(err(
            format!("{path}.credential_signing"),
            "cannot be combined with request_body_credential_rewrite (a rewritten body breaks the signature)",
        ));
    }
    Ok(Endpoint {
        host,
        ports,
        protocol,
        enforcement,
        access: ep.access,
        rules,
        deny_rules,
        path: endpoint_path,
        tls,
        allowed_ips,
        options,
    })
}

/// Endpoint fields that only some protocols give meaning to, and those protocols.
const PROTOCOL_FIELDS: &[(&str, &[&str])] = &[
    ("access", L7_PROTOCOLS),
    ("rules", L7_PROTOCOLS),
    ("path", L7_PROTOCOLS),
    ("allow_encoded_slash", &["rest", "websocket"]),
    ("websocket_credential_rewrite", &["rest", "websocket"]),
    ("request_body_credential_rewrite", &["rest"]),
    ("credential_signing", &["rest"]),
    ("signing_service", &["rest"]),
    ("signing_region", &["rest"]),
    ("persisted_queries", &["graphql", "websocket"]),
    ("graphql_persisted_queries", &["graphql", "websocket"]),
    ("graphql_max_body_bytes", &["graphql", "websocket"]),
    ("json_rpc", &["json-rpc", "mcp"]),
];

/// Takes out of `ep` the fields its protocol gives no meaning to, as upstream ignores them,
/// with a warning each. An explicit `tcp` endpoint refuses them instead (upstream too), as
/// does `deny_rules` without an L7 protocol and `mcp` off an mcp endpoint. Upstream also
/// refuses `credential_binding` on an explicit `tcp`; here it is accepted (the endpoint
/// allows nothing either way), because the canonical form writes every L4 endpoint as
/// `protocol: tcp` and must parse back.
fn drop_foreign_fields(
    path: &str,
    ep: &mut EndpointDoc,
    pname: &str,
    explicit_tcp: bool,
    w: &mut Warnings,
) -> Result<()> {
    let l7 = L7_PROTOCOLS.contains(&pname);
    if ep.deny_rules.is_some() && !l7 {
        return Err(err(
            format!("{path}.deny_rules"),
            "needs an L7 protocol (rest, websocket, graphql, sql, json-rpc or mcp)",
        ));
    }
    if ep.mcp.is_some() && pname != "mcp" {
        return Err(err(format!("{path}.mcp"), format!("applies to protocol mcp only; this endpoint is {pname}")));
    }
    for (field, protocols) in PROTOCOL_FIELDS {
        let present = match *field {
            "access" => ep.access.is_some(),
            "rules" => ep.rules.is_some(),
            "path" => ep.path.is_some(),
            "allow_encoded_slash" => ep.allow_encoded_slash.is_some(),
            "websocket_credential_rewrite" => ep.websocket_credential_rewrite.is_some(),
            "request_body_credential_rewrite" => ep.request_body_credential_rewrite.is_some(),
            "credential_signing" => ep.credential_signing.is_some(),
            "signing_service" => ep.signing_service.is_some(),
            "signing_region" => ep.signing_region.is_some(),
            "persisted_queries" => ep.persisted_queries.is_some(),
            "graphql_persisted_queries" => ep.graphql_persisted_queries.is_some(),
            "graphql_max_body_bytes" => ep.graphql_max_body_bytes.is_some(),
            _ => ep.json_rpc.is_some(),
        };
        if !present || protocols.contains(&pname) {
            continue;
        }
        let which = if *protocols == L7_PROTOCOLS {
            "an L7 protocol (rest, websocket, graphql, sql, json-rpc or mcp)".to_string()
        } else {
            format!("protocol {}", protocols.join(" or "))
        };
        if explicit_tcp {
            return Err(err(format!("{path}.{field}"), format!("needs {which}; this endpoint is tcp")));
        }
        let on = if l7 { format!("a {pname} endpoint") } else { "an endpoint without `protocol`".into() };
        warn(w, format!("{path}.{field}"), format!("has no effect on {on} (it needs {which}); ignored"));
        match *field {
            "access" => ep.access = None,
            "rules" => ep.rules = None,
            "path" => ep.path = None,
            "allow_encoded_slash" => ep.allow_encoded_slash = None,
            "websocket_credential_rewrite" => ep.websocket_credential_rewrite = None,
            "request_body_credential_rewrite" => ep.request_body_credential_rewrite = None,
            "credential_signing" => ep.credential_signing = None,
            "signing_service" => ep.signing_service = None,
            "signing_region" => ep.signing_region = None,
            "persisted_queries" => ep.persisted_queries = None,
            "graphql_persisted_queries" => ep.graphql_persisted_queries = None,
            "graphql_max_body_bytes" => ep.graphql_max_body_bytes = None,
            _ => ep.json_rpc = None,
        }
    }
    Ok(())
}

/// Signing, GraphQL and JSON-RPC/MCP settings (the boolean flags are set by the caller).
fn endpoint_options(path: &str, ep: &EndpointDoc) -> Result<EndpointOptions> {
    let credential_signing = match ep.credential_signing.as_deref() {
        None | Some("") => None,
        Some(s @ ("sigv4" | "sigv4:body" | "sigv4:no_body")) => Some(s.to_string()),
        Some(other) => {
            return Err(err(
                format!("{path}.credential_signing"),
                format!("`{other}` is not sigv4, sigv4:body or sigv4:no_body"),
            ));
        }
    };
    let signing_service = printable(&format!("{path}.signing_service"), ep.signing_service.clone())?;
    let signing_region = printable(&format!("{path}.signing_region"), ep.signing_region.clone())?;
    if credential_signing.is_some() && signing_service.is_none() {
        return Err(err(format!("{path}.signing_service"), "is required with credential_signing"));
    }
    let persisted_queries = match ep.persisted_queries.as_deref() {
        None | Some("") => None,
        Some(m @ ("deny" | "allow_registered")) => Some(m.to_string()),
        Some(other) => {
            return Err(err(format!("{path}.persisted_queries"), format!("`{other}` is not deny or allow_registered")));
        }
    };
    let credential_binding = match &ep.credential_binding {
        None => None,
        Some(b) => match printable(&format!("{path}.credential_binding.provider"), Some(b.provider.clone()))? {
            Some(provider) => Some(CredentialBinding { provider }),
            None => return Err(err(format!("{path}.credential_binding.provider"), "must name a provider")),
        },
    };
    let mut graphql_persisted_queries = BTreeMap::new();
    if let Some(ops) = &ep.graphql_persisted_queries {
        if ops.len() > MAX_RULES_PER_ENDPOINT {
            return Err(err(
                format!("{path}.graphql_persisted_queries"),
                format!("{} operations; the limit is {MAX_RULES_PER_ENDPOINT}", ops.len()),
            ));
        }
        for (k, op) in ops {
            let p = format!("{path}.graphql_persisted_queries.{k}");
            if k.is_empty() || k.len() > MAX_PATTERN_LEN {
                return Err(err(&p, format!("a persisted query id must be 1 to {MAX_PATTERN_LEN} characters")));
            }
            let fields = names(&format!("{p}.fields"), op.fields.clone())?;
            graphql_persisted_queries.insert(
                k.clone(),
                GraphqlOperation {
                    operation_type: graphql_operation_type(&format!("{p}.operation_type"), op.operation_type.clone())?,
                    operation_name: printable(&format!("{p}.operation_name"), op.operation_name.clone())?,
                    fields,
                },
            );
        }
    }
    let body = |field: String, v: Option<i64>| -> Result<Option<u32>> {
        match v {
            None => Ok(None),
            Some(n) => u32::try_from(n)
                .ok()
                .filter(|&n| n > 0)
                .map(Some)
                .ok_or_else(|| err(field, format!("{n} is outside 1..=4294967295 (a positive byte count)"))),
        }
    };
    let graphql_max_body_bytes = body(format!("{path}.graphql_max_body_bytes"), ep.graphql_max_body_bytes)?;
    let json_rpc = match &ep.json_rpc {
        None => None,
        Some(j) => {
            Some(JsonRpcOptions { max_body_bytes: body(format!("{path}.json_rpc.max_body_bytes"), j.max_body_bytes)? })
        }
    };
    let mcp = match &ep.mcp {
        None => None,
        Some(m) => Some(McpOptions {
            versions: mcp_versions(&format!("{path}.mcp.versions"), m.versions.as_deref())?,
            max_body_bytes: body(format!("{path}.mcp.max_body_bytes"), m.max_body_bytes)?,
            strict_tool_names: m.strict_tool_names,
            allow_all_known_mcp_methods: m.allow_all_known_mcp_methods,
        }),
    };
    Ok(EndpointOptions {
        credential_binding,
        credential_signing,
        signing_service,
        signing_region,
        persisted_queries,
        graphql_persisted_queries,
        graphql_max_body_bytes,
        json_rpc,
        mcp,
        ..EndpointOptions::default()
    })
}

/// `mcp.versions`: known revisions, sorted and deduplicated; absent is empty (upstream's
/// default). An empty list is refused: it would accept no revision at all.
fn mcp_versions(path: &str, list: Option<&[String]>) -> Result<Vec<String>> {
    let Some(list) = list else {
        return Ok(Vec::new());
    };
    if list.is_empty() {
        return Err(err(path, format!("must list at least one MCP revision ({})", MCP_VERSIONS.join(", "))));
    }
    bounded(path, list, MCP_VERSIONS.len() * 2, "revisions")?;
    let mut out = Vec::with_capacity(list.len());
    for (i, v) in list.iter().enumerate() {
        if !MCP_VERSIONS.contains(&v.as_str()) {
            let shown: String = v.chars().take(32).collect();
            return Err(err(
                format!("{path}[{i}]"),
                format!("`{shown}` is not an MCP revision ({})", MCP_VERSIONS.join(", ")),
            ));
        }
        out.push(v.clone());
    }
    out.sort();
    out.dedup();
    Ok(out)
}

fn allowed_ips(path: &str, list: Option<Vec<String>>) -> Result<Vec<IpNet>> {
    let Some(list) = list else {
        return Ok(vec![]);
    };
    if list.is_empty() {
        return Err(err(path, "must list at least one address or network (or leave the field out)"));
    }
    bounded(path, &list, MAX_ALLOWED_IPS_PER_ENDPOINT, "networks")?;
    let mut out = Vec::with_capacity(list.len());
    for (i, s) in list.iter().enumerate() {
        out.push(crate::ip::parse(s).map_err(|r| err(format!("{path}[{i}]"), r))?);
    }
    out.sort();
    out.dedup();
    Ok(out)
}

fn port(path: &str, p: i64) -> Result<u16> {
    match u16::try_from(p) {
        Ok(p) if p >= 1 => Ok(p),
        _ => Err(err(path, format!("port {p} is outside 1..=65535"))),
    }
}

fn graphql_operation_type(path: &str, t: Option<String>) -> Result<Option<String>> {
    match t.as_deref() {
        None | Some("") => Ok(None),
        Some(s @ ("query" | "mutation" | "subscription" | "*")) => Ok(Some(s.to_string())),
        Some(other) => Err(err(path, format!("`{other}` is not query, mutation, subscription or `*`"))),
    }
}

/// Short printable names (GraphQL fields), sorted and deduplicated.
fn names(path: &str, list: Option<Vec<String>>) -> Result<Vec<String>> {
    let list = list.unwrap_or_default();
    bounded(path, &list, MAX_RULES_PER_ENDPOINT, "names")?;
    let mut out = Vec::with_capacity(list.len());
    for (i, n) in list.into_iter().enumerate() {
        match printable(&format!("{path}[{i}]"), Some(n))? {
            Some(n) => out.push(n),
            None => return Err(err(format!("{path}[{i}]"), "must not be empty")),
        }
    }
    out.sort();
    out.dedup();
    Ok(out)
}

fn matcher(path: &str, m: MatcherDoc) -> Result<ValueMatcher> {
    match m {
        MatcherDoc::Glob(g) => {
            crate::value_glob::check(&g).map_err(|r| err(path, r))?;
            Ok(ValueMatcher::Glob(g))
        }
        MatcherDoc::Object(o) => match (o.glob, o.any) {
            (Some(_), Some(_)) => Err(err(path, "give `glob` or `any`, not both")),
            (None, None) => Err(err(path, "needs `glob` or `any`")),
            (Some(g), None) => {
                crate::value_glob::check(&g).map_err(|r| err(format!("{path}.glob"), r))?;
                Ok(ValueMatcher::Glob(g))
            }
            (None, Some(any)) => any_matcher(path, any),
        },
    }
}

fn any_matcher(path: &str, any: Vec<String>) -> Result<ValueMatcher> {
    if any.is_empty() {
        return Err(err(format!("{path}.any"), "must list at least one glob"));
    }
    bounded(&format!("{path}.any"), &any, MAX_RULES_PER_ENDPOINT, "globs")?;
    let mut v = any;
    for (i, g) in v.iter().enumerate() {
        crate::value_glob::check(g).map_err(|r| err(format!("{path}.any[{i}]"), r))?;
    }
    v.sort();
    v.dedup();
    Ok(ValueMatcher::Any(v))
}

fn query(path: &str, q: Option<BTreeMap<String, MatcherDoc>>) -> Result<BTreeMap<String, ValueMatcher>> {
    let q = q.unwrap_or_default();
    if q.len() > MAX_QUERY_KEYS {
        return Err(err(path, format!("{} keys; the limit is {MAX_QUERY_KEYS}", q.len())));
    }
    let mut out = BTreeMap::new();
    for (k, m) in q {
        let p = format!("{path}.{k}");
        if k.is_empty() || k.len() > MAX_PATTERN_LEN || k.chars().any(char::is_control) {
            return Err(err(&p, format!("a query key must be 1 to {MAX_PATTERN_LEN} printable characters")));
        }
        out.insert(k, matcher(&p, m)?);
    }
    Ok(out)
}

/// Flattens nested JSON-RPC params matchers into dotted keys (as upstream does).
fn params(path: &str, p: Option<BTreeMap<String, ParamDoc>>) -> Result<BTreeMap<String, ValueMatcher>> {
    fn walk(path: &str, key: &str, p: ParamDoc, depth: usize, out: &mut BTreeMap<String, ValueMatcher>) -> Result<()> {
        if depth > 8 || out.len() >= MAX_QUERY_KEYS {
            return Err(err(path, format!("params nest deeper than 8 or hold more than {MAX_QUERY_KEYS} matchers")));
        }
        match p {
            ParamDoc::Matcher(m) => {
                out.insert(key.to_string(), matcher(path, m)?);
            }
            ParamDoc::Object(children) => {
                for (k, c) in children {
                    walk(&format!("{path}.{k}"), &format!("{key}.{k}"), c, depth + 1, out)?;
                }
            }
        }
        Ok(())
    }
    let mut out = BTreeMap::new();
    for (k, v) in p.unwrap_or_default() {
        walk(&format!("{path}.{k}"), &k, v, 0, &mut out)?;
    }
    Ok(out)
}

fn l7_match(path: &str, protocol: &str, allow_all_mcp: bool, mut m: MatchDoc, w: &mut Warnings) -> Result<L7Match> {
    let only = |field: &str, present: bool, protocols: &[&str]| -> Result<()> {
        if present && !protocols.contains(&protocol) {
            return Err(err(
                format!("{path}.{field}"),
                format!("applies to protocol {} only (this endpoint is {protocol})", protocols.join(" or ")),
            ));
        }
        Ok(())
    };
    only("tool", m.tool.is_some(), &["mcp"])?;
    only("params", m.params.is_some(), &["json-rpc", "mcp"])?;
    // Upstream ignores these on other protocols (GraphQL also runs over WebSocket).
    let mut ignored = |field: &str, present: bool, protocols: &[&str]| {
        if present && !protocols.contains(&protocol) {
            warn(
                w,
                format!("{path}.{field}"),
                format!("has no effect on a {protocol} endpoint (it applies to {}); ignored", protocols.join(" or ")),
            );
            true
        } else {
            false
        }
    };
    if ignored("command", m.command.is_some(), &["sql"]) {
        m.command = None;
    }
    const GRAPHQL: &[&str] = &["graphql", "websocket"];
    if ignored("operation_type", m.operation_type.is_some(), GRAPHQL) {
        m.operation_type = None;
    }
    if ignored("operation_name", m.operation_name.is_some(), GRAPHQL) {
        m.operation_name = None;
    }
    if ignored("fields", m.fields.is_some(), GRAPHQL) {
        m.fields = None;
    }
    let graphql_rule = m.operation_type.is_some() || m.operation_name.is_some() || m.fields.is_some();
    let jsonrpc = matches!(protocol, "json-rpc" | "mcp");
    let method = match m.method {
        // JSON-RPC methods are names like `tools/call`, matched as written.
        Some(method) if jsonrpc => {
            if method.is_empty() || method.len() > MAX_NAME_LEN || method.chars().any(|c| c.is_control() || c == ' ') {
                return Err(err(format!("{path}.method"), format!("`{method}` is not a JSON-RPC method name")));
            }
            if protocol == "json-rpc" && method != ANY_METHOD && method.contains('*') {
                return Err(err(
                    format!("{path}.method"),
                    format!("`{method}`: JSON-RPC methods are exact names, or `*` for all"),
                ));
            }
            if protocol == "mcp" && m.tool.is_some() && method != "tools/call" {
                return Err(err(format!("{path}.method"), format!("must be tools/call with `tool`, not `{method}`")));
            }
            method
        }
        None if m.tool.is_some() => "tools/call".to_string(),
        None if protocol == "json-rpc" || (protocol == "mcp" && !allow_all_mcp) => {
            let unless = if protocol == "mcp" { " unless mcp.allow_all_known_mcp_methods is true" } else { "" };
            return Err(err(format!("{path}.method"), format!("is required for {protocol} rules{unless}")));
        }
        None if jsonrpc => ANY_METHOD.to_string(),
        None if protocol == "rest" || (protocol == "websocket" && !graphql_rule) => {
            return Err(err(format!("{path}.method"), "is required (`*` for any method)"));
        }
        None => ANY_METHOD.to_string(),
        Some(method) if method == ANY_METHOD => method,
        Some(method) => {
            let ok = (1..=32).contains(&method.len())
                && method.as_bytes()[0].is_ascii_alphabetic()
                && method.bytes().all(|c| c.is_ascii_alphabetic() || c == b'_' || c == b'-');
            if !ok {
                return Err(err(
                    format!("{path}.method"),
                    format!("`{method}` is not an HTTP method (letters, `-`, `_`; or `*`)"),
                ));
            }
            method.to_ascii_uppercase()
        }
    };
    let glob = m.path.unwrap_or_else(|| ANY_PATH.to_string());
    Glob::path(&glob, Domain::UrlPath).map_err(|r| err(format!("{path}.path"), r))?;
    Ok(L7Match {
        method,
        path: glob,
        query: query(&format!("{path}.query"), m.query)?,
        command: printable(&format!("{path}.command"), m.command)?,
        operation_type: graphql_operation_type(&format!("{path}.operation_type"), m.operation_type)?,
        operation_name: printable(&format!("{path}.operation_name"), m.operation_name)?,
        fields: names(&format!("{path}.fields"), m.fields)?,
        tool: m.tool.map(|t| matcher(&format!("{path}.tool"), t)).transpose()?,
        params: params(&format!("{path}.params"), m.params)?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fs_path_normalizes_trailing_slash() {
        assert_eq!(fs_path("p", "/tmp/").unwrap(), "/tmp");
        assert_eq!(fs_path("p", "/").unwrap(), "/");
        assert!(fs_path("p", "/a//b").is_err());
        assert!(fs_path("p", "/a/../b").is_err());
        assert!(fs_path("p", "tmp").is_err());
        assert!(fs_path("p", "/tmp/*").is_err());
    }

    #[test]
    fn accounts() {
        assert_eq!(account("p", None).unwrap(), "sandbox");
        assert_eq!(account("p", Some("1000".into())).unwrap(), "1000");
        for bad in ["root", "0", "00", "Bob", "", "a b"] {
            assert!(account("p", Some(bad.into())).is_err(), "{bad}");
        }
    }
}
