//! Semantic validation: turns a parsed [`PolicyDoc`] into a normalized [`Policy`], or says
//! which field is wrong and why (paths in the same form serde_path_to_error prints).

use std::collections::BTreeMap;

use crate::PolicyError;
use crate::document::{EndpointDoc, MatchDoc, MatcherDoc, MiddlewareDoc, NetworkPolicyDoc, ParamDoc, PolicyDoc};
use crate::glob::{Domain, Glob};
use crate::limits::*;
use crate::model::*;

type Result<T> = std::result::Result<T, PolicyError>;

fn err(path: impl Into<String>, reason: impl Into<String>) -> PolicyError {
    PolicyError { path: path.into(), reason: reason.into() }
}

fn bounded<T>(path: &str, items: &[T], max: usize, what: &str) -> Result<()> {
    if items.len() > max {
        return Err(err(path, format!("{} {what}; the limit is {max}", items.len())));
    }
    Ok(())
}

pub fn policy(doc: PolicyDoc) -> Result<Policy> {
    if doc.version != 1 {
        return Err(err("version", format!("unsupported version {}; only 1 exists", doc.version)));
    }
    let filesystem_policy = match doc.filesystem_policy {
        None => FilesystemPolicy::default(),
        Some(fs) => FilesystemPolicy {
            include_workdir: fs.include_workdir.unwrap_or(false),
            read_only: fs_paths("filesystem_policy.read_only", fs.read_only)?,
            read_write: fs_paths("filesystem_policy.read_write", fs.read_write)?,
        },
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
        let np = network_policy(&path, &key, np)?;
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

fn network_policy(path: &str, key: &str, np: NetworkPolicyDoc) -> Result<NetworkPolicy> {
    let name_ok = (1..=MAX_NAME_LEN).contains(&key.len())
        && key.bytes().all(|c| c.is_ascii_alphanumeric() || matches!(c, b'_' | b'-' | b'.'));
    if !name_ok {
        return Err(err(path, format!("rule name `{key}` must be 1 to {MAX_NAME_LEN} of `[A-Za-z0-9_.-]`")));
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
        endpoints.push(endpoint(&format!("{path}.endpoints[{i}]"), ep)?);
    }
    endpoints.sort();
    endpoints.dedup();
    let bins = np.binaries.unwrap_or_default();
    bounded(&format!("{path}.binaries"), &bins, MAX_BINARIES_PER_POLICY, "binaries")?;
    let mut binaries = Vec::with_capacity(bins.len());
    for (i, b) in bins.into_iter().enumerate() {
        let p = format!("{path}.binaries[{i}].path");
        Glob::path(&b.path, Domain::Program).map_err(|r| err(&p, r))?;
        binaries.push(Binary { path: b.path });
    }
    binaries.sort();
    binaries.dedup();
    Ok(NetworkPolicy { name, endpoints, binaries })
}

/// The L7 protocols upstream knows; `tcp` (or empty) is L4.
const L7_PROTOCOLS: &[&str] = &["rest", "websocket", "graphql", "sql", "json-rpc", "mcp"];

fn endpoint(path: &str, ep: EndpointDoc) -> Result<Endpoint> {
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

    // Upstream: `ports` wins over `port`. Both given and disagreeing is refused here: one of
    // them would silently be ignored.
    let ports = match (ep.port, ep.ports) {
        (None, None) => return Err(err(path, "`port` or `ports` is required")),
        (Some(p), None) => vec![port(&format!("{path}.port"), p)?],
        (port_one, Some(list)) => {
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
            if let Some(p) = port_one
                && !u16::try_from(p).is_ok_and(|p| out.contains(&p))
            {
                return Err(err(path, format!("give `port` or `ports`, not both (`port: {p}` is not in `ports`)")));
            }
            out
        }
    };

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
    let enforcement = ep.enforcement.unwrap_or_default();
    let tls = match ep.tls.as_deref() {
        None | Some("") => Tls::Auto,
        Some("skip") => Tls::Skip,
        Some(other) => {
            return Err(err(
                format!("{path}.tls"),
                format!("unsupported tls value `{other}`; remove the field to keep automatic TLS termination"),
            ));
        }
    };

    // Fields that only an L7 protocol (or only one of them) gives meaning to.
    let only = |field: &str, present: bool, protocols: &[&str]| -> Result<()> {
        if present && !protocols.contains(&pname.as_str()) {
            let which = if protocols == L7_PROTOCOLS {
                "needs an L7 protocol (rest, websocket, graphql, sql, json-rpc or mcp)".to_string()
            } else {
                format!("applies to protocol {} only", protocols.join(" or "))
            };
            return Err(err(format!("{path}.{field}"), format!("{which}; this endpoint is {pname}")));
        }
        Ok(())
    };
    only("access", ep.access.is_some(), L7_PROTOCOLS)?;
    only("rules", ep.rules.is_some(), L7_PROTOCOLS)?;
    only("deny_rules", ep.deny_rules.is_some(), L7_PROTOCOLS)?;
    only("path", ep.path.is_some(), L7_PROTOCOLS)?;
    only("allow_encoded_slash", ep.allow_encoded_slash.is_some(), &["rest", "websocket"])?;
    only("websocket_credential_rewrite", ep.websocket_credential_rewrite.is_some(), &["rest", "websocket"])?;
    only("request_body_credential_rewrite", ep.request_body_credential_rewrite.is_some(), &["rest"])?;
    only("credential_signing", ep.credential_signing.is_some(), &["rest"])?;
    only("persisted_queries", ep.persisted_queries.is_some(), &["graphql"])?;
    only("graphql_persisted_queries", ep.graphql_persisted_queries.is_some(), &["graphql"])?;
    only("graphql_max_body_bytes", ep.graphql_max_body_bytes.is_some(), &["graphql"])?;
    only("json_rpc", ep.json_rpc.is_some(), &["json-rpc", "mcp"])?;
    only("mcp", ep.mcp.is_some(), &["mcp"])?;

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
    let endpoint_path = match ep.path {
        None => None,
        Some(p) => {
            Glob::path(&p, Domain::UrlPath).map_err(|r| err(format!("{path}.path"), r))?;
            Some(p)
        }
    };
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
            rules.push(L7Rule { allow: l7_match(&format!("{path}.rules[{i}].allow"), &pname, r.allow)? });
        }
    }
    rules.sort();
    rules.dedup();
    let mut deny_rules = Vec::new();
    if let Some(list) = ep.deny_rules {
        bounded(&format!("{path}.deny_rules"), &list, MAX_RULES_PER_ENDPOINT, "deny rules")?;
        for (i, r) in list.into_iter().enumerate() {
            deny_rules.push(l7_match(&format!("{path}.deny_rules[{i}]"), &pname, r)?);
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
    let persisted_queries = printable(&format!("{path}.persisted_queries"), ep.persisted_queries.clone())?;
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
            None | Some(0) => Ok(None),
            Some(n) => u32::try_from(n).map(Some).map_err(|_| err(field, format!("{n} is outside 0..=4294967295"))),
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
            max_body_bytes: body(format!("{path}.mcp.max_body_bytes"), m.max_body_bytes)?,
            strict_tool_names: m.strict_tool_names,
            allow_all_known_mcp_methods: m.allow_all_known_mcp_methods,
        }),
    };
    Ok(EndpointOptions {
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
        MatcherDoc::Any(a) => {
            if a.any.is_empty() {
                return Err(err(format!("{path}.any"), "must list at least one glob"));
            }
            bounded(&format!("{path}.any"), &a.any, MAX_RULES_PER_ENDPOINT, "globs")?;
            let mut v = a.any;
            for (i, g) in v.iter().enumerate() {
                crate::value_glob::check(g).map_err(|r| err(format!("{path}.any[{i}]"), r))?;
            }
            v.sort();
            v.dedup();
            Ok(ValueMatcher::Any(v))
        }
    }
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

fn l7_match(path: &str, protocol: &str, m: MatchDoc) -> Result<L7Match> {
    let only = |field: &str, present: bool, protocols: &[&str]| -> Result<()> {
        if present && !protocols.contains(&protocol) {
            return Err(err(
                format!("{path}.{field}"),
                format!("applies to protocol {} only (this endpoint is {protocol})", protocols.join(" or ")),
            ));
        }
        Ok(())
    };
    only("command", m.command.is_some(), &["sql"])?;
    only("operation_type", m.operation_type.is_some(), &["graphql"])?;
    only("operation_name", m.operation_name.is_some(), &["graphql"])?;
    only("fields", m.fields.is_some(), &["graphql"])?;
    only("tool", m.tool.is_some(), &["mcp"])?;
    only("params", m.params.is_some(), &["json-rpc", "mcp"])?;
    let jsonrpc = matches!(protocol, "json-rpc" | "mcp");
    let method = match m.method {
        // JSON-RPC methods are names like `tools/call`, matched as written.
        Some(method) if jsonrpc => {
            if method.is_empty() || method.len() > MAX_NAME_LEN || method.chars().any(|c| c.is_control() || c == ' ') {
                return Err(err(format!("{path}.method"), format!("`{method}` is not a JSON-RPC method name")));
            }
            method
        }
        None if jsonrpc => {
            if m.tool.is_some() {
                "tools/call".to_string()
            } else {
                ANY_METHOD.to_string()
            }
        }
        None if protocol == "rest" || protocol == "websocket" => {
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
