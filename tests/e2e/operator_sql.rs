//! The operator SQL in sql/reports runs in psql exactly as docs/operators.md writes it, and shows
//! what the gateway recorded.

use openshell_e2e::*;
use openshell_proto::v1 as pb;

async fn psql(url: &str, file: &str, vars: &[(&str, &str)]) -> String {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut cmd = tokio::process::Command::new("psql");
    cmd.arg(url).args(["-X", "-v", "ON_ERROR_STOP=1", "-f"]).arg(root.join(file));
    for (k, v) in vars {
        cmd.arg("-v").arg(format!("{k}={v}"));
    }
    let out = cmd.output().await.expect("psql is installed");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.status.success(), "{file}: {}{stdout}", String::from_utf8_lossy(&out.stderr));
    stdout
}

#[tokio::test]
async fn every_report_runs_and_shows_the_recorded_truth() {
    let h = Harness::fake().await;
    let a = h.admin().await;
    a.root("lead", Some(grant(1, 1, 5))).await.unwrap();
    a.child("lead", "worker", false).await.unwrap();
    refused(a.child("lead", "extra", false).await, "LIMIT_REACHED");
    refused(a.child("worker", "deep", false).await, "LIMIT_REACHED");
    let up = pb::UpdateGrantRequest { sandbox: "lead".into(), max_breadth: Some(4), ..Default::default() };
    a.grants().update_grant(a.req(up)).await.unwrap();
    a.grants().revoke_grant(a.req(pb::RevokeGrantRequest { sandbox: "lead".into() })).await.unwrap();
    // As operators run them: logged in as the read-only operator role.
    let (scheme, rest) = h.db.url.split_once("://").unwrap();
    let url = &format!("{scheme}://openshell_operator@{}", rest.split_once('@').map_or(rest, |(_, host)| host));

    let tree = psql(url, "sql/reports/tree.sql", &[("root", "lead")]).await;
    assert!(tree.contains("lead") && tree.contains("  worker") && tree.contains("user:admin"), "{tree}");
    assert!(tree.contains("(2 rows)"), "{tree}");

    let audit = psql(url, "sql/reports/audit.sql", &[("root", "lead")]).await;
    for action in ["sandbox.create ", "grant.create", "sandbox.create_child", "grant.update", "grant.revoke"] {
        assert!(audit.contains(action), "{action} in {audit}");
    }
    let by_user =
        psql(url, "sql/reports/audit.sql", &[("user", "admin"), ("since", "2000-01-01"), ("until", "now")]).await;
    assert!(by_user.contains("LIMIT_REACHED"), "{by_user}");
    let empty = psql(url, "sql/reports/audit.sql", &[("user", "admin"), ("until", "2000-01-01")]).await;
    assert!(empty.contains("(0 rows)"), "{empty}");

    let history = psql(url, "sql/reports/grant_history.sql", &[("root", "lead")]).await;
    let events: Vec<&str> =
        history.lines().filter_map(|l| ["created", "updated", "revoked"].into_iter().find(|e| l.contains(e))).collect();
    assert_eq!(events, ["created", "updated", "revoked"], "{history}");

    let refusals = psql(url, "sql/reports/refusals.sql", &[]).await;
    let line =
        |reason: &str| refusals.lines().any(|l| l.contains("LIMIT_REACHED") && l.contains(reason) && l.contains(" 1 "));
    assert!(line("breadth") && line("depth"), "{refusals}");

    let counters = psql(url, "sql/reports/counters.sql", &[]).await;
    assert!(counters.contains("(0 rows)"), "no drift: {counters}");
    // lead has one live descendant (worker) and, revoked, no current grant.
    let lead = counters.lines().find(|l| l.trim_start().starts_with("lead ")).unwrap_or_default();
    let cells: Vec<&str> = lead.split('|').map(str::trim).collect();
    assert_eq!((cells.get(3), cells.get(7)), (Some(&"1"), Some(&"none")), "{counters}");

    // Every invariant holds (os_invariants, sql/invariants.sql), one row each.
    let invariants = psql(url, "sql/reports/invariants.sql", &[("timeout", "1 hour")]).await;
    let rows: Vec<Vec<&str>> = invariants
        .lines()
        .map(|l| l.split('|').map(str::trim).collect::<Vec<_>>())
        .filter(|c| c.len() == 3 && c[0] != "invariant")
        .collect();
    assert!(rows.len() >= 11 && rows.iter().all(|c| c[1] == "0"), "{invariants}");
    assert!(rows.iter().any(|c| c[0] == "total_over_limit"), "{invariants}");

    // Without its variable a report says how to call it instead of failing obscurely.
    let usage = psql(url, "sql/reports/tree.sql", &[]).await;
    assert!(usage.contains("usage:"), "{usage}");
}

#[tokio::test]
async fn every_table_and_column_is_commented_for_operators() {
    let h = Harness::fake().await;
    let sql = h.sql().await;
    let missing: Vec<String> = sql
        .query(
            "SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace \
              WHERE n.nspname = 'public' AND c.relkind IN ('r', 'v') AND c.relname <> 'refinery_schema_history' \
                AND obj_description(c.oid, 'pg_class') IS NULL \
             UNION ALL \
             SELECT c.relname || '.' || a.attname FROM pg_class c \
               JOIN pg_namespace n ON n.oid = c.relnamespace \
               JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped \
              WHERE n.nspname = 'public' AND c.relkind = 'r' AND c.relname <> 'refinery_schema_history' \
                AND col_description(c.oid, a.attnum) IS NULL",
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert!(missing.is_empty(), "tables or columns without COMMENT ON: {missing:?}");
}
