//! Azure file: classes pass, secret names, handles, both PV directions.

use pretty_assertions::assert_eq;
use rstest::rstest;

use super::*;
use crate::migration::azure_file::{RESOURCE_GROUP_ANNOTATION as RG, storage_account};

const IN_TREE: &str = "kubernetes.io/azure-file";
const DRIVER: &str = "file.csi.azure.com";

#[test]
fn class_is_only_renamed() {
    let sc = class(
        IN_TREE,
        &[("skuName", "Standard_LRS"), ("fstype", "cifs")],
        Some(allowed(&[&[(GA_ZONE, &["westus-1"])]])),
    );
    let out = class_to_csi(&sc).unwrap();
    assert_eq!(
        out,
        StorageClass {
            provisioner: DRIVER.into(),
            ..sc
        }
    );
}

// TestGetStorageAccount, plus the pattern's edges.
#[rstest]
#[case::plain("azure-storage-account-accountname-secret", Some("accountname"))]
#[case::dashes(
    "azure-storage-account-accountname-dup-secret",
    Some("accountname-dup")
)]
#[case::invalid("invalid", None)]
#[case::empty_account("azure-storage-account--secret", None)]
#[case::unanchored_greedy("my-azure-storage-account-a-secret-secret-x", Some("a-secret"))]
fn storage_accounts(#[case] secret: &str, #[case] want: Option<&str>) {
    assert_eq!(storage_account(secret), want, "{secret:?}");
}

fn in_tree(secret_namespace: Option<&str>) -> PersistentVolume {
    with_spec(pv("uuid"), |s| {
        s.azure_file = Some(AzureFilePersistentVolumeSource {
            share_name: "sharename".into(),
            secret_name: "secretname".into(),
            secret_namespace: secret_namespace.map(str::to_string),
            read_only: Some(true),
        })
    })
}

fn with_claim_namespace(pv: PersistentVolume, namespace: &str) -> PersistentVolume {
    with_spec(pv, |s| {
        s.claim_ref = Some(ObjectReference {
            namespace: Some(namespace.into()),
            ..ObjectReference::default()
        })
    })
}

// TestTranslateAzureFileInTreePVToCSI, plus the account from the secret name.
#[rstest]
#[case::azure_file_volume(
    in_tree(Some("secretnamespace")),
    "#secretname#sharename#uuid#secretnamespace"
)]
#[case::resource_group(
    with_annotations(in_tree(Some("secretnamespace")), &[(RG, "rg")]),
    "rg#secretname#sharename#uuid#secretnamespace"
)]
#[case::namespace_from_claim(
    with_claim_namespace(with_annotations(in_tree(None), &[(RG, "rg")]), "secretnamespace"),
    "rg#secretname#sharename#uuid#secretnamespace"
)]
#[case::account_from_secret(
    with_spec(in_tree(Some("secretnamespace")), |s| {
        s.azure_file.as_mut().unwrap().secret_name = "azure-storage-account-st-secret".into()
    }),
    "#st#sharename#uuid#secretnamespace"
)]
fn in_tree_pv(#[case] pv: PersistentVolume, #[case] handle: &str) {
    let out = in_tree_pv_to_csi(&pv).unwrap();
    let secret = pv
        .spec
        .as_ref()
        .unwrap()
        .azure_file
        .as_ref()
        .unwrap()
        .secret_name
        .clone();
    let want = CSIPersistentVolumeSource {
        read_only: Some(true),
        node_stage_secret_ref: Some(SecretReference {
            name: Some(secret),
            namespace: Some("secretnamespace".into()),
        }),
        ..csi(DRIVER, handle, &[("sharename", "sharename")])
    };
    let spec = out.spec.as_ref().unwrap();
    assert_eq!(spec.csi, Some(want));
    assert_eq!(spec.azure_file, None);
    assert_eq!(out.metadata, pv.metadata);
}

#[rstest]
#[case::nowhere(with_annotations(in_tree(None), &[(RG, "rg")]))]
// An empty secretNamespace is used as set, not replaced by the claim's.
#[case::empty_in_source(with_claim_namespace(in_tree(Some("")), "default"))]
fn missing_secret_namespace_is_refused(#[case] pv: PersistentVolume) {
    assert_eq!(
        in_tree_pv_to_csi(&pv),
        Err(TranslationError::NoSecretNamespace { pv: "uuid".into() })
    );
}

fn created(
    handle: &str,
    attributes: &[(&str, &str)],
    secret: Option<(&str, &str)>,
) -> PersistentVolume {
    let source = CSIPersistentVolumeSource {
        read_only: Some(true),
        node_stage_secret_ref: secret.map(|(name, namespace)| SecretReference {
            name: Some(name.into()),
            namespace: Some(namespace.into()),
        }),
        ..csi(DRIVER, handle, attributes)
    };
    with_csi(pv("file.csi.azure.com-sharename"), source)
}

fn azure_file(secret: &str, namespace: &str, share: &str) -> AzureFilePersistentVolumeSource {
    AzureFilePersistentVolumeSource {
        secret_name: secret.into(),
        secret_namespace: Some(namespace.into()),
        share_name: share.into(),
        read_only: Some(true),
    }
}

const HANDLE: &str = "rg#st#pvc-file-dynamic#diskname.vhd";

// TestTranslateCSIPVToInTree (Azure file).
#[rstest]
#[case::resource_group_empty(
    created("", &[("shareName", "sharename")], Some(("ut", "secretnamespace"))),
    azure_file("ut", "secretnamespace", "sharename"),
    None
)]
#[case::from_volume_attributes(
    created(HANDLE, &[("shareName", "sharename")], None),
    azure_file("azure-storage-account-st-secret", "default", "sharename"),
    Some("rg")
)]
#[case::from_secret_attributes(
    created(
        HANDLE,
        &[("shareName", "sharename"), ("secretName", "secretname"), ("secretNamespace", "secretnamespace")],
        None
    ),
    azure_file("secretname", "secretnamespace", "sharename"),
    None
)]
#[case::from_node_stage_secret(
    created(HANDLE, &[("shareName", "sharename")], Some(("secretname", "secretnamespace"))),
    azure_file("secretname", "secretnamespace", "sharename"),
    None
)]
#[case::from_volume_handle(
    created(HANDLE, &[], None),
    azure_file("azure-storage-account-st-secret", "default", "pvc-file-dynamic"),
    Some("rg")
)]
#[case::node_stage_secret_wins(
    created(HANDLE, &[("secretName", "attr"), ("secretNamespace", "attrns")], Some(("ref", "refns"))),
    azure_file("ref", "refns", "pvc-file-dynamic"),
    Some("rg")
)]
fn created_pv(
    #[case] pv: PersistentVolume,
    #[case] want: AzureFilePersistentVolumeSource,
    #[case] resource_group: Option<&str>,
) {
    let out = csi_pv_to_in_tree(&pv).unwrap();
    let spec = out.spec.as_ref().unwrap();
    assert_eq!(spec.azure_file, Some(want));
    assert_eq!(spec.csi, None);
    assert_eq!(
        out.metadata.annotations,
        resource_group.map(|rg| map(&[(RG, rg)]))
    );
}

#[test]
fn short_handle_is_refused() {
    // TestGetFileShareInfo: fewer than three parts.
    for handle in ["sharename", "rg#f5713de20cde511e8ba4900", ""] {
        let err = csi_pv_to_in_tree(&created(handle, &[("shareName", "s")], None)).unwrap_err();
        assert_eq!(
            err.to_string(),
            format!(
                "PersistentVolume \"file.csi.azure.com-sharename\": spec.csi.volumeHandle {} is malformed: want <resource group>#<storage account>#<share>[#...]",
                gofmt::quote(handle)
            )
        );
    }
}
