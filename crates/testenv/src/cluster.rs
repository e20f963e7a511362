//! Async helpers that tests call with an admin client.

use std::collections::BTreeMap;
use std::fmt::Debug;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Event, Namespace, Node};
use k8s_openapi::api::storage::v1::{CSIDriver, CSINode};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{ListParams, Patch, PatchParams, PostParams};
use kube::{Api, Client, Resource};
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::Error;
use crate::objects;

/// How long [`wait_for`] waits before failing the test.
pub const WAIT_TIMEOUT: Duration = Duration::from_secs(60);

/// A fake node as created: its name and labels.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FakeNode {
    pub name: String,
    pub labels: BTreeMap<String, String>,
}

/// Creates a namespace `<prefix>-<random>` and returns its name.
///
/// # Panics
/// When the API server rejects it.
pub async fn create_namespace(client: &Client, prefix: &str) -> String {
    let name = objects::namespace_name(prefix, &objects::random_suffix(6));
    let ns = Namespace {
        metadata: ObjectMeta {
            name: Some(name.clone()),
            ..Default::default()
        },
        ..Default::default()
    };
    let api: Api<Namespace> = Api::all(client.clone());
    if let Err(e) = api.create(&PostParams::default(), &ns).await {
        panic!("creating namespace {name}: {e}");
    }
    name
}

/// Creates (or completes) fake nodes with their CSINode entries for `driver`; see
/// [`try_create_fake_nodes`].
///
/// # Panics
/// When the API server rejects an object.
pub async fn create_fake_nodes(
    client: &Client,
    driver: &str,
    topology_key: &str,
    names: &[&str],
) -> Vec<FakeNode> {
    try_create_fake_nodes(client, driver, topology_key, names)
        .await
        .unwrap_or_else(|e| panic!("creating fake nodes {names:?}: {e}"))
}

/// For each name: a Ready, untainted Node with allocatable cpu/memory/pods and labels
/// `kubernetes.io/hostname=<name>`, `<topology_key>=<name>`; and a CSINode with an entry for
/// `driver` (`nodeID = name`, `topologyKeys = [topology_key]`). Idempotent: existing nodes get
/// the labels merged in, existing CSINodes get the driver entry added.
pub async fn try_create_fake_nodes(
    client: &Client,
    driver: &str,
    topology_key: &str,
    names: &[&str],
) -> Result<Vec<FakeNode>, Error> {
    let csi_nodes: Api<CSINode> = Api::all(client.clone());
    let mut out = Vec::with_capacity(names.len());
    for name in names {
        let node = create_or_label_node(client, name, topology_key).await?;
        let wanted = objects::csi_node(name, driver, topology_key);
        match csi_nodes.create(&PostParams::default(), &wanted).await {
            Ok(_) => {}
            Err(e) if is_conflict(&e) => {
                let existing = csi_nodes.get(name).await?;
                let entry = objects::csi_node_driver(name, driver, topology_key);
                if let Some(updated) = objects::with_driver(&existing, entry) {
                    csi_nodes
                        .replace(name, &PostParams::default(), &updated)
                        .await?;
                }
            }
            Err(e) => return Err(e.into()),
        }
        out.push(FakeNode {
            name: name.to_string(),
            labels: node.metadata.labels.unwrap_or_default(),
        });
    }
    Ok(out)
}

/// Fake nodes as [`try_create_fake_nodes`] makes them, but with no CSINode entry: nodes where
/// no plugin of the driver runs, so no capacity is published for them.
pub async fn try_create_bare_nodes(
    client: &Client,
    topology_key: &str,
    names: &[&str],
) -> Result<Vec<FakeNode>, Error> {
    let mut out = Vec::with_capacity(names.len());
    for name in names {
        let node = create_or_label_node(client, name, topology_key).await?;
        out.push(FakeNode {
            name: name.to_string(),
            labels: node.metadata.labels.unwrap_or_default(),
        });
    }
    Ok(out)
}

/// Creates a fake node, or merges its labels into the existing one.
async fn create_or_label_node(
    client: &Client,
    name: &str,
    topology_key: &str,
) -> Result<Node, Error> {
    let patch = serde_json::json!({
        "metadata": {"labels": objects::node_labels(name, topology_key)}
    });
    let node = objects::fake_node(name, topology_key);
    create_or_merge(&Api::all(client.clone()), name, &node, &patch).await
}

/// Creates `obj`, or merge-patches the existing object of that name with `patch`.
async fn create_or_merge<K>(
    api: &Api<K>,
    name: &str,
    obj: &K,
    patch: &serde_json::Value,
) -> Result<K, Error>
where
    K: Resource + Clone + DeserializeOwned + Serialize + Debug,
{
    match api.create(&PostParams::default(), obj).await {
        Ok(created) => Ok(created),
        Err(e) if is_conflict(&e) => Ok(api
            .patch(name, &PatchParams::default(), &Patch::Merge(patch))
            .await?),
        Err(e) => Err(e.into()),
    }
}

/// Creates a CSIDriver (attachRequired false); see [`try_create_csi_driver`].
///
/// # Panics
/// When the API server rejects it.
pub async fn create_csi_driver(client: &Client, name: &str, storage_capacity: bool) -> CSIDriver {
    try_create_csi_driver(client, name, storage_capacity)
        .await
        .unwrap_or_else(|e| panic!("creating CSIDriver {name}: {e}"))
}

/// Creates a CSIDriver with `attachRequired: false` and the given `storageCapacity`;
/// if it exists, sets `storageCapacity` (the one field tests flip).
pub async fn try_create_csi_driver(
    client: &Client,
    name: &str,
    storage_capacity: bool,
) -> Result<CSIDriver, Error> {
    let patch = serde_json::json!({"spec": {"storageCapacity": storage_capacity}});
    let driver = objects::csi_driver(name, storage_capacity);
    create_or_merge(&Api::all(client.clone()), name, &driver, &patch).await
}

fn is_conflict(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == 409)
}

/// Polls the events in `namespace` until one on object `name` has `reason` and a message
/// containing `needle`, for up to [`WAIT_TIMEOUT`].
pub async fn wait_event(
    client: &Client,
    namespace: &str,
    name: &str,
    reason: &str,
    needle: &str,
) -> Event {
    let events: Api<Event> = Api::namespaced(client.clone(), namespace);
    let params =
        ListParams::default().fields(&format!("involvedObject.name={name},reason={reason}"));
    let deadline = Instant::now() + WAIT_TIMEOUT;
    loop {
        let found = events.list(&params).await.ok().and_then(|list| {
            list.items
                .into_iter()
                .find(|e| e.message.as_deref().is_some_and(|m| m.contains(needle)))
        });
        if let Some(event) = found {
            return event;
        }
        assert!(
            Instant::now() < deadline,
            "timed out after {}s waiting for event {reason} containing {needle:?} on {name}",
            WAIT_TIMEOUT.as_secs()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Polls `api.get(name)` until `done` holds and returns that object.
///
/// # Panics
/// After [`WAIT_TIMEOUT`], with `what` and the last object seen (or the last error).
pub async fn wait_for<K>(api: &Api<K>, name: &str, what: &str, done: impl Fn(&K) -> bool) -> K
where
    K: Resource + Clone + DeserializeOwned + Serialize + Debug,
    K::DynamicType: Default,
{
    let deadline = Instant::now() + WAIT_TIMEOUT;
    loop {
        let last = match api.get_opt(name).await {
            Ok(Some(obj)) if done(&obj) => return obj,
            Ok(Some(obj)) => serde_json::to_string_pretty(&obj).unwrap_or_else(|e| e.to_string()),
            Ok(None) => "not found".into(),
            Err(e) => format!("error: {e}"),
        };
        if Instant::now() >= deadline {
            panic!(
                "timed out after {}s waiting for {} {name} to {what}; last seen: {last}",
                WAIT_TIMEOUT.as_secs(),
                K::kind(&Default::default()),
            );
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
