use super::*;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::runtime::reflector::store;
use kube::runtime::reflector::store::Writer;
use kube::runtime::watcher::Event;

fn cm(name: &str, rv: &str, data: &str) -> ConfigMap {
    let mut c = ConfigMap::default();
    c.metadata.name = Some(name.into());
    c.metadata.namespace = Some("ns".into());
    c.metadata.uid = Some(format!("uid-{name}"));
    c.metadata.resource_version = Some(rv.into());
    c.data = Some([("v".to_string(), data.to_string())].into());
    c
}

fn data(c: Option<Arc<ConfigMap>>) -> Option<String> {
    c.map(|c| c.data.as_ref().unwrap()["v"].clone())
}

fn pending(replaced: &[&str], after: Option<ConfigMap>) -> Pending<ConfigMap> {
    Pending {
        replaced: replaced.iter().map(|s| s.to_string()).collect(),
        after: after.map(Arc::new),
        at: Instant::now(),
    }
}

#[test]
fn compare_table() {
    use Seen::*;
    let now = Instant::now();
    let created = pending(&[], Some(cm("a", "5", "ours")));
    let updated = pending(&["3", "4"], Some(cm("a", "5", "ours")));
    let deleted = pending(&["4"], None);
    let deleting = pending(&["4"], Some(cm("a", "5", "deleting")));
    let cases: [(&str, Option<ConfigMap>, &Pending<ConfigMap>, Seen); 13] = [
        (
            "update, cache at another writer's version we never read",
            Some(cm("a", "4x", "x")),
            &updated,
            CaughtUp,
        ),
        ("create not shown yet", None, &created, Lagging),
        ("create shown", Some(cm("a", "5", "x")), &created, CaughtUp),
        (
            "create overtaken",
            Some(cm("a", "6", "x")),
            &created,
            CaughtUp,
        ),
        (
            "update, cache at the base",
            Some(cm("a", "4", "x")),
            &updated,
            Lagging,
        ),
        (
            "update, cache older in our chain",
            Some(cm("a", "3", "x")),
            &updated,
            Lagging,
        ),
        ("update shown", Some(cm("a", "5", "x")), &updated, CaughtUp),
        (
            "someone wrote after us",
            Some(cm("a", "9", "x")),
            &updated,
            CaughtUp,
        ),
        ("updated object gone", None, &updated, CaughtUp),
        (
            "delete, cache still has it",
            Some(cm("a", "4", "x")),
            &deleted,
            Lagging,
        ),
        ("delete shown", None, &deleted, CaughtUp),
        (
            "delete kept by finalizers, cache lags",
            Some(cm("a", "4", "x")),
            &deleting,
            Lagging,
        ),
        (
            "deletion timestamp shown",
            Some(cm("a", "5", "x")),
            &deleting,
            CaughtUp,
        ),
    ];
    for (what, cached, p, want) in cases {
        assert_eq!(compare(cached.as_ref(), p, now), want, "{what}");
    }
    // Versions 3 and 5 are ours (read, written); 4 was someone else's, skipped by a re-read:
    // the cache showing it still lags behind our write.
    let skipped = pending(&["3"], Some(cm("a", "5", "ours")));
    assert_eq!(
        compare(Some(&cm("a", "4", "x")), &skipped, now),
        Lagging,
        "another writer's version older than ours"
    );
    let old = Pending {
        at: now - MAX_PENDING - Duration::from_secs(1),
        ..created.clone()
    };
    assert_eq!(compare(None, &old, now), CaughtUp, "too old to trust");
}

#[test]
fn view_shows_the_write_until_the_cache_catches_up() {
    let now = Instant::now();
    let p = pending(&["4"], Some(cm("a", "5", "ours")));
    let (shown, keep) = view(Some(Arc::new(cm("a", "4", "old"))), &p, now);
    assert_eq!((data(shown), keep), (Some("ours".into()), true));
    let (shown, keep) = view(Some(Arc::new(cm("a", "5", "cached"))), &p, now);
    assert_eq!((data(shown), keep), (Some("cached".into()), false));
    let gone = pending(&["4"], None);
    let (shown, keep) = view(Some(Arc::new(cm("a", "4", "old"))), &gone, now);
    assert_eq!((data(shown), keep), (None, true));
}

/// Feeds a cache watch events: kube's reflector writer or the compact store's.
trait Feed {
    fn apply_watcher_event(&mut self, event: &Event<ConfigMap>);
}

impl Feed for Writer<ConfigMap> {
    fn apply_watcher_event(&mut self, event: &Event<ConfigMap>) {
        Writer::apply_watcher_event(self, event);
    }
}

impl Feed for crate::compact::CompactWriter<ConfigMap> {
    fn apply_watcher_event(&mut self, event: &Event<ConfigMap>) {
        crate::compact::CompactWriter::apply_watcher_event(self, event);
    }
}

/// The same view over each kind of cache: every test below runs on both.
fn backings() -> [(Fresh<ConfigMap>, Box<dyn Feed>); 2] {
    let (decoded, decoded_writer) = store();
    let (compact, compact_writer) = crate::compact::store();
    [
        (Fresh::new(decoded), Box::new(decoded_writer)),
        (Fresh::compact(compact), Box::new(compact_writer)),
    ]
}

fn r(name: &str) -> ObjectRef<ConfigMap> {
    ObjectRef::new(name).within("ns")
}

#[test]
fn a_chain_of_writes_stays_visible_while_the_cache_shows_any_replaced_version() {
    for (fresh, mut writer) in backings() {
        writer.apply_watcher_event(&Event::Apply(cm("a", "1", "v1")));
        fresh.updated(["1"], cm("a", "2", "v2"));
        fresh.updated(["2"], cm("a", "3", "v3"));
        assert_eq!(data(fresh.get(&r("a"))), Some("v3".into()));
        // The watch delivers our first write: still behind the second.
        writer.apply_watcher_event(&Event::Apply(cm("a", "2", "v2")));
        fresh.observe(&Change::Applied(cm("a", "2", "v2")));
        assert_eq!(data(fresh.get(&r("a"))), Some("v3".into()));
        assert_eq!(fresh.pending_len(), 1);
        // Our last write arrives: nothing is pending any more.
        writer.apply_watcher_event(&Event::Apply(cm("a", "3", "v3")));
        fresh.observe(&Change::Applied(cm("a", "3", "v3")));
        assert_eq!(fresh.pending_len(), 0);
        assert_eq!(data(fresh.get(&r("a"))), Some("v3".into()));
    }
}

#[test]
fn state_applies_creates_updates_and_deletes() {
    for (fresh, mut writer) in backings() {
        for obj in [cm("a", "1", "a1"), cm("b", "1", "b1"), cm("c", "1", "c1")] {
            writer.apply_watcher_event(&Event::Apply(obj));
        }
        fresh.updated(["1"], cm("a", "2", "a2"));
        fresh.deleted(Some("ns"), "b", "1", None);
        fresh.created(cm("d", "1", "d1"));
        let mut got: Vec<(String, String)> = fresh
            .state()
            .into_iter()
            .map(|c| (c.metadata.name.clone().unwrap(), data(Some(c)).unwrap()))
            .collect();
        got.sort();
        let want =
            [("a", "a2"), ("c", "c1"), ("d", "d1")].map(|(n, d)| (n.to_string(), d.to_string()));
        assert_eq!(got, want);
        assert_eq!(
            fresh.get(&r("b")),
            None,
            "deleted: hidden while the cache lags"
        );
        assert_eq!(fresh.pending_objects().len(), 2);
    }
}

#[test]
fn deletions_prune_unless_they_are_of_an_older_incarnation() {
    for (fresh, _writer) in backings() {
        fresh.created(cm("a", "7", "new"));
        let mut older = cm("a", "3", "old");
        older.metadata.uid = Some("uid-older".into());
        fresh.observe(&Change::Deleted(older));
        assert_eq!(data(fresh.get(&r("a"))), Some("new".into()));
        fresh.observe(&Change::Deleted(cm("a", "8", "new")));
        assert_eq!(fresh.pending_len(), 0);
        assert_eq!(fresh.get(&r("a")), None);
    }
}

#[test]
fn a_relist_keeps_only_what_the_cache_still_lags_behind() {
    for (fresh, mut writer) in backings() {
        writer.apply_watcher_event(&Event::Apply(cm("a", "1", "a1")));
        writer.apply_watcher_event(&Event::Apply(cm("b", "1", "b1")));
        fresh.updated(["1"], cm("a", "2", "a2"));
        fresh.updated(["1"], cm("b", "2", "b2"));
        // The relist shows b's write but not a's.
        writer.apply_watcher_event(&Event::Apply(cm("b", "2", "b2")));
        fresh.observe(&Change::Relisted);
        assert_eq!(fresh.pending_len(), 1);
        assert_eq!(data(fresh.get(&r("a"))), Some("a2".into()));
    }
}

#[test]
fn a_create_stays_visible_while_a_relist_holds_the_object_back() {
    for (fresh, mut writer) in backings() {
        fresh.created(cm("a", "5", "ours"));
        // A relist: the reflector buffers listed objects until the list ends, yet the change
        // stream already reports them.
        writer.apply_watcher_event(&Event::Init);
        writer.apply_watcher_event(&Event::InitApply(cm("a", "5", "ours")));
        fresh.observe(&Change::Applied(cm("a", "5", "ours")));
        assert_eq!(data(fresh.get(&r("a"))), Some("ours".into()));
        writer.apply_watcher_event(&Event::InitDone);
        fresh.observe(&Change::Relisted);
        assert_eq!(fresh.pending_len(), 0);
        assert_eq!(data(fresh.get(&r("a"))), Some("ours".into()));
    }
}

#[test]
fn references_and_any_read_through_pending_writes() {
    for (fresh, mut writer) in backings() {
        for obj in [cm("a", "1", "a1"), cm("b", "1", "b1")] {
            writer.apply_watcher_event(&Event::Apply(obj));
        }
        fresh.created(cm("c", "1", "c1"));
        fresh.deleted(Some("ns"), "b", "1", None);
        let mut names: Vec<String> = fresh.references().into_iter().map(|r| r.name).collect();
        names.sort();
        // b is still listed (the cache shows it); reading it says it is gone.
        assert_eq!(names, ["a", "b", "c"]);
        assert!(
            fresh.any(|c| c.metadata.name.as_deref() == Some("c")),
            "our create"
        );
        assert!(
            !fresh.any(|c| c.metadata.name.as_deref() == Some("b")),
            "our delete"
        );
        assert!(fresh.any(|c| data(Some(Arc::new(c.clone()))).as_deref() == Some("a1")));
        assert!(!fresh.any(|c| data(Some(Arc::new(c.clone()))).as_deref() == Some("zz")));
    }
}

/// Lands the watch event of our own create at the worst moment: right after a reader has read
/// the store (which did not have the object yet), before it looks at the pending writes. The
/// event's `observe` runs on another thread and is given 200 ms; a reader that holds the lock
/// across its store read makes it wait, and the reader still shows our write. Returns what
/// `read` saw.
fn read_while_our_create_lands<W: Feed + Send + 'static>(
    fresh: &Fresh<ConfigMap>,
    writer: W,
    read: impl Fn(&Fresh<ConfigMap>) -> Option<String>,
) -> Option<String> {
    let ours = cm("a", "5", "ours");
    fresh.created(ours.clone());
    let mut writer = Some(writer);
    let watcher = fresh.clone();
    *fresh.after_store_read.lock() = Some(Box::new(move || {
        let Some(mut writer) = writer.take() else {
            return;
        };
        let (done, landed) = std::sync::mpsc::channel();
        let (watcher, ours) = (watcher.clone(), ours.clone());
        std::thread::spawn(move || {
            writer.apply_watcher_event(&Event::Apply(ours.clone()));
            watcher.observe(&Change::Applied(ours));
            let _ = done.send(());
        });
        let _ = landed.recv_timeout(Duration::from_millis(200));
    }));
    let seen = read(fresh);
    *fresh.after_store_read.lock() = None;
    seen
}

#[test]
fn our_create_stays_visible_when_its_watch_event_lands_during_a_read() {
    let get = |f: &Fresh<ConfigMap>| data(f.get(&r("a")));
    let state = |f: &Fresh<ConfigMap>| data(f.state().into_iter().next());
    let refs = |f: &Fresh<ConfigMap>| f.references().first().map(|r| r.name.clone());
    let (decoded, writer) = store();
    assert_eq!(
        read_while_our_create_lands(&Fresh::new(decoded), writer, get),
        Some("ours".into())
    );
    let (compact, writer) = crate::compact::store();
    assert_eq!(
        read_while_our_create_lands(&Fresh::compact(compact), writer, get),
        Some("ours".into())
    );
    let (decoded, writer) = store();
    assert_eq!(
        read_while_our_create_lands(&Fresh::new(decoded), writer, state),
        Some("ours".into())
    );
    let (decoded, writer) = store();
    assert_eq!(
        read_while_our_create_lands(&Fresh::new(decoded), writer, refs),
        Some("a".into())
    );
}

/// A kind known only at run time (as VolumeSnapshots are) reads through our writes the same way.
#[test]
fn dynamic_objects_read_through_our_writes() {
    use kube::api::{ApiResource, DynamicObject, GroupVersionKind};
    let resource = ApiResource::from_gvk(&GroupVersionKind::gvk(
        "snapshot.storage.k8s.io",
        "v1",
        "VolumeSnapshot",
    ));
    let snapshot = |rv: &str, finalizer: bool| {
        let mut o = DynamicObject::new("s", &resource).within("ns");
        o.metadata.uid = Some("uid-s".into());
        o.metadata.resource_version = Some(rv.into());
        o.metadata.finalizers = finalizer.then(|| vec!["ours".to_string()]);
        o
    };
    let mut writer = Writer::new(resource.clone());
    writer.apply_watcher_event(&Event::Apply(snapshot("4", false)));
    let fresh = Fresh::new_with(writer.as_reader(), resource.clone());
    let key = ObjectRef::new_with("s", resource.clone()).within("ns");
    let finalized = |f: &Fresh<DynamicObject>| f.get(&key).map(|o| o.metadata.finalizers.is_some());
    fresh.updated(["4"], snapshot("5", true));
    assert_eq!(
        finalized(&fresh),
        Some(true),
        "the cache lags: our write shows"
    );
    assert_eq!(fresh.references().len(), 1);
    writer.apply_watcher_event(&Event::Apply(snapshot("5", true)));
    fresh.observe(&Change::Applied(snapshot("5", true)));
    assert_eq!(fresh.pending_len(), 0, "the watch confirmed it");
    fresh.updated(["5"], snapshot("6", false));
    assert_eq!(
        finalized(&fresh),
        Some(false),
        "our removal shows over the older copy"
    );
    writer.apply_watcher_event(&Event::Apply(snapshot("7", true)));
    assert_eq!(
        finalized(&fresh),
        Some(true),
        "a later writer's version is the truth"
    );
}
