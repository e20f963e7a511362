//! Migration tests: builders, the name table, dispatch and its errors, round trips of all seven
//! plugins. Per-plugin and topology cases (many from csi-translation-lib's own tests) live in
//! the submodules.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    AWSElasticBlockStoreVolumeSource, AzureDiskVolumeSource, AzureFilePersistentVolumeSource,
    CSIPersistentVolumeSource, CinderPersistentVolumeSource, GCEPersistentDiskVolumeSource,
    NodeSelector, NodeSelectorRequirement, NodeSelectorTerm, ObjectReference, PersistentVolume,
    PersistentVolumeSpec, PortworxVolumeSource, SecretReference, TopologySelectorTerm,
    VolumeNodeAffinity, VsphereVirtualDiskVolumeSource,
};
use k8s_openapi::api::storage::v1::StorageClass;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use pretty_assertions::assert_eq;
use rstest::rstest;

use super::*;
pub(super) use crate::testutil::{map, strings};
pub(super) use crate::topology::tests::allowed;

mod aws_ebs;
mod azure_disk;
mod azure_file;
mod cinder;
mod gce_pd;
mod portworx;
mod topology;
mod vsphere;

pub(super) const GA_ZONE: &str = "topology.kubernetes.io/zone";
pub(super) const GA_REGION: &str = "topology.kubernetes.io/region";
pub(super) const BETA_ZONE: &str = "failure-domain.beta.kubernetes.io/zone";
pub(super) const BETA_REGION: &str = "failure-domain.beta.kubernetes.io/region";

/// A class's `allowedTopologies`.
pub(super) type Allowed = Option<Vec<TopologySelectorTerm>>;

/// Class `sc` of `provisioner` with `params` (present even when empty) and `allowed_topologies`.
pub(super) fn class(
    provisioner: &str,
    params: &[(&str, &str)],
    allowed_topologies: Allowed,
) -> StorageClass {
    StorageClass {
        parameters: Some(map(params)),
        allowed_topologies,
        ..crate::testutil::class(provisioner)
    }
}

/// PV `name` with an empty spec.
pub(super) fn pv(name: &str) -> PersistentVolume {
    PersistentVolume {
        metadata: ObjectMeta {
            name: Some(name.into()),
            ..ObjectMeta::default()
        },
        spec: Some(PersistentVolumeSpec::default()),
        status: None,
    }
}

/// `pv` with its spec changed by `f`.
pub(super) fn with_spec(
    mut pv: PersistentVolume,
    f: impl FnOnce(&mut PersistentVolumeSpec),
) -> PersistentVolume {
    f(pv.spec.get_or_insert_with(PersistentVolumeSpec::default));
    pv
}

pub(super) fn with_labels(mut pv: PersistentVolume, labels: &[(&str, &str)]) -> PersistentVolume {
    pv.metadata.labels = Some(map(labels));
    pv
}

pub(super) fn with_annotations(
    mut pv: PersistentVolume,
    annotations: &[(&str, &str)],
) -> PersistentVolume {
    pv.metadata.annotations = Some(map(annotations));
    pv
}

/// Node affinity terms as `(key, values)` lists, each expression `key In values`.
pub(super) type Terms = Vec<Vec<(String, Vec<String>)>>;

/// `terms` in the owned form of [`Terms`].
pub(super) fn terms(terms: &[&[(&str, &[&str])]]) -> Terms {
    terms
        .iter()
        .map(|t| t.iter().map(|(k, v)| (k.to_string(), strings(v))).collect())
        .collect()
}

/// The node affinity of `terms`.
pub(super) fn affinity_of(terms: Terms) -> VolumeNodeAffinity {
    VolumeNodeAffinity {
        required: Some(NodeSelector {
            node_selector_terms: terms
                .into_iter()
                .map(|expressions| NodeSelectorTerm {
                    match_expressions: Some(
                        expressions
                            .into_iter()
                            .map(|(key, values)| NodeSelectorRequirement {
                                key,
                                operator: "In".into(),
                                values: Some(values),
                            })
                            .collect(),
                    ),
                    match_fields: None,
                })
                .collect(),
        }),
    }
}

pub(super) fn with_terms(pv: PersistentVolume, terms: Terms) -> PersistentVolume {
    with_spec(pv, |s| s.node_affinity = Some(affinity_of(terms)))
}

pub(super) fn with_affinity(pv: PersistentVolume, t: &[&[(&str, &[&str])]]) -> PersistentVolume {
    with_terms(pv, terms(t))
}

/// `spec.csi` of `driver` with `handle` and `attributes` (absent when empty).
pub(super) fn csi(
    driver: &str,
    handle: &str,
    attributes: &[(&str, &str)],
) -> CSIPersistentVolumeSource {
    CSIPersistentVolumeSource {
        driver: driver.into(),
        volume_handle: handle.into(),
        volume_attributes: (!attributes.is_empty()).then(|| map(attributes)),
        ..CSIPersistentVolumeSource::default()
    }
}

pub(super) fn with_csi(
    pv: PersistentVolume,
    source: CSIPersistentVolumeSource,
) -> PersistentVolume {
    with_spec(pv, |s| s.csi = Some(source))
}

/// The node affinity terms of `pv` (none without affinity).
pub(super) fn terms_of(pv: &PersistentVolume) -> Terms {
    let Some(required) = pv
        .spec
        .as_ref()
        .and_then(|s| s.node_affinity.as_ref())
        .and_then(|a| a.required.as_ref())
    else {
        return Vec::new();
    };
    required
        .node_selector_terms
        .iter()
        .map(|t| {
            t.match_expressions
                .iter()
                .flatten()
                .map(|e| (e.key.clone(), e.values.clone().unwrap_or_default()))
                .collect()
        })
        .collect()
}

const PAIRS: [(&str, &str); 7] = [
    ("kubernetes.io/aws-ebs", "ebs.csi.aws.com"),
    ("kubernetes.io/gce-pd", "pd.csi.storage.gke.io"),
    ("kubernetes.io/cinder", "cinder.csi.openstack.org"),
    ("kubernetes.io/azure-disk", "disk.csi.azure.com"),
    ("kubernetes.io/azure-file", "file.csi.azure.com"),
    ("kubernetes.io/vsphere-volume", "csi.vsphere.vmware.com"),
    ("kubernetes.io/portworx-volume", "pxd.portworx.com"),
];

#[test]
fn names_map_both_ways() {
    for (in_tree, driver) in PAIRS {
        assert_eq!(in_tree_name(driver), Some(in_tree), "{driver}");
        assert_eq!(csi_driver_name(in_tree), Some(driver), "{in_tree}");
    }
    for other in [
        "hostpath.csi.k8s.io",
        "kubernetes.io/rbd",
        "",
        "EBS.CSI.AWS.COM",
    ] {
        assert_eq!(in_tree_name(other), None, "{other}");
        assert_eq!(csi_driver_name(other), None, "{other}");
    }
}

#[test]
fn plugin_variants_follow_the_table() {
    let plugins = Plugin::ALL.map(|p| (p.in_tree(), p.driver()));
    assert_eq!(plugins, PAIRS);
    for (i, p) in Plugin::ALL.into_iter().enumerate() {
        assert_eq!(p as usize, i, "{p:?}");
    }
}

#[test]
fn keys_are_lowercased_as_go_does() {
    assert_eq!(go_lower("FsType"), "fstype");
    // Go maps the dotted capital I to a plain `i`; Rust's `to_lowercase` adds a combining dot.
    assert_eq!(go_lower("İOPSPERGB"), "iopspergb");
    assert_eq!(go_lower("ΣΑΣ"), "σασ");
    let out = class_to_csi(&class(
        "kubernetes.io/aws-ebs",
        &[("İopsPerGB", "10")],
        None,
    ))
    .unwrap();
    assert_eq!(
        out.parameters,
        Some(map(&[
            ("İopsPerGB", "10"),
            ("allowautoiopspergbincrease", "true")
        ]))
    );
}

#[test]
fn every_class_gets_the_driver_as_provisioner() {
    for (in_tree, driver) in PAIRS {
        let out = class_to_csi(&class(in_tree, &[], None)).unwrap();
        assert_eq!(out.provisioner, driver, "{in_tree}");
        assert_eq!(out.metadata.name.as_deref(), Some("sc"));
    }
}

#[test]
fn data_sources_must_name_the_class_provisioner_portworx_translated() {
    for (in_tree, driver) in PAIRS {
        let want = if in_tree == "kubernetes.io/portworx-volume" {
            driver
        } else {
            in_tree
        };
        assert_eq!(source_provisioner(&class(in_tree, &[], None)), want);
    }
    let csi = class("pxd.portworx.com", &[], None);
    assert_eq!(source_provisioner(&csi), "pxd.portworx.com");
}

#[rstest]
#[case::csi_driver("ebs.csi.aws.com")]
#[case::other_in_tree("kubernetes.io/rbd")]
#[case::case_differs("kubernetes.io/AWS-EBS")]
#[case::empty("")]
fn other_provisioners_are_refused(#[case] provisioner: &str) {
    let err = class_to_csi(&class(provisioner, &[("fstype", "ext4")], None)).unwrap_err();
    assert_eq!(
        err,
        TranslationError::NotInTreeClass {
            class: "sc".into(),
            provisioner: provisioner.into()
        }
    );
    assert_eq!(
        err.to_string(),
        format!(
            "StorageClass \"sc\": provisioner \"{provisioner}\" is not an in-tree plugin that CSI migration translates"
        )
    );
}

#[test]
fn csi_pv_errors() {
    assert_eq!(
        csi_pv_to_in_tree(&pv("pv1")),
        Err(TranslationError::NoCsiSource { pv: "pv1".into() })
    );
    let no_spec = PersistentVolume {
        spec: None,
        ..pv("pv1")
    };
    assert_eq!(
        csi_pv_to_in_tree(&no_spec),
        Err(TranslationError::NoCsiSource { pv: "pv1".into() })
    );
    let err =
        csi_pv_to_in_tree(&with_csi(pv("pv1"), csi("hostpath.csi.k8s.io", "h", &[]))).unwrap_err();
    assert_eq!(
        err.to_string(),
        "PersistentVolume \"pv1\": spec.csi.driver \"hostpath.csi.k8s.io\" replaces no in-tree plugin"
    );
}

#[test]
fn in_tree_pv_errors() {
    let err = in_tree_pv_to_csi(&pv("pv1")).unwrap_err();
    assert_eq!(err, TranslationError::NoInTreeSource { pv: "pv1".into() });
    // A CSI PV is not in-tree, even of a migration target.
    let csi_pv = with_csi(pv("pv1"), csi("ebs.csi.aws.com", "vol-1", &[]));
    assert_eq!(in_tree_plugin_of(&csi_pv), None);
    assert!(in_tree_pv_to_csi(&csi_pv).is_err());
}

/// One in-tree PV of each plugin, without topology.
fn in_tree_sources() -> Vec<(&'static str, PersistentVolume)> {
    let base = || pv("pv1");
    vec![
        (
            "kubernetes.io/aws-ebs",
            with_spec(base(), |s| {
                s.aws_elastic_block_store = Some(AWSElasticBlockStoreVolumeSource {
                    volume_id: "vol01".into(),
                    fs_type: Some("ext3".into()),
                    partition: Some(1),
                    read_only: Some(true),
                })
            }),
        ),
        (
            "kubernetes.io/gce-pd",
            with_spec(base(), |s| {
                s.gce_persistent_disk = Some(GCEPersistentDiskVolumeSource {
                    pd_name: "test-disk".into(),
                    fs_type: Some("ext4".into()),
                    ..GCEPersistentDiskVolumeSource::default()
                })
            }),
        ),
        (
            "kubernetes.io/cinder",
            with_spec(base(), |s| {
                s.cinder = Some(CinderPersistentVolumeSource {
                    volume_id: "vol1".into(),
                    fs_type: Some("ext4".into()),
                    ..CinderPersistentVolumeSource::default()
                })
            }),
        ),
        (
            "kubernetes.io/azure-disk",
            with_spec(base(), |s| {
                s.azure_disk = Some(AzureDiskVolumeSource {
                    disk_name: "name".into(),
                    disk_uri: azure_disk::MANAGED_URI.into(),
                    caching_mode: Some("ReadOnly".into()),
                    fs_type: Some("ext4".into()),
                    kind: Some("Managed".into()),
                    read_only: Some(false),
                })
            }),
        ),
        (
            "kubernetes.io/azure-file",
            with_spec(base(), |s| {
                s.azure_file = Some(AzureFilePersistentVolumeSource {
                    secret_name: "azure-storage-account-st-secret".into(),
                    secret_namespace: Some("ns".into()),
                    share_name: "share".into(),
                    read_only: Some(true),
                })
            }),
        ),
        (
            "kubernetes.io/vsphere-volume",
            with_spec(base(), |s| {
                s.vsphere_volume = Some(VsphereVirtualDiskVolumeSource {
                    volume_path: vsphere::VMDK.into(),
                    fs_type: Some("ext4".into()),
                    ..VsphereVirtualDiskVolumeSource::default()
                })
            }),
        ),
        (
            "kubernetes.io/portworx-volume",
            with_spec(base(), |s| {
                s.portworx_volume = Some(PortworxVolumeSource {
                    volume_id: "ID1111".into(),
                    fs_type: Some("ext4".into()),
                    read_only: None,
                })
            }),
        ),
    ]
}

/// The fields migration must not touch.
fn with_everything_else(pv: PersistentVolume) -> PersistentVolume {
    let mut pv = with_annotations(pv, &[("pv.kubernetes.io/provisioned-by", "x")]);
    pv.metadata.finalizers = Some(strings(&["kubernetes.io/pv-protection"]));
    pv.metadata.uid = Some("uid-1".into());
    with_spec(pv, |s| {
        s.capacity = Some(BTreeMap::from([("storage".into(), Quantity("1Gi".into()))]));
        s.access_modes = Some(strings(&["ReadWriteOnce"]));
        s.claim_ref = Some(ObjectReference {
            name: Some("claim".into()),
            namespace: Some("default".into()),
            ..ObjectReference::default()
        });
        s.persistent_volume_reclaim_policy = Some("Delete".into());
        s.mount_options = Some(strings(&["debug"]));
        s.storage_class_name = Some("sc".into());
        s.volume_mode = Some("Filesystem".into());
    })
}

// Upstream's TestTranslationStability, for every plugin and with every other field set.
#[test]
fn in_tree_round_trips_through_csi() {
    for (plugin, in_tree) in in_tree_sources() {
        let in_tree = with_everything_else(in_tree);
        let mut want = in_tree.clone();
        if plugin == "kubernetes.io/vsphere-volume" {
            // The path comes back only from the attribute the driver sets on new volumes.
            want.spec
                .as_mut()
                .unwrap()
                .vsphere_volume
                .as_mut()
                .unwrap()
                .volume_path = String::new();
        }
        assert_eq!(in_tree_plugin_of(&in_tree), Some(plugin));
        let as_csi = in_tree_pv_to_csi(&in_tree).unwrap();
        let spec = as_csi.spec.as_ref().unwrap();
        assert_eq!(
            spec.csi.as_ref().map(|c| c.driver.as_str()),
            csi_driver_name(plugin),
            "{plugin}"
        );
        assert_eq!(
            in_tree_plugin_of(&as_csi),
            None,
            "{plugin}: in-tree source left"
        );
        assert_eq!(as_csi.metadata, in_tree.metadata, "{plugin}");
        assert_eq!(spec.claim_ref, in_tree.spec.as_ref().unwrap().claim_ref);
        let back = csi_pv_to_in_tree(&as_csi).unwrap();
        assert_eq!(back, want, "{plugin}");
    }
}

/// What each driver reports for a new volume (handle, attributes), and its in-tree form.
#[test]
fn created_csi_pv_round_trips_through_in_tree() {
    let cases = [
        csi("ebs.csi.aws.com", "vol-02399794d890f9375", &[]),
        csi(
            "pd.csi.storage.gke.io",
            "projects/UNSPECIFIED/zones/UNSPECIFIED/disks/pvc-1",
            &[],
        ),
        csi("cinder.csi.openstack.org", "c5f3ab2e", &[]),
        csi("pxd.portworx.com", "ID1111", &[]),
    ];
    for source in cases {
        let created = with_everything_else(with_csi(pv("pv1"), source.clone()));
        let in_tree = csi_pv_to_in_tree(&created).unwrap();
        assert_eq!(
            in_tree.spec.as_ref().unwrap().csi,
            None,
            "{}",
            source.driver
        );
        let mut back = in_tree_pv_to_csi(&in_tree).unwrap();
        // Upstream adds attributes the driver did not report (`partition`); the rest is equal.
        back.spec
            .as_mut()
            .unwrap()
            .csi
            .as_mut()
            .unwrap()
            .volume_attributes = None;
        assert_eq!(back, created, "{}", source.driver);
    }
}

/// upstream's getSecretsFromSC: only a migrated PV reads its secrets from the translated class.
#[test]
fn deletion_secrets_come_from_the_translated_class_of_migrated_volumes_only() {
    let mut in_tree = StorageClass {
        provisioner: "kubernetes.io/aws-ebs".into(),
        ..StorageClass::default()
    };
    in_tree.parameters = Some(
        [("fsType".to_string(), "ext4".to_string())]
            .into_iter()
            .collect(),
    );
    let translated = deletion_class(&in_tree, true);
    assert_eq!(translated.provisioner, "ebs.csi.aws.com");
    assert_eq!(
        translated
            .parameters
            .as_ref()
            .unwrap()
            .get("csi.storage.k8s.io/fstype"),
        Some(&"ext4".to_string())
    );
    assert_eq!(*deletion_class(&in_tree, false), in_tree);
    let csi_class = StorageClass {
        provisioner: "ebs.csi.aws.com".into(),
        ..StorageClass::default()
    };
    assert_eq!(*deletion_class(&csi_class, true), csi_class);
}
