//! CSI migration: the translation between the seven in-tree volume plugins and the CSI drivers
//! that replaced them, as csi-translation-lib v0.36.1 does it for the external-provisioner.
//!
//! Provisioning for an in-tree class: [`class_to_csi`], CreateVolume with the result, then
//! [`csi_pv_to_in_tree`] so the PV keeps the in-tree source (the in-tree plugin stays the PV's
//! owner on paper). Deletion: [`in_tree_plugin_of`] says whether the released PV is an in-tree
//! one, and [`in_tree_pv_to_csi`] yields the CSI form DeleteVolume needs.
//!
//! | In-tree plugin | CSI driver | Zone topology key |
//! |---|---|---|
//! | `kubernetes.io/aws-ebs` | `ebs.csi.aws.com` | `topology.ebs.csi.aws.com/zone` |
//! | `kubernetes.io/gce-pd` | `pd.csi.storage.gke.io` | `topology.gke.io/zone` |
//! | `kubernetes.io/cinder` | `cinder.csi.openstack.org` | `topology.cinder.csi.openstack.org/zone` |
//! | `kubernetes.io/azure-disk` | `disk.csi.azure.com` | `topology.disk.csi.azure.com/zone` (classes only) |
//! | `kubernetes.io/azure-file` | `file.csi.azure.com` | none |
//! | `kubernetes.io/vsphere-volume` | `csi.vsphere.vmware.com` | `topology.csi.vmware.com/zone` and `/region` |
//! | `kubernetes.io/portworx-volume` | `pxd.portworx.com` | none |
//!
//! Every function is pure and works on a copy. Empty strings, `false`, a zero partition and
//! empty maps come out as absent (`None`): that is what upstream's objects look like once
//! serialized, since the Go fields are `omitempty`.
//!
//! Not here, as the provisioner does not use them: inline pod volumes and the repair of volume
//! handles from node IDs (the attacher's concern).
//!
//! Differs from upstream: where upstream's result depends on Go's random map order (two
//! spellings of one parameter or attribute key, such as `zone` and `Zone`), keys are taken in
//! sorted order and the last one wins.

mod aws_ebs;
mod azure_disk;
mod azure_file;
mod cinder;
mod gce_pd;
mod portworx;
mod topology;
mod vsphere;

#[cfg(test)]
mod tests;

use std::collections::BTreeMap;

use gofmt::{quote, quote_list};
use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeSpec};
use k8s_openapi::api::storage::v1::StorageClass;

use crate::volume::decide::{MIGRATION_TARGETS, migrated_from};

/// Why a translation failed. Each message names the object, the field and what is wrong.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum TranslationError {
    /// The class's provisioner is none of the seven in-tree plugins.
    #[error(
        "StorageClass {}: provisioner {} is not an in-tree plugin that CSI migration translates",
        quote(class),
        quote(provisioner)
    )]
    NotInTreeClass {
        /// The class's name.
        class: String,
        /// Its provisioner.
        provisioner: String,
    },
    /// The class sets the legacy `zone`/`zones` parameter and `allowedTopologies` at once.
    #[error(
        "StorageClass {}: parameter {} and allowedTopologies cannot both be set",
        quote(class),
        quote(parameter)
    )]
    ZonesWithAllowedTopologies {
        /// The class's name.
        class: String,
        /// The parameter key as written in the class.
        parameter: String,
    },
    /// The PV has no `spec.csi`.
    #[error("PersistentVolume {}: spec.csi is not set", quote(pv))]
    NoCsiSource {
        /// The PV's name.
        pv: String,
    },
    /// `spec.csi.driver` replaced no in-tree plugin.
    #[error(
        "PersistentVolume {}: spec.csi.driver {} replaces no in-tree plugin",
        quote(pv),
        quote(driver)
    )]
    NotMigratedDriver {
        /// The PV's name.
        pv: String,
        /// The CSI driver.
        driver: String,
    },
    /// None of the seven in-tree sources is set.
    #[error(
        "PersistentVolume {}: it has none of the in-tree volume sources CSI migration translates",
        quote(pv)
    )]
    NoInTreeSource {
        /// The PV's name.
        pv: String,
    },
    /// A field does not have the form the translation needs (volume ID or handle, disk URI,
    /// partition).
    #[error(
        "PersistentVolume {}: {field} {} is malformed: {reason}",
        quote(pv),
        quote(value)
    )]
    Malformed {
        /// The PV's name.
        pv: String,
        /// The field, as a JSON path.
        field: &'static str,
        /// Its value.
        value: String,
        /// The expected form.
        reason: String,
    },
    /// An Azure disk of another kind than `Managed`: the CSI driver handles managed disks only.
    #[error(
        "PersistentVolume {}: spec.azureDisk.kind {} is not supported by CSI migration, only Managed is",
        quote(pv),
        quote(kind)
    )]
    UnsupportedAzureDiskKind {
        /// The PV's name.
        pv: String,
        /// The disk kind.
        kind: String,
    },
    /// An Azure file PV whose secret namespace is nowhere: the CSI form needs one.
    #[error(
        "PersistentVolume {}: no secret namespace for the Azure file share: spec.azureFile.secretNamespace and spec.claimRef.namespace are empty",
        quote(pv)
    )]
    NoSecretNamespace {
        /// The PV's name.
        pv: String,
    },
    /// The region could not be derived from the zones (none, malformed, or several regions).
    #[error(
        "PersistentVolume {}: cannot derive one region from zones {}: {reason}",
        quote(pv),
        quote_list(zones)
    )]
    Region {
        /// The PV's name.
        pv: String,
        /// The zones the region was derived from.
        zones: Vec<String>,
        /// What is wrong with them.
        reason: String,
    },
}

/// The in-tree plugin name a CSI driver replaces, if any (e.g. `ebs.csi.aws.com` →
/// `kubernetes.io/aws-ebs`).
pub fn in_tree_name(csi_driver: &str) -> Option<&'static str> {
    migrated_from(csi_driver)
}

/// `name` as the static name of one of the seven in-tree plugins, if it is one.
pub fn in_tree_plugin_name(name: &str) -> Option<&'static str> {
    csi_driver_name(name).and_then(in_tree_name)
}

/// The CSI driver replacing an in-tree plugin name, if any (e.g. `kubernetes.io/gce-pd` →
/// `pd.csi.storage.gke.io`).
pub fn csi_driver_name(in_tree: &str) -> Option<&'static str> {
    Plugin::from_in_tree(in_tree).map(Plugin::driver)
}

/// The class whose parameters name a PV's deletion secrets (upstream's `getSecretsFromSC`):
/// for a migrated PV and a class of the in-tree plugin, that class translated for the driver;
/// otherwise the class as it is (also when the translation fails: the secrets are then looked
/// up as written).
pub fn deletion_class(class: &StorageClass, migrated: bool) -> std::borrow::Cow<'_, StorageClass> {
    match migrated.then(|| class_to_csi(class).ok()).flatten() {
        Some(translated) => std::borrow::Cow::Owned(translated),
        None => std::borrow::Cow::Borrowed(class),
    }
}

/// The provisioner a snapshot's content or a cloned PV must name for a claim of `class`, as
/// upstream compares it with the translated class: the class's own, except that a Portworx
/// in-tree class names `pxd.portworx.com` (the one translation that rewrites the provisioner).
pub fn source_provisioner(class: &StorageClass) -> &str {
    match Plugin::from_in_tree(&class.provisioner) {
        Some(Plugin::Portworx) => Plugin::Portworx.driver(),
        _ => &class.provisioner,
    }
}

/// A StorageClass of an in-tree plugin in the form its CSI driver understands: the provisioner
/// becomes the driver's name; `fstype`, `zone`/`zones` and the zone keys of `allowedTopologies`
/// are translated per plugin as upstream's `TranslateInTreeStorageClassToCSI` does. Classes of
/// any other provisioner are an error.
///
/// Differs from upstream: the provisioner is always rewritten to the CSI driver. Upstream does
/// so for Portworx only and keeps the in-tree name otherwise; its checks that a clone or
/// snapshot source belongs to the class's provisioner then fail for migrated classes of the
/// other plugins. Ours compare with [`source_provisioner`], so they pass and fail alike.
pub fn class_to_csi(class: &StorageClass) -> Result<StorageClass, TranslationError> {
    let plugin = Plugin::from_in_tree(&class.provisioner).ok_or_else(|| {
        TranslationError::NotInTreeClass {
            class: class_name(class),
            provisioner: class.provisioner.clone(),
        }
    })?;
    let mut out = class.clone();
    match plugin {
        Plugin::AwsEbs => aws_ebs::class_to_csi(&mut out)?,
        Plugin::GcePd => gce_pd::class_to_csi(&mut out)?,
        Plugin::Cinder => cinder::class_to_csi(&mut out),
        Plugin::AzureDisk => azure_disk::class_to_csi(&mut out)?,
        Plugin::AzureFile => {}
        Plugin::VSphere => vsphere::class_to_csi(&mut out),
        Plugin::Portworx => portworx::class_to_csi(&mut out),
    }
    out.provisioner = plugin.driver().to_string();
    Ok(out)
}

/// A PV with `spec.csi` of one of the seven drivers in its in-tree form, as upstream's
/// `TranslateCSIPVToInTree` does it: `spec.csi` removed, the in-tree source set, and the
/// driver's topology key in the node affinity renamed to the Kubernetes zone (region) key, with
/// matching PV labels. Every other field (metadata, capacity, claimRef, reclaim policy, mount
/// options, ...) is kept.
pub fn csi_pv_to_in_tree(pv: &PersistentVolume) -> Result<PersistentVolume, TranslationError> {
    let Some(csi) = pv.spec.as_ref().and_then(|s| s.csi.clone()) else {
        return Err(TranslationError::NoCsiSource { pv: pv_name(pv) });
    };
    let plugin =
        Plugin::from_driver(&csi.driver).ok_or_else(|| TranslationError::NotMigratedDriver {
            pv: pv_name(pv),
            driver: csi.driver.clone(),
        })?;
    let mut out = pv.clone();
    match plugin {
        Plugin::AwsEbs => aws_ebs::csi_to_in_tree(&mut out, csi)?,
        Plugin::GcePd => gce_pd::csi_to_in_tree(&mut out, csi)?,
        Plugin::Cinder => cinder::csi_to_in_tree(&mut out, csi),
        Plugin::AzureDisk => azure_disk::csi_to_in_tree(&mut out, csi)?,
        Plugin::AzureFile => azure_file::csi_to_in_tree(&mut out, csi)?,
        Plugin::VSphere => vsphere::csi_to_in_tree(&mut out, csi),
        Plugin::Portworx => portworx::csi_to_in_tree(&mut out, csi),
    }
    spec_mut(&mut out).csi = None;
    Ok(out)
}

/// The in-tree plugin name of a PV that has one of the seven in-tree sources (upstream's
/// `IsPVMigratable`), else `None`. A CSI PV is never in-tree.
pub fn in_tree_plugin_of(pv: &PersistentVolume) -> Option<&'static str> {
    Plugin::of_pv(pv).map(Plugin::in_tree)
}

/// An in-tree PV in its CSI form, as upstream's `TranslateInTreePVToCSI` does it: `spec.csi`
/// set (driver, volume handle, fsType, readOnly, volumeAttributes, secrets where the plugin has
/// them), the in-tree source removed, and the Kubernetes zone key of the node affinity (or the
/// zone label when there is no affinity) translated to the driver's key. Every other field is
/// kept, except that GCE PD access modes are narrowed as upstream does.
pub fn in_tree_pv_to_csi(pv: &PersistentVolume) -> Result<PersistentVolume, TranslationError> {
    let plugin =
        Plugin::of_pv(pv).ok_or_else(|| TranslationError::NoInTreeSource { pv: pv_name(pv) })?;
    let mut out = pv.clone();
    let csi = match plugin {
        Plugin::AwsEbs => aws_ebs::in_tree_to_csi(&mut out)?,
        Plugin::GcePd => gce_pd::in_tree_to_csi(&mut out)?,
        Plugin::Cinder => cinder::in_tree_to_csi(&mut out),
        Plugin::AzureDisk => azure_disk::in_tree_to_csi(&mut out)?,
        Plugin::AzureFile => azure_file::in_tree_to_csi(&mut out)?,
        Plugin::VSphere => vsphere::in_tree_to_csi(&mut out),
        Plugin::Portworx => portworx::in_tree_to_csi(&mut out),
    };
    spec_mut(&mut out).csi = Some(csi);
    Ok(out)
}

/// The seven plugins, in the order of [`MIGRATION_TARGETS`] (the discriminant is the index).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Plugin {
    AwsEbs = 0,
    GcePd = 1,
    Cinder = 2,
    AzureDisk = 3,
    AzureFile = 4,
    VSphere = 5,
    Portworx = 6,
}

impl Plugin {
    const ALL: [Plugin; 7] = [
        Plugin::AwsEbs,
        Plugin::GcePd,
        Plugin::Cinder,
        Plugin::AzureDisk,
        Plugin::AzureFile,
        Plugin::VSphere,
        Plugin::Portworx,
    ];

    fn in_tree(self) -> &'static str {
        MIGRATION_TARGETS[self as usize].0
    }

    fn driver(self) -> &'static str {
        MIGRATION_TARGETS[self as usize].1
    }

    fn from_in_tree(name: &str) -> Option<Plugin> {
        Plugin::ALL.into_iter().find(|p| p.in_tree() == name)
    }

    fn from_driver(driver: &str) -> Option<Plugin> {
        Plugin::ALL.into_iter().find(|p| p.driver() == driver)
    }

    /// The plugin whose in-tree source the PV has. API validation allows one source only;
    /// should several be set, the first in table order wins (upstream's pick is random).
    fn of_pv(pv: &PersistentVolume) -> Option<Plugin> {
        let spec = pv.spec.as_ref()?;
        Plugin::ALL.into_iter().find(|p| match p {
            Plugin::AwsEbs => spec.aws_elastic_block_store.is_some(),
            Plugin::GcePd => spec.gce_persistent_disk.is_some(),
            Plugin::Cinder => spec.cinder.is_some(),
            Plugin::AzureDisk => spec.azure_disk.is_some(),
            Plugin::AzureFile => spec.azure_file.is_some(),
            Plugin::VSphere => spec.vsphere_volume.is_some(),
            Plugin::Portworx => spec.portworx_volume.is_some(),
        })
    }
}

fn pv_name(pv: &PersistentVolume) -> String {
    pv.metadata.name.clone().unwrap_or_default()
}

fn class_name(class: &StorageClass) -> String {
    class.metadata.name.clone().unwrap_or_default()
}

fn spec_mut(pv: &mut PersistentVolume) -> &mut PersistentVolumeSpec {
    pv.spec.get_or_insert_with(PersistentVolumeSpec::default)
}

/// Go's `omitempty` string: empty is absent.
fn non_empty(s: &str) -> Option<String> {
    (!s.is_empty()).then(|| s.to_string())
}

/// An optional string as Go's `omitempty` string field would carry it: empty is absent.
fn omit_empty(s: Option<String>) -> Option<String> {
    s.filter(|s| !s.is_empty())
}

/// An optional bool as Go's `omitempty` bool field would carry it: `false` is absent.
fn omit_false(b: Option<bool>) -> Option<bool> {
    b.filter(|b| *b)
}

/// Go's `omitempty` map: empty is absent.
fn non_empty_map(map: BTreeMap<String, String>) -> Option<BTreeMap<String, String>> {
    (!map.is_empty()).then_some(map)
}

/// Sets the translated class parameters. Upstream always installs a fresh map; an empty one
/// stays absent when the class had none, so untouched classes compare equal.
fn set_parameters(class: &mut StorageClass, params: BTreeMap<String, String>) {
    if class.parameters.is_some() || !params.is_empty() {
        class.parameters = Some(params);
    }
}

/// The value of volume attribute `partition`, read as Go's `strconv.Atoi` then narrowed to
/// `int32` as upstream does (wrapping, like Go's conversion); zero is absent.
fn parse_partition(pv: &PersistentVolume, value: &str) -> Result<Option<i32>, TranslationError> {
    let n: i64 = value.parse().map_err(|_| TranslationError::Malformed {
        pv: pv_name(pv),
        field: "spec.csi.volumeAttributes[partition]",
        value: value.to_string(),
        reason: "not a decimal integer".into(),
    })?;
    let n = n as i32;
    Ok((n != 0).then_some(n))
}

/// Go's `strings.ToLower`, which class parameter and attribute keys are matched with: simple
/// one-to-one mappings only (Rust's `to_lowercase` maps `İ` to two characters, Go to `i`).
fn go_lower(s: &str) -> String {
    s.chars()
        .map(|c| {
            let mut lower = c.to_lowercase();
            match (lower.next(), lower.next()) {
                (Some(l), None) => l,
                _ if c == '\u{130}' => 'i',
                _ => c,
            }
        })
        .collect()
}
