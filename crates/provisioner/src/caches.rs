//! The informer caches the controllers read. Each holds only what the controllers use:
//! managedFields and the kubectl last-applied annotation are always dropped, Nodes are watched
//! as metadata only, CSIStorageCapacities only in our namespace with our labels, and claims
//! and PVs are kept as JSON bytes.
//!
//! The kinds we write (claims, PVs, CSIStorageCapacities, and VolumeSnapshots in
//! [`SnapshotCaches`]) are read through [`Fresh`]: our own writes show until the watch
//! delivers them, the one read-your-writes rule
//! of every controller (`controller_kit::fresh`). Each change stream confirms pending writes as
//! it passes.

use std::sync::Arc;
use std::time::Duration;

use controller_kit::fresh::Fresh;
use controller_kit::reflect::{
    Change, InitialList, ReflectError, compact_informer_keeping, fixed, informer, wait_until_ready,
};
use futures::StreamExt;
use futures::stream::BoxStream;
use k8s_openapi::api::core::v1::{Node, PersistentVolume, PersistentVolumeClaim};
use k8s_openapi::api::storage::v1::{CSINode, CSIStorageCapacity, StorageClass, VolumeAttachment};
use kube::api::PartialObjectMeta;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::{Api, Client};
use serde::de::DeserializeOwned;

use crate::snapshot_caches::SnapshotCaches;
use crate::unsettled::Unsettled;

/// Read-only views of the cluster, shared by all controllers.
#[derive(Clone)]
pub struct Caches {
    pub claims: Fresh<PersistentVolumeClaim>,
    /// The claims not yet Bound, so walks for claims still in play skip the Bound ones.
    pub unsettled: Unsettled,
    pub volumes: Fresh<PersistentVolume>,
    pub classes: Store<StorageClass>,
    pub csi_nodes: Store<CSINode>,
    pub nodes: Store<PartialObjectMeta<Node>>,
    /// Only when the driver publishes volumes (PUBLISH_UNPUBLISH_VOLUME), as upstream.
    pub attachments: Option<Store<VolumeAttachment>>,
    /// Only with `--enable-capacity`.
    pub capacities: Option<Fresh<CSIStorageCapacity>>,
    /// Distributed provisioning with `--enable-capacity`: every instance's objects for our
    /// driver, from which the instances agree who claims an Immediate claim.
    pub peers: Option<Store<CSIStorageCapacity>>,
    /// Central `--enable-capacity`: objects in our namespace we do not manage, checked for
    /// overlaps with ours (`capacity::conflicts`).
    pub foreign: Option<Store<CSIStorageCapacity>>,
    /// VolumeSnapshots and their contents, filled late by `snapshot_watch` when it can run.
    pub snapshots: SnapshotCaches,
}

/// The change streams that feed the work queues. Each must be polled: a cache only fills
/// while its stream runs.
pub struct Changes {
    pub claims: BoxStream<'static, Change<PersistentVolumeClaim>>,
    pub volumes: BoxStream<'static, Change<PersistentVolume>>,
    pub classes: BoxStream<'static, Change<StorageClass>>,
    pub csi_nodes: BoxStream<'static, Change<CSINode>>,
    pub nodes: BoxStream<'static, Change<PartialObjectMeta<Node>>>,
    pub attachments: Option<BoxStream<'static, Change<VolumeAttachment>>>,
    pub capacities: Option<BoxStream<'static, Change<CSIStorageCapacity>>>,
    pub peers: Option<BoxStream<'static, Change<CSIStorageCapacity>>>,
    pub foreign: Option<BoxStream<'static, Change<CSIStorageCapacity>>>,
}

/// What to watch beyond the always-needed PVCs, PVs and StorageClasses.
pub struct CacheOptions {
    /// Our driver's name (distributed provisioning keeps only its own held clone sources).
    pub driver: String,
    /// Whether to watch CSINodes and Nodes (central mode): only topology and capacity tracking
    /// read them, and upstream starts their informers only for those.
    pub watch_nodes: bool,
    pub watch_attachments: bool,
    /// Namespace and label selector of our CSIStorageCapacity objects.
    pub capacities: Option<(String, String)>,
    /// Streaming or paged first lists ([`controller_kit::reflect::probe_initial_list`]).
    pub initial_list: InitialList,
    /// Distributed provisioning: this node's CSINode and Node, fixed instead of watched.
    pub fixed_node: Option<(CSINode, PartialObjectMeta<Node>)>,
    /// Distributed provisioning: namespace and label selector of every instance's objects.
    pub peers: Option<(String, String)>,
    /// Central capacity tracking: namespace and label selector of objects not managed by us.
    pub foreign: Option<(String, String)>,
}

impl Caches {
    /// Starts the informers. `capacity_client` (its own API budget) watches capacity objects.
    pub fn start(
        client: &Client,
        capacity_client: &Client,
        opts: &CacheOptions,
    ) -> (Caches, Changes) {
        let cfg = || opts.initial_list.watcher_config();
        // Distributed provisioning: only this node's claims and volumes (and unclaimed claims).
        let (keep_claim, keep_volume) = match &opts.fixed_node {
            Some((_, node)) => {
                let name = node.metadata.name.clone().unwrap_or_default();
                // `None`: the driver reported no topology (see `NodeDeployment::node`).
                let topology = node.metadata.labels.clone();
                let volume_node = name.clone();
                let driver = opts.driver.clone();
                let claim = move |c: &PersistentVolumeClaim| {
                    provisioning::distributed::concerns_node(c, &name, &driver)
                };
                let volume =
                    move |pv: &PersistentVolume| on_node(pv, topology.as_ref(), &volume_node);
                (Box::new(claim) as Keep<_>, Box::new(volume) as Keep<_>)
            }
            None => (keep_all(), keep_all()),
        };
        // Claims and PVs are the most numerous objects and are read one at a time: kept as
        // JSON, a fifth of their decoded size (`controller_kit::compact`).
        let unsettled = Unsettled::default();
        let (claims, claim_changes) = {
            let (store, changes) =
                compact_informer_keeping(Api::all(client.clone()), cfg(), |_| {}, keep_claim);
            let (follow, cached) = (unsettled.clone(), store.clone());
            let changes = changes
                .inspect(move |change| {
                    follow.observe(change);
                    if matches!(change, Change::Relisted) {
                        let keys = cached.references().into_iter();
                        follow.retain(
                            &keys
                                .map(|r| (r.namespace.unwrap_or_default(), r.name))
                                .collect(),
                        );
                    }
                })
                .boxed();
            confirming(Fresh::compact(store), changes)
        };
        let (volumes, volume_changes) = {
            let (store, changes) =
                compact_informer_keeping(Api::all(client.clone()), cfg(), |_| {}, keep_volume);
            confirming(Fresh::compact(store), changes)
        };
        let (classes, class_changes) = informer(Api::all(client.clone()), cfg(), |_| {});
        let ((csi_nodes, csi_node_changes), (nodes, node_changes)) = match &opts.fixed_node {
            Some((csi_node, node)) => (fixed(vec![csi_node.clone()]), fixed(vec![node.clone()])),
            None if !opts.watch_nodes => (fixed(Vec::new()), fixed(Vec::new())),
            None => (
                informer(Api::all(client.clone()), cfg(), |_| {}),
                informer(
                    Api::<PartialObjectMeta<Node>>::all(client.clone()),
                    cfg(),
                    strip_node,
                ),
            ),
        };
        let (attachments, attachment_changes) = if opts.watch_attachments {
            let (s, c) = informer(Api::all(client.clone()), cfg(), |_| {});
            (Some(s), Some(c))
        } else {
            (None, None)
        };
        let (capacities, capacity_changes) = match &opts.capacities {
            Some((namespace, selector)) => {
                // A consistent read (not the watch cache's possibly older view): adopting our
                // objects after a restart must see every one, or it would create a duplicate.
                // The set is small, so paging costs little.
                let (s, c) = fresh(informer(
                    Api::namespaced(capacity_client.clone(), namespace),
                    kube::runtime::watcher::Config::default().labels(selector),
                    |_| {},
                ));
                (Some(s), Some(c))
            }
            None => (None, None),
        };
        let (peers, peer_changes) = capacity_objects(capacity_client, opts.peers.as_ref());
        let (foreign, foreign_changes) = capacity_objects(capacity_client, opts.foreign.as_ref());
        (
            Caches {
                claims,
                unsettled,
                volumes,
                classes,
                csi_nodes,
                nodes,
                attachments,
                capacities,
                peers,
                foreign,
                snapshots: SnapshotCaches::default(),
            },
            Changes {
                claims: claim_changes,
                volumes: volume_changes,
                classes: class_changes,
                csi_nodes: csi_node_changes,
                nodes: node_changes,
                attachments: attachment_changes,
                capacities: capacity_changes,
                peers: peer_changes,
                foreign: foreign_changes,
            },
        )
    }

    /// The claims not yet Bound, as we last know them, read one at a time.
    pub fn unsettled_claims(&self) -> Vec<Arc<PersistentVolumeClaim>> {
        self.unsettled
            .keys()
            .into_iter()
            .filter_map(|(namespace, name)| {
                self.claims.get(&ObjectRef::new(&name).within(&namespace))
            })
            .collect()
    }

    /// Waits for every cache's first list, like client-go's WaitForCacheSync.
    pub async fn wait_until_ready(&self, timeout: Duration) -> Result<(), ReflectError> {
        self.claims.wait_until_ready(timeout).await?;
        self.volumes.wait_until_ready(timeout).await?;
        wait_until_ready(&self.classes, timeout).await?;
        wait_until_ready(&self.csi_nodes, timeout).await?;
        wait_until_ready(&self.nodes, timeout).await?;
        if let Some(s) = &self.attachments {
            wait_until_ready(s, timeout).await?;
        }
        if let Some(s) = &self.capacities {
            s.wait_until_ready(timeout).await?;
        }
        if let Some(s) = &self.peers {
            wait_until_ready(s, timeout).await?;
        }
        if let Some(s) = &self.foreign {
            wait_until_ready(s, timeout).await?;
        }
        Ok(())
    }
}

type Watched<K> = (Option<Store<K>>, Option<BoxStream<'static, Change<K>>>);

/// A cache of the CSIStorageCapacity objects of `target` (namespace, label selector), if any.
fn capacity_objects(
    capacity_client: &Client,
    target: Option<&(String, String)>,
) -> Watched<CSIStorageCapacity> {
    match target {
        Some((namespace, selector)) => {
            let (s, c) = informer(
                Api::namespaced(capacity_client.clone(), namespace),
                kube::runtime::watcher::Config::default().labels(selector),
                |_| {},
            );
            (Some(s), Some(c))
        }
        None => (None, None),
    }
}

/// Reads a cache through our pending writes, confirming them as its changes pass.
fn fresh<K>(
    (store, changes): (Store<K>, BoxStream<'static, Change<K>>),
) -> (Fresh<K>, BoxStream<'static, Change<K>>)
where
    K: kube::Resource<DynamicType = ()> + Clone + DeserializeOwned + Send + Sync + 'static,
{
    confirming(Fresh::new(store), changes)
}

/// `changes`, confirming `fresh`'s pending writes as they pass.
fn confirming<K>(
    fresh: Fresh<K>,
    changes: BoxStream<'static, Change<K>>,
) -> (Fresh<K>, BoxStream<'static, Change<K>>)
where
    K: kube::Resource<DynamicType = ()> + Clone + DeserializeOwned + Send + Sync + 'static,
{
    let confirm = fresh.clone();
    let changes = changes
        .inspect(move |change| confirm.observe(change))
        .boxed();
    (fresh, changes)
}

/// Which objects a cache keeps.
type Keep<K> = Box<dyn Fn(&K) -> bool + Send + Sync>;

fn keep_all<K>() -> Keep<K> {
    Box::new(|_| true)
}

/// A volume this node can reach (node affinity is immutable, so this never changes).
fn on_node(
    pv: &PersistentVolume,
    topology: Option<&std::collections::BTreeMap<String, String>>,
    node_name: &str,
) -> bool {
    let affinity = pv.spec.as_ref().and_then(|s| s.node_affinity.as_ref());
    provisioning::distributed::volume_is_accessible(affinity, topology, node_name)
}

/// Node annotations (often kilobytes per node) are never read; only labels are.
fn strip_node(node: &mut PartialObjectMeta<Node>) {
    node.metadata.annotations = None;
    node.metadata.owner_references = None;
}
