//! GCE PD: class parameters, zonal and regional handles, access modes, regions.

use pretty_assertions::assert_eq;
use rstest::rstest;

use super::*;
use crate::migration::gce_pd::{TOPOLOGY_KEY as GKE, backward_compatible_access_modes, region_of};

const IN_TREE: &str = "kubernetes.io/gce-pd";
const DRIVER: &str = "pd.csi.storage.gke.io";

// TestTranslatePDInTreeStorageClassToCSI.
#[rstest]
#[case::nothing_special(&[("foo", "bar")], None, &[("foo", "bar")], None)]
#[case::fstype(&[("fstype", "myfs")], None, &[("csi.storage.k8s.io/fstype", "myfs")], None)]
#[case::empty_params(&[], None, &[], None)]
#[case::zone(&[("zone", "foo")], None, &[], Some(allowed(&[&[(GKE, &["foo"])]])))]
#[case::zones(&[("zones", "foo,bar,baz")], None, &[], Some(allowed(&[&[(GKE, &["foo", "bar", "baz"])]])))]
#[case::normal_topology(
    &[],
    Some(allowed(&[&[(GKE, &["foo"])]])),
    &[],
    Some(allowed(&[&[(GKE, &["foo"])]]))
)]
#[case::translated_topology(
    &[],
    Some(allowed(&[&[(BETA_ZONE, &["foo"])]])),
    &[],
    Some(allowed(&[&[(GKE, &["foo"])]]))
)]
#[case::replication_type_kept(
    &[("type", "pd-ssd"), ("replication-type", "regional-pd")],
    None,
    &[("type", "pd-ssd"), ("replication-type", "regional-pd")],
    None
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
        Some(allowed(&[&[(GKE, &["foo"])]])),
    );
    assert_eq!(
        class_to_csi(&sc),
        Err(TranslationError::ZonesWithAllowedTopologies {
            class: "sc".into(),
            parameter: "zone".into()
        })
    );
}

fn created(handle: &str, attributes: &[(&str, &str)], terms: Terms) -> PersistentVolume {
    with_terms(
        with_csi(pv("pvc-1"), csi(DRIVER, handle, attributes)),
        terms,
    )
}

#[rstest]
#[case::zonal("projects/my-project/zones/us-central1-c/disks/pvc-1", "pvc-1")]
#[case::regional("projects/my-project/regions/us-central1/disks/pvc-1", "pvc-1")]
#[case::unspecified("projects/UNSPECIFIED/zones/UNSPECIFIED/disks/pvc-1", "pvc-1")]
#[case::longer("projects/p/zones/z/disks/pvc-1/extra", "pvc-1")]
fn disk_name_from_handle(#[case] handle: &str, #[case] want: &str) {
    let pv = created(handle, &[], terms(&[&[(GKE, &["us-central1-c"])]]));
    let out = csi_pv_to_in_tree(&pv).unwrap();
    let source = out.spec.unwrap().gce_persistent_disk.unwrap();
    assert_eq!(source.pd_name, want);
}

#[rstest]
#[case::bare_name("pvc-1")]
#[case::five_parts("projects/p/zones/z/disks")]
fn malformed_handle_is_refused(#[case] handle: &str) {
    let err = csi_pv_to_in_tree(&created(handle, &[], Vec::new())).unwrap_err();
    assert!(
        matches!(err, TranslationError::Malformed { field: "spec.csi.volumeHandle", ref value, .. } if value == handle),
        "{err}"
    );
}

#[rstest]
#[case::absent(&[], None)]
#[case::empty(&[("partition", "")], None)]
#[case::zero(&[("partition", "0")], None)]
#[case::set(&[("partition", "3")], Some(3))]
fn partition(#[case] attributes: &[(&str, &str)], #[case] want: Option<i32>) {
    let pv = created("projects/p/zones/z/disks/d", attributes, Vec::new());
    let out = csi_pv_to_in_tree(&pv).unwrap();
    assert_eq!(
        out.spec.unwrap().gce_persistent_disk.unwrap().partition,
        want
    );
}

#[rstest]
#[case::zonal(
    terms(&[&[(GKE, &["us-central1-c"])]]),
    terms(&[&[(GA_ZONE, &["us-central1-c"]), (GA_REGION, &["us-central1"])]]),
    &[(GA_ZONE, "us-central1-c"), (GA_REGION, "us-central1")]
)]
#[case::regional(
    terms(&[&[(GKE, &["us-central1-a", "us-central1-b"])]]),
    terms(&[&[(GA_ZONE, &["us-central1-a", "us-central1-b"]), (GA_REGION, &["us-central1"])]]),
    &[(GA_ZONE, "us-central1-a__us-central1-b"), (GA_REGION, "us-central1")]
)]
fn created_pv_topology(
    #[case] reported: Terms,
    #[case] want_terms: Terms,
    #[case] want_labels: &[(&str, &str)],
) {
    let pv = created("projects/p/zones/us-central1-c/disks/d", &[], reported);
    let out = csi_pv_to_in_tree(&pv).unwrap();
    assert_eq!(terms_of(&out), want_terms);
    assert_eq!(out.metadata.labels, Some(map(want_labels)));
}

#[test]
fn zone_outside_gce_form_fails_the_region() {
    let pv = created(
        "projects/p/zones/z/disks/d",
        &[],
        terms(&[&[(GKE, &["us-central1"])]]),
    );
    let err = csi_pv_to_in_tree(&pv).unwrap_err();
    assert_eq!(
        err.to_string(),
        "PersistentVolume \"pvc-1\": cannot derive one region from zones [\"us-central1\"]: zone \"us-central1\" is not of the form <locale>-<region>-<zone>"
    );
}

fn in_tree(labels: &[(&str, &str)]) -> PersistentVolume {
    with_labels(
        with_spec(pv("pv1"), |s| {
            s.gce_persistent_disk = Some(GCEPersistentDiskVolumeSource {
                pd_name: "pd-name".into(),
                ..GCEPersistentDiskVolumeSource::default()
            })
        }),
        labels,
    )
}

// TestTranslateInTreePVToCSIVolIDFmt, plus the fallbacks.
#[rstest]
#[case::beta_zonal(&[(BETA_ZONE, "us-east1-a")], "projects/UNSPECIFIED/zones/us-east1-a/disks/pd-name")]
#[case::ga_zonal(&[(GA_ZONE, "us-east1-a")], "projects/UNSPECIFIED/zones/us-east1-a/disks/pd-name")]
#[case::beta_regional(
    &[(BETA_ZONE, "us-central1-a__us-central1-c")],
    "projects/UNSPECIFIED/regions/us-central1/disks/pd-name"
)]
#[case::ga_regional(
    &[(GA_ZONE, "us-central1-a__us-central1-c")],
    "projects/UNSPECIFIED/regions/us-central1/disks/pd-name"
)]
#[case::no_label(&[], "projects/UNSPECIFIED/zones/UNSPECIFIED/disks/pd-name")]
#[case::beta_first(
    &[(BETA_ZONE, "us-east1-a"), (GA_ZONE, "us-east1-b")],
    "projects/UNSPECIFIED/zones/us-east1-a/disks/pd-name"
)]
#[case::empty_beta_falls_back(
    &[(BETA_ZONE, ""), (GA_ZONE, "us-east1-b")],
    "projects/UNSPECIFIED/zones/us-east1-b/disks/pd-name"
)]
fn handle_from_zone_labels(#[case] labels: &[(&str, &str)], #[case] want: &str) {
    let out = in_tree_pv_to_csi(&in_tree(labels)).unwrap();
    let csi = out.spec.unwrap().csi.unwrap();
    assert_eq!(csi.volume_handle, want);
    assert_eq!(csi.volume_attributes, Some(map(&[("partition", "")])));
}

#[test]
fn regional_label_across_regions_is_refused() {
    let err = in_tree_pv_to_csi(&in_tree(&[(GA_ZONE, "us-central1-a__us-east1-b")])).unwrap_err();
    assert_eq!(
        err,
        TranslationError::Region {
            pv: "pv1".into(),
            zones: strings(&["us-central1-a", "us-east1-b"]),
            reason: "they span the regions {\"us-central1\", \"us-east1\"}".into(),
        }
    );
}

#[test]
fn in_tree_pv_gets_partition_access_modes_and_topology() {
    let mut pv = in_tree(&[(GA_ZONE, "us-east1-a"), (GA_REGION, "us-east1")]);
    pv = with_spec(pv, |s| {
        s.access_modes = Some(strings(&["ReadWriteMany"]));
        let source = s.gce_persistent_disk.as_mut().unwrap();
        source.partition = Some(2);
        source.read_only = Some(true);
        source.fs_type = Some("ext4".into());
    });
    let out = in_tree_pv_to_csi(&pv).unwrap();
    let spec = out.spec.as_ref().unwrap();
    assert_eq!(
        spec.csi,
        Some(CSIPersistentVolumeSource {
            fs_type: Some("ext4".into()),
            read_only: Some(true),
            ..csi(
                DRIVER,
                "projects/UNSPECIFIED/zones/us-east1-a/disks/pd-name",
                &[("partition", "2")]
            )
        })
    );
    assert_eq!(spec.access_modes, Some(strings(&["ReadWriteOnce"])));
    assert_eq!(terms_of(&out), terms(&[&[(GKE, &["us-east1-a"])]]));
}

// TestBackwardCompatibleAccessModes, plus unknown modes.
#[rstest]
#[case::rox(&["ReadOnlyMany"], "ReadOnlyMany")]
#[case::rwo(&["ReadWriteOnce"], "ReadWriteOnce")]
#[case::rwx(&["ReadWriteMany"], "ReadWriteOnce")]
#[case::rox_rwo(&["ReadOnlyMany", "ReadWriteOnce"], "ReadWriteOnce")]
#[case::rwo_rwx(&["ReadWriteOnce", "ReadWriteMany"], "ReadWriteOnce")]
#[case::rwx_rox(&["ReadWriteMany", "ReadOnlyMany"], "ReadWriteOnce")]
#[case::rwx_rwo_rox(&["ReadWriteMany", "ReadWriteOnce", "ReadOnlyMany"], "ReadWriteOnce")]
#[case::rwop(&["ReadWriteOncePod"], "ReadWriteOnce")]
#[case::rwop_rox(&["ReadWriteOncePod", "ReadOnlyMany"], "ReadOnlyMany")]
#[case::none(&[], "ReadWriteOnce")]
fn access_modes(#[case] modes: &[&str], #[case] want: &str) {
    assert_eq!(backward_compatible_access_modes(strings(modes)), [want]);
}

#[test]
fn absent_access_modes_stay_absent() {
    let out = in_tree_pv_to_csi(&in_tree(&[])).unwrap();
    assert_eq!(out.spec.unwrap().access_modes, None);
}

#[rstest]
#[case::one_region(&["us-central1-a", "us-central1-b"], Some("us-central1"))]
#[case::europe(&["europe-west1-b"], Some("europe-west1"))]
#[case::no_zones(&[], None)]
#[case::region_only(&["us-central1"], None)]
#[case::too_many_parts(&["us-west-2-lax-1a"], None)]
#[case::two_regions(&["us-central1-a", "us-east1-b"], None)]
fn regions(#[case] zones: &[&str], #[case] want: Option<&str>) {
    assert_eq!(
        region_of(&strings(zones)).ok().as_deref(),
        want,
        "{zones:?}"
    );
}
