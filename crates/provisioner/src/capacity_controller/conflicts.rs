//! Foreign objects that overlap ours (ours, central mode): one Warning event per object when
//! it starts to overlap, a log line, and the `csistoragecapacity_foreign_overlapping` gauge.
//! Checked when such an object changes and after every resync (our keys changed).

use std::collections::HashMap;

use capacity::conflicts::{message, overlaps};
use controller_kit::events::EventType;
use k8s_openapi::api::core::v1::ObjectReference;

use super::Shared;
use super::worker::object_reference;

/// Event reason on a foreign object that overlaps ours.
pub(super) const CONFLICT_REASON: &str = "CapacityConflict";

impl Shared {
    pub(super) fn check_conflicts(&self) {
        let Some(foreign) = &self.caches.foreign else {
            return;
        };
        let managed_by = &self.config.managed_by;
        let newly = {
            let mut state = self.state.lock();
            if !state.started {
                return;
            }
            let now: HashMap<String, (ObjectReference, Vec<_>)> = foreign
                .state()
                .iter()
                .filter_map(|o| {
                    let keys = overlaps(o, managed_by, &state.desired);
                    let uid = o.metadata.uid.clone()?;
                    (!keys.is_empty()).then(|| (uid, (object_reference(o), keys)))
                })
                .collect();
            let newly: Vec<_> = now
                .iter()
                .filter(|(uid, _)| !state.conflicts.contains_key(*uid))
                .map(|(_, v)| v.clone())
                .collect();
            state.conflicts = now
                .into_iter()
                .map(|(uid, (_, keys))| (uid, keys))
                .collect();
            newly
        };
        for (object, keys) in newly {
            let name = format!(
                "{}/{}",
                object.namespace.as_deref().unwrap_or_default(),
                object.name.as_deref().unwrap_or_default()
            );
            let text = message(&name, &keys, managed_by);
            tracing::warn!("{text}");
            self.recorder
                .event(&object, EventType::Warning, CONFLICT_REASON, text);
        }
    }
}
