//! Writes to claims, which users own: each write sends only what it changes (a JSON merge
//! patch guarded by the resourceVersion the change was decided on; a change of finalizers
//! alone, a JSON patch that tests the list as read and replaces it), so the claim keeps its
//! last-applied annotation, its field managers and any field our API types do not know
//! ([`controller_kit::patch`]). The stock RBAC grants `update` on PVCs but not `patch`: there
//! the change is applied to the claim as read from the API server and written back with PUT.
//! A conflict re-reads and re-applies. Every write is recorded in the claim cache's
//! read-your-writes view, so the next sync sees it.

use std::sync::atomic::{AtomicBool, Ordering};

use controller_kit::fresh::Fresh;
use controller_kit::patch::{apply_to, finalizers_only, guarded, merge_diff, refused_verb};
use k8s_openapi::api::core::v1::PersistentVolumeClaim;
use kube::api::{ApiResource, DynamicObject, Patch, PatchParams, PostParams};
use kube::{Api, Client};
use provisioning::lifecycle::finalizers_with;
use provisioning::names::CREATING_VOLUME_FINALIZER;

/// How often a conflicting write is re-read and retried before giving up to the work queue.
const CONFLICT_RETRIES: usize = 3;

/// Set once the API server refused us `patch` on claims (upstream's RBAC): from then on every
/// write reads the claim and PUTs it, without first trying a patch that cannot pass.
static PATCH_REFUSED: AtomicBool = AtomicBool::new(false);

/// Applies `change` to the claim and writes it. `change` returns `false` when the claim already
/// looks right (nothing is written). Starts from `claim` and re-reads it on conflict. Returns the
/// claim as stored (or as read when nothing changed); `Ok(None)` if the claim is gone.
pub async fn modify_claim(
    client: &Client,
    claims: &Fresh<PersistentVolumeClaim>,
    claim: &PersistentVolumeClaim,
    mut change: impl FnMut(&mut PersistentVolumeClaim) -> bool,
) -> Result<Option<PersistentVolumeClaim>, kube::Error> {
    let namespace = claim.metadata.namespace.as_deref().unwrap_or_default();
    let name = claim.metadata.name.as_deref().unwrap_or_default();
    let api: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), namespace);
    let mut current = claim.clone();
    // Every version this write replaces: the cache may still show any of them.
    let mut replaced: Vec<String> = claim.metadata.resource_version.iter().cloned().collect();
    for attempt in 0..=CONFLICT_RETRIES {
        if current.metadata.uid != claim.metadata.uid {
            // Deleted and re-created under the same name: not our claim any more.
            return Ok(None);
        }
        let mut after = current.clone();
        if !change(&mut after) {
            return Ok(Some(current));
        }
        match write(client, &api, &current, &after).await {
            Ok(mut stored) => {
                // As the cache keeps claims: the next change is diffed against the same shape.
                controller_kit::reflect::strip_metadata(&mut stored);
                claims.updated(replaced.iter().map(String::as_str), stored.clone());
                return Ok(Some(stored));
            }
            Err(kube::Error::Api(e)) if e.code == 409 && attempt < CONFLICT_RETRIES => {
                match api.get_opt(name).await? {
                    Some(mut fresh) => {
                        controller_kit::reflect::strip_metadata(&mut fresh);
                        replaced.extend(fresh.metadata.resource_version.clone());
                        current = fresh;
                    }
                    None => return Ok(None),
                }
            }
            Err(kube::Error::Api(e)) if e.code == 404 => return Ok(None),
            Err(e) => return Err(e),
        }
    }
    unreachable!("the last attempt returns")
}

/// Remembers that RBAC refuses us `patch` on claims, and says so once.
fn patch_refused() {
    if !PATCH_REFUSED.swap(true, Ordering::Relaxed) {
        tracing::info!(
            "Not allowed to patch PersistentVolumeClaims: each claim write reads the claim first (one GET more), so that it keeps what others wrote. Grant patch on persistentvolumeclaims to save it"
        );
    }
}

/// Writes the difference between `before` (the version the change was decided on) and
/// `after`, and nothing else.
async fn write(
    client: &Client,
    api: &Api<PersistentVolumeClaim>,
    before: &PersistentVolumeClaim,
    after: &PersistentVolumeClaim,
) -> Result<PersistentVolumeClaim, kube::Error> {
    let name = before.metadata.name.as_deref().unwrap_or_default();
    let version = before
        .metadata
        .resource_version
        .as_deref()
        .unwrap_or_default();
    let (before_v, after_v) = (
        serde_json::to_value(before).map_err(kube::Error::SerdeError)?,
        serde_json::to_value(after).map_err(kube::Error::SerdeError)?,
    );
    if !PATCH_REFUSED.load(Ordering::Relaxed)
        && let Some(ops) = finalizers_only(&before_v, &after_v)
    {
        // The finalizer list alone: tested and replaced, so kube-controller-manager's write of
        // the claim's status right after binding does not make our release conflict.
        let ops: json_patch::Patch =
            serde_json::from_value(ops).map_err(kube::Error::SerdeError)?;
        match api
            .patch(name, &PatchParams::default(), &Patch::<()>::Json(ops))
            .await
        {
            Err(kube::Error::Api(e)) if e.code == 403 && refused_verb(&e.message, "patch") => {
                patch_refused();
            }
            // A failed `test` is a bare 422 Invalid naming nothing, as is an admission
            // policy's refusal: only a list that changed since we read it makes it a conflict
            // (re-read and decided again); otherwise the refusal stands, to be explained.
            Err(kube::Error::Api(mut e)) if e.code == 422 => {
                let now = api.get_opt(name).await?;
                let listed = |c: &PersistentVolumeClaim| c.metadata.finalizers.clone();
                if now.as_ref().is_none_or(|c| listed(c) != listed(before)) {
                    e.code = 409;
                }
                return Err(kube::Error::Api(e));
            }
            other => return other,
        }
    }
    let diff = merge_diff(&before_v, &after_v).unwrap_or_else(|| serde_json::json!({}));
    let patch = guarded(diff, version);
    if !PATCH_REFUSED.load(Ordering::Relaxed) {
        match api
            .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
        {
            Err(kube::Error::Api(e)) if e.code == 403 && refused_verb(&e.message, "patch") => {
                patch_refused();
            }
            other => return other,
        }
    }
    // Only `update`: the same change, applied to the whole claim as the API server has it.
    let namespace = before.metadata.namespace.as_deref().unwrap_or_default();
    let raw: Api<DynamicObject> = Api::namespaced_with(
        client.clone(),
        namespace,
        &ApiResource::erase::<PersistentVolumeClaim>(&()),
    );
    let stored = raw.get(name).await?;
    if stored.metadata.resource_version.as_deref() != Some(version) {
        // Changed since the decision: what a guarded patch would be told.
        return Err(kube::Error::Api(Box::new(kube::core::Status {
            code: 409,
            reason: "Conflict".into(),
            message: format!("claim {namespace}/{name} changed since version {version}"),
            ..Default::default()
        })));
    }
    let body = apply_to(
        serde_json::to_value(&stored).map_err(kube::Error::SerdeError)?,
        &patch,
    );
    let object: DynamicObject = serde_json::from_value(body).map_err(kube::Error::SerdeError)?;
    let written = raw.replace(name, &PostParams::default(), &object).await?;
    serde_json::to_value(written)
        .and_then(serde_json::from_value)
        .map_err(kube::Error::SerdeError)
}

/// Adds the creating-volume finalizer.
pub async fn add_finalizer(
    client: &Client,
    claims: &Fresh<PersistentVolumeClaim>,
    claim: &PersistentVolumeClaim,
) -> Result<Option<PersistentVolumeClaim>, kube::Error> {
    set_finalizer(client, claims, claim, CREATING_VOLUME_FINALIZER, true).await
}

/// Removes the creating-volume finalizer, and in the same write `also` (this node's
/// finalizer, `provisioning::distributed::node_finalizer`, when the step settles this node's
/// volume too).
pub async fn remove_finalizer(
    client: &Client,
    claims: &Fresh<PersistentVolumeClaim>,
    claim: &PersistentVolumeClaim,
    also: Option<&str>,
) -> Result<Option<PersistentVolumeClaim>, kube::Error> {
    remove_finalizers(
        client,
        claims,
        claim,
        &[Some(CREATING_VOLUME_FINALIZER), also],
    )
    .await
}

/// Removes every finalizer `names` gives (nothing is written when none is there).
pub async fn remove_finalizers(
    client: &Client,
    claims: &Fresh<PersistentVolumeClaim>,
    claim: &PersistentVolumeClaim,
    names: &[Option<&str>],
) -> Result<Option<PersistentVolumeClaim>, kube::Error> {
    modify_claim(client, claims, claim, |c| {
        let mut changed = false;
        for name in names.iter().flatten() {
            if let Some(f) = finalizers_with(c.metadata.finalizers.as_ref(), name, false) {
                c.metadata.finalizers = Some(f);
                changed = true;
            }
        }
        changed
    })
    .await
}

/// Adds (`present`) or removes the finalizer `name` (nothing is written when it already is
/// so).
pub async fn set_finalizer(
    client: &Client,
    claims: &Fresh<PersistentVolumeClaim>,
    claim: &PersistentVolumeClaim,
    name: &str,
    present: bool,
) -> Result<Option<PersistentVolumeClaim>, kube::Error> {
    modify_claim(client, claims, claim, |c| {
        match finalizers_with(c.metadata.finalizers.as_ref(), name, present) {
            Some(f) => {
                c.metadata.finalizers = Some(f);
                true
            }
            None => false,
        }
    })
    .await
}

/// After a failed attempt, in one write, what [`provisioning::attempt::after_failure`] asks:
/// remove `volume.kubernetes.io/selected-node` so the scheduler picks another node, our
/// finalizer when nothing of ours can exist, and add this node's finalizer (`node_finalizer`)
/// when the claim leaves the node while a volume of it may exist here.
pub async fn after_failure(
    client: &Client,
    claims: &Fresh<PersistentVolumeClaim>,
    claim: &PersistentVolumeClaim,
    writes: provisioning::attempt::FailureWrites,
    node_finalizer: Option<&str>,
) -> Result<Option<PersistentVolumeClaim>, kube::Error> {
    modify_claim(client, claims, claim, |c| {
        let mut changed = false;
        if writes.hold_here
            && let Some(name) = node_finalizer
            && let Some(f) = finalizers_with(c.metadata.finalizers.as_ref(), name, true)
        {
            c.metadata.finalizers = Some(f);
            changed = true;
        }
        if writes.reschedule {
            changed |= c
                .metadata
                .annotations
                .as_mut()
                .and_then(|a| a.remove(provisioning::names::ANN_SELECTED_NODE))
                .is_some();
        }
        if writes.release
            && let Some(f) = provisioning::lifecycle::without_finalizer(c)
        {
            c.metadata.finalizers = Some(f);
            changed = true;
        }
        changed
    })
    .await
}
