//! Generates the gRPC code and the descriptor set that server reflection serves.
use std::path::PathBuf;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let protoc = protoc_bin_vendored::protoc_bin_path()?;
    let out = PathBuf::from(std::env::var("OUT_DIR")?);
    let root = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR")?).join("../../proto");
    let file = root.join("openshell/v1/gateway.proto");
    println!("cargo:rerun-if-changed={}", root.display());
    let mut config = tonic_prost_build::Config::new();
    config.protoc_executable(protoc);
    tonic_prost_build::configure()
        // The CLI prints messages as JSON (`--output json`).
        .type_attribute(".openshell.v1", "#[derive(serde::Serialize)]")
        .field_attribute(".openshell.v1.Sandbox.kind", "#[serde(serialize_with = \"crate::kind_name\")]")
        .file_descriptor_set_path(out.join("openshell_descriptor.bin"))
        .compile_with_config(config, &[file], &[root])?;
    Ok(())
}
