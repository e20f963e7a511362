//! A cache that keeps each object as JSON bytes and decodes it on every read.
//!
//! Why: a `PersistentVolume` as a k8s-openapi struct takes about 6 KiB on the heap (its spec
//! alone is 3 KiB of inline optional volume sources, each map a B-tree node of half a KiB),
//! and as JSON about 1 KiB. A cluster has PVs by the ten thousand, the provisioner reads them
//! one at a time (by name) and scans them all only on a relist, so decoding a read (a few
//! microseconds) costs less than holding every PV decoded. kube's reflector `Store` holds
//! objects decoded; this store follows the same watch events with the same semantics.

use std::collections::HashMap;
use std::marker::PhantomData;
use std::sync::Arc;

use kube::Resource;
use kube::runtime::reflector::ObjectRef;
use kube::runtime::watcher::Event;
use parking_lot::{Mutex, RwLock};
use serde::Serialize;
use serde::de::DeserializeOwned;
use tokio::sync::watch;

/// An object's place in the store: namespace (none for cluster-scoped kinds) and name.
type Key = (Option<String>, String);

type Objects = HashMap<Key, Box<[u8]>>;

struct Shared {
    objects: RwLock<Objects>,
    /// The objects of a (re)list in progress: they replace the store's when it ends, as kube's
    /// reflector does, so a relist never shows a half-filled cache.
    listing: Mutex<Option<Objects>>,
}

/// The reading side. Cheap to clone; clones share the objects.
pub struct CompactStore<K> {
    shared: Arc<Shared>,
    ready: watch::Receiver<bool>,
    kind: PhantomData<fn() -> K>,
}

impl<K> Clone for CompactStore<K> {
    fn clone(&self) -> Self {
        CompactStore {
            shared: self.shared.clone(),
            ready: self.ready.clone(),
            kind: PhantomData,
        }
    }
}

/// The writing side, fed every watch event. Dropping it before the first list ends makes
/// [`CompactStore::wait_until_ready`] fail.
pub struct CompactWriter<K> {
    shared: Arc<Shared>,
    ready: watch::Sender<bool>,
    kind: PhantomData<fn() -> K>,
}

/// The writer was dropped before the first list ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("the cache's writer stopped before its first list ended")]
pub struct WriterDropped;

/// A new, empty and not yet ready store and its writer.
pub fn store<K>() -> (CompactStore<K>, CompactWriter<K>) {
    let shared = Arc::new(Shared {
        objects: RwLock::default(),
        listing: Mutex::default(),
    });
    let (tx, rx) = watch::channel(false);
    (
        CompactStore {
            shared: shared.clone(),
            ready: rx,
            kind: PhantomData,
        },
        CompactWriter {
            shared,
            ready: tx,
            kind: PhantomData,
        },
    )
}

fn key_of<K: Resource>(obj: &K) -> Key {
    let meta = obj.meta();
    (
        meta.namespace.clone(),
        meta.name.clone().unwrap_or_default(),
    )
}

fn encode<K: Resource + Serialize>(obj: &K) -> Option<Box<[u8]>> {
    match serde_json::to_vec(obj) {
        Ok(bytes) => Some(bytes.into_boxed_slice()),
        // Not reachable with k8s-openapi types (string-keyed maps only); said loudly if it is.
        Err(err) => {
            tracing::error!(name = ?obj.meta().name, error = %err, "Failed to cache an object");
            None
        }
    }
}

impl<K: Resource + Serialize> CompactWriter<K> {
    /// Applies one watch event, as kube's reflector writer does.
    pub fn apply_watcher_event(&mut self, event: &Event<K>) {
        match event {
            Event::Init => *self.shared.listing.lock() = Some(Objects::new()),
            Event::InitApply(obj) => {
                if let (Some(listing), Some(bytes)) =
                    (self.shared.listing.lock().as_mut(), encode(obj))
                {
                    listing.insert(key_of(obj), bytes);
                }
            }
            Event::InitDone => {
                if let Some(listed) = self.shared.listing.lock().take() {
                    *self.shared.objects.write() = listed;
                }
                self.ready.send_replace(true);
            }
            Event::Apply(obj) => {
                if let Some(bytes) = encode(obj) {
                    self.shared.objects.write().insert(key_of(obj), bytes);
                }
            }
            Event::Delete(obj) => {
                self.shared.objects.write().remove(&key_of(obj));
            }
        }
    }
}

impl<K: Resource + DeserializeOwned> CompactStore<K> {
    /// The cached object, decoded.
    pub fn get(&self, reference: &ObjectRef<K>) -> Option<Arc<K>> {
        let key = (reference.namespace.clone(), reference.name.clone());
        let objects = self.shared.objects.read();
        objects.get(&key).and_then(|bytes| decode(bytes))
    }

    /// Every cached object, decoded.
    pub fn state(&self) -> Vec<Arc<K>> {
        let objects = self.shared.objects.read();
        objects.values().filter_map(|bytes| decode(bytes)).collect()
    }

    /// The references of every cached object, without decoding any.
    pub fn references(&self) -> Vec<ObjectRef<K>>
    where
        K: Resource<DynamicType = ()>,
    {
        self.references_with(&())
    }

    /// [`Self::references`], for a kind known at run time.
    pub fn references_with(&self, dyntype: &K::DynamicType) -> Vec<ObjectRef<K>>
    where
        K::DynamicType: Clone,
    {
        let objects = self.shared.objects.read();
        objects
            .keys()
            .map(|(namespace, name)| {
                let reference = ObjectRef::new_with(name, dyntype.clone());
                match namespace {
                    Some(ns) => reference.within(ns),
                    None => reference,
                }
            })
            .collect()
    }

    /// Resolves once the first list has ended.
    pub async fn wait_until_ready(&self) -> Result<(), WriterDropped> {
        let mut ready = self.ready.clone();
        ready
            .wait_for(|ready| *ready)
            .await
            .map(|_| ())
            .map_err(|_| WriterDropped)
    }
}

fn decode<K: DeserializeOwned>(bytes: &[u8]) -> Option<Arc<K>> {
    match serde_json::from_slice(bytes) {
        Ok(obj) => Some(Arc::new(obj)),
        // We encoded these bytes from the same type: not reachable; said loudly if it is.
        Err(err) => {
            tracing::error!(error = %err, "Failed to read a cached object");
            None
        }
    }
}

#[cfg(test)]
mod tests;
