//! The claims not yet settled (not Bound to a volume), fed by the claim watch.
//!
//! The claim cache keeps claims as JSON (`controller_kit::compact`), so a walk over every
//! claim decodes each. The walks that look for claims still in play (waiting for a node,
//! waiting for a snapshot, clones holding their source) only need these, and in a cluster of
//! ten thousand Bound claims they are a handful.

use std::collections::HashSet;
use std::sync::Arc;

use controller_kit::reflect::Change;
use k8s_openapi::api::core::v1::PersistentVolumeClaim;
use parking_lot::Mutex;

/// A claim's namespace and name.
pub type Key = (String, String);

/// Keys of the claims that are not Bound. Cheap to clone; clones share the set.
#[derive(Clone, Default)]
pub struct Unsettled {
    keys: Arc<Mutex<HashSet<Key>>>,
}

fn key_of(claim: &PersistentVolumeClaim) -> Key {
    (
        claim.metadata.namespace.clone().unwrap_or_default(),
        claim.metadata.name.clone().unwrap_or_default(),
    )
}

/// Whether the claim is done with: Bound to a named volume. Anything else (Pending, Lost, or
/// Bound without a volume name, which the binder never writes) stays in the set. Pure.
pub fn settled(claim: &PersistentVolumeClaim) -> bool {
    let bound = claim.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Bound");
    let named = claim
        .spec
        .as_ref()
        .and_then(|s| s.volume_name.as_deref())
        .is_some_and(|n| !n.is_empty());
    bound && named
}

impl Unsettled {
    /// Follows one change of the claim cache. A relist reports every claim again; claims
    /// deleted while the watch was down leave then ([`Self::retain`] with the cache's keys).
    pub fn observe(&self, change: &Change<PersistentVolumeClaim>) {
        match change {
            Change::Applied(claim) if settled(claim) => {
                self.keys.lock().remove(&key_of(claim));
            }
            Change::Applied(claim) => {
                self.keys.lock().insert(key_of(claim));
            }
            Change::Deleted(claim) => {
                self.keys.lock().remove(&key_of(claim));
            }
            Change::Relisted => {}
        }
    }

    /// The keys (namespace, name) in the set.
    pub fn keys(&self) -> Vec<Key> {
        self.keys.lock().iter().cloned().collect()
    }

    /// Keeps only the keys `cached` still holds. Called with the cache's keys when a relist
    /// ends, from the change stream that fills the cache, so no claim arrives in between.
    pub fn retain(&self, cached: &HashSet<Key>) {
        self.keys.lock().retain(|key| cached.contains(key));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn claim(name: &str, phase: Option<&str>, volume: Option<&str>) -> PersistentVolumeClaim {
        let mut c = PersistentVolumeClaim::default();
        c.metadata.namespace = Some("ns".into());
        c.metadata.name = Some(name.into());
        c.spec = Some(Default::default());
        c.spec.as_mut().unwrap().volume_name = volume.map(String::from);
        c.status = phase.map(
            |p| k8s_openapi::api::core::v1::PersistentVolumeClaimStatus {
                phase: Some(p.into()),
                ..Default::default()
            },
        );
        c
    }

    #[test]
    fn settled_table() {
        let cases = [
            (None, None, false, "new"),
            (Some("Pending"), None, false, "pending"),
            (
                Some("Pending"),
                Some("pv"),
                false,
                "volume named, not yet bound",
            ),
            (Some("Bound"), Some("pv"), true, "bound"),
            (
                Some("Bound"),
                Some(""),
                false,
                "bound without a volume name",
            ),
            (Some("Lost"), Some("pv"), false, "lost"),
        ];
        for (phase, volume, want, what) in cases {
            assert_eq!(settled(&claim("c", phase, volume)), want, "{what}");
        }
    }

    #[test]
    fn follows_the_claims_until_bound_or_deleted() {
        let set = Unsettled::default();
        let keys = |s: &Unsettled| {
            let mut k: Vec<String> = s.keys().into_iter().map(|(_, n)| n).collect();
            k.sort();
            k
        };
        set.observe(&Change::Applied(claim("a", Some("Pending"), None)));
        set.observe(&Change::Applied(claim("b", Some("Pending"), None)));
        set.observe(&Change::Applied(claim(
            "old",
            Some("Bound"),
            Some("pv-old"),
        )));
        assert_eq!(keys(&set), ["a", "b"]);
        set.observe(&Change::Applied(claim("a", Some("Bound"), Some("pv-a"))));
        set.observe(&Change::Deleted(claim("b", Some("Pending"), None)));
        set.observe(&Change::Applied(claim("c", None, None)));
        set.observe(&Change::Relisted);
        assert_eq!(keys(&set), ["c"]);
        // c was deleted while the watch was down: the relisted cache no longer holds it.
        set.observe(&Change::Applied(claim("d", None, None)));
        set.retain(&HashSet::from([("ns".to_string(), "d".to_string())]));
        assert_eq!(keys(&set), ["d"]);
    }
}
