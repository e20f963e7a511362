//! The release's record of the claims it creates again (`release-node --state-file`): written
//! before anything changes, updated after each step, so that no claim is ever lost. A claim
//! whose create is refused (a namespace at its quota, an admission webhook, a terminating
//! namespace) stays in the file with its spec, and a re-run picks it up from there.

use k8s_openapi::api::core::v1::PersistentVolumeClaim;
use serde::{Deserialize, Serialize};

/// The file's contents.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Record {
    /// The lost node: a file of another node's release is refused.
    pub node: String,
    /// Every claim the release created again or is to create again.
    pub claims: Vec<Entry>,
}

/// One claim to create again.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Entry {
    /// Where it is.
    pub state: EntryState,
    /// Why the entry was dropped, or the last error of a create not done yet.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
    /// The UID of the claim created again.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub recreated_uid: Option<String>,
    /// The claim as read before the release changed anything.
    pub claim: PersistentVolumeClaim,
}

/// Where an entry is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum EntryState {
    /// Recorded; the claim was not touched yet.
    Planned,
    /// The release deletes (or deleted) this incarnation; it is to be created again. Written
    /// before the delete is sent: a claim found deleted in this state was deleted by us.
    Deleting,
    /// Created again (`recreatedUid`). Final.
    Recreated,
    /// Not to be created again (see `note`). Final.
    Dropped,
}

impl EntryState {
    /// Whether nothing is left to do for the entry.
    pub fn is_final(self) -> bool {
        matches!(self, EntryState::Recreated | EntryState::Dropped)
    }
}

impl Entry {
    /// `namespace/name` of the recorded claim.
    pub fn key(&self) -> String {
        format!(
            "{}/{}",
            self.claim.metadata.namespace.as_deref().unwrap_or_default(),
            self.claim.metadata.name.as_deref().unwrap_or_default()
        )
    }

    fn uid(&self) -> Option<&str> {
        self.claim.metadata.uid.as_deref()
    }
}

impl Record {
    /// An empty record for the release of `node`.
    pub fn new(node: &str) -> Record {
        Record {
            node: node.to_string(),
            claims: Vec::new(),
        }
    }

    /// Records `claim` (as read) to be created again, unless this incarnation (its UID) is
    /// recorded already (a re-run). Returns whether it was added.
    pub fn plan(&mut self, claim: &PersistentVolumeClaim) -> bool {
        let uid = claim.metadata.uid.as_deref();
        if uid.is_none() || self.claims.iter().any(|e| e.uid() == uid) {
            return false;
        }
        self.claims.push(Entry {
            state: EntryState::Planned,
            note: None,
            recreated_uid: None,
            claim: claim.clone(),
        });
        true
    }

    /// Indexes of the entries not done yet.
    pub fn pending(&self) -> Vec<usize> {
        (0..self.claims.len())
            .filter(|&i| !self.claims[i].state.is_final())
            .collect()
    }
}

/// What to do for a pending entry, given the claim of that name as it is now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ResumeStep {
    /// The recorded incarnation is there and alive: delete it, then create it again.
    DeleteAndCreate,
    /// We deleted it (or started to): finish the delete if needed, then create it again.
    Create,
    /// Someone else deleted it before we did: the user wants it gone; let it go (our finalizers
    /// removed), never create it again.
    LetGo,
    /// Nothing to do (the reason, for the entry's note).
    Drop(String),
    /// Not now (the reason): its PV still exists, which this run did not release.
    Wait(String),
}

/// The step for a pending `entry`: `current` is the claim of that name now (`None`: absent),
/// `pv_exists` whether the PV the recorded claim was bound to still exists.
pub fn resume_step(
    entry: &Entry,
    current: Option<&PersistentVolumeClaim>,
    pv_exists: bool,
) -> ResumeStep {
    if entry.state.is_final() {
        return ResumeStep::Drop("done".into());
    }
    let deleting = entry.state == EntryState::Deleting;
    let Some(current) = current else {
        return match deleting {
            true => ResumeStep::Create,
            false => ResumeStep::Drop(
                "deleted by someone else before the release touched it; not created again".into(),
            ),
        };
    };
    if current.metadata.uid.as_deref() != entry.uid() {
        // A new incarnation (its owner, a StatefulSet, the user): never replaced.
        return ResumeStep::Drop(format!(
            "exists again as another claim (uid {}): left alone",
            current.metadata.uid.as_deref().unwrap_or_default()
        ));
    }
    match (current.metadata.deletion_timestamp.is_some(), deleting) {
        (true, true) => ResumeStep::Create,
        (true, false) => ResumeStep::LetGo,
        (false, true) => ResumeStep::Create,
        (false, false) if pv_exists => ResumeStep::Wait(
            "its PersistentVolume still exists: run release-node again for the node it is pinned to"
                .into(),
        ),
        (false, false) => ResumeStep::DeleteAndCreate,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
    use serde_json::json;

    fn claim(uid: &str, deleted: bool) -> PersistentVolumeClaim {
        let mut c: PersistentVolumeClaim = serde_json::from_value(json!({
            "metadata": {"name": "c", "namespace": "ns", "uid": uid},
            "spec": {"volumeName": "pv"}}))
        .unwrap();
        if deleted {
            c.metadata.deletion_timestamp = Some(Time(k8s_openapi::jiff::Timestamp::UNIX_EPOCH));
        }
        c
    }

    fn entry(state: EntryState) -> Entry {
        Entry {
            state,
            note: None,
            recreated_uid: None,
            claim: claim("u1", false),
        }
    }

    #[test]
    fn resume_table() {
        use EntryState::*;
        use ResumeStep as S;
        let drop = |s: &str| S::Drop(s.into());
        let other = "exists again as another claim (uid u2): left alone";
        let by_someone = "deleted by someone else before the release touched it; not created again";
        let wait = S::Wait(
            "its PersistentVolume still exists: run release-node again for the node it is pinned to"
                .into(),
        );
        let cases: Vec<(EntryState, Option<PersistentVolumeClaim>, bool, ResumeStep)> = vec![
            // First run, or a re-run that stopped before touching the claim.
            (Planned, Some(claim("u1", false)), false, S::DeleteAndCreate),
            (Planned, Some(claim("u1", false)), true, wait),
            // Deleted by someone else meanwhile: let go / gone, never created again.
            (Planned, Some(claim("u1", true)), false, S::LetGo),
            (Planned, None, false, drop(by_someone)),
            // Our delete under way or done (a refused create, a crash): create it.
            (Deleting, Some(claim("u1", true)), false, S::Create),
            (Deleting, Some(claim("u1", false)), false, S::Create),
            (Deleting, None, false, S::Create),
            (Deleting, None, true, S::Create),
            // A new claim of that name now: never replaced, whatever our state.
            (Planned, Some(claim("u2", false)), false, drop(other)),
            (Deleting, Some(claim("u2", false)), false, drop(other)),
            (Deleting, Some(claim("u2", true)), false, drop(other)),
            // Done before.
            (Recreated, None, false, drop("done")),
            (Dropped, Some(claim("u1", false)), false, drop("done")),
        ];
        for (i, (state, current, pv, want)) in cases.into_iter().enumerate() {
            assert_eq!(
                resume_step(&entry(state), current.as_ref(), pv),
                want,
                "case {i}"
            );
        }
    }

    #[test]
    fn an_incarnation_is_recorded_once() {
        let mut r = Record::new("n1");
        assert!(r.plan(&claim("u1", false)));
        assert!(!r.plan(&claim("u1", false)));
        assert!(r.plan(&claim("u2", false)));
        r.claims[0].state = EntryState::Recreated;
        assert_eq!(r.pending(), [1]);
        assert_eq!(r.claims[1].key(), "ns/c");
        let mut no_uid = claim("x", false);
        no_uid.metadata.uid = None;
        assert!(!r.plan(&no_uid));
    }

    #[test]
    fn the_file_keeps_the_claim_as_read() {
        let mut r = Record::new("n1");
        r.plan(&claim("u1", false));
        let text = serde_json::to_value(&r).unwrap();
        assert_eq!(
            text,
            json!({"node": "n1", "claims": [{"state": "planned", "claim": {
                "apiVersion": "v1", "kind": "PersistentVolumeClaim",
                "metadata": {"name": "c", "namespace": "ns", "uid": "u1"},
                "spec": {"volumeName": "pv"}}}]})
        );
        let back: Record = serde_json::from_value(text).unwrap();
        assert_eq!(back, r);
    }
}
