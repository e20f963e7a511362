//! Distributed provisioning, beyond upstream: the CSIStorageCapacity objects of a deleted node
//! are removed by one surviving instance ([`capacity::orphans`]), whatever owns them.
//!
//! Each poll interval every instance asks whether the instances named before it still have
//! their node (one list of one Node by name each, allowed by the shipped RBAC); the first that
//! does is the one that cleans up, so normally only the first instance lists all Nodes, once
//! per interval.

use std::collections::BTreeSet;
use std::time::Duration;

use capacity::orphans::{ahead_of, node_of, orphans};
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::api::storage::v1::CSIStorageCapacity;
use kube::api::{DeleteParams, ListParams};
use kube::runtime::reflector::Store;
use kube::{Api, Client};
use tokio_util::sync::CancellationToken;

/// Sweeps every `every` until `cancel`.
pub async fn run(
    client: Client,
    namespace: String,
    peers: Store<CSIStorageCapacity>,
    own: String,
    every: Duration,
    cancel: CancellationToken,
) {
    let mut tick = tokio::time::interval(every);
    // Not at once: an instance that just started may not have seen its peers' objects yet and
    // would take itself for the first one alive.
    tick.tick().await;
    loop {
        tokio::select! {
            _ = cancel.cancelled() => return,
            _ = tick.tick() => {}
        }
        if let Err(e) = sweep(&client, &namespace, &peers, &own).await {
            tracing::warn!(error = %e, "Cannot check for capacity objects of deleted nodes; trying again next interval");
        }
    }
}

/// One sweep: returns how many objects it deleted.
async fn sweep(
    client: &Client,
    namespace: &str,
    peers: &Store<CSIStorageCapacity>,
    own: &str,
) -> Result<usize, kube::Error> {
    let objects = peers.state();
    let pairs: Vec<(&str, &str)> = objects
        .iter()
        .filter_map(|o| {
            let managed_by = o
                .metadata
                .labels
                .as_ref()?
                .get(capacity::MANAGED_BY_LABEL)?;
            Some((o.metadata.name.as_deref()?, managed_by.as_str()))
        })
        .collect();
    let instances: BTreeSet<&str> = pairs.iter().map(|(_, m)| *m).chain([own]).collect();
    for instance in ahead_of(own, &instances) {
        // A shortened name cannot be looked up: count it as alive and leave the work to it.
        let Some(node) = node_of(instance) else {
            return Ok(0);
        };
        if node_exists(client, node).await? {
            return Ok(0);
        }
    }
    let nodes = node_names(client).await?;
    let api: Api<CSIStorageCapacity> = Api::namespaced(client.clone(), namespace);
    let mut deleted = 0;
    for name in orphans(&pairs, &nodes) {
        let managed_by = pairs.iter().find(|(n, _)| *n == name).map(|(_, m)| *m);
        match api.delete(name, &DeleteParams::default()).await {
            Ok(_) => {
                deleted += 1;
                tracing::info!(object = %name, managed_by = ?managed_by,
                    "Deleted CSIStorageCapacity of a node that no longer exists");
            }
            Err(kube::Error::Api(e)) if e.code == 404 => {}
            Err(e) => return Err(e),
        }
    }
    Ok(deleted)
}

async fn node_exists(client: &Client, node: &str) -> Result<bool, kube::Error> {
    let nodes: Api<Node> = Api::all(client.clone());
    let found = nodes
        .list_metadata(&ListParams::default().fields(&format!("metadata.name={node}")))
        .await?;
    Ok(!found.items.is_empty())
}

async fn node_names(client: &Client) -> Result<BTreeSet<String>, kube::Error> {
    let nodes: Api<Node> = Api::all(client.clone());
    let mut names = BTreeSet::new();
    let mut params = ListParams::default().limit(500);
    loop {
        let page = nodes.list_metadata(&params).await?;
        names.extend(page.items.into_iter().filter_map(|n| n.metadata.name));
        match page.metadata.continue_.filter(|c| !c.is_empty()) {
            Some(token) => params = params.continue_token(&token),
            None => return Ok(names),
        }
    }
}
