//! No leaked volumes, beyond upstream: crashes, deletion races, bursts, and several drivers
//! side by side (the creating-volume finalizer is shared by all of them).

mod support;

use serde_json::json;
use support::{Scenario, holds_finalizer, no_pv_of_class, wait_gone};

/// kill -9 in the middle of CreateVolume, delete the claim while the provisioner is down,
/// restart it: the claim goes away and the driver holds no volume (upstream leaks here, #486).
#[tokio::test]
#[ignore = "needs the control plane: cargo xtask test"]
async fn a_claim_deleted_while_the_provisioner_is_down_leaves_no_volume() {
    use kube::api::DeleteParams;
    let mut s = Scenario::start("prov-crash", &[], &[]).await;
    s.mock()
        .set_faults(json!({"CreateVolume": {"delay_ms": 4000}}));
    let class = s.class("imm", "Immediate", json!({})).await;
    s.claim("data", &class, "1Gi", json!({})).await;
    // The finalizer goes on before the call is made.
    testenv::wait_for(
        &s.claims(),
        "data",
        "hold the creating-volume finalizer",
        holds_finalizer,
    )
    .await;
    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    s.provisioner().kill9();
    s.claims()
        .delete("data", &DeleteParams::default())
        .await
        .unwrap();
    let held = s.claims().get("data").await.unwrap();
    assert!(
        held.metadata.deletion_timestamp.is_some() && holds_finalizer(&held),
        "the finalizer keeps the deleted claim"
    );
    // Let the interrupted call finish in the driver if it is going to.
    tokio::time::sleep(std::time::Duration::from_secs(5)).await;
    s.mock().clear_faults();
    s.provisioner().restart();
    wait_gone(&s.claims(), "data").await;
    assert!(
        s.driver_volumes().await.is_empty(),
        "no volume left behind: {:?}",
        s.driver_volumes().await
    );
    let pvs = s.volumes().list(&Default::default()).await.unwrap();
    assert!(pvs.items.iter().all(|pv| {
        pv.spec
            .as_ref()
            .and_then(|s| s.storage_class_name.as_deref())
            != Some(class.as_str())
    }));
}

/// A claim deleted while its CreateVolume is in flight (the provisioner stays up).
#[tokio::test]
#[ignore = "needs the control plane: cargo xtask test"]
async fn a_claim_deleted_during_create_volume_leaves_no_volume() {
    let s = Scenario::start("prov-race", &[], &[]).await;
    s.mock()
        .set_faults(json!({"CreateVolume": {"delay_ms": 3000}}));
    let class = s.class("imm", "Immediate", json!({})).await;
    s.claim("data", &class, "1Gi", json!({})).await;
    delete_while_creating(&s, "data").await;
    no_pv_of_class(&s, &class).await;
}

/// 200 claims created and deleted at once: every claim goes away and no volume is left.
#[tokio::test]
#[ignore = "needs the control plane: cargo xtask test"]
async fn creating_and_deleting_200_claims_in_a_burst_leaves_nothing_behind() {
    use kube::api::DeleteParams;
    let s = Scenario::start(
        "prov-burst",
        &[],
        &["--kube-api-qps=50", "--kube-api-burst=100"],
    )
    .await;
    s.mock()
        .set_faults(json!({"CreateVolume": {"delay_ms": 50}}));
    let class = s.class("imm", "Immediate", json!({})).await;
    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..200 {
        let (claims, class) = (s.claims(), class.clone());
        let ns = s.ns.clone();
        tasks.spawn(async move {
            let name = format!("c{i}");
            let pvc: k8s_openapi::api::core::v1::PersistentVolumeClaim = serde_json::from_value(json!({
                "metadata": {"name": name, "namespace": ns},
                "spec": {"accessModes": ["ReadWriteOnce"], "storageClassName": class, "resources": {"requests": {"storage": "1Mi"}}},
            }))
            .unwrap();
            claims.create(&Default::default(), &pvc).await.unwrap();
            // Spread the deletions over the whole provisioning window.
            tokio::time::sleep(std::time::Duration::from_millis(i * 15)).await;
            claims.delete(&name, &DeleteParams::default()).await.unwrap();
        });
    }
    while let Some(r) = tasks.join_next().await {
        r.unwrap();
    }
    support::eventually_within(
        "every claim to be gone",
        std::time::Duration::from_secs(240),
        || async {
            s.claims()
                .list(&Default::default())
                .await
                .unwrap()
                .items
                .is_empty()
                .then_some(())
        },
    )
    .await;
    no_pv_of_class(&s, &class).await;
    support::eventually("the driver to be empty", || async {
        s.driver_volumes().await.is_empty().then_some(())
    })
    .await;
    let created = s
        .mock()
        .calls_of("CreateVolume")
        .iter()
        .filter(|c| c.get("response").is_some())
        .count();
    let deleted = s
        .mock()
        .calls_of("DeleteVolume")
        .iter()
        .filter(|c| c.get("response").is_some())
        .count();
    eprintln!("burst: {created} successful CreateVolume calls, {deleted} DeleteVolume calls");
}

/// Clusters run one provisioner per driver and the finalizer's name is shared: a provisioner
/// must never act on another driver's claims, not even deleted ones holding the finalizer.
#[tokio::test]
#[ignore = "needs the control plane: cargo xtask test"]
async fn another_drivers_provisioner_never_touches_our_claims() {
    let ours = Scenario::start("prov-ours", &[], &[]).await;
    let theirs = Scenario::start("prov-theirs", &[], &[]).await;
    ours.mock()
        .set_faults(json!({"CreateVolume": {"delay_ms": 2000}}));
    let class = ours.class("imm", "Immediate", json!({})).await;
    let claim = ours.claim("data", &class, "1Gi", json!({})).await;
    let pv_name = format!("pvc-{}", claim.metadata.uid.unwrap());
    delete_while_creating(&ours, "data").await;
    let touched: Vec<_> = theirs
        .mock()
        .calls()
        .into_iter()
        .filter(|c| c["request"]["name"] == pv_name.as_str())
        .collect();
    assert!(
        touched.is_empty(),
        "the other driver was called for our claim: {touched:#?}"
    );
}

/// As upstream: when the driver goes away the sidecar exits (status 1), even when idle, so
/// Kubernetes restarts it next to the restarted driver.
#[tokio::test]
#[ignore = "needs the control plane: cargo xtask test"]
async fn losing_the_driver_connection_exits_the_provisioner() {
    let mut s = Scenario::start("prov-lost", &[], &[]).await;
    s.provisioner()
        .wait_for_log("Caches synced", std::time::Duration::from_secs(60));
    s.mock_mut().kill();
    let status = wait_exit(&mut s, 20, "after losing its driver").await;
    assert_eq!(status.code(), Some(1), "exit status");
    assert!(
        s.provisioner()
            .log()
            .contains("Lost connection to CSI driver, exiting")
    );
}

/// A panicking worker is not survivable (its key would stay "in progress" forever): the
/// process exits with status 1 and a log line naming the task, the queue and the key, so that
/// Kubernetes restarts it, as upstream's Go process crashes (issue 13, item 5). The panic comes
/// from the debug-build fault hook in `run_workers`.
#[tokio::test]
#[ignore = "needs the control plane: cargo xtask test"]
async fn a_panicking_worker_ends_the_process() {
    let mut s = Scenario::new("prov-panic").await;
    s.start_driver::<&str>(&[]);
    s.start_provisioner_with_env::<&str>(
        &[],
        &[("CSI_PROVISIONER_DEBUG_PANIC_ON", "claims:crash-me")],
    );
    let class = s.class("imm", "Immediate", json!({})).await;
    // Other keys are unaffected by the hook: the process works until the panic.
    s.claim("fine", &class, "1Gi", json!({})).await;
    s.wait_bound("fine").await;
    assert!(s.provisioner().is_running());
    s.claim("crash-me", &class, "1Gi", json!({})).await;
    let status = wait_exit(&mut s, 30, "after a worker panicked").await;
    assert_eq!(status.code(), Some(1), "exit status");
    let log = s.provisioner().log();
    let want = format!(
        r#"controller task claims stopped: panicked: a worker of queue \"claims\" panicked while processing key ClaimKey {{ namespace: \"{}\", name: \"crash-me\" }}"#,
        s.ns
    );
    let exiting: Vec<&str> = log.lines().filter(|l| l.contains("Exiting")).collect();
    assert_eq!(exiting.len(), 1, "one exit line:\n{log}");
    assert!(exiting[0].contains(&want), "{}\nwanted: {want}", exiting[0]);
    assert_eq!(
        s.mock().calls_of("CreateVolume").len(),
        1,
        "no CreateVolume for the claim whose worker panicked"
    );
}

/// Waits up to `seconds` for the provisioner to exit; fails with its log tail otherwise.
async fn wait_exit(s: &mut Scenario, seconds: u64, when: &str) -> std::process::ExitStatus {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(seconds);
    loop {
        if let Some(status) = s.provisioner().process().try_wait().unwrap() {
            return status;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the provisioner kept running {when}; log tail:\n{}",
            s.provisioner().process().log_tail(30)
        );
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
}

/// Deletes claim `name` once it holds the creating-volume finalizer (CreateVolume is under
/// way), then waits until the claim is gone and the driver holds no volume.
async fn delete_while_creating(s: &Scenario, name: &str) {
    testenv::wait_for(
        &s.claims(),
        name,
        "hold the creating-volume finalizer",
        holds_finalizer,
    )
    .await;
    s.claims()
        .delete(name, &kube::api::DeleteParams::default())
        .await
        .unwrap();
    wait_gone(&s.claims(), name).await;
    support::eventually("the driver to be empty", || async {
        s.driver_volumes().await.is_empty().then_some(())
    })
    .await;
}
