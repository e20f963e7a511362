//! The claims held by our write-ahead entries (issue 49; `docs/design/write-ahead-record.md`):
//! an entry is written before CreateVolume instead of our finalizer, and stays until the PV is
//! saved or no volume can exist. While it stays, the claim's clean-up can run from it, even
//! once the claim is gone from the API server.
//!
//! The record itself is written by one task (`crate::write_ahead`); this is the claim
//! controller's view of it: which UIDs it holds, and the entry of each.

use std::collections::HashMap;

use parking_lot::Mutex;
use provisioning::record::{Entry, Leaving};

use crate::write_ahead::{RecordWriteError, WriteAhead};

/// The entries this instance wrote or found in the record at start-up, by claim UID.
#[derive(Default)]
pub struct Entries {
    /// `None`: claims are held by our finalizer, as before the record.
    writer: Option<WriteAhead>,
    held: Mutex<HashMap<String, Entry>>,
}

impl Entries {
    pub fn new(writer: Option<WriteAhead>) -> Entries {
        Entries {
            writer,
            held: Mutex::default(),
        }
    }

    /// Whether claims are held by the record instead of our finalizer.
    pub fn enabled(&self) -> bool {
        self.writer.is_some()
    }

    /// Writes `entry`; returns once a write of the record carries it.
    pub async fn record(&self, entry: Entry) -> Result<(), RecordWriteError> {
        let Some(writer) = &self.writer else {
            return Ok(());
        };
        // A retry that asks the same again is carried already.
        if self.held.lock().get(&entry.uid) == Some(&entry) {
            return Ok(());
        }
        writer.record(entry.clone()).await?;
        self.held.lock().insert(entry.uid.clone(), entry);
        Ok(())
    }

    /// Entries found in the record at start-up (or taken over from a predecessor).
    pub fn found(&self, entries: Vec<Entry>) {
        let mut held = self.held.lock();
        for entry in entries {
            held.insert(entry.uid.clone(), entry);
        }
    }

    /// Whether an entry holds claim `uid`.
    pub fn holds(&self, uid: &str) -> bool {
        self.held.lock().contains_key(uid)
    }

    pub fn entry(&self, uid: &str) -> Option<Entry> {
        self.held.lock().get(uid).cloned()
    }

    /// The entries under `namespace/name` of claims other than `current` (the claim the cache
    /// has under that name now, if any): claims deleted, or deleted and created again.
    pub fn gone(&self, namespace: &str, name: &str, current: Option<&str>) -> Vec<Entry> {
        self.held
            .lock()
            .values()
            .filter(|e| e.namespace == namespace && e.name == name)
            .filter(|e| current != Some(e.uid.as_str()))
            .cloned()
            .collect()
    }

    pub fn len(&self) -> usize {
        self.held.lock().len()
    }

    /// Lets claim `uid`'s entry go, for `why` ([`crate::write_ahead::WriteAhead::forget`]).
    pub fn forget(&self, uid: &str, why: Leaving) {
        if self.held.lock().remove(uid).is_some()
            && let Some(writer) = &self.writer
        {
            writer.forget(uid, why);
        }
    }

    /// Before DeleteVolume of claim `uid`'s PV: its entry leaves the record first (written at
    /// once if it is still there or its removal still waits), so that no entry outlives the
    /// volume ([`crate::write_ahead::WriteAhead::settle`]).
    pub async fn settle(&self, uid: &str) {
        self.forget(uid, Leaving::VolumeDeleted);
        if let Some(writer) = &self.writer {
            writer.settle(uid).await;
        }
    }
}
