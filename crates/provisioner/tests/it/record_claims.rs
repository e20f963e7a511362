//! Claims held by the write-ahead record instead of our finalizer (issue 49, the default since
//! step 5): no finalizer of ours ever appears on a
//! claim, a claim deleted while a volume may exist is cleaned up from the record (also by the
//! other replica after the leader's kill -9), a refused record write means no CreateVolume,
//! and a burst of claims costs far fewer record writes than claims. The races of `no_leaks.rs`
//! run with the record too.

use std::sync::atomic::Ordering;
use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::PersistentVolumeClaim;
use kube::Api;
use provisioning::record;
use serde_json::json;

use crate::support::ops::{FAST_ELECTION, Ops};
use crate::support::{self, Holder, Scenario, WAIT, eventually, wait_gone};

async fn start(prefix: &str, mock_args: &[&str], prov_args: &[&str]) -> Scenario {
    Scenario::start_held(prefix, mock_args, prov_args, Holder::Record).await
}

fn lease(s: &Scenario) -> String {
    record::lease_name(&s.driver, None)
}

async fn entries(s: &Scenario) -> Vec<record::Entry> {
    s.record_entries().await
}

async fn record_empties(s: &Scenario) {
    eventually("the write-ahead record to be empty", WAIT, || async {
        entries(s).await.is_empty().then_some(())
    })
    .await;
}

/// Waits until `csi_provisioner_record_entries` shows `want`.
async fn record_gauge(port: u16, want: f64) {
    eventually("csi_provisioner_record_entries", WAIT, || async {
        let text = support::scrape(port).await?;
        (support::sample(&text, "csi_provisioner_record_entries", &[])? == want).then_some(())
    })
    .await;
}

async fn driver_empties(s: &Scenario) {
    eventually("the driver to hold no volume", WAIT, || async {
        s.driver_volumes().await.is_empty().then_some(())
    })
    .await;
}

/// A claim deleted while its CreateVolume timed out (the driver is slower than `--timeout`):
/// nothing holds the claim, so it is gone at once; the volume the call made is found with the
/// recorded request and deleted, and no PV is ever made for it.
#[tokio::test]
#[ignore = "needs the control plane: cargo xtask test"]
async fn a_claim_deleted_after_a_timed_out_call_is_cleaned_up_from_the_record() {
    let port = support::free_port();
    let http = format!("--http-endpoint=127.0.0.1:{port}");
    let mut s = start("rec-timeout", &[], &["-v=5", "--timeout=1s", &http]).await;
    let held = s.watch_for_our_finalizer();
    s.mock()
        .set_faults(json!({"CreateVolume": {"delay_ms": 3000}}));
    let class = s.class("imm", "Immediate", json!({})).await;
    let volume = s.claim_volume_name("data", &class, "1Gi").await;
    s.wait_create_volume_sent();
    eventually("the claim's entry in the record", WAIT, || async {
        entries(&s)
            .await
            .iter()
            .any(|e| e.volume == volume)
            .then_some(())
    })
    .await;
    record_gauge(port, 1.0).await;
    // The first call times out after 1 s; the claim goes while its volume may exist.
    s.wait_event("data", "ProvisioningFailed", "DeadlineExceeded")
        .await;
    s.delete_claim("data").await;
    wait_gone(&s.claims(), "data").await;
    // Let the driver finish the volume, then answer at once.
    tokio::time::sleep(Duration::from_secs(4)).await;
    s.mock().clear_faults();
    driver_empties(&s).await;
    s.assert_one_volume_made_and_deleted(&volume);
    record_empties(&s).await;
    record_gauge(port, 0.0).await;
    let pvs = s.volumes().list(&Default::default()).await.unwrap();
    assert!(
        pvs.items
            .iter()
            .all(|pv| pv.metadata.name.as_deref() != Some(volume.as_str())),
        "no PV for the deleted claim"
    );
    assert!(!held.load(Ordering::SeqCst), "our finalizer was on a claim");
}

/// A record write the API server refuses (an admission policy denies Lease updates) means no
/// CreateVolume, and the claim says why; once writes are allowed again it is provisioned.
#[tokio::test]
#[ignore = "needs the control plane: cargo xtask test"]
async fn a_refused_record_write_means_no_create_volume() {
    let s = start("rec-refused", &[], &["-v=5"]).await;
    let policy = format!("{}-deny-leases", s.ns);
    let leases = ("coordination.k8s.io", "leases");
    support::refuse_updates(&s, &policy, leases, "false", "test: no record writes").await;
    policy_in_force(&s).await;
    let class = s.class("imm", "Immediate", json!({})).await;
    s.claim("data", &class, "1Gi", json!({})).await;
    s.wait_event("data", "ProvisioningFailed", "write-ahead record")
        .await;
    assert_eq!(
        s.mock().calls_of("CreateVolume").len(),
        0,
        "CreateVolume was sent without its entry"
    );
    support::drop_validating_policy(&s, &policy).await;
    s.wait_bound("data").await;
    assert_eq!(s.mock().calls_of("CreateVolume").len(), 1);
    record_empties(&s).await;
}

/// Waits until a dry-run update of a Lease in the scenario's namespace is refused.
async fn policy_in_force(s: &Scenario) {
    let api: Api<Lease> = Api::namespaced(s.client.clone(), &s.ns);
    let probe: Lease = serde_json::from_value(json!({"metadata": {"name": "probe"}})).unwrap();
    let probe = api
        .create(&kube::api::PostParams::default(), &probe)
        .await
        .unwrap();
    let dry = kube::api::PostParams {
        dry_run: true,
        ..Default::default()
    };
    eventually("the policy in force", WAIT, || async {
        api.replace("probe", &dry, &probe)
            .await
            .is_err()
            .then_some(())
    })
    .await;
}

/// 200 claims at once: every one Bound with one CreateVolume, no finalizer of ours on any,
/// and the record written far fewer times than there are claims (entries and removals ride
/// on shared writes).
#[tokio::test]
#[ignore = "needs the control plane: cargo xtask test"]
async fn a_burst_of_200_claims_costs_far_fewer_record_writes_than_claims() {
    const N: usize = 200;
    let s = start("rec-burst", &[], &[]).await;
    let held = s.watch_for_our_finalizer();
    let leases: Api<Lease> = Api::namespaced(s.client.clone(), &s.ns);
    let writes = support::count_lease_writes(leases, &lease(&s));
    let class = s.class("imm", "Immediate", json!({})).await;
    let claims: Vec<_> = (0..N)
        .map(|i| {
            let (s, class) = (&s, &class);
            async move { s.claim(&format!("c{i}"), class, "1Gi", json!({})).await }
        })
        .collect();
    futures::future::join_all(claims).await;
    eventually(
        "every claim to be Bound",
        Duration::from_secs(240),
        || async {
            let list = s.claims().list(&Default::default()).await.ok()?;
            let bound = list
                .items
                .iter()
                .filter(|c| c.status.as_ref().and_then(|st| st.phase.as_deref()) == Some("Bound"))
                .count();
            (bound == N).then_some(())
        },
    )
    .await;
    record_empties(&s).await;
    assert_eq!(s.mock().calls_of("CreateVolume").len(), N, "one call each");
    let writes = writes.load(Ordering::SeqCst);
    eprintln!("{N} claims: {writes} record writes");
    assert!(writes > 0, "the record was never written");
    assert!(writes <= N / 4, "{writes} record writes for {N} claims");
    assert!(!held.load(Ordering::SeqCst), "our finalizer was on a claim");
}

/// Two replicas under leader election, the leader killed (-9) in the middle of CreateVolume
/// and the claim deleted: the other replica takes the lead, reads its predecessor's entry,
/// and deletes the volume that call made. The record changes hands with it.
#[tokio::test]
#[ignore = "needs the control plane: cargo xtask test"]
async fn the_next_leader_cleans_up_from_its_predecessors_record() {
    let ops = Ops::start("rec-failover").await;
    ops.mock
        .set_faults(json!({"CreateVolume": {"delay_ms": 4000}}));
    let ns_flag = format!("--leader-election-namespace={}", ops.ns);
    let hosts: Vec<String> = ["a", "b"].map(|r| format!("{}-{r}", ops.ns)).into();
    let mut replicas: Vec<testenv::Process> = hosts
        .iter()
        .enumerate()
        .map(|(i, host)| {
            let mut args = FAST_ELECTION.to_vec();
            args.extend([ns_flag.as_str(), "-v=5"]);
            ops.provisioner_on_host(&format!("csi-provisioner-{i}"), host, &args)
        })
        .collect();
    let claims: Api<PersistentVolumeClaim> = ops.claims();
    let held = support::watch_for_our_finalizer(claims.clone());
    let leases: Api<Lease> = Api::namespaced(ops.client.clone(), &ops.ns);
    let election = leader_election::lock_name(&ops.driver);
    let leader = eventually("a replica to lead", WAIT, || async {
        let holder = leases
            .get_opt(&election)
            .await
            .ok()??
            .spec?
            .holder_identity?;
        hosts.iter().position(|h| *h == holder)
    })
    .await;
    let class = ops.class("fo", json!({})).await;
    let claim = ops.claim("data", &class).await;
    let volume = format!("pvc-{}", claim.metadata.uid.unwrap());
    let record = record::lease_name(&ops.driver, None);
    let recorded_by = eventually("the claim's entry in the record", WAIT, || async {
        let l = leases.get_opt(&record).await.ok()??;
        let annotations = l.metadata.annotations.clone().unwrap_or_default();
        let (found, _) = record::entries(&annotations);
        found.iter().any(|e| e.volume == volume).then_some(())?;
        l.spec?.holder_identity
    })
    .await;
    // The entry is written just before the call goes out; the driver takes 4 s.
    tokio::time::sleep(Duration::from_secs(1)).await;
    replicas[leader].kill9();
    claims
        .delete("data", &kube::api::DeleteParams::default())
        .await
        .unwrap();
    wait_gone(&claims, "data").await;
    tokio::time::sleep(Duration::from_secs(5)).await;
    ops.mock.clear_faults();
    eventually("the driver to hold no volume", WAIT, || async {
        crate::support::volumes_of(&ops.mock)
            .await
            .is_empty()
            .then_some(())
    })
    .await;
    let made: Vec<String> = ops
        .mock
        .calls_of("CreateVolume")
        .iter()
        .filter(|c| c["request"]["name"] == volume.as_str())
        .filter_map(|c| {
            c["response"]["volume"]["volume_id"]
                .as_str()
                .map(String::from)
        })
        .collect();
    assert!(
        !made.is_empty() && made.iter().all(|id| *id == made[0]),
        "one volume: {made:?}"
    );
    let deleted = ops
        .mock
        .calls_of("DeleteVolume")
        .into_iter()
        .filter(|c| c.get("error").is_none() && c["request"]["volume_id"] == made[0].as_str())
        .count();
    assert_eq!(deleted, 1, "deleted once");
    let after = eventually("the record to be empty", WAIT, || async {
        let l = leases.get_opt(&record).await.ok()??;
        let annotations = l.metadata.annotations.clone().unwrap_or_default();
        record::entries(&annotations).0.is_empty().then_some(l)
    })
    .await;
    let holder = after.spec.and_then(|s| s.holder_identity);
    assert!(
        holder.is_some() && holder.as_ref() != Some(&recorded_by),
        "the new leader holds the record: {holder:?}, was {recorded_by}"
    );
    assert!(!held.load(Ordering::SeqCst), "our finalizer was on a claim");
    for r in &mut replicas {
        r.kill9();
    }
}

/// A claim deleted as soon as it is Bound: its PV is released and its volume deleted while the
/// entry's removal (after the PV save) may still wait for company. The entry leaves the record
/// before DeleteVolume is sent, so a kill -9 during that DeleteVolume leaves no entry, and the
/// restarted instance finishes the PV's deletion without a CreateVolume probe. (The first
/// chaos re-run saw the other order: the entry outlived the volume, and the next instance
/// made the volume again only to delete it.)
#[tokio::test]
#[ignore = "needs the control plane: cargo xtask test"]
async fn no_entry_outlives_a_volume_deleted_with_its_pv() {
    let mut s = start("rec-settle", &[], &["-v=5"]).await;
    let class = s
        .class("imm", "Immediate", json!({"reclaimPolicy": "Delete"}))
        .await;
    s.mock()
        .set_faults(json!({"DeleteVolume": {"delay_ms": 4000}}));
    s.claim("data", &class, "1Gi", json!({})).await;
    let bound = s.wait_bound("data").await;
    s.delete_claim("data").await;
    s.provisioner().wait_for_log(
        "\"GRPC call\" method=\"/csi.v1.Controller/DeleteVolume\"",
        Duration::from_secs(60),
    );
    s.provisioner().kill9();
    let uid = bound.metadata.uid.clone().unwrap();
    let left: Vec<String> = entries(&s).await.into_iter().map(|e| e.uid).collect();
    assert!(
        !left.contains(&uid),
        "the entry outlived the volume's deletion"
    );
    s.mock().clear_faults();
    s.provisioner().restart();
    let pv = bound.spec.unwrap().volume_name.unwrap();
    wait_gone(&s.volumes(), &pv).await;
    driver_empties(&s).await;
    assert_eq!(
        s.mock().calls_of("CreateVolume").len(),
        1,
        "no probe after the restart"
    );
}
