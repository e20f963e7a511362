//! Beyond upstream: a claim waiting for a VolumeSnapshot that is not ready yet (or not there
//! yet) is retried as soon as the snapshot says `readyToUse`, instead of at its next backoff
//! step (upstream retries by backoff only, up to `--retry-interval-max` later).
//!
//! One watch of VolumeSnapshots; only snapshots that are ready and that a waiting claim in
//! our cache names do anything. While it runs, a claim whose snapshot is missing or not ready
//! waits for it instead of retrying on backoff (see `claims/restore.rs`), and restores read
//! their snapshot from the watch's cache instead of the API server (two requests fewer per
//! restore). Off (one log line) when VolumeSnapshots cannot be watched.
//!
//! A second watch, of VolumeSnapshotContents, only keeps a cache: a restore reads its content
//! from it (one request fewer, ahead of CreateVolume). Upstream's RBAC grants `get` and `list`
//! on contents but not `watch`: then it is off (one log line) and contents are read by GET.

use futures::StreamExt;
use kube::Client;
use kube::ResourceExt;
use kube::runtime::reflector::store::Writer;
use kube::runtime::watcher;
use kube::runtime::{WatchStreamExt, reflector};
use tokio_util::sync::CancellationToken;

use crate::claims::ClaimsController;

/// Watches until `cancel`.
pub async fn run(client: Client, claims: ClaimsController, cancel: CancellationToken) {
    let api = crate::data_source_api::all_snapshots(&client);
    let writer = Writer::new(crate::data_source_api::snapshot_resource());
    let cache = writer.as_reader();
    // managedFields are never read, and an update that leaves them out keeps them.
    let events = watcher::watcher(api, watcher::Config::default())
        .default_backoff()
        .modify(|s| s.managed_fields_mut().clear());
    let mut events = reflector::reflector(writer, events).boxed();
    loop {
        let event = tokio::select! {
            () = cancel.cancelled() => return,
            e = events.next() => e,
        };
        match event {
            Some(Ok(watcher::Event::Apply(s) | watcher::Event::InitApply(s))) => {
                if s.data["status"]["readyToUse"] == true
                    && let (Some(ns), Some(name)) = (&s.metadata.namespace, &s.metadata.name)
                {
                    claims.snapshot_ready(ns, name);
                }
            }
            Some(Ok(watcher::Event::InitDone)) => claims.set_snapshot_watch(Some(cache.clone())),
            Some(Ok(_)) => {}
            Some(Err(e)) if unavailable(&e) => {
                claims.set_snapshot_watch(None);
                tracing::info!(err = %e, "Not watching VolumeSnapshots (no snapshot CRDs, or no list/watch permission): claims waiting for a snapshot are retried by backoff only");
                cancel.cancelled().await;
                return;
            }
            Some(Err(e)) => {
                klog::v!(2, err = %e, "Watching VolumeSnapshots failed; retrying");
            }
            None => {
                cancel.cancelled().await;
                return;
            }
        }
    }
}

/// Keeps the VolumeSnapshotContent cache until `cancel`.
pub async fn run_contents(client: Client, claims: ClaimsController, cancel: CancellationToken) {
    let api = crate::data_source_api::contents(&client);
    let writer = Writer::new(crate::data_source_api::content_resource());
    let cache = writer.as_reader();
    let events = watcher::watcher(api, watcher::Config::default())
        .default_backoff()
        .modify(|c| c.managed_fields_mut().clear());
    let mut events = reflector::reflector(writer, events).boxed();
    loop {
        let event = tokio::select! {
            () = cancel.cancelled() => return,
            e = events.next() => e,
        };
        match event {
            Some(Ok(watcher::Event::InitDone)) => claims.set_content_cache(Some(cache.clone())),
            Some(Ok(_)) => {}
            Some(Err(e)) if unavailable(&e) => {
                claims.set_content_cache(None);
                tracing::info!(err = %e, "Not watching VolumeSnapshotContents (no list/watch permission): restores read their content with a GET");
                cancel.cancelled().await;
                return;
            }
            Some(Err(e)) => {
                klog::v!(2, err = %e, "Watching VolumeSnapshotContents failed; retrying");
            }
            None => {
                cancel.cancelled().await;
                return;
            }
        }
    }
}

/// The watch cannot work: the resource does not exist or we may not read it.
fn unavailable(e: &watcher::Error) -> bool {
    matches!(
        e,
        watcher::Error::InitialListFailed(kube::Error::Api(s))
            | watcher::Error::WatchStartFailed(kube::Error::Api(s))
            | watcher::Error::WatchFailed(kube::Error::Api(s))
            if s.code == 403 || s.code == 404
    )
}
