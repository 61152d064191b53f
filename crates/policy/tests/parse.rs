//! Parsing, validation errors (path + reason), canonical form and hash.

use openshell_policy::*;

const FULL: &str = r#"
version: 1
filesystem_policy:
  include_workdir: true
  read_only: [/usr, /lib, /etc/]
  read_write: [/sandbox, /tmp]
landlock:
  compatibility: hard_requirement
process:
  run_as_user: sandbox
  run_as_group: sandbox
network_policies:
  github_api:
    name: github-api
    endpoints:
      - host: API.github.com
        port: 443
        protocol: rest
        enforcement: enforce
        access: read-only
      - host: uploads.github.com
        ports: [443, 8443, 443]
        protocol: rest
        enforcement: enforce
        rules:
          - allow: { method: post, path: "/repos/*/issues" }
          - allow: { method: GET }
        deny_rules:
          - { method: GET, path: "/admin/**" }
    binaries:
      - path: /usr/bin/curl
      - path: /usr/bin/git*
  mcp_tools:
    endpoints:
      - { host: tools.example.com, port: 443, protocol: mcp, enforcement: enforce }
    binaries: [{ path: "/**" }]
"#;

fn err_of(yaml: &str) -> PolicyError {
    Policy::from_yaml(yaml).expect_err("must be refused")
}

#[test]
fn parses_every_section_and_normalizes() {
    let p = Policy::from_yaml(FULL).unwrap();
    assert_eq!(p.version, 1);
    assert!(p.filesystem_policy.include_workdir);
    assert_eq!(p.filesystem_policy.read_only, ["/etc", "/lib", "/usr"]);
    assert_eq!(p.landlock.compatibility, LandlockCompatibility::HardRequirement);
    let gh = &p.network_policies["github_api"];
    assert_eq!(gh.name, "github-api");
    let hosts: Vec<_> = gh.endpoints.iter().map(|e| e.host.as_str()).collect();
    assert_eq!(hosts, ["api.github.com", "uploads.github.com"]);
    assert_eq!(gh.endpoints[1].ports, [443, 8443]);
    assert_eq!(gh.endpoints[1].rules[1].allow.method, "POST");
    assert_eq!(gh.endpoints[1].rules[0].allow.path, "/**");
    assert_eq!(p.network_policies["mcp_tools"].name, "mcp_tools");
    assert_eq!(p.network_policies["mcp_tools"].endpoints[0].protocol, Protocol::Other("mcp".into()));
}

#[test]
fn defaults_are_the_empty_policy_with_its_workdir() {
    // Upstream: without a filesystem_policy section the working directory is granted.
    let p = Policy::from_yaml("version: 1\n").unwrap();
    let workdir = FilesystemPolicy { include_workdir: true, ..FilesystemPolicy::default() };
    assert_eq!(p, Policy { filesystem_policy: workdir, ..Policy::default() });
    assert_eq!(Policy::from_yaml("version: 1\nfilesystem_policy: {}\n").unwrap(), Policy::default());
    assert_eq!(p.process.run_as_user, "sandbox");
    assert_eq!(p.landlock.compatibility, LandlockCompatibility::BestEffort);
    assert!(p.network_policies.is_empty());
}

#[test]
fn canonical_json_round_trips_and_is_order_independent() {
    let p = Policy::from_yaml(FULL).unwrap();
    let json = p.canonical_json();
    assert_eq!(Policy::from_json(&json).unwrap(), p);
    assert_eq!(Policy::from_yaml(&p.to_yaml()).unwrap(), p);
    let back: Policy = serde_json::from_value(json.clone()).unwrap();
    assert_eq!(back, p);
    // Explicit defaults.
    assert_eq!(json["network_policies"]["github_api"]["endpoints"][0]["enforcement"], "enforce");
    assert_eq!(json["network_policies"]["mcp_tools"]["endpoints"][0]["ports"][0], 443);

    let reordered = r#"
version: 1
network_policies:
  b: { endpoints: [{host: y.example.com, port: 2}, {host: x.example.com, ports: [1]}], binaries: [{path: /b}, {path: /a}] }
  a: { endpoints: [{host: z.example.com, port: 3, protocol: tcp}] }
"#;
    let swapped = r#"
version: 1
process: { run_as_user: sandbox }
network_policies:
  a: { name: a, endpoints: [{host: Z.example.com, port: 3, protocol: ""}] }
  b: { binaries: [{path: /a}, {path: /b}], endpoints: [{host: x.example.com, port: 1}, {host: y.example.com, ports: [2, 2]}] }
"#;
    let (p1, p2) = (Policy::from_yaml(reordered).unwrap(), Policy::from_yaml(swapped).unwrap());
    assert_eq!(p1, p2);
    assert_eq!(p1.canonical_json(), p2.canonical_json());
    assert_eq!(p1.hash(), p2.hash());
    assert_ne!(p1.hash(), Policy::default().hash());
}

#[test]
fn hash_is_stable_across_releases() {
    // Stored hashes must not change silently: a change here needs a data migration.
    assert_eq!(Policy::default().hash_hex(), "acd74690aebcc2714f36ef3fe03185d74cb86b7329535cd460ebb1175d96bc96");
}

#[test]
fn unknown_fields_are_refused_with_their_path() {
    let e = err_of(
        "version: 1\nnetwork_policies:\n  x:\n    endpoints:\n      - host: a.example.com\n        port: 1\n        tlz: skip\n",
    );
    assert_eq!(e.path, "network_policies.x.endpoints[0].tlz");
    assert!(e.reason.contains("unknown field `tlz`"), "{e}");
    let e = err_of("version: 1\nfilesystem:\n  read_only: []\n");
    assert!(e.reason.contains("unknown field `filesystem`"), "{e}");
    let e = err_of("version: 1\nprocess: { run_as: x }\n");
    assert_eq!(e.path, "process.run_as");
}

#[test]
fn type_errors_name_the_field() {
    let e = err_of("version: 1\nlandlock: { compatibility: strict }\n");
    assert_eq!(e.path, "landlock.compatibility");
    assert!(e.reason.contains("best_effort"), "{e}");
    let e = err_of(
        "version: 1\nnetwork_policies: { x: { endpoints: [{ host: a.example.com, port: 1, access: write }] } }\n",
    );
    assert_eq!(e.path, "network_policies.x.endpoints[0].access");
    let e = err_of("version: 1\nfilesystem_policy: { include_workdir: maybe }\n");
    assert_eq!(e.path, "filesystem_policy.include_workdir");
}

fn endpoint_err(ep: &str) -> PolicyError {
    err_of(&format!("version: 1\nnetwork_policies:\n  r:\n    endpoints:\n      - {ep}\n"))
}

#[test]
fn semantic_errors_name_the_field_and_why() {
    let cases: &[(&str, &str, &str)] = &[
        ("{host: a.example.com, port: 0}", "network_policies.r.endpoints[0].port", "outside 1..=65535"),
        ("{host: a.example.com, port: 65536}", "network_policies.r.endpoints[0].port", "outside"),
        ("{host: a.example.com, ports: [1, -2]}", "network_policies.r.endpoints[0].ports[1]", "outside"),
        ("{host: a.example.com, ports: []}", "network_policies.r.endpoints[0].ports", "at least one"),
        ("{host: a.example.com}", "network_policies.r.endpoints[0]", "`port` or `ports` is required"),
        ("{host: a.example.com, port: 1, ports: [2]}", "network_policies.r.endpoints[0]", "not both"),
        ("{host: '*.com', port: 1}", "network_policies.r.endpoints[0].host", "TLD-wide"),
        ("{host: '**.io', port: 1}", "network_policies.r.endpoints[0].host", "TLD-wide"),
        ("{host: 'a..b.com', port: 1}", "network_policies.r.endpoints[0].host", "empty label"),
        (
            "{host: a.example.com, port: 1, protocol: tcp, access: full}",
            "network_policies.r.endpoints[0].access",
            "needs an L7 protocol",
        ),
        (
            "{host: a.example.com, port: 1, protocol: rest, enforcement: enforce}",
            "network_policies.r.endpoints[0]",
            "needs `access` or `rules`",
        ),
        (
            "{host: a.example.com, port: 1, protocol: rest, access: full, rules: [{allow: {method: GET}}]}",
            "network_policies.r.endpoints[0]",
            "not both",
        ),
        (
            "{host: a.example.com, port: 1, protocol: rest, rules: []}",
            "network_policies.r.endpoints[0].rules",
            "must not be empty",
        ),
        (
            "{host: a.example.com, port: 1, protocol: 'Bad!'}",
            "network_policies.r.endpoints[0].protocol",
            "not a protocol",
        ),
        (
            "{host: a.example.com, port: 1, protocol: rest, rules: [{allow: {path: /x}}]}",
            "network_policies.r.endpoints[0].rules[0].allow.method",
            "required",
        ),
        (
            "{host: a.example.com, port: 1, protocol: rest, rules: [{allow: {method: 'GE T'}}]}",
            "network_policies.r.endpoints[0].rules[0].allow.method",
            "not an HTTP method",
        ),
        (
            "{host: a.example.com, port: 1, protocol: rest, rules: [{allow: {method: GET, path: 'x/y'}}]}",
            "network_policies.r.endpoints[0].rules[0].allow.path",
            "absolute",
        ),
        (
            "{host: a.example.com, port: 1, protocol: rest, access: full, deny_rules: [{method: GET, path: '/a**'}]}",
            "network_policies.r.endpoints[0].deny_rules[0].path",
            "whole segment",
        ),
    ];
    for (ep, path, why) in cases {
        let e = endpoint_err(ep);
        assert_eq!(e.path, *path, "{ep}: {e}");
        assert!(e.reason.contains(why), "{ep}: {e}");
    }
}

#[test]
fn other_semantic_errors() {
    let e = err_of("version: 2\n");
    assert_eq!((e.path.as_str(), e.reason.contains("version 2")), ("version", true));
    let e = err_of("version: 1\nfilesystem_policy: { read_only: [usr] }\n");
    assert_eq!(e.path, "filesystem_policy.read_only[0]");
    let e = err_of("version: 1\nfilesystem_policy: { read_write: [/tmp, '/a/*'] }\n");
    assert_eq!(e.path, "filesystem_policy.read_write[1]");
    let e = err_of("version: 1\nprocess: { run_as_user: root }\n");
    assert_eq!(e.path, "process.run_as_user");
    let e = err_of("version: 1\nprocess: { run_as_group: '0' }\n");
    assert_eq!(e.path, "process.run_as_group");
    let e = err_of("version: 1\nnetwork_policies: { 'bad name': {} }\n");
    assert_eq!(e.path, "network_policies.bad name");
    let e = err_of("version: 1\nnetwork_policies: { r: { binaries: [{path: bin/curl}] } }\n");
    assert_eq!(e.path, "network_policies.r.binaries[0].path");
    let e = err_of("version: 1\nnetwork_policies: { r: { binaries: [{path: '/usr/bin/[a]'}] } }\n");
    assert!(e.reason.contains("not glob syntax"), "{e}");
}

#[test]
fn sizes_are_bounded() {
    let big = format!("version: 1\n#{}\n", "x".repeat(limits::MAX_DOCUMENT_BYTES));
    assert!(err_of(&big).reason.contains("limit"));
    let ports: Vec<String> = (1..=limits::MAX_PORTS_PER_ENDPOINT + 1).map(|p| p.to_string()).collect();
    let e = endpoint_err(&format!("{{host: a.example.com, ports: [{}]}}", ports.join(",")));
    assert_eq!(e.path, "network_policies.r.endpoints[0].ports");
    let rules: Vec<String> =
        (0..=limits::MAX_RULES_PER_ENDPOINT).map(|i| format!("{{allow: {{method: GET, path: /p{i}}}}}")).collect();
    let e = endpoint_err(&format!("{{host: a.example.com, port: 1, protocol: rest, rules: [{}]}}", rules.join(",")));
    assert_eq!(e.path, "network_policies.r.endpoints[0].rules");
    let long = format!("/{}", "a".repeat(limits::MAX_PATTERN_LEN));
    let e = err_of(&format!("version: 1\nnetwork_policies: {{ r: {{ binaries: [{{path: '{long}'}}] }} }}\n"));
    assert!(e.reason.contains("limit"), "{e}");
}

#[test]
fn json_gets_the_same_validation() {
    let v = serde_json::json!({"version": 1, "network_policies": {"r": {"endpoints": [{"host": "*.com", "port": 1}]}}});
    let e = Policy::from_json(&v).unwrap_err();
    assert_eq!(e.path, "network_policies.r.endpoints[0].host");
    let v = serde_json::json!({"version": 1, "extra": true});
    assert!(Policy::from_json(&v).unwrap_err().reason.contains("unknown field"));
    // Deserialize impl validates as well.
    let v = serde_json::json!({"version": 1, "process": {"run_as_user": "root"}});
    assert!(serde_json::from_value::<Policy>(v).is_err());
}
