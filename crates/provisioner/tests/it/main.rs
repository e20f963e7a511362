//! The provisioner's integration tests, in one binary: one module per area, one support tree.
//!
//! Tests that need the real control plane are `#[ignore]`d (see docs/testing.md); they share
//! the process-wide control plane of `testenv::ControlPlane::shared()` unless a test starts
//! its own. Run one area with `cargo test -p csi-provisioner --test it -- <module>::`.

mod support;

mod bad_input;
mod capacity;
mod claim_lifecycle;
mod claim_memory;
mod data_sources;
mod deletion;
mod deploy;
mod hostpath;
mod migration;
mod no_leaks;
mod node_deployment;
mod operations;
mod placement;
mod provisioning;
mod real_node;
mod record_claims;
mod reservations;
mod write_ahead;
