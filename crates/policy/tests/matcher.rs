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
        http: http.map(|(m, p)| HttpRequest { method: m.into(), path: p.into() }),
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
