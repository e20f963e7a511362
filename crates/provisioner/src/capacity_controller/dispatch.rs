//! Reads the cache change streams (which also keeps the caches filling) and turns changes into
//! work: a debounced resync for class and topology changes, index updates and deletions or
//! re-creations for changes of our objects. Our own writes coming back never cause a
//! GetCapacity.

use std::sync::Arc;

use controller_kit::reflect::Change;
use futures::StreamExt;
use futures::stream::{BoxStream, select_all};
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::api::storage::v1::{CSINode, CSIStorageCapacity, StorageClass};
use kube::api::PartialObjectMeta;
use kube::runtime::reflector::ObjectRef;
use tokio::sync::oneshot;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use capacity::published::Published;

use super::{CapacityChanges, DEBOUNCE, Item, Shared};
use capacity::grace::node_changed;
use capacity::resync::{class_matters, node_segment};

enum Event {
    Class(Change<StorageClass>),
    CsiNode(Change<CSINode>),
    Node(Change<PartialObjectMeta<Node>>),
    Capacity(Change<CSIStorageCapacity>),
    /// An object in our namespace we do not manage.
    Foreign(Change<CSIStorageCapacity>),
}

/// Runs until `cancel` or until every stream ends. `synced` fires once every stream finished
/// its first list: the caches are then complete (the reflector fills a cache before it passes
/// the change on).
///
/// Waiting on the stores instead (`Store::wait_until_ready`) is not safe here: kube-runtime
/// 5.0 wakes only the last of several concurrent waiters of one store, and the start-up code
/// waits on the same stores.
pub(super) async fn run(
    shared: Arc<Shared>,
    changes: CapacityChanges,
    cancel: CancellationToken,
    synced: oneshot::Sender<()>,
) {
    let mut streams: Vec<BoxStream<'static, Event>> = vec![
        changes.classes.map(Event::Class).boxed(),
        changes.csi_nodes.map(Event::CsiNode).boxed(),
        changes.nodes.map(Event::Node).boxed(),
        changes.capacities.map(Event::Capacity).boxed(),
    ];
    // Without a foreign stream there is no list to wait for.
    let mut listed = [false, false, false, false, changes.foreign.is_none()];
    if let Some(foreign) = changes.foreign {
        streams.push(foreign.map(Event::Foreign).boxed());
    }
    let mut events = select_all(streams);
    let mut due: Option<Instant> = None;
    let mut synced = Some(synced);
    loop {
        let debounce = async {
            match due {
                Some(at) => tokio::time::sleep_until(at).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            _ = cancel.cancelled() => return,
            () = debounce => {
                due = None;
                shared.topology.add(());
            }
            event = events.next() => {
                let Some(event) = event else { return };
                if let Some(i) = event.first_list_done() {
                    listed[i] = true;
                    if listed.iter().all(|l| *l) && let Some(tx) = synced.take() {
                        let _ = tx.send(());
                    }
                }
                let ours = matches!(event, Event::Capacity(_));
                let resync = shared.react(event);
                // The index explanations read changed: recheck waiting claims once it shows
                // the value (the bump after our own write can come before its echo).
                if ours {
                    shared.bump();
                }
                if resync && due.is_none() {
                    due = Some(Instant::now() + DEBOUNCE);
                }
            }
        }
    }
}

impl Event {
    /// Which stream finished a list, if this change says so.
    fn first_list_done(&self) -> Option<usize> {
        match self {
            Event::Class(Change::Relisted) => Some(0),
            Event::CsiNode(Change::Relisted) => Some(1),
            Event::Node(Change::Relisted) => Some(2),
            Event::Capacity(Change::Relisted) => Some(3),
            Event::Foreign(Change::Relisted) => Some(4),
            _ => None,
        }
    }
}

impl Shared {
    /// Applies one change; returns whether the desired set may have changed (resync).
    fn react(&self, event: Event) -> bool {
        let mut state = self.state.lock();
        // Until the first resync, which reads the caches whole, changes tell nothing new.
        if !state.started {
            return false;
        }
        let driver = &self.config.driver_name;
        match event {
            Event::Foreign(_) => {
                drop(state);
                self.check_conflicts();
                false
            }
            Event::Class(Change::Applied(sc)) => {
                class_matters(&sc, driver, self.config.include_immediate, &state.classes)
            }
            Event::Class(Change::Deleted(sc)) => state
                .classes
                .contains_key(sc.metadata.name.as_deref().unwrap_or_default()),
            Event::Node(Change::Applied(node)) => {
                let name = node.metadata.name.clone().unwrap_or_default();
                let csi_node = self.caches.csi_nodes.get(&ObjectRef::new(&name));
                let now = node_segment(csi_node.as_deref(), Some(&node.metadata), driver);
                node_changed(
                    &name,
                    now.as_ref(),
                    state.node_segments.get(&name),
                    &state.lost,
                )
            }
            Event::CsiNode(Change::Applied(cn)) => {
                let name = cn.metadata.name.clone().unwrap_or_default();
                let node = self.caches.nodes.get(&ObjectRef::new(&name));
                let now = node_segment(Some(&cn), node.as_ref().map(|n| &n.metadata), driver);
                node_changed(
                    &name,
                    now.as_ref(),
                    state.node_segments.get(&name),
                    &state.lost,
                )
            }
            Event::Node(Change::Deleted(node)) => state
                .node_segments
                .contains_key(node.metadata.name.as_deref().unwrap_or_default()),
            Event::CsiNode(Change::Deleted(cn)) => state
                .node_segments
                .contains_key(cn.metadata.name.as_deref().unwrap_or_default()),
            Event::Capacity(Change::Applied(obj)) => {
                state.index.apply(&obj);
                let published = Published::from_object(&obj);
                // A new object may be obsolete, or make itself or another one a duplicate.
                let doomed = match &published.key {
                    Some(key) if state.desired.contains(key) => state.index.duplicates(key),
                    _ if state.index.is_doomed(&published.name, &state.desired) => {
                        vec![published.name]
                    }
                    _ => Vec::new(),
                };
                for name in doomed {
                    self.queue.add_urgent(Item::Delete(name));
                }
                false
            }
            Event::Capacity(Change::Deleted(obj)) => {
                let published = Published::from_object(&obj);
                state.index.remove(&published.name);
                if let Some(key) = &published.key {
                    // Someone deleted (or unlabelled) a needed object: publish it again.
                    let needed = state.desired.contains(key)
                        && !state.index.has_live(key)
                        && !self.pending_for(key);
                    if needed {
                        self.queue.add_urgent(Item::Refresh(key.clone()));
                    }
                }
                false
            }
            Event::Capacity(Change::Relisted) => {
                if let Some(store) = &self.caches.capacities {
                    state
                        .index
                        .rebuild(store.state().iter().map(|o| o.as_ref()));
                }
                true
            }
            Event::Class(Change::Relisted)
            | Event::CsiNode(Change::Relisted)
            | Event::Node(Change::Relisted) => true,
        }
    }
}
