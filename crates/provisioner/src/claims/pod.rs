//! `--capacity-pod-aware` (ours): before a volume of a pod with several claims of ours is
//! made, the claims selected to the same node are added up per storage class, each class
//! against its own object for the node ([`capacity::pod::check`]). If they do not fit
//! together, none is made: the claim goes back to the scheduler and the node is shown too
//! small for the largest claim of the class that did not fit for [`POD_BLOCK`], so the
//! scheduler's next try lands elsewhere. Each claim of the pod comes to the same answer on its
//! own turn.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use capacity::pod::{PodCheck, Sibling, check};
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod};
use kube::Api;
use kube::api::ListParams;
use kube::runtime::reflector::ObjectRef;
use provisioning::errors::ProvisionError;

use super::ClaimsController;

/// How long a node is shown too small for a pod whose claims did not fit there together.
const POD_BLOCK: Duration = Duration::from_secs(30);
/// How long to wait for the scheduler to write `selected-node` on the pod's other claims
/// (it writes them one after the other).
const SIBLINGS_WAIT: Duration = Duration::from_secs(2);

impl ClaimsController {
    /// `Err` sends the claim back to the scheduler without a CreateVolume.
    pub(super) async fn pod_check(
        &self,
        claim: &PersistentVolumeClaim,
        node: &str,
    ) -> Result<(), ProvisionError> {
        let ctx = &self.ctx;
        let Some(capacity) = ctx
            .capacity
            .as_ref()
            .filter(|_| self.config.capacity_pod_aware)
        else {
            return Ok(());
        };
        let namespace = claim.metadata.namespace.clone().unwrap_or_default();
        let name = claim.metadata.name.clone().unwrap_or_default();
        let Some(pod) = self.pod_of(&namespace, &name).await else {
            return Ok(());
        };
        let names = claim_names(&pod);
        let block = format!("pod:{}", pod.metadata.uid.as_deref().unwrap_or_default());
        let pod_name = pod.metadata.name.as_deref().unwrap_or_default();
        let refuse = |what: &str, why: &str| {
            ProvisionError::reschedule(format!(
                "the claims of pod {namespace}/{pod_name} need {what} on node {node}{why}, more \
                 than it can hold; none is created there and the pod goes back to the \
                 scheduler (the node is shown too small for it for {}s)",
                POD_BLOCK.as_secs()
            ))
        };
        // A sibling already found they do not fit here (and went back first): same answer,
        // whatever the class of this one.
        if capacity.blocks(&block, node) {
            return Err(refuse("more bytes together", ""));
        }
        let deadline = Instant::now() + SIBLINGS_WAIT;
        loop {
            let siblings: Vec<(String, Sibling)> = names
                .iter()
                .filter_map(|n| {
                    let c = ctx
                        .caches
                        .claims
                        .get(&ObjectRef::new(n).within(&namespace))?;
                    self.sibling(&c, capacity)
                })
                .collect();
            let uids: Vec<&str> = siblings.iter().map(|(u, _)| u.as_str()).collect();
            // Each class's own object for the node: classes may draw on separate pools.
            let mut rooms = BTreeMap::new();
            for (_, s) in &siblings {
                if rooms.contains_key(&s.class) {
                    continue;
                }
                if let Some(room) = capacity.room(&s.class, node, &uids) {
                    rooms.insert(s.class.clone(), room);
                }
            }
            if rooms.is_empty() {
                return Ok(());
            }
            let claims: Vec<Sibling> = siblings.iter().map(|(_, s)| s.clone()).collect();
            let decision = check(node, &claims, &rooms);
            klog::v!(4, claim = %format!("{namespace}/{name}"), pod = pod.metadata.name.as_deref().unwrap_or_default(), decision = ?decision, claims = ?claims, "Pod-aware capacity check");
            match decision {
                PodCheck::Alone | PodCheck::Fits => return Ok(()),
                // Gone back meanwhile and blocked here: the same answer for this one.
                PodCheck::Wait if capacity.blocks(&block, node) => {
                    return Err(refuse("more bytes together", ""));
                }
                PodCheck::Wait if Instant::now() < deadline => {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                PodCheck::Wait => return Ok(()),
                PodCheck::TooBig {
                    class: too_big,
                    total,
                    largest,
                } => {
                    if let Some(hold) = capacity.block(&block, &too_big, node, largest) {
                        tokio::spawn(async move {
                            tokio::time::sleep(POD_BLOCK).await;
                            drop(hold);
                        });
                    }
                    // `check` judges only classes it has a room for.
                    let shown = rooms
                        .get(&too_big)
                        .map_or_else(String::new, |(r, reserved)| {
                            let max = r
                                .maximum_volume_size
                                .map(|m| format!(", maximumVolumeSize {m} bytes"))
                                .unwrap_or_default();
                            format!(
                                "; its object there shows capacity {} bytes{max}, less {reserved} \
                             bytes of volumes being made",
                                r.available
                            )
                        });
                    return Err(refuse(
                        &format!("{total} bytes together"),
                        &format!(
                            " in storage class {too_big} (largest claim {largest} bytes{shown})"
                        ),
                    ));
                }
            }
        }
    }

    /// The unscheduled pod that uses claim `name` (the scheduler writes `selected-node` before
    /// it binds the pod). One list of the namespace's pods without a node.
    async fn pod_of(&self, namespace: &str, name: &str) -> Option<Pod> {
        let pods: Api<Pod> = Api::namespaced(self.ctx.client.clone(), namespace);
        let unscheduled = ListParams::default().fields("spec.nodeName=");
        match pods.list(&unscheduled).await {
            Ok(list) => list
                .items
                .into_iter()
                .find(|p| claim_names(p).iter().any(|n| n == name)),
            Err(err) => {
                klog::v!(2, namespace, err = %err, "Cannot list pods for --capacity-pod-aware; checking the claim alone");
                None
            }
        }
    }

    /// A claim of the pod as the check sees it, if it is one of ours.
    fn sibling(
        &self,
        c: &PersistentVolumeClaim,
        capacity: &crate::capacity_controller::RefreshHandle,
    ) -> Option<(String, Sibling)> {
        // By its class: kube-controller-manager writes the provisioner annotation only after
        // `selected-node`, so a sibling may not carry it yet.
        let class = c.spec.as_ref()?.storage_class_name.as_deref()?;
        let class = self.ctx.caches.classes.get(&ObjectRef::new(class))?;
        // Immediate claims get no node from the scheduler: nothing to wait for or add up.
        let late = class.volume_binding_mode.as_deref()
            == Some(provisioning::names::WAIT_FOR_FIRST_CONSUMER);
        if class.provisioner != self.ctx.driver.name || !late {
            return None;
        }
        let uid = c.metadata.uid.clone()?;
        let bound = c
            .spec
            .as_ref()
            .is_some_and(|s| s.volume_name.as_deref().is_some_and(|v| !v.is_empty()));
        let sibling = Sibling {
            class: class.metadata.name.clone()?,
            bytes: provisioning::claim::requested_bytes(c).ok()?,
            node: provisioning::claim::selected_node(c).map(String::from),
            counted: bound || capacity.is_held(&uid),
        };
        Some((uid, sibling))
    }
}

/// The claims a pod uses: its `persistentVolumeClaim` volumes and its generic ephemeral
/// volumes (claim `<pod>-<volume>`).
fn claim_names(pod: &Pod) -> Vec<String> {
    let pod_name = pod.metadata.name.as_deref().unwrap_or_default();
    pod.spec
        .iter()
        .flat_map(|s| s.volumes.iter().flatten())
        .filter_map(|v| match (&v.persistent_volume_claim, &v.ephemeral) {
            (Some(pvc), _) => Some(pvc.claim_name.clone()),
            (None, Some(_)) => Some(format!("{pod_name}-{}", v.name)),
            _ => None,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn claims_of_a_pod() {
        let pod: Pod = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "web"},
            "spec": {"containers": [], "volumes": [
                {"name": "a", "persistentVolumeClaim": {"claimName": "data"}},
                {"name": "scratch", "ephemeral": {"volumeClaimTemplate": {"spec": {}}}},
                {"name": "cfg", "configMap": {"name": "x"}},
            ]},
        }))
        .unwrap();
        assert_eq!(claim_names(&pod), ["data", "web-scratch"]);
    }
}
