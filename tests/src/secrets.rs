//! Where a secret may have leaked: every row of every table, and every file a gateway and
//! its supervisors wrote (logs, state), except the sandboxes' own working directories.

use std::path::{Path, PathBuf};

/// The tables (schema public) with a row whose text contains `needle`.
pub async fn tables_holding(sql: &tokio_postgres::Client, needle: &str) -> Vec<String> {
    let tables = sql
        .query(
            "SELECT table_name::text FROM information_schema.tables \
             WHERE table_schema = 'public' AND table_type = 'BASE TABLE'",
            &[],
        )
        .await
        .unwrap();
    assert!(!tables.is_empty(), "no tables to search");
    let mut found = Vec::new();
    for t in tables {
        let name: String = t.get(0);
        let q = format!("SELECT count(*) FROM \"{name}\" x WHERE strpos(x::text, $1) > 0");
        let n: i64 = sql.query_one(&q, &[&needle]).await.unwrap().get(0);
        if n > 0 {
            found.push(name);
        }
    }
    found
}

/// The files under `dir` containing `needle`, not looking inside folders named `work`
/// (a sandbox's own files, where its main command may write what it was given).
pub fn files_holding(dir: &Path, needle: &str) -> Vec<PathBuf> {
    let mut found = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else { continue };
        for e in entries.flatten() {
            let Ok(t) = e.file_type() else { continue };
            // `work` and `disks` hold what the agents themselves wrote (a disk image holds its
            // sandbox's working directory).
            if t.is_dir() && e.file_name() != "work" && e.file_name() != "disks" {
                stack.push(e.path());
            } else if t.is_file()
                && let Ok(bytes) = std::fs::read(e.path())
                && bytes.windows(needle.len()).any(|w| w == needle.as_bytes())
            {
                found.push(e.path());
            }
        }
    }
    found
}
