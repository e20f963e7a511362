//! Reservations for in-flight volumes (`--capacity-reservations`, ours): the shell around
//! [`capacity::ledger`]. A claim worker holds its size before CreateVolume; the hold lowers
//! the published objects of its (segment, class) at once, without asking the driver. When
//! the call may have made a volume, the drop queues the GetCapacity that will show the real
//! value; otherwise (a final error, no call, a lifted block) the reservation ends at once and
//! the last reading is published again, whether or not GetCapacity answers.

use std::sync::Arc;

use capacity::ledger::{Ledger, apply, fits};
use capacity::scheduler::{Allowed, REUSE, Remembered, SchedulerCheck, allowed, reuse};
use capacity::segment::display;
use capacity::{Capacity, Key};
use controller_kit::workqueue::Outcome;
use k8s_openapi::api::storage::v1::CSIDriver;
use tokio::time::Instant;

use super::{Item, RefreshHandle, Shared};

/// A claim's size counted against its node's published capacity until dropped.
#[must_use = "the reservation ends when this is dropped"]
pub struct Hold {
    shared: Arc<Shared>,
    uid: String,
    /// A volume may be in the backend when this is dropped: the reservation then waits for a
    /// reading that shows it. Otherwise nothing was made and it ends at once.
    may_exist: bool,
}

impl Hold {
    /// Says whether the attempt may have left a volume: `true` before CreateVolume is sent (a
    /// call cut short may still make one), then what the call's answer showed.
    pub fn may_exist(&mut self, may_exist: bool) {
        self.may_exist = may_exist;
    }
}

impl std::fmt::Debug for Hold {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Hold").field("uid", &self.uid).finish()
    }
}

impl Drop for Hold {
    fn drop(&mut self) {
        if !self.may_exist {
            self.shared.end(&self.uid, Ledger::end);
            return;
        }
        let key = {
            let mut state = self.shared.state.lock();
            let Some(key) = state.ledger.key_of(&self.uid).cloned() else {
                return;
            };
            let round = state.refreshed.get(&key).map_or(0, |r| r.ticket());
            state.ledger.release(&self.uid, round)
        };
        // The reading that shows the new volume (or its absence) ends the reservation.
        self.shared.enqueue_urgent(key);
    }
}

/// The claim does not fit on its node with what is already on its way there.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NoRoom {
    pub node: String,
    pub segment: String,
    pub reading: Capacity,
    /// Bytes of volumes made since the reading.
    pub reserved: i64,
    /// How many of them are still in CreateVolume.
    pub held: usize,
    pub requested: i64,
}

impl std::fmt::Display for NoRoom {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let limit = match self.reading.maximum_volume_size {
            Some(m) => format!(
                "capacity {} bytes, maximumVolumeSize {m} bytes",
                self.reading.available
            ),
            None => format!("capacity {} bytes", self.reading.available),
        };
        write!(
            f,
            "not enough storage on node {} (topology {}) for {} bytes: the driver reports {limit}, \
             and {} bytes there are taken by volumes being made since ({} still in CreateVolume); \
             the claim goes back to the scheduler without calling the driver",
            self.node, self.segment, self.requested, self.reserved, self.held
        )
    }
}

impl RefreshHandle {
    /// Counts `requested` bytes of the claim `uid` against the objects of `class` on `node`'s
    /// segment; with `check`, only if the last reading less the reservations it certainly does
    /// not show leaves room for it. `Ok(None)`: reservations are off, or we publish nothing for that
    /// pair.
    pub fn hold(
        &self,
        uid: &str,
        (class, node): (&str, &str),
        requested: i64,
        check: bool,
    ) -> Result<Option<Hold>, NoRoom> {
        let shared = &self.shared;
        if !shared.config.reservations {
            return Ok(None);
        }
        let key = {
            let mut state = shared.state.lock();
            let Some(key) = Self::key_of(&state, class, node) else {
                return Ok(None);
            };
            if let Some(&(reading, round)) = state.readings.get(&key).filter(|_| check) {
                let other = state.ledger.certain(&key, round, &[uid]);
                if !fits(reading, other.bytes, requested) {
                    return Err(NoRoom {
                        node: node.to_string(),
                        segment: display(&key.segment).to_string(),
                        reading,
                        reserved: other.bytes,
                        held: other.held,
                        requested,
                    });
                }
            }
            let finished = state.refreshed.get(&key).map_or(0, |r| r.finished());
            state.ledger.hold(uid, key.clone(), requested, finished);
            key
        };
        shared.queue.add_urgent(Item::Publish(key));
        Ok(Some(Hold {
            shared: shared.clone(),
            uid: uid.to_string(),
            may_exist: false,
        }))
    }
}

impl RefreshHandle {
    /// The key of (`class`, `node`'s segment), if we publish it.
    fn key_of(state: &super::State, class: &str, node: &str) -> Option<Key> {
        let key = Key {
            segment: state.node_segments.get(node)?.clone(),
            class: class.to_string(),
        };
        state.desired.contains(&key).then_some(key)
    }

    /// Whether `uid` (a pod's block) holds an object of `node`'s segment now, of any class:
    /// a pod refused on a node for one class is refused there for all.
    pub fn blocks(&self, uid: &str, node: &str) -> bool {
        let state = self.shared.state.lock();
        let Some(segment) = state.node_segments.get(node) else {
            return false;
        };
        state
            .ledger
            .key_of(uid)
            .is_some_and(|k| &k.segment == segment && state.ledger.holds(uid, k))
    }

    /// Whether the claim `uid` has a reservation.
    pub fn is_held(&self, uid: &str) -> bool {
        self.shared.state.lock().ledger.contains(uid)
    }

    /// For adding up a pod's claims: the last reading of (`class`, `node`) and the bytes it
    /// certainly does not show, the claims `except` left out. `None` when reservations are off
    /// or nothing was read there.
    pub fn room(&self, class: &str, node: &str, except: &[&str]) -> Option<(Capacity, i64)> {
        if !self.shared.config.reservations {
            return None;
        }
        let state = self.shared.state.lock();
        let key = Self::key_of(&state, class, node)?;
        let &(reading, round) = state.readings.get(&key)?;
        Some((reading, state.ledger.certain(&key, round, except).bytes))
    }

    /// Holds, under `uid`, enough of (`class`, `node`) that a claim of `largest` bytes no
    /// longer passes the scheduler's filter there; published at once.
    pub fn block(&self, uid: &str, class: &str, node: &str, largest: i64) -> Option<Hold> {
        let shared = &self.shared;
        let key = {
            let mut state = shared.state.lock();
            let key = Self::key_of(&state, class, node)?;
            let &(reading, round) = state.readings.get(&key)?;
            // Without this pod's earlier block, or a second claim of it would hold nothing.
            let reserved = state.ledger.reserved(&key, round, Some(uid)).bytes;
            let bytes = capacity::pod::block(reading, reserved, largest);
            // No reading ever shows a block: it counts for every one.
            state.ledger.hold(uid, key.clone(), bytes, u64::MAX);
            key
        };
        shared.queue.add_urgent(Item::Publish(key));
        // No reading ever shows a block: lifted, it ends at once.
        Some(Hold {
            shared: shared.clone(),
            uid: uid.to_string(),
            may_exist: false,
        })
    }
}

impl RefreshHandle {
    /// The claim `uid`'s volume was deleted (or shown never made): a reservation that waited
    /// for a reading to show it ends now, as no reading will.
    pub fn volume_gone(&self, uid: &str) {
        self.shared.end(uid, Ledger::deleted);
    }

    /// What reservations may do for the next claim, from the CSIDriver's
    /// `spec.storageCapacity` ([`capacity::scheduler`]), read again once older than [`REUSE`].
    /// Nothing is read while reservations are off.
    pub async fn allowed(&self) -> Allowed {
        let shared = &self.shared;
        if !shared.config.reservations {
            return allowed(SchedulerCheck::Off);
        }
        // One read at a time: claims deciding together wait for it rather than each asking.
        let mut last = shared.scheduler_check.lock().await;
        if let Some(check) = reuse(last.as_ref(), std::time::Instant::now(), REUSE) {
            return allowed(check);
        }
        let name = shared.config.driver_name.as_str();
        let api: kube::Api<CSIDriver> = kube::Api::all(shared.api.clone().into_client());
        let check = match api.get_opt(name).await {
            Ok(found) => SchedulerCheck::from_field(found.map(|d| d.spec.storage_capacity)),
            Err(e) => {
                if last.is_none_or(|l| l.check != SchedulerCheck::Unknown) {
                    tracing::warn!(csidriver = %name, err = %crate::api_error::message(&e),
                        "Cannot read the CSIDriver to learn whether the scheduler uses capacity \
                         (spec.storageCapacity); until it can be read, in-flight volumes still lower \
                         the published capacity but no claim is sent back without asking the driver. \
                         Grant get on storage.k8s.io csidrivers");
                }
                SchedulerCheck::Unknown
            }
        };
        if last.is_none_or(|l| l.check != check) {
            klog::v!(2, csidriver = %name, check = ?check, "Scheduler capacity check of the driver");
        }
        *last = Some(Remembered {
            check,
            read_at: std::time::Instant::now(),
        });
        allowed(check)
    }
}

impl Shared {
    /// Ends the reservation of `uid` with `how` ([`Ledger::end`] or [`Ledger::deleted`]) and
    /// publishes its key again from the last reading.
    fn end(&self, uid: &str, how: fn(&mut Ledger, &str) -> Option<Key>) {
        let key = how(&mut self.state.lock().ledger, uid);
        if let Some(key) = key {
            self.queue.add_urgent(Item::Publish(key));
        }
    }

    /// The last reading of `key` less what is on its way, published without asking the driver.
    pub(super) async fn publish_reserved(&self, key: Key) -> Outcome {
        let value = {
            let state = self.state.lock();
            let stale_zero = self.config.stale_zero
                && self
                    .config
                    .stale_after
                    .is_some_and(|after| state.staleness.is_stale(&key, Instant::now(), after));
            match state.readings.get(&key) {
                // A stale object shows 0 already; a key never read has nothing to lower.
                Some(_) if stale_zero => return Outcome::Done,
                None => return Outcome::Done,
                Some(&(reading, round)) if state.desired.contains(&key) => {
                    apply(reading, state.ledger.reserved(&key, round, None).bytes)
                }
                Some(_) => return Outcome::Done,
            }
        };
        self.write(&key, value).await
    }
}
