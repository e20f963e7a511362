//! Read-your-writes over an informer cache: the one rule every controller follows.
//!
//! A controller that writes an object and reads it back before the watch has delivered the
//! write would act on the old version: create a second PV, delete a volume twice, publish a
//! duplicate CSIStorageCapacity, or take a claim whose finalizer it just removed for one that
//! still holds it. So every write of ours is recorded here ([`Fresh::created`],
//! [`Fresh::updated`], [`Fresh::deleted`]) and every read goes through [`Fresh::get`] or
//! [`Fresh::state`], which show our last write until the cache has caught up with it.
//!
//! Whether it has is decided by [`compare`] alone, from resourceVersions compared for
//! equality (they are opaque): the cache showing a version our writes replaced lags behind;
//! showing our version, or any other, means it caught up or someone wrote after us, and the
//! cache is the truth again. A pending write is dropped then, when the watch delivers the
//! object or its deletion, and at the latest after [`MAX_PENDING`].

use std::collections::HashMap;
use std::hash::Hash;
use std::sync::Arc;
use std::time::{Duration, Instant};

use kube::Resource;
use kube::runtime::reflector::{ObjectRef, Store};
use parking_lot::Mutex;
use serde::de::DeserializeOwned;

use crate::compact::CompactStore;
use crate::reflect::{Change, ReflectError};

/// How long a write may stay unconfirmed. A watch that lags this long has broken and relisted
/// meanwhile, so the cache is the better source; the bound also keeps the map small if an
/// object we created is deleted while the watch is down.
pub const MAX_PENDING: Duration = Duration::from_secs(120);

/// One object's writes of ours that the cache may not show yet.
#[derive(Debug)]
pub struct Pending<K> {
    /// resourceVersions our writes replaced, oldest first; empty after a create.
    pub replaced: Vec<String>,
    /// The object as our last write left it; `None` once we deleted it.
    pub after: Option<Arc<K>>,
    /// When the last write was recorded.
    pub at: Instant,
}

// Not derived: that would require `K: Clone`.
impl<K> Clone for Pending<K> {
    fn clone(&self) -> Self {
        Pending {
            replaced: self.replaced.clone(),
            after: self.after.clone(),
            at: self.at,
        }
    }
}

/// What the cache shows of an object, measured against our pending write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Seen {
    /// A version our writes replaced, or nothing yet after our create: show our write.
    Lagging,
    /// Our write, its deletion, or a version someone wrote after us: the cache is the truth.
    CaughtUp,
}

/// Compares the cached object (`None`: not cached) with our pending write. Pure.
pub fn compare<K: Resource>(cached: Option<&K>, pending: &Pending<K>, now: Instant) -> Seen {
    if now.duration_since(pending.at) > MAX_PENDING {
        return Seen::CaughtUp;
    }
    match cached.map(|c| c.meta().resource_version.as_deref()) {
        // Not cached: our create has not arrived yet; after an update or delete, it is gone.
        None if pending.replaced.is_empty() && pending.after.is_some() => Seen::Lagging,
        None => Seen::CaughtUp,
        Some(Some(rv)) if pending.replaced.iter().any(|r| r == rv) => Seen::Lagging,
        Some(Some(rv)) if older_than_ours(rv, pending) => Seen::Lagging,
        Some(_) => Seen::CaughtUp,
    }
}

/// Whether the cache shows a version from before our write that we never read (another
/// writer's, between the version we read and ours: a conflict's re-read can skip it). Only
/// where both versions are numbers, as etcd's are; opaque ones are never judged older.
fn older_than_ours<K: Resource>(cached: &str, pending: &Pending<K>) -> bool {
    let ours = pending
        .after
        .as_ref()
        .and_then(|a| a.meta().resource_version.as_deref());
    match (cached.parse::<u64>(), ours.map(str::parse::<u64>)) {
        (Ok(cached), Some(Ok(ours))) => cached < ours,
        _ => false,
    }
}

/// The object a reader should see, and whether the write stays pending. Pure.
pub fn view<K: Resource>(
    cached: Option<Arc<K>>,
    pending: &Pending<K>,
    now: Instant,
) -> (Option<Arc<K>>, bool) {
    match compare(cached.as_deref(), pending, now) {
        Seen::Lagging => (pending.after.clone(), true),
        Seen::CaughtUp => (cached, false),
    }
}

/// Name of an object within its kind.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
struct Name {
    namespace: Option<String>,
    name: String,
}

impl Name {
    fn of<K: Resource>(obj: &K) -> Name {
        Name {
            namespace: obj.meta().namespace.clone(),
            name: obj.meta().name.clone().unwrap_or_default(),
        }
    }

    fn reference<K: Resource>(&self, dyntype: &K::DynamicType) -> ObjectRef<K>
    where
        K::DynamicType: Clone,
    {
        let reference = ObjectRef::new_with(&self.name, dyntype.clone());
        match &self.namespace {
            Some(ns) => reference.within(ns),
            None => reference,
        }
    }
}

/// The cache under a [`Fresh`]: kube's reflector store (objects decoded) or a
/// [`CompactStore`] (objects as JSON, decoded on read: for kinds counted in tens of thousands).
/// Dynamic objects (kinds without Rust types, as VolumeSnapshots) carry their type.
enum Backing<K: Resource + 'static>
where
    K::DynamicType: Clone + Eq + Hash,
{
    Decoded(Store<K>, K::DynamicType),
    Compact(CompactStore<K>, K::DynamicType),
}

impl<K> Backing<K>
where
    K: Resource + Clone + DeserializeOwned + 'static,
    K::DynamicType: Clone + Eq + Hash,
{
    fn dyntype(&self) -> &K::DynamicType {
        match self {
            Backing::Decoded(_, d) | Backing::Compact(_, d) => d,
        }
    }

    fn get(&self, reference: &ObjectRef<K>) -> Option<Arc<K>> {
        match self {
            Backing::Decoded(s, _) => s.get(reference),
            Backing::Compact(s, _) => s.get(reference),
        }
    }

    fn state(&self) -> Vec<Arc<K>> {
        match self {
            Backing::Decoded(s, _) => s.state(),
            Backing::Compact(s, _) => s.state(),
        }
    }

    fn references(&self) -> Vec<ObjectRef<K>> {
        match self {
            Backing::Decoded(s, d) => s
                .state()
                .iter()
                .map(|o| Name::of(o.as_ref()).reference(d))
                .collect(),
            Backing::Compact(s, d) => s.references_with(d),
        }
    }
}

/// What a test runs right after a reader's store read.
#[cfg(test)]
type StoreReadHook = Box<dyn FnMut() + Send>;

/// An informer cache seen through our own pending writes. Cheap to clone; clones share both.
pub struct Fresh<K: Resource + 'static>
where
    K::DynamicType: Clone + Eq + Hash,
{
    store: Arc<Backing<K>>,
    /// Our writes not yet confirmed. Readers take this lock *before* they read the store, as
    /// [`Fresh::observe`] does: a watch event landing between a store read and the lock would
    /// otherwise drop the write the read did not see, hiding a just-created object.
    pending: Arc<Mutex<HashMap<Name, Pending<K>>>>,
    /// Runs right after a reader's store read: lets a test land a watch event exactly there.
    #[cfg(test)]
    after_store_read: Arc<Mutex<Option<StoreReadHook>>>,
}

impl<K: Resource + 'static> Clone for Fresh<K>
where
    K::DynamicType: Clone + Eq + Hash,
{
    fn clone(&self) -> Self {
        Fresh {
            store: self.store.clone(),
            pending: self.pending.clone(),
            #[cfg(test)]
            after_store_read: self.after_store_read.clone(),
        }
    }
}

impl<K> Fresh<K>
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + 'static,
{
    /// Reads `store` through the writes recorded here.
    pub fn new(store: Store<K>) -> Fresh<K> {
        Fresh::over(Backing::Decoded(store, ()))
    }

    /// Reads a [`CompactStore`] through the writes recorded here.
    pub fn compact(store: CompactStore<K>) -> Fresh<K> {
        Fresh::over(Backing::Compact(store, ()))
    }
}

impl<K> Fresh<K>
where
    K: Resource + Clone + DeserializeOwned + 'static,
    K::DynamicType: Clone + Eq + Hash,
{
    /// Reads `store` of a kind known at run time (`dyntype`) through the writes recorded here.
    pub fn new_with(store: Store<K>, dyntype: K::DynamicType) -> Fresh<K> {
        Fresh::over(Backing::Decoded(store, dyntype))
    }

    fn over(store: Backing<K>) -> Fresh<K> {
        Fresh {
            store: Arc::new(store),
            pending: Arc::default(),
            #[cfg(test)]
            after_store_read: Arc::default(),
        }
    }

    /// Runs the test hook `after_store_read`; nothing outside tests.
    fn store_read(&self) {
        #[cfg(test)]
        if let Some(hook) = self.after_store_read.lock().as_mut() {
            hook();
        }
    }

    /// Waits until the cache's first list has ended (client-go's `WaitForCacheSync`).
    pub async fn wait_until_ready(&self, timeout: Duration) -> Result<(), ReflectError> {
        match self.store.as_ref() {
            Backing::Decoded(s, d) => {
                let kind = K::kind(d).into_owned();
                crate::reflect::ready_within(kind, timeout, s.wait_until_ready()).await
            }
            Backing::Compact(s, d) => {
                let kind = K::kind(d).into_owned();
                crate::reflect::ready_within(kind, timeout, s.wait_until_ready()).await
            }
        }
    }

    /// The object as we last know it: the cache's, or our write the cache does not show yet.
    pub fn get(&self, reference: &ObjectRef<K>) -> Option<Arc<K>> {
        let name = Name {
            namespace: reference.namespace.clone(),
            name: reference.name.clone(),
        };
        let mut pending = self.pending.lock();
        let cached = self.store.get(reference);
        self.store_read();
        let Some(p) = pending.get(&name) else {
            return cached;
        };
        let (shown, keep) = view(cached, p, Instant::now());
        if !keep {
            pending.remove(&name);
        }
        shown
    }

    /// Every object as we last know it: the cache's, with our pending writes applied (objects
    /// we deleted left out, objects we created added).
    pub fn state(&self) -> Vec<Arc<K>> {
        let mut pending = self.pending.lock();
        let cached = self.store.state();
        self.store_read();
        if pending.is_empty() {
            return cached;
        }
        let now = Instant::now();
        let mut out = Vec::with_capacity(cached.len());
        let mut seen = std::collections::HashSet::new();
        for obj in cached {
            let name = Name::of(obj.as_ref());
            match pending.get(&name) {
                Some(p) => {
                    let (shown, keep) = view(Some(obj), p, now);
                    if !keep {
                        pending.remove(&name);
                    }
                    out.extend(shown);
                }
                None => out.push(obj),
            }
            seen.insert(name);
        }
        pending.retain(|name, p| {
            if seen.contains(name) {
                return true;
            }
            let (shown, keep) = view(None, p, now);
            out.extend(shown);
            keep
        });
        out
    }

    /// The references of every object as we last know it (some may read as gone), without
    /// decoding a compact cache: for walking every object one at a time with [`Fresh::get`]
    /// instead of holding all of them decoded at once, as [`Fresh::state`] does.
    pub fn references(&self) -> Vec<ObjectRef<K>> {
        let pending = self.pending.lock();
        let mut refs = self.store.references();
        self.store_read();
        if pending.is_empty() {
            return refs;
        }
        let cached: std::collections::HashSet<Name> = refs
            .iter()
            .map(|r| Name {
                namespace: r.namespace.clone(),
                name: r.name.clone(),
            })
            .collect();
        refs.extend(
            pending
                .keys()
                .filter(|name| !cached.contains(*name))
                .map(|n| n.reference(self.store.dyntype())),
        );
        refs
    }

    /// Whether any object as we last know it matches `pred`; objects are read one at a time.
    pub fn any(&self, mut pred: impl FnMut(&K) -> bool) -> bool {
        self.references()
            .iter()
            .any(|r| self.get(r).is_some_and(|obj| pred(&obj)))
    }

    /// The objects our pending writes left (creates and updates the cache may not show yet).
    pub fn pending_objects(&self) -> Vec<Arc<K>> {
        self.pending
            .lock()
            .values()
            .filter_map(|p| p.after.clone())
            .collect()
    }

    /// How many objects have a pending write.
    pub fn pending_len(&self) -> usize {
        self.pending.lock().len()
    }

    /// We created `obj` (as the API server returned it).
    pub fn created(&self, obj: K) {
        let name = Name::of(&obj);
        self.pending.lock().insert(
            name,
            Pending {
                replaced: Vec::new(),
                after: Some(Arc::new(obj)),
                at: Instant::now(),
            },
        );
    }

    /// We replaced the versions `replaced` (the one our write was based on, and any we read
    /// on the way) with `obj`, as the API server returned it.
    pub fn updated<'a>(&self, replaced: impl IntoIterator<Item = &'a str>, obj: K) {
        let name = Name::of(&obj);
        self.record(name, replaced, Some(Arc::new(obj)));
    }

    /// We deleted version `replaced` of the object `name` in `namespace`. `result` is what the
    /// API server returned when the object stays for its finalizers, `None` when it is gone.
    pub fn deleted(&self, namespace: Option<&str>, name: &str, replaced: &str, result: Option<K>) {
        let name = Name {
            namespace: namespace.map(String::from),
            name: name.to_string(),
        };
        self.record(name, [replaced], result.map(Arc::new));
    }

    /// A later write of ours continues the chain of an earlier pending one, so the cache showing
    /// any version we replaced still counts as lagging.
    fn record<'a>(
        &self,
        name: Name,
        replaced: impl IntoIterator<Item = &'a str>,
        after: Option<Arc<K>>,
    ) {
        let mut pending = self.pending.lock();
        let mut chain = pending
            .remove(&name)
            .map(|p| p.replaced)
            .unwrap_or_default();
        for rv in replaced {
            if !rv.is_empty() && !chain.iter().any(|r| r == rv) {
                chain.push(rv.to_string());
            }
        }
        pending.insert(
            name,
            Pending {
                replaced: chain,
                after,
                at: Instant::now(),
            },
        );
    }

    /// Called for every change the cache delivers: drops the writes it confirms (or overtakes),
    /// so the map holds only what is still in flight.
    pub fn observe(&self, change: &Change<K>) {
        let mut pending = self.pending.lock();
        if pending.is_empty() {
            return;
        }
        match change {
            Change::Applied(obj) => {
                // Judged by what the store shows, not by the event: during a relist kube's
                // reflector buffers the listed objects and fills the store only when the list
                // ends, so dropping our write on the event left a window in which neither
                // showed the object (a just-created PV looked missing: a second CreateVolume).
                let name = Name::of(obj);
                if let Some(p) = pending.get(&name) {
                    let cached = self.store.get(&name.reference(self.store.dyntype()));
                    if compare(cached.as_deref(), p, Instant::now()) == Seen::CaughtUp {
                        pending.remove(&name);
                    }
                }
            }
            Change::Deleted(obj) => {
                let name = Name::of(obj);
                // An older incarnation's deletion says nothing about the object we created.
                let other_incarnation = pending
                    .get(&name)
                    .and_then(|p| p.after.as_ref())
                    .is_some_and(|a| a.meta().uid.is_some() && a.meta().uid != obj.meta().uid);
                if !other_incarnation {
                    pending.remove(&name);
                }
            }
            Change::Relisted => {
                let now = Instant::now();
                pending.retain(|name, p| {
                    let cached = self.store.get(&name.reference(self.store.dyntype()));
                    compare(cached.as_deref(), p, now) == Seen::Lagging
                });
            }
        }
    }
}

#[cfg(test)]
mod tests;
