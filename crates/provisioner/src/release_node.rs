//! `csi-provisioner release-node NODE [--driver-name NAME] [--dry-run=false] [--kubeconfig PATH]`:
//! the volumes of a node that is gone for good, released the way the seed README describes by
//! hand. Lists the PVs pinned to the node ([`provisioning::lost_node::pinned_to`]); with
//! `--dry-run=false` force-deletes each PV (finalizers removed: no instance on that node will
//! ever delete its volume) and creates its claim again without the volume, so it is provisioned
//! wherever it fits now; claims sent to the node without a volume yet are let go of
//! ([`provisioning::lost_node::claim_step`]). The Node object must be gone: that is the
//! administrator's word that the node will not come back.

use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Node, PersistentVolume, PersistentVolumeClaim};
use kube::api::{DeleteParams, ListParams, Patch, PatchParams, PostParams, Preconditions};
use kube::{Api, Client, ResourceExt};
use provisioning::lost_node::{
    ClaimStep, claim_step, driver_of, holds_volume_of, pinned_to, recreated,
};

/// The subcommand's name, the first argument.
pub const SUBCOMMAND: &str = "release-node";

const USAGE: &str = "usage: csi-provisioner release-node NODE [--driver-name NAME] [--dry-run=true|false] [--kubeconfig PATH]";

/// The subcommand's arguments.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Args {
    pub node: String,
    /// Only PVs of this CSI driver; all CSI drivers when `None`.
    pub driver: Option<String>,
    /// Print what would be done, change nothing (the default).
    pub dry_run: bool,
    pub kubeconfig: Option<String>,
}

/// Why the arguments were refused (exit status 2).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}\n{USAGE}")]
pub struct UsageError(String);

/// Why the release stopped (exit status 1).
#[derive(Debug, thiserror::Error)]
pub enum ReleaseError {
    #[error(
        "node {0:?} still exists: release its volumes only when it will never come back, and delete the Node object first (kubectl delete node {0})"
    )]
    NodeExists(String),
    #[error("{what}: {source}")]
    Api {
        what: String,
        #[source]
        source: kube::Error,
    },
    #[error(transparent)]
    Kubeconfig(#[from] crate::kubeconfig::KubeconfigError),
    #[error("cannot create a Kubernetes client: {0}")]
    Client(#[source] kube::Error),
    #[error("claim {0} was deleted but is still there after 60s; create it again by hand")]
    ClaimStuck(String),
    #[error(
        "these credentials may not {0}; nothing was changed. Run release-node as a cluster administrator (--kubeconfig), not as the provisioner's ServiceAccount"
    )]
    NotAllowed(String),
}

/// What the release writes, as (verb, resource): all of it is asked for before the first
/// write, so that missing rights stop it before a PV is gone and its claim not yet re-created.
const WRITES: [(&str, &str); 6] = [
    ("delete", "persistentvolumes"),
    ("patch", "persistentvolumes"),
    ("delete", "persistentvolumeclaims"),
    ("patch", "persistentvolumeclaims"),
    ("create", "persistentvolumeclaims"),
    ("update", "persistentvolumeclaims"),
];

/// Asks the API server (SelfSubjectAccessReview, open to every user) whether these
/// credentials may make every write of [`WRITES`], in every namespace.
async fn check_rights(client: &Client) -> Result<(), ReleaseError> {
    use k8s_openapi::api::authorization::v1::{
        ResourceAttributes, SelfSubjectAccessReview, SelfSubjectAccessReviewSpec,
    };
    let reviews: Api<SelfSubjectAccessReview> = Api::all(client.clone());
    let mut missing = Vec::new();
    for (verb, resource) in WRITES {
        let review = SelfSubjectAccessReview {
            spec: SelfSubjectAccessReviewSpec {
                resource_attributes: Some(ResourceAttributes {
                    verb: Some(verb.into()),
                    resource: Some(resource.into()),
                    ..Default::default()
                }),
                ..Default::default()
            },
            ..Default::default()
        };
        let answer = reviews
            .create(&PostParams::default(), &review)
            .await
            .map_err(|source| ReleaseError::Api {
                what: format!("asking whether these credentials may {verb} {resource}"),
                source,
            })?;
        if !answer.status.is_some_and(|s| s.allowed) {
            missing.push(format!("{verb} {resource}"));
        }
    }
    match missing.is_empty() {
        true => Ok(()),
        false => Err(ReleaseError::NotAllowed(missing.join(", "))),
    }
}

/// Whether the command line asks for this subcommand.
pub fn requested(args: &[String]) -> bool {
    crate::subcommand::requested(args, SUBCOMMAND)
}

/// Parses the arguments after the subcommand.
pub fn parse(args: &[String]) -> Result<Args, UsageError> {
    let mut node = None;
    let mut driver = None;
    let mut dry_run = true;
    let mut kubeconfig = std::env::var("KUBECONFIG").ok().filter(|k| !k.is_empty());
    let mut walk = crate::subcommand::Walk::new(args);
    while let Some((flag, inline)) = walk.next_arg() {
        let mut value = || walk.value(flag, inline).map_err(UsageError);
        match flag {
            "--driver-name" => driver = Some(value()?),
            "--kubeconfig" => kubeconfig = Some(value()?),
            "--dry-run" => {
                dry_run = match inline {
                    None | Some("true") => true,
                    Some("false") => false,
                    Some(other) => {
                        return Err(UsageError(format!(
                            "invalid --dry-run {other:?}: use true or false"
                        )));
                    }
                }
            }
            f if f.starts_with('-') => return Err(UsageError(format!("unknown flag: {f}"))),
            name if node.is_none() => node = Some(name.to_string()),
            extra => return Err(UsageError(format!("unexpected argument: {extra}"))),
        }
    }
    match node {
        Some(node) if !node.is_empty() => Ok(Args {
            node,
            driver,
            dry_run,
            kubeconfig,
        }),
        _ => Err(UsageError("the node name is required".into())),
    }
}

/// Runs the release, printing each step. Returns the number of PVs found.
pub async fn run(args: &Args) -> Result<usize, ReleaseError> {
    let config = crate::kubeconfig::load(args.kubeconfig.as_deref(), None).await?;
    let client = Client::try_from(config).map_err(ReleaseError::Client)?;
    let api_err = |what: String| move |source| ReleaseError::Api { what, source };
    let nodes: Api<Node> = Api::all(client.clone());
    let same_name = ListParams::default().fields(&format!("metadata.name={}", args.node));
    let found = nodes
        .list_metadata(&same_name)
        .await
        .map_err(api_err("listing Nodes".into()))?;
    if !found.items.is_empty() {
        return Err(ReleaseError::NodeExists(args.node.clone()));
    }
    let pvs: Api<PersistentVolume> = Api::all(client.clone());
    let pinned: Vec<PersistentVolume> = pvs
        .list(&ListParams::default())
        .await
        .map_err(api_err("listing PersistentVolumes".into()))?
        .items
        .into_iter()
        .filter(|pv| pinned_to(pv, &args.node))
        .filter(|pv| match &args.driver {
            Some(d) => driver_of(pv) == Some(d.as_str()),
            None => driver_of(pv).is_some(),
        })
        .collect();
    println!(
        "node {}: {} PersistentVolume(s) pinned to it",
        args.node,
        pinned.len()
    );
    for pv in &pinned {
        let claim = claim_of(pv)
            .map(|(ns, name)| format!("claim {ns}/{name}"))
            .unwrap_or_else(|| "no claim".into());
        println!(
            "  {} (driver {}, {claim})",
            pv.name_any(),
            driver_of(pv).unwrap_or_default()
        );
    }
    let claims: Api<PersistentVolumeClaim> = Api::all(client.clone());
    let sent: Vec<(PersistentVolumeClaim, ClaimStep)> = claims
        .list(&ListParams::default())
        .await
        .map_err(api_err("listing PersistentVolumeClaims".into()))?
        .items
        .into_iter()
        .map(|c| {
            let step = claim_step(&c, &args.node, args.driver.as_deref());
            (c, step)
        })
        .filter(|(_, step)| *step != ClaimStep::Keep)
        .collect();
    println!(
        "node {}: {} claim(s) sent to it without a volume",
        args.node,
        sent.len()
    );
    for (claim, step) in &sent {
        let what = match step {
            ClaimStep::LetGo => "deleted, held by the creating-volume finalizer",
            _ => "waiting for its volume",
        };
        println!(
            "  claim {}/{} ({what})",
            claim.namespace().unwrap_or_default(),
            claim.name_any()
        );
    }
    if args.dry_run {
        println!(
            "dry run: nothing changed. With --dry-run=false each PV is deleted with its finalizers removed (its data stays on the lost node's disks; scrub them before reuse) and its claim is created again without a volume, to be provisioned wherever it fits; each waiting claim loses its selected node, so the scheduler picks another, and each deleted one loses the creating-volume finalizer."
        );
        return Ok(pinned.len());
    }
    check_rights(&client).await?;
    for pv in &pinned {
        release(&client, pv).await?;
    }
    for (claim, step) in &sent {
        let_go_of(&client, claim, *step).await?;
    }
    Ok(pinned.len())
}

/// Sends a waiting claim back to the scheduler, or drops our finalizer from a deleted one.
async fn let_go_of(
    client: &Client,
    claim: &PersistentVolumeClaim,
    step: ClaimStep,
) -> Result<(), ReleaseError> {
    use provisioning::names::{ANN_SELECTED_NODE, CREATING_VOLUME_FINALIZER};
    let (ns, name) = (claim.namespace().unwrap_or_default(), claim.name_any());
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), &ns);
    let api_err = |what: &str| {
        let what = format!("{what} claim {ns}/{name}");
        move |source| ReleaseError::Api { what, source }
    };
    match step {
        ClaimStep::Keep => {}
        ClaimStep::Unselect => {
            let unselect =
                serde_json::json!({"metadata": {"annotations": {ANN_SELECTED_NODE: null}}});
            claims
                .patch(&name, &PatchParams::default(), &Patch::Merge(&unselect))
                .await
                .map_err(api_err("removing selected-node from"))?;
            println!("  claim {ns}/{name}: selected node removed; the scheduler picks again");
        }
        ClaimStep::LetGo => {
            // Only our entry goes; the resourceVersion makes a concurrent change fail instead
            // of being overwritten.
            let mut kept = claim.clone();
            kept.metadata.managed_fields = None;
            kept.metadata
                .finalizers
                .get_or_insert_with(Vec::new)
                .retain(|f| f != CREATING_VOLUME_FINALIZER);
            claims
                .replace(&name, &PostParams::default(), &kept)
                .await
                .map_err(api_err("removing the creating-volume finalizer from"))?;
            println!("  claim {ns}/{name}: creating-volume finalizer removed");
        }
    }
    Ok(())
}

/// The claim a PV is bound to, as (namespace, name).
fn claim_of(pv: &PersistentVolume) -> Option<(String, String)> {
    let r = pv.spec.as_ref()?.claim_ref.as_ref()?;
    Some((r.namespace.clone()?, r.name.clone()?))
}

/// Force-deletes one PV and creates its claim again if that claim still holds this PV's volume
/// ([`holds_volume_of`]).
async fn release(client: &Client, pv: &PersistentVolume) -> Result<(), ReleaseError> {
    let name = pv.name_any();
    let api_err = |what: String| move |source| ReleaseError::Api { what, source };
    let claim = match claim_of(pv) {
        Some((ns, claim_name)) => {
            let claims: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), &ns);
            claims
                .get_opt(&claim_name)
                .await
                .map_err(api_err(format!("reading claim {ns}/{claim_name}")))?
                .filter(|c| holds_volume_of(c, pv))
        }
        None => None,
    };
    let pvs: Api<PersistentVolume> = Api::all(client.clone());
    force_delete(&pvs, &name, pv.metadata.uid.as_deref())
        .await
        .map_err(api_err(format!("deleting PV {name}")))?;
    println!("  {name}: deleted, finalizers removed");
    let Some(claim) = claim else {
        return Ok(());
    };
    let ns = claim.namespace().unwrap_or_default();
    let claim_name = claim.name_any();
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), &ns);
    force_delete(&claims, &claim_name, claim.metadata.uid.as_deref())
        .await
        .map_err(api_err(format!("deleting claim {ns}/{claim_name}")))?;
    let deadline = Instant::now() + Duration::from_secs(60);
    while claims
        .get_opt(&claim_name)
        .await
        .map_err(api_err(format!("reading claim {ns}/{claim_name}")))?
        .is_some_and(|c| c.metadata.uid == claim.metadata.uid)
    {
        if Instant::now() > deadline {
            return Err(ReleaseError::ClaimStuck(format!("{ns}/{claim_name}")));
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let created = claims
        .create(&PostParams::default(), &recreated(&claim))
        .await
        .map_err(api_err(format!("creating claim {ns}/{claim_name} again")))?;
    println!(
        "  claim {ns}/{claim_name}: created again (uid {}) without a volume; it is provisioned wherever it fits now",
        created.metadata.uid.unwrap_or_default()
    );
    Ok(())
}

/// Delete now, then drop every finalizer: nothing on the lost node will ever release them.
/// Both only for the incarnation `uid` that was read: an object created again under the same
/// name meanwhile (a StatefulSet's claim) is not touched (409).
async fn force_delete<K>(api: &Api<K>, name: &str, uid: Option<&str>) -> Result<(), kube::Error>
where
    K: kube::Resource + Clone + k8s_openapi::serde::de::DeserializeOwned + std::fmt::Debug,
{
    let now = DeleteParams {
        grace_period_seconds: Some(0),
        preconditions: uid.map(|uid| Preconditions {
            uid: Some(uid.to_string()),
            resource_version: None,
        }),
        ..Default::default()
    };
    match api.delete(name, &now).await {
        Ok(_) => {}
        Err(kube::Error::Api(e)) if e.code == 404 => return Ok(()),
        Err(e) => return Err(e),
    }
    // A patch naming the UID fails on any other incarnation.
    let mut no_finalizers = serde_json::json!({"metadata": {"finalizers": null}});
    if let Some(uid) = uid {
        no_finalizers["metadata"]["uid"] = uid.into();
    }
    match api
        .patch(name, &PatchParams::default(), &Patch::Merge(&no_finalizers))
        .await
    {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(e)) if e.code == 404 => Ok(()),
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn parse_table() {
        let got = parse(&args(&["n1"])).unwrap();
        assert_eq!(
            (got.node.as_str(), got.dry_run, got.driver),
            ("n1", true, None)
        );
        let got = parse(&args(&["--dry-run=false", "n1", "--driver-name", "d"])).unwrap();
        assert_eq!(
            (got.node.as_str(), got.dry_run, got.driver.as_deref()),
            ("n1", false, Some("d"))
        );
        let got = parse(&args(&["n1", "--kubeconfig=/k"])).unwrap();
        assert_eq!(got.kubeconfig.as_deref(), Some("/k"));
        for (bad, message) in [
            (&[][..], "the node name is required"),
            (&["n1", "n2"][..], "unexpected argument: n2"),
            (&["n1", "--dry-run=maybe"][..], "invalid --dry-run"),
            (&["n1", "--force"][..], "unknown flag: --force"),
        ] {
            let err = parse(&args(bad)).unwrap_err().to_string();
            assert!(err.starts_with(message), "{bad:?}: {err}");
            assert!(err.ends_with(USAGE));
        }
        assert!(requested(&args(&["csi-provisioner", "release-node"])));
    }
}
