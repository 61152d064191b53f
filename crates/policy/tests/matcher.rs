//! The matcher's semantic rules, one test per rule.

use openshell_policy::*;

fn policy(yaml: &str) -> Policy {
    Policy::from_yaml(yaml).unwrap()
}

fn net(program: &str, host: &str, port: u16, http: Option<(&str, &str)>) -> Access {
    Access::Network(NetworkRequest {
        program: program.into(),
        ancestors: vec![],
        host: host.into(),
        port,
        http: http.map(|(m, p)| HttpRequest { method: m.into(), path: p.into(), ..Default::default() }),
        ..Default::default()
    })
}

fn rest(rules: &str) -> Policy {
    policy(&format!(
        "version: 1\nnetwork_policies:\n  gh:\n    endpoints:\n      - {{host: api.github.com, port: 443, protocol: rest, enforcement: enforce, {rules}}}\n    binaries: [{{path: /usr/bin/curl}}]\n"
    ))
}

const CURL: &str = "/usr/bin/curl";

#[test]
fn hosts_match_case_insensitively() {
    let p = rest("access: full");
    assert!(p.allows(&net(CURL, "API.GitHub.COM", 443, Some(("GET", "/")))));
    assert!(p.allows(&net(CURL, "api.github.com.", 443, Some(("GET", "/")))));
    assert!(!p.allows(&net(CURL, "api.github.co", 443, Some(("GET", "/")))));
}

#[test]
fn host_wildcards() {
    let p = policy(
        "version: 1\nnetwork_policies:\n  r:\n    endpoints: [{host: '*.example.com', port: 80}, {host: '**.svc.example.org', port: 80}]\n    binaries: [{path: /bin/x}]\n",
    );
    assert!(p.allows(&net("/bin/x", "a.example.com", 80, None)));
    assert!(!p.allows(&net("/bin/x", "a.b.example.com", 80, None)));
    assert!(!p.allows(&net("/bin/x", "example.com", 80, None)));
    assert!(p.allows(&net("/bin/x", "a.b.svc.example.org", 80, None)));
    assert!(!p.allows(&net("/bin/x", "svc.example.org", 80, None)));
}

#[test]
fn ports_must_be_listed() {
    let p = policy(
        "version: 1\nnetwork_policies:\n  r:\n    endpoints: [{host: a.example.com, ports: [80, 8080]}]\n    binaries: [{path: /bin/x}]\n",
    );
    assert!(p.allows(&net("/bin/x", "a.example.com", 8080, None)));
    assert!(!p.allows(&net("/bin/x", "a.example.com", 443, None)));
}

#[test]
fn binaries_match_program_or_ancestor_with_path_globs() {
    let p = policy(
        "version: 1\nnetwork_policies:\n  r:\n    endpoints: [{host: a.example.com, port: 80}]\n    binaries: [{path: '/usr/bin/python3*'}, {path: '/opt/**/node'}]\n",
    );
    assert!(p.allows(&net("/usr/bin/python3.11", "a.example.com", 80, None)));
    assert!(!p.allows(&net("/usr/bin/x/python3", "a.example.com", 80, None)));
    assert!(p.allows(&net("/opt/a/b/node", "a.example.com", 80, None)));
    assert!(p.allows(&net("/opt/node", "a.example.com", 80, None)));
    assert!(!p.allows(&net("/usr/bin/curl", "a.example.com", 80, None)));
    let child_of_node = Access::Network(NetworkRequest {
        program: "/usr/bin/curl".into(),
        ancestors: vec!["/bin/sh".into(), "/opt/x/node".into()],
        host: "a.example.com".into(),
        port: 80,
        http: None,
        ..Default::default()
    });
    assert!(p.allows(&child_of_node));
}

#[test]
fn no_binaries_means_no_program() {
    let p = policy("version: 1\nnetwork_policies:\n  r:\n    endpoints: [{host: a.example.com, port: 80}]\n");
    assert!(!p.allows(&net("/bin/x", "a.example.com", 80, None)));
}

#[test]
fn presets_expand_to_methods() {
    let ro = rest("access: read-only");
    for m in ["GET", "HEAD", "OPTIONS"] {
        assert!(ro.allows(&net(CURL, "api.github.com", 443, Some((m, "/any/path")))), "{m}");
    }
    assert!(!ro.allows(&net(CURL, "api.github.com", 443, Some(("POST", "/x")))));
    let rw = rest("access: read-write");
    for m in ["GET", "POST", "PUT", "PATCH"] {
        assert!(rw.allows(&net(CURL, "api.github.com", 443, Some((m, "/x")))), "{m}");
    }
    assert!(!rw.allows(&net(CURL, "api.github.com", 443, Some(("DELETE", "/x")))));
    let full = rest("access: full");
    assert!(full.allows(&net(CURL, "api.github.com", 443, Some(("DELETE", "/x")))));
}

#[test]
fn get_rule_also_allows_head() {
    let p = rest("rules: [{allow: {method: GET, path: /repos/**}}]");
    assert!(p.allows(&net(CURL, "api.github.com", 443, Some(("HEAD", "/repos/x")))));
    assert!(!p.allows(&net(CURL, "api.github.com", 443, Some(("POST", "/repos/x")))));
    assert!(!p.allows(&net(CURL, "api.github.com", 443, Some(("GET", "/user")))));
    let head = rest("rules: [{allow: {method: HEAD}}]");
    assert!(!head.allows(&net(CURL, "api.github.com", 443, Some(("GET", "/")))));
}

#[test]
fn deny_rules_win() {
    let p = rest("access: full, deny_rules: [{method: GET, path: '/admin/**'}, {method: DELETE}]");
    assert!(p.allows(&net(CURL, "api.github.com", 443, Some(("GET", "/repos")))));
    assert!(!p.allows(&net(CURL, "api.github.com", 443, Some(("GET", "/admin/x")))));
    assert!(!p.allows(&net(CURL, "api.github.com", 443, Some(("HEAD", "/admin")))));
    assert!(p.allows(&net(CURL, "api.github.com", 443, Some(("POST", "/admin/x")))));
    assert!(!p.allows(&net(CURL, "api.github.com", 443, Some(("DELETE", "/repos")))));
}

#[test]
fn enforced_rest_needs_http_and_valid_inputs() {
    let p = rest("access: full");
    assert!(!p.allows(&net(CURL, "api.github.com", 443, None)));
    assert!(!p.allows(&net(CURL, "api.github.com", 443, Some(("get", "/")))));
    assert!(!p.allows(&net(CURL, "api.github.com", 443, Some(("GET", "/a?b")))));
}

#[test]
fn not_enforced_gives_l4_authority() {
    let audit = policy(
        "version: 1\nnetwork_policies:\n  r:\n    endpoints: [{host: a.example.com, port: 443, protocol: rest, access: read-only}, {host: m.example.com, port: 443, protocol: mcp}]\n    binaries: [{path: /bin/x}]\n",
    );
    assert!(audit.allows(&net("/bin/x", "a.example.com", 443, Some(("DELETE", "/x")))));
    assert!(audit.allows(&net("/bin/x", "a.example.com", 443, None)));
    assert!(audit.allows(&net("/bin/x", "m.example.com", 443, None)));
    let tcp = policy(
        "version: 1\nnetwork_policies:\n  r:\n    endpoints: [{host: a.example.com, port: 22}]\n    binaries: [{path: /bin/x}]\n",
    );
    assert!(tcp.allows(&net("/bin/x", "a.example.com", 22, Some(("POST", "/")))));
}

#[test]
fn enforced_opaque_protocols_allow_nothing_here() {
    let p = policy(
        "version: 1\nnetwork_policies:\n  r:\n    endpoints: [{host: m.example.com, port: 443, protocol: mcp, enforcement: enforce}]\n    binaries: [{path: /bin/x}]\n",
    );
    assert!(!p.allows(&net("/bin/x", "m.example.com", 443, None)));
    assert!(!p.allows(&net("/bin/x", "m.example.com", 443, Some(("POST", "/mcp")))));
}

#[test]
fn network_rule_for_names_the_rule() {
    let p = rest("access: full");
    let Access::Network(req) = net(CURL, "api.github.com", 443, Some(("GET", "/"))) else { unreachable!() };
    assert_eq!(p.network_rule_for(&req), Some(RuleRef { rule: "gh".into(), endpoint: 0 }));
}

#[test]
fn filesystem_beneath_with_mode() {
    let p = policy("version: 1\nfilesystem_policy: {read_only: [/usr], read_write: [/tmp, /]}\n");
    assert!(p.allows(&Access::File { mode: FileMode::Write, path: "/etc/passwd".into() }));
    let p = policy("version: 1\nfilesystem_policy: {read_only: [/usr], read_write: [/tmp]}\n");
    assert!(p.allows(&Access::File { mode: FileMode::Read, path: "/usr".into() }));
    assert!(p.allows(&Access::File { mode: FileMode::Read, path: "/usr/lib/x".into() }));
    assert!(!p.allows(&Access::File { mode: FileMode::Write, path: "/usr/lib/x".into() }));
    assert!(!p.allows(&Access::File { mode: FileMode::Read, path: "/usrx".into() }));
    assert!(p.allows(&Access::File { mode: FileMode::Write, path: "/tmp/a".into() }));
    assert!(!p.allows(&Access::File { mode: FileMode::Write, path: "/etc/passwd".into() }));
    assert!(!p.allows(&Access::Workdir { mode: FileMode::Read }));
    let w = policy("version: 1\nfilesystem_policy: {include_workdir: true}\n");
    assert!(w.allows(&Access::Workdir { mode: FileMode::Write }));
}

#[test]
fn process_and_landlock() {
    let p = policy(
        "version: 1\nprocess: {run_as_user: agent, run_as_group: agents}\nlandlock: {compatibility: hard_requirement}\n",
    );
    assert!(p.allows(&Access::RunAs { user: "agent".into(), group: "agents".into() }));
    assert!(!p.allows(&Access::RunAs { user: "root".into(), group: "agents".into() }));
    assert!(!p.allows(&Access::WithoutLandlock));
    assert!(Policy::default().allows(&Access::WithoutLandlock));
}

#[test]
fn access_displays_for_people() {
    let a = net(CURL, "api.github.com", 443, Some(("POST", "/repos/x/issues")));
    assert_eq!(a.to_string(), "program /usr/bin/curl -> api.github.com:443 POST /repos/x/issues");
    let f = Access::File { mode: FileMode::Write, path: "/etc/passwd".into() };
    assert_eq!(f.to_string(), "write /etc/passwd");
}

fn http_q(method: &str, path: &str, query: &[(&str, &str)]) -> HttpRequest {
    let mut q: std::collections::BTreeMap<String, Vec<String>> = Default::default();
    for (k, v) in query {
        q.entry(k.to_string()).or_default().push(v.to_string());
    }
    HttpRequest { method: method.into(), path: path.into(), query: q }
}

fn req(host: &str, port: u16, addr: Option<&str>, http: Option<HttpRequest>) -> Access {
    Access::Network(NetworkRequest {
        program: CURL.into(),
        host: host.into(),
        port,
        http,
        addr: addr.map(|a| a.parse().unwrap()),
        ..Default::default()
    })
}

#[test]
fn query_allow_needs_every_key_with_all_values_matching() {
    let p =
        rest("rules: [{allow: {method: GET, path: '/repos/**', query: {per_page: '1*', sort: {any: [asc, desc]}}}}]");
    let ok = |q: &[(&str, &str)]| p.allows(&req("api.github.com", 443, None, Some(http_q("GET", "/repos/x", q))));
    assert!(ok(&[("per_page", "10"), ("sort", "asc")]));
    assert!(ok(&[("per_page", "10"), ("per_page", "1"), ("sort", "desc"), ("other", "x")]));
    assert!(!ok(&[("per_page", "10"), ("per_page", "50"), ("sort", "asc")]), "one value fails: all must match");
    assert!(!ok(&[("per_page", "10")]), "a listed key must be present");
    assert!(!ok(&[]));
}

#[test]
fn query_deny_triggers_on_any_value() {
    let p = rest("access: full, deny_rules: [{method: '*', path: '/**', query: {debug: '*', mode: 'raw*'}}]");
    let ok = |q: &[(&str, &str)]| p.allows(&req("api.github.com", 443, None, Some(http_q("GET", "/x", q))));
    assert!(ok(&[]));
    assert!(ok(&[("debug", "1")]), "every listed key must have a matching value");
    assert!(!ok(&[("debug", "1"), ("mode", "cooked"), ("mode", "rawest")]));
    assert!(ok(&[("debug", "1"), ("mode", "cooked")]));
}

#[test]
fn allowed_ips_need_a_known_address_inside() {
    let p = policy(
        "version: 1\nnetwork_policies:\n  r:\n    endpoints: [{host: db.example.com, port: 5432, allowed_ips: [10.0.5.0/24]}, {port: 8080, allowed_ips: ['192.0.2.0/24', 'fd00::/8']}]\n    binaries: [{path: /usr/bin/curl}]\n",
    );
    assert!(p.allows(&req("db.example.com", 5432, Some("10.0.5.9"), None)));
    assert!(!p.allows(&req("db.example.com", 5432, Some("10.0.6.9"), None)));
    assert!(!p.allows(&req("db.example.com", 5432, None, None)), "no address known: no match");
    assert!(!p.allows(&req("other.example.com", 5432, Some("10.0.5.9"), None)), "host and address both hold");
    // Hostless: any host on the port when the address is inside.
    assert!(p.allows(&req("anything.example.net", 8080, Some("192.0.2.7"), None)));
    assert!(p.allows(&req("v6.example.net", 8080, Some("fd00::7"), None)));
    assert!(p.allows(&req("anything.example.net", 8080, Some("::ffff:192.0.2.7"), None)));
    assert!(!p.allows(&req("anything.example.net", 8080, Some("198.51.100.1"), None)));
    assert!(!p.allows(&req("anything.example.net", 8081, Some("192.0.2.7"), None)));
}

#[test]
fn loopback_and_link_local_are_never_allowed() {
    let p = policy(
        "version: 1\nnetwork_policies:\n  r:\n    endpoints: [{host: localhost, port: 80}, {port: 80, allowed_ips: [127.0.0.0/8, 169.254.0.0/16]}]\n    binaries: [{path: /usr/bin/curl}]\n",
    );
    assert!(p.allows(&req("localhost", 80, None, None)), "the address is the proxy's to check");
    for a in ["127.0.0.1", "169.254.169.254", "::1", "fe80::1"] {
        assert!(!p.allows(&req("localhost", 80, Some(a), None)), "{a}");
    }
}

#[test]
fn endpoint_path_limits_the_endpoint_to_http_on_it() {
    let p = policy(
        "version: 1\nnetwork_policies:\n  r:\n    endpoints: [{host: a.example.com, port: 443, protocol: rest, path: '/api/**', rules: [{allow: {method: GET}}]}]\n    binaries: [{path: /usr/bin/curl}]\n",
    );
    assert!(p.allows(&req("a.example.com", 443, None, Some(http_q("POST", "/api/x", &[])))), "audit: L4 on the path");
    assert!(!p.allows(&req("a.example.com", 443, None, Some(http_q("GET", "/other", &[])))));
    assert!(!p.allows(&req("a.example.com", 443, None, None)), "raw traffic is on no path");
}

#[test]
fn what_the_matcher_cannot_evaluate_allows_nothing() {
    for ep in [
        "{host: a.example.com, port: 443, protocol: rest, enforcement: enforce, access: full, request_body_credential_rewrite: true}",
        "{host: a.example.com, port: 443, protocol: rest, enforcement: enforce, access: full, credential_signing: sigv4, signing_service: s3}",
        "{host: a.example.com, port: 443, protocol: websocket, enforcement: enforce, access: full}",
        "{host: a.example.com, port: 443, protocol: graphql, enforcement: enforce, access: read-only}",
        "{host: a.example.com, port: 443, protocol: sql, enforcement: enforce, rules: [{allow: {command: SELECT}}]}",
        "{host: a.example.com, port: 443, protocol: json-rpc, enforcement: enforce, rules: [{allow: {method: '*'}}]}",
        "{host: a.example.com, port: 443, protocol: mcp, enforcement: enforce, rules: [{allow: {tool: '*'}}]}",
    ] {
        let p = policy(&format!(
            "version: 1\nnetwork_policies:\n  r:\n    endpoints: [{ep}]\n    binaries: [{{path: /usr/bin/curl}}]\n"
        ));
        assert!(!p.allows(&req("a.example.com", 443, None, Some(http_q("GET", "/", &[])))), "{ep}");
        assert!(!p.allows(&req("a.example.com", 443, None, None)), "{ep}");
    }
}

#[test]
fn fail_closed_middlewares_block_their_hosts() {
    let yaml = |on_error: &str| {
        format!(
            "version: 1\nnetwork_middlewares:\n  m: {{middleware: openshell/regex, on_error: {on_error}, endpoints: {{include: ['*.example.com'], exclude: [b.example.com]}}}}\nnetwork_policies:\n  r:\n    endpoints: [{{host: '*.example.com', port: 80}}]\n    binaries: [{{path: /usr/bin/curl}}]\n"
        )
    };
    let closed = policy(&yaml("fail_closed"));
    assert!(!closed.allows(&req("a.example.com", 80, None, None)));
    assert!(closed.allows(&req("b.example.com", 80, None, None)), "excluded");
    let open = policy(&yaml("fail_open"));
    assert!(open.allows(&req("a.example.com", 80, None, None)));
}

#[test]
fn access_display_shows_address_and_query() {
    let a = req("db.example.com", 443, Some("10.0.0.1"), Some(http_q("GET", "/x", &[("a", "1"), ("a", "2")])));
    assert_eq!(a.to_string(), "program /usr/bin/curl -> db.example.com:443 (address 10.0.0.1) GET /x?a=1&a=2");
}

#[test]
fn requests_deserialize_without_the_new_fields() {
    let r: NetworkRequest = serde_json::from_value(serde_json::json!({
        "program": "/usr/bin/curl", "host": "a.example.com", "port": 80, "http": {"method": "GET", "path": "/"}
    }))
    .unwrap();
    assert_eq!((r.addr, r.http.unwrap().query.len()), (None, 0));
}

/// `/` holds every absolute path and nothing else; other roots hold themselves and what lies
/// beneath them by whole segments. The prover's filesystem section uses this same function.
#[test]
fn is_beneath_at_the_root_and_by_segments() {
    use openshell_policy::is_beneath;
    assert!(is_beneath("/", "/") && is_beneath("/etc/passwd", "/"));
    assert!(!is_beneath("", "/") && !is_beneath("etc", "/"));
    assert!(is_beneath("/usr", "/usr") && is_beneath("/usr/lib", "/usr"));
    assert!(!is_beneath("/usrx", "/usr") && !is_beneath("/", "/usr"));
}
