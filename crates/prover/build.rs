//! Fails early, with the fix, when the z3 library that .cargo/config.toml points at is absent
//! (otherwise the link step would fail later with a bare "cannot find -lz3", or silently pick
//! Debian's too-old libz3).

use std::path::Path;

fn main() {
    println!("cargo:rerun-if-env-changed=Z3_LIBRARY_PATH_OVERRIDE");
    println!("cargo:rerun-if-env-changed=Z3_SYS_Z3_VERSION");
    let Ok(dir) = std::env::var("Z3_LIBRARY_PATH_OVERRIDE") else {
        panic!(
            "openshell-prover needs z3 >= 4.13, but Z3_LIBRARY_PATH_OVERRIDE is not set. \
             Build from the repository (its .cargo/config.toml sets it) after running \
             scripts/setup.sh (or scripts/setup.d/30-z3.sh) as root."
        );
    };
    let lib = Path::new(&dir).join("libz3.so");
    println!("cargo:rerun-if-changed={}", lib.display());
    if !lib.exists() {
        panic!(
            "openshell-prover needs z3 >= 4.13: {} is missing. Run scripts/setup.d/30-z3.sh as \
             root (it installs the official z3-solver wheel into .deps/z3 and its library into \
             /usr/local/lib).",
            lib.display()
        );
    }
    // The prover's own tests and benches also find the library without ldconfig.
    println!("cargo:rustc-link-arg=-Wl,-rpath,{dir}");
}
