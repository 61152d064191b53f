//! The audit log's hash chains: a superuser in psql changes a field, deletes, reorders or
//! inserts a receipt, and `openshell audit verify` and `os_verify_audit()` (as the operator
//! role) name the first broken link; a rewrite of a whole chain, heads and all, is caught by
//! heads exported before. `openshell audit export --format ocsf` writes events that carry the
//! OCSF 1.8 schema's required fields (tests/data/ocsf-1.8.0).

use std::path::{Path, PathBuf};

use openshell_e2e::*;
use tokio::process::Command;

/// A tree with receipts of admissions, a refusal and a stop; its root's id.
async fn tree(h: &Harness) -> String {
    let api = h.admin().await;
    let lead = api.root("lead", Some(grant(1, 2, 3))).await.unwrap();
    for n in ["a", "b"] {
        api.child("lead", n, false).await.unwrap();
    }
    refused(api.child("lead", "c", false).await, "LIMIT_REACHED");
    api.sandboxes()
        .stop_sandbox(api.req(openshell_proto::v1::StopSandboxRequest { sandbox: "a".into() }))
        .await
        .unwrap();
    lead.id
}

/// SQL run by psql as the test server's superuser, with every trigger off (as an attacker
/// with superuser rights would).
async fn psql_as_superuser(h: &Harness, sql: &str) {
    let out = Command::new("psql")
        .args([&h.db.url, "-X", "-v", "ON_ERROR_STOP=1", "-c", "SET session_replication_role = replica", "-c", sql])
        .output()
        .await
        .unwrap();
    assert!(out.status.success(), "psql: {}", String::from_utf8_lossy(&out.stderr));
}

async fn cli(h: &Harness, args: &[&str]) -> (i32, String) {
    let out = Command::new(bin("openshell"))
        .args(["--endpoint", &h.endpoint])
        .args(args)
        // Not --token: its warning on stderr would land in the heads file.
        .env("OPENSHELL_TOKEN", &h.admin_token)
        .env_remove("OPENSHELL_CONFIG")
        .env("HOME", &h.state.0)
        .output()
        .await
        .unwrap();
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    (out.status.code().unwrap_or(-1), text)
}

/// `os_verify_audit()` as the operator role: (chain, broken_seq, broken_id, problem) of the
/// broken chains.
async fn broken(h: &Harness, heads: Option<&str>) -> Vec<(String, i64, Option<i64>, String)> {
    let sql = h.sql().await;
    sql.batch_execute("SET ROLE openshell_operator").await.unwrap();
    let heads: Option<serde_json::Value> = heads.map(|t| serde_json::from_str(t).unwrap());
    let rows = sql
        .query(
            "SELECT chain, broken_seq, broken_id, problem FROM os_verify_audit($1) WHERE problem IS NOT NULL",
            &[&heads],
        )
        .await
        .unwrap();
    rows.iter().map(|r| (r.get(0), r.get(1), r.get(2), r.get(3))).collect()
}

/// `(id, seq)` of the tree's receipts in chain order.
async fn chain(h: &Harness, root: &str) -> Vec<(i64, i64)> {
    let sql = h.sql().await;
    let rows =
        sql.query("SELECT id, seq FROM audit_log WHERE chain = $1 ORDER BY seq", &[&root.to_string()]).await.unwrap();
    rows.iter().map(|r| (r.get(0), r.get(1))).collect()
}

/// Asserts the CLI and the operator's SQL both name `problem` at `seq` of the tree's chain.
async fn detected(h: &Harness, root: &str, problem: &str, seq: i64) {
    let found = broken(h, None).await;
    assert_eq!(found.len(), 1, "{found:?}");
    assert_eq!((found[0].0.as_str(), found[0].1, found[0].3.as_str()), (root, seq, problem), "{found:?}");
    let (code, out) = cli(h, &["-o", "json", "audit", "verify"]).await;
    assert_eq!(code, 9, "a broken chain exits 9: {out}");
    assert!(out.contains(&format!("\"problem\": \"{problem}\"")) && out.contains(root), "{out}");
    let (_, table) = cli(h, &["audit", "verify"]).await;
    assert!(table.contains("BROKEN: 1 of"), "{table}");
}

#[tokio::test]
async fn an_untouched_log_verifies_intact() {
    let h = Harness::fake().await;
    let root = tree(&h).await;
    let links = chain(&h, &root).await;
    assert!(links.len() >= 6, "admissions, the refusal and the stop are in the tree's chain: {links:?}");
    assert_eq!(links.iter().map(|l| l.1).collect::<Vec<_>>(), (1..=links.len() as i64).collect::<Vec<_>>());
    assert!(broken(&h, None).await.is_empty());
    let (code, out) = cli(&h, &["audit", "verify"]).await;
    assert_eq!(code, 0, "{out}");
    assert!(out.starts_with("intact: "), "{out}");
}

#[tokio::test]
async fn a_changed_field_is_named() {
    let h = Harness::fake().await;
    let root = tree(&h).await;
    let (id, seq) = chain(&h, &root).await[2];
    psql_as_superuser(&h, &format!("UPDATE audit_log SET message = 'nothing to see' WHERE id = {id}")).await;
    detected(&h, &root, "changed", seq).await;
}

#[tokio::test]
async fn a_deleted_receipt_is_named() {
    let h = Harness::fake().await;
    let root = tree(&h).await;
    let (id, seq) = chain(&h, &root).await[3];
    psql_as_superuser(&h, &format!("DELETE FROM audit_log WHERE id = {id}")).await;
    // The gap shows at the receipt after it.
    detected(&h, &root, "deleted", seq + 1).await;
}

#[tokio::test]
async fn a_reordered_receipt_is_named() {
    let h = Harness::fake().await;
    let root = tree(&h).await;
    let links = chain(&h, &root).await;
    let ((a, _), (b, seq_b)) = (links[1], links[2]);
    // Receipts keep every field but trade places in the log (ids are GENERATED ALWAYS).
    psql_as_superuser(
        &h,
        &format!(
            "CREATE TEMP TABLE moved AS SELECT * FROM audit_log WHERE id IN ({a}, {b});
             DELETE FROM audit_log WHERE id IN ({a}, {b});
             UPDATE moved SET id = {a} + {b} - id;
             INSERT INTO audit_log OVERRIDING SYSTEM VALUE SELECT * FROM moved;"
        ),
    )
    .await;
    detected(&h, &root, "reordered", seq_b).await;
}

#[tokio::test]
async fn a_receipt_inserted_out_of_chain_is_named() {
    let h = Harness::fake().await;
    let root = tree(&h).await;
    psql_as_superuser(
        &h,
        &format!(
            "INSERT INTO audit_log (action, outcome, actor_user, owner_id, root_id, sandbox_id)
             VALUES ('grant.update', 'admitted', 1, 1, '{root}', '{root}')"
        ),
    )
    .await;
    let found = broken(&h, None).await;
    assert_eq!(found.len(), 1, "{found:?}");
    assert_eq!((found[0].0.as_str(), found[0].3.as_str()), (root.as_str(), "inserted"), "{found:?}");
    let (code, out) = cli(&h, &["-o", "json", "audit", "verify"]).await;
    assert!(code == 9 && out.contains("\"problem\": \"inserted\""), "{out}");
}

#[tokio::test]
async fn exported_heads_catch_a_rewritten_chain() {
    let h = Harness::fake().await;
    let root = tree(&h).await;
    let (code, heads) = cli(&h, &["-o", "json", "audit", "head"]).await;
    assert_eq!(code, 0, "{heads}");
    let file = h.state.0.join("heads.json");
    std::fs::write(&file, &heads).unwrap();
    // A superuser who knows the chain's rule rewrites a receipt and relinks everything
    // after it, heads included: the database alone now looks intact.
    psql_as_superuser(
        &h,
        &format!(
            "DO $$
             DECLARE r audit_log; last bytea;
             BEGIN
               UPDATE audit_log SET message = 'rewritten' WHERE chain = '{root}' AND seq = 2;
               FOR r IN SELECT * FROM audit_log WHERE chain = '{root}' ORDER BY seq LOOP
                 r.prev_hash := coalesce(last, ''::bytea);
                 r.row_hash := os_audit_row_hash(r);
                 UPDATE audit_log SET prev_hash = r.prev_hash, row_hash = r.row_hash WHERE id = r.id;
                 last := r.row_hash;
               END LOOP;
               UPDATE audit_chain_heads SET head = last WHERE chain = '{root}';
             END $$"
        ),
    )
    .await;
    assert!(broken(&h, None).await.is_empty(), "the rewrite is consistent in itself");
    let (code, out) = cli(&h, &["audit", "verify", "--heads", file.to_str().unwrap()]).await;
    assert_eq!(code, 9, "{out}");
    assert!(out.contains("rewritten") && out.contains(&root), "{out}");
    let found = broken(&h, Some(&heads)).await;
    assert!(found.iter().any(|b| b.0 == root && b.3 == "rewritten"), "{found:?}");
    // A bad heads file is refused, naming what is wrong.
    std::fs::write(&file, "[{\"chain\": \"x\", \"seq\": 1}]").unwrap();
    let (code, out) = cli(&h, &["audit", "verify", "--heads", file.to_str().unwrap()]).await;
    assert!(code == 2 && out.contains("entry 0 has no `head`"), "{out}");
}

#[tokio::test]
async fn only_an_admin_verifies() {
    let h = Harness::fake().await;
    tree(&h).await;
    let user = h.user("bob").await;
    let r = user.audit().verify_audit(user.req(openshell_proto::v1::VerifyAuditRequest::default())).await;
    refused(r, "NOT_ALLOWED");
}

/// The OCSF schema files the test checks against.
fn schema_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("data/ocsf-1.8.0")
}

fn load(path: &Path) -> serde_json::Value {
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

/// A class's attributes and their requirement, through its `extends` chain to base_event.
fn class_requirements(file: &Path) -> (serde_json::Map<String, serde_json::Value>, i64) {
    let mut attrs = serde_json::Map::new();
    let mut uid = None;
    let mut next = Some(file.to_path_buf());
    while let Some(f) = next {
        let c = load(&f);
        if uid.is_none() {
            uid = c["uid"].as_i64();
        }
        for (k, v) in c["attributes"].as_object().unwrap() {
            if v.is_object() {
                attrs.entry(k.clone()).or_insert(v.clone());
            }
        }
        next = c["extends"].as_str().map(|parent| {
            let dir = f.parent().unwrap();
            let same = dir.join(format!("{parent}.json"));
            if same.exists() { same } else { schema_dir().join("events").join(format!("{parent}.json")) }
        });
    }
    (attrs, uid.unwrap())
}

/// Checks an object against its schema file's required attributes and at_least_one.
fn check_object(value: &serde_json::Value, object: &str, what: &str) {
    let o = load(&schema_dir().join(format!("objects/{object}.json")));
    for (k, v) in o["attributes"].as_object().unwrap() {
        if v["requirement"] == "required" {
            assert!(!value[k].is_null(), "{what}: {object}.{k} is required");
        }
    }
    if let Some(any) = o["constraints"]["at_least_one"].as_array() {
        assert!(any.iter().any(|k| !value[k.as_str().unwrap()].is_null()), "{what}: {object} needs one of {any:?}");
    }
}

#[tokio::test]
async fn the_ocsf_export_carries_the_schemas_required_fields() {
    let h = Harness::fake().await;
    tree(&h).await;
    let (code, out) = cli(&h, &["audit", "export", "--format", "ocsf"]).await;
    assert_eq!(code, 0, "{out}");
    // `out` holds stderr too (the CLI's notes); the events are the JSON lines.
    let events: Vec<serde_json::Value> =
        out.lines().filter(|l| l.starts_with('{')).map(|l| serde_json::from_str(l).unwrap()).collect();
    let receipts = count(&h.sql().await, "SELECT count(*) FROM audit_log").await;
    assert_eq!(events.len() as i64, receipts, "one event per receipt");
    let categories = load(&schema_dir().join("categories.json"));
    let classes: Vec<(i64, &str, &str)> =
        vec![(6, "application", "api_activity"), (3, "iam", "entity_management"), (3, "iam", "account_change")];
    let mut seen = std::collections::BTreeSet::new();
    for e in &events {
        let class_uid = e["class_uid"].as_i64().unwrap();
        let (category, dir, name) = classes
            .iter()
            .find(|(cat, dir, name)| {
                let (_, uid) = class_requirements(&schema_dir().join(format!("events/{dir}/{name}.json")));
                cat * 1000 + uid == class_uid
            })
            .unwrap_or_else(|| panic!("class {class_uid} is not one the export may use: {e}"));
        assert_eq!(categories["attributes"][dir]["uid"].as_i64(), Some(*category));
        let file = schema_dir().join(format!("events/{dir}/{name}.json"));
        let (attrs, _) = class_requirements(&file);
        for (k, v) in &attrs {
            if v["requirement"] == "required" {
                assert!(!e[k].is_null(), "{name}: `{k}` is required, missing in {e}");
            }
        }
        assert_eq!(e["category_uid"].as_i64(), Some(*category), "{e}");
        let activity = e["activity_id"].as_i64().unwrap();
        assert_eq!(e["type_uid"].as_i64(), Some(class_uid * 100 + activity), "{e}");
        let enumerated = load(&file)["attributes"]["activity_id"]["enum"].as_object().cloned().unwrap_or_default();
        assert!(activity == 99 || enumerated.contains_key(&activity.to_string()), "{name}: activity {activity}");
        assert!(e["time"].as_i64().unwrap() > 1_700_000_000_000, "time in ms: {e}");
        check_object(&e["metadata"], "metadata", name);
        check_object(&e["metadata"]["product"], "product", name);
        check_object(&e["actor"], "actor", name);
        if let Some(api) = e.get("api") {
            check_object(api, "api", name);
            check_object(&e["src_endpoint"], "network_endpoint", name);
        }
        if let Some(entity) = e.get("entity") {
            check_object(entity, "managed_entity", name);
        }
        if let Some(user) = e.get("user") {
            check_object(user, "user", name);
        }
        seen.insert(name.to_string());
    }
    assert!(seen.contains("api_activity") && seen.contains("entity_management"), "{seen:?}");
    // The caller, the parent and the user are kept.
    let child = events
        .iter()
        .find(|e| e["unmapped"]["action"] == "sandbox.create_child" && e["status_id"] == 1)
        .expect("an admitted child's event");
    assert_eq!(child["actor"]["user"]["name"], "admin", "{child}");
    assert!(!child["unmapped"]["parent_id"].as_str().unwrap().is_empty(), "{child}");
    assert_eq!(child["unmapped"]["owner"], "admin", "{child}");
    let refusal = events.iter().find(|e| e["status_id"] == 2).expect("the refusal's event");
    assert_eq!(refusal["status_code"], "LIMIT_REACHED", "{refusal}");
}
