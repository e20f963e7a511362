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
use kube::api::{ApiResource, DynamicObject};
use kube::runtime::reflector::store::Writer;
use kube::runtime::watcher;
use kube::runtime::{WatchStreamExt, reflector};
use kube::{Api, Client};
use tokio_util::sync::CancellationToken;

use controller_kit::fresh::Fresh;
use controller_kit::reflect::Change;

use crate::claims::ClaimsController;
use crate::data_source_api::{all_snapshots, content_resource, contents, snapshot_resource};
use crate::snapshot_caches::SnapshotCaches;

/// Watches VolumeSnapshots into `caches` until `cancel`.
pub async fn run(
    client: Client,
    caches: SnapshotCaches,
    claims: ClaimsController,
    cancel: CancellationToken,
) {
    let watch = Watch {
        api: all_snapshots(&client),
        resource: snapshot_resource(),
        kind: "VolumeSnapshots",
        instead: "claims waiting for a snapshot are retried by backoff only",
    };
    watch
        .run(cancel, |seen| match seen {
            Seen::Changed(change) => {
                caches.snapshot_seen(change);
                if let Change::Applied(s) = change
                    && s.data["status"]["readyToUse"] == true
                    && let (Some(ns), Some(name)) = (&s.metadata.namespace, &s.metadata.name)
                {
                    claims.snapshot_ready(ns, name);
                }
            }
            Seen::Listed(cache) => caches.set_snapshots(cache),
        })
        .await;
}

/// Keeps the VolumeSnapshotContent cache in `caches` until `cancel`.
pub async fn run_contents(client: Client, caches: SnapshotCaches, cancel: CancellationToken) {
    let watch = Watch {
        api: contents(&client),
        resource: content_resource(),
        kind: "VolumeSnapshotContents",
        instead: "restores read their content with a GET",
    };
    watch
        .run(cancel, |seen| {
            if let Seen::Listed(cache) = seen {
                caches.set_contents(cache);
            }
        })
        .await;
}

/// What a cached watch reports.
enum Seen<'a> {
    /// An object was listed, changed or deleted, or a relist ended (the cache already shows it).
    Changed(&'a Change<DynamicObject>),
    /// The cache after the first list, or `None`: the watch cannot work (no such resource, or
    /// no permission).
    Listed(Option<Fresh<DynamicObject>>),
}

/// A watch of dynamic objects into a cache.
struct Watch {
    api: Api<DynamicObject>,
    resource: ApiResource,
    /// For log lines: what is watched, and what happens without the watch.
    kind: &'static str,
    instead: &'static str,
}

impl Watch {
    /// Runs until `cancel`, telling `on` what it sees.
    async fn run(self, cancel: CancellationToken, mut on: impl FnMut(Seen<'_>)) {
        let Watch {
            api,
            resource,
            kind,
            instead,
        } = self;
        let writer = Writer::new(resource.clone());
        let cache = Fresh::new_with(writer.as_reader(), resource);
        let mut listed = false;
        // managedFields are never read. Dropped, not emptied: an update that leaves them out
        // keeps them, while an empty list would reset every owner's fields.
        let events = watcher::watcher(api, watcher::Config::default())
            .default_backoff()
            .modify(|o| o.metadata.managed_fields = None);
        let mut events = reflector::reflector(writer, events).boxed();
        loop {
            let event = tokio::select! {
                () = cancel.cancelled() => return,
                e = events.next() => e,
            };
            match event {
                Some(Ok(watcher::Event::Apply(o) | watcher::Event::InitApply(o))) => {
                    on(Seen::Changed(&Change::Applied(o)));
                }
                Some(Ok(watcher::Event::Delete(o))) => on(Seen::Changed(&Change::Deleted(o))),
                Some(Ok(watcher::Event::InitDone)) if !listed => {
                    listed = true;
                    on(Seen::Listed(Some(cache.clone())));
                }
                Some(Ok(watcher::Event::InitDone)) => on(Seen::Changed(&Change::Relisted)),
                Some(Ok(watcher::Event::Init)) => {}
                Some(Err(e)) if unavailable(&e) => {
                    on(Seen::Listed(None));
                    tracing::info!(err = %e, "Not watching {kind} (no such resource, or no list/watch permission): {instead}");
                    // Nothing may wait on the watch's stream: drop it before idling.
                    drop(events);
                    cancel.cancelled().await;
                    return;
                }
                Some(Err(e)) => {
                    klog::v!(2, err = %e, "Watching {kind} failed; retrying");
                }
                None => {
                    cancel.cancelled().await;
                    return;
                }
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
