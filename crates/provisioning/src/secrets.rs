//! Secret references from StorageClass parameters (`getSecretReference`): which secret each CSI
//! call needs, with `${...}` templates resolved against the PV and the claim.

pub mod template;

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{PersistentVolumeClaim, SecretReference};
use thiserror::Error;

use crate::names;
use crate::validation::{is_dns1123_label, is_dns1123_subdomain};
use gofmt::{quote, quote_list};

/// The CSI calls that can carry secrets, each with its own StorageClass keys.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SecretKind {
    /// CreateVolume / DeleteVolume.
    Provisioner,
    /// ControllerPublishVolume (external-attacher).
    ControllerPublish,
    /// NodeStageVolume (kubelet).
    NodeStage,
    /// NodePublishVolume (kubelet).
    NodePublish,
    /// ControllerExpandVolume (external-resizer).
    ControllerExpand,
    /// NodeExpandVolume (kubelet).
    NodeExpand,
    /// ControllerModifyVolume (external-resizer).
    ControllerModify,
}

impl SecretKind {
    /// All kinds, in the order upstream resolves them.
    pub const ALL: [SecretKind; 7] = [
        SecretKind::Provisioner,
        SecretKind::ControllerPublish,
        SecretKind::NodeStage,
        SecretKind::NodePublish,
        SecretKind::ControllerExpand,
        SecretKind::NodeExpand,
        SecretKind::ControllerModify,
    ];

    /// The name upstream uses in error messages.
    pub fn label(self) -> &'static str {
        match self {
            SecretKind::Provisioner => "Provisioner",
            SecretKind::ControllerPublish => "ControllerPublish",
            SecretKind::NodeStage => "NodeStage",
            SecretKind::NodePublish => "NodePublish",
            SecretKind::ControllerExpand => "ControllerExpand",
            SecretKind::NodeExpand => "NodeExpand",
            SecretKind::ControllerModify => "ControllerModify",
        }
    }

    /// `csi.storage.k8s.io/<kind>-secret-name`.
    pub fn name_key(self) -> &'static str {
        match self {
            SecretKind::Provisioner => "csi.storage.k8s.io/provisioner-secret-name",
            SecretKind::ControllerPublish => "csi.storage.k8s.io/controller-publish-secret-name",
            SecretKind::NodeStage => "csi.storage.k8s.io/node-stage-secret-name",
            SecretKind::NodePublish => "csi.storage.k8s.io/node-publish-secret-name",
            SecretKind::ControllerExpand => "csi.storage.k8s.io/controller-expand-secret-name",
            SecretKind::NodeExpand => "csi.storage.k8s.io/node-expand-secret-name",
            SecretKind::ControllerModify => "csi.storage.k8s.io/controller-modify-secret-name",
        }
    }

    /// `csi.storage.k8s.io/<kind>-secret-namespace`.
    pub fn namespace_key(self) -> &'static str {
        match self {
            SecretKind::Provisioner => "csi.storage.k8s.io/provisioner-secret-namespace",
            SecretKind::ControllerPublish => {
                "csi.storage.k8s.io/controller-publish-secret-namespace"
            }
            SecretKind::NodeStage => "csi.storage.k8s.io/node-stage-secret-namespace",
            SecretKind::NodePublish => "csi.storage.k8s.io/node-publish-secret-namespace",
            SecretKind::ControllerExpand => "csi.storage.k8s.io/controller-expand-secret-namespace",
            SecretKind::NodeExpand => "csi.storage.k8s.io/node-expand-secret-namespace",
            SecretKind::ControllerModify => "csi.storage.k8s.io/controller-modify-secret-namespace",
        }
    }

    /// The deprecated `csi<Kind>SecretName` / `csi<Kind>SecretNamespace` keys (only four kinds
    /// have them). They are honoured and, unlike the prefixed keys, passed on to the driver.
    pub fn deprecated_keys(self) -> Option<(&'static str, &'static str)> {
        match self {
            SecretKind::Provisioner => {
                Some(("csiProvisionerSecretName", "csiProvisionerSecretNamespace"))
            }
            SecretKind::ControllerPublish => Some((
                "csiControllerPublishSecretName",
                "csiControllerPublishSecretNamespace",
            )),
            SecretKind::NodeStage => {
                Some(("csiNodeStageSecretName", "csiNodeStageSecretNamespace"))
            }
            SecretKind::NodePublish => {
                Some(("csiNodePublishSecretName", "csiNodePublishSecretNamespace"))
            }
            _ => None,
        }
    }
}

/// A resolved secret reference (name and namespace both non-empty and valid).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SecretRef {
    /// Secret name (DNS-1123 subdomain).
    pub name: String,
    /// Secret namespace (DNS-1123 label).
    pub namespace: String,
}

impl From<&SecretRef> for SecretReference {
    fn from(r: &SecretRef) -> Self {
        SecretReference {
            name: Some(r.name.clone()),
            namespace: Some(r.namespace.clone()),
        }
    }
}

/// The claim facts templates may use. Deletion synthesises it from the PV's `claimRef`, without
/// annotations, so `${pvc.annotations['...']}` fails there, as upstream.
#[derive(Debug, Clone, Copy)]
pub struct TemplateClaim<'a> {
    /// `${pvc.name}` (name templates only).
    pub name: &'a str,
    /// `${pvc.namespace}`.
    pub namespace: &'a str,
    /// `${pvc.annotations['KEY']}` (name templates only).
    pub annotations: Option<&'a BTreeMap<String, String>>,
}

impl<'a> TemplateClaim<'a> {
    /// The facts of a live claim.
    pub fn of(claim: &'a PersistentVolumeClaim) -> Self {
        TemplateClaim {
            name: claim.metadata.name.as_deref().unwrap_or_default(),
            namespace: claim.metadata.namespace.as_deref().unwrap_or_default(),
            annotations: claim.metadata.annotations.as_ref(),
        }
    }
}

/// A mistake in how the StorageClass names a secret (upstream's texts).
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum TemplateProblem {
    /// Deprecated and prefixed keys both given.
    #[error(
        "{0} secrets specified in parameters with both \"csi\" and \"csi.storage.k8s.io/\" keys"
    )]
    BothStyles(&'static str),
    /// Only the name or only the namespace given.
    #[error("either name and namespace for {0} secrets specified, Both must be specified")]
    OnlyOneOfPair(&'static str),
    /// Name or namespace given as the empty string.
    #[error("{0} secrets specified in parameters but value of either namespace or name is empty")]
    EmptyValue(&'static str),
}

/// Why no secret reference could be made. Provisioning retries these (NoChange).
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum SecretError {
    /// The kind's own keys are inconsistent.
    #[error("failed to get name and namespace template from params: {0}")]
    Keys(TemplateProblem),
    /// The default `secret-name`/`secret-namespace` pair is inconsistent.
    #[error("failed to get default name and namespace template from params: {0}")]
    DefaultKeys(TemplateProblem),
    /// Tokens that this template may not use, or that have no value.
    #[error(
        "error resolving value {}: invalid tokens: {}",
        quote(template),
        quote_list(tokens)
    )]
    InvalidTokens {
        /// The template as written.
        template: String,
        /// Unresolved token names, sorted.
        tokens: Vec<String>,
    },
    /// The namespace is not a DNS-1123 label.
    #[error("{}", invalid_text(template, resolved, "namespace"))]
    InvalidNamespace {
        /// The template as written.
        template: String,
        /// Its expansion.
        resolved: String,
    },
    /// The name is not a DNS-1123 subdomain.
    #[error("{}", invalid_text(template, resolved, "secret"))]
    InvalidName {
        /// The template as written.
        template: String,
        /// Its expansion.
        resolved: String,
    },
}

fn invalid_text(template: &str, resolved: &str, what: &str) -> String {
    if template == resolved {
        format!("{} is not a valid {what} name", quote(template))
    } else {
        format!(
            "{} resolved to {} which is not a valid {what} name",
            quote(template),
            quote(resolved)
        )
    }
}

struct KeySet {
    label: &'static str,
    deprecated: Option<(&'static str, &'static str)>,
    name: &'static str,
    namespace: &'static str,
}

const DEFAULT_KEYS: KeySet = KeySet {
    label: "Default",
    deprecated: None,
    name: names::PARAM_DEFAULT_SECRET_NAME,
    namespace: names::PARAM_DEFAULT_SECRET_NAMESPACE,
};

/// `verifyAndGetSecretNameAndNamespaceTemplate`: the (name, namespace) templates, if given.
fn templates<'p>(
    keys: &KeySet,
    params: &'p BTreeMap<String, String>,
) -> Result<Option<(&'p str, &'p str)>, TemplateProblem> {
    let (old_name, old_namespace) = keys.deprecated.unzip();
    let names: Vec<&str> = [old_name, Some(keys.name)]
        .into_iter()
        .flatten()
        .filter_map(|k| params.get(k).map(String::as_str))
        .collect();
    let namespaces: Vec<&str> = [old_namespace, Some(keys.namespace)]
        .into_iter()
        .flatten()
        .filter_map(|k| params.get(k).map(String::as_str))
        .collect();
    match (names.as_slice(), namespaces.as_slice()) {
        ([], []) => Ok(None),
        ([name], [namespace]) if name.is_empty() || namespace.is_empty() => {
            Err(TemplateProblem::EmptyValue(keys.label))
        }
        ([name], [namespace]) => Ok(Some((name, namespace))),
        (n, ns) if n.len() > 1 || ns.len() > 1 => Err(TemplateProblem::BothStyles(keys.label)),
        _ => Err(TemplateProblem::OnlyOneOfPair(keys.label)),
    }
}

/// The secret `kind` uses according to the StorageClass `params`, or `None` if it uses none.
///
/// The kind's own keys win; without them the default pair applies. Namespace templates may use
/// `${pv.name}` and `${pvc.namespace}`; name templates also `${pvc.name}` and
/// `${pvc.annotations['KEY']}`. `claim` is `None` when no claim is known at all, which leaves only
/// `${pv.name}`. No lookup is done: the secret may or may not exist.
pub fn secret_reference(
    kind: SecretKind,
    params: &BTreeMap<String, String>,
    pv_name: &str,
    claim: Option<&TemplateClaim<'_>>,
) -> Result<Option<SecretRef>, SecretError> {
    let own = KeySet {
        label: kind.label(),
        deprecated: kind.deprecated_keys(),
        name: kind.name_key(),
        namespace: kind.namespace_key(),
    };
    let found = match templates(&own, params).map_err(SecretError::Keys)? {
        Some(found) => Some(found),
        None => templates(&DEFAULT_KEYS, params).map_err(SecretError::DefaultKeys)?,
    };
    let Some((name_template, namespace_template)) = found else {
        return Ok(None);
    };

    let namespace = template::resolve(namespace_template, |token| match token {
        "pv.name" => Some(pv_name.to_string()),
        "pvc.namespace" => claim.map(|c| c.namespace.to_string()),
        _ => None,
    })
    .map_err(|tokens| SecretError::InvalidTokens {
        template: namespace_template.into(),
        tokens,
    })?;
    if !is_dns1123_label(&namespace) {
        return Err(SecretError::InvalidNamespace {
            template: namespace_template.into(),
            resolved: namespace,
        });
    }

    let name = template::resolve(name_template, |token| match token {
        "pv.name" => Some(pv_name.to_string()),
        "pvc.name" => claim.map(|c| c.name.to_string()),
        "pvc.namespace" => claim.map(|c| c.namespace.to_string()),
        _ => annotation_token(token).and_then(|key| claim?.annotations?.get(key).cloned()),
    })
    .map_err(|tokens| SecretError::InvalidTokens {
        template: name_template.into(),
        tokens,
    })?;
    if !is_dns1123_subdomain(&name) {
        return Err(SecretError::InvalidName {
            template: name_template.into(),
            resolved: name,
        });
    }
    Ok(Some(SecretRef { name, namespace }))
}

/// The KEY of a `pvc.annotations['KEY']` token.
fn annotation_token(token: &str) -> Option<&str> {
    token.strip_prefix("pvc.annotations['")?.strip_suffix("']")
}

/// The secret references a PV records, one per kind.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SecretRefs {
    /// CreateVolume/DeleteVolume; recorded in the deletion-secret annotations.
    pub provisioner: Option<SecretRef>,
    /// `spec.csi.controllerPublishSecretRef`.
    pub controller_publish: Option<SecretRef>,
    /// `spec.csi.nodeStageSecretRef`.
    pub node_stage: Option<SecretRef>,
    /// `spec.csi.nodePublishSecretRef`.
    pub node_publish: Option<SecretRef>,
    /// `spec.csi.controllerExpandSecretRef`.
    pub controller_expand: Option<SecretRef>,
    /// `spec.csi.nodeExpandSecretRef`.
    pub node_expand: Option<SecretRef>,
    /// Recorded in the controller-modify annotations for external-resizer.
    pub controller_modify: Option<SecretRef>,
}

/// All seven references, resolved in upstream's order; the first failure wins.
pub fn secret_references(
    params: &BTreeMap<String, String>,
    pv_name: &str,
    claim: Option<&TemplateClaim<'_>>,
) -> Result<SecretRefs, SecretError> {
    let get = |kind| secret_reference(kind, params, pv_name, claim);
    Ok(SecretRefs {
        provisioner: get(SecretKind::Provisioner)?,
        controller_publish: get(SecretKind::ControllerPublish)?,
        node_stage: get(SecretKind::NodeStage)?,
        node_publish: get(SecretKind::NodePublish)?,
        controller_expand: get(SecretKind::ControllerExpand)?,
        node_expand: get(SecretKind::NodeExpand)?,
        controller_modify: get(SecretKind::ControllerModify)?,
    })
}

#[cfg(test)]
mod tests;
