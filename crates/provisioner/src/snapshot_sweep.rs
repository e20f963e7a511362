//! Upstream's snapshot orphan sweep: every `--snapshot-orphan-sweep-interval` our
//! `volumesnapshot-as-source-protection` finalizer comes off snapshots that no claim still
//! waiting to be provisioned names ([`provisioning::data_source::snapshot::unreferenced`]).
//! Restores normally remove it themselves; this catches claims deleted or changed midway.
//!
//! Disabled (one log line) when the RBAC does not allow listing VolumeSnapshots, as upstream.

use std::time::Duration;

use controller_kit::fresh::Fresh;
use k8s_openapi::api::core::v1::PersistentVolumeClaim;
use kube::api::{ApiResource, DynamicObject, GroupVersionKind, ListParams, PostParams};
use kube::{Api, Client};
use provisioning::data_source::snapshot::{self, has_finalizer, unreferenced};
use provisioning::names;
use tokio_util::sync::CancellationToken;

/// Sweeps every `every` until `cancel`. `claims` is the claim cache when it holds every claim
/// (central mode); `None` lists claims from the API server (a distributed instance caches only
/// its node's).
pub async fn run(
    client: Client,
    claims: Option<Fresh<PersistentVolumeClaim>>,
    every: Duration,
    cancel: CancellationToken,
) {
    let api = all_snapshots(&client);
    match api.list_metadata(&ListParams::default().limit(1)).await {
        Err(kube::Error::Api(e)) if e.code == 403 || e.code == 404 => {
            tracing::info!(reason = %e.message, "Snapshot orphan sweep disabled: cannot list VolumeSnapshots");
            // Tasks run until shutdown.
            cancel.cancelled().await;
            return;
        }
        _ => {}
    }
    let mut tick = tokio::time::interval(every);
    tick.tick().await;
    loop {
        tokio::select! {
            _ = cancel.cancelled() => return,
            _ = tick.tick() => {}
        }
        match sweep(&client, &api, claims.as_ref()).await {
            Ok(0) => {}
            Ok(n) => tracing::info!(
                snapshots = n,
                "Removed the source-protection finalizer from snapshots no pending claim needs"
            ),
            Err(e) => {
                tracing::warn!(err = %e, "Snapshot orphan sweep failed; trying again next interval")
            }
        }
    }
}

pub(crate) fn all_snapshots(client: &Client) -> Api<DynamicObject> {
    let resource = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk(snapshot::API_GROUP, snapshot::API_VERSION, "VolumeSnapshot"),
        "volumesnapshots",
    );
    Api::all_with(client.clone(), &resource)
}

/// One sweep; how many finalizers it removed.
async fn sweep(
    client: &Client,
    api: &Api<DynamicObject>,
    cache: Option<&Fresh<PersistentVolumeClaim>>,
) -> Result<usize, kube::Error> {
    let snapshots = api.list(&ListParams::default()).await?;
    let protected: Vec<(String, String)> = snapshots
        .items
        .iter()
        .filter(|s| has_finalizer(&s.metadata, names::SNAPSHOT_SOURCE_FINALIZER))
        .map(|s| {
            (
                s.metadata.namespace.clone().unwrap_or_default(),
                s.metadata.name.clone().unwrap_or_default(),
            )
        })
        .collect();
    if protected.is_empty() {
        return Ok(0);
    }
    let listed;
    let cached;
    let claims: Vec<&PersistentVolumeClaim> = match cache {
        Some(cache) => {
            cached = cache.state();
            cached.iter().map(|c| c.as_ref()).collect()
        }
        None => {
            listed = Api::<PersistentVolumeClaim>::all(client.clone())
                .list(&ListParams::default())
                .await?;
            listed.items.iter().collect()
        }
    };
    let mut removed = 0;
    for (namespace, name) in unreferenced(&protected, &claims) {
        let Some(mut object) = snapshots
            .items
            .iter()
            .find(|s| {
                s.metadata.namespace.as_ref() == Some(namespace)
                    && s.metadata.name.as_ref() == Some(name)
            })
            .cloned()
        else {
            continue;
        };
        if let Some(f) = object.metadata.finalizers.as_mut() {
            f.retain(|x| x != names::SNAPSHOT_SOURCE_FINALIZER);
        }
        let namespaced: Api<DynamicObject> = Api::namespaced_with(
            client.clone(),
            namespace,
            &ApiResource::from_gvk_with_plural(
                &GroupVersionKind::gvk(
                    snapshot::API_GROUP,
                    snapshot::API_VERSION,
                    "VolumeSnapshot",
                ),
                "volumesnapshots",
            ),
        );
        match namespaced
            .replace(name, &PostParams::default(), &object)
            .await
        {
            Ok(_) => {
                removed += 1;
                klog::v!(3, snapshot = %format!("{namespace}/{name}"), "Removed finalizer {} (no pending claim uses the snapshot)", names::SNAPSHOT_SOURCE_FINALIZER);
            }
            // Changed or gone since the list: the next sweep looks again.
            Err(kube::Error::Api(e)) if e.code == 409 || e.code == 404 => {}
            Err(e) => return Err(e),
        }
    }
    Ok(removed)
}
