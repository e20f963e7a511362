//! Running the controllers once this replica leads: start the caches, feed every change to the
//! right work queue, wait for the caches to sync, then run the workers until cancelled.

use std::sync::Arc;
use std::time::Duration;

use controller_kit::events::{DeliveryConfig, EventRecorder, normal_backlog};
use controller_kit::reflect::Change;
use futures::StreamExt;
use futures::stream::BoxStream;
use tokio_util::sync::CancellationToken;

use crate::base::Base;
use crate::caches::{CacheOptions, Caches, Changes};
use crate::capacity_controller::{self as cap, CapacityChanges, CapacityController};
use crate::claims::{ClaimsConfig, ClaimsController};
use crate::context::Context;
use crate::stopped::AppError;
use crate::supervise::Tasks;
use crate::volumes::VolumesController;

/// How long to wait for the first list of every cache before giving up (upstream blocks; a
/// bounded wait with a clear error is more useful than a silent hang).
const CACHE_SYNC_TIMEOUT: Duration = Duration::from_secs(300);
/// How long the start-up probe waits for the API server to finish a streaming list.
const STREAMING_PROBE_WAIT: Duration = Duration::from_secs(5);
/// Upstream's informer resync for claims and volumes.
const RESYNC_PERIOD: Duration = Duration::from_secs(15 * 60);

/// Starts the caches and runs every controller until `cancel`.
pub(crate) async fn run_controllers(
    base: Arc<Base>,
    cancel: CancellationToken,
) -> Result<(), AppError> {
    let opts = &base.opts;
    let namespace = opts.env.namespace.clone().unwrap_or_default();
    let capacity_target = opts.enable_capacity.then(|| {
        let template = capacity::published::ObjectTemplate {
            namespace: namespace.clone(),
            driver: base.driver.name.clone(),
            managed_by: managed_by(&base),
            owner: None,
        };
        (namespace.clone(), template.label_selector())
    });
    let peers = (opts.enable_capacity && base.node.is_some()).then(|| {
        let selector = format!("{}={}", capacity::DRIVER_NAME_LABEL, base.driver.name);
        (namespace.clone(), selector)
    });
    // Anything in our namespace we do not manage (`!=` also matches objects without the label).
    let foreign = (opts.enable_capacity && opts.capacity_foreign_check && base.node.is_none())
        .then(|| {
            let selector = format!("{}!={}", capacity::MANAGED_BY_LABEL, managed_by(&base));
            (namespace.clone(), selector)
        });
    let fixed_node = base
        .node
        .as_ref()
        .map(|n| (n.csi_node(&base.driver.name), n.node()));
    // Paged lists of 10,000 claims cost 20 requests each at QPS 5; a streaming list costs one.
    let initial_list =
        controller_kit::reflect::probe_initial_list(&base.client, STREAMING_PROBE_WAIT).await;
    let (caches, changes) = Caches::start(
        &base.client,
        &base.capacity_client,
        &CacheOptions {
            driver: base.driver.name.clone(),
            watch_attachments: base.driver.capabilities.publish_unpublish_volume,
            watch_nodes: opts.enable_capacity
                || (base.driver.capabilities.volume_accessibility_constraints
                    && opts.feature_gates.enabled(cli::Feature::Topology)),
            capacities: capacity_target,
            initial_list,
            fixed_node,
            peers,
            foreign,
        },
    );
    let mut tasks = Tasks::default();
    // Events ride the background lane of the `--kube-api-*` budget: at most one burst of
    // Normal ones waits for it (see `events::normal_backlog`).
    let delivery = DeliveryConfig {
        normal_backlog: normal_backlog(
            crate::app::limits(opts.kube_api_qps as f32, opts.kube_api_burst)
                .effective()
                .map(|(_, burst)| burst),
        ),
        ..DeliveryConfig::default()
    };
    let (recorder, deliver) = EventRecorder::with_config(
        base.background_client.clone(),
        event_source(&base.driver.name),
        delivery.clone(),
    );
    tasks.spawn("event delivery", deliver);
    let (populator_recorder, deliver) = EventRecorder::with_config(
        base.background_client.clone(),
        "external-provisioner".to_string(),
        delivery,
    );
    tasks.spawn("populator event delivery", deliver);

    let capacity = if opts.enable_capacity {
        Some(capacity_controller(&base, &caches, recorder.clone()).await?)
    } else {
        None
    };
    let ctx = Context {
        client: base.client.clone(),
        background_client: base.background_client.clone(),
        driver: base.driver.clone(),
        identity: base.identity.clone(),
        node: base.node.clone(),
        caches: caches.clone(),
        recorder,
        populator_recorder,
        metrics: base.controller_metrics.clone(),
        capacity: capacity.as_ref().map(|(_, handle)| handle.clone()),
        volume_attributes_class: base.volume_attributes_class,
    };
    let record = write_ahead_record(&base, &mut tasks, &cancel);
    // Shared: the claims write entries, the volumes settle them before DeleteVolume.
    let entries = Arc::new(crate::claims::entries::Entries::new(
        record.as_ref().map(|r| r.writer.clone()),
    ));
    let claims = ClaimsController::new(
        ctx.clone(),
        ClaimsConfig::from_options(opts),
        entries.clone(),
        &base.queue_metrics,
    );
    let retry = (opts.retry_interval_start, opts.retry_interval_max);
    let volumes = VolumesController::new(ctx.clone(), retry, entries, &base.queue_metrics);
    let Changes {
        claims: claim_changes,
        volumes: volume_changes,
        classes,
        csi_nodes,
        nodes,
        attachments,
        capacities,
        peers,
        foreign,
    } = changes;
    if let Some(stream) = peers {
        tasks.spawn(
            "capacity peers recheck",
            recheck_on_peer_changes(stream, claims.clone()),
        );
    }
    tasks.spawn(
        "claim dispatch",
        dispatch_claims(claim_changes, claims.clone()),
    );
    tasks.spawn(
        "volume dispatch",
        dispatch_volumes(volume_changes, volumes.clone(), claims.clone()),
    );
    if let Some(stream) = attachments {
        tasks.spawn(
            "VolumeAttachment dispatch",
            dispatch_attachments(stream, volumes.clone()),
        );
    }
    match (capacity, capacities) {
        (Some((controller, handle)), Some(capacities)) => {
            tasks.spawn(
                "waiting-claims recheck",
                recheck_waiting_claims(handle, claims.clone(), cancel.clone()),
            );
            tasks.spawn(
                "capacity controller",
                controller.run(
                    CapacityChanges {
                        classes,
                        csi_nodes,
                        nodes,
                        capacities,
                        foreign,
                    },
                    cancel.clone(),
                ),
            );
        }
        _ => {
            tasks.spawn("StorageClass cache", drain(classes));
            tasks.spawn("CSINode cache", drain(csi_nodes));
            tasks.spawn("Node cache", drain(nodes));
        }
    }
    // A termination signal ends the wait: a pod whose caches cannot sync (the API server
    // down, a verb missing from its RBAC) must still stop when asked.
    tokio::select! {
        ready = caches.wait_until_ready(CACHE_SYNC_TIMEOUT) => ready?,
        () = cancel.cancelled() => return Ok(()),
    }
    tracing::info!(driver = %base.driver.name, "Caches synced; starting controllers");
    if let Some(record) = &record {
        // What an earlier instance (or leader) recorded: each claim's sync goes on from it.
        match crate::write_ahead::read_entries(&record.api, &record.lease).await {
            Ok(found) => claims.found_entries(found),
            Err(e) => {
                tracing::error!(lease = %record.lease, err = %e, "Cannot read the write-ahead record; claims recorded by an earlier instance are not checked until the next start");
            }
        }
    }
    claims.enqueue_all();
    volumes.enqueue_all();
    tasks.spawn(
        "resync",
        resync(claims.clone(), volumes.clone(), cancel.clone()),
    );
    if let (Some(node), Some(peers)) = (&base.node, &caches.peers) {
        tasks.spawn(
            "capacity of deleted nodes",
            crate::orphans::run(
                base.capacity_client.clone(),
                namespace.clone(),
                peers.clone(),
                node.managed_by.clone(),
                opts.capacity_poll_interval,
                cancel.clone(),
            ),
        );
    }
    if base.driver.capabilities.create_delete_snapshot {
        tasks.spawn(
            "snapshot watch",
            crate::snapshot_watch::run(
                base.client.clone(),
                caches.snapshots.clone(),
                claims.clone(),
                cancel.clone(),
            ),
        );
        tasks.spawn(
            "snapshot content watch",
            crate::snapshot_watch::run_contents(
                base.client.clone(),
                caches.snapshots.clone(),
                cancel.clone(),
            ),
        );
    }
    if let Some(every) = opts.snapshot_orphan_sweep_interval
        && base.driver.capabilities.create_delete_snapshot
    {
        let cache = base.node.is_none().then(|| caches.claims.clone());
        tasks.spawn(
            "snapshot orphan sweep",
            crate::snapshot_sweep::run(base.client.clone(), cache, every, cancel.clone()),
        );
    }
    tasks.spawn("claims", claims.run(opts.worker_threads, cancel.clone()));
    tasks.spawn("volumes", volumes.run(opts.worker_threads, cancel.clone()));
    let result = tasks.until_cancelled(&cancel).await;
    if result.is_ok() {
        // Shutting down: the workers take no new keys; let the calls they are in finish. Every
        // CSI call ends within `--timeout`, and the write after it needs a moment more.
        let bound = opts.timeout + DRAIN_EXTRA;
        tasks.drain(&["claims", "volumes"], bound).await;
    }
    tasks.set.abort_all();
    result
}

/// How long past `--timeout` a shutdown waits for the workers' last writes.
const DRAIN_EXTRA: Duration = Duration::from_secs(5);

/// The owner `--capacity-ownerref-level` names for our CSIStorageCapacity objects, from
/// `POD_NAME` in `NAMESPACE`.
pub(crate) async fn capacity_owner(
    client: &kube::Client,
    opts: &cli::Options,
) -> Result<Option<k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference>, AppError> {
    let namespace = opts.env.namespace.clone().unwrap_or_default();
    let pod = opts.env.pod_name.clone().unwrap_or_default();
    cap::lookup_owner(client, &namespace, &pod, opts.capacity_ownerref_level)
        .await
        .map_err(|source| AppError::Owner {
            pod,
            namespace,
            source,
        })
}

async fn capacity_controller(
    base: &Base,
    caches: &Caches,
    recorder: EventRecorder,
) -> Result<(CapacityController, cap::RefreshHandle), AppError> {
    let opts = &base.opts;
    let namespace = opts.env.namespace.clone().unwrap_or_default();
    let owner = base.capacity_owner.clone();
    let config = cap::CapacityConfig {
        driver_name: base.driver.name.clone(),
        namespace,
        managed_by: managed_by(base),
        owner,
        poll_interval: opts.capacity_poll_interval,
        workers: opts.capacity_threads,
        include_immediate: opts.capacity_for_immediate_binding,
        retry_interval_start: opts.retry_interval_start,
        retry_interval_max: opts.retry_interval_max,
        timeout: opts.timeout,
        stale_after: opts.capacity_stale_after,
        stale_zero: opts.capacity_stale_action == cli::StaleAction::Zero,
        driver_grace: opts.capacity_driver_grace,
        reservations: opts.capacity_reservations,
        node_deployment: opts.node_deployment,
    };
    Ok(CapacityController::new(
        config,
        base.capacity_client.clone(),
        base.driver.client.clone(),
        caches.clone(),
        base.capacity_metrics.clone(),
        &base.queue_metrics,
        recorder,
    ))
}

async fn dispatch_claims(
    mut stream: BoxStream<'static, Change<k8s_openapi::api::core::v1::PersistentVolumeClaim>>,
    claims: ClaimsController,
) {
    while let Some(change) = stream.next().await {
        match change {
            Change::Applied(c) => claims.enqueue(&c),
            Change::Deleted(c) => {
                claims.forget(&c);
                claims.enqueue(&c);
            }
            Change::Relisted => claims.enqueue_all(),
        }
    }
}

async fn dispatch_volumes(
    mut stream: BoxStream<'static, Change<k8s_openapi::api::core::v1::PersistentVolume>>,
    volumes: VolumesController,
    claims: ClaimsController,
) {
    while let Some(change) = stream.next().await {
        match change {
            Change::Applied(pv) => {
                volumes.enqueue(&pv);
                claims.enqueue_for_volume(&pv);
            }
            Change::Deleted(pv) => {
                volumes.forget(&pv);
                claims.enqueue_for_volume(&pv);
            }
            Change::Relisted => volumes.enqueue_all(),
        }
    }
}

/// A detached VolumeAttachment may unblock the deletion of its PV.
async fn dispatch_attachments(
    mut stream: BoxStream<'static, Change<k8s_openapi::api::storage::v1::VolumeAttachment>>,
    volumes: VolumesController,
) {
    while let Some(change) = stream.next().await {
        if let Change::Deleted(va) = change
            && let Some(pv) = va.spec.source.persistent_volume_name.as_deref()
        {
            volumes.enqueue_name(pv);
        }
    }
}

/// Keeps a cache filling when no controller consumes its changes.
async fn drain<K: Send + 'static>(mut stream: BoxStream<'static, Change<K>>) {
    while stream.next().await.is_some() {}
}

/// Published capacity changed: explanations on waiting claims may change too. Debounced, since
/// one poll can change many objects.
async fn recheck_waiting_claims(
    handle: cap::RefreshHandle,
    claims: ClaimsController,
    cancel: CancellationToken,
) {
    let mut changes = handle.subscribe();
    loop {
        tokio::select! {
            _ = cancel.cancelled() => return,
            changed = changes.changed() => if changed.is_err() { return },
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
        changes.borrow_and_update();
        claims.enqueue_waiting();
    }
}

/// Distributed provisioning: what the instances published changed, so who takes an unclaimed
/// claim, and whether a waiting one fits anywhere, may have changed too. Debounced: one poll
/// changes every instance's objects within moments.
async fn recheck_on_peer_changes(
    mut stream: BoxStream<'static, Change<k8s_openapi::api::storage::v1::CSIStorageCapacity>>,
    claims: ClaimsController,
) {
    while stream.next().await.is_some() {
        // One recheck per burst, but the stream is polled all along: the peers store (which the
        // orphan sweep and the immediate-binding ranking read) fills only while it is.
        let until = tokio::time::Instant::now() + Duration::from_secs(1);
        while let Ok(Some(_)) = tokio::time::timeout_at(until, stream.next()).await {}
        claims.enqueue_waiting();
    }
}

async fn resync(claims: ClaimsController, volumes: VolumesController, cancel: CancellationToken) {
    let mut tick = tokio::time::interval(RESYNC_PERIOD);
    tick.tick().await;
    loop {
        tokio::select! {
            _ = cancel.cancelled() => return,
            _ = tick.tick() => {
                claims.enqueue_all();
                volumes.enqueue_all();
            }
        }
    }
}

/// `managed-by` of our CSIStorageCapacity objects: one central instance, or this node's.
fn managed_by(base: &Base) -> String {
    match &base.node {
        Some(n) => n.managed_by.clone(),
        None => capacity::MANAGED_BY_CENTRAL.to_string(),
    }
}

/// Upstream's library names its event source `<provisioner>_<hostname>_<uuid>`.
fn event_source(driver: &str) -> String {
    let host = hostname::get()
        .map(|h| h.to_string_lossy().into_owned())
        .unwrap_or_default();
    format!("{driver}_{host}_{}", uuid::Uuid::new_v4())
}

/// The write-ahead record's writer, when it is switched on: one record per driver, or per node
/// with `--node-deployment`.
struct Record {
    writer: crate::write_ahead::WriteAhead,
    api: kube::Api<k8s_openapi::api::coordination::v1::Lease>,
    lease: String,
}

/// Starts the record's writer in the namespace of the leader-election Lease, whose Role the
/// sidecar's RBAC already has (get, create, update on Leases).
fn write_ahead_record(
    base: &Base,
    tasks: &mut Tasks,
    cancel: &CancellationToken,
) -> Option<Record> {
    if !crate::write_ahead::switched_on() {
        return None;
    }
    let opts = &base.opts;
    let namespace =
        leader_election::namespace_from_environment(opts.leader_election_namespace.as_deref());
    // Reads wait in line as any request; the writer takes its turn before it plans a write.
    let api = kube::Api::namespaced(base.client.clone(), &namespace);
    let (prepaid, budget) = base.prepaid.clone();
    let node = base.node.as_ref().map(|n| n.name.as_str());
    let lease = provisioning::record::lease_name(&base.driver.name, node);
    let limits = provisioning::record::Limits {
        entries: opts.worker_threads.max(1),
        bytes: provisioning::record::MAX_BYTES,
    };
    tracing::info!(%namespace, %lease, entries = limits.entries, "Claims are held by the write-ahead record instead of a finalizer");
    let (writer, task) = crate::write_ahead::start(
        kube::Api::namespaced(prepaid, &namespace),
        budget,
        lease.clone(),
        base.identity.clone(),
        limits,
        cancel.clone(),
    );
    tasks.spawn("write-ahead record", async move {
        let _ = task.await;
    });
    Some(Record { writer, api, lease })
}
