//! Canonical JSON and hashes of policies written before the full upstream schema was
//! accepted. They are stored in databases: a change here breaks every stored hash and needs
//! a data migration, never a quiet update of these strings.

use openshell_policy::Policy;

const J1: &str = r#"{"filesystem_policy":{"include_workdir":false,"read_only":[],"read_write":[]},"landlock":{"compatibility":"best_effort"},"network_policies":{},"process":{"run_as_group":"sandbox","run_as_user":"sandbox"},"version":1}"#;
const J2: &str = r#"{"filesystem_policy":{"include_workdir":true,"read_only":["/lib","/usr"],"read_write":["/tmp"]},"landlock":{"compatibility":"hard_requirement"},"network_policies":{"github_api":{"binaries":[{"path":"/usr/bin/curl"},{"path":"/usr/bin/git*"}],"endpoints":[{"access":"read-only","enforcement":"enforce","host":"api.github.com","ports":[443],"protocol":"rest"},{"deny_rules":[{"method":"GET","path":"/admin/**"}],"enforcement":"enforce","host":"uploads.github.com","ports":[443,8443],"protocol":"rest","rules":[{"allow":{"method":"GET","path":"/**"}},{"allow":{"method":"POST","path":"/repos/*/issues"}}]}],"name":"github-api"},"mcp_tools":{"binaries":[{"path":"/**"}],"endpoints":[{"enforcement":"enforce","host":"tools.example.com","ports":[443],"protocol":"mcp"}],"name":"mcp_tools"},"plain":{"binaries":[{"path":"/usr/bin/psql"}],"endpoints":[{"enforcement":"audit","host":"*.example.org","ports":[22,80],"protocol":"tcp"},{"enforcement":"audit","host":"db.example.org","ports":[5432],"protocol":"tcp"}],"name":"plain"}},"process":{"run_as_group":"sandbox","run_as_user":"1000"},"version":1}"#;

/// (YAML, canonical JSON with sorted keys, hash)
const PINNED: &[(&str, &str, &str)] = &[
    // Written `version: 1` before a missing filesystem_policy meant the working directory.
    ("version: 1\nfilesystem_policy: {}\n", J1, "acd74690aebcc2714f36ef3fe03185d74cb86b7329535cd460ebb1175d96bc96"),
    (
        r#"
version: 1
filesystem_policy: { include_workdir: true, read_only: [/usr, /lib], read_write: [/tmp] }
landlock: { compatibility: hard_requirement }
process: { run_as_user: "1000", run_as_group: sandbox }
network_policies:
  github_api:
    name: github-api
    endpoints:
      - { host: api.github.com, port: 443, protocol: rest, enforcement: enforce, access: read-only }
      - host: uploads.github.com
        ports: [443, 8443]
        protocol: rest
        enforcement: enforce
        rules:
          - allow: { method: post, path: "/repos/*/issues" }
          - allow: { method: GET }
        deny_rules: [{ method: GET, path: "/admin/**" }]
    binaries: [{ path: /usr/bin/curl }, { path: "/usr/bin/git*" }]
  mcp_tools:
    endpoints: [{ host: tools.example.com, port: 443, protocol: mcp, enforcement: enforce }]
    binaries: [{ path: "/**" }]
  plain:
    endpoints: [{ host: "*.example.org", ports: [80, 22] }, { host: db.example.org, port: 5432, protocol: tcp }]
    binaries: [{ path: /usr/bin/psql }]
"#,
        J2,
        "0d96b729890935ba406e4aeef0d7419916ba21ab7d81112767844a10b779dd09",
    ),
];

fn sorted_json(p: &Policy) -> String {
    // serde_json's Map is a BTreeMap here unless `preserve_order` is on; sort explicitly.
    fn sort(v: &serde_json::Value) -> serde_json::Value {
        match v {
            serde_json::Value::Object(m) => {
                let mut keys: Vec<_> = m.keys().collect();
                keys.sort();
                serde_json::Value::Object(keys.into_iter().map(|k| (k.clone(), sort(&m[k]))).collect())
            }
            serde_json::Value::Array(a) => serde_json::Value::Array(a.iter().map(sort).collect()),
            x => x.clone(),
        }
    }
    sort(&p.canonical_json()).to_string()
}

#[test]
fn canonical_json_and_hashes_of_existing_policies_do_not_change() {
    for (yaml, json, hash) in PINNED {
        let p = Policy::from_yaml(yaml).unwrap();
        assert_eq!(sorted_json(&p), *json, "{yaml}");
        assert_eq!(p.hash_hex(), *hash, "{yaml}");
        // What is stored: the canonical JSON reads back to the same policy and hash.
        let stored = Policy::from_json(&serde_json::from_str(json).unwrap()).unwrap();
        assert_eq!(stored.hash_hex(), *hash, "{json}");
    }
}
