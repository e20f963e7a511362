//! Test support: a real local Kubernetes control plane (etcd, kube-apiserver,
//! kube-controller-manager, kube-scheduler) built from Go modules by `cargo xtask testenv
//! build`, fake kubelet-less nodes, and guarded child processes for the CSI drivers (our mock,
//! csi-driver-host-path's plugin), external-snapshotter's controller and sidecar, and the
//! provisioner under test.
//!
//! Tests that use it are marked `#[ignore = "needs the control plane: cargo xtask test"]` and
//! run through `cargo xtask test`. Every child gets `PR_SET_PDEATHSIG(SIGKILL)` and its own
//! process group and is killed when its guard drops; the shared control plane is also killed
//! at process exit. Logs: `<control-plane dir>/logs/<component>.log`.

// The workspace denies unsafe code; this crate drives child processes through libc
// (PR_SET_PDEATHSIG and setsid in pre_exec, group kills, waitid with WNOWAIT, atexit,
// a signal handler for interrupts).
// Every block carries a SAFETY comment (clippy::undocumented_unsafe_blocks).
#![allow(unsafe_code)]

pub mod audit;
mod cluster;
mod control_plane;
mod detached;
mod error;
mod flags;
mod hostpath;
mod interrupt;
mod kubectl;
mod mock_driver;
pub mod node;
mod objects;
mod paths;
mod pki;
mod process;
mod provisioner;
mod registry;
mod sanity;
mod setup;
mod shared;
mod snapshots;
mod socket;

pub use cluster::{
    FakeNode, WAIT_TIMEOUT, create_csi_driver, create_fake_nodes, create_namespace,
    try_create_bare_nodes, try_create_csi_driver, try_create_fake_nodes, wait_event, wait_for,
};
pub use control_plane::{ControlPlane, ControlPlaneOptions};
pub use detached::{is_running as detached_is_running, record_detached, stop_detached};
pub use error::Error;
pub use flags::COMPONENTS;
pub use hostpath::{HOSTPATH_TOPOLOGY_KEY, HostpathPlugin, HostpathVolume, read_hostpath_volumes};
pub use interrupt::{DetachedGuard, stop_on_signals};
pub use kubectl::kubectl;
pub use mock_driver::MockDriver;
pub use node::RealNode;
pub use paths::{
    bin_dir, bin_dir_unchecked, etcd_binary, go_binary, target_dir, try_go_binary,
    try_workspace_binary, workspace_binary, workspace_root,
};
pub use process::{
    HostProcess, Process, host_processes, log_tail, spawn, spawn_detached, spawn_foreground,
    try_spawn,
};
pub use provisioner::Provisioner;
pub use sanity::{SanityRun, run_csi_sanity};
pub use shared::CLUSTER_ENV;
pub use snapshots::{
    SNAPSHOT_GROUP, SnapshotController, Snapshotter, install_reference_grant_crd,
    install_snapshot_crds, volume_snapshot_class_resource, volume_snapshot_content_resource,
    volume_snapshot_resource,
};
