//! CSI v1.12 bindings generated from this crate's own `proto/csi.proto`.

/// Generated messages and gRPC stubs of package `csi.v1`.
#[allow(clippy::all, clippy::pedantic, missing_docs)]
pub mod v1 {
    include!("gen/csi.v1.rs");
}

/// Encoded `FileDescriptorSet` of `csi.proto`, used to find fields marked `csi_secret`.
pub const FILE_DESCRIPTOR_SET: &[u8] = include_bytes!("gen/csi_descriptor.bin");
