//! The line from the provisioning side to the capacity controller: every request the claim and
//! volume controllers may make, through [`RefreshHandle`]. They never see the controller's
//! state; each request takes its lock briefly, or queues work, and returns.
//!
//! Published objects:
//! - [`RefreshHandle::refresh`]: refresh the objects a [`Refresh`] names, ahead of the poll;
//! - [`RefreshHandle::refresh_then_tell`]: the same, and a [`Refreshed`] future that completes
//!   once each of them was refreshed by a GetCapacity begun after the call;
//! - [`RefreshHandle::explain`]: why no published segment of a class fits a claim;
//! - [`RefreshHandle::subscribe`]: a counter bumped whenever something published changes.
//!
//! Reservations (`--capacity-reservations`, module `reservations`):
//! - [`RefreshHandle::hold`]: reserve a claim's size on its node before CreateVolume (the
//!   returned [`Hold`](super::Hold) releases it when dropped);
//! - [`RefreshHandle::volume_gone`]: the claim's volume is gone, end a reservation waiting
//!   for a reading;
//! - [`RefreshHandle::allowed`]: what reservations may decide, from the CSIDriver;
//! - [`RefreshHandle::blocks`], [`RefreshHandle::is_held`], [`RefreshHandle::room`]: what is
//!   held on a node, for a pod's claims;
//! - [`RefreshHandle::block`]: hold enough of a node that a pod's claim no longer fits there.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use capacity::explain::explain_exhaustion;
use capacity::refresh::keys_for_volume;
use capacity::{Capacity, Key, Segment};
use k8s_openapi::api::core::v1::VolumeNodeAffinity;
use tokio::sync::{oneshot, watch};

use super::{Shared, State};

/// How the provisioning controllers talk to the capacity controller.
#[derive(Clone)]
pub struct RefreshHandle {
    pub(super) shared: Arc<Shared>,
}

impl std::fmt::Debug for RefreshHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RefreshHandle")
            .field("driver", &self.shared.config.driver_name)
            .finish_non_exhaustive()
    }
}

/// Which published objects a provisioning controller's work may have made stale.
#[derive(Debug, Clone, Copy)]
pub enum Refresh<'a> {
    /// A volume of `class` was created or deleted where `affinity` says (every class of the
    /// volume's segments shares its pool).
    Volume {
        class: &'a str,
        affinity: Option<&'a VolumeNodeAffinity>,
    },
    /// An attempt for `class` failed or was cleaned up: its objects anywhere.
    Class(&'a str),
    /// The objects of `class` for the segment of `node`.
    Node { class: &'a str, node: &'a str },
}

/// Completes once every object a [`RefreshHandle::refresh_then_tell`] named was refreshed
/// (published, or found failing) by a GetCapacity begun after the call, or stopped being
/// published. Bound it with a timeout: the driver may be slow.
#[must_use = "the refresh is asked anyway; this only tells when it is done"]
#[derive(Debug)]
pub struct Refreshed {
    pending: Vec<oneshot::Receiver<()>>,
}

impl Future for Refreshed {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        // A dropped sender (the controller ended) tells as well as a sent one.
        self.pending
            .retain_mut(|rx| Pin::new(rx).poll(cx).is_pending());
        if self.pending.is_empty() {
            Poll::Ready(())
        } else {
            Poll::Pending
        }
    }
}

impl RefreshHandle {
    /// Refreshes the objects `what` names now, ahead of periodic work (bursts coalesce per
    /// object).
    pub fn refresh(&self, what: Refresh<'_>) {
        let keys = keys(&self.shared.state.lock(), what);
        self.shared.enqueue_urgent(keys);
    }

    /// [`RefreshHandle::refresh`], and a future told when each object named has been refreshed
    /// by a GetCapacity begun after this call; one already in flight may have read the value
    /// from before, so it does not count.
    pub fn refresh_then_tell(&self, what: Refresh<'_>) -> Refreshed {
        let mut pending = Vec::new();
        let keys = {
            let mut state = self.shared.state.lock();
            // Under one lock with the keys, so a resync cannot drop a key in between and
            // leave its waiter untold.
            let keys = keys(&state, what);
            pending.extend(keys.iter().map(|k| state.tell_after_next_round(k)));
            keys
        };
        self.shared.enqueue_urgent(keys);
        Refreshed { pending }
    }

    /// When no published segment of `class` can hold `requested` bytes, the message to put on
    /// a waiting claim; `None` when one can, or before every object of the class was read
    /// once (a starting controller must not claim that nothing fits).
    pub fn explain(&self, class: &str, requested: i64) -> Option<String> {
        let state = self.shared.state.lock();
        let settled = state.started
            && state.classes.contains_key(class)
            && !state.unattempted.iter().any(|k| k.class == class);
        if !settled {
            return None;
        }
        // What the scheduler sees: the objects of the class, with their volume limits.
        let readings: Vec<(Segment, Capacity)> = state
            .index
            .all()
            .filter(|p| !p.deleting)
            .filter_map(|p| {
                let key = p.key.as_ref()?;
                if key.class != class || !state.desired.contains(key) {
                    return None;
                }
                if p.capacity.is_none() && p.maximum_volume_size.is_none() {
                    return None;
                }
                let reading = Capacity {
                    available: p.capacity.unwrap_or(0),
                    maximum_volume_size: p.maximum_volume_size,
                };
                Some((key.segment.clone(), reading))
            })
            .collect();
        explain_exhaustion(class, requested, &readings)
    }

    /// Bumped whenever published capacity changes, so waiting claims can be re-checked.
    pub fn subscribe(&self) -> watch::Receiver<u64> {
        self.shared.published.subscribe()
    }
}

/// The desired keys `what` names.
fn keys(state: &State, what: Refresh<'_>) -> Vec<Key> {
    match what {
        Refresh::Volume { class, affinity } => keys_for_volume(affinity, class, &state.desired)
            .into_iter()
            .collect(),
        Refresh::Class(class) => state
            .desired
            .iter()
            .filter(|k| k.class == class)
            .cloned()
            .collect(),
        Refresh::Node { class, node } => match state.node_segments.get(node) {
            Some(segment) => state
                .desired
                .iter()
                .filter(|k| k.class == class && &k.segment == segment)
                .cloned()
                .collect(),
            None => Vec::new(),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures::FutureExt;

    #[test]
    fn refreshed_completes_once_every_key_is_told() {
        let (a, a_rx) = oneshot::channel();
        let (b, b_rx) = oneshot::channel::<()>();
        let mut refreshed = Refreshed {
            pending: vec![a_rx, b_rx],
        };
        assert!((&mut refreshed).now_or_never().is_none());
        a.send(()).unwrap();
        assert!((&mut refreshed).now_or_never().is_none(), "b not yet");
        // A controller that ended drops its senders: the caller goes on.
        drop(b);
        assert!(refreshed.now_or_never().is_some());
    }

    #[test]
    fn refreshed_of_no_key_is_complete() {
        let refreshed = Refreshed {
            pending: Vec::new(),
        };
        assert!(refreshed.now_or_never().is_some());
    }
}
