//! Step 5, release: drop our finalizer once the PV owns the volume.

use controller_kit::workqueue::exponential;
use k8s_openapi::api::core::v1::PersistentVolumeClaim;
use provisioning::record::Leaving;

use super::record::Lane;
use super::{ClaimKey, ClaimsController, update};

impl ClaimsController {
    /// Drops our finalizer once the PV owns the volume, on its own task. For a bound claim
    /// nothing waits for it: it spends only tokens the hot path leaves free (background lane).
    /// A deleted claim's deletion waits for it: main budget. If it fails, the claim is queued
    /// again after a backoff of its own (the sync that started the task counted as a success,
    /// so the queue's backoff was reset; and nothing else may ever write the claim again).
    pub(super) fn release_later(&self, claim: &PersistentVolumeClaim) {
        let uid = claim.metadata.uid.clone().unwrap_or_default();
        let (lane, client) = if claim.metadata.deletion_timestamp.is_some() {
            (Lane::Foreground, self.ctx.client.clone())
        } else {
            (Lane::Background, self.ctx.background_client.clone())
        };
        if !self.records.start_release(&uid, lane) {
            return;
        }
        let (records, claim, task_uid) = (self.records.clone(), claim.clone(), uid.clone());
        let entries = self.entries.clone();
        let claims = self.ctx.caches.claims.clone();
        // This node's own finalizer goes too: the claim is back here and its PV holds the
        // volume this node may have made before.
        let node_finalizer = self.node_finalizer();
        let queue = self.queue.clone();
        let (start, max) = (
            self.config.retry_interval_start,
            self.config.retry_interval_max,
        );
        let task = tokio::spawn(async move {
            match update::remove_finalizer(&client, &claims, &claim, node_finalizer.as_deref())
                .await
            {
                // The PV owns the volume now; later syncs read the claim through our write.
                Ok(_) => {
                    records.forget(&task_uid);
                    entries.forget(&task_uid, Leaving::PvSaved);
                }
                Err(e) => {
                    let delay = exponential(start, max, records.release_failed(&task_uid));
                    let key = ClaimKey::of(&claim);
                    tracing::warn!(claim = %key.to_string(), err = %e, retry_in = ?delay, "Cannot remove the creating-volume finalizer; will retry");
                    queue.count_error("claim_write");
                    queue.add_after(key, delay);
                }
            }
            records.end_release(&task_uid, lane);
        });
        self.records.track_release(&uid, lane, task.abort_handle());
    }
}
