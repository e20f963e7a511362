//! Volumes from data sources: which source a claim names (`dataSource` / `dataSourceRef`),
//! whether the driver can fill a volume from it, and the checks upstream runs on the
//! VolumeSnapshot ([`snapshot`]) or the source claim ([`clone`]) before CreateVolume.
//!
//! Everything here is pure: the caller fetches the objects and writes the finalizers.

pub mod clone;
pub mod grant;
pub mod snapshot;

#[cfg(test)]
mod tests;

use k8s_openapi::api::core::v1::PersistentVolumeClaim;

use crate::errors::ProvisionError;
use crate::names;
use crate::prepare::DriverCapabilities;

/// What a claim's data source asks of us.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Normalised {
    /// No data source: an empty volume.
    Empty,
    /// A kind we do not handle: a volume populator fills the volume.
    Populator {
        /// The data source kind.
        kind: String,
        /// The `dataSourceRef`'s namespace when it names one other than the claim's (only
        /// with the `CrossNamespaceVolumeDataSource` gate): a ReferenceGrant there must allow it.
        other_namespace: Option<String>,
    },
    /// A snapshot to restore or a claim to clone.
    Source(DataSource),
}

/// What to fill the volume from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SourceKind {
    /// A `snapshot.storage.k8s.io` VolumeSnapshot.
    Snapshot,
    /// A PersistentVolumeClaim (a clone).
    Claim,
}

/// A snapshot or claim to fill the new volume from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DataSource {
    /// Snapshot or claim.
    pub kind: SourceKind,
    /// Its name.
    pub name: String,
    /// Where it is: the claim's namespace, or with the `CrossNamespaceVolumeDataSource` gate
    /// the `dataSourceRef`'s (a ReferenceGrant must then allow it, see [`grant::check`]).
    pub namespace: String,
}

impl DataSource {
    /// The kind as the API spells it.
    pub fn kind_name(&self) -> &'static str {
        match self.kind {
            SourceKind::Snapshot => names::SNAPSHOT_KIND,
            SourceKind::Claim => names::PVC_KIND,
        }
    }

    /// Upstream's wrapper around every content-source failure; these are retried
    /// (`NoChange`): the source may become ready, bound or big enough.
    pub fn error(&self, message: impl std::fmt::Display) -> ProvisionError {
        ProvisionError::no_change(format!(
            "error getting handle for DataSource Type {} by Name {}: {message}",
            self.kind_name(),
            self.name
        ))
    }
}

/// Normalises `dataSource` (first) and `dataSourceRef` as upstream: a populator kind is
/// [`Normalised::Populator`]; a snapshot from another API group, an empty name or (without
/// `cross_namespace`, the `CrossNamespaceVolumeDataSource` gate) a reference to another
/// namespace is refused (`Finished`).
pub fn normalise(
    claim: &PersistentVolumeClaim,
    cross_namespace: bool,
) -> Result<Normalised, ProvisionError> {
    let claim_name = claim.metadata.name.as_deref().unwrap_or_default();
    let own_namespace = claim.metadata.namespace.clone().unwrap_or_default();
    let mut namespace = own_namespace.clone();
    let Some(spec) = claim.spec.as_ref() else {
        return Ok(Normalised::Empty);
    };
    let (kind, name, api_group) = if let Some(source) = &spec.data_source {
        (&source.kind, &source.name, source.api_group.as_deref())
    } else if let Some(source) = &spec.data_source_ref {
        if let Some(ns) = source.namespace.as_deref().filter(|ns| !ns.is_empty()) {
            if !cross_namespace {
                return Err(ProvisionError::finished(
                    "dataSourceRef namespace specified but the CrossNamespaceVolumeDataSource feature is disabled",
                ));
            }
            namespace = ns.to_string();
        }
        (&source.kind, &source.name, source.api_group.as_deref())
    } else {
        return Ok(Normalised::Empty);
    };
    let api_group = api_group.unwrap_or_default();
    if name.is_empty() {
        return Err(ProvisionError::finished(format!(
            "the PVC source not found for PVC {claim_name}"
        )));
    }
    let kind = match kind.as_str() {
        names::SNAPSHOT_KIND if api_group != names::SNAPSHOT_API_GROUP => {
            return Err(ProvisionError::finished(format!(
                "the PVC source does not belong to the right APIGroup. Expected {}, Got {api_group}",
                names::SNAPSHOT_API_GROUP
            )));
        }
        names::SNAPSHOT_KIND => SourceKind::Snapshot,
        names::PVC_KIND => SourceKind::Claim,
        other => {
            return Ok(Normalised::Populator {
                kind: other.to_string(),
                other_namespace: Some(namespace).filter(|ns| *ns != own_namespace),
            });
        }
    };
    Ok(Normalised::Source(DataSource {
        kind,
        name: name.clone(),
        namespace,
    }))
}

/// The driver must be able to fill a volume from the source: snapshot restore needs
/// `CREATE_DELETE_SNAPSHOT`, cloning `CLONE_VOLUME` (upstream's messages, `Finished`).
pub fn check_capability(kind: SourceKind, caps: DriverCapabilities) -> Result<(), ProvisionError> {
    match kind {
        SourceKind::Snapshot if !caps.create_delete_snapshot => Err(ProvisionError::finished(
            "CSI driver does not support snapshot restore: controller CREATE_DELETE_SNAPSHOT capability is not reported",
        )),
        SourceKind::Claim if !caps.clone_volume => Err(ProvisionError::finished(
            "CSI driver does not support clone operations: controller CLONE_VOLUME capability is not reported",
        )),
        _ => Ok(()),
    }
}

/// Whether the claim's own `spec.dataSource` names a VolumeSnapshot: after a successful restore
/// our finalizer comes off that snapshot (upstream looks at `dataSource` only).
pub fn restored_snapshot(claim: &PersistentVolumeClaim) -> Option<&str> {
    claim
        .spec
        .as_ref()
        .and_then(|s| s.data_source.as_ref())
        .filter(|s| s.kind == names::SNAPSHOT_KIND && !s.name.is_empty())
        .map(|s| s.name.as_str())
}
