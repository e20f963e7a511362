//! The data-source objects read through the dynamic client (k8s-openapi has no types for
//! them): VolumeSnapshots, VolumeSnapshotContents and ReferenceGrants, read into the views of
//! `provisioning::data_source`; and our finalizer on snapshots.

use kube::api::{ApiResource, DynamicObject, GroupVersionKind, PostParams};
use kube::{Api, Client};
use provisioning::data_source::{grant, snapshot};
use provisioning::lifecycle::finalizers_with;
use provisioning::names;

fn resource(group: &str, version: &str, kind: &str, plural: &str) -> ApiResource {
    ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(group, version, kind), plural)
}

/// The VolumeSnapshot kind (also the key type of the watch's cache).
pub fn snapshot_resource() -> ApiResource {
    resource(
        snapshot::API_GROUP,
        snapshot::API_VERSION,
        "VolumeSnapshot",
        "volumesnapshots",
    )
}

/// VolumeSnapshots of one namespace.
pub fn snapshots(client: &Client, namespace: &str) -> Api<DynamicObject> {
    Api::namespaced_with(client.clone(), namespace, &snapshot_resource())
}

/// VolumeSnapshots of every namespace (the sweep and the watch).
pub fn all_snapshots(client: &Client) -> Api<DynamicObject> {
    Api::all_with(client.clone(), &snapshot_resource())
}

/// The VolumeSnapshotContent kind (also the key type of the content watch's cache).
pub fn content_resource() -> ApiResource {
    resource(
        snapshot::API_GROUP,
        snapshot::API_VERSION,
        "VolumeSnapshotContent",
        "volumesnapshotcontents",
    )
}

/// VolumeSnapshotContents (cluster-scoped).
pub fn contents(client: &Client) -> Api<DynamicObject> {
    Api::all_with(client.clone(), &content_resource())
}

/// ReferenceGrants of one namespace.
pub fn reference_grants(client: &Client, namespace: &str) -> Api<DynamicObject> {
    let r = resource(
        grant::API_GROUP,
        grant::API_VERSION,
        "ReferenceGrant",
        "referencegrants",
    );
    Api::namespaced_with(client.clone(), namespace, &r)
}

/// Reads a dynamic object's fields into one of our typed views.
pub fn typed<T: serde::de::DeserializeOwned>(object: &DynamicObject) -> Result<T, String> {
    serde_json::to_value(object)
        .and_then(serde_json::from_value)
        .map_err(|e| {
            format!(
                "cannot read {}: {e}",
                object.metadata.name.as_deref().unwrap_or_default()
            )
        })
}

/// How often a conflicting snapshot write is re-read and retried: snapshot-controller writes
/// the snapshot (its own finalizers, status) just as it becomes ready, which is exactly when a
/// waiting restore adds ours.
const CONFLICT_RETRIES: usize = 3;

/// Adds (`add`) or removes our source-protection finalizer on a snapshot, with an update
/// guarded by its resourceVersion (re-read and retried on a conflict). A `Forbidden` answer is
/// logged and ignored: older RBAC without `update` on volumesnapshots keeps working, as
/// upstream. A snapshot gone before a removal is fine. Returns the snapshot as stored by our
/// write (`None`: nothing was written). `retry_conflicts: false` returns the conflict instead:
/// the orphan sweep decided from the version it listed, and a changed snapshot may have a new
/// claim restoring from it, so it waits for its next look, as upstream.
pub async fn set_snapshot_finalizer(
    api: &Api<DynamicObject>,
    mut object: DynamicObject,
    add: bool,
    retry_conflicts: bool,
) -> Result<Option<DynamicObject>, kube::Error> {
    let name = object.metadata.name.clone().unwrap_or_default();
    let uid = object.metadata.uid.clone();
    let retries = if retry_conflicts { CONFLICT_RETRIES } else { 0 };
    for attempt in 0..=retries {
        let finalizers = object.metadata.finalizers.as_ref();
        match finalizers_with(finalizers, names::SNAPSHOT_SOURCE_FINALIZER, add) {
            Some(f) => object.metadata.finalizers = Some(f),
            None => return Ok(None),
        }
        // The whole snapshot as read (a dynamic object keeps every field; upstream's RBAC
        // grants no patch), without managedFields: left out, the API server keeps them, while
        // an empty list would reset every owner's fields.
        object.metadata.managed_fields = None;
        match api.replace(&name, &PostParams::default(), &object).await {
            Ok(stored) => {
                klog::v!(3, snapshot = %format!("{}/{name}", object.metadata.namespace.as_deref().unwrap_or_default()), added = add, "Changed finalizer {}", names::SNAPSHOT_SOURCE_FINALIZER);
                return Ok(Some(stored));
            }
            Err(kube::Error::Api(e)) if e.code == 409 && attempt < retries => {
                match api.get_opt(&name).await? {
                    // Deleted and re-created under the same name: another snapshot, which
                    // the restore did not check and the release must not touch.
                    Some(fresh) if fresh.metadata.uid != uid => {
                        return if add {
                            Err(kube::Error::Api(e))
                        } else {
                            Ok(None)
                        };
                    }
                    Some(fresh) => object = fresh,
                    None if !add => return Ok(None),
                    None => {
                        return Err(kube::Error::Api(e));
                    }
                }
            }
            Err(kube::Error::Api(e)) if e.code == 403 => {
                tracing::warn!(snapshot = %name, "Not allowed to update VolumeSnapshots; the restore goes on without protecting the snapshot (grant update on volumesnapshots)");
                return Ok(None);
            }
            Err(kube::Error::Api(e)) if e.code == 404 && !add => return Ok(None),
            Err(e) => return Err(e),
        }
    }
    unreachable!("the last attempt returns")
}
