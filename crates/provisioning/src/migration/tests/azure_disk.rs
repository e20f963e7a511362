//! Azure disk: class parameters and zones, disk URIs, both PV directions.

use pretty_assertions::assert_eq;
use rstest::rstest;

use super::*;
use crate::migration::azure_disk::{TOPOLOGY_KEY as AZ, disk_name};

const IN_TREE: &str = "kubernetes.io/azure-disk";
const DRIVER: &str = "disk.csi.azure.com";
pub(super) const MANAGED_URI: &str =
    "/subscriptions/12/resourceGroups/23/providers/Microsoft.Compute/disks/name";

// TestTranslateInTreeStorageClassToCSI (Azure disk), plus fstype and a numeric zone parameter.
#[rstest]
#[case::nothing_special(&[("foo", "bar")], None, &[("foo", "bar")], None)]
#[case::empty_params(&[], None, &[], None)]
#[case::fstype_kept(&[("fstype", "xfs")], None, &[("fstype", "xfs")], None)]
#[case::zone(&[("zone", "foo")], None, &[], Some(allowed(&[&[(AZ, &["foo"])]])))]
#[case::zones(&[("zones", "foo,bar,baz")], None, &[], Some(allowed(&[&[(AZ, &["foo", "bar", "baz"])]])))]
#[case::numeric_zone(&[("zone", "1")], None, &[], Some(allowed(&[&[(AZ, &[""])]])))]
#[case::normal_topology(&[], Some(allowed(&[&[(AZ, &["foo"])]])), &[], Some(allowed(&[&[(AZ, &["foo"])]])))]
#[case::translated_topology(&[], Some(allowed(&[&[(GA_ZONE, &["foo"])]])), &[], Some(allowed(&[&[(AZ, &["foo"])]])))]
#[case::beta_topology(&[], Some(allowed(&[&[(BETA_ZONE, &["foo"])]])), &[], Some(allowed(&[&[(AZ, &["foo"])]])))]
#[case::region_without_zones(&[], Some(allowed(&[&[(GA_ZONE, &["0"])]])), &[], Some(allowed(&[&[(AZ, &[""])]])))]
#[case::longer_number(&[], Some(allowed(&[&[(GA_ZONE, &["1234"])]])), &[], Some(allowed(&[&[(AZ, &[""])]])))]
#[case::region_with_zones(
    &[],
    Some(allowed(&[&[(GA_ZONE, &["centralus-1"])]])),
    &[],
    Some(allowed(&[&[(AZ, &["centralus-1"])]]))
)]
#[case::numbers_on_other_keys_kept(
    &[],
    Some(allowed(&[&[(GA_REGION, &["1"]), (GA_ZONE, &["2"])]])),
    &[],
    Some(allowed(&[&[(GA_REGION, &["1"]), (AZ, &[""])]]))
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

#[test]
fn zone_and_topology_is_refused() {
    let sc = class(
        IN_TREE,
        &[("zone", "foo")],
        Some(allowed(&[&[(AZ, &["foo"])]])),
    );
    assert!(matches!(
        class_to_csi(&sc),
        Err(TranslationError::ZonesWithAllowedTopologies { .. })
    ));
}

// TestGetDiskName and TestIsManagedDisk, plus the patterns' edges.
#[rstest]
#[case::managed(
    "testurl/subscriptions/12/resourceGroups/23/providers/Microsoft.Compute/disks/name",
    Some("name")
)]
#[case::managed_no_group(
    "testurl/subscriptions/23/providers/Microsoft.Compute/disks/name",
    None
)]
#[case::unmanaged("http://test.com/vhds/name", Some("name"))]
#[case::unmanaged_https(
    "https://account.blob.core.windows.net/vhds/disk.vhd",
    Some("disk.vhd")
)]
#[case::unmanaged_no_vhds("http://test.io/name", None)]
// Found by the migration fuzz target: the name is everything after the last `/vhds/`, slashes
// included, as upstream's greedy pattern reads it.
#[case::slash_in_name("http://test.com/vhds/dir/name", Some("dir/name"))]
#[case::fuzz_slash_in_name("https/[paws//:Ș~00000://Ř~00/vhds/000000/00", Some("000000/00"))]
#[case::managed_host_only("test.com", None)]
// Upper-case HTTP is unmanaged, but the unmanaged pattern wants lower-case `http`.
#[case::upper_case_scheme("HTTP://test.com/vhds/name", None)]
#[case::case_sensitive_markers(
    "/subscriptions/1/resourcegroups/2/providers/Microsoft.Compute/disks/n",
    None
)]
#[case::dot_matches_any(
    "/subscriptions/1/resourceGroups/2/providers/Microsoft-Compute/disks/n",
    Some("n")
)]
#[case::last_marker_wins(
    "/subscriptions/1/resourceGroups/2/providers/Microsoft.Compute/disks/a/providers/Microsoft.Compute/disks/b",
    Some("b")
)]
#[case::empty_name_skipped(
    "/subscriptions/1/resourceGroups/2/providers/Microsoft.Compute/disks/a/providers/Microsoft.Compute/disks/",
    Some("a/providers/Microsoft.Compute/disks/")
)]
#[case::empty_name(
    "/subscriptions/1/resourceGroups/2/providers/Microsoft.Compute/disks/",
    None
)]
#[case::second_line(
    "x\n/subscriptions/1/resourceGroups/2/providers/Microsoft.Compute/disks/n",
    Some("n")
)]
fn disk_names(#[case] uri: &str, #[case] want: Option<&str>) {
    assert_eq!(disk_name(uri).ok().as_deref(), want, "{uri:?}");
}

fn in_tree(kind: Option<&str>) -> PersistentVolume {
    with_spec(pv("pv1"), |s| {
        s.azure_disk = Some(AzureDiskVolumeSource {
            caching_mode: Some("cachingmode".into()),
            disk_uri: MANAGED_URI.into(),
            fs_type: Some("fstype".into()),
            read_only: Some(true),
            kind: kind.map(str::to_string),
            disk_name: String::new(),
        })
    })
}

// TestTranslateAzureDiskInTreePVToCSI.
#[rstest]
#[case::no_kind(None)]
#[case::managed(Some("Managed"))]
#[case::any_case(Some("managed"))]
fn in_tree_pv(#[case] kind: Option<&str>) {
    let out = in_tree_pv_to_csi(&in_tree(kind)).unwrap();
    let want = CSIPersistentVolumeSource {
        fs_type: Some("fstype".into()),
        read_only: Some(true),
        ..csi(
            DRIVER,
            MANAGED_URI,
            &[
                ("cachingmode", "cachingmode"),
                ("fstype", "fstype"),
                ("kind", "Managed"),
            ],
        )
    };
    assert_eq!(out.spec.unwrap().csi, Some(want));
}

#[test]
fn other_kinds_are_refused() {
    let err = in_tree_pv_to_csi(&in_tree(Some("Dedicated"))).unwrap_err();
    assert_eq!(
        err.to_string(),
        "PersistentVolume \"pv1\": spec.azureDisk.kind \"Dedicated\" is not supported by CSI migration, only Managed is"
    );
}

#[test]
fn pv_topology_is_left_alone() {
    let zoned = |pv| {
        with_labels(
            with_affinity(pv, &[&[(GA_ZONE, &["westus-1"])]]),
            &[(GA_ZONE, "westus-1")],
        )
    };
    let out = in_tree_pv_to_csi(&zoned(in_tree(None))).unwrap();
    assert_eq!(terms_of(&out), terms(&[&[(GA_ZONE, &["westus-1"])]]));
    let created = with_affinity(
        with_csi(pv("pv1"), csi(DRIVER, MANAGED_URI, &[])),
        &[&[(AZ, &["westus-1"])]],
    );
    let out = csi_pv_to_in_tree(&created).unwrap();
    assert_eq!(terms_of(&out), terms(&[&[(AZ, &["westus-1"])]]));
    assert_eq!(out.metadata.labels, None);
}

// TestTranslateTranslateCSIPVToInTree (Azure disk), plus a PV without attributes.
#[rstest]
#[case::read_only_caching(&[("cachingmode", "ReadOnly"), ("fstype", "fstype"), ("kind", "managed")], "fstype", true, Some("ReadOnly"), "fstype")]
#[case::none_caching_camel_case(&[("cachingMode", "None"), ("fsType", "fstype"), ("kind", "managed")], "fstype", true, Some("None"), "fstype")]
#[case::read_write_caching(&[("cachingMode", "ReadWrite"), ("fsType", "fstype"), ("kind", "managed")], "fstype", true, Some("ReadWrite"), "fstype")]
#[case::attribute_wins(&[("fstype", "xfs")], "ext4", false, None, "xfs")]
#[case::empty_attributes_ignored(&[("cachingmode", ""), ("fstype", "")], "ext4", false, None, "ext4")]
#[case::nothing(&[], "", false, None, "")]
fn created_pv(
    #[case] attributes: &[(&str, &str)],
    #[case] fs_type: &str,
    #[case] read_only: bool,
    #[case] want_caching: Option<&str>,
    #[case] want_fs_type: &str,
) {
    let source = CSIPersistentVolumeSource {
        fs_type: Some(fs_type.into()),
        read_only: Some(read_only),
        ..csi(DRIVER, MANAGED_URI, attributes)
    };
    let out = csi_pv_to_in_tree(&with_csi(pv("pv1"), source)).unwrap();
    assert_eq!(
        out.spec.unwrap().azure_disk,
        Some(AzureDiskVolumeSource {
            caching_mode: want_caching.map(str::to_string),
            disk_name: "name".into(),
            disk_uri: MANAGED_URI.into(),
            fs_type: Some(want_fs_type.into()),
            kind: Some("Managed".into()),
            read_only: Some(read_only),
        })
    );
}

#[test]
fn malformed_uri_is_refused() {
    let created = with_csi(pv("pv1"), csi(DRIVER, "http://test.io/name", &[]));
    assert_eq!(
        csi_pv_to_in_tree(&created).unwrap_err().to_string(),
        "PersistentVolume \"pv1\": spec.csi.volumeHandle \"http://test.io/name\" is malformed: want http(s)://<host>/vhds/<name>"
    );
}
