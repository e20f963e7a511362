//! Leader election against the real kube-apiserver of `testenv`.
//!
//! Time bounds here are correctness bounds, not speed measurements: "did not take over before
//! the lease could have expired" and "took over long before the lease would have expired"
//! (release). Their slack is generous on purpose.

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::authentication::v1::{TokenRequest, TokenRequestSpec};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::ServiceAccount;
use k8s_openapi::api::rbac::v1::{PolicyRule, Role, RoleBinding, RoleRef, Subject};
use kube::api::{Api, ObjectMeta, Patch, PatchParams, PostParams};
use leader_election::{LeaderElectionConfig, LeaderElector, LeaseRecord, Outcome};
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

const LOCK: &str = "hostpath-csi-k8s-io";

fn cfg(ns: &str, identity: &str, lease: u64, renew: u64, retry_ms: u64) -> LeaderElectionConfig {
    LeaderElectionConfig {
        lease_duration: Duration::from_secs(lease),
        renew_deadline: Duration::from_secs(renew),
        retry_period: Duration::from_millis(retry_ms),
        ..LeaderElectionConfig::new(LOCK.into(), ns.into(), identity.into())
    }
}

struct Running {
    handle: JoinHandle<Outcome>,
    leading: watch::Receiver<bool>,
    cancel: CancellationToken,
}

fn start(client: kube::Client, config: LeaderElectionConfig) -> Running {
    let elector = LeaderElector::new(client, config).expect("valid config");
    let leading = elector.subscribe();
    let cancel = CancellationToken::new();
    let handle = tokio::spawn(elector.run(cancel.clone(), |token| async move {
        token.cancelled().await;
    }));
    Running {
        handle,
        leading,
        cancel,
    }
}

/// Waits until `rx` says leading; returns when that was observed.
async fn until_leading(rx: &mut watch::Receiver<bool>, within: Duration, who: &str) -> Instant {
    tokio::time::timeout(within, rx.wait_for(|leading| *leading))
        .await
        .unwrap_or_else(|_| panic!("{who} did not become leader within {within:?}"))
        .expect("elector alive");
    Instant::now()
}

async fn record(client: &kube::Client, ns: &str) -> LeaseRecord {
    let lease = Api::<Lease>::namespaced(client.clone(), ns)
        .get(LOCK)
        .await
        .expect("lease exists");
    LeaseRecord::from_spec(lease.spec.as_ref())
}

async fn admin() -> (kube::Client, String) {
    let client = testenv::ControlPlane::shared().client().await;
    let ns = testenv::create_namespace(&client, "le").await;
    (client, ns)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the control plane: cargo xtask test"]
async fn two_electors_exactly_one_leads() {
    let (client, ns) = admin().await;
    let mut a = start(client.clone(), cfg(&ns, "a", 4, 3, 500));
    let mut b = start(client.clone(), cfg(&ns, "b", 4, 3, 500));
    tokio::select! {
        r = a.leading.wait_for(|l| *l) => { r.expect("a alive"); }
        r = b.leading.wait_for(|l| *l) => { r.expect("b alive"); }
        () = tokio::time::sleep(Duration::from_secs(30)) => panic!("nobody became leader"),
    }
    let first = record(&client, &ns).await;
    assert!(
        ["a", "b"].contains(&first.holder_identity.as_str()),
        "{first:?}"
    );
    // Three lease durations of renewals: the same holder throughout, never both leading.
    for _ in 0..24 {
        tokio::time::sleep(Duration::from_millis(500)).await;
        let (la, lb) = (*a.leading.borrow(), *b.leading.borrow());
        assert!(la ^ lb, "a leading {la}, b leading {lb}");
        let now = record(&client, &ns).await;
        assert_eq!(now.holder_identity, first.holder_identity);
        assert_eq!(now.lease_transitions, 0);
        assert_eq!(now.acquire_time, first.acquire_time);
    }
    assert!(
        record(&client, &ns).await.renew_time > first.renew_time,
        "leader renewed"
    );
    a.cancel.cancel();
    b.cancel.cancel();
    let outcomes = [a.handle.await.expect("a"), b.handle.await.expect("b")];
    assert!(
        outcomes.contains(&Outcome::CancelledWhileStandby),
        "{outcomes:?}"
    );
    assert!(
        outcomes.contains(&Outcome::CancelledWhileLeading { released: false }),
        "{outcomes:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the control plane: cargo xtask test"]
async fn killed_leader_is_replaced_once_its_lease_expires() {
    let (client, ns) = admin().await;
    let (lease, retry) = (Duration::from_secs(4), Duration::from_millis(500));
    let mut a = start(client.clone(), cfg(&ns, "a", 4, 3, 500));
    until_leading(&mut a.leading, Duration::from_secs(30), "a").await;
    let mut b = start(client.clone(), cfg(&ns, "b", 4, 3, 500));
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(!*b.leading.borrow(), "b took over a live leader");

    // kill -9: the election future is dropped mid-flight, nothing is released.
    a.handle.abort();
    let killed = Instant::now();
    let took_over = until_leading(&mut b.leading, Duration::from_secs(30), "b").await;
    let waited = took_over - killed;
    eprintln!("takeover after kill -9: {waited:?} (lease {lease:?}, retry {retry:?})");
    // a's last renewal was at most one retry period before the kill; b must wait a full lease
    // from when it saw that renewal...
    assert!(waited >= lease - retry, "b took over after only {waited:?}");
    // ...and then retries every retry_period * (1 + 1.2 * rand): lease + retry in client-go
    // terms, plus jitter on the observation and the takeover, plus slack for a busy machine.
    let bound = lease + retry.mul_f64(2.0 * 2.2) + Duration::from_secs(3);
    assert!(
        waited <= bound,
        "b took over after {waited:?} (bound {bound:?})"
    );
    let rec = record(&client, &ns).await;
    assert_eq!(
        (rec.holder_identity.as_str(), rec.lease_transitions),
        ("b", 1)
    );
    b.cancel.cancel();
    b.handle.await.expect("b");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the control plane: cargo xtask test"]
async fn release_on_cancel_hands_over_at_once() {
    let (client, ns) = admin().await;
    // A long lease: without the release, b would wait ~30 s.
    let releasing = LeaderElectionConfig {
        release_on_cancel: true,
        ..cfg(&ns, "a", 30, 20, 500)
    };
    let mut a = start(client.clone(), releasing);
    until_leading(&mut a.leading, Duration::from_secs(30), "a").await;
    let mut b = start(client.clone(), cfg(&ns, "b", 30, 20, 500));
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(!*b.leading.borrow());

    a.cancel.cancel();
    assert_eq!(
        a.handle.await.expect("a"),
        Outcome::CancelledWhileLeading { released: true }
    );
    let released = Instant::now();
    let took_over = until_leading(&mut b.leading, Duration::from_secs(60), "b").await;
    let waited = took_over - released;
    eprintln!("takeover after release: {waited:?} (lease 30s, retry 500ms)");
    assert!(
        waited < Duration::from_secs(15),
        "b needed {waited:?}: the lease was not released"
    );
    let rec = record(&client, &ns).await;
    assert_eq!(
        (rec.holder_identity.as_str(), rec.lease_transitions),
        ("b", 1)
    );
    b.cancel.cancel();
    b.handle.await.expect("b");
}

/// A client for a ServiceAccount bound to a Role with exactly upstream's lease verbs.
async fn upstream_rbac_client(admin: &kube::Client, ns: &str) -> kube::Client {
    let pp = PostParams::default();
    let meta = |name: &str| ObjectMeta {
        name: Some(name.into()),
        namespace: Some(ns.into()),
        ..ObjectMeta::default()
    };
    Api::<ServiceAccount>::namespaced(admin.clone(), ns)
        .create(
            &pp,
            &ServiceAccount {
                metadata: meta("csi-provisioner"),
                ..Default::default()
            },
        )
        .await
        .expect("service account");
    let rule = PolicyRule {
        api_groups: Some(vec!["coordination.k8s.io".into()]),
        resources: Some(vec!["leases".into()]),
        verbs: ["get", "watch", "list", "delete", "update", "create"]
            .map(String::from)
            .to_vec(),
        ..PolicyRule::default()
    };
    let role = Role {
        metadata: meta("external-provisioner-cfg"),
        rules: Some(vec![rule]),
    };
    Api::<Role>::namespaced(admin.clone(), ns)
        .create(&pp, &role)
        .await
        .expect("role");
    let binding = RoleBinding {
        metadata: meta("csi-provisioner-role-cfg"),
        role_ref: RoleRef {
            api_group: Some("rbac.authorization.k8s.io".into()),
            kind: "Role".into(),
            name: "external-provisioner-cfg".into(),
        },
        subjects: Some(vec![Subject {
            kind: "ServiceAccount".into(),
            name: "csi-provisioner".into(),
            namespace: Some(ns.into()),
            ..Subject::default()
        }]),
    };
    Api::<RoleBinding>::namespaced(admin.clone(), ns)
        .create(&pp, &binding)
        .await
        .expect("binding");

    let request = TokenRequest {
        spec: Some(TokenRequestSpec {
            expiration_seconds: Some(3600),
            ..Default::default()
        }),
        ..Default::default()
    };
    let token = Api::<ServiceAccount>::namespaced(admin.clone(), ns)
        .create_token_request("csi-provisioner", &pp, &request)
        .await
        .expect("token request")
        .status
        .and_then(|s| s.token)
        .expect("token status with a token");

    let path = testenv::ControlPlane::shared().kubeconfig();
    let mut kubeconfig = kube::config::Kubeconfig::read_from(path).expect("kubeconfig");
    for named in &mut kubeconfig.auth_infos {
        named.auth_info =
            Some(serde_json::from_value(serde_json::json!({ "token": token })).expect("auth"));
    }
    let options = kube::config::KubeConfigOptions::default();
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &options)
        .await
        .expect("config");
    kube::Client::try_from(config).expect("client")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the control plane: cargo xtask test"]
async fn upstream_rbac_without_patch_is_enough() {
    let (admin, ns) = admin().await;
    let sa = upstream_rbac_client(&admin, &ns).await;

    // The RBAC really is restrictive: this identity cannot PATCH a Lease.
    let stale = Lease {
        metadata: ObjectMeta {
            name: Some(LOCK.into()),
            ..ObjectMeta::default()
        },
        spec: Some(
            LeaseRecord {
                holder_identity: "gone".into(),
                lease_duration_seconds: 1,
                ..LeaseRecord::default()
            }
            .to_spec(),
        ),
    };
    Api::<Lease>::namespaced(admin.clone(), &ns)
        .create(&PostParams::default(), &stale)
        .await
        .expect("stale lease");
    let patch = Patch::Merge(serde_json::json!({ "metadata": { "labels": { "x": "y" } } }));
    let denied = Api::<Lease>::namespaced(sa.clone(), &ns)
        .patch(LOCK, &PatchParams::default(), &patch)
        .await;
    match denied {
        Err(kube::Error::Api(status)) => assert_eq!(status.code, 403, "{status:?}"),
        other => panic!("PATCH should be forbidden, got {other:?}"),
    }

    // Takeover of an expired foreign lease (GET + PUT), then renewals (PUT) as that identity.
    let labels = BTreeMap::from([("app".to_string(), "csi-provisioner".to_string())]);
    let config = LeaderElectionConfig {
        labels: labels.clone(),
        ..cfg(&ns, "sa-pod", 4, 3, 500)
    };
    let mut run = start(sa.clone(), config);
    until_leading(&mut run.leading, Duration::from_secs(30), "sa-pod").await;
    let taken = record(&admin, &ns).await;
    assert_eq!(
        (taken.holder_identity.as_str(), taken.lease_transitions),
        ("sa-pod", 1)
    );
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert!(*run.leading.borrow(), "lost the lease while renewing");
    let renewed = record(&admin, &ns).await;
    assert!(
        renewed.renew_time > taken.renew_time,
        "renewed: {renewed:?}"
    );
    assert_eq!(renewed.acquire_time, taken.acquire_time);
    let lease = Api::<Lease>::namespaced(admin.clone(), &ns)
        .get(LOCK)
        .await
        .expect("lease");
    assert_eq!(lease.metadata.labels, Some(labels));
    run.cancel.cancel();
    run.handle.await.expect("run");

    // Creating from scratch works too (delete is granted, so use it as the SA would).
    Api::<Lease>::namespaced(sa.clone(), &ns)
        .delete(LOCK, &Default::default())
        .await
        .expect("delete");
    let mut fresh = start(sa, cfg(&ns, "sa-pod-2", 4, 3, 500));
    until_leading(&mut fresh.leading, Duration::from_secs(30), "sa-pod-2").await;
    assert_eq!(record(&admin, &ns).await.holder_identity, "sa-pod-2");
    fresh.cancel.cancel();
    fresh.handle.await.expect("fresh");
}
