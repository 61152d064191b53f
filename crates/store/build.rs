//! refinery embeds migrations at compile time, and the definitions in sql/ are embedded as
//! sql/revision lists them (in order, with the revision): a new or edited file must trigger a
//! rebuild, and the list becomes `definitions::FILES`.
use std::fmt::Write;
use std::path::PathBuf;

fn main() {
    println!("cargo:rerun-if-changed=../../migrations");
    println!("cargo:rerun-if-changed=../../sql");
    let sql = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").unwrap()).join("../../sql");
    let manifest = sql.join("revision");
    println!("cargo:rerun-if-changed={}", manifest.display());
    let text = std::fs::read_to_string(&manifest).unwrap_or_else(|e| panic!("{}: {e}", manifest.display()));
    let mut revision = None;
    let mut files = String::new();
    for (n, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let mut words = line.split_whitespace();
        let (Some(first), Some(second), None) = (words.next(), words.next(), words.next()) else {
            panic!("{}:{}: expected `revision N` or `FILE SHA256`, got {line:?}", manifest.display(), n + 1);
        };
        if first == "revision" {
            let r: i32 = second.parse().unwrap_or_else(|e| panic!("{}:{}: revision: {e}", manifest.display(), n + 1));
            revision = Some(r);
            continue;
        }
        let path = sql.join(first);
        println!("cargo:rerun-if-changed={}", path.display());
        writeln!(files, "    ({first:?}, {second:?}, include_str!({:?})),", path.display().to_string()).unwrap();
    }
    let revision = revision.unwrap_or_else(|| panic!("{}: no `revision N` line", manifest.display()));
    let out = PathBuf::from(std::env::var("OUT_DIR").unwrap()).join("definitions.rs");
    let code = format!(
        "/// The revision sql/revision records.\npub(crate) const REVISION: i32 = {revision};\n\
         /// Each file of sql/ in the order it applies: its name, the checksum sql/revision records, its text.\n\
         pub(crate) const FILES: &[(&str, &str, &str)] = &[\n{files}];\n"
    );
    std::fs::write(&out, code).unwrap_or_else(|e| panic!("{}: {e}", out.display()));
}
