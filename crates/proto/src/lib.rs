//! gRPC contracts of the gateway (openshell.v1), generated from proto/.

#![allow(clippy::all, missing_docs)]

pub mod v1 {
    tonic::include_proto!("openshell.v1");

    /// Encoded descriptors of every message and service, for server reflection.
    pub const FILE_DESCRIPTOR_SET: &[u8] = tonic::include_file_descriptor_set!("openshell_descriptor");
}
