//! gRPC contracts of the gateway (openshell.v1), generated from proto/.

#![allow(clippy::all, missing_docs)]

pub mod v1 {
    tonic::include_proto!("openshell.v1");

    /// Encoded descriptors of every message and service, for server reflection.
    pub const FILE_DESCRIPTOR_SET: &[u8] = tonic::include_file_descriptor_set!("openshell_descriptor");
}

/// Serializes a `SandboxKind` field by name ("agent", "tool") rather than number.
pub fn kind_name<S: serde::Serializer>(kind: &i32, s: S) -> Result<S::Ok, S::Error> {
    let name = match v1::SandboxKind::try_from(*kind) {
        Ok(v1::SandboxKind::Agent) => "agent",
        Ok(v1::SandboxKind::Tool) => "tool",
        _ => "unspecified",
    };
    s.serialize_str(name)
}

pub mod sandbox_env;
