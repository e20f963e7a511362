//! `kubernetes.io/azure-file` ↔ `file.csi.azure.com`.
//!
//! The CSI handle is `<resource group>#<storage account>#<share>#<PV name>#<secret namespace>`
//! (the driver reads the first three parts). The in-tree source names the account only through
//! its secret, `azure-storage-account-<account>-secret`, and the resource group through PV
//! annotation `kubernetes.io/azure-file-resource-group`. Classes are not translated at all, and
//! there is no topology.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    AzureFilePersistentVolumeSource, CSIPersistentVolumeSource, PersistentVolume, SecretReference,
};

use super::{Plugin, TranslationError, go_lower, non_empty, omit_false, pv_name, spec_mut};

/// Where the in-tree plugin keeps the share's resource group.
pub(super) const RESOURCE_GROUP_ANNOTATION: &str = "kubernetes.io/azure-file-resource-group";
const SECRET_PREFIX: &str = "azure-storage-account-";
const SECRET_SUFFIX: &str = "-secret";
const DEFAULT_SECRET_NAMESPACE: &str = "default";
const ATTR_SHARE_NAME: &str = "sharename";
const ATTR_SECRET_NAME: &str = "secretname";
const ATTR_SECRET_NAMESPACE: &str = "secretnamespace";

/// The in-tree source from `spec.csi`. Share and secret come from the attributes (any case),
/// the secret from the node-stage secret when it has a name; what is still missing comes from
/// the handle (the secret then named after the account, the resource group annotated). The
/// secret namespace defaults to `default`.
pub(super) fn csi_to_in_tree(
    pv: &mut PersistentVolume,
    csi: CSIPersistentVolumeSource,
) -> Result<(), TranslationError> {
    let mut source = AzureFilePersistentVolumeSource {
        read_only: omit_false(csi.read_only),
        ..AzureFilePersistentVolumeSource::default()
    };
    for (key, value) in csi.volume_attributes.iter().flatten() {
        match go_lower(key).as_str() {
            ATTR_SHARE_NAME => source.share_name = value.clone(),
            ATTR_SECRET_NAME => source.secret_name = value.clone(),
            ATTR_SECRET_NAMESPACE => source.secret_namespace = Some(value.clone()),
            _ => {}
        }
    }
    if let Some(secret) = &csi.node_stage_secret_ref
        && let Some(name) = secret.name.as_deref().filter(|n| !n.is_empty())
    {
        source.secret_name = name.to_string();
        // Upstream points at the reference's namespace, empty or not.
        source.secret_namespace = Some(secret.namespace.clone().unwrap_or_default());
    }
    let mut resource_group = String::new();
    if source.share_name.is_empty() || source.secret_name.is_empty() {
        let parts: Vec<&str> = csi.volume_handle.split('#').collect();
        let [group, account, share, ..] = parts.as_slice() else {
            return Err(TranslationError::Malformed {
                pv: pv_name(pv),
                field: "spec.csi.volumeHandle",
                value: csi.volume_handle.clone(),
                reason: "want <resource group>#<storage account>#<share>[#...]".into(),
            });
        };
        if source.share_name.is_empty() {
            source.share_name = share.to_string();
        }
        if source.secret_name.is_empty() {
            source.secret_name = format!("{SECRET_PREFIX}{account}{SECRET_SUFFIX}");
        }
        resource_group = group.to_string();
    }
    source
        .secret_namespace
        .get_or_insert_with(|| DEFAULT_SECRET_NAMESPACE.to_string());
    spec_mut(pv).azure_file = Some(source);
    if !resource_group.is_empty() {
        pv.metadata
            .annotations
            .get_or_insert_with(BTreeMap::new)
            .insert(RESOURCE_GROUP_ANNOTATION.to_string(), resource_group);
    }
    Ok(())
}

/// `spec.csi` from the in-tree source, which is removed. The secret namespace is the source's
/// own, else the claim's namespace (a pod's cannot be known here); neither is an error.
pub(super) fn in_tree_to_csi(
    pv: &mut PersistentVolume,
) -> Result<CSIPersistentVolumeSource, TranslationError> {
    let source = spec_mut(pv).azure_file.take().unwrap_or_default();
    let account = storage_account(&source.secret_name).unwrap_or(&source.secret_name);
    let resource_group = pv
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(RESOURCE_GROUP_ANNOTATION))
        .map_or("", String::as_str);
    // A set secretNamespace is used even when empty (and then fails), as upstream.
    let namespace = match &source.secret_namespace {
        Some(ns) => ns.clone(),
        None => pv
            .spec
            .as_ref()
            .and_then(|s| s.claim_ref.as_ref())
            .and_then(|c| c.namespace.clone())
            .unwrap_or_default(),
    };
    if namespace.is_empty() {
        return Err(TranslationError::NoSecretNamespace { pv: pv_name(pv) });
    }
    let handle = format!(
        "{resource_group}#{account}#{}#{}#{namespace}",
        source.share_name,
        pv_name(pv)
    );
    Ok(CSIPersistentVolumeSource {
        driver: Plugin::AzureFile.driver().to_string(),
        volume_handle: handle,
        read_only: omit_false(source.read_only),
        node_stage_secret_ref: Some(SecretReference {
            name: non_empty(&source.secret_name),
            namespace: non_empty(&namespace),
        }),
        volume_attributes: Some(BTreeMap::from([(
            ATTR_SHARE_NAME.to_string(),
            source.share_name.clone(),
        )])),
        ..CSIPersistentVolumeSource::default()
    })
}

/// The account in a secret name containing `azure-storage-account-<account>-secret`: from the
/// first prefix to the last suffix that leaves a non-empty account, within the first line that
/// has both (upstream's unanchored, greedy pattern).
pub(super) fn storage_account(secret_name: &str) -> Option<&str> {
    secret_name.split('\n').find_map(|line| {
        let start = line.find(SECRET_PREFIX)? + SECRET_PREFIX.len();
        let rest = &line[start..];
        let end = rest.rfind(SECRET_SUFFIX).filter(|&end| end > 0)?;
        Some(&rest[..end])
    })
}
