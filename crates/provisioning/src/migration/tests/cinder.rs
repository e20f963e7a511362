//! OpenStack Cinder: class parameters, both PV directions, zone without region.

use pretty_assertions::assert_eq;
use rstest::rstest;

use super::*;
use crate::migration::cinder::TOPOLOGY_KEY as CINDER;

const IN_TREE: &str = "kubernetes.io/cinder";
const DRIVER: &str = "cinder.csi.openstack.org";

// TestTranslateCinderInTreeStorageClassToCSI, plus a legacy zone parameter (kept: the driver
// reads it).
#[rstest]
#[case::normal(&[("foo", "bar")], None, &[("foo", "bar")], None)]
#[case::empty_map(&[], None, &[], None)]
#[case::fstype(&[("fstype", "ext3")], None, &[("csi.storage.k8s.io/fstype", "ext3")], None)]
#[case::availability_not_topology(&[("availability", "nova")], None, &[("availability", "nova")], None)]
#[case::zone_kept(&[("zone", "nova")], None, &[("zone", "nova")], None)]
#[case::topology(
    &[],
    Some(allowed(&[&[(BETA_ZONE, &["nova"])]])),
    &[],
    Some(allowed(&[&[(CINDER, &["nova"])]]))
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

// TestTranslateTopologyFromCSIToInTree "cinder translation": no region is derived.
#[test]
fn created_pv_gets_zone_only() {
    let mut source = csi(DRIVER, "c5f3ab2e", &[]);
    source.fs_type = Some("ext4".into());
    source.read_only = Some(true);
    let created = with_affinity(with_csi(pv("pvc-1"), source), &[&[(CINDER, &["nova"])]]);
    let out = csi_pv_to_in_tree(&created).unwrap();
    assert_eq!(
        out.spec.as_ref().unwrap().cinder,
        Some(CinderPersistentVolumeSource {
            volume_id: "c5f3ab2e".into(),
            fs_type: Some("ext4".into()),
            read_only: Some(true),
            secret_ref: None,
        })
    );
    assert_eq!(terms_of(&out), terms(&[&[(GA_ZONE, &["nova"])]]));
    assert_eq!(out.metadata.labels, Some(map(&[(GA_ZONE, "nova")])));
}

#[test]
fn in_tree_pv_loses_its_secret_reference() {
    let pv = with_labels(
        with_spec(pv("pv1"), |s| {
            s.cinder = Some(CinderPersistentVolumeSource {
                volume_id: "vol1".into(),
                secret_ref: Some(SecretReference {
                    name: Some("openstack".into()),
                    namespace: Some("kube-system".into()),
                }),
                ..CinderPersistentVolumeSource::default()
            })
        }),
        &[(GA_ZONE, "nova")],
    );
    let out = in_tree_pv_to_csi(&pv).unwrap();
    assert_eq!(
        out.spec.as_ref().unwrap().csi,
        Some(csi(DRIVER, "vol1", &[]))
    );
    assert_eq!(terms_of(&out), terms(&[&[(CINDER, &["nova"])]]));
}
