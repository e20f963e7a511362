//! Setting up and sweeping the cluster between measured runs (admin client, no rate limit).

use std::fmt::Debug;
use std::future::Future;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use futures::{StreamExt, TryStreamExt, stream};
use k8s_openapi::api::core::v1::{Namespace, Node, PersistentVolume, PersistentVolumeClaim, Pod};
use k8s_openapi::api::storage::v1::{CSIDriver, CSINode, StorageClass};
use kube::api::{DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::{Api, Client, Resource, ResourceExt};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::json;

use super::objects::{self, BENCH_LABEL, TOPOLOGY_KEY};

/// Requests the admin client keeps in flight for bulk work.
pub const PARALLEL: usize = 32;

/// Creates `objs` with [`PARALLEL`] requests in flight; returns them as created.
pub async fn create_all<K>(api: &Api<K>, objs: Vec<K>) -> Result<Vec<K>>
where
    K: Resource + Clone + DeserializeOwned + Serialize + Debug,
{
    stream::iter(objs)
        .map(|obj| async move {
            let name = obj.meta().name.clone().unwrap_or_default();
            api.create(&PostParams::default(), &obj)
                .await
                .with_context(|| format!("creating {name}"))
        })
        .buffered(PARALLEL)
        .try_collect()
        .await
}

pub async fn create_namespace(client: &Client, name: &str) -> Result<()> {
    let ns: Namespace = serde_json::from_value(json!({"metadata": {"name": name}}))?;
    Api::<Namespace>::all(client.clone())
        .create(&PostParams::default(), &ns)
        .await
        .with_context(|| format!("creating namespace {name}"))?;
    Ok(())
}

/// Exactly `n` fake nodes (`node-1`..`node-n`) whose CSINodes have an entry for `driver`;
/// fake nodes past `n` are deleted so the scheduler's choice is the scenario's.
pub async fn ensure_nodes(client: &Client, n: usize, driver: &str) -> Result<Vec<String>> {
    let names = objects::node_names(n);
    let chunks: Vec<Vec<&str>> = names
        .chunks(names.len().div_ceil(8).max(1))
        .map(|c| c.iter().map(String::as_str).collect())
        .collect();
    stream::iter(chunks)
        .map(|chunk| async move {
            testenv::try_create_fake_nodes(client, driver, TOPOLOGY_KEY, &chunk)
                .await
                .map(drop)
        })
        .buffer_unordered(8)
        .try_collect::<Vec<()>>()
        .await
        .context("creating fake nodes")?;
    let nodes: Api<Node> = Api::all(client.clone());
    let existing: Vec<String> = nodes
        .list_metadata(&ListParams::default())
        .await?
        .items
        .into_iter()
        .map(|n| n.name_any())
        .collect();
    let extra = objects::extra_nodes(&existing, n);
    let csi_nodes: Api<CSINode> = Api::all(client.clone());
    stream::iter(extra)
        .map(|name| {
            let (nodes, csi_nodes) = (nodes.clone(), csi_nodes.clone());
            async move {
                ignore_not_found(nodes.delete(&name, &DeleteParams::default()).await)?;
                ignore_not_found(csi_nodes.delete(&name, &DeleteParams::default()).await)
            }
        })
        .buffer_unordered(PARALLEL)
        .try_collect::<Vec<()>>()
        .await
        .context("deleting extra fake nodes")?;
    Ok(names)
}

pub async fn create_csi_driver(
    client: &Client,
    driver: &str,
    storage_capacity: bool,
) -> Result<()> {
    testenv::try_create_csi_driver(client, driver, storage_capacity).await?;
    Ok(())
}

fn ignore_not_found<T>(r: Result<T, kube::Error>) -> Result<()> {
    match r {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
        Err(e) => Err(e.into()),
    }
}

/// Deletes the objects named, then drops their finalizers, so nothing waits for a controller
/// (or a kubelet that does not exist).
pub async fn force_delete<K>(api: &Api<K>, names: Vec<String>) -> Result<()>
where
    K: Resource + Clone + DeserializeOwned + Debug,
{
    let dp = DeleteParams {
        grace_period_seconds: Some(0),
        ..Default::default()
    };
    let patch = json!({"metadata": {"finalizers": null}});
    stream::iter(names)
        .map(|name| {
            let (dp, patch) = (&dp, &patch);
            async move {
                // Delete first: a protection controller re-adds finalizers to live objects.
                ignore_not_found(api.delete(&name, dp).await)?;
                ignore_not_found(
                    api.patch(&name, &PatchParams::default(), &Patch::Merge(patch))
                        .await,
                )
            }
        })
        .buffer_unordered(PARALLEL)
        .try_collect::<Vec<()>>()
        .await?;
    Ok(())
}

/// Removes everything one measured run created: pods, claims, the driver's volumes, its
/// classes, the CSIDriver and the namespace. Run it after the provisioner has stopped.
pub async fn sweep(client: &Client, namespace: &str, driver: &str) -> Result<()> {
    let pods: Api<Pod> = Api::namespaced(client.clone(), namespace);
    let names = pods.list_metadata(&ListParams::default()).await?;
    force_delete(&pods, names.items.iter().map(|p| p.name_any()).collect()).await?;
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), namespace);
    let names = claims.list_metadata(&ListParams::default()).await?;
    force_delete(&claims, names.items.iter().map(|p| p.name_any()).collect()).await?;
    let pvs: Api<PersistentVolume> = Api::all(client.clone());
    let ours: Vec<String> = pvs
        .list(&ListParams::default())
        .await?
        .items
        .into_iter()
        .filter(|pv| pv_driver(pv) == Some(driver))
        .map(|pv| pv.name_any())
        .collect();
    force_delete(&pvs, ours).await?;
    let classes: Api<StorageClass> = Api::all(client.clone());
    let selector = ListParams::default().labels(&format!("{BENCH_LABEL}={driver}"));
    for sc in classes.list_metadata(&selector).await?.items {
        ignore_not_found(
            classes
                .delete(&sc.name_any(), &DeleteParams::default())
                .await,
        )?;
    }
    let drivers: Api<CSIDriver> = Api::all(client.clone());
    ignore_not_found(drivers.delete(driver, &DeleteParams::default()).await)?;
    let namespaces: Api<Namespace> = Api::all(client.clone());
    ignore_not_found(namespaces.delete(namespace, &DeleteParams::default()).await)
}

pub fn pv_driver(pv: &PersistentVolume) -> Option<&str> {
    Some(pv.spec.as_ref()?.csi.as_ref()?.driver.as_str())
}

/// Polls `check` every `every` until it returns `Some`, or fails after `timeout`.
pub async fn poll<T, F, Fut>(what: &str, timeout: Duration, every: Duration, check: F) -> Result<T>
where
    F: Fn() -> Fut,
    Fut: Future<Output = Result<Option<T>>>,
{
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(v) = check().await? {
            return Ok(v);
        }
        if Instant::now() >= deadline {
            bail!("timed out after {}s waiting for {what}", timeout.as_secs());
        }
        tokio::time::sleep(every).await;
    }
}

/// The number of volumes the driver holds (ListVolumes over its socket).
pub async fn driver_volume_count(socket: &std::path::Path) -> Result<usize> {
    Ok(driver_volume_ids(socket).await?.len())
}

/// Every volume id the driver holds (ListVolumes, all pages).
pub async fn driver_volume_ids(
    socket: &std::path::Path,
) -> Result<std::collections::BTreeSet<String>> {
    let endpoint = format!("unix://{}", socket.display());
    let client = csi::Client::connect(&endpoint, Default::default())
        .await
        .with_context(|| format!("connecting to {endpoint}"))?;
    let mut ids = std::collections::BTreeSet::new();
    let mut token = String::new();
    loop {
        let page = client
            .list_volumes(csi::v1::ListVolumesRequest {
                max_entries: 0,
                starting_token: token.clone(),
            })
            .await
            .context("ListVolumes")?;
        ids.extend(
            page.entries
                .into_iter()
                .filter_map(|e| e.volume.map(|v| v.volume_id)),
        );
        if page.next_token.is_empty() {
            return Ok(ids);
        }
        token = page.next_token;
    }
}
