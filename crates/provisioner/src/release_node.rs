//! `csi-provisioner release-node NODE [--driver-name NAME] [--dry-run=false] [--force]
//! [--state-file PATH] [--retry-timeout DURATION] [--kubeconfig PATH]`: the volumes of a node
//! that is gone for good, released the way the seed README describes by hand. Lists the PVs
//! pinned to the node ([`provisioning::lost_node::pinned_to`]); with `--dry-run=false`
//! force-deletes each PV (finalizers removed: no instance on that node will ever delete its
//! volume) and creates its claim again without the volume, so it is provisioned wherever it
//! fits now; a claim being deleted is let go instead, never created again
//! ([`provisioning::lost_node::pv_claim_step`]); claims sent to the node without a volume yet
//! are let go of ([`provisioning::lost_node::claim_step`]). The Node object must be gone (the
//! administrator's word that the node will not come back) and the node must show no signs of
//! life ([`provisioning::lost_node::life`]) unless `--force`.
//!
//! No claim is ever lost: before anything changes, every claim to create again is written, as
//! read, to the state file ([`provisioning::lost_node::record`]), which each step updates. A
//! refused create is retried with backoff for `--retry-timeout`; a claim still not created is
//! left in the file, the run exits non-zero naming it, and a re-run creates it from there.

use std::path::Path;
use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Node, PersistentVolume, PersistentVolumeClaim, Pod};
use k8s_openapi::api::storage::v1::CSIStorageCapacity;
use kube::api::{DeleteParams, ListParams, Patch, PatchParams, PostParams, Preconditions};
use kube::{Api, Client, ResourceExt};
use provisioning::lost_node::life::{Sign, signs_of_life};
use provisioning::lost_node::record::{EntryState, Record, ResumeStep, resume_step};
use provisioning::lost_node::{
    ClaimStep, PvClaimStep, claim_step, driver_of, finalizers_after, pinned_to, pv_claim_step,
    recreated, without_our_finalizers,
};

mod args;
pub use args::Args;

/// The subcommand's name, the first argument.
pub const SUBCOMMAND: &str = "release-node";

/// Why the release stopped (exit status 1).
#[derive(Debug, thiserror::Error)]
pub enum ReleaseError {
    #[error(
        "node {0:?} still exists: release its volumes only when it will never come back, and delete the Node object first (kubectl delete node {0})"
    )]
    NodeExists(String),
    #[error(
        "node {node:?} has no Node object but shows signs of life: {signs}. A running kubelet does not register its Node again until it restarts, so a deleted Node alone does not mean the machine is gone; nothing was changed. Make sure it is gone for good (its kubelet stopped, its pods garbage-collected), then run again, or pass --force to release anyway"
    )]
    Alive { node: String, signs: String },
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
    #[error(
        "claim {0} was deleted but is still there after 60s; run release-node again later (its spec is kept in the state file)"
    )]
    ClaimStuck(String),
    #[error(
        "these credentials may not {0}; nothing was changed. Run release-node as a cluster administrator (--kubeconfig), not as the provisioner's ServiceAccount"
    )]
    NotAllowed(String),
    #[error("state file {path}: {what}: {source}")]
    StateFile {
        path: String,
        what: &'static str,
        #[source]
        source: std::io::Error,
    },
    #[error(
        "state file {path} is not a release-node record ({source}); move it away or choose another --state-file"
    )]
    StateFileInvalid {
        path: String,
        #[source]
        source: serde_json::Error,
    },
    #[error(
        "state file {path} records the release of node {recorded:?}, not {node:?}: choose another --state-file"
    )]
    StateFileOfOtherNode {
        path: String,
        recorded: String,
        node: String,
    },
    #[error(
        "claim(s) {claims} could not be created again; their specs are in {path}. Fix the cause shown above, then run `csi-provisioner release-node {node} --dry-run=false --state-file {path}` again: it creates them from the file"
    )]
    NotRecreated {
        claims: String,
        node: String,
        path: String,
    },
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

/// A pinned PV, its claim as read, and what happens to that claim.
struct Pinned {
    pv: PersistentVolume,
    claim: Option<PersistentVolumeClaim>,
    step: PvClaimStep,
}

/// Runs the release, printing each step. Returns the number of PVs found.
pub async fn run(args: &Args) -> Result<usize, ReleaseError> {
    let config = crate::kubeconfig::load(args.cluster.kubeconfig.as_deref(), None).await?;
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
    let mut pinned = Vec::new();
    for pv in pvs
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
    {
        let claim = match claim_of(&pv) {
            Some((ns, name)) => Api::<PersistentVolumeClaim>::namespaced(client.clone(), &ns)
                .get_opt(&name)
                .await
                .map_err(api_err(format!("reading claim {ns}/{name}")))?,
            None => None,
        };
        let step = pv_claim_step(claim.as_ref(), &pv);
        pinned.push(Pinned { pv, claim, step });
    }
    println!(
        "node {}: {} PersistentVolume(s) pinned to it",
        args.node,
        pinned.len()
    );
    for p in &pinned {
        let claim = match (claim_of(&p.pv), p.step) {
            (None, _) => "no claim".to_string(),
            (Some((ns, name)), PvClaimStep::Recreate) => {
                format!("claim {ns}/{name}, to be created again")
            }
            (Some((ns, name)), PvClaimStep::LetGo) => {
                format!("claim {ns}/{name}, being deleted: let go, not created again")
            }
            (Some((ns, name)), PvClaimStep::PvOnly) => {
                format!("claim {ns}/{name}, not holding this volume: left alone")
            }
        };
        println!(
            "  {} (driver {}, {claim})",
            p.pv.name_any(),
            driver_of(&p.pv).unwrap_or_default()
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
        "node {}: {} claim(s) sent to it without a volume or holding its finalizer",
        args.node,
        sent.len()
    );
    for (claim, step) in &sent {
        let what = match step {
            ClaimStep::LetGo => "deleted, held by our finalizers",
            ClaimStep::Forget => "moved on, still holding the lost node's finalizer",
            _ => "waiting for its volume",
        };
        println!(
            "  claim {}/{} ({what})",
            claim.namespace().unwrap_or_default(),
            claim.name_any()
        );
    }
    let path = args.state_file().display().to_string();
    let mut record = load_record(&args.state_file(), &args.node)?;
    let earlier = record.pending();
    if !earlier.is_empty() {
        println!(
            "state file {path}: {} claim(s) an earlier run did not finish",
            earlier.len()
        );
        for &i in &earlier {
            println!("  claim {} (to be created again)", record.claims[i].key());
        }
    }
    if args.dry_run {
        match look_for_life(&client, &args.node).await {
            Ok(signs) if signs.is_empty() => println!("node {}: no signs of life", args.node),
            Ok(signs) => println!(
                "node {}: signs of life, a release would be refused without --force: {}",
                args.node,
                describe(&signs)
            ),
            Err(e) => println!("node {}: could not look for signs of life: {e}", args.node),
        }
        println!(
            "dry run: nothing changed. With --dry-run=false each claim to create again is first recorded in {path}; each PV is deleted with its finalizers removed (its data stays on the lost node's disks; scrub them before reuse) and its claim is created again without a volume, to be provisioned wherever it fits (a claim being deleted is let go instead); each waiting claim loses its selected node, so the scheduler picks another, each deleted one loses the creating-volume finalizer, and every claim loses the lost node's own finalizer."
        );
        return Ok(pinned.len());
    }
    check_rights(&client).await?;
    match look_for_life(&client, &args.node).await {
        Ok(signs) if signs.is_empty() => {}
        Ok(signs) if args.force => println!(
            "node {}: signs of life ignored (--force): {}",
            args.node,
            describe(&signs)
        ),
        Ok(signs) => {
            return Err(ReleaseError::Alive {
                node: args.node.clone(),
                signs: describe(&signs),
            });
        }
        Err(e) if args.force => println!(
            "node {}: could not look for signs of life (--force: releasing anyway): {e}",
            args.node
        ),
        Err(e) => return Err(e),
    }

    // Recorded before the first change: whatever happens next, no claim's spec is lost.
    for p in pinned.iter().filter(|p| p.step == PvClaimStep::Recreate) {
        if let Some(claim) = &p.claim {
            record.plan(claim);
        }
    }
    if !record.claims.is_empty() {
        save_record(&args.state_file(), &record)?;
        println!(
            "state file {path}: {} claim(s) to create again recorded",
            record.pending().len()
        );
    }
    for p in &pinned {
        let name = p.pv.name_any();
        force_delete(&pvs, &name, p.pv.metadata.uid.as_deref())
            .await
            .map_err(api_err(format!("deleting PV {name}")))?;
        println!("  {name}: deleted, finalizers removed");
        if let (PvClaimStep::LetGo, Some(claim)) = (p.step, &p.claim) {
            let_go_of_deleted(&client, claim, &args.node).await?;
        }
    }
    let mut failed = Vec::new();
    for i in record.pending() {
        if !finish(&client, args, &mut record, i).await? {
            failed.push(record.claims[i].key());
        }
    }
    for (claim, step) in &sent {
        let_go_of(&client, claim, &args.node, *step).await?;
    }
    if !failed.is_empty() {
        return Err(ReleaseError::NotRecreated {
            claims: failed.join(", "),
            node: args.node.clone(),
            path,
        });
    }
    if !record.claims.is_empty() {
        println!(
            "state file {path}: every recorded claim is done; kept as the record of this release"
        );
    }
    Ok(pinned.len())
}

fn describe(signs: &[Sign]) -> String {
    signs
        .iter()
        .map(Sign::to_string)
        .collect::<Vec<_>>()
        .join("; ")
}

/// Reads what [`signs_of_life`] needs: the node's Lease, the pods bound to it, and every
/// CSIStorageCapacity object (few: one per node and class).
async fn look_for_life(client: &Client, node: &str) -> Result<Vec<Sign>, ReleaseError> {
    let api_err = |what: &str| {
        let what = what.to_string();
        move |source| ReleaseError::Api { what, source }
    };
    let lease = Api::<Lease>::namespaced(client.clone(), "kube-node-lease")
        .get_opt(node)
        .await
        .map_err(api_err("reading the node's Lease in kube-node-lease"))?;
    let on_node = ListParams::default().fields(&format!("spec.nodeName={node}"));
    let pods = Api::<Pod>::all(client.clone())
        .list(&on_node)
        .await
        .map_err(api_err("listing the pods bound to the node"))?
        .items;
    let capacities = Api::<CSIStorageCapacity>::all(client.clone())
        .list(&ListParams::default())
        .await
        .map_err(api_err("listing CSIStorageCapacity objects"))?
        .items;
    let now = k8s_openapi::jiff::Timestamp::now();
    Ok(signs_of_life(node, now, lease.as_ref(), &pods, &capacities))
}

/// The record in `path`, or a new one when there is no file.
fn load_record(path: &Path, node: &str) -> Result<Record, ReleaseError> {
    let shown = path.display().to_string();
    let text = match std::fs::read(path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Record::new(node)),
        Err(source) => {
            return Err(ReleaseError::StateFile {
                path: shown,
                what: "reading it",
                source,
            });
        }
    };
    let record: Record =
        serde_json::from_slice(&text).map_err(|source| ReleaseError::StateFileInvalid {
            path: shown.clone(),
            source,
        })?;
    if record.node != node {
        return Err(ReleaseError::StateFileOfOtherNode {
            path: shown,
            recorded: record.node,
            node: node.to_string(),
        });
    }
    Ok(record)
}

/// Writes the record whole (a temporary file renamed over it): a crash leaves the old or the
/// new record, never half of one.
fn save_record(path: &Path, record: &Record) -> Result<(), ReleaseError> {
    let io_err = |what: &'static str| {
        let path = path.display().to_string();
        move |source| ReleaseError::StateFile { path, what, source }
    };
    // A record is plain strings and JSON values: this cannot fail, but it must not panic.
    let mut text = serde_json::to_vec_pretty(record)
        .map_err(|e| io_err("serializing the record")(std::io::Error::from(e)))?;
    text.push(b'\n');
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(".tmp");
    std::fs::write(&tmp, text).map_err(io_err("writing it"))?;
    std::fs::rename(&tmp, path).map_err(io_err("replacing it"))
}

/// Takes recorded claim `i` as far as it goes now ([`resume_step`]), saving each change.
/// Returns false when it is still to be created (the run then fails naming it).
async fn finish(
    client: &Client,
    args: &Args,
    record: &mut Record,
    i: usize,
) -> Result<bool, ReleaseError> {
    let key = record.claims[i].key();
    let recorded = record.claims[i].claim.clone();
    let (ns, name) = (
        recorded.namespace().unwrap_or_default(),
        recorded.name_any(),
    );
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), &ns);
    let api_err = |what: String| move |source| ReleaseError::Api { what, source };
    let current = claims
        .get_opt(&name)
        .await
        .map_err(api_err(format!("reading claim {key}")))?;
    let volume = recorded.spec.as_ref().and_then(|s| s.volume_name.clone());
    let pv_exists = match &volume {
        Some(v) => Api::<PersistentVolume>::all(client.clone())
            .get_opt(v)
            .await
            .map_err(api_err(format!("reading PV {v}")))?
            .is_some(),
        None => false,
    };
    match resume_step(&record.claims[i], current.as_ref(), pv_exists) {
        ResumeStep::Drop(why) => {
            println!("  claim {key}: {why}");
            record.claims[i].state = EntryState::Dropped;
            record.claims[i].note = Some(why);
            save_record(&args.state_file(), record)?;
            Ok(true)
        }
        ResumeStep::Wait(why) => {
            println!("  claim {key}: not created again yet: {why}");
            Ok(false)
        }
        ResumeStep::LetGo => {
            if let Some(current) = &current {
                let_go_of_deleted(client, current, &args.node).await?;
            }
            record.claims[i].state = EntryState::Dropped;
            record.claims[i].note =
                Some("deleted by someone else before the release touched it: let go".into());
            save_record(&args.state_file(), record)?;
            Ok(true)
        }
        ResumeStep::DeleteAndCreate | ResumeStep::Create => {
            // Written before the delete is sent: a re-run then knows the delete was ours.
            record.claims[i].state = EntryState::Deleting;
            save_record(&args.state_file(), record)?;
            force_delete(&claims, &name, recorded.metadata.uid.as_deref())
                .await
                .map_err(api_err(format!("deleting claim {key}")))?;
            wait_gone(&claims, &key, &name, recorded.metadata.uid.as_deref()).await?;
            match create_again(&claims, &key, &recorded, args.retry_for).await {
                Ok(Created::Ours(uid)) => {
                    println!(
                        "  claim {key}: created again (uid {uid}) without a volume; it is provisioned wherever it fits now"
                    );
                    record.claims[i].state = EntryState::Recreated;
                    record.claims[i].recreated_uid = Some(uid);
                    record.claims[i].note = None;
                }
                Ok(Created::Theirs(uid)) => {
                    let why = format!("exists again as another claim (uid {uid}): left alone");
                    println!("  claim {key}: {why}");
                    record.claims[i].state = EntryState::Dropped;
                    record.claims[i].note = Some(why);
                }
                Err(e) => {
                    println!(
                        "  claim {key}: NOT created again: {e}; its spec is kept in {}",
                        args.state_file().display()
                    );
                    record.claims[i].note = Some(format!("last create refused: {e}"));
                    save_record(&args.state_file(), record)?;
                    return Ok(false);
                }
            }
            save_record(&args.state_file(), record)?;
            Ok(true)
        }
    }
}

/// Waits until incarnation `uid` of claim `name` is gone (its finalizers were removed).
async fn wait_gone(
    claims: &Api<PersistentVolumeClaim>,
    key: &str,
    name: &str,
    uid: Option<&str>,
) -> Result<(), ReleaseError> {
    let deadline = Instant::now() + Duration::from_secs(60);
    while claims
        .get_opt(name)
        .await
        .map_err(|source| ReleaseError::Api {
            what: format!("reading claim {key}"),
            source,
        })?
        .is_some_and(|c| c.metadata.uid.as_deref() == uid)
    {
        if Instant::now() > deadline {
            return Err(ReleaseError::ClaimStuck(key.to_string()));
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    Ok(())
}

/// Who created the claim of that name.
enum Created {
    /// We did: its UID.
    Ours(String),
    /// Someone else did meanwhile (its UID): left alone.
    Theirs(String),
}

/// Creates `recorded` again without its volume, retrying a refusal (quota, admission, a
/// namespace being deleted, the API server unreachable) with backoff for `retry_for`.
async fn create_again(
    claims: &Api<PersistentVolumeClaim>,
    key: &str,
    recorded: &PersistentVolumeClaim,
    retry_for: Duration,
) -> Result<Created, kube::Error> {
    let fresh = recreated(recorded);
    let name = recorded.name_any();
    let deadline = Instant::now() + retry_for;
    let mut pause = Duration::from_secs(1);
    loop {
        let error = match claims.create(&PostParams::default(), &fresh).await {
            Ok(created) => return Ok(Created::Ours(created.metadata.uid.unwrap_or_default())),
            Err(e) => e,
        };
        if matches!(&error, kube::Error::Api(s) if s.code == 409)
            && let Some(now) = claims.get_opt(&name).await?
            && now.metadata.uid != recorded.metadata.uid
        {
            return Ok(Created::Theirs(now.metadata.uid.unwrap_or_default()));
        }
        if Instant::now() + pause > deadline {
            return Err(error);
        }
        println!(
            "  claim {key}: create refused ({error}); trying again in {}s",
            pause.as_secs()
        );
        tokio::time::sleep(pause).await;
        pause = (pause * 2).min(Duration::from_secs(15));
    }
}

/// Removes our finalizers from a claim being deleted that held a lost node's volume; it goes
/// once kube-controller-manager's pvc-protection lets it (no pod uses it any more).
async fn let_go_of_deleted(
    client: &Client,
    claim: &PersistentVolumeClaim,
    node: &str,
) -> Result<(), ReleaseError> {
    let (ns, name) = (claim.namespace().unwrap_or_default(), claim.name_any());
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), &ns);
    let api_err = |what: String| move |source| ReleaseError::Api { what, source };
    let mut claim = claim.clone();
    // A conflict (another writer in between) is retried on a fresh read, a few times.
    for _ in 0..5 {
        let Some(kept) = without_our_finalizers(&claim, node) else {
            break;
        };
        // The resourceVersion makes the patch fail instead of overwriting a concurrent change
        // of the list; the UID keeps it off a new incarnation.
        let patch = serde_json::json!({"metadata": {
            "finalizers": kept,
            "resourceVersion": claim.metadata.resource_version,
            "uid": claim.metadata.uid}});
        match claims
            .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
        {
            Ok(_) => {
                println!(
                    "  claim {ns}/{name}: being deleted; our finalizers removed, not created again"
                );
                return Ok(());
            }
            Err(kube::Error::Api(e)) if e.code == 404 => return Ok(()),
            Err(kube::Error::Api(e)) if e.code == 409 => {}
            Err(e) => {
                return Err(api_err(format!(
                    "removing our finalizers from claim {ns}/{name}"
                ))(e));
            }
        }
        match claims
            .get_opt(&name)
            .await
            .map_err(api_err(format!("reading claim {ns}/{name}")))?
        {
            Some(c) if c.metadata.uid == claim.metadata.uid => claim = c,
            _ => return Ok(()),
        }
    }
    println!("  claim {ns}/{name}: being deleted; not created again");
    Ok(())
}

/// Sends a waiting claim back to the scheduler, drops our finalizers from a deleted one, and
/// the lost node's own finalizer from every claim that holds it.
async fn let_go_of(
    client: &Client,
    claim: &PersistentVolumeClaim,
    node: &str,
    step: ClaimStep,
) -> Result<(), ReleaseError> {
    use provisioning::names::ANN_SELECTED_NODE;
    let (ns, name) = (claim.namespace().unwrap_or_default(), claim.name_any());
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), &ns);
    let mut patch = serde_json::json!({"metadata": {}});
    if step == ClaimStep::Unselect {
        patch["metadata"]["annotations"] = serde_json::json!({ANN_SELECTED_NODE: null});
    }
    let kept = finalizers_after(claim, node, step);
    if let Some(kept) = &kept {
        // Only the finalizer list, as a patch (a PUT of the claim would drop what our API
        // types do not know); the resourceVersion makes a concurrent change of the list fail
        // instead of being overwritten, the UID keeps it off a new incarnation.
        patch["metadata"]["finalizers"] = serde_json::json!(kept);
        patch["metadata"]["resourceVersion"] = serde_json::json!(claim.metadata.resource_version);
        patch["metadata"]["uid"] = serde_json::json!(claim.metadata.uid);
    }
    if step == ClaimStep::Keep || (step != ClaimStep::Unselect && kept.is_none()) {
        return Ok(());
    }
    claims
        .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .map_err(|source| ReleaseError::Api {
            what: format!("letting go of claim {ns}/{name}"),
            source,
        })?;
    let done = match step {
        ClaimStep::Unselect => "selected node removed; the scheduler picks again",
        ClaimStep::LetGo => "our finalizers removed",
        _ => "the lost node's finalizer removed",
    };
    println!("  claim {ns}/{name}: {done}");
    Ok(())
}

/// The claim a PV is bound to, as (namespace, name).
fn claim_of(pv: &PersistentVolume) -> Option<(String, String)> {
    let r = pv.spec.as_ref()?.claim_ref.as_ref()?;
    Some((r.namespace.clone()?, r.name.clone()?))
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
