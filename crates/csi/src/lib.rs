//! CSI for the provisioner: v1.13 bindings generated from this crate's own `proto/csi.proto`, a
//! client for one driver over a unix socket (per-call timeouts, call metrics, secret-free v5
//! logging), and the log sanitiser that keeps `csi_secret` fields out of every log line.

// No unsafe code here: `forbid`, unlike the workspace's `deny`, cannot be allowed again below.
#![forbid(unsafe_code)]
// Shipped code reports failures instead of panicking; tests are free to unwrap.
#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used))]

/// Generated messages and gRPC stubs of package `csi.v1`.
#[allow(clippy::all, clippy::pedantic, missing_docs)]
pub mod v1 {
    include!("gen/csi.v1.rs");
}

pub mod address;
pub mod capabilities;
pub mod client;
pub mod connection;
pub mod metrics;
pub mod probe;
pub mod sanitize;
pub mod status;
mod watched;

pub use address::AddressError;
pub use capabilities::{DriverCapabilities, fold_capabilities};
pub use client::{Client, methods};
pub use connection::{ConnectError, ConnectOptions};
pub use metrics::CallMetrics;
pub use probe::{ProbeOutcome, probe_outcome};
pub use sanitize::sanitize;
pub use watched::ConnectionLostCallback;

/// Encoded `FileDescriptorSet` of `csi.proto`, used to find fields marked `csi_secret`.
pub const FILE_DESCRIPTOR_SET: &[u8] = include_bytes!("gen/csi_descriptor.bin");
