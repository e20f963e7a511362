//! Informer caches: kube-runtime's watcher + reflector with the fields we never read stripped
//! before caching, the default reconnect backoff, and a stream of changes to enqueue from.
//!
//! The cache fills only while the change stream is polled, so the caller must drive it
//! (typically a task that maps each change to a work-queue key) even if it ignores changes.

use std::fmt::Debug;
use std::hash::Hash;
use std::time::Duration;

use futures::stream::BoxStream;
use futures::{StreamExt, future};
use kube::runtime::WatchStreamExt;
use kube::runtime::reflector::{self, Store};
use kube::runtime::watcher::{self, Event};
use kube::{Api, Resource};
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::compact::{self, CompactStore};

/// The annotation `kubectl apply` leaves on objects: often the largest field, never read.
pub const LAST_APPLIED: &str = "kubectl.kubernetes.io/last-applied-configuration";

/// What happened to a cached object.
#[derive(Debug, Clone, PartialEq)]
pub enum Change<K> {
    /// Added or updated (also every object of a (re)list).
    Applied(K),
    /// Deleted; the object as last seen.
    Deleted(K),
    /// A (re)list finished. Objects deleted while the watch was down vanish from the store
    /// without a [`Change::Deleted`], so controllers that track deletions should resync.
    Relisted,
}

/// The bookmark annotation that ends the initial events of a streaming list.
const INITIAL_EVENTS_END: &str = "k8s.io/initial-events-end";

/// How informers read their first list (and every relist).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InitialList {
    /// One watch with `sendInitialEvents` (the API server's WatchList): one request per
    /// resource, objects arrive one by one instead of as pages held in memory at once.
    Streaming,
    /// Pages of 500 served from the API server's watch cache (`resourceVersion=0`), as
    /// client-go's reflector reads them.
    ///
    /// Both modes read the watch cache, which may lag the latest write by moments: an object
    /// created just before the list can arrive as a watch event right after the cache reports
    /// ready. Caches that must be complete when ready use a consistent read instead.
    Paged,
}

impl InitialList {
    pub fn watcher_config(self) -> watcher::Config {
        match self {
            InitialList::Streaming => watcher::Config::default().streaming_lists(),
            InitialList::Paged => watcher::Config::default().any_semantic(),
        }
    }
}

/// Asks the API server for the StorageClasses as a streaming list and answers
/// [`InitialList::Streaming`] if the end-of-initial-events bookmark arrives within `wait`.
/// Servers without WatchList (gate off, or older than 1.27) refuse the request or never send
/// that bookmark: they get [`InitialList::Paged`]. One request; StorageClasses are few and
/// every provisioner may watch them.
pub async fn probe_initial_list(client: &kube::Client, wait: Duration) -> InitialList {
    use k8s_openapi::api::storage::v1::StorageClass;
    use kube::api::{WatchEvent, WatchParams};
    let api: Api<StorageClass> = Api::all(client.clone());
    let params = WatchParams::streaming_lists().timeout(wait.as_secs().max(1) as u32);
    let ended = async {
        let stream = match api.watch(&params, "0").await {
            Ok(stream) => stream,
            Err(err) => {
                klog::v!(2, error = %err, "Streaming lists refused; informers list in pages");
                return false;
            }
        };
        let mut stream = std::pin::pin!(stream);
        while let Some(event) = stream.next().await {
            match event {
                Ok(WatchEvent::Bookmark(b))
                    if b.metadata.annotations.contains_key(INITIAL_EVENTS_END) =>
                {
                    return true;
                }
                Ok(WatchEvent::Error(_)) | Err(_) => return false,
                Ok(_) => {}
            }
        }
        false
    };
    let streaming = tokio::time::timeout(wait, ended).await.unwrap_or(false);
    let mode = if streaming {
        InitialList::Streaming
    } else {
        InitialList::Paged
    };
    klog::v!(2, mode = ?mode, "Informer initial list mode");
    mode
}

/// Drops `managedFields` and the last-applied annotation: memory we would only carry around.
pub fn strip_metadata<K: Resource>(obj: &mut K) {
    let meta = obj.meta_mut();
    meta.managed_fields = None;
    if let Some(annotations) = meta.annotations.as_mut() {
        annotations.remove(LAST_APPLIED);
        if annotations.is_empty() {
            meta.annotations = None;
        }
    }
}

/// Starts caching the objects `api` and `config` select. `strip` removes further unused
/// fields after [`strip_metadata`] (pass `|_| {}` for none). Watch errors are logged and
/// retried with kube's default backoff (800 ms growing to 30 s).
pub fn informer<K>(
    api: Api<K>,
    config: watcher::Config,
    strip: fn(&mut K),
) -> (Store<K>, BoxStream<'static, Change<K>>)
where
    K: Resource + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
    K::DynamicType: Default + Eq + Hash + Clone + Send + Sync,
{
    informer_keeping(api, config, strip, |_| true)
}

/// [`informer`] that caches only the objects `keep` accepts. An object that stops being
/// accepted leaves the cache (its change is reported as a deletion), so the cache never holds
/// a stale copy of it. For distributed provisioning, where an instance needs only its node's
/// volumes and claims.
pub fn informer_keeping<K>(
    api: Api<K>,
    config: watcher::Config,
    strip: fn(&mut K),
    keep: impl Fn(&K) -> bool + Send + 'static,
) -> (Store<K>, BoxStream<'static, Change<K>>)
where
    K: Resource + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
    K::DynamicType: Default + Eq + Hash + Clone + Send + Sync,
{
    let (reader, mut writer) = reflector::store();
    let changes = changes(api, config, strip, keep, move |event| {
        writer.apply_watcher_event(event)
    });
    (reader, changes)
}

/// [`informer_keeping`] into a [`CompactStore`]: the same watch, cache and changes, with the
/// cached objects kept as JSON.
pub fn compact_informer_keeping<K>(
    api: Api<K>,
    config: watcher::Config,
    strip: fn(&mut K),
    keep: impl Fn(&K) -> bool + Send + 'static,
) -> (CompactStore<K>, BoxStream<'static, Change<K>>)
where
    K: Resource + Clone + DeserializeOwned + Serialize + Debug + Send + Sync + 'static,
    K::DynamicType: Default + Eq + Hash + Clone + Send + Sync,
{
    let (reader, mut writer) = compact::store();
    let changes = changes(api, config, strip, keep, move |event| {
        writer.apply_watcher_event(event)
    });
    (reader, changes)
}

/// The watch, stripped and filtered, with each event applied to a cache by `apply` before it
/// is reported (as kube's `reflect` does), so a change never arrives ahead of the cache.
fn changes<K>(
    api: Api<K>,
    config: watcher::Config,
    strip: fn(&mut K),
    keep: impl Fn(&K) -> bool + Send + 'static,
    mut apply: impl FnMut(&Event<K>) + Send + 'static,
) -> BoxStream<'static, Change<K>>
where
    K: Resource + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
    K::DynamicType: Default + Eq + Hash + Clone + Send + Sync,
{
    watcher::watcher(api, config)
        .default_backoff()
        .modify(move |obj: &mut K| {
            strip_metadata(obj);
            strip(obj);
        })
        .filter_map(move |event| future::ready(kept(event, &keep)))
        .inspect(move |event| {
            if let Ok(event) = event {
                apply(event);
            }
        })
        .filter_map(|event| future::ready(to_change(event)))
        .boxed()
}

/// What the cache sees of a watch event when it keeps only what `keep` accepts: a rejected
/// object is removed (or, during a list, never added).
fn kept<K>(
    event: Result<Event<K>, watcher::Error>,
    keep: &impl Fn(&K) -> bool,
) -> Option<Result<Event<K>, watcher::Error>> {
    match event {
        Ok(Event::Apply(obj)) if !keep(&obj) => Some(Ok(Event::Delete(obj))),
        Ok(Event::InitApply(obj)) if !keep(&obj) => None,
        other => Some(other),
    }
}

/// A cache that never watches: it holds `objects` and is ready at once. Its change stream
/// reports them once, then the end of the first list, then stays open (nothing ever changes).
/// For objects a process knows without asking, such as its own node in distributed
/// provisioning.
pub fn fixed<K>(objects: Vec<K>) -> (Store<K>, BoxStream<'static, Change<K>>)
where
    K: Resource + Clone + Send + Sync + 'static,
    K::DynamicType: Default + Eq + Hash + Clone + Send + Sync,
{
    let (reader, mut writer) = reflector::store();
    writer.apply_watcher_event(&Event::Init);
    for obj in &objects {
        writer.apply_watcher_event(&Event::InitApply(obj.clone()));
    }
    writer.apply_watcher_event(&Event::InitDone);
    let changes = futures::stream::iter(objects.into_iter().map(Change::Applied))
        .chain(futures::stream::once(future::ready(Change::Relisted)))
        // Keeps the writer (and so the store) alive as long as someone listens.
        .chain(futures::stream::pending().map(move |c: Change<K>| {
            let _keep = &writer;
            c
        }))
        .boxed();
    (reader, changes)
}

fn to_change<K: Resource>(event: Result<Event<K>, watcher::Error>) -> Option<Change<K>>
where
    K::DynamicType: Default,
{
    match event {
        Ok(Event::Apply(obj) | Event::InitApply(obj)) => Some(Change::Applied(obj)),
        Ok(Event::Delete(obj)) => Some(Change::Deleted(obj)),
        Ok(Event::InitDone) => Some(Change::Relisted),
        Ok(Event::Init) => None,
        Err(err) => {
            tracing::error!(kind = %K::kind(&Default::default()), error = %err, "Failed to watch");
            None
        }
    }
}

/// Why a cache did not become ready.
#[derive(Debug, thiserror::Error)]
pub enum ReflectError {
    /// The first list did not finish in time (apiserver down, RBAC missing `list`/`watch`).
    #[error(
        "timed out after {after:?} waiting for the {kind} cache to sync; check the API server and the list/watch permissions for {kind}"
    )]
    Timeout { kind: String, after: Duration },
    /// The change stream was dropped before the first list finished.
    #[error("the {kind} informer stopped before its cache synced")]
    Stopped { kind: String },
}

/// Waits until the first list has filled `store` (client-go's `WaitForCacheSync`).
pub async fn wait_until_ready<K>(store: &Store<K>, timeout: Duration) -> Result<(), ReflectError>
where
    K: Resource + Clone + 'static,
    K::DynamicType: Default + Eq + Hash + Clone,
{
    let kind = K::kind(&Default::default()).into_owned();
    ready_within(kind, timeout, store.wait_until_ready()).await
}

/// `ready` (a cache's first list ending, or its writer dropped first) within `timeout`.
pub(crate) async fn ready_within<E>(
    kind: String,
    timeout: Duration,
    ready: impl std::future::Future<Output = Result<(), E>>,
) -> Result<(), ReflectError> {
    match tokio::time::timeout(timeout, ready).await {
        Ok(Ok(())) => Ok(()),
        Ok(Err(_)) => Err(ReflectError::Stopped { kind }),
        Err(_) => Err(ReflectError::Timeout {
            kind,
            after: timeout,
        }),
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use k8s_openapi::api::core::v1::ConfigMap;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ManagedFieldsEntry, ObjectMeta};

    use super::*;

    fn config_map(annotations: &[(&str, &str)]) -> ConfigMap {
        ConfigMap {
            metadata: ObjectMeta {
                name: Some("cm".into()),
                managed_fields: Some(vec![ManagedFieldsEntry {
                    manager: Some("kubectl".into()),
                    ..Default::default()
                }]),
                annotations: Some(
                    annotations
                        .iter()
                        .map(|(k, v)| (k.to_string(), v.to_string()))
                        .collect::<BTreeMap<_, _>>(),
                )
                .filter(|a| !a.is_empty()),
                ..Default::default()
            },
            ..Default::default()
        }
    }

    #[test]
    fn strips_managed_fields_and_last_applied_only() {
        let cases = [
            (
                vec![(LAST_APPLIED, "{}"), ("keep", "me")],
                Some(vec![("keep", "me")]),
            ),
            (vec![(LAST_APPLIED, "{}")], None),
            (vec![("a", "1")], Some(vec![("a", "1")])),
            (vec![], None),
        ];
        for (before, after) in cases {
            let mut cm = config_map(&before);
            strip_metadata(&mut cm);
            assert_eq!(cm.metadata.managed_fields, None);
            let want = after.map(|kv| {
                kv.into_iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect::<BTreeMap<_, _>>()
            });
            assert_eq!(cm.metadata.annotations, want, "{before:?}");
            assert_eq!(cm.metadata.name.as_deref(), Some("cm"));
        }
    }

    #[test]
    fn watch_events_map_to_changes() {
        let cm = config_map(&[]);
        let cases = [
            (
                Ok(Event::Apply(cm.clone())),
                Some(Change::Applied(cm.clone())),
            ),
            (
                Ok(Event::InitApply(cm.clone())),
                Some(Change::Applied(cm.clone())),
            ),
            (
                Ok(Event::Delete(cm.clone())),
                Some(Change::Deleted(cm.clone())),
            ),
            (Ok(Event::InitDone), Some(Change::Relisted)),
            (Ok(Event::Init), None),
            (Err(watcher::Error::NoResourceVersion), None),
        ];
        for (event, want) in cases {
            assert_eq!(to_change::<ConfigMap>(event), want);
        }
    }

    #[tokio::test(start_paused = true)]
    async fn waiting_for_a_cache_that_never_fills_times_out() {
        let (store, _writer) = reflector::store::<ConfigMap>();
        let err = wait_until_ready(&store, Duration::from_secs(5))
            .await
            .unwrap_err();
        assert!(
            matches!(err, ReflectError::Timeout { ref kind, .. } if kind == "ConfigMap"),
            "{err}"
        );
    }

    #[tokio::test]
    async fn a_dropped_writer_is_reported() {
        let (store, writer) = reflector::store::<ConfigMap>();
        drop(writer);
        let err = wait_until_ready(&store, Duration::from_secs(5))
            .await
            .unwrap_err();
        assert!(matches!(err, ReflectError::Stopped { .. }), "{err}");
    }

    #[tokio::test(start_paused = true)]
    async fn a_fixed_cache_is_ready_and_reports_its_objects_once() {
        let (store, mut changes) = fixed(vec![config_map(&[]), {
            let mut other = config_map(&[]);
            other.metadata.name = Some("other".into());
            other
        }]);
        wait_until_ready(&store, Duration::from_secs(1))
            .await
            .unwrap();
        assert_eq!(store.state().len(), 2);
        let mut seen = Vec::new();
        for _ in 0..3 {
            seen.push(match changes.next().await.unwrap() {
                Change::Applied(cm) => cm.metadata.name.unwrap(),
                Change::Relisted => "relisted".into(),
                Change::Deleted(_) => "deleted".into(),
            });
        }
        assert_eq!(seen, ["cm", "other", "relisted"]);
        // Then it stays open and quiet, and the store stays filled.
        let next = tokio::time::timeout(Duration::from_secs(3600), changes.next()).await;
        assert!(next.is_err(), "the stream must neither end nor change");
        assert_eq!(store.state().len(), 2);
    }

    #[test]
    fn rejected_objects_leave_the_cache_or_never_enter_it() {
        let keep = &|cm: &ConfigMap| cm.metadata.name.as_deref() == Some("cm");
        let mut other = config_map(&[]);
        other.metadata.name = Some("other".into());
        let name = |e: Option<Result<Event<ConfigMap>, watcher::Error>>| match e {
            Some(Ok(Event::Apply(o))) => format!("apply {}", o.metadata.name.unwrap()),
            Some(Ok(Event::InitApply(o))) => format!("init {}", o.metadata.name.unwrap()),
            Some(Ok(Event::Delete(o))) => format!("delete {}", o.metadata.name.unwrap()),
            Some(Ok(_)) => "other".into(),
            Some(Err(_)) => "error".into(),
            None => "dropped".into(),
        };
        assert_eq!(
            name(kept(Ok(Event::Apply(config_map(&[]))), keep)),
            "apply cm"
        );
        assert_eq!(
            name(kept(Ok(Event::Apply(other.clone())), keep)),
            "delete other"
        );
        assert_eq!(
            name(kept(Ok(Event::InitApply(other.clone())), keep)),
            "dropped"
        );
        assert_eq!(
            name(kept(Ok(Event::InitApply(config_map(&[]))), keep)),
            "init cm"
        );
        assert_eq!(name(kept(Ok(Event::Delete(other)), keep)), "delete other");
        assert_eq!(name(kept(Ok(Event::InitDone), keep)), "other");
    }
}
