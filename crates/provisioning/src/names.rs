//! Every exact string the provisioner reads or writes: annotations, finalizers, attribute keys,
//! event reasons and messages, and the reserved StorageClass parameter keys.
//!
//! These are wire-level facts shared with kube-controller-manager, the scheduler,
//! external-resizer and users' manifests, so they must match upstream byte for byte.

/// PVC annotation naming the provisioner that should handle the claim (set by kube-controller-manager).
pub const ANN_STORAGE_PROVISIONER: &str = "volume.kubernetes.io/storage-provisioner";
/// Deprecated spelling of [`ANN_STORAGE_PROVISIONER`], read when the GA one is absent.
pub const ANN_BETA_STORAGE_PROVISIONER: &str = "volume.beta.kubernetes.io/storage-provisioner";
/// PVC annotation with the node the scheduler picked (late binding).
pub const ANN_SELECTED_NODE: &str = "volume.kubernetes.io/selected-node";
/// Kubernetes 1.11 spelling of [`ANN_SELECTED_NODE`], read as a fallback.
pub const ANN_ALPHA_SELECTED_NODE: &str = "volume.alpha.kubernetes.io/selected-node";
/// PV annotation: the provisioner that created the volume.
pub const ANN_PROVISIONED_BY: &str = "pv.kubernetes.io/provisioned-by";
/// PVC/PV annotation set by kube-controller-manager when CSI migration applies.
pub const ANN_MIGRATED_TO: &str = "pv.kubernetes.io/migrated-to";
/// Legacy PVC annotation holding the StorageClass name; wins over `spec.storageClassName`.
pub const ANN_BETA_STORAGE_CLASS: &str = "volume.beta.kubernetes.io/storage-class";
/// PV annotation: name of the secret DeleteVolume needs (empty when there is none).
pub const ANN_DELETION_SECRET_NAME: &str = "volume.kubernetes.io/provisioner-deletion-secret-name";
/// PV annotation: namespace of the secret DeleteVolume needs (empty when there is none).
pub const ANN_DELETION_SECRET_NAMESPACE: &str =
    "volume.kubernetes.io/provisioner-deletion-secret-namespace";
/// PV annotation read by external-resizer for ControllerModifyVolume.
pub const ANN_CONTROLLER_MODIFY_SECRET_NAME: &str =
    "volume.kubernetes.io/controller-modify-secret-name";
/// PV annotation read by external-resizer for ControllerModifyVolume.
pub const ANN_CONTROLLER_MODIFY_SECRET_NAMESPACE: &str =
    "volume.kubernetes.io/controller-modify-secret-namespace";

/// Finalizer the provisioner puts on every PV it creates.
pub const PV_FINALIZER: &str = "external-provisioner.volume.kubernetes.io/finalizer";
/// PVC finalizer held while a volume for the claim may exist without a PV (ours, not
/// upstream's): it keeps the claim, and with it everything needed to delete that volume, until
/// either the PV exists or the volume is known to be gone. See `lifecycle`.
pub const CREATING_VOLUME_FINALIZER: &str =
    "external-provisioner.volume.kubernetes.io/creating-volume";
/// Finalizer on a claim that is the source of a clone still being provisioned.
pub const CLONE_SOURCE_FINALIZER: &str = "provisioner.storage.kubernetes.io/cloning-protection";
/// Finalizer on a VolumeSnapshot a claim is being restored from (ours; the snapshotter has its
/// own `snapshot.storage.kubernetes.io/...` one).
pub const SNAPSHOT_SOURCE_FINALIZER: &str =
    "provisioner.storage.kubernetes.io/volumesnapshot-as-source-protection";
/// VolumeSnapshotContent annotation allowing a restore to change the volume mode.
pub const ANN_ALLOW_VOLUME_MODE_CHANGE: &str =
    "snapshot.storage.kubernetes.io/allow-volume-mode-change";
/// kube-controller-manager's finalizer on every claim, removed once no pod uses the claim.
pub const PVC_PROTECTION_FINALIZER: &str = "kubernetes.io/pvc-protection";
/// `spec.csi.volumeAttributes` key holding the provisioner identity.
pub const PROVISIONER_IDENTITY_KEY: &str = "storage.kubernetes.io/csiProvisionerIdentity";

/// `spec.volumeBindingMode` value that delays provisioning until a node is selected.
pub const WAIT_FOR_FIRST_CONSUMER: &str = "WaitForFirstConsumer";
/// `spec.volumeMode` value for raw block volumes.
pub const VOLUME_MODE_BLOCK: &str = "Block";
/// Resource name of the size request in `spec.resources.requests`.
pub const RESOURCE_STORAGE: &str = "storage";

/// Data source kind for snapshot restores.
pub const SNAPSHOT_KIND: &str = "VolumeSnapshot";
/// API group a `VolumeSnapshot` data source must name.
pub const SNAPSHOT_API_GROUP: &str = "snapshot.storage.k8s.io";
/// Data source kind for clones.
pub const PVC_KIND: &str = "PersistentVolumeClaim";

/// Event reason: an attempt starts (Normal), or a populator is assumed (Normal).
pub const EVENT_PROVISIONING: &str = "Provisioning";
/// Event reason: the PV was saved (Normal).
pub const EVENT_PROVISIONING_SUCCEEDED: &str = "ProvisioningSucceeded";
/// Event reason: an attempt failed (Warning).
pub const EVENT_PROVISIONING_FAILED: &str = "ProvisioningFailed";
/// Event reason on the PV: DeleteVolume failed (Warning).
pub const EVENT_VOLUME_FAILED_DELETE: &str = "VolumeFailedDelete";
/// Event reason on the PV: deletion waits for the volume to be detached (Normal; library
/// v13.1's `VolumeInUseError`).
pub const EVENT_VOLUME_DELETE: &str = "VolumeDelete";
/// Event reason on a deleting clone source (Normal, ours): clones are still filled from it.
pub const EVENT_WAIT_FOR_CLONES: &str = "WaitForClones";

/// The message of [`EVENT_WAIT_FOR_CLONES`]: which clones hold the deletion.
pub fn wait_for_clones_message(clones: &[String]) -> String {
    format!(
        "deletion waits until {} {} cloned from this claim: {}",
        clones.len(),
        if clones.len() == 1 {
            "claim is"
        } else {
            "claims are"
        },
        clones.join(", ")
    )
}
/// Message of the Normal `Provisioning` event for claims with a populator data source.
pub const POPULATOR_EVENT_MESSAGE: &str =
    "Assuming an external populator will provision the volume";

/// Prefix of StorageClass parameters that are for the provisioner, not the driver.
pub const CSI_PARAMETER_PREFIX: &str = "csi.storage.k8s.io/";
/// Reserved parameter: the file system type.
pub const PARAM_FSTYPE: &str = "csi.storage.k8s.io/fstype";
/// Reserved parameter: name of the secret used for any kind without its own keys.
pub const PARAM_DEFAULT_SECRET_NAME: &str = "csi.storage.k8s.io/secret-name";
/// Reserved parameter: namespace of the default secret.
pub const PARAM_DEFAULT_SECRET_NAMESPACE: &str = "csi.storage.k8s.io/secret-namespace";
/// Parameter added by `--extra-create-metadata`: the claim's name.
pub const PARAM_PVC_NAME: &str = "csi.storage.k8s.io/pvc/name";
/// Parameter added by `--extra-create-metadata`: the claim's namespace.
pub const PARAM_PVC_NAMESPACE: &str = "csi.storage.k8s.io/pvc/namespace";
/// Parameter added by `--extra-create-metadata`: the PV name.
pub const PARAM_PV_NAME: &str = "csi.storage.k8s.io/pv/name";
/// Every reserved key the provisioner understands; each is removed before CreateVolume.
pub const RESERVED_PARAMETER_KEYS: [&str; 17] = [
    PARAM_FSTYPE,
    "csi.storage.k8s.io/provisioner-secret-name",
    "csi.storage.k8s.io/provisioner-secret-namespace",
    "csi.storage.k8s.io/controller-publish-secret-name",
    "csi.storage.k8s.io/controller-publish-secret-namespace",
    "csi.storage.k8s.io/node-stage-secret-name",
    "csi.storage.k8s.io/node-stage-secret-namespace",
    "csi.storage.k8s.io/node-publish-secret-name",
    "csi.storage.k8s.io/node-publish-secret-namespace",
    "csi.storage.k8s.io/controller-expand-secret-name",
    "csi.storage.k8s.io/controller-expand-secret-namespace",
    "csi.storage.k8s.io/node-expand-secret-name",
    "csi.storage.k8s.io/node-expand-secret-namespace",
    "csi.storage.k8s.io/controller-modify-secret-name",
    "csi.storage.k8s.io/controller-modify-secret-namespace",
    PARAM_DEFAULT_SECRET_NAME,
    PARAM_DEFAULT_SECRET_NAMESPACE,
];

/// The legacy, case-insensitive file system type key (deprecated, passed to the driver).
pub const LEGACY_FSTYPE: &str = "fstype";

/// Message of the Normal `Provisioning` event emitted before each attempt.
pub fn provisioning_started_message(namespace: &str, name: &str) -> String {
    // Upstream formats klog.KObj(claim) with %q: "ns/name", or just "name" without namespace.
    let object = if namespace.is_empty() {
        name.to_string()
    } else {
        format!("{namespace}/{name}")
    };
    format!(
        "External provisioner is provisioning volume for claim {}",
        gofmt::quote(&object)
    )
}

/// Message of the Normal `ProvisioningSucceeded` event once the PV is saved.
pub fn provisioning_succeeded_message(pv_name: &str) -> String {
    format!("Successfully provisioned volume {pv_name}")
}

/// Message of the Warning `ProvisioningFailed` event for `InvalidArgument` (slowed retries).
pub fn infeasible_message(error: &str) -> String {
    format!("Volume provisioning failed with infeasible error. Retries will be delayed. {error}")
}

/// Upstream's warning text for a deprecated StorageClass parameter.
pub fn deprecation_warning(deprecated: &str, replacement: &str) -> String {
    format!(
        "\"{deprecated}\" is deprecated and will be removed in a future release, please use \"{replacement}\" instead"
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    #[test]
    fn event_messages_match_upstream() {
        let cases = [
            (
                provisioning_started_message("default", "my-pvc"),
                r#"External provisioner is provisioning volume for claim "default/my-pvc""#,
            ),
            (
                provisioning_started_message("", "my-pvc"),
                r#"External provisioner is provisioning volume for claim "my-pvc""#,
            ),
            (
                provisioning_succeeded_message("pvc-1"),
                "Successfully provisioned volume pvc-1",
            ),
            (
                infeasible_message("rpc error: code = InvalidArgument desc = no"),
                "Volume provisioning failed with infeasible error. Retries will be delayed. rpc error: code = InvalidArgument desc = no",
            ),
            (
                deprecation_warning("fstype", PARAM_FSTYPE),
                r#""fstype" is deprecated and will be removed in a future release, please use "csi.storage.k8s.io/fstype" instead"#,
            ),
        ];
        for (got, want) in cases {
            assert_eq!(got, want);
        }
    }

    #[test]
    fn reserved_keys_share_the_prefix() {
        for key in [
            PARAM_FSTYPE,
            PARAM_DEFAULT_SECRET_NAME,
            PARAM_DEFAULT_SECRET_NAMESPACE,
            PARAM_PVC_NAME,
            PARAM_PVC_NAMESPACE,
            PARAM_PV_NAME,
        ] {
            assert!(key.starts_with(CSI_PARAMETER_PREFIX), "{key}");
        }
    }
}
