//! Portworx: auth secret parameters and annotations, both PV directions.

use pretty_assertions::assert_eq;
use rstest::rstest;

use super::*;
use crate::migration::portworx::{AUTH_SECRET_NAME, AUTH_SECRET_NAMESPACE};

const IN_TREE: &str = "kubernetes.io/portworx-volume";
const DRIVER: &str = "pxd.portworx.com";

// TestTranslatePortworxInTreeStorageClassToCSI.
#[rstest]
#[case::correct(
    &[("repl", "1"), ("fs", "ext4"), ("shared", "true"), ("priority_io", "high")],
    &[("repl", "1"), ("fs", "ext4"), ("shared", "true"), ("priority_io", "high")]
)]
#[case::with_secret_params(
    &[("repl", "1"), ("openstorage.io/auth-secret-name", "test-secret"), ("openstorage.io/auth-secret-namespace", "test-namespace")],
    &[
        ("repl", "1"),
        ("csi.storage.k8s.io/provisioner-secret-name", "test-secret"),
        ("csi.storage.k8s.io/provisioner-secret-namespace", "test-namespace"),
        ("csi.storage.k8s.io/controller-publish-secret-name", "test-secret"),
        ("csi.storage.k8s.io/controller-publish-secret-namespace", "test-namespace"),
        ("csi.storage.k8s.io/node-stage-secret-name", "test-secret"),
        ("csi.storage.k8s.io/node-stage-secret-namespace", "test-namespace"),
        ("csi.storage.k8s.io/node-publish-secret-name", "test-secret"),
        ("csi.storage.k8s.io/node-publish-secret-namespace", "test-namespace"),
        ("csi.storage.k8s.io/controller-expand-secret-name", "test-secret"),
        ("csi.storage.k8s.io/controller-expand-secret-namespace", "test-namespace"),
        ("csi.storage.k8s.io/node-expand-secret-name", "test-secret"),
        ("csi.storage.k8s.io/node-expand-secret-namespace", "test-namespace"),
    ]
)]
#[case::key_any_case(
    &[("OpenStorage.io/Auth-Secret-Name", "s")],
    &[
        ("csi.storage.k8s.io/provisioner-secret-name", "s"),
        ("csi.storage.k8s.io/controller-publish-secret-name", "s"),
        ("csi.storage.k8s.io/node-stage-secret-name", "s"),
        ("csi.storage.k8s.io/node-publish-secret-name", "s"),
        ("csi.storage.k8s.io/controller-expand-secret-name", "s"),
        ("csi.storage.k8s.io/node-expand-secret-name", "s"),
    ]
)]
fn class_parameters(#[case] params: &[(&str, &str)], #[case] want: &[(&str, &str)]) {
    let out = class_to_csi(&class(IN_TREE, params, None)).unwrap();
    assert_eq!(out.provisioner, DRIVER);
    assert_eq!(out.parameters, Some(map(want)));
}

// TestTranslatePortworxInTreeStorageClassToCSI "empty".
#[test]
fn class_without_parameters() {
    let sc = crate::testutil::class(IN_TREE);
    let out = class_to_csi(&sc).unwrap();
    assert_eq!(
        out,
        StorageClass {
            provisioner: DRIVER.into(),
            ..sc
        }
    );
}

fn in_tree(annotations: &[(&str, &str)]) -> PersistentVolume {
    let pv = with_spec(pv("pxd.portworx.com"), |s| {
        s.access_modes = Some(strings(&["ReadWriteOnce"]));
        s.claim_ref = Some(ObjectReference {
            name: Some("test-pvc".into()),
            namespace: Some("default".into()),
            ..ObjectReference::default()
        });
        s.portworx_volume = Some(PortworxVolumeSource {
            volume_id: "ID1111".into(),
            fs_type: Some("type".into()),
            read_only: Some(true),
        });
    });
    if annotations.is_empty() {
        pv
    } else {
        with_annotations(pv, annotations)
    }
}

// TestTranslatePortworxInTreePVToCSI, plus a lone annotation.
#[rstest]
#[case::normal(&[], None)]
#[case::with_secret_annotations(
    &[(AUTH_SECRET_NAME, "test-secret"), (AUTH_SECRET_NAMESPACE, "test-namespace")],
    Some(("test-secret", "test-namespace"))
)]
#[case::name_only(&[(AUTH_SECRET_NAME, "test-secret")], None)]
fn in_tree_pv(#[case] annotations: &[(&str, &str)], #[case] secret: Option<(&str, &str)>) {
    let pv = in_tree(annotations);
    let out = in_tree_pv_to_csi(&pv).unwrap();
    let secret = secret.map(|(name, namespace)| SecretReference {
        name: Some(name.into()),
        namespace: Some(namespace.into()),
    });
    // readOnly is not carried over (upstream).
    let want = CSIPersistentVolumeSource {
        fs_type: Some("type".into()),
        controller_publish_secret_ref: secret.clone(),
        node_stage_secret_ref: secret.clone(),
        node_publish_secret_ref: secret.clone(),
        controller_expand_secret_ref: secret.clone(),
        node_expand_secret_ref: secret,
        ..csi(DRIVER, "ID1111", &[])
    };
    let mut want_pv = with_csi(pv.clone(), want);
    want_pv.spec.as_mut().unwrap().portworx_volume = None;
    assert_eq!(out, want_pv);
}

// TestTranslatePortworxCSIPvToInTree.
#[test]
fn created_pv() {
    let mut source = csi(DRIVER, "ID1111", &[]);
    source.fs_type = Some("type".into());
    source.read_only = Some(true);
    let mut created = in_tree(&[]);
    let spec = created.spec.as_mut().unwrap();
    spec.portworx_volume = None;
    spec.csi = Some(source);
    assert_eq!(csi_pv_to_in_tree(&created).unwrap(), in_tree(&[]));
}
