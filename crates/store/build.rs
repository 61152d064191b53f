//! refinery embeds migrations at compile time; a new .sql file must trigger a rebuild.
fn main() {
    println!("cargo:rerun-if-changed=../../migrations");
}
