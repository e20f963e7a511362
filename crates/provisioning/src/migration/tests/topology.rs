//! Topology translation: the shared helpers (csi-translation-lib's in_tree_volume_test.go cases)
//! and the zone keys of whole PVs through the public functions (translate_test.go's
//! TestTopologyTranslation).

use pretty_assertions::assert_eq;
use rstest::rstest;

use super::*;
use crate::migration::aws_ebs::TOPOLOGY_KEY as EBS;
use crate::migration::cinder::TOPOLOGY_KEY as CINDER;
use crate::migration::gce_pd::{TOPOLOGY_KEY as GKE, region_of as gce_region};
use crate::migration::topology;

const GA_LABELS: &[(&str, &str)] = &[(GA_ZONE, "us-east1-a"), (GA_REGION, "us-east1")];
const BETA_LABELS: &[(&str, &str)] = &[(BETA_ZONE, "us-west2-b"), (BETA_REGION, "us-west2")];

fn labelled(labels: &[(&str, &str)], affinity_terms: Terms) -> PersistentVolume {
    let pv = with_terms(pv("gcepd"), affinity_terms);
    if labels.is_empty() {
        pv
    } else {
        with_labels(pv, labels)
    }
}

// TestTranslateTopologyFromCSIToInTree (GCE key; the Cinder case is in the Cinder tests).
#[rstest]
#[case::keeps_ga_topology(
    GA_LABELS,
    terms(&[&[(GA_REGION, &["us-east1"]), (GKE, &["us-east1-a"])]]),
    true,
    terms(&[&[(GA_REGION, &["us-east1"]), (GA_ZONE, &["us-east1-a"])]]),
    GA_LABELS
)]
#[case::keeps_beta_topology(
    BETA_LABELS,
    terms(&[&[(BETA_REGION, &["us-west2"]), (GKE, &["us-west2-b"])]]),
    true,
    terms(&[&[(BETA_REGION, &["us-west2"]), (BETA_ZONE, &["us-west2-b"])]]),
    BETA_LABELS
)]
#[case::affinity_over_labels(
    &[(GA_ZONE, "existingZone"), (GA_REGION, "existingRegion")],
    terms(&[&[(GKE, &["us-east1-a"])]]),
    true,
    terms(&[&[(GA_ZONE, &["us-east1-a"]), (GA_REGION, &["us-east1"])]]),
    &[(GA_ZONE, "existingZone"), (GA_REGION, "existingRegion")]
)]
#[case::no_terms(
    &[(GA_ZONE, "existingZone"), (GA_REGION, "existingRegion")],
    Vec::new(),
    true,
    Vec::new(),
    &[(GA_ZONE, "existingZone"), (GA_REGION, "existingRegion")]
)]
#[case::ga_from_csi_topology(
    &[],
    terms(&[&[(GKE, &["us-east1-a"])]]),
    true,
    terms(&[&[(GA_ZONE, &["us-east1-a"]), (GA_REGION, &["us-east1"])]]),
    GA_LABELS
)]
#[case::beta_from_beta_affinity(
    &[],
    terms(&[&[(BETA_ZONE, &["us-west2-b"])]]),
    true,
    terms(&[&[(BETA_ZONE, &["us-west2-b"]), (BETA_REGION, &["us-west2"])]]),
    BETA_LABELS
)]
#[case::no_region_derivation(
    &[],
    terms(&[&[(GKE, &["us-east1-a"])]]),
    false,
    terms(&[&[(GA_ZONE, &["us-east1-a"])]]),
    &[(GA_ZONE, "us-east1-a")]
)]
#[case::multiple_terms(
    &[],
    terms(&[&[(GKE, &["us-east1-a"])], &[(GKE, &["us-east1-c"])]]),
    true,
    terms(&[
        &[(GA_ZONE, &["us-east1-a"]), (GA_REGION, &["us-east1"])],
        &[(GA_ZONE, &["us-east1-c"]), (GA_REGION, &["us-east1"])],
    ]),
    &[(GA_ZONE, "us-east1-a__us-east1-c"), (GA_REGION, "us-east1")]
)]
fn csi_to_in_tree(
    #[case] labels: &[(&str, &str)],
    #[case] reported: Terms,
    #[case] derive_region: bool,
    #[case] want_terms: Terms,
    #[case] want_labels: &[(&str, &str)],
) {
    let mut pv = labelled(labels, reported);
    topology::csi_to_in_tree(&mut pv, GKE);
    if derive_region {
        topology::add_regions(&mut pv, gce_region).unwrap();
    }
    assert_eq!(terms_of(&pv), want_terms);
    assert_eq!(pv.metadata.labels, Some(map(want_labels)));
}

// TestTranslateTopologyFromInTreeToCSI: the beta region is upgraded to GA.
#[rstest]
#[case::ga(
    terms(&[&[(GA_ZONE, &["us-east1-a"]), (GA_REGION, &["us-east1"])]]),
    terms(&[&[(GKE, &["us-east1-a"]), (GA_REGION, &["us-east1"])]])
)]
#[case::beta(
    terms(&[&[(BETA_ZONE, &["us-west2-b"]), (BETA_REGION, &["us-west2"])]]),
    terms(&[&[(GKE, &["us-west2-b"]), (GA_REGION, &["us-west2"])]])
)]
fn in_tree_to_csi(#[case] affinity_terms: Terms, #[case] want: Terms) {
    let mut pv = labelled(GA_LABELS, affinity_terms);
    topology::in_tree_to_csi(&mut pv, GKE);
    assert_eq!(terms_of(&pv), want);
}

// TestTranslateAllowedTopologies, plus the GA key and an empty term.
#[rstest]
#[case::no_translation(allowed(&[&[(GKE, &["foo", "bar"])]]), allowed(&[&[(GKE, &["foo", "bar"])]]))]
#[case::translate(allowed(&[&[(BETA_ZONE, &["foo", "bar"])]]), allowed(&[&[(GKE, &["foo", "bar"])]]))]
#[case::ga(allowed(&[&[(GA_ZONE, &["foo"])]]), allowed(&[&[(GKE, &["foo"])]]))]
#[case::combo(
    allowed(&[&[(BETA_ZONE, &["foo", "bar"]), (GKE, &["boo", "baz"])]]),
    allowed(&[&[(GKE, &["foo", "bar"]), (GKE, &["boo", "baz"])]])
)]
#[case::some_other_key(allowed(&[&[("test", &["foo", "bar"])]]), allowed(&[&[("test", &["foo", "bar"])]]))]
#[case::empty_term(
    vec![TopologySelectorTerm { match_label_expressions: Some(Vec::new()) }],
    vec![TopologySelectorTerm { match_label_expressions: None }]
)]
fn allowed_topologies(
    #[case] input: Vec<TopologySelectorTerm>,
    #[case] want: Vec<TopologySelectorTerm>,
) {
    assert_eq!(topology::translate_allowed(&input, GKE), want);
}

// TestAddTopology, plus existing terms.
#[rstest]
#[case::no_zones(Vec::new(), &[], None)]
#[case::only_whitespace(Vec::new(), &[" ", "\n", "\t", "  "], None)]
#[case::some_whitespace(Vec::new(), &[" ", "us-central1-a"], Some(terms(&[&[(GKE, &["us-central1-a"])]])))]
#[case::unsorted(
    Vec::new(),
    &["us-central1-f", "us-central1-a", "us-central1-c", "us-central1-b", "us-central1-a"],
    Some(terms(&[&[(GKE, &["us-central1-a", "us-central1-b", "us-central1-c", "us-central1-f"])]]))
)]
#[case::every_term(
    terms(&[&[("rack", &["r1"])], &[("rack", &["r2"])]]),
    &["z"],
    Some(terms(&[&[("rack", &["r1"]), (GKE, &["z"])], &[("rack", &["r2"]), (GKE, &["z"])]]))
)]
fn add_requirement(#[case] existing: Terms, #[case] zones: &[&str], #[case] want: Option<Terms>) {
    let mut pv = if existing.is_empty() {
        pv("pv1")
    } else {
        with_terms(pv("pv1"), existing.clone())
    };
    let added = topology::add_requirement(&mut pv, GKE, zones.iter().copied());
    assert_eq!(added, want.is_some());
    assert_eq!(terms_of(&pv), want.unwrap_or(existing));
}

// TestReplaceTopology.
#[rstest]
#[case::single(terms(&[&[(GKE, &["us-east1-a"])]]), terms(&[&[(GA_ZONE, &["us-east1-a"])]]))]
#[case::not_found(terms(&[&[(GA_ZONE, &["us-east1-a"])]]), terms(&[&[(GA_ZONE, &["us-east1-a"])]]))]
#[case::multiple_terms(
    terms(&[&[(GKE, &["us-east1-a"])], &[(GKE, &["us-east1-c"])]]),
    terms(&[&[(GA_ZONE, &["us-east1-a"])], &[(GA_ZONE, &["us-east1-c"])]])
)]
#[case::not_combined(
    terms(&[&[(GKE, &["us-east1-a"]), (GA_ZONE, &["us-east1-c"])]]),
    terms(&[&[(GA_ZONE, &["us-east1-a"]), (GA_ZONE, &["us-east1-c"])]])
)]
fn rename_key(#[case] affinity_terms: Terms, #[case] want: Terms) {
    let mut pv = with_terms(pv("pv1"), affinity_terms);
    topology::rename_key(&mut pv, GKE, GA_ZONE);
    assert_eq!(terms_of(&pv), want);
}

fn gce() -> PersistentVolume {
    with_spec(pv("pv1"), |s| {
        s.gce_persistent_disk = Some(GCEPersistentDiskVolumeSource {
            pd_name: "test-disk".into(),
            fs_type: Some("ext4".into()),
            ..GCEPersistentDiskVolumeSource::default()
        })
    })
}

fn ebs() -> PersistentVolume {
    with_spec(pv("pv1"), |s| {
        s.aws_elastic_block_store = Some(AWSElasticBlockStoreVolumeSource {
            volume_id: "vol01".into(),
            fs_type: Some("ext3".into()),
            partition: Some(1),
            read_only: Some(true),
        })
    })
}

fn cinder() -> PersistentVolume {
    with_spec(pv("pv1"), |s| {
        s.cinder = Some(CinderPersistentVolumeSource {
            volume_id: "vol1".into(),
            fs_type: Some("ext4".into()),
            ..CinderPersistentVolumeSource::default()
        })
    })
}

const BETA_US_EAST: &[(&str, &str)] = &[(BETA_ZONE, "us-east-1a"), (BETA_REGION, "us-east-1")];
const GA_US_EAST: &[(&str, &str)] = &[(GA_ZONE, "us-east-1a"), (GA_REGION, "us-east-1")];
const BETA_REGIONAL: &[(&str, &str)] = &[(BETA_ZONE, "europe-west1-b__europe-west1-c")];
const GA_REGIONAL: &[(&str, &str)] = &[(GA_ZONE, "europe-west1-b__europe-west1-c")];

fn setup(pv: PersistentVolume, labels: &[(&str, &str)], affinity_terms: Terms) -> PersistentVolume {
    let pv = if labels.is_empty() {
        pv
    } else {
        with_labels(pv, labels)
    };
    if affinity_terms.is_empty() {
        pv
    } else {
        with_terms(pv, affinity_terms)
    }
}

// TestTopologyTranslation: the driver's key after in-tree → CSI, and a Kubernetes zone key
// instead of it after the way back.
#[rstest]
#[case::gce_beta_labels(gce(), BETA_US_EAST, Vec::new(), GKE, terms(&[&[(GKE, &["us-east-1a"])]]))]
#[case::gce_ga_labels(gce(), GA_US_EAST, Vec::new(), GKE, terms(&[&[(GKE, &["us-east-1a"])]]))]
#[case::gce_beta_topology(
    gce(), &[], terms(&[&[(BETA_ZONE, &["us-east-2a"])]]), GKE, terms(&[&[(GKE, &["us-east-2a"])]])
)]
#[case::gce_csi_topology(
    gce(), &[], terms(&[&[(GKE, &["us-east-2a"])]]), GKE, terms(&[&[(GKE, &["us-east-2a"])]])
)]
#[case::gce_labels_and_topology(
    gce(), BETA_US_EAST, terms(&[&[(BETA_ZONE, &["us-east-2a"])]]), GKE, terms(&[&[(GKE, &["us-east-2a"])]])
)]
#[case::gce_regional_labels(
    gce(), BETA_REGIONAL, Vec::new(), GKE, terms(&[&[(GKE, &["europe-west1-b", "europe-west1-c"])]])
)]
#[case::gce_regional_topology(
    gce(), &[], terms(&[&[(GA_ZONE, &["europe-west1-b", "europe-west1-c"])]]), GKE,
    terms(&[&[(GKE, &["europe-west1-b", "europe-west1-c"])]])
)]
#[case::gce_beta_regional_labels_and_topology(
    gce(), BETA_REGIONAL, terms(&[&[(BETA_ZONE, &["europe-west1-f", "europe-west1-g"])]]), GKE,
    terms(&[&[(GKE, &["europe-west1-f", "europe-west1-g"])]])
)]
#[case::gce_ga_regional_labels_and_topology(
    gce(), GA_REGIONAL, terms(&[&[(GA_ZONE, &["europe-west1-f", "europe-west1-g"])]]), GKE,
    terms(&[&[(GKE, &["europe-west1-f", "europe-west1-g"])]])
)]
#[case::gce_multiple_terms(
    gce(), &[], terms(&[&[(GA_ZONE, &["europe-west1-f"])], &[(GA_ZONE, &["europe-west1-g"])]]), GKE,
    terms(&[&[(GKE, &["europe-west1-f"])], &[(GKE, &["europe-west1-g"])]])
)]
#[case::ebs_beta_labels(ebs(), BETA_US_EAST, Vec::new(), EBS, terms(&[&[(EBS, &["us-east-1a"])]]))]
#[case::ebs_beta_labels_and_topology(
    ebs(), BETA_US_EAST, terms(&[&[(BETA_ZONE, &["us-east-2a"])]]), EBS, terms(&[&[(EBS, &["us-east-2a"])]])
)]
#[case::ebs_ga_labels(ebs(), GA_US_EAST, Vec::new(), EBS, terms(&[&[(EBS, &["us-east-1a"])]]))]
#[case::ebs_ga_labels_and_topology(
    ebs(), GA_US_EAST, terms(&[&[(GA_ZONE, &["us-east-2a"])]]), EBS, terms(&[&[(EBS, &["us-east-2a"])]])
)]
#[case::cinder_labels(cinder(), BETA_US_EAST, Vec::new(), CINDER, terms(&[&[(CINDER, &["us-east-1a"])]]))]
#[case::cinder_labels_and_topology(
    cinder(), BETA_US_EAST, terms(&[&[(BETA_ZONE, &["us-east-2a"])]]), CINDER,
    terms(&[&[(CINDER, &["us-east-2a"])]])
)]
fn whole_pv(
    #[case] source: PersistentVolume,
    #[case] labels: &[(&str, &str)],
    #[case] affinity_terms: Terms,
    #[case] driver_key: &str,
    #[case] want: Terms,
) {
    let pv = setup(source, labels, affinity_terms);
    let as_csi = in_tree_pv_to_csi(&pv).unwrap();
    assert_eq!(terms_of(&as_csi), want);
    let back = csi_pv_to_in_tree(&as_csi).unwrap();
    let keys: Vec<String> = terms_of(&back)
        .into_iter()
        .flatten()
        .map(|(key, _)| key)
        .collect();
    assert!(!keys.iter().any(|k| k == driver_key), "{keys:?}");
    assert!(
        keys.iter().any(|k| k == GA_ZONE || k == BETA_ZONE),
        "{keys:?}"
    );
}
