//! Start-up and wiring, in upstream's order: flags → API clients → driver (probe, name,
//! capabilities) → HTTP endpoint → leader election → caches and controllers.

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use futures::stream::BoxStream;
use kube::Client;
use leader_election::{LeaderElectionConfig, LeaderElector, Outcome};
use prometheus_client::registry::Registry;
use runtime::client::{ClientLimits, RequestMetrics, build_client};
use runtime::events::EventRecorder;
use runtime::reflect::Change;
use runtime::workqueue::WorkQueueMetrics;
use tokio_util::sync::CancellationToken;

use crate::caches::{CacheOptions, Caches, Changes};
use crate::capacity_controller::{
    self as cap, CapacityChanges, CapacityController, CapacityMetrics,
};
use crate::claims::ClaimsController;
use crate::context::Context;
use crate::driver::{self, Driver};
use crate::metrics::{ControllerMetrics, register_process_metrics};
use crate::volumes::VolumesController;
use crate::{VERSION, http, kubeconfig};

/// Why the provisioner stopped.
#[derive(Debug, thiserror::Error)]
pub enum AppError {
    #[error(transparent)]
    Kubeconfig(#[from] kubeconfig::KubeconfigError),
    #[error(transparent)]
    Client(#[from] runtime::client::ClientError),
    #[error(transparent)]
    Driver(#[from] driver::DriverError),
    #[error(transparent)]
    Http(#[from] http::HttpError),
    #[error(transparent)]
    Caches(#[from] runtime::reflect::ReflectError),
    #[error("invalid leader election settings: {0}")]
    LeaderElection(#[from] leader_election::ConfigError),
    #[error("leaderelection lost")]
    LostLease,
    #[error("{0}")]
    Unsupported(String),
    #[error(
        "cannot look up the owner for CSIStorageCapacity objects (POD_NAME {pod:?} in NAMESPACE {namespace:?}): {source}"
    )]
    Owner {
        pod: String,
        namespace: String,
        source: kube::Error,
    },
}

/// How long to wait for the first list of every cache before giving up (upstream blocks; a
/// bounded wait with a clear error is more useful than a silent hang).
const CACHE_SYNC_TIMEOUT: Duration = Duration::from_secs(300);
/// Upstream's informer resync for claims and volumes.
const RESYNC_PERIOD: Duration = Duration::from_secs(15 * 60);

/// Everything set up before leader election.
struct Base {
    opts: Arc<cli::Options>,
    client: Client,
    capacity_client: Client,
    driver: Driver,
    identity: String,
    volume_attributes_class: bool,
    queue_metrics: WorkQueueMetrics,
    controller_metrics: ControllerMetrics,
    capacity_metrics: CapacityMetrics,
}

pub async fn run(opts: cli::Options) -> Result<(), AppError> {
    warn_about_flags(&opts);
    if opts.node_deployment {
        return Err(AppError::Unsupported(
            "--node-deployment (distributed provisioning) is not implemented yet by this provisioner; \
             run one central instance instead (see docs/compatibility.md)"
                .into(),
        ));
    }
    let opts = Arc::new(opts);
    let mut registry = Registry::default();
    let request_metrics = RequestMetrics::new();
    request_metrics.register(&mut registry);
    let user_agent = format!("csi-provisioner/{VERSION}");

    let config = kubeconfig::load(opts.kubeconfig.as_deref(), opts.master.as_deref()).await?;
    let client = build_client(
        config.clone(),
        limits(opts.kube_api_qps as f32, opts.kube_api_burst),
        &user_agent,
        Some(request_metrics.clone()),
    )?;
    let capacity_client = build_client(
        config.clone(),
        limits(opts.kube_api_capacity_qps, opts.kube_api_capacity_burst),
        &user_agent,
        Some(request_metrics.clone()),
    )?;

    let call_metrics = csi::CallMetrics::new();
    call_metrics.register(&mut registry);
    let driver = driver::connect(&opts.csi_address, opts.timeout, call_metrics).await?;
    let identity = driver::provisioner_identity(&driver.name, jiff_now_millis(), rand::random());
    let volume_attributes_class = volume_attributes_class_enabled(&client, &opts).await;

    let queue_metrics = WorkQueueMetrics::new();
    queue_metrics.register(&mut registry);
    let controller_metrics = ControllerMetrics::new();
    controller_metrics.register(&mut registry);
    let capacity_metrics = CapacityMetrics::new();
    if opts.enable_capacity {
        capacity_metrics.register(&mut registry);
    }
    register_process_metrics(&mut registry);

    let elector = if opts.leader_election {
        let elector = LeaderElector::new(
            build_client(
                config,
                limits(opts.kube_api_qps as f32, opts.kube_api_burst),
                &user_agent,
                None,
            )?,
            leader_config(&opts, &driver.name)?,
        )?;
        elector.register_metrics(&mut registry);
        Some(elector)
    } else {
        None
    };

    let cancel = CancellationToken::new();
    if let Some(address) = opts.http_address() {
        let server = http::serve(
            http::HttpOptions {
                address: address.to_string(),
                metrics_path: opts.metrics_path.clone(),
                enable_pprof: opts.enable_pprof,
            },
            Arc::new(registry),
            elector.as_ref().map(LeaderElector::health_check),
            cancel.clone(),
        )
        .await?;
        tokio::spawn(server);
    }
    tokio::spawn(cancel_on_signal(
        cancel.clone(),
        opts.feature_gates
            .enabled(cli::Feature::ReleaseLeaderElectionOnExit),
    ));

    let base = Arc::new(Base {
        opts: opts.clone(),
        client,
        capacity_client,
        driver,
        identity,
        volume_attributes_class,
        queue_metrics,
        controller_metrics,
        capacity_metrics,
    });
    match elector {
        None => run_controllers(base, cancel).await,
        Some(elector) => {
            let leading = {
                let base = base.clone();
                move |token: CancellationToken| async move {
                    if let Err(err) = run_controllers(base, token).await {
                        tracing::error!(err = %err, "Controllers stopped");
                        std::process::exit(1);
                    }
                }
            };
            match elector.run(cancel, leading).await {
                Outcome::Lost => Err(AppError::LostLease),
                Outcome::CancelledWhileStandby | Outcome::CancelledWhileLeading { .. } => Ok(()),
            }
        }
    }
}

/// Starts the caches and runs every controller until `cancel`.
async fn run_controllers(base: Arc<Base>, cancel: CancellationToken) -> Result<(), AppError> {
    let opts = &base.opts;
    let capacity_target = if opts.enable_capacity {
        let namespace = opts.env.namespace.clone().unwrap_or_default();
        let template = capacity::published::ObjectTemplate {
            namespace: namespace.clone(),
            driver: base.driver.name.clone(),
            managed_by: capacity::MANAGED_BY_CENTRAL.to_string(),
            owner: None,
        };
        Some((namespace, template.label_selector()))
    } else {
        None
    };
    let (caches, changes) = Caches::start(
        &base.client,
        &base.capacity_client,
        &CacheOptions {
            watch_attachments: base.driver.capabilities.publish_unpublish_volume,
            capacities: capacity_target,
        },
    );
    let (recorder, deliver) =
        EventRecorder::new(base.client.clone(), event_source(&base.driver.name));
    tokio::spawn(deliver);
    let (populator_recorder, deliver) =
        EventRecorder::new(base.client.clone(), "external-provisioner".to_string());
    tokio::spawn(deliver);

    let capacity = if opts.enable_capacity {
        Some(capacity_controller(&base, &caches).await?)
    } else {
        None
    };
    let ctx = Context {
        client: base.client.clone(),
        driver: base.driver.clone(),
        identity: base.identity.clone(),
        opts: opts.clone(),
        caches: caches.clone(),
        recorder,
        populator_recorder,
        metrics: base.controller_metrics.clone(),
        capacity: capacity.as_ref().map(|(_, handle)| handle.clone()),
        volume_attributes_class: base.volume_attributes_class,
    };
    let claims = ClaimsController::new(ctx.clone(), &base.queue_metrics);
    let volumes = VolumesController::new(ctx.clone(), &base.queue_metrics);
    let mut tasks = tokio::task::JoinSet::new();
    let Changes {
        claims: claim_changes,
        volumes: volume_changes,
        classes,
        csi_nodes,
        nodes,
        attachments,
        capacities,
    } = changes;
    tasks.spawn(dispatch_claims(claim_changes, claims.clone()));
    tasks.spawn(dispatch_volumes(
        volume_changes,
        volumes.clone(),
        claims.clone(),
    ));
    if let Some(stream) = attachments {
        tasks.spawn(dispatch_attachments(stream, volumes.clone()));
    }
    match (capacity, capacities) {
        (Some((controller, handle)), Some(capacities)) => {
            tasks.spawn(recheck_waiting_claims(
                handle,
                claims.clone(),
                cancel.clone(),
            ));
            tasks.spawn(controller.run(
                CapacityChanges {
                    classes,
                    csi_nodes,
                    nodes,
                    capacities,
                },
                cancel.clone(),
            ));
        }
        _ => {
            tasks.spawn(drain(classes));
            tasks.spawn(drain(csi_nodes));
            tasks.spawn(drain(nodes));
        }
    }
    caches.wait_until_ready(CACHE_SYNC_TIMEOUT).await?;
    tracing::info!(driver = %base.driver.name, "Caches synced; starting controllers");
    claims.enqueue_all();
    volumes.enqueue_all();
    tasks.spawn(resync(claims.clone(), volumes.clone(), cancel.clone()));
    tasks.spawn(claims.run(opts.worker_threads, cancel.clone()));
    tasks.spawn(volumes.run(opts.worker_threads, cancel.clone()));
    cancel.cancelled().await;
    tasks.abort_all();
    Ok(())
}

async fn capacity_controller(
    base: &Base,
    caches: &Caches,
) -> Result<(CapacityController, cap::RefreshHandle), AppError> {
    let opts = &base.opts;
    let namespace = opts.env.namespace.clone().unwrap_or_default();
    let pod = opts.env.pod_name.clone().unwrap_or_default();
    let owner = cap::lookup_owner(
        &base.capacity_client,
        &namespace,
        &pod,
        opts.capacity_ownerref_level,
    )
    .await
    .map_err(|source| AppError::Owner {
        pod: pod.clone(),
        namespace: namespace.clone(),
        source,
    })?;
    let config = cap::CapacityConfig {
        driver_name: base.driver.name.clone(),
        namespace,
        managed_by: capacity::MANAGED_BY_CENTRAL.to_string(),
        owner,
        poll_interval: opts.capacity_poll_interval,
        workers: opts.capacity_threads,
        include_immediate: opts.capacity_for_immediate_binding,
        retry_interval_start: opts.retry_interval_start,
        retry_interval_max: opts.retry_interval_max,
        timeout: opts.timeout,
    };
    Ok(CapacityController::new(
        config,
        base.capacity_client.clone(),
        base.driver.client.clone(),
        caches.clone(),
        base.capacity_metrics.clone(),
        &base.queue_metrics,
    ))
}

async fn dispatch_claims(
    mut stream: BoxStream<'static, Change<k8s_openapi::api::core::v1::PersistentVolumeClaim>>,
    claims: ClaimsController,
) {
    while let Some(change) = stream.next().await {
        match change {
            Change::Applied(c) | Change::Deleted(c) => claims.enqueue(&c),
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

/// SIGTERM/SIGINT. Upstream dies at once unless the `ReleaseLeaderElectionOnExit` gate is on,
/// in which case it drains and releases the lease.
async fn cancel_on_signal(cancel: CancellationToken, graceful: bool) {
    use tokio::signal::unix::{SignalKind, signal};
    let (Ok(mut term), Ok(mut int)) = (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
    ) else {
        return;
    };
    tokio::select! {
        _ = term.recv() => {}
        _ = int.recv() => {}
    }
    if !graceful {
        tracing::info!("Received termination signal; exiting");
        std::process::exit(0);
    }
    tracing::info!("Received termination signal; stopping controllers and releasing the lease");
    cancel.cancel();
}

fn limits(qps: f32, burst: i64) -> ClientLimits {
    ClientLimits {
        qps,
        burst: u32::try_from(burst.max(0)).unwrap_or(u32::MAX),
    }
}

fn leader_config(opts: &cli::Options, driver: &str) -> Result<LeaderElectionConfig, AppError> {
    let identity = leader_election::identity_from_host(None).unwrap_or_else(|_| "unknown".into());
    let namespace =
        leader_election::namespace_from_environment(opts.leader_election_namespace.as_deref());
    let mut cfg =
        LeaderElectionConfig::new(leader_election::lock_name(driver), namespace, identity);
    cfg.lease_duration = opts.leader_election_lease_duration;
    cfg.renew_deadline = opts.leader_election_renew_deadline;
    cfg.retry_period = opts.leader_election_retry_period;
    cfg.labels = opts.leader_election_labels.clone();
    cfg.release_on_cancel = opts
        .feature_gates
        .enabled(cli::Feature::ReleaseLeaderElectionOnExit);
    cfg.validate()?;
    Ok(cfg)
}

/// Upstream's library names its event source `<provisioner>_<hostname>_<uuid>`.
fn event_source(driver: &str) -> String {
    let host = hostname::get()
        .map(|h| h.to_string_lossy().into_owned())
        .unwrap_or_default();
    format!("{driver}_{host}_{}", uuid::Uuid::new_v4())
}

/// The VolumeAttributesClass gate, switched off when not set explicitly and the API server
/// does not serve storage.k8s.io/v1 VolumeAttributesClass (as upstream).
async fn volume_attributes_class_enabled(client: &Client, opts: &cli::Options) -> bool {
    let gate = cli::Feature::VolumeAttributesClass;
    if !opts.feature_gates.enabled(gate) || opts.feature_gates.explicitly_set(gate) {
        return opts.feature_gates.enabled(gate);
    }
    match client.list_api_group_resources("storage.k8s.io/v1").await {
        Ok(list) => {
            let served = list
                .resources
                .iter()
                .any(|r| r.name == "volumeattributesclasses");
            if !served {
                tracing::info!(
                    "storage.k8s.io/v1 VolumeAttributesClass is not served; disabling the VolumeAttributesClass feature"
                );
            }
            served
        }
        Err(e) => {
            tracing::warn!(err = %e, "Cannot discover storage.k8s.io/v1; keeping the VolumeAttributesClass feature on");
            true
        }
    }
}

/// Flags upstream accepts that we do not act on: accepted, and said so at start-up.
fn warn_about_flags(opts: &cli::Options) {
    for (flag, why) in opts.accepted_but_ignored() {
        tracing::warn!(
            flag,
            reason = why,
            "Flag accepted for compatibility but has no effect"
        );
    }
    for warning in &opts.feature_gate_warnings {
        tracing::warn!("{warning}");
    }
    if !opts.positional_args.is_empty() {
        tracing::warn!(args = ?opts.positional_args, "Ignoring extra command-line arguments (as upstream's flag parser does)");
    }
    if opts.metrics_address.is_some() {
        tracing::warn!("--metrics-address is deprecated; use --http-endpoint");
    }
}

fn jiff_now_millis() -> i64 {
    k8s_openapi::jiff::Timestamp::now().as_millisecond()
}
