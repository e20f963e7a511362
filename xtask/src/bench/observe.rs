//! Time-stamped observations through watches: when volumes appear and vanish, when claims
//! bind, when pods are scheduled, when capacity objects change.

use std::collections::HashMap;
use std::fmt::Debug;
use std::sync::Arc;
use std::sync::{Mutex, MutexGuard};
use std::time::Instant;

use futures::StreamExt;
use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim, Pod};
use k8s_openapi::api::storage::v1::CSIStorageCapacity;
use kube::api::DynamicObject;
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Resource, ResourceExt};
use serde::de::DeserializeOwned;
use tokio::task::JoinHandle;

use super::objects::TOPOLOGY_KEY;

/// Locks, shrugging off poisoning: a panicked observer only loses its own update.
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// When something was seen: seconds since the scenario's reference instant, and wall time
/// (to compare with the driver's call log).
#[derive(Debug, Clone, Copy)]
pub struct Stamp {
    pub secs: f64,
    pub wall: jiff::Timestamp,
}

/// A watch feeding a state; the task stops when the `Observer` drops.
pub struct Observer<S> {
    state: Arc<Mutex<S>>,
    task: JoinHandle<()>,
}

impl<S> Observer<S> {
    /// A look at the state.
    pub fn with<T>(&self, f: impl FnOnce(&S) -> T) -> T {
        f(&lock(&self.state))
    }
}

impl<S> Drop for Observer<S> {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Watches `api` and calls `on(state, object, deleted, stamp)` for every event.
pub fn observe<K, S>(
    api: Api<K>,
    config: watcher::Config,
    t0: Instant,
    state: S,
    on: fn(&mut S, &K, bool, Stamp),
) -> Observer<S>
where
    K: Resource + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
    S: Send + 'static,
{
    let state = Arc::new(Mutex::new(state));
    let shared = state.clone();
    let task = tokio::spawn(async move {
        let mut events = watcher(api, config).default_backoff().boxed();
        while let Some(event) = events.next().await {
            let stamp = Stamp {
                secs: t0.elapsed().as_secs_f64(),
                wall: jiff::Timestamp::now(),
            };
            let (obj, deleted) = match &event {
                Ok(watcher::Event::Apply(o) | watcher::Event::InitApply(o)) => (o, false),
                Ok(watcher::Event::Delete(o)) => (o, true),
                _ => continue,
            };
            on(&mut lock(&shared), obj, deleted, stamp);
        }
    });
    Observer { state, task }
}

/// Volumes of one driver: first seen and gone.
#[derive(Debug, Default)]
pub struct Volumes {
    pub driver: String,
    pub created: HashMap<String, f64>,
    pub deleted: HashMap<String, f64>,
}

impl Volumes {
    pub fn present(&self) -> usize {
        self.created
            .keys()
            .filter(|k| !self.deleted.contains_key(*k))
            .count()
    }
}

pub fn watch_volumes(api: Api<PersistentVolume>, t0: Instant, driver: &str) -> Observer<Volumes> {
    let state = Volumes {
        driver: driver.into(),
        ..Default::default()
    };
    observe(
        api,
        watcher::Config::default(),
        t0,
        state,
        |s, pv, deleted, at| {
            if super::cluster::pv_driver(pv) != Some(s.driver.as_str()) {
                return;
            }
            let name = pv.name_any();
            if deleted {
                s.deleted.entry(name).or_insert(at.secs);
            } else {
                s.created.entry(name).or_insert(at.secs);
            }
        },
    )
}

/// Claims of a namespace: first seen Bound.
#[derive(Debug, Default)]
pub struct Claims {
    pub bound: HashMap<String, f64>,
}

pub fn watch_claims(api: Api<PersistentVolumeClaim>, t0: Instant) -> Observer<Claims> {
    observe(
        api,
        watcher::Config::default(),
        t0,
        Claims::default(),
        |s, c, deleted, at| {
            let phase = c.status.as_ref().and_then(|st| st.phase.as_deref());
            if !deleted && phase == Some("Bound") {
                s.bound.entry(c.name_any()).or_insert(at.secs);
            }
        },
    )
}

/// Pods of a namespace: first seen with a node.
#[derive(Debug, Default)]
pub struct Pods {
    pub scheduled: HashMap<String, (f64, String)>,
}

pub fn watch_pods(api: Api<Pod>, t0: Instant) -> Observer<Pods> {
    observe(
        api,
        watcher::Config::default(),
        t0,
        Pods::default(),
        |s, p, deleted, at| {
            let node = p.spec.as_ref().and_then(|sp| sp.node_name.clone());
            if let (false, Some(node)) = (deleted, node) {
                s.scheduled.entry(p.name_any()).or_insert((at.secs, node));
            }
        },
    )
}

/// One observed version of a CSIStorageCapacity object.
#[derive(Debug, Clone)]
pub struct CapacitySeen {
    pub at: Stamp,
    pub class: String,
    pub node: String,
    pub bytes: Option<f64>,
}

/// CSIStorageCapacity objects of one driver: current set and every version seen.
#[derive(Debug, Default)]
pub struct Capacities {
    pub current: HashMap<String, CapacitySeen>,
    pub history: Vec<CapacitySeen>,
    /// (seconds, number of objects) after each change of the count.
    pub count_timeline: Vec<(f64, f64)>,
}

impl Capacities {
    /// The current value for (class, node).
    pub fn value(&self, class: &str, node: &str) -> Option<f64> {
        self.current
            .values()
            .find(|c| c.class == class && c.node == node)
            .and_then(|c| c.bytes)
    }
}

pub fn watch_capacities(
    api: Api<CSIStorageCapacity>,
    t0: Instant,
    driver: &str,
) -> Observer<Capacities> {
    let config =
        watcher::Config::default().labels(&format!("csi.storage.k8s.io/drivername={driver}"));
    observe(
        api,
        config,
        t0,
        Capacities::default(),
        |s, c, deleted, at| {
            let name = c.name_any();
            let before = s.current.len();
            if deleted {
                s.current.remove(&name);
            } else {
                let node = c
                    .node_topology
                    .as_ref()
                    .and_then(|t| t.match_labels.as_ref())
                    .and_then(|l| l.get(TOPOLOGY_KEY).cloned())
                    .unwrap_or_default();
                let seen = CapacitySeen {
                    at,
                    class: c.storage_class_name.clone(),
                    node,
                    bytes: c
                        .capacity
                        .as_ref()
                        .and_then(|q| quantity::parse_quantity(&q.0).ok())
                        .map(|b| b as f64),
                };
                s.history.push(seen.clone());
                s.current.insert(name, seen);
            }
            if s.current.len() != before {
                s.count_timeline.push((at.secs, s.current.len() as f64));
            }
        },
    )
}

/// VolumeSnapshots of a namespace: first seen with `status.readyToUse: true`.
#[derive(Debug, Default)]
pub struct Snapshots {
    pub ready: HashMap<String, Stamp>,
}

pub fn watch_snapshots(api: Api<DynamicObject>, t0: Instant) -> Observer<Snapshots> {
    observe(
        api,
        watcher::Config::default(),
        t0,
        Snapshots::default(),
        |s, snap, deleted, at| {
            if !deleted && snap.data["status"]["readyToUse"] == true {
                s.ready.entry(snap.name_any()).or_insert(at);
            }
        },
    )
}

/// How many ProvisioningFailed events the namespace has whose message passes `keep`, counting
/// each event's repeats (`count`) as the API server aggregated them.
pub async fn provisioning_failed(
    client: &kube::Client,
    namespace: &str,
    keep: impl Fn(&str) -> bool,
) -> Result<f64, kube::Error> {
    let events: Api<k8s_openapi::api::core::v1::Event> = Api::namespaced(client.clone(), namespace);
    let params = kube::api::ListParams::default().fields("reason=ProvisioningFailed");
    Ok(events
        .list(&params)
        .await?
        .items
        .iter()
        .filter(|e| keep(e.message.as_deref().unwrap_or_default()))
        .map(|e| e.count.unwrap_or(1).max(1))
        .sum::<i32>()
        .into())
}
