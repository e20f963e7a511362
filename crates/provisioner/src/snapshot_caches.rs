//! The VolumeSnapshot and VolumeSnapshotContent caches, part of [`crate::caches::Caches`].
//!
//! Unlike the other caches they are optional and start late: their watches
//! (`snapshot_watch`) run only when the driver takes snapshots, and stop for good when the
//! API server lacks the resources or our RBAC the `watch` verb. Until a watch has listed, and
//! after it gave up, the slot is empty and restores read by GET.
//!
//! Snapshots are written by us (our source-protection finalizer), so they are read through
//! [`Fresh`] like claims and PVs: a copy the watch has not brought up to our own write yet
//! shows our write instead.

use std::sync::Arc;

use controller_kit::fresh::Fresh;
use controller_kit::reflect::Change;
use kube::api::DynamicObject;
use kube::runtime::reflector::ObjectRef;
use parking_lot::RwLock;

use crate::data_source_api::{content_resource, snapshot_resource};

/// One late cache: empty until its watch has listed (or when it cannot run).
type Slot = Arc<RwLock<Option<Fresh<DynamicObject>>>>;

/// Both snapshot caches. Cheap to clone; clones share them.
#[derive(Clone, Default)]
pub struct SnapshotCaches {
    snapshots: Slot,
    contents: Slot,
}

impl SnapshotCaches {
    /// The VolumeSnapshot watch listed (`Some`) or cannot run (`None`).
    pub fn set_snapshots(&self, cache: Option<Fresh<DynamicObject>>) {
        *self.snapshots.write() = cache;
    }

    /// The VolumeSnapshotContent watch listed (`Some`) or cannot run (`None`).
    pub fn set_contents(&self, cache: Option<Fresh<DynamicObject>>) {
        *self.contents.write() = cache;
    }

    /// Whether the VolumeSnapshot watch runs (a ready snapshot then wakes its claims).
    pub fn watching_snapshots(&self) -> bool {
        self.snapshots.read().is_some()
    }

    /// The snapshot as we last know it (`None`: not seen, or no watch).
    pub fn snapshot(&self, namespace: &str, name: &str) -> Option<DynamicObject> {
        let key = ObjectRef::new_with(name, snapshot_resource()).within(namespace);
        let cache = self.snapshots.read().clone()?;
        cache.get(&key).map(|o| (*o).clone())
    }

    /// The content as its watch last saw it (`None`: not seen, or no watch).
    pub fn content(&self, name: &str) -> Option<DynamicObject> {
        let key = ObjectRef::new_with(name, content_resource());
        let cache = self.contents.read().clone()?;
        cache.get(&key).map(|o| (*o).clone())
    }

    /// We wrote the snapshot: `stored` replaced version `replaced` (the one we read).
    pub fn snapshot_written(&self, replaced: &str, stored: DynamicObject) {
        if let Some(cache) = self.snapshots.read().as_ref() {
            cache.updated([replaced], stored);
        }
    }

    /// A snapshot change the watch delivered (confirms our pending writes).
    pub fn snapshot_seen(&self, change: &Change<DynamicObject>) {
        if let Some(cache) = self.snapshots.read().as_ref() {
            cache.observe(change);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::runtime::reflector::store::Writer;
    use kube::runtime::watcher::Event;

    fn snapshot(rv: &str, finalizers: &[&str]) -> DynamicObject {
        let mut o = DynamicObject::new("snap", &snapshot_resource()).within("ns");
        o.metadata.uid = Some("uid-snap".into());
        o.metadata.resource_version = Some(rv.into());
        o.metadata.finalizers = Some(finalizers.iter().map(|f| f.to_string()).collect());
        o
    }

    fn finalizers(caches: &SnapshotCaches) -> Option<Vec<String>> {
        caches
            .snapshot("ns", "snap")
            .map(|o| o.metadata.finalizers.unwrap_or_default())
    }

    /// Another restore of ours, or the release after a fast driver, must see our add before
    /// the watch brings it: otherwise it writes the finalizer a second time (a conflict and a
    /// re-read) or leaves it on.
    #[test]
    fn our_write_shows_until_the_watch_brings_it() {
        let caches = SnapshotCaches::default();
        assert_eq!(finalizers(&caches), None, "no watch yet: nothing cached");
        caches.snapshot_written("4", snapshot("5", &["ours"]));
        let mut writer = Writer::new(snapshot_resource());
        writer.apply_watcher_event(&Event::Apply(snapshot("4", &[])));
        caches.set_snapshots(Some(Fresh::new_with(
            writer.as_reader(),
            snapshot_resource(),
        )));
        assert!(caches.watching_snapshots());
        assert_eq!(finalizers(&caches), Some(vec![]), "the watch's copy");
        caches.snapshot_written("4", snapshot("5", &["ours"]));
        assert_eq!(
            finalizers(&caches),
            Some(vec!["ours".into()]),
            "ours, over the lagging copy"
        );
        writer.apply_watcher_event(&Event::Apply(snapshot("5", &["ours"])));
        caches.snapshot_seen(&Change::Applied(snapshot("5", &["ours"])));
        writer.apply_watcher_event(&Event::Apply(snapshot("6", &[])));
        assert_eq!(
            finalizers(&caches),
            Some(vec![]),
            "a later write by someone else stands"
        );
        caches.set_snapshots(None);
        assert!(!caches.watching_snapshots());
    }
}
