//! Step 2, prepare: upstream's `prepareProvision` over cached facts, then the secret and
//! VolumeAttributesClass reads the request needs.

use std::collections::BTreeMap;

use csi::v1::TopologyRequirement;
use k8s_openapi::api::core::v1::PersistentVolumeClaim;
use k8s_openapi::api::storage::v1::{StorageClass, VolumeAttributesClass};
use kube::Api;
use provisioning::errors::ProvisionError;
use provisioning::prepare::{
    PrepareInputs, Prepared, ProvisionPlan, TopologyFacts, check_volume_attributes_class,
    secret_fetch_error,
};

use super::ClaimsController;
use super::facts::TopologySnapshot;
use crate::secrets;

impl ClaimsController {
    /// Runs upstream's `prepareProvision` over cached facts. `with_topology` is false when the
    /// requirement cannot be rebuilt (a clean-up after a restart whose node is gone).
    pub(super) fn prepare(
        &self,
        claim: &PersistentVolumeClaim,
        class: &StorageClass,
        with_topology: bool,
    ) -> Result<Prepared, ProvisionError> {
        self.prepare_with(claim, class, with_topology, None)
    }

    /// [`prepare`](Self::prepare) with the requirement an earlier attempt computed, if any:
    /// then no topology facts are gathered at all.
    pub(super) fn prepare_reusing(
        &self,
        claim: &PersistentVolumeClaim,
        class: &StorageClass,
        reused: Option<&Option<TopologyRequirement>>,
    ) -> Result<Prepared, ProvisionError> {
        self.prepare_with(claim, class, reused.is_none(), reused)
    }

    pub(super) fn prepare_with(
        &self,
        claim: &PersistentVolumeClaim,
        class: &StorageClass,
        with_topology: bool,
        reused_topology: Option<&Option<TopologyRequirement>>,
    ) -> Result<Prepared, ProvisionError> {
        let ctx = &self.ctx;
        let config = self.provisioner_config();
        self.with_topology_facts(claim, with_topology, |topology| {
            provisioning::prepare::prepare(&PrepareInputs {
                claim,
                class: Some(class),
                config: &config,
                capabilities: ctx.driver.capabilities,
                topology,
                reused_topology: reused_topology.filter(|_| self.supports_topology()),
            })
        })
    }

    /// Whether the class's allowed topologies admit the claim as it stands (upstream's
    /// `GenerateAccessibilityRequirements` alone); always for a driver without topology.
    pub(super) fn topology_admits(
        &self,
        claim: &PersistentVolumeClaim,
        class: &StorageClass,
    ) -> Result<(), ProvisionError> {
        self.with_topology_facts(claim, true, |facts| match facts {
            Some(facts) => provisioning::prepare::topology_requirement(
                claim,
                class.allowed_topologies.as_deref(),
                &facts,
            )
            .map(drop),
            None => Ok(()),
        })
    }

    /// Runs `f` over the cached topology facts for the claim (`None` without topology).
    fn with_topology_facts<R>(
        &self,
        claim: &PersistentVolumeClaim,
        with_topology: bool,
        f: impl FnOnce(Option<TopologyFacts<'_>>) -> R,
    ) -> R {
        let ctx = &self.ctx;
        let driver = ctx.driver.name.as_str();
        let snapshot = (with_topology && self.supports_topology()).then(|| {
            TopologySnapshot::take(
                &ctx.caches,
                driver,
                provisioning::claim::selected_node(claim),
            )
        });
        let csi_keys = snapshot
            .as_ref()
            .map(|s| s.csi_node_keys(driver))
            .unwrap_or_default();
        let node_labels = snapshot
            .as_ref()
            .map(|s| s.node_labels())
            .unwrap_or_default();
        f(snapshot.as_ref().map(|s| TopologyFacts {
            strict_topology: self.config.strict_topology,
            immediate_topology: self.config.immediate_topology,
            selected_node_topology_keys: s.selected_keys.as_deref(),
            selected_node_labels: s.selected_labels.as_ref(),
            csi_node_topology_keys: &csi_keys,
            node_labels: &node_labels,
            random_hash: rand::random(),
        }))
    }

    /// The provisioner secret's data and the VolumeAttributesClass parameters of a plan.
    pub(super) async fn request_inputs(
        &self,
        plan: &ProvisionPlan,
    ) -> Result<(BTreeMap<String, String>, BTreeMap<String, String>), ProvisionError> {
        let client = &self.ctx.client;
        let secret_data = match &plan.secrets.provisioner {
            Some(secret) => secrets::fetch(client, secret)
                .await
                .map_err(|e| secret_fetch_error(secret, &e))?,
            None => BTreeMap::new(),
        };
        let mutable = match &plan.volume_attributes_class {
            Some(name) => {
                let vac = Api::<VolumeAttributesClass>::all(client.clone())
                    .get(name)
                    .await
                    .map_err(|e| ProvisionError::no_change(crate::api_error::message(&e)))?;
                check_volume_attributes_class(name, &vac.driver_name, &self.ctx.driver.name)?;
                vac.parameters.unwrap_or_default()
            }
            None => BTreeMap::new(),
        };
        Ok((secret_data, mutable))
    }
}
