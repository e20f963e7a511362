//! `cargo xtask demo`: a real control plane, a CSI driver (our mock, or with `--driver hostpath`
//! csi-driver-host-path's plugin) and our csi-provisioner telling the Storage Capacity story: a volume for a claim, then pods placed only where their volume fits,
//! and one pod that cannot fit anywhere, with the explanation on its claim.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use crate::demo_driver::{DemoDriver, Flavor, Instance};

use anyhow::{Context, Result, bail};
use k8s_openapi::api::core::v1::{Event, PersistentVolume, PersistentVolumeClaim, Pod};
use k8s_openapi::api::storage::v1::{CSIStorageCapacity, StorageClass};
use kube::api::{ListParams, PostParams};
use kube::{Api, Client};
use serde_json::json;
use testenv::node::{BUSYBOX_IMAGE, NODE_NAME};
use testenv::{ControlPlane, ControlPlaneOptions, RealNode};

const NAMESPACE: &str = "demo";

pub struct Options {
    pub dir: PathBuf,
    pub keep: bool,
    pub driver: DemoDriver,
    pub real_node: bool,
}

pub fn run(root: &Path, opts: &Options) -> Result<()> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting a tokio runtime")?;
    if testenv::detached_is_running(&opts.dir)? {
        bail!(
            "a cluster is already running in {}; stop it with `cargo xtask cluster down --dir {}`",
            opts.dir.display(),
            opts.dir.display()
        );
    }
    let flavor = Flavor::of(opts.driver, opts.real_node)?;
    // Everything the demo starts is recorded in `<dir>/pids` as it starts; the guard stops it
    // all by those ids when the demo ends, fails or is interrupted, unless `--keep`. The real
    // node's kubelet, containerd and containers are found by its fixed paths instead, and
    // torn down after them (an interrupt does both, see `testenv::stop_on_signals`).
    let guard = testenv::DetachedGuard::new(&opts.dir);
    let told = runtime.block_on(story(root, &opts.dir, &flavor));
    if opts.keep {
        guard.keep();
        told?;
        println!("\nThe cluster keeps running (driver and provisioner included).");
        if flavor.real_node {
            println!(
                "  the real node too: stop it with cargo xtask node down --dir {}",
                opts.dir.display()
            );
        }
        println!(
            "  export KUBECONFIG={}",
            opts.dir.join("kubeconfig").display()
        );
        println!(
            "  kubectl get csistoragecapacities -A; kubectl -n {NAMESPACE} get pvc,pods -o wide"
        );
        println!(
            "  logs: {}/logs/    stop: cargo xtask cluster down --dir {}",
            opts.dir.display(),
            opts.dir.display()
        );
        return Ok(());
    }
    if told.is_ok() {
        println!("\nTearing down (use --keep to leave it running).");
    }
    let stopped = guard.stop();
    let node_removed = flavor
        .real_node
        .then(testenv::node::teardown_leftovers)
        .transpose();
    told?;
    let stopped = stopped?;
    println!(
        "stopped {} processes: {}",
        stopped.len(),
        stopped.join(", ")
    );
    if let Some(r) = node_removed? {
        println!(
            "real node torn down: kubelet, containerd and {} other processes, {} mounts, {} network namespaces, {} cgroups",
            r.processes.saturating_sub(2),
            r.mounts,
            r.netns,
            r.cgroups
        );
    }
    Ok(())
}

async fn story(root: &Path, dir: &Path, f: &Flavor) -> Result<()> {
    heading(
        "Starting a local control plane (etcd, kube-apiserver, kube-controller-manager, kube-scheduler)",
    );
    let cp = ControlPlane::start(ControlPlaneOptions {
        dir: Some(dir.to_path_buf()),
        // The real node registers itself; the others are Node objects without a kubelet.
        nodes: if f.real_node { 0 } else { f.pools.len() },
        driver: f.driver.to_string(),
        topology_key: f.topology_key.to_string(),
        detached: true,
        startup_timeout: Duration::from_secs(60),
        apiserver_args: Vec::new(),
        extra_controllers: Vec::new(),
    })
    .await?;
    let client = cp.try_client().await?;
    let kubeconfig = cp.kubeconfig().to_path_buf();
    println!(
        "ready in {:.1}s at {}",
        cp.startup_time().as_secs_f64(),
        cp.server_url()
    );
    if f.real_node {
        heading("Starting the machine's real node (containerd and kubelet v1.37.2)");
        let started = Instant::now();
        let node = RealNode::start(&cp, true).await?;
        node.detach();
        println!(
            "Node {NODE_NAME} Ready after {:.1}s (kubelet log: {}/logs/kubelet.log)",
            started.elapsed().as_secs_f64(),
            dir.display()
        );
    }
    let dir = cp.detach()?;
    testenv::try_create_bare_nodes(&client, f.topology_key, f.bare_nodes).await?;
    testenv::try_create_csi_driver(&client, f.driver, true).await?;
    create(
        &client,
        json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}}),
    )
    .await?;
    if f.real_node {
        println!(
            "Node {NODE_NAME}, real; CSIDriver {} with storageCapacity: true",
            f.driver
        );
    } else {
        println!(
            "{} fake nodes with the driver's topology label {}; CSIDriver {} with storageCapacity: true",
            f.pools.len() + f.bare_nodes.len(),
            f.topology_key,
            f.driver
        );
    }

    heading(&format!("Starting {} and csi-provisioner", f.name()));
    let instances = f.start(root, &dir)?;
    if f.real_node {
        register_with_kubelet(&client, &dir, f, &instances).await?;
    }
    for instance in &instances {
        start_provisioner(root, &dir, &kubeconfig, instance)?;
    }
    f.describe_nodes();
    if f.distributed() {
        println!(
            "csi-provisioner --node-deployment --enable-capacity, one per node (logs: {}/logs/csi-provisioner-<node>.log)",
            dir.display()
        );
    } else {
        println!(
            "csi-provisioner --enable-capacity (its log: {}/logs/csi-provisioner.log)",
            dir.display()
        );
    }

    let sockets: Vec<&Path> = instances.iter().map(|i| i.socket.as_path()).collect();
    immediate_volume(&client, &sockets, f).await?;
    capacity_aware_placement(&client, &dir, f).await
}

/// Starts our node-registrar for each plugin, so that kubelet calls it to mount volumes, and
/// waits until the CSINode lists the driver (kubelet writes the plugin's topology there).
async fn register_with_kubelet(
    client: &Client,
    dir: &Path,
    f: &Flavor,
    instances: &[Instance],
) -> Result<()> {
    for instance in instances {
        let cmd = testenv::node::registrar_command(&instance.socket)?;
        let process = testenv::spawn_detached("node-registrar", cmd, &dir.join("logs"))?;
        testenv::record_detached(dir, process)?;
    }
    testenv::node::wait_driver_registered(client, f.driver, Duration::from_secs(60))
        .await
        .with_context(|| {
            format!(
                "see {}/logs/node-registrar.log and kubelet.log",
                dir.display()
            )
        })?;
    println!(
        "kubelet registered the plugin as {}'s node plugin on {NODE_NAME} (node-registrar)",
        f.driver
    );
    Ok(())
}

/// One central provisioner, or one `--node-deployment` instance for `instance.node`.
fn start_provisioner(
    root: &Path,
    dir: &Path,
    kubeconfig: &Path,
    instance: &Instance,
) -> Result<()> {
    let mut cmd = Command::new(root.join("target/debug/csi-provisioner"));
    cmd.arg(format!("--kubeconfig={}", kubeconfig.display()))
        .arg(format!("--csi-address={}", instance.socket.display()))
        .args([
            "--enable-capacity",
            "--capacity-ownerref-level=-1",
            "--capacity-poll-interval=1m",
            "-v=2",
        ])
        .env("NAMESPACE", NAMESPACE);
    let name = match instance.node {
        Some(node) => {
            // The plugin's distributed deployment: strict topology, no immediate topology.
            // Capacity for Immediate classes too: the instances order themselves by it when
            // they take an Immediate claim.
            cmd.args([
                "--node-deployment",
                "--strict-topology",
                "--immediate-topology=false",
                "--capacity-for-immediate-binding",
            ])
            .env("NODE_NAME", node);
            format!("csi-provisioner-{node}")
        }
        None => "csi-provisioner".to_string(),
    };
    let process = testenv::spawn_detached(&name, cmd, &dir.join("logs"))?;
    testenv::record_detached(dir, process)?;
    Ok(())
}

/// Part 1: an Immediate claim becomes Bound to a PV whose volume the driver holds.
async fn immediate_volume(client: &Client, sockets: &[&Path], f: &Flavor) -> Result<()> {
    heading("1. A volume for a claim (StorageClass with volumeBindingMode: Immediate)");
    create(client, class(f, "demo-immediate", "Immediate")).await?;
    create(client, claim("data", "demo-immediate", "1Gi")).await?;
    let started = Instant::now();
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), NAMESPACE);
    let bound = wait(|| async {
        let c = claims.get("data").await.ok()?;
        (c.status.as_ref()?.phase.as_deref() == Some("Bound")).then_some(c)
    })
    .await
    .context("claim demo/data did not become Bound; see the csi-provisioner log")?;
    let pv_name = bound.spec.and_then(|s| s.volume_name).unwrap_or_default();
    println!(
        "PVC {NAMESPACE}/data (1Gi): Bound to {pv_name} after {:.1}s",
        started.elapsed().as_secs_f64()
    );
    let pv: PersistentVolume = Api::all(client.clone()).get(&pv_name).await?;
    let spec = pv.spec.unwrap_or_default();
    let csi = spec.csi.unwrap_or_default();
    let size = spec
        .capacity
        .unwrap_or_default()
        .get("storage")
        .map(|q| q.0.clone())
        .unwrap_or_default();
    println!(
        "PV  {pv_name}: {size}, driver {}, volume handle {}, reclaim policy {}",
        csi.driver,
        csi.volume_handle,
        spec.persistent_volume_reclaim_policy.unwrap_or_default()
    );
    let placed: Vec<String> = spec
        .node_affinity
        .and_then(|a| a.required)
        .map(|r| r.node_selector_terms)
        .unwrap_or_default()
        .into_iter()
        .flat_map(|t| t.match_expressions.unwrap_or_default())
        .map(|e| format!("{}={}", e.key, e.values.unwrap_or_default().join("|")))
        .collect();
    if !placed.is_empty() {
        println!(
            "    reachable from {} (the driver put it there; its pool has that much less room)",
            placed.join(", ")
        );
    }
    for socket in sockets {
        let endpoint = format!("unix://{}", socket.display());
        let csi_client = csi::Client::connect(&endpoint, Default::default()).await?;
        let volumes = csi_client.list_volumes(Default::default()).await?;
        for entry in volumes.entries {
            if let Some(v) = entry.volume {
                println!(
                    "driver (ListVolumes on {}): volume {} of {} bytes",
                    socket.display(),
                    v.volume_id,
                    v.capacity_bytes
                );
            }
        }
    }
    Ok(())
}

/// Part 2: the seed's story — objects per node, pods only where their volume fits.
async fn capacity_aware_placement(client: &Client, dir: &Path, f: &Flavor) -> Result<()> {
    heading(
        "2. Capacity-aware placement (StorageClass with volumeBindingMode: WaitForFirstConsumer)",
    );
    create(client, class(f, "demo-local", "WaitForFirstConsumer")).await?;
    let capacities: Api<CSIStorageCapacity> = Api::namespaced(client.clone(), NAMESPACE);
    wait(|| async {
        let n = capacities
            .list(&ListParams::default())
            .await
            .ok()?
            .items
            .iter()
            .filter(|c| c.storage_class_name == "demo-local")
            .count();
        (n == f.pools.len()).then_some(())
    })
    .await
    .context("CSIStorageCapacity objects did not appear; see the csi-provisioner log")?;
    println!(
        "csi-provisioner published one CSIStorageCapacity per node with the driver for class demo-local:"
    );
    print_capacities(&capacities, f).await?;

    let pods: Api<Pod> = Api::namespaced(client.clone(), NAMESPACE);
    let events: Api<Event> = Api::namespaced(client.clone(), NAMESPACE);
    for &(name, size) in f.pods {
        let claim_name = format!("{name}-data");
        create(client, claim(&claim_name, "demo-local", size)).await?;
        create(client, pod(f, name, &claim_name)).await?;
        let outcome = wait(|| async {
            if let Some(node) = pods.get(name).await.ok()?.spec?.node_name {
                return Some(Ok(node));
            }
            let list = events
                .list(&ListParams::default().fields(&format!("involvedObject.name={claim_name}")))
                .await
                .ok()?;
            list.items
                .into_iter()
                .find(|e| e.reason.as_deref() == Some("NotEnoughCapacity"))
                .map(Err)
        })
        .await;
        match outcome {
            Some(Ok(node)) => {
                println!("pod {name} with a {size} volume → {node}");
                if f.real_node {
                    show_pod_wrote(client, dir, name, &claim_name).await?;
                }
            }
            Some(Err(event)) => {
                println!("pod {name} with a {size} volume → Pending: no node has room");
                println!(
                    "  PVC {NAMESPACE}/{claim_name}: Warning NotEnoughCapacity: {}",
                    event.message.unwrap_or_default()
                );
            }
            None => println!(
                "pod {name} with a {size} volume → not placed within 30s (see the csi-provisioner log)"
            ),
        }
    }
    println!(
        "\nCapacity after provisioning (updated right after each CreateVolume, not at the next poll):"
    );
    print_capacities(&capacities, f).await
}

async fn print_capacities(api: &Api<CSIStorageCapacity>, f: &Flavor) -> Result<()> {
    let mut rows: Vec<[String; 5]> = api
        .list(&ListParams::default())
        .await?
        .items
        .into_iter()
        .filter(|c| c.storage_class_name == "demo-local")
        .map(|c| {
            let labels: BTreeMap<String, String> = c
                .node_topology
                .and_then(|t| t.match_labels)
                .unwrap_or_default();
            [
                c.metadata.name.unwrap_or_default(),
                c.storage_class_name,
                labels.get(f.topology_key).cloned().unwrap_or_default(),
                c.capacity.map(|q| q.0).unwrap_or_else(|| "-".into()),
                c.maximum_volume_size
                    .map(|q| q.0)
                    .unwrap_or_else(|| "-".into()),
            ]
        })
        .collect();
    rows.sort_by(|a, b| a[2].cmp(&b[2]));
    println!(
        "  {:<14} {:<12} {:<10} {:<10} MAX VOLUME",
        "NAME", "CLASS", "NODE", "CAPACITY"
    );
    for [name, class, node, cap, max] in rows {
        println!("  {name:<14} {class:<12} {node:<10} {cap:<10} {max}");
    }
    Ok(())
}

fn class(f: &Flavor, name: &str, binding: &str) -> serde_json::Value {
    json!({"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass", "metadata": {"name": name},
           "provisioner": f.driver, "volumeBindingMode": binding, "reclaimPolicy": "Delete",
           "parameters": f.parameters})
}

fn claim(name: &str, class: &str, size: &str) -> serde_json::Value {
    json!({"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": name, "namespace": NAMESPACE},
           "spec": {"accessModes": ["ReadWriteOnce"], "storageClassName": class, "resources": {"requests": {"storage": size}}}})
}

fn pod(f: &Flavor, name: &str, claim: &str) -> serde_json::Value {
    let volumes = json!([{"name": "data", "persistentVolumeClaim": {"claimName": claim}}]);
    if !f.real_node {
        // Nothing runs on fake nodes: the image is never pulled.
        return json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": NAMESPACE},
               "spec": {"containers": [{"name": "app", "image": "registry.invalid/demo"}], "volumes": volumes}});
    }
    json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": NAMESPACE},
           "spec": {"terminationGracePeriodSeconds": 1,
                    "containers": [{"name": "app", "image": BUSYBOX_IMAGE, "imagePullPolicy": "Never",
                                    "command": ["sh", "-c", format!("echo '{name} wrote this into its volume' > /data/hello && exec sleep 3600")],
                                    "volumeMounts": [{"name": "data", "mountPath": "/data"}]}],
                    "volumes": volumes}})
}

/// On the real node: waits for pod `name` to run, then reads what it wrote from its volume's
/// directory on the host (the plugin's state names it), not from the pod.
async fn show_pod_wrote(client: &Client, dir: &Path, name: &str, claim_name: &str) -> Result<()> {
    let pods: Api<Pod> = Api::namespaced(client.clone(), NAMESPACE);
    let started = Instant::now();
    wait_for(Duration::from_secs(120), || async {
        let phase = pods.get(name).await.ok()?.status?.phase?;
        (phase == "Running").then_some(())
    })
    .await
    .with_context(|| {
        format!(
            "pod {NAMESPACE}/{name} did not run within 120s; see {}/logs/kubelet.log",
            dir.display()
        )
    })?;
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), NAMESPACE);
    let pv_name = claims
        .get(claim_name)
        .await?
        .spec
        .and_then(|s| s.volume_name)
        .unwrap_or_default();
    let state = crate::demo_driver::state_dir(dir, NODE_NAME);
    let proof = wait_for(Duration::from_secs(30), || async {
        let volumes = testenv::read_hostpath_volumes(&state).ok()?;
        let volume = volumes.into_iter().find(|v| v.vol_name == pv_name)?;
        let file = Path::new(&volume.vol_path).join("hello");
        let text = std::fs::read_to_string(&file).ok()?;
        Some((file, text))
    })
    .await
    .with_context(|| format!("the volume of {pv_name} holds no file from pod {name}"))?;
    println!(
        "  running after {:.1}s; on the host, {} says: {}",
        started.elapsed().as_secs_f64(),
        proof.0.display(),
        proof.1.trim_end()
    );
    Ok(())
}

/// Creates any object from its JSON form.
async fn create(client: &Client, obj: serde_json::Value) -> Result<()> {
    let kind = obj["kind"].as_str().unwrap_or_default().to_string();
    let name = obj["metadata"]["name"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let result = match kind.as_str() {
        "Namespace" => Api::all(client.clone())
            .create(
                &PostParams::default(),
                &serde_json::from_value::<k8s_openapi::api::core::v1::Namespace>(obj)?,
            )
            .await
            .map(drop),
        "StorageClass" => Api::all(client.clone())
            .create(
                &PostParams::default(),
                &serde_json::from_value::<StorageClass>(obj)?,
            )
            .await
            .map(drop),
        "PersistentVolumeClaim" => Api::namespaced(client.clone(), NAMESPACE)
            .create(
                &PostParams::default(),
                &serde_json::from_value::<PersistentVolumeClaim>(obj)?,
            )
            .await
            .map(drop),
        "Pod" => Api::namespaced(client.clone(), NAMESPACE)
            .create(&PostParams::default(), &serde_json::from_value::<Pod>(obj)?)
            .await
            .map(drop),
        other => bail!("demo cannot create {other}"),
    };
    result.with_context(|| format!("creating {kind} {name}"))
}

/// Polls `f` for up to 30 s; `None` if it never answered.
async fn wait<T, F, Fut>(f: F) -> Option<T>
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    wait_for(Duration::from_secs(30), f).await
}

/// Polls `f` for up to `timeout`; `None` if it never answered.
async fn wait_for<T, F, Fut>(timeout: Duration, f: F) -> Option<T>
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = Instant::now() + timeout;
    while Instant::now() < deadline {
        if let Some(v) = f().await {
            return Some(v);
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    None
}

fn heading(text: &str) {
    println!("\n== {text}");
}
