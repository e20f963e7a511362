//! The impure steps: a resync from the caches, and the processing of one queue item.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use capacity::class::eligible;
use capacity::desired::desired_keys;
use capacity::plan::{Write, plan_key};
use capacity::published::{Published, build_object, updated_object};
use capacity::segment::display;
use capacity::{Capacity, Key};
use controller_kit::events::EventType;
use controller_kit::workqueue::Outcome;
use csi::status::go_error_string;
use csi::v1::{GetCapacityRequest, Topology};
use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::api::storage::v1::CSIStorageCapacity;
use kube::api::{DeleteParams, PostParams};
use kube::runtime::reflector::ObjectRef;
use tokio::time::Instant;
use tonic::Code;

use super::error::CapacityError;
use super::{Item, Shared};
use capacity::grace::with_grace;
use capacity::ledger::apply;
use capacity::resync::{backoff, diff, node_segment};

impl Shared {
    /// Recomputes the desired keys from the caches and queues what changed: new keys (and
    /// keys of classes with new parameters), desired keys without an object, doomed objects.
    /// Reads the caches under the state lock, so a change is either in this read or handled
    /// by the dispatcher afterwards.
    pub(super) fn resync(&self) {
        let cfg = &self.config;
        let (refresh, missing, doomed) = {
            let mut state = self.state.lock();
            let classes = eligible(
                self.caches.classes.state().iter().map(|c| c.as_ref()),
                &cfg.driver_name,
                cfg.include_immediate,
            );
            let current: std::collections::HashMap<_, _> = self
                .caches
                .csi_nodes
                .state()
                .iter()
                .filter_map(|cn| {
                    let name = cn.metadata.name.clone()?;
                    let node = self.caches.nodes.get(&ObjectRef::new(&name));
                    let segment = node_segment(
                        Some(cn),
                        node.as_ref().map(|n| &n.metadata),
                        &cfg.driver_name,
                    )?;
                    Some((name, segment))
                })
                .collect();
            let state = &mut *state;
            let (node_segments, grace_ends) = with_grace(
                current,
                &state.node_segments,
                &mut state.lost,
                |n| self.caches.nodes.get(&ObjectRef::new(n)).is_some(),
                std::time::Instant::now(),
                cfg.driver_grace,
            );
            if let Some(end) = grace_ends {
                // Look again when the first grace is over.
                let wait = end.saturating_duration_since(std::time::Instant::now());
                self.topology.add_after((), wait);
            }
            let segments = node_segments.values().cloned().collect();
            let desired = desired_keys(&segments, &classes);
            let classes: BTreeMap<_, _> =
                classes.into_iter().map(|c| (c.name.clone(), c)).collect();
            let plan = diff(&state.desired, &state.classes, &desired, &classes);
            if let Some(store) = &self.caches.capacities {
                state
                    .index
                    .rebuild(store.state().iter().map(|o| o.as_ref()));
            }
            state.staleness.retain(&desired, Instant::now());
            state.forget_rounds(&desired);
            state.readings.retain(|k, _| desired.contains(k));
            state.ledger.retain_keys(|k| desired.contains(k));
            state.unattempted.retain(|k| desired.contains(k));
            state.unattempted.extend(plan.refresh.iter().cloned());
            state
                .unimplemented_warned
                .retain(|c| classes.contains_key(c));
            let missing: Vec<Key> = desired
                .iter()
                .filter(|k| !state.index.has_live(k) && !self.pending_for(k))
                .filter(|k| !plan.refresh.contains(k))
                .cloned()
                .collect();
            let doomed = state.index.doomed(&desired);
            klog::v!(
                3,
                keys = desired.len(),
                new = plan.refresh.len(),
                removed = plan.removed.len(),
                missing = missing.len(),
                doomed = doomed.len(),
                "Capacity resync"
            );
            state.desired = desired;
            state.classes = classes;
            state.node_segments = node_segments;
            state.started = true;
            (plan.refresh, missing, doomed)
        };
        self.check_conflicts();
        self.enqueue_urgent(refresh);
        self.enqueue_urgent(missing);
        for name in doomed {
            self.queue.add_urgent(Item::Delete(name));
        }
    }

    pub(super) async fn process(&self, item: Item) -> Outcome {
        let turn = match &item {
            Item::Refresh(key) | Item::Publish(key) => Some(self.turn(key)),
            Item::Delete(_) => None,
        };
        let _turn = match &turn {
            Some(lock) => Some(lock.lock().await),
            None => None,
        };
        match item {
            Item::Refresh(key) => {
                let round = self.state.lock().begin_round(&key);
                let outcome = self.refresh(key.clone(), round).await;
                // Published or failed: whoever waits for this key may go on.
                self.state.lock().end_round(&key);
                self.bump();
                outcome
            }
            Item::Delete(name) => self.delete_if_doomed(&name).await,
            Item::Publish(key) => self.publish_reserved(key).await,
        }
    }

    /// GetCapacity for one key (refresh round `round`), then the write it calls for.
    async fn refresh(&self, key: Key, round: u64) -> Outcome {
        let parameters = {
            let state = self.state.lock();
            match state.classes.get(&key.class) {
                Some(class) if state.desired.contains(&key) => class.parameters.clone(),
                // Gone from the desired set while queued: nothing to do, nothing to keep.
                _ => return Outcome::Done,
            }
        };
        let request = GetCapacityRequest {
            volume_capabilities: Vec::new(),
            parameters: parameters.into_iter().collect(),
            accessible_topology: Some(Topology {
                segments: key.segment.clone().into_iter().collect(),
            }),
        };
        let result = self.csi.get_capacity(request).await;
        self.state.lock().unattempted.remove(&key);
        let response = match result {
            Ok(r) => r,
            Err(status) => {
                let retry = self.capacity_failed(&key, &status);
                return match self.stale(&key, &status).await {
                    Outcome::Done => retry,
                    failed_write => failed_write,
                };
            }
        };
        let (available, maximum) = (response.available_capacity, response.maximum_volume_size);
        if Capacity::was_clamped(available, maximum) {
            let segment = display(&key.segment);
            klog::v!(2, class = %key.class, segment = %segment, available, maximum = ?maximum,
                "GetCapacity returned a negative value; publishing 0 instead");
        }
        let reading = Capacity::from_response(available, maximum);
        let published = {
            let mut state = self.state.lock();
            state.staleness.success(&key, Instant::now());
            state.readings.insert(key.clone(), (reading, round));
            let reserved = state.ledger.reserved(&key, round, None).bytes;
            state.ledger.settle(&key, round);
            apply(reading, reserved)
        };
        self.write(&key, published).await
    }

    /// Keeps the published value (as upstream) and retries with backoff. The failure shows in
    /// the staleness metrics; `Unimplemented` is a warning once per class, then v5 noise.
    fn capacity_failed(&self, key: &Key, status: &tonic::Status) -> Outcome {
        let (failures, first_unimplemented) = {
            let mut state = self.state.lock();
            let failures = state.staleness.failure(key);
            let first = status.code() == Code::Unimplemented
                && state.unimplemented_warned.insert(key.class.clone());
            (failures, first)
        };
        let err = go_error_string(status);
        let segment = display(&key.segment);
        if first_unimplemented {
            tracing::warn!(class = %key.class, err = %err,
                "The CSI driver does not implement GetCapacity; CSIStorageCapacity objects of this class keep their last value. Implement GetCapacity or run without --enable-capacity");
        } else if status.code() == Code::Unimplemented {
            klog::v!(5, class = %key.class, segment = %segment, err = %err, "GetCapacity failed");
        } else {
            // At every verbosity, as upstream's: a bad class parameter shows here first.
            tracing::warn!(class = %key.class, segment = %segment, failures, err = %err,
                "GetCapacity failed; keeping the published value");
        }
        if failures == 0 {
            return Outcome::Done;
        }
        let cfg = &self.config;
        let retry = backoff(cfg.retry_interval_start, cfg.retry_interval_max, failures);
        // With `--capacity-stale-after`, come back when the key turns stale at the latest: the
        // report and the zero are due then, not at the next backoff or poll.
        let stale_in = cfg.stale_after.and_then(|after| {
            self.state
                .lock()
                .staleness
                .stale_in(key, Instant::now(), after)
        });
        Outcome::RetryAfter(stale_in.map_or(retry, |left| retry.min(left)))
    }

    /// `--capacity-stale-after` (ours): once the key has had no successful GetCapacity for
    /// that long, a Warning event on its objects says so (once per stale spell), and with
    /// `--capacity-stale-action=zero` the objects show 0 until GetCapacity answers again.
    async fn stale(&self, key: &Key, status: &tonic::Status) -> Outcome {
        let Some(after) = self.config.stale_after else {
            return Outcome::Done;
        };
        let now = Instant::now();
        let (newly, stale) = {
            let mut state = self.state.lock();
            let newly = state.staleness.newly_stale(key, now, after);
            (newly, state.staleness.is_stale(key, now, after))
        };
        if newly {
            let message = stale_message(after, self.config.stale_zero, &go_error_string(status));
            let segment = display(&key.segment);
            tracing::warn!(class = %key.class, segment = %segment, "{message}");
            for object in self.objects_of(key) {
                self.recorder.event(
                    &object_reference(&object),
                    EventType::Warning,
                    STALE_REASON,
                    message.clone(),
                );
            }
        }
        if stale && self.config.stale_zero {
            return self.write(key, Capacity::from_response(0, Some(0))).await;
        }
        Outcome::Done
    }

    /// The objects representing `key` as the next write must see them: the cache's, read
    /// through our own writes, and objects we created that the cache does not show yet.
    fn objects_of(&self, key: &Key) -> Vec<Arc<CSIStorageCapacity>> {
        let Some(fresh) = &self.caches.capacities else {
            return Vec::new();
        };
        let mut names: BTreeSet<String> = {
            let state = self.state.lock();
            state.index.names(key).map(String::from).collect()
        };
        names.extend(self.pending_published(key).into_iter().map(|p| p.name));
        names
            .iter()
            .filter_map(|n| fresh.get(&ObjectRef::new(n).within(&self.config.namespace)))
            .collect()
    }

    /// Whether an object of ours for `key` that is not being deleted is only in our pending
    /// writes (created or updated, not shown by the cache yet).
    pub(super) fn pending_for(&self, key: &Key) -> bool {
        self.pending_published(key).iter().any(|p| !p.deleting)
    }

    /// Our objects of `key` as our pending writes left them.
    fn pending_published(&self, key: &Key) -> Vec<Published> {
        let Some(fresh) = &self.caches.capacities else {
            return Vec::new();
        };
        fresh
            .pending_objects()
            .iter()
            .map(|o| Published::from_object(o))
            .filter(|p| p.key.as_ref() == Some(key))
            .collect()
    }

    pub(super) async fn write(&self, key: &Key, reading: Capacity) -> Outcome {
        let objects = self.objects_of(key);
        let published: Vec<Published> = objects.iter().map(|o| Published::from_object(o)).collect();
        let owner_uid = self.config.owner.as_ref().map(|o| o.uid.as_str());
        let plan = plan_key(
            Some(reading),
            &published.iter().collect::<Vec<_>>(),
            owner_uid,
        );
        let what = || format!("{}/{}", key.class, display(&key.segment));
        match plan.write {
            Write::Nothing => {}
            Write::Create => {
                let obj = build_object(key, reading, &self.template);
                match self.api.create(&PostParams::default(), &obj).await {
                    Ok(created) => {
                        klog::v!(3, name = created.metadata.name.as_deref().unwrap_or_default(), key = %what(), capacity = reading.available,
                            "Created CSIStorageCapacity");
                        self.remember(None, created);
                    }
                    Err(source) => {
                        return Outcome::retry(CapacityError::Create {
                            key: what(),
                            source,
                        });
                    }
                }
            }
            Write::Update { name } => {
                let Some(base) = objects
                    .iter()
                    .find(|o| o.metadata.name.as_deref() == Some(&name))
                else {
                    return Outcome::retry(CapacityError::Vanished { name });
                };
                if let Err(e) = self.update(base.clone(), reading).await {
                    return Outcome::retry(e);
                }
            }
        }
        for name in plan.delete_duplicates {
            if let Err(e) = self.delete(&name).await {
                return Outcome::retry(e);
            }
        }
        Outcome::Done
    }

    /// Patches the object's values (and our owner reference) alone, guarded by the version
    /// they were computed from, so what someone else put on it stays (the cache drops the
    /// last-applied annotation); after a conflict (the cache lagged behind someone's write)
    /// reads it once and tries again.
    async fn update(
        &self,
        mut base: Arc<CSIStorageCapacity>,
        reading: Capacity,
    ) -> Result<(), CapacityError> {
        let name = base.metadata.name.clone().unwrap_or_default();
        // The cache may show the version we started from even after a conflict's re-read.
        let first = base.metadata.resource_version.clone();
        for attempt in 0..2 {
            let obj = updated_object(&base, reading, self.config.owner.as_ref());
            match self.patch_values(&name, &base, &obj).await {
                Ok(updated) => {
                    klog::v!(3, name = %name, capacity = reading.available, "Updated CSIStorageCapacity");
                    let replaced = [first.as_deref(), base.metadata.resource_version.as_deref()];
                    self.remember(Some(replaced.into_iter().flatten().collect()), updated);
                    return Ok(());
                }
                Err(kube::Error::Api(s)) if s.code == 409 && attempt == 0 => {
                    base = Arc::new(self.api.get(&name).await.map_err(|source| {
                        CapacityError::Update {
                            name: name.clone(),
                            source,
                        }
                    })?);
                }
                Err(source) => return Err(CapacityError::Update { name, source }),
            }
        }
        Err(CapacityError::Conflict { name })
    }

    /// Sends the difference between `base` and `obj` as a merge patch guarded by `base`'s
    /// resourceVersion. Upstream's RBAC grants `patch` here; an older copy of ours did not, so
    /// an RBAC refusal falls back to replacing the object, as before.
    async fn patch_values(
        &self,
        name: &str,
        base: &CSIStorageCapacity,
        obj: &CSIStorageCapacity,
    ) -> Result<CSIStorageCapacity, kube::Error> {
        use controller_kit::patch::{guarded, merge_diff, refused_verb};
        use kube::api::{Patch, PatchParams};
        let diff = merge_diff(
            &serde_json::to_value(base).map_err(kube::Error::SerdeError)?,
            &serde_json::to_value(obj).map_err(kube::Error::SerdeError)?,
        )
        .unwrap_or_else(|| serde_json::json!({}));
        let version = base
            .metadata
            .resource_version
            .as_deref()
            .unwrap_or_default();
        let patch = guarded(diff, version);
        match self
            .api
            .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
        {
            Err(kube::Error::Api(e)) if e.code == 403 && refused_verb(&e.message, "patch") => {
                tracing::warn!(name = %name, "Not allowed to patch CSIStorageCapacity objects; replacing instead, which drops their last-applied annotation (grant patch on csistoragecapacities, as upstream's RBAC does)");
                self.api.replace(name, &PostParams::default(), obj).await
            }
            other => other,
        }
    }

    /// Records our write (`replaced`: the versions it replaced; `None` for a create), so the
    /// next write of the key builds on it even before the cache shows it.
    fn remember(&self, replaced: Option<Vec<&str>>, object: CSIStorageCapacity) {
        if let Some(fresh) = &self.caches.capacities {
            match replaced {
                Some(rvs) => fresh.updated(rvs, object),
                None => fresh.created(object),
            }
        }
        self.bump();
    }

    /// Deletes `name` if it is still doomed when its turn comes (its class may be back).
    async fn delete_if_doomed(&self, name: &str) -> Outcome {
        let doomed = {
            let state = self.state.lock();
            state.index.is_doomed(name, &state.desired)
        };
        if !doomed {
            return Outcome::Done;
        }
        match self.delete(name).await {
            Ok(()) => Outcome::Done,
            Err(e) => Outcome::retry(e),
        }
    }

    async fn delete(&self, name: &str) -> Result<(), CapacityError> {
        let namespace = self.config.namespace.as_str();
        let base = self.caches.capacities.as_ref().and_then(|fresh| {
            fresh
                .get(&ObjectRef::new(name).within(namespace))
                .and_then(|o| o.metadata.resource_version.clone())
        });
        let remains = match self.api.delete(name, &DeleteParams::default()).await {
            Ok(deleted) => {
                klog::v!(3, name = %name, "Deleted CSIStorageCapacity");
                self.bump();
                deleted.left()
            }
            Err(kube::Error::Api(s)) if s.code == 404 => None,
            Err(source) => {
                return Err(CapacityError::Delete {
                    name: name.to_string(),
                    source,
                });
            }
        };
        if let (Some(fresh), Some(base)) = (&self.caches.capacities, base) {
            fresh.deleted(Some(namespace), name, &base, remains);
        }
        Ok(())
    }
}

/// The event reason of a stale object.
pub(super) const STALE_REASON: &str = "CapacityStale";

/// What a stale object's event and log line say.
pub(super) fn stale_message(after: Duration, zero: bool, error: &str) -> String {
    let what = if zero {
        "publishing 0 until it answers again (--capacity-stale-action=zero)"
    } else {
        "the published capacity is that old (--capacity-stale-action=keep)"
    };
    format!(
        "GetCapacity has not succeeded for {} or longer (--capacity-stale-after); last error: {error}; {what}",
        cli::format_go_duration(i64::try_from(after.as_nanos()).unwrap_or(i64::MAX))
    )
}

pub(super) fn object_reference(object: &CSIStorageCapacity) -> ObjectReference {
    ObjectReference {
        api_version: Some("storage.k8s.io/v1".into()),
        kind: Some("CSIStorageCapacity".into()),
        name: object.metadata.name.clone(),
        namespace: object.metadata.namespace.clone(),
        uid: object.metadata.uid.clone(),
        resource_version: object.metadata.resource_version.clone(),
        field_path: None,
    }
}
