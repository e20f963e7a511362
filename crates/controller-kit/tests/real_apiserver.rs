//! The controller-kit crate against the real kube-apiserver of `testenv`: events land as client-go
//! would write them, the throttled client talks to a real server, and informer caches fill
//! and strip.

use std::collections::BTreeMap;
use std::time::Duration;

use controller_kit::client::{ClientLimits, RequestMetrics, build_client};
use controller_kit::events::{EventRecorder, EventType};
use controller_kit::reflect::{
    Change, InitialList, LAST_APPLIED, informer, probe_initial_list, wait_until_ready,
};
use futures::StreamExt;
use k8s_openapi::api::core::v1::{ConfigMap, Event, ObjectReference};
use kube::api::{DeleteParams, ListParams, ObjectMeta, PostParams};
use kube::runtime::watcher;
use kube::{Api, Client};
use prometheus_client::encoding::text::encode;
use prometheus_client::registry::Registry;
use testenv::ControlPlane;
use tokio::time::{Instant, timeout};

const WAIT: Duration = Duration::from_secs(30);

async fn throttled_client(limits: ClientLimits, metrics: Option<RequestMetrics>) -> Client {
    let cp = ControlPlane::shared();
    let kubeconfig = kube::config::Kubeconfig::read_from(cp.kubeconfig()).expect("kubeconfig");
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
        .await
        .expect("client config");
    build_client(config, limits, "csi-provisioner-runtime-test", metrics).expect("client")
}

fn reference(kind: &str, namespace: Option<&str>, name: &str) -> ObjectReference {
    ObjectReference {
        kind: Some(kind.into()),
        api_version: Some("v1".into()),
        namespace: namespace.map(String::from),
        name: Some(name.into()),
        uid: Some(format!("uid-{name}")),
        ..Default::default()
    }
}

async fn events_about(client: &Client, namespace: &str, name: &str) -> Vec<Event> {
    let api: Api<Event> = Api::namespaced(client.clone(), namespace);
    let lp = ListParams::default().fields(&format!("involvedObject.name={name}"));
    let mut events = api.list(&lp).await.expect("list events").items;
    events.sort_by_key(|e| e.message.clone());
    events
}

/// Records `emit` through a recorder on the throttled client and waits until delivered.
async fn record(emit: impl FnOnce(&EventRecorder)) {
    let limits = ClientLimits {
        qps: 5.0,
        burst: 10,
    };
    let client = throttled_client(limits, None).await;
    let (recorder, deliver) = EventRecorder::new(client, "external-provisioner".into());
    let task = tokio::spawn(deliver);
    emit(&recorder);
    drop(recorder);
    timeout(WAIT, task)
        .await
        .expect("events delivered in time")
        .expect("delivery task");
}

#[tokio::test]
#[ignore = "needs the control plane: cargo xtask test"]
async fn repeated_events_become_one_object_with_a_count() {
    let admin = ControlPlane::shared().client().await;
    let ns = testenv::create_namespace(&admin, "events").await;
    let claim = reference("PersistentVolumeClaim", Some(&ns), "claim-a");
    record(|r| {
        for _ in 0..3 {
            r.event(
                &claim,
                EventType::Warning,
                "ProvisioningFailed",
                "driver said no".into(),
            );
        }
        r.event(
            &claim,
            EventType::Normal,
            "Provisioning",
            "External provisioner is provisioning".into(),
        );
    })
    .await;

    let events = events_about(&admin, &ns, "claim-a").await;
    assert_eq!(events.len(), 2, "{events:#?}");
    let by_reason = |reason: &str| {
        events
            .iter()
            .find(|e| e.reason.as_deref() == Some(reason))
            .unwrap_or_else(|| panic!("no {reason} event in {events:#?}"))
    };
    let failed = by_reason("ProvisioningFailed");
    assert_eq!(failed.message.as_deref(), Some("driver said no"));
    assert_eq!(failed.count, Some(3));
    assert_eq!(failed.type_.as_deref(), Some("Warning"));
    assert_eq!(failed.reason.as_deref(), Some("ProvisioningFailed"));
    assert!(failed.first_timestamp <= failed.last_timestamp);
    assert_eq!(
        failed.source.as_ref().and_then(|s| s.component.as_deref()),
        Some("external-provisioner")
    );
    assert_eq!(failed.involved_object, claim);
    assert!(
        failed
            .metadata
            .name
            .as_deref()
            .unwrap()
            .starts_with("claim-a."),
        "{:?}",
        failed.metadata.name
    );
    let provisioning = by_reason("Provisioning");
    assert_eq!(provisioning.count, Some(1));
    assert_eq!(provisioning.type_.as_deref(), Some("Normal"));
}

#[tokio::test]
#[ignore = "needs the control plane: cargo xtask test"]
async fn different_messages_become_different_objects() {
    let admin = ControlPlane::shared().client().await;
    let ns = testenv::create_namespace(&admin, "events").await;
    let claim = reference("PersistentVolumeClaim", Some(&ns), "claim-b");
    record(|r| {
        r.event(
            &claim,
            EventType::Warning,
            "ProvisioningFailed",
            "first error".into(),
        );
        r.event(
            &claim,
            EventType::Warning,
            "ProvisioningFailed",
            "second error".into(),
        );
    })
    .await;
    let events = events_about(&admin, &ns, "claim-b").await;
    let messages: Vec<_> = events
        .iter()
        .map(|e| (e.message.clone().unwrap(), e.count))
        .collect();
    assert_eq!(
        messages,
        [
            ("first error".to_string(), Some(1)),
            ("second error".to_string(), Some(1))
        ]
    );
}

#[tokio::test]
#[ignore = "needs the control plane: cargo xtask test"]
async fn events_about_cluster_scoped_objects_land_in_default() {
    let admin = ControlPlane::shared().client().await;
    // Unique, so parallel runs against one cluster do not see each other's events.
    let pv = format!("pvc-{}", jiff::Timestamp::now().as_nanosecond());
    let volume = reference("PersistentVolume", None, &pv);
    record(|r| {
        r.event(
            &volume,
            EventType::Warning,
            "VolumeFailedDelete",
            "still attached".into(),
        )
    })
    .await;
    let events = events_about(&admin, "default", &pv).await;
    assert_eq!(events.len(), 1, "{events:#?}");
    assert_eq!(events[0].involved_object.namespace, None);
    let api: Api<Event> = Api::namespaced(admin, "default");
    let name = events[0].metadata.name.clone().unwrap();
    api.delete(&name, &DeleteParams::default())
        .await
        .expect("clean up");
}

async fn next(
    rx: &mut tokio::sync::mpsc::UnboundedReceiver<Change<ConfigMap>>,
) -> Change<ConfigMap> {
    timeout(WAIT, rx.recv())
        .await
        .expect("a change in time")
        .expect("stream alive")
}

fn scrape(registry: &Registry) -> String {
    let mut out = String::new();
    encode(&mut out, registry).unwrap();
    out
}

#[tokio::test]
#[ignore = "needs the control plane: cargo xtask test"]
async fn the_throttled_client_works_against_the_apiserver_and_counts_requests() {
    let metrics = RequestMetrics::new();
    let mut registry = Registry::default();
    metrics.register(&mut registry);
    let limits = ClientLimits { qps: 2.0, burst: 2 };
    let client = throttled_client(limits, Some(metrics)).await;
    let api: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(client);
    let start = Instant::now();
    for _ in 0..4 {
        api.list(&ListParams::default().limit(1))
            .await
            .expect("list namespaces");
    }
    // Two burst tokens, then two more at 2 QPS: at least a second of throttling.
    // A correctness bound (the limiter engaged), not a speed measurement.
    assert!(
        start.elapsed() >= Duration::from_millis(900),
        "{:?}",
        start.elapsed()
    );

    let text = scrape(&registry);
    let host = ControlPlane::shared()
        .server_url()
        .trim_start_matches("https://")
        .to_string();
    for line in [
        format!(r#"rest_client_requests_total{{code="200",host="{host}",method="GET"}} 4"#),
        r#"csi_provisioner_api_requests_total{verb="list",resource="namespaces"} 4"#.to_string(),
    ] {
        assert!(
            text.lines().any(|l| l == line),
            "missing {line:?} in\n{text}"
        );
    }
}

#[tokio::test]
#[ignore = "needs the control plane: cargo xtask test"]
async fn informer_caches_stripped_objects_and_reports_changes() {
    let admin = ControlPlane::shared().client().await;
    let ns = testenv::create_namespace(&admin, "reflect").await;
    let api: Api<ConfigMap> = Api::namespaced(admin.clone(), &ns);
    let cm = ConfigMap {
        metadata: ObjectMeta {
            name: Some("cm".into()),
            annotations: Some(BTreeMap::from([
                (LAST_APPLIED.to_string(), r#"{"big":"blob"}"#.to_string()),
                ("keep".to_string(), "me".to_string()),
            ])),
            ..Default::default()
        },
        data: Some(BTreeMap::from([("drop".to_string(), "x".to_string())])),
        ..Default::default()
    };
    let created = api
        .create(&PostParams::default(), &cm)
        .await
        .expect("create");
    assert!(
        created.metadata.managed_fields.is_some(),
        "the server tracks managed fields"
    );

    fn drop_data(cm: &mut ConfigMap) {
        cm.data = None;
    }
    let (store, mut changes) = informer(api.clone(), watcher::Config::default(), drop_data);
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let driver = tokio::spawn(async move {
        while let Some(change) = changes.next().await {
            if tx.send(change).is_err() {
                break;
            }
        }
    });
    wait_until_ready(&store, WAIT).await.expect("cache synced");

    let cached = store.state();
    assert_eq!(cached.len(), 1);
    let cached = &cached[0];
    assert_eq!(cached.metadata.managed_fields, None);
    assert_eq!(
        cached.metadata.annotations,
        Some(BTreeMap::from([("keep".to_string(), "me".to_string())]))
    );
    assert_eq!(cached.data, None, "the caller's strip ran");

    assert!(
        matches!(next(&mut rx).await, Change::Applied(c) if c.metadata.name.as_deref() == Some("cm"))
    );
    assert_eq!(next(&mut rx).await, Change::Relisted);

    api.delete("cm", &DeleteParams::default())
        .await
        .expect("delete");
    assert!(
        matches!(next(&mut rx).await, Change::Deleted(c) if c.metadata.name.as_deref() == Some("cm"))
    );
    assert!(store.state().is_empty());
    driver.abort();
}

#[tokio::test]
#[ignore = "needs the control plane: cargo xtask test"]
async fn streaming_lists_are_detected_and_both_modes_fill_caches() {
    let admin = ControlPlane::shared().client().await;
    // Kubernetes 1.36 serves streaming lists (WatchList) by default.
    assert_eq!(
        probe_initial_list(&admin, Duration::from_secs(5)).await,
        InitialList::Streaming
    );
    let ns = testenv::create_namespace(&admin, "initial-list").await;
    let api: Api<ConfigMap> = Api::namespaced(admin.clone(), &ns);
    for i in 0..3 {
        let cm = ConfigMap {
            metadata: ObjectMeta {
                name: Some(format!("cm-{i}")),
                ..Default::default()
            },
            ..Default::default()
        };
        api.create(&PostParams::default(), &cm)
            .await
            .expect("create");
    }
    for mode in [InitialList::Streaming, InitialList::Paged] {
        let (store, mut changes) = informer(api.clone(), mode.watcher_config(), |_| {});
        let driver = tokio::spawn(async move { while changes.next().await.is_some() {} });
        wait_until_ready(&store, WAIT).await.expect("cache synced");
        // Both modes read from the watch cache (resourceVersion 0), which may not hold an
        // object created a moment ago yet; the watch then delivers it.
        let names = || {
            let mut n: Vec<String> = store
                .state()
                .iter()
                .filter_map(|c| c.metadata.name.clone())
                .collect();
            n.sort();
            n
        };
        let deadline = Instant::now() + WAIT;
        while names().len() < 3 && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        assert_eq!(names(), ["cm-0", "cm-1", "cm-2"], "{mode:?}");
        assert!(
            store
                .state()
                .iter()
                .all(|c| c.metadata.managed_fields.is_none()),
            "{mode:?} strips like the paged list"
        );
        driver.abort();
    }
}
