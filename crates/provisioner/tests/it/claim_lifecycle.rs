//! The claim lifecycle's edge cases against the real control plane: name collisions, clean-up
//! with only what the attempt kept, unsaved PVs, topology reuse, and retry pacing.

use crate::support;
use crate::support::WAIT;
use std::time::Duration;

use crate::support::{
    Holder, NODE_KEY, Scenario, create_secret, eventually, holds_finalizer, wait_gone,
};
use k8s_openapi::api::core::v1::Secret;
use kube::Api;
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use serde_json::json;

/// With `--volume-name-uuid-length=1` two claims soon get the same volume name. The second is
/// refused with an event. It may still be held (its entry, or a finalizer an earlier version
/// left), so its deletion waits for our clean-up, which — with the provisioner
/// up, and after a restart that forgot the refusal — must let it go without deleting the
/// first claim's volume.
#[tokio::test]
#[ignore = "needs the control plane: cargo xtask test"]
async fn a_name_collision_never_deletes_the_other_claims_volume() {
    let mut s = Scenario::start("prov-collide", &[], &["--volume-name-uuid-length=1"]).await;
    let class = s.class("imm", "Immediate", json!({})).await;
    // Volume name (the UID's first character) → the bound claim that owns it.
    let mut owners = std::collections::HashMap::new();
    for restart in [false, true] {
        let (loser, winner) = colliding_claim(&s, &class, restart, &mut owners).await;
        let winner_claim = s.wait_bound(&winner).await;
        let pv = winner_claim.spec.unwrap().volume_name.unwrap();
        s.wait_event(
            &loser,
            "ProvisioningFailed",
            "already exists for another claim",
        )
        .await;
        if restart {
            s.provisioner().kill9();
        }
        s.claims()
            .patch(
                &loser,
                &PatchParams::default(),
                &Patch::Strategic(json!({"metadata": {"finalizers": [support::CREATING]}})),
            )
            .await
            .unwrap();
        s.delete_claim(&loser).await;
        if restart {
            s.provisioner().restart();
        }
        // Only our clean-up lets the claim go, and it deletes a volume before that.
        wait_gone(&s.claims(), &loser).await;
        // Give a wrong clean-up left running in the background a chance to show too.
        tokio::time::sleep(Duration::from_secs(2)).await;
        assert!(
            s.mock().calls_of("DeleteVolume").is_empty(),
            "nothing may be deleted (restart: {restart}): {:?}",
            s.mock().calls_of("DeleteVolume")
        );
        let handle = s.volume_handle(&pv).await;
        assert!(
            s.driver_volumes().await.contains(&handle),
            "the winner's volume {handle} is still there"
        );
        let bound = s.claims().get(&winner).await.unwrap();
        assert_eq!(
            bound.status.and_then(|st| st.phase).as_deref(),
            Some("Bound")
        );
    }
}

/// Creates claims one by one (each waits for its outcome) until one's volume name is already
/// taken by an earlier one; returns (the refused claim, the claim owning the name).
async fn colliding_claim(
    s: &Scenario,
    class: &str,
    restart: bool,
    owners: &mut std::collections::HashMap<String, String>,
) -> (String, String) {
    for i in 0..40 {
        let name = format!("c{}-{i}", u8::from(restart));
        let claim = s.claim(&name, class, "1Gi", json!({})).await;
        let uid = claim.metadata.uid.unwrap();
        let first = uid[..1].to_string();
        if let Some(owner) = owners.get(&first) {
            return (name, String::clone(owner));
        }
        s.wait_bound(&name).await;
        owners.insert(first, name);
    }
    panic!("40 claims and no collision of a 1-character name");
}

/// A CreateVolume that failed with a final error created nothing: the claim is not held by our
/// finalizer, and deleting it asks the driver nothing more.
#[tokio::test]
#[ignore = "needs the control plane: cargo xtask test"]
async fn a_claim_whose_create_volume_failed_finally_is_released_without_a_probe() {
    // No retry within the test: one would add the finalizer again and call the driver.
    let s = Scenario::start("prov-final", &[], &["--retry-interval-start=1m"]).await;
    s.mock().set_faults(
        json!({"CreateVolume": {"code": "PermissionDenied", "message": "quota says no"}}),
    );
    let class = s.class("imm", "Immediate", json!({})).await;
    s.claim("data", &class, "1Gi", json!({})).await;
    s.wait_event("data", "ProvisioningFailed", "quota says no")
        .await;
    testenv::wait_for(&s.claims(), "data", "lose the finalizer", |c| {
        !holds_finalizer(c)
    })
    .await;
    let calls = s.mock().calls_of("CreateVolume").len();
    s.mock().clear_faults();
    s.delete_claim("data").await;
    wait_gone(&s.claims(), "data").await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(
        s.mock().calls_of("CreateVolume").len(),
        calls,
        "no probe after a final error"
    );
    assert!(s.driver_volumes().await.is_empty());
    assert!(s.mock().calls_of("DeleteVolume").is_empty());
}

/// Refuses PV creation for one class with a ValidatingAdmissionPolicy: the PV save fails while
/// everything else works. Returns the policy's name.
async fn refuse_pvs_of_class(s: &Scenario, class: &str) -> String {
    let name = format!("{}-no-pv", s.ns);
    support::create_validating_policy(
        s,
        &name,
        json!({
            "failurePolicy": "Fail",
            "matchConstraints": {"resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"],
                "operations": ["CREATE"], "resources": ["persistentvolumes"]}]},
            "validations": [{"expression": format!("object.spec.storageClassName != '{class}'"),
                "message": "test: PV creation refused"}],
        }),
    )
    .await;
    // The policy takes effect a moment later: wait until a dry-run PV is refused.
    let probe: k8s_openapi::api::core::v1::PersistentVolume = serde_json::from_value(json!({
        "metadata": {"name": format!("{}-probe", s.ns)},
        "spec": {"capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteOnce"],
                 "storageClassName": class, "csi": {"driver": s.driver, "volumeHandle": "x"}},
    }))
    .unwrap();
    let dry = PostParams {
        dry_run: true,
        ..Default::default()
    };
    eventually("the policy to refuse PVs", WAIT, || async {
        s.volumes()
            .create(&dry, &probe)
            .await
            .is_err()
            .then_some(())
    })
    .await;
    name
}

async fn allow_pvs(s: &Scenario, policy: &str) {
    support::drop_validating_policy(s, policy).await;
}

/// A claim deleted while its PV cannot be saved, after its StorageClass and provisioner secret
/// were deleted: the volume whose id the attempt kept is deleted with the secrets the attempt
/// used, and the claim goes.
#[tokio::test]
#[ignore = "needs the control plane: cargo xtask test"]
async fn clean_up_needs_nothing_but_what_the_attempt_kept() {
    let s = Scenario::start("prov-kept", &[], &[]).await;
    create_secret(&s, "creds", &[("password", "hunter2")]).await;
    let ns = s.ns.clone();
    let class = s
        .class(
            "sec",
            "Immediate",
            json!({"parameters": {
                "csi.storage.k8s.io/provisioner-secret-name": "creds",
                "csi.storage.k8s.io/provisioner-secret-namespace": ns,
            }}),
        )
        .await;
    let policy = refuse_pvs_of_class(&s, &class).await;
    s.claim("data", &class, "1Gi", json!({})).await;
    let volume_id = created_volume(&s).await;
    s.delete_class(&class).await;
    Api::<Secret>::namespaced(s.client.clone(), &s.ns)
        .delete("creds", &DeleteParams::default())
        .await
        .unwrap();
    s.delete_claim("data").await;
    wait_gone(&s.claims(), "data").await;
    allow_pvs(&s, &policy).await;
    let deletes = s.mock().calls_of("DeleteVolume");
    assert_eq!(deletes.len(), 1, "{deletes:?}");
    assert_eq!(deletes[0]["request"]["volume_id"], volume_id.as_str());
    assert_eq!(
        deletes[0]["request"]["secrets"]["password"], "hunter2",
        "DeleteVolume gets the secrets CreateVolume got"
    );
    assert_eq!(s.mock().calls_of("CreateVolume").len(), 1);
    assert!(s.driver_volumes().await.is_empty());
    assert!(
        s.events_for("data")
            .await
            .iter()
            .all(|e| e.reason.as_deref() != Some("ProvisioningCleanupFailed")),
        "no stuck clean-up"
    );
}

/// Waits for the one successful CreateVolume and returns its volume id.
async fn created_volume(s: &Scenario) -> String {
    eventually("a successful CreateVolume", WAIT, || async {
        s.mock().calls_of("CreateVolume").iter().find_map(|c| {
            c["response"]["volume"]["volume_id"]
                .as_str()
                .map(String::from)
        })
    })
    .await
}

/// The PV save fails, then the StorageClass is deleted: the PV built for the created volume is
/// still saved once it can be, and the claim binds to it (upstream's unsaved-PV queue).
#[tokio::test]
#[ignore = "needs the control plane: cargo xtask test"]
async fn an_unsaved_pv_is_saved_after_its_class_is_gone() {
    let s = Scenario::start("prov-unsaved", &[], &[]).await;
    let class = s.class("imm", "Immediate", json!({})).await;
    let policy = refuse_pvs_of_class(&s, &class).await;
    s.claim("data", &class, "1Gi", json!({})).await;
    let volume_id = created_volume(&s).await;
    s.delete_class(&class).await;
    // Let the class deletion reach the provisioner's cache before the PV can be saved.
    tokio::time::sleep(Duration::from_secs(2)).await;
    allow_pvs(&s, &policy).await;
    let claim = s.wait_bound("data").await;
    let pv = s
        .volumes()
        .get(&claim.spec.unwrap().volume_name.unwrap())
        .await
        .unwrap();
    assert_eq!(pv.spec.unwrap().csi.unwrap().volume_handle, volume_id);
    assert_eq!(s.mock().calls_of("CreateVolume").len(), 1);
    assert!(s.mock().calls_of("DeleteVolume").is_empty());
}

/// The selected Node and its CSINode are deleted while attempts fail with timeouts:
/// the retry asks for the same placement instead of failing for ever or rescheduling while the
/// first call may still be running (upstream's TestProvisionWithDeletedNodeFromCache).
#[tokio::test]
#[ignore = "needs the control plane: cargo xtask test"]
async fn retries_reuse_the_first_topology_after_the_node_is_gone() {
    use k8s_openapi::api::core::v1::Node;
    use k8s_openapi::api::storage::v1::CSINode;
    let (s, names) = Scenario::with_nodes("prov-gone", &["a", "b"], "100Gi", &[]).await;
    s.mock()
        .set_faults(json!({"CreateVolume": {"code": "DeadlineExceeded"}}));
    let class = s.class("wffc", "WaitForFirstConsumer", json!({})).await;
    // The scheduler's choice, made by hand: no pod needed.
    let node = names[0].clone();
    s.claim(
        "data",
        &class,
        "1Gi",
        json!({"metadata": {"annotations": {"volume.kubernetes.io/selected-node": node}}}),
    )
    .await;
    s.wait_event("data", "ProvisioningFailed", "DeadlineExceeded")
        .await;
    let dp = DeleteParams::default();
    Api::<Node>::all(s.client.clone())
        .delete(&node, &dp)
        .await
        .unwrap();
    Api::<CSINode>::all(s.client.clone())
        .delete(&node, &dp)
        .await
        .unwrap();
    // Let the deletions reach the provisioner's caches before the driver recovers.
    tokio::time::sleep(Duration::from_secs(3)).await;
    s.mock().clear_faults();
    let pv = eventually("the PV", Duration::from_secs(90), || async {
        let claim = s.claims().get("data").await.unwrap();
        let name = format!("pvc-{}", claim.metadata.uid.unwrap());
        s.volumes().get_opt(&name).await.unwrap()
    })
    .await;
    let calls = s.mock().calls_of("CreateVolume");
    assert!(calls.len() >= 2, "failures, then success: {calls:?}");
    assert!(calls.last().unwrap()["response"]["volume"].is_object());
    for call in &calls {
        assert_eq!(
            call["request"]["accessibility_requirements"],
            calls[0]["request"]["accessibility_requirements"],
            "every retry asks for the first attempt's placement"
        );
    }
    assert_eq!(
        calls[0]["request"]["accessibility_requirements"]["preferred"][0]["segments"][NODE_KEY],
        node.as_str()
    );
    let claim = s.claims().get("data").await.unwrap();
    assert_eq!(
        claim.metadata.annotations.unwrap()["volume.kubernetes.io/selected-node"],
        node,
        "not rescheduled"
    );
    assert!(pv.spec.unwrap().node_affinity.is_some());
}

/// InvalidArgument: one attempt and one warning, then nothing until `--retry-interval-max`
/// (20 s here), even though the claim is updated meanwhile. A re-created StorageClass (new UID)
/// lifts the wait at once: claim `a` waits out the interval, claim `b`, whose class comes
/// back, does not.
#[tokio::test]
#[ignore = "needs the control plane: cargo xtask test"]
async fn an_infeasible_claim_is_tried_once_per_slow_interval() {
    const SLOW: f64 = 20.0;
    let s = Scenario::start("prov-slow", &[], &["--retry-interval-max=20s"]).await;
    s.mock().set_faults(
        json!({"CreateVolume": {"code": "InvalidArgument", "message": "no such tier", "times": 2}}),
    );
    let class_a = s.class("a", "Immediate", json!({})).await;
    let class_b = s.class("b", "Immediate", json!({})).await;
    for (claim, class) in [("a", &class_a), ("b", &class_b)] {
        s.claim(claim, class, "1Gi", json!({})).await;
        s.wait_event(claim, "ProvisioningFailed", "no such tier")
            .await;
    }
    // Updates during the hold do not bring the next attempt forward.
    for i in 0..6 {
        tokio::time::sleep(Duration::from_secs(1)).await;
        touch(&s, "a", &format!("held-{i}")).await;
        touch(&s, "b", &format!("held-{i}")).await;
    }
    assert_eq!(
        s.mock().calls_of("CreateVolume").len(),
        2,
        "one attempt each"
    );
    for claim in ["a", "b"] {
        let warnings: Vec<_> = s
            .events_for(claim)
            .await
            .into_iter()
            .filter(|e| e.reason.as_deref() == Some("ProvisioningFailed"))
            .collect();
        assert_eq!(warnings.len(), 1, "{warnings:?}");
        assert_eq!(warnings[0].count.unwrap_or(1), 1, "{warnings:?}");
    }
    // b's class is fixed by re-creating it: provisioning goes on now, not after the interval.
    s.delete_class(&class_b).await;
    s.class("b", "Immediate", json!({})).await;
    // Class changes do not queue claims (nor upstream's): the next update of the claim does.
    // An update the provisioner handles before its class cache has the new class waits out
    // the old hold, so the claim is touched again each second until it is Bound.
    let polls = std::sync::atomic::AtomicUsize::new(0);
    support::eventually(
        "claim b to be Bound after its class came back",
        WAIT,
        || async {
            let n = polls.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let claim = s.claims().get("b").await.unwrap();
            if claim.status.and_then(|st| st.phase).as_deref() == Some("Bound") {
                return Some(());
            }
            if n.is_multiple_of(5) {
                touch(&s, "b", &format!("after-new-class-{n}")).await;
            }
            None
        },
    )
    .await;
    let b = call_starts(&s, "b").await;
    assert_eq!(b.len(), 2, "{b:?}");
    // Waiting out the interval would take SLOW or more; the updates and the class's return
    // before it take several seconds on a loaded machine.
    assert!(
        b[1] - b[0] < SLOW - 3.0,
        "b's class came back {:.1} s after its failure, but it waited out the interval",
        b[1] - b[0]
    );
    s.wait_bound("a").await;
    let a = call_starts(&s, "a").await;
    assert_eq!(a.len(), 2, "{a:?}");
    let gap = a[1] - a[0];
    assert!(
        (SLOW - 0.1..SLOW + 3.0).contains(&gap),
        "a was tried again {gap:.1} s after its InvalidArgument, not after the {SLOW} s interval"
    );
}

/// When each CreateVolume call for claim `name` started (seconds), in order.
async fn call_starts(s: &Scenario, name: &str) -> Vec<f64> {
    let uid = s.claims().get(name).await.unwrap().metadata.uid.unwrap();
    s.create_calls(&format!("pvc-{uid}"))
        .iter()
        .map(call_start)
        .collect()
}

/// When a call in the mock's log started, in seconds.
fn call_start(call: &serde_json::Value) -> f64 {
    let t: k8s_openapi::jiff::Timestamp = call["time"].as_str().unwrap().parse().unwrap();
    t.as_millisecond() as f64 / 1000.0
}

/// Writes a label on the claim: an update event, as any user or controller makes.
async fn touch(s: &Scenario, name: &str, value: &str) {
    for _ in 0..5 {
        let mut claim = s.claims().get(name).await.unwrap();
        claim
            .metadata
            .labels
            .get_or_insert_with(Default::default)
            .insert("touched".into(), value.into());
        if s.claims()
            .replace(name, &PostParams::default(), &claim)
            .await
            .is_ok()
        {
            return;
        }
    }
    panic!("cannot update claim {name}");
}

/// Timeouts for a while: one attempt per backoff step (1, 2, 4, 8 s after each failure, as
/// upstream), however often the claim is updated meanwhile, and the first attempt after the
/// driver recovers comes one step later.
#[tokio::test]
#[ignore = "needs the control plane: cargo xtask test"]
async fn transient_errors_are_retried_once_per_backoff_step() {
    let s = Scenario::start("prov-pace", &[], &[]).await;
    s.mock()
        .set_faults(json!({"CreateVolume": {"code": "DeadlineExceeded", "times": 4}}));
    let class = s.class("imm", "Immediate", json!({})).await;
    s.claim("data", &class, "1Gi", json!({})).await;
    // Updates while the claim backs off must not bring attempts forward.
    for i in 0..6 {
        tokio::time::sleep(Duration::from_millis(700)).await;
        touch(&s, "data", &i.to_string()).await;
    }
    s.wait_bound("data").await;
    let times = call_starts(&s, "data").await;
    assert_eq!(times.len(), 5, "four timeouts, then success: {times:?}");
    let gaps: Vec<f64> = times.windows(2).map(|w| w[1] - w[0]).collect();
    for (gap, step) in gaps.iter().zip([1.0, 2.0, 4.0, 8.0]) {
        assert!(
            *gap >= step - 0.1,
            "an attempt came {gap:.2} s after the last failure, before its {step} s backoff: {gaps:?}"
        );
    }
    // Not later either: the faults answer at once and the rate limiter has no jitter, so the
    // steps add up to 15 s plus the provisioner's own time (7 s allows for a loaded machine;
    // a backoff starting at 2 s, or one stuck at its largest step, would take 30 s or more).
    let total: f64 = gaps.iter().sum();
    assert!(
        total <= 22.0,
        "the four backoffs took {total:.1} s: {gaps:?}"
    );
}

/// Deprecated StorageClass parameters are warned about in the log, once per class.
#[tokio::test]
#[ignore = "needs the control plane: cargo xtask test"]
async fn deprecated_parameters_are_warned_once_per_class() {
    let mut s = Scenario::start("prov-depr", &[], &[]).await;
    // Two claims of one class, one of another: one warning per class, not one per process.
    let deprecated = json!({"parameters": {"fstype": "ext4"}});
    let old = s.class("old", "Immediate", deprecated.clone()).await;
    let older = s.class("older", "Immediate", deprecated).await;
    for (claim, class) in [("a", &old), ("b", &old), ("c", &older)] {
        s.claim(claim, class, "1Gi", json!({})).await;
        s.wait_bound(claim).await;
    }
    let log = s.provisioner().log();
    let warning = "\\\"fstype\\\" is deprecated";
    let plain = "\"fstype\" is deprecated";
    let n = log.matches(warning).count() + log.matches(plain).count();
    assert_eq!(n, 2, "one warning for each class:\n{log}");
}

/// With the finalizer (`CSI_PROVISIONER_WRITE_AHEAD_RECORD=false`, or a claim an earlier
/// version left holding it): a finalizer release the API server refuses is tried again on a
/// backoff of its own. Once
/// kube-controller-manager has dropped pvc-protection nothing else writes a deleted claim, so
/// a release tried only once would hold `kubectl delete pvc` until the 15-minute resync.
#[tokio::test]
#[ignore = "needs the control plane: cargo xtask test"]
async fn a_refused_finalizer_release_is_tried_again() {
    const KEEP: &str = "test.example/keep";
    let args = ["--retry-interval-max=4s"];
    let mut s = Scenario::start_held("prov-release", &[], &args, Holder::Finalizer).await;
    // Refuses any claim update in the namespace that drops our finalizer (or the test's own,
    // which shows when the policy is in force).
    let policy = format!("{}-keep-finalizers", s.ns);
    let kept = |f: &str| {
        format!(
            "(!(has(oldObject.metadata.finalizers) && '{f}' in oldObject.metadata.finalizers) \
             || (has(object.metadata.finalizers) && '{f}' in object.metadata.finalizers))"
        )
    };
    let keeps_both = format!("{} && {}", kept(support::CREATING), kept(KEEP));
    refuse_claim_updates(&s, &policy, &keeps_both, "test: the finalizer stays").await;
    let probe = s
        .claim(
            "probe",
            "",
            "1Gi",
            json!({"metadata": {"finalizers": [KEEP]}}),
        )
        .await;
    let mut dropped = probe.clone();
    dropped.metadata.finalizers = None;
    support::wait_update_refused(&s, &dropped, "the policy to refuse dropping a finalizer").await;

    let class = s.class("imm", "Immediate", json!({})).await;
    s.claim("data", &class, "1Gi", json!({})).await;
    s.wait_bound("data").await;
    s.delete_claim("data").await;
    // kube-controller-manager drops pvc-protection: the last write anyone else makes.
    testenv::wait_for(&s.claims(), "data", "keep only our finalizer", |c| {
        c.metadata.finalizers.as_deref() == Some(&[support::CREATING.to_string()][..])
    })
    .await;
    s.provisioner().wait_for_log(
        "Cannot remove the creating-volume finalizer; will retry",
        Duration::from_secs(30),
    );
    tokio::time::sleep(Duration::from_secs(2)).await;
    support::drop_validating_policy(&s, &policy).await;
    wait_gone(&s.claims(), "data").await;
    assert_eq!(s.mock().calls_of("CreateVolume").len(), 1);

    s.claims()
        .patch(
            "probe",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"finalizers": null}})),
        )
        .await
        .unwrap();
}

/// With the finalizer (`CSI_PROVISIONER_WRITE_AHEAD_RECORD=false`): the API server refuses to
/// let the provisioner put its creating-volume finalizer on a claim (here a
/// ValidatingAdmissionPolicy; a webhook or missing RBAC alike): no CreateVolume is sent, the
/// claim says why and what to allow, and provisioning goes on once the refusal is lifted. (The
/// record's counterpart is `record_claims::a_refused_record_write_means_no_create_volume`.)
#[tokio::test]
#[ignore = "needs the control plane: cargo xtask test"]
async fn a_refused_finalizer_is_explained_on_the_claim() {
    let args = ["--retry-interval-max=4s"];
    let s = Scenario::start_held("prov-nofin", &[], &args, Holder::Finalizer).await;
    let policy = format!("{}-no-finalizer", s.ns);
    let has = |o: &str| {
        format!(
            "(has({o}.metadata.finalizers) && '{}' in {o}.metadata.finalizers)",
            support::CREATING
        )
    };
    let never_added = format!("!{} || {}", has("object"), has("oldObject"));
    refuse_claim_updates(
        &s,
        &policy,
        &never_added,
        "test: no creating-volume finalizer here",
    )
    .await;
    let probe = s.claim("probe", "", "1Gi", json!({})).await;
    let mut marked = probe.clone();
    marked.metadata.finalizers = Some(vec![support::CREATING.to_string()]);
    support::wait_update_refused(&s, &marked, "the policy to refuse the finalizer").await;

    let class = s.class("imm", "Immediate", json!({})).await;
    s.claim("data", &class, "1Gi", json!({})).await;
    let event = s
        .wait_event("data", "ProvisioningFailed", "cannot add the finalizer")
        .await;
    let message = event.message.unwrap_or_default();
    assert!(
        message.contains("test: no creating-volume finalizer here")
            && message.contains("admission webhook or policy"),
        "{message}"
    );
    assert!(s.mock().calls_of("CreateVolume").is_empty());
    support::drop_validating_policy(&s, &policy).await;
    s.wait_bound("data").await;
    assert_eq!(s.mock().calls_of("CreateVolume").len(), 1);
}

/// A claim with only the alpha `volume.alpha.kubernetes.io/selected-node` annotation that the
/// driver refuses with ResourceExhausted is retried, not "sent back to the scheduler": only the
/// GA annotation can be removed for that (the library's rule). With the write-ahead record the
/// failure writes nothing to the claim, so only the retry brings it back.
#[tokio::test]
#[ignore = "needs the control plane: cargo xtask test"]
async fn a_claim_with_the_alpha_selected_node_is_retried_after_resource_exhausted() {
    let (s, names) = Scenario::with_nodes("prov-alpha", &["a"], "100Gi", &[]).await;
    s.mock().set_faults(json!({"CreateVolume": {
        "code": "ResourceExhausted", "message": "test: full for now", "times": 1}}));
    let class = s.class("imm", "Immediate", json!({})).await;
    s.claim(
        "data",
        &class,
        "1Gi",
        json!({"metadata": {"annotations": {"volume.alpha.kubernetes.io/selected-node": names[0]}}}),
    )
    .await;
    s.wait_event("data", "ProvisioningFailed", "test: full for now")
        .await;
    s.wait_bound("data").await;
    assert_eq!(s.mock().calls_of("CreateVolume").len(), 2);
}

/// A ValidatingAdmissionPolicy `name` refusing, with `message`, every claim update in the
/// scenario's namespace for which `allowed` (CEL) is false.
async fn refuse_claim_updates(s: &Scenario, name: &str, allowed: &str, message: &str) {
    let claims = ("", "persistentvolumeclaims");
    support::refuse_updates(s, name, claims, allowed, message).await;
}

/// A claim managed with `kubectl apply` stays kubectl's after we provision it. With the record
/// (the default) we never write the claim; with the finalizer our two writes (added before
/// CreateVolume, released after binding) are patches of the finalizer list alone. Either way
/// the last-applied annotation (which our cache does not keep) and kubectl's field manager
/// entry survive, and a second apply that drops a label drops it. A PUT of our cached copy
/// removed the annotation, and kubectl then kept the label.
#[tokio::test]
#[ignore = "needs the control plane: cargo xtask test"]
async fn kubectl_apply_keeps_its_merge_on_a_claim_we_provisioned() {
    kubectl_apply_keeps_its_merge(Holder::Record).await;
}

#[tokio::test]
#[ignore = "needs the control plane: cargo xtask test"]
async fn with_the_finalizer_kubectl_apply_keeps_its_merge_on_a_claim_we_provisioned() {
    kubectl_apply_keeps_its_merge(Holder::Finalizer).await;
}

async fn kubectl_apply_keeps_its_merge(holder: Holder) {
    let s = Scenario::start_held("prov-apply", &[], &[], holder).await;
    let class = s.class("imm", "Immediate", json!({})).await;
    support::kubectl_apply_claim(&s, "data", &class, json!({"app": "db", "tier": "gold"}));
    let claim = support::wait_bound_and_released(&s, "data").await;
    support::assert_still_kubectls(&claim);
    let log = testenv::ControlPlane::shared().audit_log();
    // The binder's write of the claim comes after ours would have: once the log has it, it
    // has ours too.
    let ours: Vec<String> = eventually(
        "the binder's claim write in the audit log",
        WAIT,
        || async {
            let writes = testenv::audit::claim_writes(&log, &s.ns).unwrap();
            let binder = writes
                .iter()
                .any(|w| w.user_agent.starts_with("kube-controller-manager/"));
            let ours: Vec<String> = writes
                .into_iter()
                .filter(|w| w.user_agent.starts_with("csi-provisioner/"))
                .map(|w| w.verb)
                .collect();
            let complete = match holder {
                Holder::Record => binder,
                Holder::Finalizer => binder && ours.len() >= 2,
            };
            complete.then_some(ours)
        },
    )
    .await;
    match holder {
        Holder::Record => assert!(ours.is_empty(), "no claim write of ours: {ours:?}"),
        Holder::Finalizer => {
            assert_eq!(ours, ["patch", "patch"], "the finalizer's add and release")
        }
    }
    assert_eq!(
        s.create_calls(&claim.spec.unwrap().volume_name.unwrap())
            .len(),
        1
    );
    support::kubectl_apply_claim(&s, "data", &class, json!({"app": "db"}));
    let labels = support::claim_labels(&s, "data").await;
    assert_eq!(
        labels,
        support::labels(&[("app", "db")]),
        "kubectl's three-way merge removes the label it no longer applies"
    );
}
