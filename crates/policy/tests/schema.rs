//! The full upstream schema (docs/upstream-policies.md): upstream's example
//! (fixtures/upstream-example.yaml) parses unchanged, every new field keeps its value through
//! the canonical form, and each validation error names its field and says why.

use openshell_policy::*;

const UPSTREAM_EXAMPLE: &str = include_str!("fixtures/upstream-example.yaml");

fn err_of(yaml: &str) -> PolicyError {
    Policy::from_yaml(yaml).expect_err("must be refused")
}

fn endpoint_err(ep: &str) -> PolicyError {
    err_of(&format!("version: 1\nnetwork_policies:\n  r:\n    endpoints:\n      - {ep}\n"))
}

fn round_trips(p: &Policy) {
    assert_eq!(&Policy::from_json(&p.canonical_json()).unwrap(), p);
    assert_eq!(&Policy::from_yaml(&p.to_yaml()).unwrap(), p);
}

#[test]
fn the_upstream_example_parses_unchanged() {
    let p = Policy::from_yaml(UPSTREAM_EXAMPLE).unwrap();
    let gh = &p.network_policies["github_api"];
    assert_eq!(gh.name, "github-api");
    let api = gh.endpoints.iter().find(|e| e.host == "api.github.com").unwrap();
    let get = api.rules.iter().find(|r| r.allow.method == "GET").unwrap();
    assert_eq!(get.allow.query["per_page"], ValueMatcher::Glob("1*".into()));
    assert_eq!(api.deny_rules[0].path, "/repos/*/rulesets");
    let mcp = &p.network_policies["mcp"].endpoints[0];
    assert_eq!(mcp.path.as_deref(), Some("/mcp"));
    assert_eq!(mcp.protocol, Protocol::Other("mcp".into()));
    let opts = mcp.options.mcp.as_ref().unwrap();
    assert_eq!((opts.strict_tool_names, opts.max_body_bytes), (Some(true), Some(131072)));
    let call = mcp.rules.iter().find(|r| r.allow.method == "tools/call").unwrap();
    assert_eq!(call.allow.tool, Some(ValueMatcher::Any(vec!["search_web".into()])));
    assert!(mcp.is_opaque(), "an enforced mcp endpoint is decided by its own handler");
    round_trips(&p);
}

const EVERY_FIELD: &str = r#"
version: 1
network_middlewares:
  redact:
    name: Redactor
    middleware: openshell/regex
    order: 20
    on_error: fail_open
    endpoints: { include: [api.example.com, "*.svc.example.com"], exclude: [internal.example.com] }
    config: { mode: redact }
network_policies:
  all:
    endpoints:
      - host: api.example.com
        ports: [443, 8443]
        protocol: REST
        enforcement: enforce
        tls: skip
        allow_encoded_slash: true
        websocket_credential_rewrite: true
        allow_uninspected_credentials: true
        credential_signing: sigv4
        signing_service: execute-api
        signing_region: eu-west-1
        rules:
          - allow: { method: GET, path: /a, query: { q: "x*", tag: { any: [a, b] } } }
        deny_rules: [{ method: GET, query: { debug: "*" } }]
      - { host: db.example.com, port: 5432, allowed_ips: [10.0.5.7/24, "fd00::/8", 10.0.6.1], protocol: tcp }
      - { port: 8080, allowed_ips: [192.0.2.0/24] }
      - host: gql.example.com
        port: 443
        protocol: graphql
        enforcement: enforce
        persisted_queries: allow_registered
        graphql_max_body_bytes: 65536
        graphql_persisted_queries:
          abc123: { operation_type: query, operation_name: Viewer, fields: [viewer] }
        rules: [{ allow: { operation_type: query, fields: [viewer, repository] } }]
      - { host: sql.example.com, port: 5432, protocol: sql, enforcement: enforce, rules: [{ allow: { command: SELECT } }] }
      - host: rpc.example.com
        port: 443
        protocol: json-rpc
        enforcement: enforce
        json_rpc: { max_body_bytes: 4096 }
        rules: [{ allow: { method: eth_call, params: { block: { tag: latest } } } }]
      - host: mcp.example.com
        port: 443
        path: /mcp
        protocol: mcp
        enforcement: enforce
        mcp: { strict_tool_names: false, max_body_bytes: 1024, allow_all_known_mcp_methods: true }
        deny_rules: [{ tool: "delete_*" }]
      - { host: ws.example.com, port: 443, protocol: websocket, enforcement: enforce, access: read-write }
    binaries: [{ path: /usr/bin/curl, harness: true }]
"#;

#[test]
fn every_field_parses_and_survives_the_canonical_form() {
    let p = Policy::from_yaml(EVERY_FIELD).unwrap();
    round_trips(&p);
    let eps = &p.network_policies["all"].endpoints;
    let api = eps.iter().find(|e| e.host == "api.example.com").unwrap();
    assert_eq!(api.ports, [443, 8443]);
    assert_eq!(api.tls, Tls::Skip);
    assert_eq!(
        api.options.credential_fields(),
        ["websocket_credential_rewrite", "allow_uninspected_credentials", "credential_signing"]
    );
    assert!(api.is_opaque(), "credential handling is not something the matcher can judge");
    let db = eps.iter().find(|e| e.host == "db.example.com").unwrap();
    let ips: Vec<String> = db.allowed_ips.iter().map(ToString::to_string).collect();
    assert_eq!(ips, ["10.0.5.0/24", "10.0.6.1/32", "fd00::/8"]);
    let hostless = eps.iter().find(|e| e.host.is_empty()).unwrap();
    assert_eq!(hostless.ports, [8080]);
    let rpc = eps.iter().find(|e| e.host == "rpc.example.com").unwrap();
    assert!(rpc.rules[0].allow.params.contains_key("block.tag"));
    let mcp = eps.iter().find(|e| e.host == "mcp.example.com").unwrap();
    assert_eq!(mcp.deny_rules[0].method, "tools/call");
    let mw = &p.network_middlewares["redact"];
    assert_eq!((mw.name.as_str(), mw.order, mw.on_error), ("Redactor", 20, OnError::FailOpen));
    let json = p.canonical_json();
    assert_eq!(json["network_middlewares"]["redact"]["config"]["mode"], "redact");
    assert_eq!(json["network_policies"]["all"]["endpoints"][0]["host"], serde_json::Value::Null);
}

#[test]
fn new_field_errors_name_the_field_and_why() {
    let e = "network_policies.r.endpoints[0]";
    let cases: &[(&str, String, &str)] = &[
        ("{host: a.example.com, port: 1, protocol: ftp}", format!("{e}.protocol"), "not a protocol"),
        ("{host: a.example.com, port: 1, tls: bogus}", format!("{e}.tls"), "unsupported tls value"),
        ("{port: 1}", format!("{e}.host"), "or give `allowed_ips`"),
        ("{host: a.example.com, port: 1, allowed_ips: []}", format!("{e}.allowed_ips"), "at least one"),
        ("{host: a.example.com, port: 1, allowed_ips: [10.0.0.0/40]}", format!("{e}.allowed_ips[0]"), "prefix"),
        ("{host: a.example.com, port: 1, allowed_ips: [10.0.0.0, x]}", format!("{e}.allowed_ips[1]"), "not an IP"),
        ("{host: a.example.com, port: 1, protocol: tcp, path: /x}", format!("{e}.path"), "needs an L7 protocol"),
        ("{host: a.example.com, port: 1, protocol: rest, path: x}", format!("{e}.path"), "absolute"),
        ("{host: a.example.com, port: 1, protocol: rest, mcp: {}}", format!("{e}.mcp"), "protocol mcp only"),
        ("{host: a.example.com, port: 1, protocol: mcp, access: full}", format!("{e}.access"), "no access preset"),
        ("{host: a.example.com, port: 1, protocol: tcp, json_rpc: {}}", format!("{e}.json_rpc"), "json-rpc or mcp"),
        (
            "{host: a.example.com, port: 1, protocol: tcp, graphql_max_body_bytes: 5}",
            format!("{e}.graphql_max_body_bytes"),
            "graphql or websocket",
        ),
        (
            "{host: a.example.com, port: 1, protocol: mcp, mcp: {max_body_bytes: -1}}",
            format!("{e}.mcp.max_body_bytes"),
            "outside",
        ),
        (
            "{host: a.example.com, port: 1, protocol: rest, credential_signing: sigv5, signing_service: s}",
            format!("{e}.credential_signing"),
            "not sigv4",
        ),
        (
            "{host: a.example.com, port: 1, protocol: rest, credential_signing: sigv4}",
            format!("{e}.signing_service"),
            "required",
        ),
        (
            "{host: a.example.com, port: 1, protocol: rest, credential_signing: sigv4, signing_service: s, request_body_credential_rewrite: true}",
            format!("{e}.credential_signing"),
            "cannot be combined",
        ),
        ("{host: a.example.com, port: 1, ports: [2]}", e.to_string(), "not both"),
        (
            "{host: a.example.com, port: 1, protocol: rest, rules: [{allow: {method: GET, query: {q: 'a?'}}}]}",
            format!("{e}.rules[0].allow.query.q"),
            "only `*`",
        ),
        (
            "{host: a.example.com, port: 1, protocol: rest, rules: [{allow: {method: GET, query: {q: {any: []}}}}]}",
            format!("{e}.rules[0].allow.query.q.any"),
            "at least one",
        ),
        (
            "{host: a.example.com, port: 1, protocol: rest, rules: [{allow: {method: GET, tool: x}}]}",
            format!("{e}.rules[0].allow.tool"),
            "protocol mcp only",
        ),
        (
            "{host: a.example.com, port: 1, protocol: graphql, rules: [{allow: {operation_type: upsert}}]}",
            format!("{e}.rules[0].allow.operation_type"),
            "not query",
        ),
    ];
    for (ep, path, why) in cases {
        let err = endpoint_err(ep);
        assert_eq!(&err.path, path, "{ep}: {err}");
        assert!(err.reason.contains(why), "{ep}: {err}");
    }
}

#[test]
fn port_and_ports_are_exclusive_as_upstream() {
    let e = endpoint_err("{host: a.example.com, port: 443, ports: [443, 8443]}");
    assert_eq!(e.path, "network_policies.r.endpoints[0]");
    assert!(e.reason.contains("not both"), "{e}");
}

#[test]
fn middleware_errors_name_the_field() {
    let mw = |body: &str| err_of(&format!("version: 1\nnetwork_middlewares:\n  m: {body}\n"));
    let e = mw("{endpoints: {include: [a.example.com]}}");
    assert_eq!(e.path, "network_middlewares.m.middleware");
    let e = mw("{middleware: x, endpoints: {include: []}}");
    assert_eq!(e.path, "network_middlewares.m.endpoints.include");
    let e = mw("{middleware: x, on_error: maybe, endpoints: {include: [a.example.com]}}");
    assert_eq!(e.path, "network_middlewares.m.on_error");
    let e = mw("{middleware: x, endpoints: {include: ['*.com']}}");
    assert_eq!(e.path, "network_middlewares.m.endpoints.include[0]");
    let e = mw("{middleware: x, endpoints: {include: [a.example.com]}, typo: 1}");
    assert!(e.reason.contains("unknown field `typo`"), "{e}");
    let dup = err_of(
        "version: 1\nnetwork_middlewares:\n  a: {middleware: x, order: 1, endpoints: {include: [a.example.com]}}\n  b: {middleware: x, order: 1, endpoints: {include: [a.example.com]}}\n",
    );
    assert_eq!(dup.path, "network_middlewares.b.order");
    let mut many = String::from("version: 1\nnetwork_middlewares:\n");
    for i in 0..=limits::MAX_MIDDLEWARES {
        many.push_str(&format!("  m{i}: {{middleware: x, order: {i}, endpoints: {{include: [a.example.com]}}}}\n"));
    }
    let e = err_of(&many);
    assert_eq!(e.path, "network_middlewares");
    assert!(e.reason.contains("limit is 10"), "{e}");
}

#[test]
fn unknown_fields_in_new_sections_are_refused() {
    let e = endpoint_err("{host: a.example.com, port: 1, protocol: mcp, mcp: {strict_tool_name: true}}");
    assert_eq!(e.path, "network_policies.r.endpoints[0].mcp.strict_tool_name");
    let e = endpoint_err("{host: a.example.com, port: 1, protocol: rest, rules: [{allow: {method: GET, qeury: {}}}]}");
    assert_eq!(e.path, "network_policies.r.endpoints[0].rules[0].allow.qeury");
    let e = endpoint_err("{host: a.example.com, port: 1, allowed_ip: [10.0.0.1]}");
    assert!(e.reason.contains("unknown field `allowed_ip`"), "{e}");
}
