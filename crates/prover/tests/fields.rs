//! Verdicts for each field of the full upstream schema: Within, Exceeds with a
//! counterexample the matcher confirms, or Unsupported naming the field.

use std::time::Duration;

use openshell_policy::{Access, NetworkRequest, Policy};
use openshell_prover::{Counterexample, Prover, Verdict, boundary};

fn p(yaml: &str) -> Policy {
    Policy::from_yaml(&format!("version: 1\n{yaml}")).unwrap_or_else(|e| panic!("{e}\n{yaml}"))
}

/// One named rule for `/usr/bin/curl` with the given endpoints.
fn net(endpoints: &str) -> String {
    format!("network_policies:\n  r:\n    endpoints: [{endpoints}]\n    binaries: [{{path: /usr/bin/curl}}]\n")
}

fn check(b: &str, c: &str) -> Verdict {
    let (b, c) = (p(b), p(c));
    let v = Prover::new(Duration::from_secs(10)).check(&b, &c);
    if let Verdict::Exceeds(cx) = &v {
        assert!(c.allows(&cx.request) && !b.allows(&cx.request), "replay: {cx:?}");
    }
    v
}

fn within(b: &str, c: &str) {
    assert_eq!(check(b, c), Verdict::Within, "boundary:\n{b}\ncandidate:\n{c}");
}

fn exceeds(b: &str, c: &str) -> (Counterexample, NetworkRequest) {
    match check(b, c) {
        Verdict::Exceeds(cx) => {
            let Access::Network(req) = cx.request.clone() else { panic!("{cx:?}") };
            (cx, req)
        }
        other => panic!("expected Exceeds, got {other:?}\nboundary:\n{b}\ncandidate:\n{c}"),
    }
}

fn unsupported(b: &str, c: &str, naming: &str) {
    match check(b, c) {
        Verdict::Unsupported(r) => assert!(r.contains(naming), "{r}"),
        other => panic!("expected Unsupported naming {naming}, got {other:?}"),
    }
}

const DB: &str = "host: db.example.com, port: 5432";

#[test]
fn allowed_ips_are_address_ranges() {
    let b = net(&format!("{{{DB}, allowed_ips: [10.0.0.0/8]}}"));
    within(&b, &net(&format!("{{{DB}, allowed_ips: [10.0.5.0/24, 10.9.9.9]}}")));
    within(&b, &b);
    let (cx, req) = exceeds(&net(&format!("{{{DB}, allowed_ips: [10.0.5.0/24]}}")), &b);
    let addr = req.addr.expect("the counterexample names the address");
    assert!(cx.hint.contains("allows only addresses in 10.0.5.0/24"), "{}", cx.hint);
    assert!(addr.to_string().starts_with("10.") && !addr.to_string().starts_with("10.0.5."), "{addr}");
    // No allowed_ips in the candidate: any address, and unknown ones too.
    exceeds(&b, &net(&format!("{{{DB}}}")));
    // An L4 boundary without the list allows every address.
    within(&net(&format!("{{{DB}}}")), &b);
    // IPv6 and IPv4 are different families.
    let (_, req) = exceeds(&b, &net(&format!("{{{DB}, allowed_ips: ['fd00::/8']}}")));
    assert!(req.addr.unwrap().is_ipv6());
}

#[test]
fn loopback_and_link_local_never_count() {
    within("", &net(&format!("{{{DB}, allowed_ips: [127.0.0.0/8, 169.254.0.0/16, '::1']}}")));
}

#[test]
fn hostless_endpoints() {
    let hostless = net("{port: 8080, allowed_ips: [192.0.2.0/24]}");
    // Any host: a boundary that names hosts does not hold it.
    let (_, req) = exceeds(&net("{host: a.example.com, port: 8080}"), &hostless);
    assert!(req.addr.is_some_and(|a| a.to_string().starts_with("192.0.2.")), "{req:?}");
    within(&hostless, &hostless);
    within(&hostless, &net("{host: a.example.com, port: 8080, allowed_ips: [192.0.2.0/25]}"));
    within(&net("{port: 8080, allowed_ips: [192.0.0.0/16]}"), &hostless);
    let (_, req) = exceeds(&net("{port: 8080, allowed_ips: [192.0.2.0/25]}"), &hostless);
    assert!(req.addr.is_some_and(|a| a.to_string().starts_with("192.0.2.")), "{req:?}");
    // Hosts the boundary names and hosts it does not are both checked.
    let b = "network_policies:\n  a:\n    endpoints: [{port: 8080, allowed_ips: [192.0.2.0/24]}]\n    binaries: [{path: /usr/bin/curl}]\n  b:\n    endpoints: [{host: a.example.com, port: 8080}]\n    binaries: [{path: /usr/bin/curl}]\n";
    within(b, &hostless);
    within(b, &net("{host: a.example.com, port: 8080}"));
}

#[test]
fn tls_skip_does_not_change_what_is_reachable() {
    within(&net(&format!("{{{DB}}}")), &net(&format!("{{{DB}, tls: skip}}")));
    within(&net(&format!("{{{DB}, tls: skip}}")), &net(&format!("{{{DB}}}")));
    exceeds(&net("{host: a.example.com, port: 443}"), &net(&format!("{{{DB}, tls: skip}}")));
}

const GH: &str = "host: api.github.com, port: 443, protocol: rest, enforcement: enforce";

#[test]
fn query_in_candidate_rules() {
    // The widened candidate (query removed) fits: within.
    within(
        &net(&format!("{{{GH}, rules: [{{allow: {{method: GET, path: '/repos/**'}}}}]}}")),
        &net(&format!("{{{GH}, rules: [{{allow: {{method: GET, path: '/repos/**', query: {{per_page: '1*'}}}}}}]}}")),
    );
    // Exceeds, and the counterexample carries a query the candidate's rule needs.
    let (cx, req) = exceeds(
        &net(&format!("{{{GH}, rules: [{{allow: {{method: GET, path: '/user'}}}}]}}")),
        &net(&format!("{{{GH}, rules: [{{allow: {{method: GET, path: '/repos/*', query: {{page: '2*'}}}}}}]}}")),
    );
    let http = req.http.unwrap();
    assert_eq!(http.query["page"], ["2"], "{}", cx.access);
    assert!(cx.access.contains("?page=2"), "{}", cx.access);
}

#[test]
fn query_in_boundary_rules() {
    let b = net(&format!("{{{GH}, access: full, deny_rules: [{{method: '*', path: '/**', query: {{debug: '*'}}}}]}}"));
    // The candidate does not deny `debug`: the counterexample sends it.
    let (_, req) = exceeds(&b, &net(&format!("{{{GH}, access: read-only}}")));
    assert!(req.http.unwrap().query.contains_key("debug"));
    // The same deny in the candidate: kept verbatim, within.
    within(&b, &b);
    // A boundary allow rule with a query is dropped from what the prover relies on; a
    // candidate without the query is wider and replays.
    let b =
        net(&format!("{{{GH}, rules: [{{allow: {{method: GET, path: '/repos/**', query: {{per_page: '1*'}}}}}}]}}"));
    let (_, req) = exceeds(&b, &net(&format!("{{{GH}, rules: [{{allow: {{method: GET, path: '/repos/**'}}}}]}}")));
    let q = req.http.unwrap().query;
    assert!(q.get("per_page").is_none_or(|v| v.iter().any(|v| !v.starts_with('1'))), "{q:?}");
    // Query values are decided exactly: narrower is within, wider exceeds with the value.
    within(
        &b,
        &net(&format!("{{{GH}, rules: [{{allow: {{method: GET, path: '/repos/x', query: {{per_page: '10*'}}}}}}]}}")),
    );
    let (cx, req) = exceeds(
        &b,
        &net(&format!(
            "{{{GH}, rules: [{{allow: {{method: GET, path: '/repos/x', query: {{per_page: {{any: ['1*', '2*']}}}}}}}}]}}"
        )),
    );
    let q = req.http.unwrap().query;
    assert!(q["per_page"].iter().any(|v| v.starts_with('2')), "{}", cx.access);
    // Several values: the boundary needs all of them to match.
    within(
        &b,
        &net(&format!(
            "{{{GH}, rules: [{{allow: {{method: GET, path: '/repos/x', query: {{per_page: '1*', sort: asc}}}}}}]}}"
        )),
    );
}

#[test]
fn query_beyond_the_class_limits_is_approximated_and_named() {
    // Many overlapping globs on one key: too many kinds of values to enumerate.
    let globs = ["a*", "*b", "c*", "*d", "*e*"];
    let rules: Vec<String> =
        globs.iter().map(|g| format!("{{allow: {{method: GET, path: '/x', query: {{q: '{g}'}}}}}}")).collect();
    let b = net(&format!("{{{GH}, rules: [{}]}}", rules.join(", ")));
    unsupported(
        &b,
        &net(&format!("{{{GH}, rules: [{{allow: {{method: GET, path: '/x', query: {{q: 'ab'}}}}}}]}}")),
        "query",
    );
    within(&b, &b);
}

#[test]
fn endpoint_path() {
    let mcp_path = net("{host: a.example.com, port: 443, protocol: rest, path: '/api/**'}");
    // Candidate path removed (wider): an L4 boundary holds it.
    within(&net("{host: a.example.com, port: 443}"), &mcp_path);
    within(&mcp_path, &mcp_path);
    let (cx, req) = exceeds(&mcp_path, &net("{host: a.example.com, port: 443}"));
    assert!(cx.hint.contains("allows only HTTP on path /api/**"), "{}", cx.hint);
    // Folded into the HTTP rules, the path is decided exactly when the globs nest.
    let rest = |rules: &str| {
        net(&format!("{{host: a.example.com, port: 443, protocol: rest, enforcement: enforce, {rules}}}"))
    };
    within(&mcp_path, &rest("rules: [{allow: {method: POST, path: '/api/v1/*'}}]"));
    within(
        &rest("access: full"),
        &mcp_path.replace("protocol: rest,", "protocol: rest, enforcement: enforce, access: read-only,"),
    );
    let scoped = rest("path: '/api/**', access: full");
    within(&scoped, &rest("rules: [{allow: {method: GET, path: '/api/x'}}]"));
    let (_, outside) = exceeds(&scoped, &rest("rules: [{allow: {method: GET, path: '/**'}}]"));
    assert!(!outside.http.unwrap().path.starts_with("/api"));
    // Paths that do not nest: approximated, and named when that does not settle it.
    let odd = rest("path: '/a/*/c', rules: [{allow: {method: GET, path: '/a/b/*'}}]");
    within(&rest("rules: [{allow: {method: GET, path: '/a/**'}}]"), &odd);
    unsupported(&odd, &rest("rules: [{allow: {method: GET, path: '/a/b/c'}}]"), "path");
    assert!(req.http.as_ref().is_none_or(|h| !h.path.starts_with("/api")), "{req:?}");
}

#[test]
fn fields_without_a_model_are_unsupported_by_name() {
    let b = net("{host: a.example.com, port: 443}");
    let cases = [
        (
            "{host: a.example.com, port: 443, protocol: rest, enforcement: enforce, access: full, request_body_credential_rewrite: true}",
            "request_body_credential_rewrite",
        ),
        (
            "{host: a.example.com, port: 443, protocol: rest, access: full, credential_signing: sigv4, signing_service: s3}",
            "credential_signing",
        ),
        (
            "{host: a.example.com, port: 443, protocol: rest, access: full, allow_uninspected_credentials: true}",
            "allow_uninspected_credentials",
        ),
        (
            "{host: a.example.com, port: 443, protocol: rest, enforcement: enforce, access: full, allow_encoded_slash: true}",
            "allow_encoded_slash",
        ),
        ("{host: a.example.com, port: 443, protocol: graphql, enforcement: enforce, access: read-only}", "graphql"),
        ("{host: a.example.com, port: 443, protocol: websocket, enforcement: enforce, access: full}", "websocket"),
        (
            "{host: a.example.com, port: 443, protocol: sql, enforcement: enforce, rules: [{allow: {command: SELECT}}]}",
            "sql",
        ),
        (
            "{host: a.example.com, port: 443, protocol: json-rpc, enforcement: enforce, rules: [{allow: {method: '*'}}]}",
            "json-rpc",
        ),
        ("{host: a.example.com, port: 443, protocol: mcp, enforcement: enforce, rules: [{allow: {tool: '*'}}]}", "mcp"),
    ];
    for (ep, field) in cases {
        unsupported(&b, &net(ep), field);
    }
    // The boundary's own L4 endpoint with credential handling, copied verbatim, is within;
    // an enforced one is decided by its handler and stays unsupported.
    let l4 = net("{host: a.example.com, port: 443, protocol: rest, access: full, allow_uninspected_credentials: true}");
    within(&l4, &l4);
    let enforced = net(cases[0].0);
    unsupported(&enforced, &enforced, "request_body_credential_rewrite");
}

#[test]
fn audit_endpoints_of_other_protocols_are_l4() {
    let b = net("{host: a.example.com, port: 443}");
    within(
        &b,
        &net("{host: a.example.com, port: 443, protocol: graphql, access: read-only, graphql_max_body_bytes: 10}"),
    );
    within(&b, &net("{host: a.example.com, port: 443, protocol: mcp, mcp: {strict_tool_names: true}}"));
}

#[test]
fn middlewares() {
    let mw = "network_middlewares:\n  m: {middleware: openshell/regex, endpoints: {include: ['*.example.com']}}\n";
    let b = net("{host: a.example.com, port: 443}");
    // A candidate's middleware only blocks.
    within(&b, &format!("{mw}{b}"));
    // A boundary middleware that fails closed blocks its hosts: the child may not rely on it.
    let (cx, req) = exceeds(&format!("{mw}{b}"), &b);
    assert_eq!(req.host, "a.example.com");
    assert!(cx.hint.contains("middleware that fails closed"), "{}", cx.hint);
    let open = mw.replace("endpoints:", "on_error: fail_open, endpoints:");
    within(&format!("{open}{b}"), &b);
}

/// The fast path's first example of a widened candidate can be one its own middleware
/// blocks; the excess elsewhere is still shown (z3 finds it), not refused as undecided.
/// Found by the differential test `fast_paths_agree_with_z3_on_the_new_fields`.
#[test]
fn an_excess_beside_a_candidate_middleware_is_shown() {
    let mw = "network_middlewares:\n  m: {middleware: openshell/regex, endpoints: {include: [a.example.com]}}\n";
    let c = format!("{mw}{}", net("{host: '*.example.com', port: 8080}"));
    let (_, req) = exceeds("network_policies: {}\n", &c);
    assert_ne!(req.host, "a.example.com");
}

#[test]
fn boundary_intersects_the_new_fields() {
    let parent = p(&net(&format!(
        "{{{DB}, allowed_ips: [10.0.0.0/8, 192.0.2.0/24]}}, {{{GH}, rules: [{{allow: {{method: GET, path: '/**', query: {{a: x}}}}}}]}}"
    )));
    let global = p(&net(&format!(
        "{{{DB}, allowed_ips: [10.1.0.0/16, 198.51.100.0/24]}}, {{{GH}, rules: [{{allow: {{method: GET, path: '/repos/**', query: {{b: y}}}}}}]}}"
    )));
    let b = boundary(&parent, Some(&global));
    let eps = &b.network_policies["r"].endpoints;
    let db = eps.iter().find(|e| e.host == "db.example.com").unwrap();
    let ips: Vec<String> = db.allowed_ips.iter().map(ToString::to_string).collect();
    assert_eq!(ips, ["10.1.0.0/16"]);
    let gh = eps.iter().find(|e| e.host == "api.github.com").unwrap();
    assert_eq!(gh.rules[0].allow.path, "/repos/**");
    assert_eq!(gh.rules[0].allow.query.len(), 2, "both queries hold");
    // Sound: every address class of the boundary is within both.
    let pr = Prover::new(Duration::from_secs(10));
    for outer in [&parent, &global] {
        let v = pr.check(outer, &b);
        assert!(matches!(v, Verdict::Within | Verdict::Unsupported(_)), "{v:?}");
    }
    let ips_only = |p: &Policy| {
        let mut p = p.clone();
        p.network_policies.get_mut("r").unwrap().endpoints.retain(|e| e.host == "db.example.com");
        p
    };
    assert_eq!(pr.check(&ips_only(&parent), &ips_only(&b)), Verdict::Within);
    assert_eq!(pr.check(&ips_only(&global), &ips_only(&b)), Verdict::Within);
}

#[test]
fn the_upstream_example_as_parent() {
    let parent = Policy::from_yaml(include_str!("../../policy/tests/fixtures/upstream-example.yaml")).unwrap();
    let b = boundary(&parent, None);
    assert!(!b.network_policies.contains_key("mcp"), "enforced MCP rules are the handler's, not the boundary's");
    let mut child = parent.clone();
    child.network_policies.remove("mcp");
    let pr = Prover::new(Duration::from_secs(10));
    assert_eq!(pr.check(&b, &child), Verdict::Within);
    // The parent itself relies on its MCP rules: unsupported, naming the protocol.
    assert!(matches!(pr.check(&b, &parent), Verdict::Unsupported(r) if r.contains("mcp")));
    // A child that drops the query constraint asks for more.
    let wider = child.to_yaml().replace("per_page: 1*", "per_page: '*'");
    let wider = Policy::from_yaml(&wider).unwrap();
    assert_ne!(wider, child, "the replacement took");
    match pr.check(&b, &wider) {
        Verdict::Exceeds(cx) => assert!(cx.access.contains("per_page="), "{}", cx.access),
        other => panic!("{other:?}"),
    }
}
