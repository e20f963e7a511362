//! The write-ahead record's pure parts (issue 49; `docs/design/write-ahead-record.md`): what
//! one entry holds, what one write of the record carries, what a starting instance does with
//! each entry it finds, who holds the record, and when an entry may leave. The claim
//! controller uses it when the record is switched on (`claims/entries.rs` in the provisioner).
//!
//! The record is a Lease's annotations, one per claim whose CreateVolume may run or may have
//! run without a PV: enough to clean up after the claim is gone, never a secret.

use std::collections::{BTreeMap, BTreeSet};

use csi::v1::CreateVolumeRequest;
use k8s_openapi::ByteString;
use prost::Message;
use serde::{Deserialize, Serialize};

use crate::attempt::VolumeState;
use crate::secrets::SecretRef;

#[cfg(test)]
mod tests;

/// The environment variable that turns the record off (`false`, the only value it reads): claims
/// then hold our creating-volume finalizer instead, two claim writes per volume as before the
/// record. A way back for a cluster that refuses the record's Lease writes.
pub const SWITCH: &str = "CSI_PROVISIONER_WRITE_AHEAD_RECORD";

/// The prefix of an entry's annotation key; the claim UID follows.
pub const KEY_PREFIX: &str = "record.csi-provisioner/";

/// The API server refuses an object whose annotations (keys and values) pass 256 KiB; the
/// record stays under this, leaving room for annotations others put on the Lease.
pub const MAX_BYTES: usize = 200 * 1024;

/// The longest Lease name (a DNS subdomain).
const MAX_NAME: usize = 253;

/// The Lease that holds the record: one per driver in central mode, one per node with
/// `--node-deployment`.
pub fn lease_name(driver: &str, node: Option<&str>) -> String {
    let driver = driver.replace('/', "-").to_lowercase();
    let name = match node {
        Some(node) => format!("csi-provisioner-record-{driver}-{node}"),
        None => format!("csi-provisioner-record-{driver}"),
    };
    if name.len() <= MAX_NAME {
        return name;
    }
    // Cut, and keep two long names apart by a hash of the whole.
    let hash = format!("{:016x}", fnv1a64(&name));
    let keep = MAX_NAME - hash.len() - 1;
    format!("{}-{hash}", name[..keep].trim_end_matches(['-', '.']))
}

fn fnv1a64(s: &str) -> u64 {
    s.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

/// Why an annotation of the record could not be read as an entry.
#[derive(Debug, thiserror::Error)]
pub enum RecordError {
    /// The annotation's value is not an entry's JSON.
    #[error("record entry {key}: not an entry ({source})")]
    Json {
        /// The annotation key.
        key: String,
        /// What the JSON parser said.
        source: serde_json::Error,
    },
    /// The entry names another claim than its key.
    #[error("record entry {key}: it names claim UID {uid}")]
    KeyMismatch {
        /// The annotation key.
        key: String,
        /// The UID inside the entry.
        uid: String,
    },
    /// The recorded request is not a CreateVolumeRequest.
    #[error("record entry for claim {uid}: its CreateVolume request does not decode ({source})")]
    Request {
        /// The claim's UID.
        uid: String,
        /// What the protobuf decoder said.
        source: prost::DecodeError,
    },
}

/// One claim whose CreateVolume may run, or may have run, without a PV.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Entry {
    /// The claim's namespace.
    #[serde(rename = "ns")]
    pub namespace: String,
    /// The claim's name.
    pub name: String,
    /// The claim's UID.
    pub uid: String,
    /// The volume name the request carries (`pvc-<uid>` or the prefix form).
    pub volume: String,
    /// The claim's StorageClass.
    pub class: String,
    /// The node that calls CreateVolume (`--node-deployment` only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node: Option<String>,
    /// The CreateVolumeRequest without its secrets, protobuf-encoded (base64 in JSON): a
    /// clean-up after a restart sends exactly this again to learn the volume's id.
    request: ByteString,
    /// Where the request's secrets came from, read again for the clean-up's calls.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret: Option<SecretName>,
}

/// A secret's namespace and name.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SecretName {
    /// The secret's namespace.
    #[serde(rename = "ns")]
    pub namespace: String,
    /// The secret's name.
    pub name: String,
}

impl From<&SecretRef> for SecretName {
    fn from(r: &SecretRef) -> Self {
        SecretName {
            namespace: r.namespace.clone(),
            name: r.name.clone(),
        }
    }
}

impl From<&SecretName> for SecretRef {
    fn from(n: &SecretName) -> Self {
        SecretRef {
            name: n.name.clone(),
            namespace: n.namespace.clone(),
        }
    }
}

/// The claim an entry is for.
#[derive(Debug, Clone, Copy)]
pub struct ClaimId<'a> {
    /// The claim's namespace.
    pub namespace: &'a str,
    /// The claim's name.
    pub name: &'a str,
    /// The claim's UID.
    pub uid: &'a str,
}

impl Entry {
    /// The entry for `claim`'s `request`, whose secrets (if any) came from `secret`. The
    /// secrets themselves are dropped: the record is readable by whoever may read Leases.
    pub fn new(
        claim: ClaimId<'_>,
        class: &str,
        node: Option<&str>,
        request: &CreateVolumeRequest,
        secret: Option<&SecretRef>,
    ) -> Entry {
        let without = CreateVolumeRequest {
            secrets: Default::default(),
            ..request.clone()
        };
        Entry {
            namespace: claim.namespace.to_string(),
            name: claim.name.to_string(),
            uid: claim.uid.to_string(),
            volume: request.name.clone(),
            class: class.to_string(),
            node: node.map(str::to_string),
            request: ByteString(without.encode_to_vec()),
            secret: secret.map(SecretName::from),
        }
    }

    /// The request recorded, without secrets.
    pub fn request(&self) -> Result<CreateVolumeRequest, RecordError> {
        CreateVolumeRequest::decode(self.request.0.as_slice()).map_err(|source| {
            RecordError::Request {
                uid: self.uid.clone(),
                source,
            }
        })
    }

    /// The entry's annotation key.
    pub fn key(&self) -> String {
        key_of(&self.uid)
    }

    /// The entry's annotation value.
    pub fn value(&self) -> String {
        // Strings and bytes only: serialising cannot fail (an empty value would be reported
        // by `entries` as not an entry, never taken for one).
        serde_json::to_string(self).unwrap_or_default()
    }

    /// Bytes the entry takes of the annotations' budget.
    pub fn size(&self) -> usize {
        self.key().len() + self.value().len()
    }
}

/// The annotation key of claim `uid`'s entry.
pub fn key_of(uid: &str) -> String {
    format!("{KEY_PREFIX}{uid}")
}

/// The entries among a record's annotations (others' annotations are not ours and are
/// skipped), and the annotations of ours that cannot be read.
pub fn entries(annotations: &BTreeMap<String, String>) -> (Vec<Entry>, Vec<RecordError>) {
    let (mut ok, mut bad) = (Vec::new(), Vec::new());
    for (key, value) in annotations {
        let Some(uid) = key.strip_prefix(KEY_PREFIX) else {
            continue;
        };
        match serde_json::from_str::<Entry>(value) {
            Ok(e) if e.uid == uid => ok.push(e),
            Ok(e) => bad.push(RecordError::KeyMismatch {
                key: key.clone(),
                uid: e.uid,
            }),
            Err(source) => bad.push(RecordError::Json {
                key: key.clone(),
                source,
            }),
        }
    }
    (ok, bad)
}

/// What waits for the record's next write, in the order it was asked for.
#[derive(Debug, Default, Clone)]
pub struct Pending {
    adds: Vec<Entry>,
    removes: BTreeSet<String>,
}

impl Pending {
    /// Asks for `entry` (replacing a pending add for its claim, cancelling a pending removal).
    pub fn add(&mut self, entry: Entry) {
        self.removes.remove(&entry.uid);
        self.adds.retain(|e| e.uid != entry.uid);
        self.adds.push(entry);
    }

    /// Asks for claim `uid`'s entry to go; returns a pending add it cancels (its waiter
    /// must hear that no write will carry it).
    pub fn remove(&mut self, uid: &str) -> Option<Entry> {
        self.removes.insert(uid.to_string());
        let i = self.adds.iter().position(|e| e.uid == uid)?;
        Some(self.adds.remove(i))
    }

    /// The removals alone (the adds' waiters were answered otherwise).
    pub fn without_adds(self) -> Pending {
        Pending {
            adds: Vec::new(),
            removes: self.removes,
        }
    }

    /// Whether nothing waits.
    pub fn is_empty(&self) -> bool {
        self.adds.is_empty() && self.removes.is_empty()
    }

    /// Whether the removal of claim `uid`'s entry waits for a write.
    pub fn removing(&self, uid: &str) -> bool {
        self.removes.contains(uid)
    }
}

/// How much the record may hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Entries: the calls that can be in flight (`--worker-threads`).
    pub entries: usize,
    /// Bytes of all the Lease's annotations, others' included.
    pub bytes: usize,
}

/// One write of the record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Write {
    /// All the Lease's annotations after the write (others' kept as read).
    pub annotations: BTreeMap<String, String>,
    /// Claims whose entries the write carries: their CreateVolume may go once it succeeds.
    pub added: Vec<String>,
    /// Claims whose entries it removes.
    pub removed: Vec<String>,
}

/// The next write for `pending` on a record whose annotations are `current`, and what must
/// wait for a later one (adds that do not fit, first come first served: a large entry is not
/// overtaken by small ones). Removals go first, to make room. `None` when nothing would
/// change.
pub fn plan(
    current: &BTreeMap<String, String>,
    pending: Pending,
    limits: Limits,
) -> (Option<Write>, Pending) {
    let mut annotations = current.clone();
    let mut removed = Vec::new();
    for uid in &pending.removes {
        if annotations.remove(&key_of(uid)).is_some() {
            removed.push(uid.clone());
        }
    }
    let size = |a: &BTreeMap<String, String>| a.iter().map(|(k, v)| k.len() + v.len()).sum();
    let count =
        |a: &BTreeMap<String, String>| a.keys().filter(|k| k.starts_with(KEY_PREFIX)).count();
    let (mut bytes, mut held): (usize, usize) = (size(&annotations), count(&annotations));
    let mut added = Vec::new();
    let mut left = Pending::default();
    for entry in pending.adds {
        let (key, value) = (entry.key(), entry.value());
        let old = annotations.get(&key).map(|v| key.len() + v.len());
        let (more_bytes, more_held) = match old {
            Some(old) => ((bytes + key.len() + value.len()).saturating_sub(old), held),
            None => (bytes + key.len() + value.len(), held + 1),
        };
        if !left.adds.is_empty() || more_held > limits.entries || more_bytes > limits.bytes {
            left.adds.push(entry);
            continue;
        }
        (bytes, held) = (more_bytes, more_held);
        annotations.insert(key, value);
        added.push(entry.uid);
    }
    let write = (!added.is_empty() || !removed.is_empty()).then_some(Write {
        annotations,
        added,
        removed,
    });
    (write, left)
}

/// Whether another instance took the record over from this one (`identity`): this instance
/// has written it (`owned`) and the Lease now names someone else (`holder`). Before its first
/// write an instance takes the record over itself: a new leader goes on from its
/// predecessor's entries.
pub fn taken_over(owned: bool, holder: Option<&str>, identity: &str) -> bool {
    owned && holder.is_some_and(|h| h != identity)
}

/// What a starting instance (or a new leader) does with an entry it finds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OnStart {
    /// The claim is still there and wants its volume: its sync goes on from the entry.
    Keep,
    /// A PV with the entry's volume name exists: it owns the volume (its reclaim policy
    /// decides about it); the entry goes.
    Remove,
    /// The claim is gone, replaced (another UID) or being deleted: a volume may exist that
    /// nothing owns. Clean up from the entry, then remove it.
    CleanUp,
}

/// The claim under an entry's namespace and name, as the API server has it now.
#[derive(Debug, Clone, Copy)]
pub struct ClaimNow<'a> {
    /// Its UID.
    pub uid: &'a str,
    /// Whether it has a deletion timestamp.
    pub deleting: bool,
}

/// Decides about one entry at start-up.
pub fn on_start(entry: &Entry, claim: Option<ClaimNow<'_>>, pv_with_volume_name: bool) -> OnStart {
    if pv_with_volume_name {
        return OnStart::Remove;
    }
    match claim {
        Some(c) if c.uid == entry.uid && !c.deleting => OnStart::Keep,
        _ => OnStart::CleanUp,
    }
}

/// Why a claim's entry leaves the record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Leaving {
    /// The PV is saved and names the volume from now on.
    PvSaved,
    /// Nothing of ours can exist under the claim's name (a final error, a name collision).
    NoVolume,
    /// The volume is deleted, or about to be (a clean-up, the PV's DeleteVolume).
    VolumeDeleted,
}

/// Whether the entry's removal is written at once, instead of waiting for company in the next
/// batch. An entry a crash leaves behind has the next instance re-send the recorded request:
/// harmless while a PV names the volume or none can exist, but once the volume is deleted the
/// driver would make it again only to have it deleted.
pub fn written_at_once(why: Leaving) -> bool {
    match why {
        Leaving::PvSaved | Leaving::NoVolume => false,
        Leaving::VolumeDeleted => true,
    }
}

/// Whether a claim's entry may leave the record: once the PV is saved (it owns the volume),
/// or while nothing of ours can exist under the claim's name.
pub fn may_leave(state: &VolumeState, pv_saved: bool) -> bool {
    pv_saved || matches!(state, VolumeState::None | VolumeState::Collision)
}
