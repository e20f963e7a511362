//! Start-up and wiring, in upstream's order: flags → API clients → driver (probe, name,
//! capabilities) → HTTP endpoint → leader election → caches and controllers.

use std::sync::Arc;

use controller_kit::client::{ClientLimits, RequestMetrics, build_client, build_clients};
use controller_kit::events::{EventRecorder, EventType};
use controller_kit::workqueue::WorkQueueMetrics;
use kube::Client;
use leader_election::{LeaderElectionConfig, LeaderElector, Outcome};
use prometheus_client::registry::Registry;
use tokio_util::sync::CancellationToken;

use crate::base::Base;
use crate::capacity_controller::CapacityMetrics;
use crate::driver;
use crate::metrics::{ControllerMetrics, register_process_metrics};
use crate::node::NodeDeployment;
pub use crate::stopped::AppError;
use crate::supervise::Tasks;
use crate::{VERSION, http, kubeconfig};

pub async fn run(opts: cli::Options) -> Result<(), AppError> {
    // Upstream's first line, which operators grep for.
    tracing::info!(version = VERSION, "Version");
    warn_about_flags(&opts);
    let opts = Arc::new(opts);
    let mut registry = Registry::default();
    let request_metrics = RequestMetrics::new();
    request_metrics.register(&mut registry);
    let user_agent = format!("csi-provisioner/{VERSION}");

    let config = kubeconfig::load(opts.kubeconfig.as_deref(), opts.master.as_deref()).await?;
    // One `--kube-api-qps/burst` budget, two lanes: work that can wait (events, dropping a
    // finalizer that has done its job) never delays provisioning. The record's writer takes
    // its turns ahead of its requests (`Clients::prepaid`).
    let clients = build_clients(
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
    if let Some(in_tree) = provisioning::volume::decide::migrated_from(&driver.name) {
        driver.client.enable_migration_label();
        tracing::info!(driver = %driver.name, in_tree_plugin = in_tree,
            "CSI migration: also serving StorageClasses and PersistentVolumes of the in-tree plugin");
    }
    let node = if opts.node_deployment {
        Some(Arc::new(NodeDeployment::discover(&opts, &driver).await?))
    } else {
        None
    };
    let identity = crate::node::identity(
        driver::provisioner_identity(&driver.name, jiff_now_millis(), rand::random()),
        node.as_deref(),
    );
    let volume_attributes_class = volume_attributes_class_enabled(&clients.normal, &opts).await;
    let capacity_owner = if opts.enable_capacity {
        crate::controllers::capacity_owner(&capacity_client, &opts).await?
    } else {
        None
    };

    let queue_metrics = WorkQueueMetrics::new();
    queue_metrics.register(&mut registry);
    for name in queue_names(&opts) {
        queue_metrics.announce(name);
    }
    let controller_metrics = ControllerMetrics::new();
    controller_metrics.register(&mut registry);
    let capacity_metrics = CapacityMetrics::new();
    if opts.enable_capacity {
        capacity_metrics.register(&mut registry);
    }
    register_process_metrics(&mut registry);

    // Tasks started here that must run until shutdown; one that ends earlier ends the process.
    let mut supervised = Tasks::default();
    let elector = if opts.leader_election {
        let client = build_client(
            config,
            limits(opts.kube_api_qps as f32, opts.kube_api_burst),
            &user_agent,
            None,
        )?;
        let cfg = leader_config(&opts, &driver.name)?;
        let (hook, deliver) = leader_event_hook(client.clone(), &driver.name, &cfg);
        supervised.spawn("leader election events", deliver);
        let elector = LeaderElector::new(client, cfg)?.with_event_hook(hook);
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
                capacity: opts.enable_capacity.then(|| capacity_metrics.clone()),
            },
            Arc::new(registry),
            // As csi-lib-utils: the health check is served on --http-endpoint only.
            elector
                .as_ref()
                .filter(|_| opts.http_endpoint.is_some())
                .map(LeaderElector::health_check),
            cancel.clone(),
        )
        .await?;
        supervised.spawn("HTTP server", server);
    }
    supervised.spawn(
        "signal handler",
        cancel_on_signal(
            cancel.clone(),
            opts.feature_gates
                .enabled(cli::Feature::ReleaseLeaderElectionOnExit),
        ),
    );

    let lost = driver.lost.clone();
    let base = Arc::new(Base {
        opts: opts.clone(),
        client: clients.normal,
        background_client: clients.background,
        prepaid: (clients.prepaid, clients.budget),
        capacity_client,
        driver,
        identity,
        node,
        volume_attributes_class,
        capacity_owner,
        queue_metrics,
        controller_metrics,
        capacity_metrics,
    });
    let stop = cancel.clone();
    tokio::select! {
        // Checked first: a loss reported while start-up was still running wins too.
        biased;
        () = lost.cancelled() => Err(AppError::DriverLost),
        failure = supervised.first_failure(&stop) => Err(failure),
        result = run_elected(base, elector, cancel) => result,
    }
}

/// The controllers, under leader election when it is on.
async fn run_elected(
    base: Arc<Base>,
    elector: Option<LeaderElector>,
    cancel: CancellationToken,
) -> Result<(), AppError> {
    match elector {
        None => crate::controllers::run_controllers(base, cancel).await,
        Some(elector) => {
            let failure: Arc<parking_lot::Mutex<Option<AppError>>> = Arc::default();
            let leading = {
                let (base, failure, stop) = (base.clone(), failure.clone(), cancel.clone());
                move |token: CancellationToken| async move {
                    if let Err(err) = crate::controllers::run_controllers(base, token).await {
                        *failure.lock() = Some(err);
                        // Ends the election too, so that `main` reports the error and exits.
                        stop.cancel();
                    }
                }
            };
            let outcome = elector.run(cancel, leading).await;
            if let Some(err) = failure.lock().take() {
                return Err(err);
            }
            match outcome {
                Outcome::Lost => Err(AppError::LostLease),
                Outcome::CancelledWhileStandby | Outcome::CancelledWhileLeading { .. } => Ok(()),
            }
        }
    }
}

/// SIGTERM/SIGINT: stop taking new work and let in-flight CSI calls finish (bounded, see
/// `controllers::run_controllers`), then exit 0. Upstream dies at once unless the
/// `ReleaseLeaderElectionOnExit` gate is on; a CreateVolume cut off that way leaves a volume
/// whose PV is never written until the claim is synced again, so we always drain. The Lease is
/// released only with the gate, as upstream.
async fn cancel_on_signal(cancel: CancellationToken, release_lease: bool) {
    use tokio::signal::unix::{SignalKind, signal};
    let (Ok(mut term), Ok(mut int)) = (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
    ) else {
        // Never ending early: the process still works, it just cannot drain on a signal.
        tracing::error!(
            "Cannot listen for SIGTERM/SIGINT; the provisioner will not drain in-flight calls when stopped"
        );
        return std::future::pending().await;
    };
    tokio::select! {
        _ = term.recv() => {}
        _ = int.recv() => {}
    }
    crate::driver::shutting_down();
    cancel.cancel();
    // Logged once no new work can start, so the line marks that moment.
    tracing::info!(
        release_lease,
        "Received termination signal; finishing in-flight calls, then exiting"
    );
}

/// The work queues the controllers will run (upstream's topology queue is central-only).
fn queue_names(opts: &cli::Options) -> Vec<&'static str> {
    let mut names = vec![crate::claims::QUEUE_NAME, crate::volumes::QUEUE_NAME];
    if opts.enable_capacity {
        names.push(crate::capacity_controller::QUEUE_NAME);
        if !opts.node_deployment {
            names.push(crate::capacity_controller::TOPOLOGY_QUEUE_NAME);
        }
    }
    names
}

pub(crate) fn limits(qps: f32, burst: i64) -> ClientLimits {
    ClientLimits {
        qps,
        burst: u32::try_from(burst.max(0)).unwrap_or(u32::MAX),
    }
}

fn leader_config(opts: &cli::Options, driver: &str) -> Result<LeaderElectionConfig, AppError> {
    let identity = leader_election::identity_from_host(None).map_err(AppError::LeaderIdentity)?;
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

/// Records "became leader" / "stopped leading" on the Lease as csi-lib-utils does: through the
/// leader-election client, with its source component (see
/// [`leader_election::event_component`]).
/// Also returns the delivery task, which runs as long as the hook exists.
fn leader_event_hook(
    client: Client,
    driver: &str,
    cfg: &LeaderElectionConfig,
) -> (
    leader_election::EventHook,
    impl std::future::Future<Output = ()> + Send + 'static,
) {
    let host = hostname::get().map_or_else(
        |_| cfg.identity.clone(),
        |h| h.to_string_lossy().into_owned(),
    );
    let (recorder, deliver) =
        EventRecorder::new(client, leader_election::event_component(driver, &host));
    let hook: leader_election::EventHook = Arc::new(move |e: leader_election::LeaderEvent| {
        let type_ = if e.event_type == "Warning" {
            EventType::Warning
        } else {
            EventType::Normal
        };
        recorder.event(&e.lease, type_, e.reason, e.message);
    });
    (hook, deliver)
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
