//! Upstream OpenShell's schema as it is today (`docs/how-it-works/policies/schema.mdx`):
//! its newer fields parse, its deprecated aliases parse with a warning naming them, what it
//! ignores is ignored with a warning, what it refuses is refused naming the field, and a
//! field it does not have is still refused.

use openshell_policy::*;

fn parsed(yaml: &str) -> (Policy, Vec<PolicyWarning>) {
    Policy::from_yaml_with_warnings(yaml).unwrap_or_else(|e| panic!("{yaml}: {e}"))
}

fn endpoint(ep: &str) -> String {
    format!(
        "version: 1\nnetwork_policies:\n  r:\n    endpoints:\n      - {ep}\n    binaries: [{{path: /usr/bin/curl}}]\n"
    )
}

fn refused(yaml: &str, path: &str, why: &str) {
    let e = Policy::from_yaml(yaml).expect_err(yaml);
    assert_eq!(e.path, path, "{yaml}: {e}");
    assert!(e.reason.contains(why), "{yaml}: {e}");
}

const EP: &str = "network_policies.r.endpoints[0]";

#[test]
fn deprecated_tls_aliases_mean_automatic_tls_with_a_warning() {
    let auto =
        parsed(&endpoint("{host: a.example.com, port: 443, protocol: rest, enforcement: enforce, access: full}")).0;
    for alias in ["terminate", "passthrough"] {
        let yaml = endpoint(&format!(
            "{{host: a.example.com, port: 443, protocol: rest, tls: {alias}, enforcement: enforce, access: full}}"
        ));
        let (p, warnings) = parsed(&yaml);
        assert_eq!(p, auto, "tls: {alias} is the default, automatic TLS");
        assert_eq!(warnings.len(), 1, "{warnings:?}");
        assert_eq!(warnings[0].path, format!("{EP}.tls"));
        assert!(warnings[0].message.contains(&format!("`tls: {alias}` is deprecated")), "{}", warnings[0]);
        assert!(warnings[0].to_string().starts_with(&format!("{EP}.tls: ")));
    }
    let (_, none) = parsed(&endpoint("{host: a.example.com, port: 443, tls: skip}"));
    assert!(none.is_empty(), "{none:?}");
}

#[test]
fn the_deprecated_harness_flag_parses_with_a_warning() {
    let (p, w) = parsed(
        "version: 1\nnetwork_policies: {r: {endpoints: [{host: a.example.com, port: 443}], binaries: [{path: /usr/bin/curl, harness: true}]}}\n",
    );
    assert_eq!(p.network_policies["r"].binaries, [Binary { path: "/usr/bin/curl".into() }]);
    assert_eq!(w.len(), 1);
    assert_eq!(w[0].path, "network_policies.r.binaries[0].harness");
    assert!(w[0].message.contains("deprecated"), "{}", w[0]);
}

#[test]
fn fields_upstream_ignores_are_ignored_with_a_warning() {
    let cases: &[(&str, &str)] = &[
        ("{host: a.example.com, port: 443, access: full}", "access"),
        ("{host: a.example.com, port: 443, rules: [{allow: {method: GET}}]}", "rules"),
        ("{host: a.example.com, port: 443, path: /v1}", "path"),
        (
            "{host: a.example.com, port: 443, protocol: graphql, access: full, allow_encoded_slash: true}",
            "allow_encoded_slash",
        ),
        ("{host: a.example.com, port: 443, protocol: rest, access: full, json_rpc: {max_body_bytes: 10}}", "json_rpc"),
        (
            "{host: a.example.com, port: 443, protocol: rest, access: full, persisted_queries: deny}",
            "persisted_queries",
        ),
        (
            "{host: a.example.com, port: 443, protocol: mcp, websocket_credential_rewrite: true}",
            "websocket_credential_rewrite",
        ),
        (
            "{host: a.example.com, port: 443, protocol: websocket, access: full, request_body_credential_rewrite: true}",
            "request_body_credential_rewrite",
        ),
        (
            "{host: a.example.com, port: 443, protocol: rest, enforcement: enforce, rules: [{allow: {method: GET, command: SELECT}}]}",
            "rules[0].allow.command",
        ),
        (
            "{host: a.example.com, port: 443, protocol: mcp, rules: [{allow: {method: initialize, fields: [a]}}]}",
            "rules[0].allow.fields",
        ),
    ];
    for (ep, field) in cases {
        let (p, w) = parsed(&endpoint(ep));
        assert_eq!(w.len(), 1, "{ep}: {w:?}");
        assert_eq!(w[0].path, format!("{EP}.{field}"), "{ep}");
        assert!(w[0].message.contains("no effect") && w[0].message.contains("ignored"), "{ep}: {}", w[0]);
        // Ignored means left out: the canonical form does not carry it.
        let json = p.canonical_json();
        let mut at = &json["network_policies"]["r"]["endpoints"][0];
        if field.starts_with("rules[0]") {
            at = &at["rules"][0]["allow"];
        }
        let key = field.rsplit('.').next().unwrap();
        assert!(at.get(key).is_none(), "{ep}: {json}");
    }
    // GraphQL runs over WebSocket too: its fields are kept there.
    let (p, w) = parsed(&endpoint(
        "{host: a.example.com, port: 443, protocol: websocket, enforcement: enforce, graphql_max_body_bytes: 100, rules: [{allow: {operation_type: query}}]}",
    ));
    assert!(w.is_empty(), "{w:?}");
    let ws = &p.network_policies["r"].endpoints[0];
    assert_eq!(ws.options.graphql_max_body_bytes, Some(100));
    assert_eq!(ws.rules[0].allow.operation_type.as_deref(), Some("query"));
}

#[test]
fn todays_upstream_fields_parse() {
    let (p, w) = parsed(&endpoint(
        "{host: mcp.example.com, ports: [443], protocol: mcp, enforcement: enforce, mcp: {versions: ['2025-11-25', '2025-03-26', '2025-11-25']}, rules: [{allow: {method: initialize}}, {allow: {tool: {glob: 'search_*'}}}, {allow: {method: tools/call, params: {name: {any: [read, write]}}}}]}",
    ));
    assert!(w.is_empty(), "{w:?}");
    let mcp = &p.network_policies["r"].endpoints[0];
    assert_eq!(mcp.options.mcp.as_ref().unwrap().versions, ["2025-03-26", "2025-11-25"]);
    let call = mcp.rules.iter().find(|r| r.allow.tool.is_some()).unwrap();
    assert_eq!(call.allow.method, "tools/call");
    assert_eq!(call.allow.tool, Some(ValueMatcher::Glob("search_*".into())));
    assert!(
        mcp.rules
            .iter()
            .any(|r| r.allow.params.get("name") == Some(&ValueMatcher::Any(vec!["read".into(), "write".into()])))
    );

    let (p, _) = parsed(&endpoint(
        "{host: storage.example.com, port: 443, protocol: rest, enforcement: enforce, access: full, credential_binding: {provider: work-gcp}}",
    ));
    let bound = &p.network_policies["r"].endpoints[0];
    assert_eq!(bound.options.credential_binding, Some(CredentialBinding { provider: "work-gcp".into() }));
    assert_eq!(bound.options.credential_fields(), ["credential_binding"]);
    assert!(bound.is_opaque() && !bound.is_l4(), "no provider here: the endpoint allows nothing");
    let req = |http| {
        Access::Network(NetworkRequest {
            program: "/usr/bin/curl".into(),
            host: "storage.example.com".into(),
            port: 443,
            http,
            ..NetworkRequest::default()
        })
    };
    assert!(!p.allows(&req(Some(HttpRequest { method: "GET".into(), path: "/".into(), ..HttpRequest::default() }))));
    assert!(!p.allows(&req(None)));
    // Even on an L4 endpoint: upstream refuses uninspected traffic for a bound endpoint.
    let (l4, _) = parsed(&endpoint("{host: storage.example.com, port: 443, credential_binding: {provider: p}}"));
    assert!(!l4.allows(&req(None)));
    // Both stored forms parse back (an L4 endpoint is stored as `protocol: tcp`).
    assert_eq!(Policy::from_json(&p.canonical_json()).unwrap(), p);
    assert_eq!(Policy::from_json(&l4.canonical_json()).unwrap(), l4);
    assert_eq!(Policy::from_yaml(&l4.to_yaml()).unwrap(), l4);

    // Program globs with non-ASCII characters, as upstream's prover fixtures have.
    let (p, _) = parsed(
        "version: 1\nnetwork_policies: {u: {endpoints: [{host: api.example.com, ports: [443]}], binaries: [{path: /usr/bin/é*}]}}\n",
    );
    let net = |program: &str| {
        Access::Network(NetworkRequest {
            program: program.into(),
            host: "api.example.com".into(),
            port: 443,
            ..NetworkRequest::default()
        })
    };
    assert!(p.allows(&net("/usr/bin/école")));
    assert!(p.allows(&net("/usr/bin/é")));
    assert!(!p.allows(&net("/usr/bin/e")));
    assert!(!p.allows(&net("/usr/bin/é/x")), "`*` stays within one segment");
    refused(
        "version: 1\nnetwork_policies: {u: {binaries: [{path: \"/usr/bin/\\u0007\"}]}}\n",
        "network_policies.u.binaries[0].path",
        "U+0007",
    );

    // Endpoint `path: "**"` is upstream's "every path".
    let (p, _) = parsed(&endpoint(
        "{host: a.example.com, port: 443, protocol: rest, enforcement: enforce, access: full, path: '**'}",
    ));
    assert_eq!(p.network_policies["r"].endpoints[0].path.as_deref(), Some("/**"));
}

#[test]
fn a_missing_filesystem_policy_grants_the_working_directory_as_upstream() {
    let p = parsed("version: 1\nnetwork_policies: {r: {endpoints: [{host: a.example.com, port: 443}]}}\n").0;
    assert!(p.filesystem_policy.include_workdir);
    let p = parsed("version: 1\nfilesystem_policy: {read_only: [/usr]}\n").0;
    assert!(!p.filesystem_policy.include_workdir, "given, the section's default is false");
}

#[test]
fn what_upstream_refuses_is_refused_naming_the_field() {
    let tcp = "{host: a.example.com, port: 1, protocol: tcp";
    let cases: Vec<(String, String, &str)> = vec![
        (endpoint("{host: a.example.com, port: 443, ports: [443]}"), EP.into(), "not both"),
        (
            endpoint("{host: a.example.com, port: 443, protocol: rest, access: full, deny_rules: []}"),
            format!("{EP}.deny_rules"),
            "must not be empty",
        ),
        (
            endpoint("{host: a.example.com, port: 443, protocol: rest, deny_rules: [{method: GET}]}"),
            format!("{EP}.deny_rules"),
            "`rules` or `access`",
        ),
        (
            endpoint("{host: a.example.com, port: 443, deny_rules: [{method: GET}]}"),
            format!("{EP}.deny_rules"),
            "L7 protocol",
        ),
        (endpoint(&format!("{tcp}, access: full}}")), format!("{EP}.access"), "this endpoint is tcp"),
        (endpoint(&format!("{tcp}, enforcement: enforce}}")), format!("{EP}.enforcement"), "never inspected"),
        (endpoint(&format!("{tcp}, allow_encoded_slash: true}}")), format!("{EP}.allow_encoded_slash"), "tcp"),
        (
            endpoint("{host: a.example.com, port: 443, credential_binding: {provider: ''}}"),
            format!("{EP}.credential_binding.provider"),
            "must name a provider",
        ),
        (
            endpoint("{host: a.example.com, port: 443, credential_binding: {name: p}}"),
            format!("{EP}.credential_binding.name"),
            "unknown field `name`",
        ),
        (
            endpoint("{host: a.example.com, port: 443, protocol: rest, mcp: {versions: ['2025-11-25']}}"),
            format!("{EP}.mcp"),
            "protocol mcp only",
        ),
        (
            endpoint(
                "{host: a.example.com, port: 443, protocol: mcp, mcp: {versions: ['2024-11-05']}, rules: [{allow: {method: initialize}}]}",
            ),
            format!("{EP}.mcp.versions[0]"),
            "not an MCP revision",
        ),
        (
            endpoint(
                "{host: a.example.com, port: 443, protocol: mcp, mcp: {versions: []}, rules: [{allow: {method: initialize}}]}",
            ),
            format!("{EP}.mcp.versions"),
            "at least one",
        ),
        (
            endpoint(
                "{host: a.example.com, port: 443, protocol: mcp, rules: [{allow: {tool: x, method: initialize}}]}",
            ),
            format!("{EP}.rules[0].allow.method"),
            "tools/call",
        ),
        (
            endpoint("{host: a.example.com, port: 443, protocol: mcp, rules: [{allow: {params: {name: x}}}]}"),
            format!("{EP}.rules[0].allow.method"),
            "allow_all_known_mcp_methods",
        ),
        (
            endpoint("{host: a.example.com, port: 443, protocol: json-rpc, rules: [{allow: {method: 'eth_*'}}]}"),
            format!("{EP}.rules[0].allow.method"),
            "exact names",
        ),
        (
            endpoint("{host: a.example.com, port: 443, protocol: json-rpc, rules: [{allow: {path: /x}}]}"),
            format!("{EP}.rules[0].allow.method"),
            "required",
        ),
        (
            endpoint("{host: a.example.com, port: 443, protocol: graphql, access: full, persisted_queries: allow}"),
            format!("{EP}.persisted_queries"),
            "deny or allow_registered",
        ),
        (
            endpoint("{host: a.example.com, port: 443, protocol: graphql, access: full, graphql_max_body_bytes: 0}"),
            format!("{EP}.graphql_max_body_bytes"),
            "positive",
        ),
        (
            endpoint(
                "{host: a.example.com, port: 443, protocol: rest, rules: [{allow: {method: GET, query: {q: {glob: a, any: [b]}}}}]}",
            ),
            format!("{EP}.rules[0].allow.query.q"),
            "not both",
        ),
        (
            "version: 1\nnetwork_policies: {_provider_github: {}}\n".into(),
            "network_policies._provider_github".into(),
            "reserved for providers",
        ),
    ];
    for (yaml, path, why) in &cases {
        refused(yaml, path, why);
    }
}

#[test]
fn a_field_upstream_does_not_have_is_refused_naming_it() {
    refused(
        &endpoint("{host: a.example.com, port: 443, protocol: mcp, mcp: {version: ['2025-11-25']}}"),
        &format!("{EP}.mcp.version"),
        "unknown field `version`",
    );
    refused(&endpoint("{host: a.example.com, port: 443, tls_mode: skip}"), &format!("{EP}.tls_mode"), "unknown field");
    refused("version: 1\ninference: {allowed_routes: [local]}\n", "inference", "unknown field `inference`");
    refused("network_policies: {}\n", ".", "missing field `version`");
}

#[test]
fn upstreams_filesystem_limits() {
    let long = format!("/{}", "a".repeat(limits::MAX_FILESYSTEM_PATH_LEN - 1));
    assert!(Policy::from_yaml(&format!("version: 1\nfilesystem_policy: {{read_only: ['{long}']}}\n")).is_ok());
    refused(
        &format!("version: 1\nfilesystem_policy: {{read_only: ['{long}a']}}\n"),
        "filesystem_policy.read_only[0]",
        "limit is 4096",
    );
    let paths = |n: usize, from: usize| (from..from + n).map(|i| format!("/p{i}")).collect::<Vec<_>>().join(", ");
    let half = limits::MAX_FILESYSTEM_PATHS / 2;
    assert!(
        Policy::from_yaml(&format!(
            "version: 1\nfilesystem_policy: {{read_only: [{}], read_write: [{}]}}\n",
            paths(half, 0),
            paths(half, half)
        ))
        .is_ok()
    );
    refused(
        &format!(
            "version: 1\nfilesystem_policy: {{read_only: [{}], read_write: [{}]}}\n",
            paths(half, 0),
            paths(half + 1, half)
        ),
        "filesystem_policy",
        "the limit is 256",
    );
}

#[test]
fn duplicate_keys_are_refused() {
    let e = Policy::from_yaml("version: 1\nnetwork_policies:\n  a: {}\n  a: {}\n").expect_err("duplicate rule");
    assert_eq!(e.path, "network_policies");
    assert!(e.reason.contains("duplicate entry with key \"a\""), "{e}");
    let e = Policy::from_yaml(&endpoint("{host: a.example.com, port: 1, port: 2}")).expect_err("duplicate field");
    assert!(e.reason.contains("duplicate"), "{e}");
}

#[test]
fn yaml_aliases_cannot_blow_up() {
    let mut doc = String::from("version: 1\nx0: &a0 [lol, lol, lol, lol, lol, lol, lol, lol, lol]\n");
    for i in 1..10 {
        let p = i - 1;
        doc.push_str(&format!("x{i}: &a{i} [*a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}]\n"));
    }
    let e = Policy::from_yaml(&doc).expect_err("refused");
    assert!(e.reason.contains("repetition limit exceeded"), "{e}");
}
