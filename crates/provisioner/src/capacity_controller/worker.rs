//! The impure steps: a resync from the caches, and the processing of one queue item.

use std::collections::BTreeMap;
use std::sync::Arc;

use capacity::class::eligible;
use capacity::desired::desired_keys;
use capacity::plan::{Write, plan_key};
use capacity::published::{Published, build_object, updated_object};
use capacity::segment::{display, segment_of};
use capacity::{Capacity, Key};
use controller_kit::workqueue::Outcome;
use csi::status::go_error_string;
use csi::v1::{GetCapacityRequest, Topology};
use k8s_openapi::api::storage::v1::CSIStorageCapacity;
use kube::api::{DeleteParams, PostParams};
use kube::runtime::reflector::ObjectRef;
use tokio::time::Instant;
use tonic::Code;

use super::{Item, Shared};
use capacity::resync::{backoff, diff, node_driver};
use capacity::written::{Written, objects_for_key};

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
            let node_segments: std::collections::HashMap<_, _> = self
                .caches
                .csi_nodes
                .state()
                .iter()
                .filter_map(|cn| node_driver(cn, &cfg.driver_name))
                .filter_map(|d| {
                    let node = self.caches.nodes.get(&ObjectRef::new(&d.node))?;
                    let segment = segment_of(&d, node.metadata.labels.as_ref()?)?;
                    Some((d.node, segment))
                })
                .collect();
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
            state.written.retain(|k, _| desired.contains(k));
            state.unattempted.retain(|k| desired.contains(k));
            state.unattempted.extend(plan.refresh.iter().cloned());
            state
                .unimplemented_warned
                .retain(|c| classes.contains_key(c));
            let missing: Vec<Key> = desired
                .iter()
                .filter(|k| !state.index.has_live(k) && !state.written.contains_key(k))
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
        self.enqueue_urgent(refresh);
        self.enqueue_urgent(missing);
        for name in doomed {
            self.queue.add_urgent(Item::Delete(name));
        }
    }

    pub(super) async fn process(&self, item: Item) -> Outcome {
        match item {
            Item::Refresh(key) => self.refresh(key).await,
            Item::Delete(name) => self.delete_if_doomed(&name).await,
        }
    }

    /// GetCapacity for one key, then the write it calls for.
    async fn refresh(&self, key: Key) -> Outcome {
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
            Err(status) => return self.capacity_failed(&key, &status),
        };
        let (available, maximum) = (response.available_capacity, response.maximum_volume_size);
        if Capacity::was_clamped(available, maximum) {
            let segment = display(&key.segment);
            klog::v!(2, class = %key.class, segment = %segment, available, maximum = ?maximum,
                "GetCapacity returned a negative value; publishing 0 instead");
        }
        self.state.lock().staleness.success(&key, Instant::now());
        self.write(&key, Capacity::from_response(available, maximum))
            .await
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
            klog::v!(2, class = %key.class, segment = %segment, failures, err = %err,
                "GetCapacity failed; keeping the published value");
        }
        if failures == 0 {
            return Outcome::Done;
        }
        let cfg = &self.config;
        Outcome::RetryAfter(backoff(
            cfg.retry_interval_start,
            cfg.retry_interval_max,
            failures,
        ))
    }

    /// The objects representing `key` as the next write must see them.
    fn objects_of(&self, key: &Key) -> Vec<Arc<CSIStorageCapacity>> {
        let mut state = self.state.lock();
        let cached = match &self.caches.capacities {
            Some(store) => state
                .index
                .names(key)
                .filter_map(|n| store.get(&ObjectRef::new(n).within(&self.config.namespace)))
                .collect(),
            None => Vec::new(),
        };
        let (objects, keep) = objects_for_key(cached, state.written.get(key));
        if !keep {
            state.written.remove(key);
        }
        objects
    }

    async fn write(&self, key: &Key, reading: Capacity) -> Outcome {
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
                        self.remember(key, None, created);
                    }
                    Err(e) => {
                        return Outcome::Retry(format!(
                            "cannot create CSIStorageCapacity for {}: {e}",
                            what()
                        ));
                    }
                }
            }
            Write::Update { name } => {
                let Some(base) = objects
                    .iter()
                    .find(|o| o.metadata.name.as_deref() == Some(&name))
                else {
                    return Outcome::Retry(format!("CSIStorageCapacity {name} vanished"));
                };
                if let Err(reason) = self.update(key, base.clone(), reading).await {
                    return Outcome::Retry(reason);
                }
            }
        }
        for name in plan.delete_duplicates {
            if let Err(e) = self.delete(&name).await {
                return Outcome::Retry(e);
            }
        }
        Outcome::Done
    }

    /// Replaces the object; after a conflict (the cache lagged behind someone's write) reads
    /// it once and tries again.
    async fn update(
        &self,
        key: &Key,
        mut base: Arc<CSIStorageCapacity>,
        reading: Capacity,
    ) -> Result<(), String> {
        let name = base.metadata.name.clone().unwrap_or_default();
        for attempt in 0..2 {
            let obj = updated_object(&base, reading, self.config.owner.as_ref());
            match self.api.replace(&name, &PostParams::default(), &obj).await {
                Ok(updated) => {
                    klog::v!(3, name = %name, capacity = reading.available, "Updated CSIStorageCapacity");
                    self.remember(key, base.metadata.resource_version.clone(), updated);
                    return Ok(());
                }
                Err(kube::Error::Api(s)) if s.code == 409 && attempt == 0 => {
                    base = Arc::new(self.api.get(&name).await.map_err(|e| {
                        format!("cannot read CSIStorageCapacity {name} after a conflict: {e}")
                    })?);
                }
                Err(e) => {
                    if matches!(&e, kube::Error::Api(s) if s.code == 404) {
                        self.state.lock().written.remove(key);
                    }
                    return Err(format!("cannot update CSIStorageCapacity {name}: {e}"));
                }
            }
        }
        Err(format!(
            "cannot update CSIStorageCapacity {name}: conflict after re-reading"
        ))
    }

    fn remember(&self, key: &Key, base: Option<String>, object: CSIStorageCapacity) {
        let written = Written {
            base,
            object: Arc::new(object),
        };
        self.state.lock().written.insert(key.clone(), written);
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
            Err(e) => Outcome::Retry(e),
        }
    }

    async fn delete(&self, name: &str) -> Result<(), String> {
        match self.api.delete(name, &DeleteParams::default()).await {
            Ok(_) => {
                klog::v!(3, name = %name, "Deleted CSIStorageCapacity");
                self.bump();
                Ok(())
            }
            Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
            Err(e) => Err(format!("cannot delete CSIStorageCapacity {name}: {e}")),
        }
    }
}
