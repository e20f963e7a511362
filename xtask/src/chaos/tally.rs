//! What a chaos run lost, counted from the driver's own state and call log and the API
//! server's objects, never from a provisioner's logs.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use anyhow::Result;
use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim};
use kube::api::ListParams;
use kube::{Api, ResourceExt};

use crate::bench::calllog::{self, Call};
use crate::bench::cluster::{driver_volume_ids, pv_driver};
use crate::bench::ctx::{Ctx, Slot};
use crate::bench::results::RunRecord;

/// The end state of one run.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Tally {
    /// Volumes in the driver that no PV points to.
    pub leaked: usize,
    /// PVs of the driver whose volume the driver does not have.
    pub orphan_pvs: usize,
    /// Extra volume ids returned by successful CreateVolume calls for one volume name.
    pub duplicates: usize,
    /// Claims the run kept that are not Bound.
    pub unbound: usize,
}

impl Tally {
    /// The counts as a run's values.
    pub fn record(&self, rec: &mut RunRecord) {
        rec.set("leaked", self.leaked as f64);
        rec.set("orphan_pvs", self.orphan_pvs as f64);
        rec.set("duplicates", self.duplicates as f64);
        rec.set("unbound", self.unbound as f64);
    }
}

/// Counts from what the driver holds (`volumes`, ids), the PV handles of its driver,
/// its call log and the claims the run kept (`kept`: name → Bound).
pub fn count(
    volumes: &BTreeSet<String>,
    pv_handles: &[String],
    calls: &[Call],
    kept: &BTreeMap<String, bool>,
) -> Tally {
    let referenced: BTreeSet<&str> = pv_handles.iter().map(String::as_str).collect();
    let mut ids_per_name: BTreeMap<&str, BTreeSet<&str>> = BTreeMap::new();
    for c in calls
        .iter()
        .filter(|c| c.method == "CreateVolume" && c.error.is_none())
    {
        if let (Some(name), Some(id)) = (c.name.as_deref(), c.volume_id.as_deref()) {
            ids_per_name.entry(name).or_default().insert(id);
        }
    }
    Tally {
        leaked: volumes
            .iter()
            .filter(|v| !referenced.contains(v.as_str()))
            .count(),
        orphan_pvs: pv_handles.iter().filter(|h| !volumes.contains(*h)).count(),
        duplicates: ids_per_name.values().map(|ids| ids.len() - 1).sum(),
        unbound: kept.values().filter(|bound| !**bound).count(),
    }
}

/// Reads the state and counts it: the driver's volumes (ListVolumes), the PVs of the slot's
/// driver, the call log, and the slot's claims named in `kept`.
pub async fn gather(
    ctx: &Ctx,
    slot: &Slot,
    socket: &Path,
    call_log: &Path,
    kept: &BTreeSet<String>,
) -> Result<Tally> {
    let volumes = driver_volume_ids(socket).await?;
    let pvs: Api<PersistentVolume> = Api::all(ctx.client.clone());
    let handles: Vec<String> = pvs
        .list(&ListParams::default())
        .await?
        .items
        .iter()
        .filter(|pv| pv_driver(pv) == Some(slot.driver.as_str()))
        .filter_map(|pv| Some(pv.spec.as_ref()?.csi.as_ref()?.volume_handle.clone()))
        .collect();
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(ctx.client.clone(), &slot.namespace);
    let bound: BTreeMap<String, bool> = claims
        .list(&ListParams::default())
        .await?
        .items
        .iter()
        .map(|c| (c.name_any(), is_bound(c)))
        .collect();
    let kept: BTreeMap<String, bool> = kept
        .iter()
        .map(|name| (name.clone(), bound.get(name).copied().unwrap_or(false)))
        .collect();
    Ok(count(&volumes, &handles, &calllog::read(call_log), &kept))
}

pub fn is_bound(claim: &PersistentVolumeClaim) -> bool {
    claim.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Bound")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn create(name: &str, id: Option<&str>) -> Call {
        Call {
            method: "CreateVolume".into(),
            start: jiff::Timestamp::UNIX_EPOCH,
            duration_ms: 1,
            error: id.is_none().then(|| "Unavailable".to_string()),
            name: Some(name.into()),
            volume_id: id.map(str::to_string),
            capacity_key: None,
        }
    }

    fn set(ids: &[&str]) -> BTreeSet<String> {
        ids.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn a_clean_end_counts_nothing() {
        let calls = [create("pvc-a", None), create("pvc-a", Some("v1"))];
        let kept = BTreeMap::from([("a".to_string(), true)]);
        let t = count(&set(&["v1"]), &["v1".into()], &calls, &kept);
        assert_eq!(t, Tally::default());
    }

    #[test]
    fn each_loss_is_counted_where_it_shows() {
        let calls = [
            // The same name answered twice with one id is the idempotent retry.
            create("pvc-a", Some("v1")),
            create("pvc-a", Some("v1")),
            // Two ids for one name: one volume too many.
            create("pvc-b", Some("v2")),
            create("pvc-b", Some("v3")),
            create("pvc-c", Some("v4")),
        ];
        let kept = BTreeMap::from([("a".to_string(), true), ("c".to_string(), false)]);
        // v3 and v4 have no PV; the PV for v9 has no volume.
        let volumes = set(&["v1", "v2", "v3", "v4"]);
        let t = count(
            &volumes,
            &["v1".into(), "v2".into(), "v9".into()],
            &calls,
            &kept,
        );
        assert_eq!(
            t,
            Tally {
                leaked: 2,
                orphan_pvs: 1,
                duplicates: 1,
                unbound: 1
            }
        );
    }
}
