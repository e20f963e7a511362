//! `prepareProvision`: every check and decision before CreateVolume, in upstream's order, over
//! plain inputs. The result tells the caller what to fetch (the provisioner secret, the
//! VolumeAttributesClass) and how to build the request and, later, the PV.

use std::collections::BTreeMap;
use std::fmt::Display;

use csi::v1::{CreateVolumeRequest, TopologyRequirement, VolumeCapability, VolumeContentSource};
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, TopologySelectorTerm};
use k8s_openapi::api::storage::v1::StorageClass;

use crate::capabilities::claim_volume_capabilities;
use crate::claim;
use crate::data_source::{self, DataSource, Normalised};
use crate::errors::{ProvisionError, ProvisioningState};
use crate::fstype::resolve_fs_type;
use crate::parameters::{add_extra_create_metadata, strip_reserved};
use crate::request::{CreateVolumeInputs, build_create_volume_request};
use crate::secrets::{SecretRef, SecretRefs, TemplateClaim, secret_references};
use crate::topology::{TopologyInput, accessibility_requirements};
use crate::volume_name::make_volume_name;

/// The driver's capabilities, as read once at start-up.
pub use csi::DriverCapabilities;

/// Provisioner settings (flags and feature gates).
#[derive(Debug, Clone, Copy)]
pub struct ProvisionerConfig<'a> {
    /// The CSI driver name.
    pub driver_name: &'a str,
    /// `--volume-name-prefix`.
    pub volume_name_prefix: &'a str,
    /// `--volume-name-uuid-length`.
    pub volume_name_uuid_length: i32,
    /// `--default-fstype`.
    pub default_fs_type: &'a str,
    /// `--extra-create-metadata`.
    pub extra_create_metadata: bool,
    /// The `VolumeAttributesClass` feature gate.
    pub volume_attributes_class_enabled: bool,
    /// The `CrossNamespaceVolumeDataSource` feature gate.
    pub cross_namespace_data_sources: bool,
}

/// Cluster facts for topology; see [`TopologyInput`] for each field.
#[derive(Debug, Clone, Copy)]
pub struct TopologyFacts<'a> {
    /// `--strict-topology`.
    pub strict_topology: bool,
    /// `--immediate-topology`.
    pub immediate_topology: bool,
    /// Our keys on the selected node's CSINode (`None`: no such CSINode).
    pub selected_node_topology_keys: Option<&'a [String]>,
    /// The selected Node's labels (`None`: no such Node).
    pub selected_node_labels: Option<&'a BTreeMap<String, String>>,
    /// Our keys on every CSINode, by name.
    pub csi_node_topology_keys: &'a [(&'a str, &'a [String])],
    /// Every Node's labels, by name.
    pub node_labels: &'a [(&'a str, &'a BTreeMap<String, String>)],
    /// Hash used when the claim has no name.
    pub random_hash: u32,
}

/// Inputs of [`prepare`].
#[derive(Debug, Clone, Copy)]
pub struct PrepareInputs<'a> {
    /// The claim.
    pub claim: &'a PersistentVolumeClaim,
    /// Its StorageClass, if it exists.
    pub class: Option<&'a StorageClass>,
    /// Settings.
    pub config: &'a ProvisionerConfig<'a>,
    /// What the driver can do.
    pub capabilities: DriverCapabilities,
    /// `None` when the driver lacks `VOLUME_ACCESSIBILITY_CONSTRAINTS` (no topology at all).
    pub topology: Option<TopologyFacts<'a>>,
    /// The requirement an earlier attempt for the same selected node computed. When given it
    /// is used as is and `topology` is not consulted: every retry asks the driver for the same
    /// placement even after the selected Node or CSINode is gone (upstream's `pvcNodeStore`).
    pub reused_topology: Option<&'a Option<TopologyRequirement>>,
}

/// The outcome of [`prepare`].
#[derive(Debug, Clone, PartialEq)]
pub enum Prepared {
    /// Go on: fetch the provisioner secret and the VolumeAttributesClass, then call CreateVolume.
    Provision(Box<ProvisionPlan>),
    /// The claim's data source is for a volume populator: emit a Normal
    /// [`crate::names::EVENT_PROVISIONING`] event with [`crate::names::POPULATOR_EVENT_MESSAGE`] and ignore
    /// the claim (upstream's `IgnoredError`).
    ExternalPopulator {
        /// The data source kind.
        kind: String,
        /// The source's namespace when it is not the claim's: a ReferenceGrant there must
        /// allow the reference before the claim is handed over (as upstream).
        other_namespace: Option<String>,
    },
}

/// Everything decided before CreateVolume.
#[derive(Debug, Clone, PartialEq)]
pub struct ProvisionPlan {
    /// PV name and CreateVolume name.
    pub volume_name: String,
    /// The selected node, if any (non-empty).
    pub selected_node: Option<String>,
    /// Resolved file system type (may be empty).
    pub fs_type: String,
    /// The claim's storage request in bytes.
    pub requested_bytes: i64,
    /// One capability per access mode.
    pub capabilities: Vec<VolumeCapability>,
    /// Parameters for the driver (reserved keys stripped, extra metadata added).
    pub parameters: BTreeMap<String, String>,
    /// Topology requirement, if any.
    pub accessibility_requirements: Option<TopologyRequirement>,
    /// Secret references for the PV; `secrets.provisioner` is the secret to fetch for the request.
    pub secrets: SecretRefs,
    /// The VolumeAttributesClass to fetch and check with [`check_volume_attributes_class`].
    pub volume_attributes_class: Option<String>,
    /// CSI migration: the in-tree plugin the claim's class names. Its parameters were
    /// translated for the driver, and the PV must be turned into the in-tree form
    /// ([`crate::migration::csi_pv_to_in_tree`]).
    pub migrated_from: Option<&'static str>,
    /// The snapshot or claim to fill the volume from: the caller checks it and builds the
    /// content source ([`crate::data_source`]) before CreateVolume.
    pub data_source: Option<DataSource>,
}

impl ProvisionPlan {
    /// The CreateVolumeRequest, given the provisioner secret's data, the VAC parameters and
    /// the content source built from [`ProvisionPlan::data_source`] (if any).
    pub fn create_volume_request(
        &self,
        claim: &PersistentVolumeClaim,
        secrets: BTreeMap<String, String>,
        mutable_parameters: BTreeMap<String, String>,
        content_source: Option<VolumeContentSource>,
    ) -> Result<CreateVolumeRequest, ProvisionError> {
        build_create_volume_request(CreateVolumeInputs {
            volume_name: &self.volume_name,
            claim,
            capabilities: self.capabilities.clone(),
            parameters: self.parameters.clone(),
            secrets,
            accessibility_requirements: self.accessibility_requirements.clone(),
            mutable_parameters,
            content_source,
        })
    }
}

/// The accessibility requirement of `claim` under `allowed_topologies` (upstream's
/// `GenerateAccessibilityRequirements`), failing with [`prepare`]'s error classes. Also asked
/// alone in distributed provisioning: an instance whose node the class's allowed topologies
/// exclude does not take the claim.
pub fn topology_requirement(
    claim: &PersistentVolumeClaim,
    allowed_topologies: Option<&[TopologySelectorTerm]>,
    facts: &TopologyFacts<'_>,
) -> Result<Option<TopologyRequirement>, ProvisionError> {
    let input = TopologyInput {
        claim_name: claim.metadata.name.as_deref().unwrap_or_default(),
        selected_node: claim::selected_node(claim).filter(|n| !n.is_empty()),
        selected_node_topology_keys: facts.selected_node_topology_keys,
        selected_node_labels: facts.selected_node_labels,
        strict_topology: facts.strict_topology,
        immediate_topology: facts.immediate_topology,
        allowed_topologies: allowed_topologies.unwrap_or_default(),
        csi_node_topology_keys: facts.csi_node_topology_keys,
        node_labels: facts.node_labels,
        random_hash: facts.random_hash,
    };
    accessibility_requirements(&input).map_err(|e| match e.state() {
        ProvisioningState::Reschedule => ProvisionError::reschedule(e.to_string()),
        _ => ProvisionError::no_change(format!("error generating accessibility requirements: {e}")),
    })
}

/// Runs upstream's `prepareProvision` checks in order. Each failure carries upstream's state:
/// configuration problems are `Finished`, lookups that may succeed later are `NoChange`, and a
/// selected node whose CSINode is gone is `Reschedule`.
///
/// Differs from upstream: the data source's content source is checked by the caller after this
/// (upstream checks it before topology and secrets, so when both fail the event differs);
/// a cross-namespace source's ReferenceGrant is checked by the caller too; and because
/// the secret is fetched by the caller after all pure checks, a claim with both an unreadable
/// provisioner secret and an unknown reserved parameter fails as `Finished` where upstream says
/// `NoChange`.
pub fn prepare(inputs: &PrepareInputs<'_>) -> Result<Prepared, ProvisionError> {
    let claim = inputs.claim;
    let config = inputs.config;
    let caps = inputs.capabilities;
    let claim_name = claim.metadata.name.as_deref().unwrap_or_default();
    let claim_namespace = claim.metadata.namespace.as_deref().unwrap_or_default();
    let Some(class) = inputs.class else {
        return Err(ProvisionError::finished("storage class was nil"));
    };

    let data_source = match data_source::normalise(claim, config.cross_namespace_data_sources)? {
        Normalised::Empty => None,
        Normalised::Populator {
            kind,
            other_namespace,
        } => {
            return Ok(Prepared::ExternalPopulator {
                kind,
                other_namespace,
            });
        }
        Normalised::Source(source) => Some(source),
    };
    // CSI migration: a class of the in-tree plugin is provisioned with its parameters and
    // topology translated for the driver, as upstream's TranslateInTreeStorageClassToCSI.
    let migrated_from = crate::migration::in_tree_plugin_name(&class.provisioner);
    let translated;
    let class = match migrated_from {
        Some(_) => {
            translated = crate::migration::class_to_csi(class).map_err(|e| {
                ProvisionError::finished(format!("failed to translate storage class: {e}"))
            })?;
            &translated
        }
        None => class,
    };

    let vac_name =
        claim::volume_attributes_class(claim).filter(|_| config.volume_attributes_class_enabled);
    if let Some(source) = &data_source {
        data_source::check_capability(source.kind, caps)?;
    }
    check_driver_capabilities(caps, vac_name.is_some())?;

    if claim.spec.as_ref().is_some_and(|s| s.selector.is_some()) {
        return Err(ProvisionError::finished("claim Selector is not supported"));
    }
    let uid = claim.metadata.uid.as_deref().unwrap_or_default();
    let volume_name = make_volume_name(
        config.volume_name_prefix,
        uid,
        config.volume_name_uuid_length,
    )
    .map_err(|e| ProvisionError::finished(e.to_string()))?;

    let params = class.parameters.clone().unwrap_or_default();
    let fs_type = resolve_fs_type(&params, config.default_fs_type)
        .map_err(|e| ProvisionError::finished(e.to_string()))?;
    let requested_bytes = claim::requested_bytes(claim).map_err(|e| {
        ProvisionError::finished(format!(
            "invalid storage request in claim {claim_namespace}/{claim_name}: {e}"
        ))
    })?;
    let capabilities =
        claim_volume_capabilities(claim, class, &fs_type, caps.single_node_multi_writer)
            .map_err(|e| ProvisionError::finished(e.to_string()))?;

    let selected_node = claim::selected_node(claim).filter(|n| !n.is_empty());
    let accessibility_requirements = match (inputs.reused_topology, inputs.topology) {
        (Some(reused), _) => reused.clone(),
        (None, None) => None,
        (None, Some(facts)) => {
            topology_requirement(claim, class.allowed_topologies.as_deref(), &facts)?
        }
    };

    let secrets = secret_references(&params, &volume_name, Some(&TemplateClaim::of(claim)))
        .map_err(|e| ProvisionError::no_change(e.to_string()))?;

    let mut parameters = strip_reserved(&params).map_err(|e| {
        ProvisionError::finished(format!(
            "failed to strip CSI Parameters of prefixed keys: {e}"
        ))
    })?;
    if config.extra_create_metadata {
        add_extra_create_metadata(&mut parameters, claim_name, claim_namespace, &volume_name);
    }

    Ok(Prepared::Provision(Box::new(ProvisionPlan {
        volume_name,
        selected_node: selected_node.map(str::to_string),
        fs_type,
        requested_bytes,
        capabilities,
        parameters,
        accessibility_requirements,
        secrets,
        volume_attributes_class: vac_name.map(str::to_string),
        migrated_from,
        data_source,
    })))
}

/// Upstream's capability check before DeleteVolume: a driver that cannot create volumes is not
/// asked to delete one either (the `VolumeFailedDelete` event says why).
pub fn can_delete_volumes(caps: DriverCapabilities) -> Result<(), String> {
    check_driver_capabilities(caps, false).map_err(|e| e.message)
}

fn check_driver_capabilities(
    caps: DriverCapabilities,
    needs_modify: bool,
) -> Result<(), ProvisionError> {
    if !caps.controller_service {
        return Err(ProvisionError::finished(
            "CSI driver does not support dynamic provisioning: plugin CONTROLLER_SERVICE capability is not reported",
        ));
    }
    if !caps.create_delete_volume {
        return Err(ProvisionError::finished(
            "CSI driver does not support dynamic provisioning: controller CREATE_DELETE_VOLUME capability is not reported",
        ));
    }
    if needs_modify && !caps.modify_volume {
        return Err(ProvisionError::finished(
            "CSI driver does not support VolumeAttributesClass: controller MODIFY_VOLUME capability is not reported",
        ));
    }
    Ok(())
}

/// The VolumeAttributesClass must be for our driver (Finished otherwise). A failed GET of the
/// class is `NoChange` with the API error as message.
pub fn check_volume_attributes_class(
    vac_name: &str,
    vac_driver: &str,
    driver_name: &str,
) -> Result<(), ProvisionError> {
    if vac_driver == driver_name {
        return Ok(());
    }
    Err(ProvisionError::finished(format!(
        "VAC {vac_name} referenced in PVC is for driver {vac_driver} which does not match driver name {driver_name}"
    )))
}

/// The error when the provisioner secret cannot be read (retried: NoChange).
pub fn secret_fetch_error(secret: &SecretRef, cause: &dyn Display) -> ProvisionError {
    ProvisionError::no_change(secret_fetch_message(secret, cause))
}

/// Upstream's words for a secret that cannot be read; deletion says it the same way.
pub fn secret_fetch_message(secret: &SecretRef, cause: &dyn Display) -> String {
    format!(
        "error getting secret {} in namespace {}: {cause}",
        secret.name, secret.namespace
    )
}

/// Upstream's log reason for ignoring a populator data source.
pub fn populator_reason(kind: &str) -> String {
    format!(
        "data source ({kind}) is not handled by the provisioner, assuming an external populator will provision it"
    )
}

#[cfg(test)]
mod tests;
