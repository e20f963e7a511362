//! Upstream's snapshot orphan sweep: every `--snapshot-orphan-sweep-interval` our
//! `volumesnapshot-as-source-protection` finalizer comes off snapshots that no claim still
//! waiting to be provisioned names ([`provisioning::data_source::snapshot::unreferenced`]).
//! Restores normally remove it themselves; this catches claims deleted or changed midway.
//!
//! Disabled (one log line) when the RBAC does not allow listing VolumeSnapshots, as upstream.

use std::time::Duration;

use controller_kit::fresh::Fresh;
use k8s_openapi::api::core::v1::PersistentVolumeClaim;
use kube::api::{DynamicObject, ListParams};
use kube::{Api, Client};
use provisioning::data_source::snapshot::{has_finalizer, unreferenced};

use crate::data_source_api::{all_snapshots, set_snapshot_finalizer, snapshots};
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
    // The first tick is at once: as upstream, a sweep right after start-up (the caches have
    // synced by now) frees what a crash left behind.
    let mut tick = tokio::time::interval(every);
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

/// One sweep; how many finalizers it removed.
async fn sweep(
    client: &Client,
    api: &Api<DynamicObject>,
    cache: Option<&Fresh<PersistentVolumeClaim>>,
) -> Result<usize, kube::Error> {
    let snapshots_list = api.list(&ListParams::default()).await?;
    let protected: Vec<(String, String)> = snapshots_list
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
        let Some(object) = snapshots_list
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
        match set_snapshot_finalizer(&snapshots(client, namespace), object, false, false).await {
            Ok(_) => {
                removed += 1;
                klog::v!(3, snapshot = %format!("{namespace}/{name}"), "Removed finalizer {} (no pending claim uses the snapshot)", names::SNAPSHOT_SOURCE_FINALIZER);
            }
            // Changed since the list: the next sweep looks again.
            Err(kube::Error::Api(e)) if e.code == 409 => {}
            // One snapshot that refuses the update (a webhook, a policy) must not keep the
            // finalizer on every snapshot after it: as upstream, log and go on.
            Err(e) => {
                tracing::warn!(snapshot = %format!("{namespace}/{name}"), err = %e, "Failed to remove finalizer {}; the next sweep tries again", names::SNAPSHOT_SOURCE_FINALIZER);
            }
        }
    }
    Ok(removed)
}
