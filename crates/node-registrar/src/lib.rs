//! Registers one CSI driver with kubelet, like kubernetes-csi's node-driver-registrar: learn the
//! driver's name from its Identity service, then serve kubelet's plugin-registration API on
//! `<plugins_registry>/<driver>-reg.sock` until told to stop. Test infrastructure for the
//! test environment's real node; never shipped in the image.

// No unsafe code here: `forbid`, unlike the workspace's `deny`, cannot be allowed again below.
#![forbid(unsafe_code)]
// Shipped code reports failures instead of panicking; tests are free to unwrap.
#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used))]

/// Generated messages and gRPC stubs of package `pluginregistration`.
#[allow(clippy::all, clippy::pedantic, missing_docs)]
pub mod v1 {
    include!("gen/pluginregistration.rs");
}

pub mod cli;
pub mod driver;
pub mod plugin;
pub mod server;

pub use driver::{DriverError, driver_name};
pub use plugin::{NameError, plugin_info, socket_file_name};
pub use server::{Listener, ServeError, Stopped};
