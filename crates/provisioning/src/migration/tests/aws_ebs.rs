//! AWS EBS: class parameters, volume IDs, regions, both PV directions.

use pretty_assertions::assert_eq;
use rstest::rstest;

use super::*;
use crate::migration::aws_ebs::{TOPOLOGY_KEY as EBS, ebs_volume_id, region_of};

const IN_TREE: &str = "kubernetes.io/aws-ebs";
const DRIVER: &str = "ebs.csi.aws.com";
const VOLUME: &str = "vol-02399794d890f9375";

// TestTranslateEBSInTreeStorageClassToCSI, plus zone parameters and allowedTopologies.
#[rstest]
#[case::normal(&[("foo", "bar")], None, &[("foo", "bar")], None)]
#[case::empty(&[], None, &[], None)]
#[case::fstype(&[("fstype", "ext3")], None, &[("csi.storage.k8s.io/fstype", "ext3")], None)]
#[case::fstype_any_case(&[("FSType", "xfs")], None, &[("csi.storage.k8s.io/fstype", "xfs")], None)]
#[case::iops(
    &[("iopsPerGB", "100")],
    None,
    &[("iopsPerGB", "100"), ("allowautoiopspergbincrease", "true")],
    None
)]
#[case::zone(&[("zone", "us-east-1a")], None, &[], Some(allowed(&[&[(EBS, &["us-east-1a"])]])))]
#[case::zones(
    &[("zones", "us-east-1a,us-east-1b"), ("type", "gp3")],
    None,
    &[("type", "gp3")],
    Some(allowed(&[&[(EBS, &["us-east-1a", "us-east-1b"])]]))
)]
#[case::ga_zone_key(
    &[],
    Some(allowed(&[&[(GA_ZONE, &["us-east-1a"])]])),
    &[],
    Some(allowed(&[&[(EBS, &["us-east-1a"])]]))
)]
#[case::beta_zone_key_and_others_kept(
    &[],
    Some(allowed(&[&[(BETA_ZONE, &["a", "b"]), (GA_REGION, &["us-east-1"])], &[(EBS, &["c"])]])),
    &[],
    Some(allowed(&[&[(EBS, &["a", "b"]), (GA_REGION, &["us-east-1"])], &[(EBS, &["c"])]]))
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
fn zone_parameter_with_allowed_topologies_is_refused() {
    let sc = class(
        IN_TREE,
        &[("Zones", "a,b")],
        Some(allowed(&[&[(EBS, &["a"])]])),
    );
    let err = class_to_csi(&sc).unwrap_err();
    assert_eq!(
        err.to_string(),
        "StorageClass \"sc\": parameter \"Zones\" and allowedTopologies cannot both be set"
    );
}

// TestKubernetesVolumeIDToEBSVolumeID, plus URL details.
#[rstest]
#[case::bare(VOLUME, Some(VOLUME))]
#[case::no_zone("aws:///vol-02399794d890f9375", Some(VOLUME))]
#[case::zone("aws://us-west-2a/vol-02399794d890f9375", Some(VOLUME))]
#[case::not_vol("aws://us-west-2a/02399794d890f9375", None)]
#[case::bare_is_not_checked("vol01", Some("vol01"))]
#[case::slashes_trimmed("aws://us-west-2a//vol-1/", Some("vol-1"))]
#[case::query_dropped("aws://us-west-2a/vol-1?x=y#f", Some("vol-1"))]
#[case::escapes_decoded("aws://us-west-2a/vol-%41b", Some("vol-Ab"))]
#[case::bad_escape("aws://us-west-2a/vol-%4", None)]
#[case::nested("aws://us-west-2a/x/vol-1", None)]
#[case::no_path("aws://us-west-2a", None)]
#[case::control_character("aws://us-west-2a/vol-1\n", None)]
fn volume_ids(#[case] kubernetes_id: &str, #[case] want: Option<&str>) {
    assert_eq!(
        ebs_volume_id(kubernetes_id).ok().as_deref(),
        want,
        "{kubernetes_id:?}"
    );
}

// TestGetAwsRegionFromZones.
#[rstest]
#[case::commercial(&["us-west-2a", "us-west-2b"], Some("us-west-2"))]
#[case::govcloud(&["us-gov-east-1a"], Some("us-gov-east-1"))]
#[case::wavelength(&["us-east-1-wl1-bos-wlz-1"], Some("us-east-1"))]
#[case::local_zone(&["us-west-2-lax-1a"], Some("us-west-2"))]
#[case::no_zones(&[], None)]
#[case::two_regions(&["us-west-2a", "us-east-1a"], None)]
#[case::region_only(&["us-west-2"], None)]
#[case::long_suffix(&["us-west-2ab"], None)]
#[case::too_few_parts(&["us-west"], None)]
fn regions(#[case] zones: &[&str], #[case] want: Option<&str>) {
    assert_eq!(
        region_of(&strings(zones)).ok().as_deref(),
        want,
        "{zones:?}"
    );
}

fn created(attributes: &[(&str, &str)], terms: &[&[(&str, &[&str])]]) -> PersistentVolume {
    let mut source = csi(DRIVER, VOLUME, attributes);
    source.fs_type = Some("ext4".into());
    with_affinity(with_csi(pv("pvc-1"), source), terms)
}

#[test]
fn created_pv_gets_source_zone_and_region() {
    let out = csi_pv_to_in_tree(&created(
        &[("partition", "2")],
        &[&[(EBS, &["us-east-1a"])]],
    ))
    .unwrap();
    let spec = out.spec.as_ref().unwrap();
    assert_eq!(spec.csi, None);
    assert_eq!(
        spec.aws_elastic_block_store,
        Some(AWSElasticBlockStoreVolumeSource {
            volume_id: VOLUME.into(),
            fs_type: Some("ext4".into()),
            partition: Some(2),
            read_only: None,
        })
    );
    assert_eq!(
        terms_of(&out),
        terms(&[&[(GA_ZONE, &["us-east-1a"]), (GA_REGION, &["us-east-1"])]])
    );
    assert_eq!(
        out.metadata.labels,
        Some(map(&[(GA_ZONE, "us-east-1a"), (GA_REGION, "us-east-1")]))
    );
}

#[rstest]
#[case::two_zones(
    terms(&[&[(EBS, &["us-east-1a"])], &[(EBS, &["us-east-1b"])]]),
    terms(&[
        &[(GA_ZONE, &["us-east-1a"]), (GA_REGION, &["us-east-1"])],
        &[(GA_ZONE, &["us-east-1b"]), (GA_REGION, &["us-east-1"])],
    ]),
    &[(GA_ZONE, "us-east-1a__us-east-1b"), (GA_REGION, "us-east-1")]
)]
// Newer drivers report the Kubernetes zone key too: both end up on it, not merged (upstream).
#[case::driver_reports_both_keys(
    terms(&[&[(GA_ZONE, &["us-east-1a"]), (EBS, &["us-east-1a"])]]),
    terms(&[&[(GA_ZONE, &["us-east-1a"]), (GA_ZONE, &["us-east-1a"]), (GA_REGION, &["us-east-1"])]]),
    &[(GA_ZONE, "us-east-1a"), (GA_REGION, "us-east-1")]
)]
// A region the driver reports is kept, and labelled.
#[case::region_reported(
    terms(&[&[(GA_REGION, &["us-east-1"]), (EBS, &["us-east-1a"])]]),
    terms(&[&[(GA_REGION, &["us-east-1"]), (GA_ZONE, &["us-east-1a"])]]),
    &[(GA_ZONE, "us-east-1a"), (GA_REGION, "us-east-1")]
)]
#[case::no_topology(Vec::new(), Vec::new(), &[])]
fn created_pv_topology(
    #[case] reported: Terms,
    #[case] want_terms: Terms,
    #[case] want_labels: &[(&str, &str)],
) {
    let mut pv = with_terms(created(&[], &[]), reported.clone());
    if reported.is_empty() {
        pv.spec.as_mut().unwrap().node_affinity = None;
    }
    let out = csi_pv_to_in_tree(&pv).unwrap();
    assert_eq!(terms_of(&out), want_terms);
    assert_eq!(
        out.metadata.labels,
        (!want_labels.is_empty()).then(|| map(want_labels))
    );
}

#[test]
fn created_pv_errors() {
    let err = csi_pv_to_in_tree(&created(&[("partition", "first")], &[])).unwrap_err();
    assert_eq!(
        err.to_string(),
        "PersistentVolume \"pvc-1\": spec.csi.volumeAttributes[partition] \"first\" is malformed: not a decimal integer"
    );
    let err = csi_pv_to_in_tree(&created(&[], &[&[(EBS, &["moon"])]])).unwrap_err();
    assert!(matches!(err, TranslationError::Region { ref zones, .. } if zones == &["moon"]));
    assert_eq!(
        err.to_string(),
        "PersistentVolume \"pvc-1\": cannot derive one region from zones [\"moon\"]: \"moon\" is not a valid AWS zone"
    );
    // A term without zones has no region either.
    let err = csi_pv_to_in_tree(&created(&[], &[&[("example.com/rack", &["r1"])]])).unwrap_err();
    assert!(matches!(err, TranslationError::Region { .. }), "{err}");
}

fn in_tree(volume_id: &str) -> PersistentVolume {
    with_spec(pv("pv1"), |s| {
        s.aws_elastic_block_store = Some(AWSElasticBlockStoreVolumeSource {
            volume_id: volume_id.into(),
            fs_type: Some("xfs".into()),
            ..AWSElasticBlockStoreVolumeSource::default()
        })
    })
}

#[test]
fn in_tree_pv_gets_bare_handle_and_driver_zone() {
    let pv = with_labels(
        in_tree("aws://us-west-2a/vol-1"),
        &[(BETA_ZONE, "us-west-2a"), (BETA_REGION, "us-west-2")],
    );
    let out = in_tree_pv_to_csi(&pv).unwrap();
    let spec = out.spec.as_ref().unwrap();
    assert_eq!(spec.aws_elastic_block_store, None);
    assert_eq!(
        spec.csi,
        Some(CSIPersistentVolumeSource {
            fs_type: Some("xfs".into()),
            ..csi(DRIVER, "vol-1", &[("partition", "0")])
        })
    );
    assert_eq!(terms_of(&out), terms(&[&[(EBS, &["us-west-2a"])]]));
    assert_eq!(out.metadata.labels, pv.metadata.labels);
}

#[test]
fn in_tree_pv_with_malformed_id_is_refused() {
    let err = in_tree_pv_to_csi(&in_tree("aws://us-west-2a/02399794d890f9375")).unwrap_err();
    assert_eq!(
        err.to_string(),
        "PersistentVolume \"pv1\": spec.awsElasticBlockStore.volumeID \"aws://us-west-2a/02399794d890f9375\" is malformed: want vol-<id>, aws://<zone>/vol-<id> or aws:///vol-<id>"
    );
}
