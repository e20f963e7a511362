//! A PersistentVolume after provisioning: our finalizer on it, whether and how it is deleted.
//!
//! The volume controller (an async shell in the `csi-provisioner` binary) asks
//! [`decide::decide`] what to do with each PV (add or remove our finalizer, delete, ignore;
//! in-tree PVs migrated to our driver are left alone), [`decide::deletion_secret`] which secret
//! DeleteVolume uses, and [`steps::remaining`] which deletion steps a sync still performs.

pub mod decide;
pub mod steps;
