//! CSI v1.12 bindings generated from this crate's own `proto/csi.proto`, and the log sanitiser
//! that keeps `csi_secret` fields out of every log line.

/// Generated messages and gRPC stubs of package `csi.v1`.
#[allow(clippy::all, clippy::pedantic, missing_docs)]
pub mod v1 {
    include!("gen/csi.v1.rs");
}

pub mod sanitize;

pub use sanitize::sanitize;

/// Encoded `FileDescriptorSet` of `csi.proto`, used to find fields marked `csi_secret`.
pub const FILE_DESCRIPTOR_SET: &[u8] = include_bytes!("gen/csi_descriptor.bin");
