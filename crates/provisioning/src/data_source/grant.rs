//! Cross-namespace data sources (`CrossNamespaceVolumeDataSource`): a claim may name a source in
//! another namespace only when a Gateway API ReferenceGrant in that namespace allows it.

use k8s_openapi::api::core::v1::PersistentVolumeClaim;
use serde::Deserialize;

use crate::names;

/// API group of ReferenceGrants.
pub const API_GROUP: &str = "gateway.networking.k8s.io";
/// The version upstream reads.
pub const API_VERSION: &str = "v1beta1";

/// The parts of a `ReferenceGrant` the check reads.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
pub struct ReferenceGrant {
    /// Who may refer, and to what.
    #[serde(default)]
    pub spec: ReferenceGrantSpec,
}

/// `ReferenceGrant.spec`.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
pub struct ReferenceGrantSpec {
    /// The referring objects allowed.
    #[serde(default)]
    pub from: Vec<GrantFrom>,
    /// The objects they may refer to (in the grant's namespace).
    #[serde(default)]
    pub to: Vec<GrantTo>,
}

/// One `spec.from` entry.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
pub struct GrantFrom {
    /// API group of the referring kind (`""` for core).
    #[serde(default)]
    pub group: String,
    /// The referring kind.
    #[serde(default)]
    pub kind: String,
    /// The referring objects' namespace.
    #[serde(default)]
    pub namespace: String,
}

/// One `spec.to` entry.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
pub struct GrantTo {
    /// API group of the target kind (`""` for core).
    #[serde(default)]
    pub group: String,
    /// The target kind.
    #[serde(default)]
    pub kind: String,
    /// One object, or every object of the kind when absent or empty.
    #[serde(default)]
    pub name: Option<String>,
}

/// Upstream's `IsGranted`: some grant lets claims of the claim's namespace refer to the
/// `dataSourceRef`'s group, kind and name. The error is upstream's message.
pub fn check(claim: &PersistentVolumeClaim, grants: &[ReferenceGrant]) -> Result<(), String> {
    let claim_ns = claim.metadata.namespace.as_deref().unwrap_or_default();
    let Some(reference) = claim.spec.as_ref().and_then(|s| s.data_source_ref.as_ref()) else {
        return Ok(());
    };
    let allowed = grants.iter().any(|grant| {
        let from =
            grant.spec.from.iter().any(|f| {
                f.group.is_empty() && f.kind == names::PVC_KIND && f.namespace == claim_ns
            });
        from && grant.spec.to.iter().any(|to| {
            let group = reference.api_group.as_deref().unwrap_or_default();
            to.group == group
                && to.kind == reference.kind
                && to
                    .name
                    .as_deref()
                    .is_none_or(|n| n.is_empty() || n == reference.name)
        })
    });
    if allowed {
        return Ok(());
    }
    Err(format!(
        "accessing {}/{} of {} dataSource from {claim_ns}/{} isn't allowed",
        reference.namespace.as_deref().unwrap_or_default(),
        reference.name,
        reference.kind,
        claim.metadata.name.as_deref().unwrap_or_default()
    ))
}
