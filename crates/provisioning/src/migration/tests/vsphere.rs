//! vSphere: class parameters, VMDK paths, zone and region keys of the driver.

use pretty_assertions::assert_eq;
use rstest::rstest;

use super::*;
use crate::migration::vsphere::{REGION_KEY as VS_REGION, ZONE_KEY as VS_ZONE};

const IN_TREE: &str = "kubernetes.io/vsphere-volume";
const DRIVER: &str = "csi.vsphere.vmware.com";
pub(super) const VMDK: &str = "[vsanDatastore] 6785a85e-268e-6352-a2e8-02008b7afadd/kubernetes-dynamic-pvc-68734c9f-a679-42e6-a694-39632c51e31f.vmdk";
const POLICY: &str = "vSAN Default Storage Policy";
const MIGRATION: (&str, &str) = ("csimigration", "true");

fn zone_a(key: &str) -> Allowed {
    Some(allowed(&[&[(key, &["zone-a"])]]))
}

// TestTranslatevSphereInTreeStorageClassToCSI, plus key case and region keys.
#[rstest]
#[case::no_parameter(&[], None, &[MIGRATION], None)]
#[case::unknown_parameter(&[("unknownparam", "value")], None, &[MIGRATION], None)]
#[case::policy_and_datastore(
    &[("storagepolicyname", "test-policy-name"), ("datastore", "vsanDatastore")],
    None,
    &[("storagepolicyname", "test-policy-name"), ("datastore-migrationparam", "vsanDatastore"), MIGRATION],
    None
)]
#[case::fstype(&[("fstype", "ext4")], None, &[("csi.storage.k8s.io/fstype", "ext4"), MIGRATION], None)]
#[case::policy_and_fstype(
    &[("storagepolicyname", "test-policy-name"), ("fstype", "ext4")],
    None,
    &[("csi.storage.k8s.io/fstype", "ext4"), ("storagepolicyname", "test-policy-name"), MIGRATION],
    None
)]
#[case::allowed_topology(&[], zone_a(GA_ZONE), &[MIGRATION], zone_a(VS_ZONE))]
#[case::policy_and_allowed_topology(
    &[("storagepolicyname", "test-policy-name")],
    zone_a(GA_ZONE),
    &[("storagepolicyname", "test-policy-name"), MIGRATION],
    zone_a(VS_ZONE)
)]
#[case::beta_allowed_topology(
    &[("storagepolicyname", "test-policy-name")],
    zone_a(BETA_ZONE),
    &[("storagepolicyname", "test-policy-name"), MIGRATION],
    zone_a(VS_ZONE)
)]
#[case::raw_vsan_parameters(
    &[("hostfailurestotolerate", "2"), ("datastore", "vsanDatastore"), ("diskformat", "thin")],
    zone_a(GA_ZONE),
    &[
        ("hostfailurestotolerate-migrationparam", "2"),
        ("datastore-migrationparam", "vsanDatastore"),
        ("diskformat-migrationparam", "thin"),
        MIGRATION,
    ],
    zone_a(VS_ZONE)
)]
#[case::all_parameters(
    &[
        ("storagepolicyname", "test-policy-name"), ("datastore", "test-datastore-name"),
        ("fstype", "ext4"), ("diskformat", "thin"), ("hostfailurestotolerate", "1"),
        ("forceprovisioning", "yes"), ("cachereservation", "25"), ("diskstripes", "4"),
        ("objectspacereservation", "10"), ("iopslimit", "32"),
    ],
    zone_a(GA_ZONE),
    &[
        ("storagepolicyname", "test-policy-name"), ("datastore-migrationparam", "test-datastore-name"),
        ("csi.storage.k8s.io/fstype", "ext4"), ("diskformat-migrationparam", "thin"),
        ("hostfailurestotolerate-migrationparam", "1"), ("forceprovisioning-migrationparam", "yes"),
        ("cachereservation-migrationparam", "25"), ("diskstripes-migrationparam", "4"),
        ("objectspacereservation-migrationparam", "10"), ("iopslimit-migrationparam", "32"),
        MIGRATION,
    ],
    zone_a(VS_ZONE)
)]
#[case::keys_lowercased(
    &[("StoragePolicyName", "p"), ("DiskFormat", "thin")],
    None,
    &[("storagepolicyname", "p"), ("diskformat-migrationparam", "thin"), MIGRATION],
    None
)]
#[case::region_key_kept(
    &[],
    Some(allowed(&[&[(GA_REGION, &["r1"]), (GA_ZONE, &["z1"])]])),
    &[MIGRATION],
    Some(allowed(&[&[(GA_REGION, &["r1"]), (VS_ZONE, &["z1"])]]))
)]
fn class_parameters(
    #[case] params: &[(&str, &str)],
    #[case] allowed_in: Allowed,
    #[case] want_params: &[(&str, &str)],
    #[case] want_allowed: Allowed,
) {
    let out = class_to_csi(&class(IN_TREE, params, allowed_in)).unwrap();
    assert_eq!(out.provisioner, DRIVER);
    assert_eq!(out.parameters, Some(map(want_params)));
    assert_eq!(out.allowed_topologies, want_allowed);
}

fn created(affinity_terms: Terms, labels: &[(&str, &str)]) -> PersistentVolume {
    let mut source = csi(
        DRIVER,
        "e4073a6d-642e-4dff-8f4a-b4e3a47c4bbd",
        &[
            ("storagepolicyname", POLICY),
            ("initialvolumefilepath", VMDK),
        ],
    );
    source.fs_type = Some("ext4".into());
    let pv = with_spec(pv("pvc-d8b4475f-2c47-486e-9b57-43ae006f9b59"), |s| {
        s.access_modes = Some(strings(&["ReadWriteOnce"]));
        s.csi = Some(source);
    });
    let pv = if affinity_terms.is_empty() {
        pv
    } else {
        with_terms(pv, affinity_terms)
    };
    if labels.is_empty() {
        pv
    } else {
        with_labels(pv, labels)
    }
}

fn in_tree(affinity_terms: Terms, labels: &[(&str, &str)]) -> PersistentVolume {
    let mut pv = created(affinity_terms, labels);
    let spec = pv.spec.as_mut().unwrap();
    spec.csi = None;
    spec.vsphere_volume = Some(VsphereVirtualDiskVolumeSource {
        volume_path: VMDK.into(),
        fs_type: Some("ext4".into()),
        ..VsphereVirtualDiskVolumeSource::default()
    });
    pv
}

// TestTranslateVSphereCSIPVToInTree, plus beta labels in use.
#[rstest]
#[case::plain(Vec::new(), &[], in_tree(Vec::new(), &[]))]
#[case::zone_and_region(
    terms(&[&[(VS_ZONE, &["z1"]), (VS_REGION, &["r1"])]]),
    &[],
    in_tree(
        terms(&[&[(GA_ZONE, &["z1"]), (GA_REGION, &["r1"])]]),
        &[(GA_ZONE, "z1"), (GA_REGION, "r1")]
    )
)]
#[case::beta_labels(
    terms(&[&[(VS_ZONE, &["z2", "z1"]), (VS_REGION, &["r1"])]]),
    &[(BETA_ZONE, "z1")],
    in_tree(
        terms(&[&[(BETA_ZONE, &["z2", "z1"]), (BETA_REGION, &["r1"])]]),
        &[(BETA_ZONE, "z1"), (BETA_REGION, "r1")]
    )
)]
fn created_pv(
    #[case] reported: Terms,
    #[case] labels: &[(&str, &str)],
    #[case] want: PersistentVolume,
) {
    assert_eq!(csi_pv_to_in_tree(&created(reported, labels)).unwrap(), want);
}

#[test]
fn created_pv_without_path_attribute() {
    let mut pv = created(Vec::new(), &[]);
    let csi = pv.spec.as_mut().unwrap().csi.as_mut().unwrap();
    csi.volume_attributes = None;
    csi.read_only = Some(true);
    let out = csi_pv_to_in_tree(&pv).unwrap();
    // No path to restore, and the in-tree source has no readOnly.
    assert_eq!(
        out.spec.unwrap().vsphere_volume,
        Some(VsphereVirtualDiskVolumeSource {
            fs_type: Some("ext4".into()),
            ..VsphereVirtualDiskVolumeSource::default()
        })
    );
}

fn policy(mut pv: PersistentVolume) -> PersistentVolume {
    let source = pv.spec.as_mut().unwrap().vsphere_volume.as_mut().unwrap();
    source.storage_policy_name = Some(POLICY.into());
    pv
}

// TestTranslateVSphereInTreePVToCSI, plus an affinity in use.
#[rstest]
#[case::plain(Vec::new(), &[], Vec::new())]
#[case::beta_labels(
    Vec::new(),
    &[(BETA_ZONE, "z1"), (BETA_REGION, "r1")],
    terms(&[&[(VS_ZONE, &["z1"]), (VS_REGION, &["r1"])]])
)]
#[case::ga_labels(
    Vec::new(),
    &[(GA_ZONE, "z1"), (GA_REGION, "r1")],
    terms(&[&[(VS_ZONE, &["z1"]), (VS_REGION, &["r1"])]])
)]
// Labels are not split like other plugins' zone labels.
#[case::label_not_split(Vec::new(), &[(GA_ZONE, "z1__z2")], terms(&[&[(VS_ZONE, &["z1__z2"])]]))]
#[case::affinity(
    terms(&[&[(GA_ZONE, &["z1"]), (GA_REGION, &["r1"])]]),
    &[(GA_ZONE, "z9")],
    terms(&[&[(VS_ZONE, &["z1"]), (VS_REGION, &["r1"])]])
)]
fn in_tree_pv(
    #[case] affinity_terms: Terms,
    #[case] labels: &[(&str, &str)],
    #[case] want_terms: Terms,
) {
    let pv = policy(in_tree(affinity_terms, labels));
    let out = in_tree_pv_to_csi(&pv).unwrap();
    let mut want_csi = csi(DRIVER, VMDK, &[("storagepolicyname", POLICY)]);
    want_csi.fs_type = Some("ext4".into());
    assert_eq!(out.spec.as_ref().unwrap().csi, Some(want_csi));
    assert_eq!(out.spec.as_ref().unwrap().vsphere_volume, None);
    assert_eq!(terms_of(&out), want_terms);
    assert_eq!(out.metadata, pv.metadata);
}
