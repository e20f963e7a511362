//! The MutatingAdmissionPolicy that `csi-provisioner admission-policy` prints, installed on the
//! real API server: it adds our creating-volume finalizer when kube-controller-manager names our
//! driver on a claim and removes it when the binder binds the claim, so the provisioner writes
//! no claim; claims of other drivers, and late-binding claims no pod asked for yet, are left
//! alone; and the no-leak guarantee holds on the finalizer the policy added.

use crate::support;
use crate::support::WAIT;
use std::time::Duration;

use crate::support::{Scenario, eventually, holds_finalizer, no_pv_of_class, wait_gone};
use csi_provisioner::admission_policy::api_resource;
use kube::Api;
use kube::api::{DeleteParams, DynamicObject};
use serde_json::json;

/// How the API server's audit log names our provisioner's requests (its user agent).
const OUR_USER_AGENT: &str = "csi-provisioner/";

/// Our provisioner's writes to claims in the scenario's namespace, from the API server's audit
/// log (polled: events are written when each response is sent).
fn our_claim_writes(s: &Scenario) -> Vec<testenv::audit::Write> {
    let log = testenv::ControlPlane::shared().audit_log();
    testenv::audit::claim_writes(&log, &s.ns)
        .expect("audit log")
        .into_iter()
        .filter(|w| w.user_agent.starts_with(OUR_USER_AGENT))
        .collect()
}

/// A scenario with the policy in force, an Immediate class, and the driver's CreateVolume taking
/// `delay_ms` (long enough to act while it runs). `None` on a server without the v1 policy
/// API, after checking the graceful path there (see `support::install_policy`).
async fn with_policy(
    prefix: &str,
    prov_args: &[&str],
    delay_ms: u64,
) -> Option<(Scenario, String)> {
    let s = Scenario::start(prefix, &[], prov_args).await;
    if !support::install_policy(&s).await {
        return None;
    }
    s.mock()
        .set_faults(json!({"CreateVolume": {"delay_ms": delay_ms}}));
    let class = s.class("imm", "Immediate", json!({})).await;
    Some((s, class))
}

/// The finalizer comes and goes with writes kube-controller-manager makes anyway: our provisioner
/// never writes the claims, and each volume is created once.
#[tokio::test]
#[ignore = "needs the control plane: cargo xtask test"]
async fn the_api_server_keeps_the_finalizer_and_the_provisioner_writes_no_claim() {
    let Some((s, class)) = with_policy("adm-zero", &[], 1500).await else {
        return;
    };
    let names = ["a", "b", "c"];
    for name in names {
        s.claim(name, &class, "1Gi", json!({})).await;
    }
    s.wait_finalizer("a").await;
    for name in names {
        let bound = s.wait_bound(name).await;
        assert!(
            !holds_finalizer(&bound),
            "{name}: released by the binder's write"
        );
    }
    assert_eq!(s.mock().calls_of("CreateVolume").len(), names.len());
    // The audit log is written as responses go out: give our last writes time to show.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let ours = our_claim_writes(&s);
    assert!(ours.is_empty(), "our provisioner wrote claims: {ours:#?}");
    // The log is live: the test's own delete of claim a shows up in it.
    s.delete_claim("a").await;
    eventually("the test's own delete in the audit log", WAIT, || async {
        let log = testenv::ControlPlane::shared().audit_log();
        let all = testenv::audit::claim_writes(&log, &s.ns).unwrap();
        all.iter()
            .any(|w| w.verb == "delete" && w.name == "a")
            .then_some(())
    })
    .await;
}

/// With the policy the finalizer comes and goes through the API server's own mutation of
/// kubectl's and the binder's writes: a claim managed with `kubectl apply` keeps its
/// last-applied annotation and field managers, and a second apply that drops a label drops it.
#[tokio::test]
#[ignore = "needs the control plane: cargo xtask test"]
async fn kubectl_apply_keeps_its_merge_with_the_policy() {
    let Some((s, class)) = with_policy("adm-apply", &[], 1500).await else {
        return;
    };
    support::kubectl_apply_claim(&s, "data", &class, json!({"app": "db", "tier": "gold"}));
    s.wait_finalizer("data").await;
    let claim = support::wait_bound_and_released(&s, "data").await;
    support::assert_still_kubectls(&claim);
    assert_eq!(s.mock().calls_of("CreateVolume").len(), 1);
    support::kubectl_apply_claim(&s, "data", &class, json!({"app": "db"}));
    assert_eq!(
        support::claim_labels(&s, "data").await,
        support::labels(&[("app", "db")])
    );
    tokio::time::sleep(Duration::from_secs(2)).await;
    let ours = our_claim_writes(&s);
    assert!(
        ours.is_empty(),
        "our provisioner wrote the claim: {ours:#?}"
    );
}

/// Rendered with the provisioner's own `--volume-name-prefix` and `--volume-name-uuid-length`,
/// the policy recognises the claim's own PV (`vol-<first 8 of the UID>`) and drops the
/// finalizer with that binding, as with the default names: no claim write of ours.
#[tokio::test]
#[ignore = "needs the control plane: cargo xtask test"]
async fn a_policy_rendered_for_other_volume_names_releases_with_the_binding() {
    let naming = ["--volume-name-prefix=vol", "--volume-name-uuid-length=8"];
    let s = Scenario::start("adm-names", &[], &naming).await;
    if !support::install_policy_with(&s, &naming).await {
        return;
    }
    let class = s.class("imm", "Immediate", json!({})).await;
    for name in ["a", "b"] {
        let claim = s.claim(name, &class, "1Gi", json!({})).await;
        let bound = s.wait_bound(name).await;
        let uid: String = claim.metadata.uid.unwrap().replace('-', "");
        assert_eq!(
            bound.spec.as_ref().unwrap().volume_name.as_deref(),
            Some(format!("vol-{}", &uid[..8]).as_str())
        );
        eventually("the binder's write to drop the finalizer", WAIT, || async {
            let c = s.claims().get(name).await.ok()?;
            (!holds_finalizer(&c)).then_some(())
        })
        .await;
    }
    assert_eq!(s.mock().calls_of("CreateVolume").len(), 2);
    tokio::time::sleep(Duration::from_secs(2)).await;
    let ours = our_claim_writes(&s);
    assert!(ours.is_empty(), "our provisioner wrote claims: {ours:#?}");
}

/// A claim whose CreateVolume keeps failing for good: the policy's finalizer stays through the
/// failures (removing it would only make the policy add it back in that same write), so the
/// provisioner writes the claim once, to let it go when it is deleted.
#[tokio::test]
#[ignore = "needs the control plane: cargo xtask test"]
async fn failed_attempts_write_no_claim_under_the_policy() {
    let mut s = Scenario::start("adm-fail", &[], &[]).await;
    if !support::install_policy(&s).await {
        return;
    }
    support::wait_policy_seen(&mut s);
    s.mock().set_faults(json!({"CreateVolume": {
        "code": "Internal", "message": "the storage system said no"}}));
    let class = s.class("imm", "Immediate", json!({})).await;
    // Created over a minute after the provisioner started, so that no earlier process can
    // have called CreateVolume for it: after a final error nothing of it can exist, and
    // without the policy the finalizer would go at once (`earlier_attempt_possible`).
    tokio::time::sleep(Duration::from_secs(65)).await;
    s.claim("data", &class, "1Gi", json!({})).await;
    eventually("three failed attempts", WAIT, || async {
        (s.mock().calls_of("CreateVolume").len() >= 3).then_some(())
    })
    .await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let ours = our_claim_writes(&s);
    assert!(
        ours.is_empty(),
        "our provisioner wrote the claim: {ours:#?}"
    );
    assert!(holds_finalizer(&s.claims().get("data").await.unwrap()));
    s.delete_claim("data").await;
    wait_gone(&s.claims(), "data").await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    // kube-controller-manager drops pvc-protection meanwhile: a conflict may come first.
    let ours = our_claim_writes(&s);
    let done = ours.iter().filter(|w| w.code == Some(200)).count();
    assert_eq!(done, 1, "only the release: {ours:#?}");
    assert!(s.mock().calls_of("DeleteVolume").is_empty());
}

/// A claim holding the policy's finalizer, deleted before any CreateVolume could be sent for it
/// (its provisioner secret is missing) and created within a minute of the provisioner's start
/// (so an earlier process may have called): the probe that would find its volume cannot be
/// built, so the claim says what is missing and what to do; once the secret exists the probe
/// runs and the claim goes, with the volume it made deleted.
#[tokio::test]
#[ignore = "needs the control plane: cargo xtask test"]
async fn a_clean_up_that_cannot_build_its_probe_says_what_to_do() {
    let s = Scenario::start("adm-stuck", &[], &[]).await;
    if !support::install_policy(&s).await {
        return;
    }
    let secret = json!({"parameters": {
        "csi.storage.k8s.io/provisioner-secret-name": "creds",
        "csi.storage.k8s.io/provisioner-secret-namespace": s.ns}});
    let class = s.class("sec", "Immediate", secret).await;
    let claim = s.claim("data", &class, "1Gi", json!({})).await;
    s.wait_finalizer("data").await;
    s.wait_event("data", "ProvisioningFailed", "creds").await;
    s.delete_claim("data").await;
    let event = s
        .wait_event("data", "ProvisioningCleanupFailed", "by hand")
        .await;
    let message = event.message.unwrap_or_default();
    let volume = format!("pvc-{}", claim.metadata.uid.unwrap());
    for needle in ["creds", volume.as_str(), "creating-volume"] {
        assert!(message.contains(needle), "{needle:?} in {message:?}");
    }
    assert!(s.mock().calls_of("CreateVolume").is_empty());
    support::create_secret(&s, "creds", &[("password", "x")]).await;
    wait_gone(&s.claims(), "data").await;
    assert_eq!(s.mock().calls_of("CreateVolume").len(), 1, "the probe");
    assert_eq!(s.mock().succeeded("DeleteVolume"), 1);
    assert!(s.driver_volumes().await.is_empty());
}

/// A claim deleted while its CreateVolume runs keeps the finalizer the policy added until the
/// call has answered: its volume gets a PV and is deleted with it; nothing leaks.
#[tokio::test]
#[ignore = "needs the control plane: cargo xtask test"]
async fn a_claim_deleted_during_create_volume_leaves_no_volume_under_the_policy() {
    // At -v=5 each CSI call is logged as it is sent.
    let Some((mut s, class)) = with_policy("adm-race", &["-v=5"], 3000).await else {
        return;
    };
    s.claim("data", &class, "1Gi", json!({})).await;
    s.delete_while_creating("data").await;
    no_pv_of_class(&s, &class).await;
}

/// Claims of another driver, and late-binding claims no pod has asked for (kube-controller-manager
/// does not name a provisioner on them yet), never get the finalizer.
#[tokio::test]
#[ignore = "needs the control plane: cargo xtask test"]
async fn other_drivers_and_unscheduled_claims_get_no_finalizer() {
    let s = Scenario::start("adm-others", &[], &[]).await;
    if !support::install_policy(&s).await {
        return;
    }
    let other = json!({"metadata": {"annotations": {
        "volume.kubernetes.io/storage-provisioner": "other.csi.example"}}});
    let theirs = s.claim("theirs", "no-such-class", "1Gi", other).await;
    assert!(
        !holds_finalizer(&theirs),
        "{:?}",
        theirs.metadata.finalizers
    );
    let late = s.class("wffc", "WaitForFirstConsumer", json!({})).await;
    s.claim("waiting", &late, "1Gi", json!({})).await;
    // kube-controller-manager has synced the claim (and named no provisioner on it).
    s.wait_event("waiting", "WaitForFirstConsumer", "").await;
    let waiting = s.claims().get("waiting").await.unwrap();
    assert!(
        !holds_finalizer(&waiting),
        "an unscheduled late-binding claim got the finalizer: {:?}",
        waiting.metadata
    );
    assert!(s.mock().calls_of("CreateVolume").is_empty());
}

/// With the policy, a claim holds the finalizer before the provisioner ever attempts it. One
/// deleted before that attempt (the only worker is busy) is released without a CreateVolume
/// probe: it was created after this provisioner started, so no earlier process saw it.
#[tokio::test]
#[ignore = "needs the control plane: cargo xtask test"]
async fn a_claim_deleted_before_its_first_attempt_is_released_without_a_probe() {
    let Some((s, class)) = with_policy("adm-early", &["--worker-threads=1"], 6000).await else {
        return;
    };
    // Taken after the provisioner started, so waiting the margin from here is enough.
    let started = std::time::Instant::now();
    // Claims created within a minute of the start count as possibly seen by an earlier process
    // (clock skew margin): wait past it.
    let margin =
        Duration::from_secs(provisioning::attempt::CREATED_SINCE_START_MARGIN_SECS as u64 + 2);
    tokio::time::sleep(margin.saturating_sub(started.elapsed())).await;
    s.claim("busy", &class, "1Gi", json!({})).await;
    s.wait_finalizer("busy").await;
    let gone = s.claim("gone", &class, "1Gi", json!({})).await;
    s.wait_finalizer("gone").await;
    s.delete_claim("gone").await;
    wait_gone(&s.claims(), "gone").await;
    let name = format!("pvc-{}", gone.metadata.uid.unwrap());
    assert!(
        s.create_calls(&name).is_empty(),
        "probed: {:#?}",
        s.create_calls(&name)
    );
    s.wait_bound("busy").await;
    assert_eq!(s.mock().calls_of("CreateVolume").len(), 1, "only busy's");
}

/// The provisioner sees the policy come and go: `csi_provisioner_admission_policy_active` and
/// one log line per change.
#[tokio::test]
#[ignore = "needs the control plane: cargo xtask test"]
async fn the_provisioner_reports_whether_the_policy_is_in_force() {
    const ACTIVE: &str = "csi_provisioner_admission_policy_active";
    let port = support::free_port();
    let endpoint = format!("--http-endpoint=127.0.0.1:{port}");
    let mut s = Scenario::start("adm-seen", &[], &[endpoint.as_str()]).await;
    let gauge = || async move {
        let text = support::scrape(port).await?;
        support::sample(&text, ACTIVE, &[])
    };
    eventually("the gauge at 0 without the policy", WAIT, || async {
        (gauge().await? == 0.0).then_some(())
    })
    .await;
    if !support::install_policy(&s).await {
        return;
    }
    eventually("the gauge at 1 with the policy", WAIT, || async {
        (gauge().await? == 1.0).then_some(())
    })
    .await;
    let bindings: Api<DynamicObject> = Api::all_with(s.client.clone(), &api_resource(true));
    let name = provisioning::admission::policy_name(&s.driver);
    bindings
        .delete(&name, &DeleteParams::default())
        .await
        .unwrap();
    eventually("the gauge back at 0 without the binding", WAIT, || async {
        (gauge().await? == 0.0).then_some(())
    })
    .await;
    // The gauge changes as the line is written: wait for the line too.
    let own = "the provisioner adds and removes it itself";
    s.provisioner()
        .wait_for_log_count(own, 2, std::time::Duration::from_secs(60));
    let log = s.provisioner().log();
    let kept = log
        .matches("kept by the API server (MutatingAdmissionPolicy in force)")
        .count();
    assert_eq!(
        (kept, log.matches(own).count()),
        (1, 2),
        "one line per change:\n{log}"
    );
    let policies: Api<DynamicObject> = Api::all_with(s.client.clone(), &api_resource(false));
    policies
        .delete(&name, &DeleteParams::default())
        .await
        .unwrap();
}

/// kill -9 while CreateVolume runs, the claim deleted while the provisioner is down, restart:
/// the policy's finalizer holds the claim, and the restarted provisioner finds and deletes the
/// volume (it cannot know what the dead process sent, so it probes).
#[tokio::test]
#[ignore = "needs the control plane: cargo xtask test"]
async fn a_claim_deleted_while_the_provisioner_is_down_leaves_no_volume_under_the_policy() {
    // At -v=5 each CSI call is logged as it is sent.
    let Some((mut s, class)) = with_policy("adm-crash", &["-v=5"], 4000).await else {
        return;
    };
    let volume = s.claim_volume_name("data", &class, "1Gi").await;
    s.wait_finalizer("data").await;
    s.wait_create_volume_sent();
    s.provisioner().kill9();
    s.delete_claim("data").await;
    let held = s.claims().get("data").await.unwrap();
    assert!(
        holds_finalizer(&held),
        "the policy's finalizer keeps the deleted claim"
    );
    // Let the interrupted call finish in the driver: it made the volume nobody was told of.
    support::eventually(
        "the dead process's call to end in the driver",
        WAIT,
        || async { (s.create_calls(&volume).len() == 1).then_some(()) },
    )
    .await;
    s.mock().clear_faults();
    s.provisioner().restart();
    wait_gone(&s.claims(), "data").await;
    assert!(
        s.driver_volumes().await.is_empty(),
        "leaked: {:?}",
        s.driver_volumes().await
    );
    no_pv_of_class(&s, &class).await;
    // The restarted process asked again under the same name, got that volume back and
    // deleted it once.
    let made = s.volume_ids_made(&volume);
    assert_eq!(
        made.len(),
        2,
        "the dead process's call and the probe: {made:?}"
    );
    s.assert_one_volume_made_and_deleted(&volume);
}

/// An API server without the v1 MutatingAdmissionPolicy API (as every release before
/// Kubernetes 1.36): the provisioner says so in one line, stops watching instead of retrying,
/// and keeps the no-leak finalizer with its own two claim writes, also on a tight budget.
#[tokio::test]
#[ignore = "needs the control plane: cargo xtask test"]
async fn without_the_policy_api_the_provisioner_writes_the_finalizer_itself() {
    const ACTIVE: &str = "csi_provisioner_admission_policy_active";
    // Before Kubernetes 1.36 the API is not there to turn off (nor is the flag accepted).
    let shared = testenv::ControlPlane::shared().client().await;
    let apiserver_args = if support::serves_policy_api(&shared).await {
        vec![
            "--runtime-config=admissionregistration.k8s.io/v1/mutatingadmissionpolicies=false,admissionregistration.k8s.io/v1/mutatingadmissionpolicybindings=false".into(),
            // The plugin would wait for the API it reads.
            "--disable-admission-plugins=MutatingAdmissionPolicy".into(),
        ]
    } else {
        Vec::new()
    };
    let cp = testenv::ControlPlane::start(testenv::ControlPlaneOptions {
        apiserver_args,
        ..Default::default()
    })
    .await
    .unwrap_or_else(|e| panic!("a control plane without the v1 policy API: {e}"));
    let port = support::free_port();
    let endpoint = format!("--http-endpoint=127.0.0.1:{port}");
    let mut s = Scenario::new_on(&cp, "adm-old").await;
    s.start_driver::<&str>(&[]);
    // A budget of one request at a time: the binding watch's list then waits in the client's
    // line when the policy's 404 comes. Left there un-polled it held the line's head, and no
    // request of the provisioner was ever sent again (every claim stuck on Kubernetes 1.34
    // and 1.35).
    s.start_provisioner(&[
        endpoint.as_str(),
        "-v=5",
        "--kube-api-qps=2",
        "--kube-api-burst=1",
    ]);
    let not_served = "does not serve admissionregistration.k8s.io/v1 MutatingAdmissionPolicies";
    s.provisioner()
        .wait_for_log(not_served, Duration::from_secs(60));
    let class = s.class("imm", "Immediate", json!({})).await;
    s.claim("a", &class, "1Gi", json!({})).await;
    // The finalizer comes and goes within a fast CreateVolume: the audit log shows both.
    s.wait_bound("a").await;
    eventually("the finalizer to go after the binding", WAIT, || async {
        let claim = s.claims().get("a").await.ok()?;
        (!holds_finalizer(&claim)).then_some(())
    })
    .await;
    let writes = eventually("our two claim writes in the audit log", WAIT, || async {
        let writes: Vec<_> = testenv::audit::claim_writes(&cp.audit_log(), &s.ns)
            .expect("audit log")
            .into_iter()
            .filter(|w| w.user_agent.starts_with(OUR_USER_AGENT))
            .collect();
        (writes.len() >= 2).then_some(writes)
    })
    .await;
    assert_eq!(writes.len(), 2, "add and remove the finalizer: {writes:?}");
    let text = support::scrape(port).await.expect("metrics");
    assert_eq!(support::sample(&text, ACTIVE, &[]), Some(0.0));
    let log = s.provisioner().log();
    assert_eq!(log.matches(not_served).count(), 1, "{log}");
    assert!(
        !log.contains("Watching the admission policy failed"),
        "no retries: {log}"
    );
}
