//! Verdicts per section, per glob form, for every unsupported shape, boundary construction
//! and the cache.

use std::time::Duration;

use openshell_policy::{Access, Policy};
use openshell_prover::{BoundaryId, Budget, CacheKey, Prover, Section, StoredPolicy, Verdict, boundary};

fn p(yaml: &str) -> Policy {
    Policy::from_yaml(&format!("version: 1\n{yaml}")).unwrap()
}

fn prover() -> Prover {
    Prover::new(Duration::from_secs(10))
}

fn check(b: &Policy, c: &Policy) -> Verdict {
    let v = prover().check(b, c);
    if let Verdict::Exceeds(cx) = &v {
        assert!(c.allows(&cx.request) && !b.allows(&cx.request), "replay: {cx:?}");
    }
    v
}

fn within(b: &str, c: &str) {
    let v = check(&p(b), &p(c));
    assert_eq!(v, Verdict::Within, "boundary:\n{b}\ncandidate:\n{c}");
}

fn exceeds(b: &str, c: &str) -> openshell_prover::Counterexample {
    match check(&p(b), &p(c)) {
        Verdict::Exceeds(cx) => cx,
        other => panic!("expected Exceeds, got {other:?}\nboundary:\n{b}\ncandidate:\n{c}"),
    }
}

/// One named rule for `/usr/bin/curl` with the given endpoints.
fn net(endpoints: &str) -> String {
    net_for("/usr/bin/curl", endpoints)
}

fn net_for(binary: &str, endpoints: &str) -> String {
    format!("network_policies:\n  gh:\n    endpoints: [{endpoints}]\n    binaries: [{{path: '{binary}'}}]\n")
}

const GH_RO: &str = "{host: api.github.com, port: 443, protocol: rest, enforcement: enforce, access: read-only}";
const GH_FULL_L4: &str = "{host: api.github.com, port: 443}";

#[test]
fn equal_and_empty_policies_are_within() {
    within("", "");
    within(&net(GH_RO), &net(GH_RO));
    within(&net(GH_RO), "");
}

#[test]
fn network_from_nothing_exceeds_with_a_hint() {
    let cx = exceeds("", &net(GH_RO));
    assert_eq!(cx.section, Section::Network);
    assert!(cx.hint.contains("no network access"), "{}", cx.hint);
    assert_eq!(cx.candidate_rule.as_deref(), Some("gh"));
}

#[test]
fn l7_method_widening_exceeds() {
    let c = net(
        "{host: api.github.com, port: 443, protocol: rest, enforcement: enforce, rules: [{allow: {method: POST, path: '/repos/*/issues'}}]}",
    );
    let cx = exceeds(&net(GH_RO), &c);
    let Access::Network(req) = &cx.request else { panic!() };
    let http = req.http.as_ref().unwrap();
    assert_eq!(http.method, "POST");
    assert!(http.path.starts_with("/repos/") && http.path.ends_with("/issues"), "{}", http.path);
    assert!(cx.access.starts_with("program /usr/bin/curl -> api.github.com:443 POST /repos/"), "{}", cx.access);
    assert!(cx.hint.contains("boundary rule gh allows GET, HEAD, OPTIONS only on api.github.com"), "{}", cx.hint);
}

#[test]
fn l7_narrowing_is_within() {
    let b = net(
        "{host: api.github.com, port: 443, protocol: rest, enforcement: enforce, rules: [{allow: {method: GET, path: '/repos/**'}}, {allow: {method: POST, path: '/repos/*/issues'}}]}",
    );
    let c = net(
        "{host: api.github.com, port: 443, protocol: rest, enforcement: enforce, rules: [{allow: {method: HEAD, path: '/repos/x/**'}}, {allow: {method: POST, path: '/repos/y/issues'}}]}",
    );
    within(&b, &c);
}

#[test]
fn get_rule_covers_head_only() {
    let b =
        net("{host: a.example.com, port: 80, protocol: rest, enforcement: enforce, rules: [{allow: {method: GET}}]}");
    within(
        &b,
        &net("{host: a.example.com, port: 80, protocol: rest, enforcement: enforce, rules: [{allow: {method: HEAD}}]}"),
    );
    let cx =
        exceeds(&b, &net("{host: a.example.com, port: 80, protocol: rest, enforcement: enforce, access: read-only}"));
    assert!(cx.access.contains("OPTIONS"), "{}", cx.access);
}

#[test]
fn deny_rules_in_boundary_bind_the_candidate() {
    let b = net(
        "{host: a.example.com, port: 80, protocol: rest, enforcement: enforce, access: full, deny_rules: [{method: '*', path: '/admin/**'}]}",
    );
    let cx = exceeds(&b, &net("{host: a.example.com, port: 80, protocol: rest, enforcement: enforce, access: full}"));
    assert!(cx.access.contains(" /admin"), "{}", cx.access);
    within(
        &b,
        &net(
            "{host: a.example.com, port: 80, protocol: rest, enforcement: enforce, access: full, deny_rules: [{method: '*', path: '/admin/**'}]}",
        ),
    );
    within(
        &b,
        &net(
            "{host: a.example.com, port: 80, protocol: rest, enforcement: enforce, access: full, deny_rules: [{method: '*', path: '/**'}]}",
        ),
    );
}

#[test]
fn l4_candidate_exceeds_l7_boundary_even_with_full_http() {
    let b = net("{host: api.github.com, port: 443, protocol: rest, enforcement: enforce, access: full}");
    let cx = exceeds(&b, &net(GH_FULL_L4));
    let Access::Network(req) = &cx.request else { panic!() };
    assert!(req.http.is_none(), "raw traffic is what only L4 grants: {cx:?}");
    assert!(cx.hint.contains("not raw traffic"), "{}", cx.hint);
    // audit is L4 authority too
    exceeds(&b, &net("{host: api.github.com, port: 443, protocol: rest, access: full}"));
    within(&net(GH_FULL_L4), &b);
}

#[test]
fn ports() {
    let b = net("{host: a.example.com, ports: [80, 443]}");
    within(&b, &net("{host: a.example.com, port: 443}"));
    let cx = exceeds(&b, &net("{host: a.example.com, ports: [443, 8443]}"));
    assert!(cx.access.contains(":8443"), "{}", cx.access);
    assert!(cx.hint.contains("only on port(s) 80, 443"), "{}", cx.hint);
}

#[test]
fn host_star_label() {
    let b = net("{host: '*.example.com', port: 443}");
    within(&b, &net("{host: api.example.com, port: 443}"));
    within(&b, &net("{host: 'api-*.example.com', port: 443}"));
    let cx = exceeds(&b, &net("{host: '**.example.com', port: 443}"));
    assert!(cx.access.matches('.').count() >= 3, "{}", cx.access);
    exceeds(&b, &net("{host: example.com, port: 443}"));
}

#[test]
fn host_double_star() {
    let b = net("{host: '**.example.com', port: 443}");
    within(&b, &net("{host: '*.example.com', port: 443}"));
    within(&b, &net("{host: 'a.*.example.com', port: 443}"));
    within(&b, &net("{host: 'API.X.Example.com', port: 443}"));
    let cx = exceeds(&b, &net("{host: '*.example.org', port: 443}"));
    assert!(cx.hint.contains("allows host **.example.com"), "{}", cx.hint);
}

#[test]
fn binary_globs() {
    let b = net_for("/usr/bin/*", GH_FULL_L4);
    within(&b, &net_for("/usr/bin/curl", GH_FULL_L4));
    within(&b, &net_for("/usr/bin/py*", GH_FULL_L4));
    let cx = exceeds(&b, &net_for("/usr/bin/**", GH_FULL_L4));
    assert!(cx.access.starts_with("program /usr/bin"), "{}", cx.access);
    let cx = exceeds(&net_for("/usr/bin/git", GH_FULL_L4), &net_for("/usr/bin/curl", GH_FULL_L4));
    assert!(cx.hint.contains("does not list program /usr/bin/curl"), "{}", cx.hint);
    within(&net_for("/**", GH_FULL_L4), &net_for("/opt/**/bin/*", GH_FULL_L4));
}

#[test]
fn path_globs() {
    let rest = |path: &str| {
        net(&format!(
            "{{host: a.example.com, port: 80, protocol: rest, enforcement: enforce, rules: [{{allow: {{method: GET, path: '{path}'}}}}]}}"
        ))
    };
    within(&rest("/a/**"), &rest("/a/*/b"));
    within(&rest("/a/**"), &rest("/a"));
    within(&rest("/a/**/z"), &rest("/a/b/c/z"));
    within(&rest("/*/x"), &rest("/a*/x"));
    exceeds(&rest("/a/*"), &rest("/a/**"));
    let cx = exceeds(&rest("/a/**"), &rest("/a*"));
    assert!(cx.access.contains("GET /a") || cx.access.contains("HEAD /a"), "{}", cx.access);
    exceeds(&rest("/a/*/c"), &rest("/a/**/c"));
}

#[test]
fn rules_without_binaries_allow_nothing() {
    within("", "network_policies:\n  r:\n    endpoints: [{host: a.example.com, port: 1}]\n");
}

#[test]
fn union_of_boundary_rules_covers_candidate() {
    let b = "network_policies:\n  one:\n    endpoints: [{host: a.example.com, port: 80, protocol: rest, enforcement: enforce, rules: [{allow: {method: GET}}]}]\n    binaries: [{path: /usr/bin/curl}]\n  two:\n    endpoints: [{host: a.example.com, port: 80, protocol: rest, enforcement: enforce, rules: [{allow: {method: '*', path: '/w/**'}}]}]\n    binaries: [{path: /usr/bin/curl}]\n";
    within(
        b,
        &net(
            "{host: a.example.com, port: 80, protocol: rest, enforcement: enforce, rules: [{allow: {method: GET}}, {allow: {method: POST, path: /w/x}}]}",
        ),
    );
}

/// Unions of boundary endpoints, along each dimension and across them: decided by the
/// cells without z3, with the verdict z3 gives too.
#[test]
fn unions_are_decided_without_z3() {
    let rest = |host: &str, port: &str, rules: &str| {
        format!("{{host: '{host}', ports: [{port}], protocol: rest, enforcement: enforce, rules: [{rules}]}}")
    };
    let rule = |m: &str, p: &str| format!("{{allow: {{method: '{m}', path: '{p}'}}}}");
    let two = |(e1, b1): (String, &str), (e2, b2): (String, &str)| {
        format!(
            "network_policies:\n  one:\n    endpoints: [{e1}]\n    binaries: [{{path: '{b1}'}}]\n  two:\n    endpoints: [{e2}]\n    binaries: [{{path: '{b2}'}}]\n"
        )
    };
    let get_post = format!("{}, {}", rule("GET", "/a/**"), rule("POST", "/a/*"));
    let cases: Vec<(String, String, bool)> = vec![
        // Methods: GET from one endpoint, POST from the other; PUT from neither.
        (
            two(
                (rest("a.example.com", "443", &rule("GET", "/**")), "/usr/bin/curl"),
                (rest("a.example.com", "443", &rule("POST", "/a/*")), "/usr/bin/curl"),
            ),
            net(&rest("a.example.com", "443", &get_post)),
            true,
        ),
        (
            two(
                (rest("a.example.com", "443", &rule("GET", "/**")), "/usr/bin/curl"),
                (rest("a.example.com", "443", &rule("POST", "/a/*")), "/usr/bin/curl"),
            ),
            net(&rest("a.example.com", "443", &format!("{get_post}, {}", rule("PUT", "/a/x")))),
            false,
        ),
        // Hosts: `**.example.com` is `*.example.com` and `**.*.example.com` together.
        (
            two(
                (rest("*.example.com", "443", &rule("GET", "/**")), "/usr/bin/*"),
                (rest("**.*.example.com", "443", &rule("GET", "/**")), "/usr/bin/*"),
            ),
            net(&rest("**.example.com", "443", &rule("GET", "/x/**"))),
            true,
        ),
        (
            two(
                (rest("*.example.com", "443", &rule("GET", "/**")), "/usr/bin/*"),
                (rest("**.*.*.example.com", "443", &rule("GET", "/**")), "/usr/bin/*"),
            ),
            net(&rest("**.example.com", "443", &rule("GET", "/x/**"))),
            false,
        ),
        // Programs and paths across rules: curl may GET anything from one, any program may
        // POST one segment from the other.
        (
            two(
                (rest("a.example.com", "443", &rule("GET", "/**")), "/usr/bin/curl"),
                (rest("a.example.com", "443", &rule("POST", "/a/*")), "/usr/bin/*"),
            ),
            net(&rest("a.example.com", "443", &get_post)),
            true,
        ),
        (
            two(
                (rest("a.example.com", "443", &rule("GET", "/**")), "/usr/bin/curl"),
                (rest("a.example.com", "443", &rule("POST", "/a/*")), "/usr/bin/*"),
            ),
            net_for("/usr/bin/*", &rest("a.example.com", "443", &get_post)),
            false,
        ),
        // Paths: `/a/**` is `/a`, `/a/*` and `/a/*/**` together, over three endpoints.
        (
            format!(
                "network_policies:\n  r:\n    endpoints: [{}, {}, {}]\n    binaries: [{{path: /usr/bin/curl}}]\n",
                rest("a.example.com", "443", &rule("GET", "/a")),
                rest("a.example.com", "443", &rule("GET", "/a/*")),
                rest("a.example.com", "443", &rule("GET", "/a/*/**"))
            ),
            net(&rest("a.example.com", "443", &rule("GET", "/a/**"))),
            true,
        ),
        // Raw traffic needs an L4 endpoint for each program and port.
        (
            two(
                ("{host: a.example.com, ports: [80]}".into(), "/usr/bin/curl"),
                ("{host: a.example.com, ports: [443]}".into(), "/usr/bin/*"),
            ),
            net("{host: a.example.com, ports: [80, 443]}"),
            true,
        ),
        (
            two(
                ("{host: a.example.com, ports: [80]}".into(), "/usr/bin/curl"),
                ("{host: a.example.com, ports: [443]}".into(), "/usr/bin/*"),
            ),
            net_for("/usr/bin/*", "{host: a.example.com, ports: [80, 443]}"),
            false,
        ),
    ];
    let far = || std::time::Instant::now() + Duration::from_secs(30);
    for (b, c, fits) in cases {
        let (b, c) = (p(&b), p(&c));
        let fast = openshell_prover::check_without_z3(&b, &c, far());
        let z3 = openshell_prover::check_by_z3_only(&b, &c, far());
        let show = format!("fast {fast:?}\nz3 {z3:?}\nboundary:\n{}\ncandidate:\n{}", b.to_yaml(), c.to_yaml());
        assert_eq!(fast.is_within(), fits, "{show}");
        assert_eq!(z3.is_within(), fits, "{show}");
        if !fits {
            assert!(matches!(fast, Verdict::Exceeds(_)) && matches!(z3, Verdict::Exceeds(_)), "{show}");
        }
        assert_eq!(check(&b, &c), fast, "{show}");
    }
}

#[test]
fn filesystem() {
    let b = "filesystem_policy: {read_only: [/usr], read_write: [/sandbox, /tmp]}\n";
    within(b, "filesystem_policy: {read_only: [/usr/lib, /sandbox/a], read_write: [/tmp/x]}\n");
    let cx = exceeds(b, "filesystem_policy: {read_write: [/usr/local]}\n");
    assert_eq!(cx.access, "write /usr/local");
    assert_eq!(cx.section, Section::Filesystem);
    assert!(cx.hint.contains("grants /usr read-only"), "{}", cx.hint);
    let cx = exceeds(b, "filesystem_policy: {read_only: [/]}\n");
    assert!(cx.hint.contains("only"), "{}", cx.hint);
    let cx = exceeds(b, "filesystem_policy: {read_write: [/etc]}\n");
    assert_eq!(cx.access, "write /etc");
    let cx = exceeds(b, "filesystem_policy: {include_workdir: true}\n");
    assert!(cx.access.contains("working directory"));
    within("filesystem_policy: {include_workdir: true}\n", "filesystem_policy: {include_workdir: true}\n");
    within(
        "filesystem_policy: {read_write: [/]}\n",
        "filesystem_policy: {include_workdir: true, read_write: [/etc]}\n",
    );
}

/// The boundary's `/` holds every path (`openshell_policy::is_beneath`), read-only here: the
/// hint names it as the root a write falls under.
#[test]
fn filesystem_root_in_the_boundary() {
    let b = "filesystem_policy: {read_only: [/], read_write: [/tmp]}\n";
    within(b, "filesystem_policy: {read_only: [/etc, /], read_write: [/tmp/x]}\n");
    let cx = exceeds(b, "filesystem_policy: {read_write: [/etc]}\n");
    assert_eq!(cx.access, "write /etc");
    assert!(cx.hint.contains("the boundary grants / read-only"), "{}", cx.hint);
    let cx = exceeds("filesystem_policy: {read_only: [/usr]}\n", "filesystem_policy: {read_only: [/]}\n");
    assert!(cx.hint.contains("the boundary grants only /usr beneath it"), "{}", cx.hint);
}

#[test]
fn process() {
    let b = "process: {run_as_user: agent, run_as_group: agents}\n";
    within(b, b);
    let cx = exceeds(b, "process: {run_as_user: other, run_as_group: agents}\n");
    assert_eq!(cx.section, Section::Process);
    assert_eq!(cx.access, "run as user other group agents");
    exceeds(b, "");
}

#[test]
fn landlock() {
    let hard = "landlock: {compatibility: hard_requirement}\n";
    within(hard, hard);
    within("", hard);
    let cx = exceeds(hard, "landlock: {compatibility: best_effort}\n");
    assert_eq!(cx.section, Section::Landlock);
    assert_eq!(cx.access, "run without Landlock");
}

#[test]
fn unsupported_shapes() {
    // An enforced protocol the prover cannot model, in the candidate.
    let mcp = net("{host: tools.example.com, port: 443, protocol: mcp, enforcement: enforce}");
    match check(&p(&net("{host: tools.example.com, port: 443}")), &p(&mcp)) {
        Verdict::Unsupported(r) => assert!(r.contains("mcp"), "{r}"),
        other => panic!("{other:?}"),
    }
    // Too many endpoints for the prover.
    let mut big = String::from("network_policies:\n");
    for i in 0..(openshell_prover::limits::MAX_ENDPOINTS / 64 + 1) {
        let eps: Vec<String> = (0..64).map(|j| format!("{{host: h{j}.example.com, port: {}}}", i + 1)).collect();
        big.push_str(&format!("  r{i}:\n    endpoints: [{}]\n    binaries: [{{path: /x}}]\n", eps.join(", ")));
    }
    match check(&p(""), &p(&big)) {
        Verdict::Unsupported(r) => assert!(r.contains("limit"), "{r}"),
        other => panic!("{other:?}"),
    }
}

#[test]
fn audit_mcp_is_l4_and_supported() {
    within(&net("{host: tools.example.com, port: 443}"), &net("{host: tools.example.com, port: 443, protocol: mcp}"));
}

#[test]
fn boundary_drops_mcp_so_it_never_blocks_children() {
    let parent = p(&format!(
        "{}  tools:\n    endpoints: [{{host: tools.example.com, port: 443, protocol: mcp, enforcement: enforce}}]\n    binaries: [{{path: /usr/bin/curl}}]\n",
        net(GH_RO)
    ));
    let b = boundary(&parent, None);
    assert!(!b.network_policies.contains_key("tools"));
    assert_eq!(check(&b, &p(&net(GH_RO))), Verdict::Within);
    // The parent itself (with mcp) would be refused as a candidate.
    assert!(matches!(check(&b, &parent), Verdict::Unsupported(_)));
}

#[test]
fn boundary_intersects_with_the_global_maximum() {
    let parent = p(&format!(
        "filesystem_policy: {{read_only: [/usr], read_write: [/tmp, /data]}}\n{}",
        net("{host: '*.github.com', ports: [443, 80]}")
    ));
    let global = p(&format!(
        "filesystem_policy: {{read_only: [/], read_write: [/tmp/shared]}}\nlandlock: {{compatibility: hard_requirement}}\n{}",
        net("{host: api.github.com, port: 443, protocol: rest, enforcement: enforce, access: read-write}")
    ));
    let b = boundary(&parent, Some(&global));
    assert_eq!(b.filesystem_policy.read_write, ["/tmp/shared"]);
    assert_eq!(b.filesystem_policy.read_only, ["/data", "/tmp", "/usr"]);
    assert_eq!(b.landlock, global.landlock);
    let ep = &b.network_policies["gh"].endpoints[0];
    assert_eq!((ep.host.as_str(), ep.ports.as_slice()), ("api.github.com", &[443u16][..]));
    // Sound: the boundary is within both.
    assert_eq!(check(&parent, &b), Verdict::Within);
    assert_eq!(check(&global, &b), Verdict::Within);
}

#[test]
fn verdicts_are_cached_by_hash_pair() {
    let pr = prover();
    let (b, c) = (p(&net(GH_RO)), p(&net(GH_FULL_L4)));
    let first = pr.check(&b, &c);
    assert_eq!(pr.cached(), 1);
    assert_eq!(pr.check(&b, &c), first);
    assert_eq!(pr.cached(), 1);
    // Same policies written differently hit the same entry.
    let c2 = p(&net("{host: API.GITHUB.COM, ports: [443, 443]}"));
    assert_eq!(pr.check(&b, &c2), first);
    assert_eq!(pr.cached(), 1);
}

/// Keyed by stored versions (the gateway's keys), a verdict and a built boundary belong to
/// those versions alone: a new parent version or global maximum version, with the same
/// candidate, is proved again against the boundary built for it.
#[test]
fn stored_versions_key_verdicts_and_boundaries_apart() {
    let pr = prover();
    let id = |version: i64, global_version: i64| BoundaryId::Stored {
        parent: Some(StoredPolicy { sandbox: [1; 16], version, hash: [version as u8; 32] }),
        global_version,
    };
    let (wide, narrow, candidate) = (p(&net(GH_FULL_L4)), p(&net(GH_RO)), p(&net(GH_FULL_L4)));
    let budget = || Budget::new(std::time::Instant::now() + Duration::from_secs(10));
    let mut builds = 0;
    let mut prove = |boundary_id: BoundaryId, parent: &Policy| {
        let b = pr
            .boundary_of::<()>(boundary_id, || {
                builds += 1;
                Ok(boundary(parent, None))
            })
            .unwrap();
        let key = CacheKey { boundary: boundary_id, candidate: candidate.hash() };
        pr.check_keyed(key, &b, &candidate, &budget())
    };
    assert_eq!(prove(id(1, 0), &wide), Verdict::Within);
    assert_eq!(prove(id(1, 0), &wide), Verdict::Within);
    // The parent narrowed (version 2), then a global maximum set (version 1): each a new
    // boundary, and the same candidate refused against it.
    assert!(matches!(prove(id(2, 0), &narrow), Verdict::Exceeds(_)));
    assert!(matches!(prove(id(1, 1), &narrow), Verdict::Exceeds(_)));
    assert_eq!((builds, pr.boundaries_kept(), pr.cached()), (3, 3, 3));
    // A boundary known by its hash is at hand already: never kept.
    let by_hash = BoundaryId::Hash(wide.hash());
    pr.boundary_of::<()>(by_hash, || Ok(wide.clone())).unwrap();
    assert_eq!(pr.boundaries_kept(), 3);
}

#[test]
fn verdict_serializes_for_error_details() {
    let v = check(&p(""), &p("filesystem_policy: {read_write: [/etc]}\n"));
    let j = serde_json::to_value(&v).unwrap();
    assert_eq!(j["verdict"], "exceeds");
    assert_eq!(j["details"]["access"], "write /etc");
    assert_eq!(j["details"]["section"], "filesystem");
    assert_eq!(serde_json::to_value(Verdict::Within).unwrap()["verdict"], "within");
}

#[test]
fn timeout_is_inconclusive_and_not_cached() {
    let pr = Prover::new(Duration::ZERO);
    let v = pr.check(&p(""), &p(&net(GH_RO)));
    assert!(matches!(v, Verdict::Inconclusive(_)), "{v:?}");
    assert_eq!(pr.cached(), 0);
}

#[test]
fn parent_and_global_maximum_disagreeing_on_the_account_admit_no_account() {
    let parent = p("process: {run_as_user: alice, run_as_group: alice}\n");
    let global = p("process: {run_as_user: sandbox, run_as_group: sandbox}\n");
    let b = boundary(&parent, Some(&global));
    for child in [&parent, &global] {
        match check(&b, child) {
            Verdict::Exceeds(cx) => assert_eq!(cx.section, openshell_prover::Section::Process, "{cx:?}"),
            other => panic!("expected exceeds, got {other:?}"),
        }
    }
    // When they agree, that account is allowed.
    assert_eq!(check(&boundary(&global, Some(&global)), &global), Verdict::Within);
}
