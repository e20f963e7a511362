//! Deleting volumes against the real control plane: reclaim policies, deletion secrets,
//! VolumeAttachments.

use crate::support::WAIT;
use crate::support::{
    CREATING, Scenario, create_pod, create_secret, eventually, holds_finalizer, wait_gone,
};
use crate::support::{free_port, sample, scrape};
use k8s_openapi::api::core::v1::{PersistentVolume, Pod};
use kube::Api;
use kube::api::{DeleteParams, Patch, PatchParams};
use provisioning::volume::decide::has_finalizer;
use serde_json::json;

const API_REQUESTS: &str = "csi_provisioner_api_requests_total";

/// Reclaim policy Delete: the PV carries our finalizer; DeleteVolume with the deletion secret,
/// then the PV goes. Retain: the PV never carries our finalizer, and the volume and PV stay.
/// A Delete PV switched to Retain loses our finalizer (one patch, no conflicts) and stays too.
#[tokio::test]
#[ignore = "needs the control plane: cargo xtask test"]
async fn deleting_claims_follows_the_reclaim_policy_with_deletion_secrets() {
    let port = free_port();
    let endpoint = format!("--http-endpoint=127.0.0.1:{port}");
    let s = Scenario::start("prov-reclaim", &[], &[&endpoint]).await;
    create_secret(&s, "creds", &[("token", "s3cr3t-value")]).await;
    let secret_params = json!({
        "csi.storage.k8s.io/provisioner-secret-name": "creds",
        "csi.storage.k8s.io/provisioner-secret-namespace": "${pvc.namespace}",
    });
    let delete = s
        .class(
            "delete",
            "Immediate",
            json!({"parameters": secret_params, "reclaimPolicy": "Delete"}),
        )
        .await;
    let retain = s
        .class("retain", "Immediate", json!({"reclaimPolicy": "Retain"}))
        .await;
    s.claim("gone", &delete, "1Gi", json!({})).await;
    s.claim("kept", &retain, "1Gi", json!({})).await;
    s.claim("switched", &delete, "1Gi", json!({})).await;
    let mut bound = Vec::new();
    for claim in ["gone", "kept", "switched"] {
        bound.push(s.wait_bound(claim).await.spec.unwrap().volume_name.unwrap());
    }
    let [gone_pv, kept_pv, switched_pv] = <[String; 3]>::try_from(bound).unwrap();
    let create = &s.create_calls(&gone_pv)[0];
    assert_eq!(
        create["request"]["secrets"]["token"], "s3cr3t-value",
        "CreateVolume got the provisioner secret"
    );
    let pv = s.volumes().get(&gone_pv).await.unwrap();
    assert_eq!(
        pv.metadata.annotations.as_ref().unwrap()["volume.kubernetes.io/provisioner-deletion-secret-name"],
        "creds"
    );
    assert!(has_finalizer(&pv), "a Delete PV carries our finalizer");
    let handle = pv.spec.unwrap().csi.unwrap().volume_handle;
    assert!(
        !has_finalizer(&s.volumes().get(&kept_pv).await.unwrap()),
        "a Retain PV is created without it"
    );
    let kept_handle = s.volume_handle(&kept_pv).await;

    let switched_handle = s.volume_handle(&switched_pv).await;
    let retain_now = json!({"spec": {"persistentVolumeReclaimPolicy": "Retain"}});
    s.volumes()
        .patch(
            &switched_pv,
            &PatchParams::default(),
            &Patch::Merge(&retain_now),
        )
        .await
        .unwrap();
    testenv::wait_for(
        &s.volumes(),
        &switched_pv,
        "lose our finalizer",
        |pv: &PersistentVolume| !has_finalizer(pv),
    )
    .await;
    assert_eq!(
        pv_requests(port).await,
        Some((1.0, 0.0)),
        "one finalizer patch (the switched PV), no re-reads"
    );

    for claim in ["gone", "kept", "switched"] {
        s.delete_claim(claim).await;
    }
    wait_gone(&s.volumes(), &gone_pv).await;
    let deletes = s.mock().calls_of("DeleteVolume");
    let delete_call = deletes
        .iter()
        .find(|c| c["request"]["volume_id"] == handle.as_str())
        .expect("DeleteVolume for the Delete PV");
    assert_eq!(
        delete_call["request"]["secrets"]["token"], "s3cr3t-value",
        "DeleteVolume got the deletion secret"
    );
    assert!(!s.driver_volumes().await.contains(&handle));

    for pv in [&kept_pv, &switched_pv] {
        let released =
            testenv::wait_for(&s.volumes(), pv, "be Released", |pv: &PersistentVolume| {
                pv.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Released")
            })
            .await;
        assert!(!has_finalizer(&released), "{pv}");
    }
    tokio::time::sleep(std::time::Duration::from_secs(3)).await;
    for pv in [&kept_pv, &switched_pv] {
        assert!(
            s.volumes().get_opt(pv).await.unwrap().is_some(),
            "Retain keeps the PV {pv}"
        );
    }
    assert_eq!(
        s.mock().calls_of("DeleteVolume").len(),
        1,
        "DeleteVolume for the Delete PV only"
    );
    let on_driver = s.driver_volumes().await;
    assert!(on_driver.contains(&kept_handle) && on_driver.contains(&switched_handle));
    // The Delete PV's deletion: one finalizer patch more, and still no re-reads.
    assert_eq!(pv_requests(port).await, Some((2.0, 0.0)));
}

/// A PV without the deletion-secret annotations (one written before they existed) takes the
/// secret from its class. As upstream, a secret that cannot be read any more does not keep the
/// volume: DeleteVolume goes ahead without secrets, once, and the PV goes.
#[tokio::test]
#[ignore = "needs the control plane: cargo xtask test"]
async fn a_class_secret_that_is_gone_does_not_block_deletion() {
    use k8s_openapi::api::core::v1::Secret;
    let (s, pv) = bound_with_class_secret("prov-gone-secret").await;
    let handle = s.volume_handle(&pv).await;
    let unannotated = json!({"metadata": {"annotations": {
        "volume.kubernetes.io/provisioner-deletion-secret-name": null,
        "volume.kubernetes.io/provisioner-deletion-secret-namespace": null,
    }}});
    s.volumes()
        .patch(&pv, &PatchParams::default(), &Patch::Merge(&unannotated))
        .await
        .unwrap();
    Api::<Secret>::namespaced(s.client.clone(), &s.ns)
        .delete("creds", &DeleteParams::default())
        .await
        .unwrap();

    s.delete_claim("data").await;
    wait_gone(&s.volumes(), &pv).await;
    let deletes = s.mock().calls_of("DeleteVolume");
    assert_eq!(deletes.len(), 1, "{deletes:?}");
    assert_eq!(deletes[0]["request"]["volume_id"], handle.as_str());
    let secrets = &deletes[0]["request"]["secrets"];
    assert!(
        secrets.is_null() || secrets.as_object().is_some_and(|m| m.is_empty()),
        "deleted without secrets: {secrets}"
    );
    assert!(!s.driver_volumes().await.contains(&handle));
}

/// A deletion secret that is there but not text (a binary value) holds the deletion: no
/// DeleteVolume without the credentials, a VolumeFailedDelete on the PV naming the secret and
/// key (never the value), and the deletion goes on with the secret once it is fixed. Before,
/// the whole secret was dropped and DeleteVolume sent with no secrets.
#[tokio::test]
#[ignore = "needs the control plane: cargo xtask test"]
async fn a_deletion_secret_that_is_not_text_holds_the_deletion_until_fixed() {
    use k8s_openapi::api::core::v1::Secret;
    let (s, pv) = bound_with_class_secret("prov-binary-secret").await;
    let secrets: Api<Secret> = Api::namespaced(s.client.clone(), &s.ns);
    // 0xff 0xfe: not UTF-8.
    let binary = json!({"data": {"token": "//4="}});
    secrets
        .patch("creds", &PatchParams::default(), &Patch::Merge(&binary))
        .await
        .unwrap();

    s.delete_claim("data").await;
    let event = volume_failed_delete(&s, &pv).await;
    let message = event.message.unwrap_or_default();
    assert!(
        message.contains(&format!("secret creds in namespace {}", s.ns))
            && message.contains("\"token\""),
        "{message}"
    );
    assert!(
        s.mock().calls_of("DeleteVolume").is_empty(),
        "DeleteVolume sent without the secret: {:?}",
        s.mock().calls_of("DeleteVolume")
    );
    assert!(s.volumes().get_opt(&pv).await.unwrap().is_some());

    let text = json!({"data": {"token": "Zml4ZWQ="}});
    secrets
        .patch("creds", &PatchParams::default(), &Patch::Merge(&text))
        .await
        .unwrap();
    wait_gone(&s.volumes(), &pv).await;
    let deletes = s.mock().calls_of("DeleteVolume");
    assert_eq!(deletes.len(), 1, "{deletes:?}");
    assert_eq!(deletes[0]["request"]["secrets"]["token"], "fixed");
}

/// A VolumeAttachment referencing the PV blocks DeleteVolume until it is gone. As upstream
/// v6.4.0 (library v13.1's `VolumeInUseError`), waiting for the detach is a Normal `VolumeDelete`
/// event on the PV, never a Warning `VolumeFailedDelete`, and no failed deletion is counted.
#[tokio::test]
#[ignore = "needs the control plane: cargo xtask test"]
async fn a_volume_attachment_blocks_deletion_until_it_is_gone() {
    use kube::api::{DeleteParams, PostParams};
    let port = free_port();
    let endpoint = format!("--http-endpoint=127.0.0.1:{port}");
    let s = Scenario::start("prov-va", &["--publish-unpublish"], &[&endpoint]).await;
    let class = s.class("imm", "Immediate", json!({})).await;
    // In a cluster the attachment exists long before the claim is deleted: made now, under the
    // name the PV will have, it reaches the provisioner's cache while the volume is created.
    let pv_name = s.claim_volume_name("data", &class, "1Gi").await;
    let va_name = format!("{}-va", s.ns);
    let va: k8s_openapi::api::storage::v1::VolumeAttachment = serde_json::from_value(json!({
        "apiVersion": "storage.k8s.io/v1", "kind": "VolumeAttachment",
        "metadata": {"name": va_name},
        "spec": {"attacher": s.driver, "nodeName": "node-x", "source": {"persistentVolumeName": pv_name}},
    }))
    .unwrap();
    let vas: kube::Api<k8s_openapi::api::storage::v1::VolumeAttachment> =
        kube::Api::all(s.client.clone());
    vas.create(&PostParams::default(), &va).await.unwrap();
    assert_eq!(s.bound_pv("data").await, pv_name);
    s.delete_claim("data").await;

    let event = pv_event(&s, &pv_name, "VolumeDelete").await;
    assert_eq!(event.type_.as_deref(), Some("Normal"));
    assert_eq!(
        event.message.as_deref(),
        Some(
            format!(
                "persistentvolume {pv_name} is still attached to node node-x, waiting for detach"
            )
            .as_str()
        )
    );
    // Let a few retries pass: none of them is a Warning or a counted failure.
    tokio::time::sleep(std::time::Duration::from_secs(3)).await;
    let reasons: Vec<(String, String)> = pv_events(&s, &pv_name)
        .await
        .into_iter()
        .map(|e| (e.type_.unwrap_or_default(), e.reason.unwrap_or_default()))
        .collect();
    assert!(
        reasons
            .iter()
            .all(|r| r == &("Normal".into(), "VolumeDelete".into())),
        "{reasons:?}"
    );
    let failed = scrape(port)
        .await
        .and_then(|m| sample(&m, "controller_persistentvolume_delete_failed_total", &[]));
    assert_eq!(
        failed.unwrap_or(0.0),
        0.0,
        "waiting is not a failed deletion"
    );
    assert!(
        s.mock().calls_of("DeleteVolume").is_empty(),
        "no DeleteVolume while attached"
    );
    vas.delete(&va_name, &DeleteParams::default())
        .await
        .unwrap();
    wait_gone(&s.volumes(), &pv_name).await;
    assert_eq!(s.mock().calls_of("DeleteVolume").len(), 1);
}

/// The events on PV `pv` (they land in `default`, as upstream's recorder puts them).
async fn pv_events(s: &Scenario, pv: &str) -> Vec<k8s_openapi::api::core::v1::Event> {
    Api::<k8s_openapi::api::core::v1::Event>::namespaced(s.client.clone(), "default")
        .list(&kube::api::ListParams::default().fields(&format!("involvedObject.name={pv}")))
        .await
        .unwrap()
        .items
}

/// Waits for an event of `reason` on PV `pv`.
async fn pv_event(s: &Scenario, pv: &str, reason: &str) -> k8s_openapi::api::core::v1::Event {
    eventually(&format!("{reason} on the PV"), WAIT, || async {
        pv_events(s, pv)
            .await
            .into_iter()
            .find(|e| e.reason.as_deref() == Some(reason))
    })
    .await
}

/// A scenario with claim "data" bound to a PV (returned) of a class with reclaim policy Delete
/// whose provisioner secret "creds" (token "s3cr3t-value") is also its deletion secret.
async fn bound_with_class_secret(prefix: &str) -> (Scenario, String) {
    let s = Scenario::start(prefix, &[], &[]).await;
    create_secret(&s, "creds", &[("token", "s3cr3t-value")]).await;
    let class = s
        .class(
            "delete",
            "Immediate",
            json!({"reclaimPolicy": "Delete", "parameters": {
                "csi.storage.k8s.io/provisioner-secret-name": "creds",
                "csi.storage.k8s.io/provisioner-secret-namespace": "${pvc.namespace}",
            }}),
        )
        .await;
    s.claim("data", &class, "1Gi", json!({})).await;
    let pv = s.bound_pv("data").await;
    (s, pv)
}

/// Waits for the first VolumeFailedDelete event on PV `pv` (PV events go to "default").
async fn volume_failed_delete(s: &Scenario, pv: &str) -> k8s_openapi::api::core::v1::Event {
    eventually("VolumeFailedDelete on the PV", WAIT, || async {
        let list =
            Api::<k8s_openapi::api::core::v1::Event>::namespaced(s.client.clone(), "default")
                .list(
                    &kube::api::ListParams::default().fields(&format!("involvedObject.name={pv}")),
                )
                .await
                .unwrap();
        list.items
            .into_iter()
            .find(|e| e.reason.as_deref() == Some("VolumeFailedDelete"))
    })
    .await
}

/// Our requests of two verbs on `resource` since the provisioner started.
async fn requests(port: u16, resource: &str, [a, b]: [&str; 2]) -> Option<(f64, f64)> {
    let m = scrape(port).await?;
    let count = |verb: &str| {
        sample(&m, API_REQUESTS, &[("verb", verb), ("resource", resource)]).unwrap_or(0.0)
    };
    Some((count(a), count(b)))
}

/// Our (patches, gets) of claims.
async fn claim_requests(port: u16) -> Option<(f64, f64)> {
    requests(port, "persistentvolumeclaims", ["patch", "get"]).await
}

/// Our (patches, gets) of PVs.
async fn pv_requests(port: u16) -> Option<(f64, f64)> {
    requests(port, "persistentvolumes", ["patch", "get"]).await
}

/// A deleted claim that still holds our finalizer (the provisioner stopped before releasing
/// it) and is still used by a pod: kube-controller-manager's pvc-protection keeps it, so we
/// leave our finalizer alone until that one is gone, then release with one write, never a
/// conflicting one followed by a re-read.
#[tokio::test]
#[ignore = "needs the control plane: cargo xtask test"]
async fn a_deleted_claim_is_released_after_pvc_protection_with_one_write() {
    let port = free_port();
    let endpoint = format!("--http-endpoint=127.0.0.1:{port}");
    let mut s = Scenario::start("prov-protect", &[], &[&endpoint]).await;
    let class = s
        .class("c", "Immediate", json!({"reclaimPolicy": "Delete"}))
        .await;
    s.claim("data", &class, "1Gi", json!({})).await;
    let pv = s.bound_pv("data").await;
    // Scheduled (no kubelet runs it): pvc-protection counts it as using the claim.
    let node = format!("{}-nowhere", s.ns);
    create_pod(&s, "user", "data", json!({"nodeName": node})).await;
    eventually(
        "our finalizer to be released after binding",
        WAIT,
        || async {
            let c = s.claims().get("data").await.ok()?;
            (!holds_finalizer(&c)).then_some(())
        },
    )
    .await;

    s.provisioner().stop();
    let finalizers =
        json!({"metadata": {"finalizers": ["kubernetes.io/pvc-protection", CREATING]}});
    s.claims()
        .patch("data", &PatchParams::default(), &Patch::Merge(&finalizers))
        .await
        .unwrap();
    s.delete_claim("data").await;
    s.provisioner().restart();
    // The restarted provisioner has synced the claim once its queue has taken it and drained.
    eventually(
        "the restarted provisioner to sync the claim",
        WAIT,
        || async {
            let m = scrape(port).await?;
            let adds = sample(&m, "workqueue_adds_total", &[("name", "claims")])?;
            let depth = sample(&m, "workqueue_depth", &[("name", "claims")])?;
            let busy = sample(
                &m,
                "workqueue_unfinished_work_seconds",
                &[("name", "claims")],
            )?;
            (adds >= 1.0 && depth == 0.0 && busy == 0.0).then_some(())
        },
    )
    .await;
    let held = s.claims().get("data").await.unwrap();
    assert!(
        holds_finalizer(&held),
        "released while pvc-protection still holds the claim: {:?}",
        held.metadata.finalizers
    );
    assert_eq!(claim_requests(port).await, Some((0.0, 0.0)));

    let pods: Api<Pod> = Api::namespaced(s.client.clone(), &s.ns);
    // No kubelet will confirm a graceful deletion.
    pods.delete("user", &DeleteParams::default().grace_period(0))
        .await
        .unwrap();
    wait_gone(&s.claims(), "data").await;
    wait_gone(&s.volumes(), &pv).await;
    assert_eq!(
        claim_requests(port).await,
        Some((1.0, 0.0)),
        "one claim patch and no re-read for the release"
    );
}

/// A PV without the deletion-secret annotations (made before they existed) takes its deletion
/// secret from its StorageClass again; as upstream, the legacy
/// `volume.beta.kubernetes.io/storage-class` annotation names that class before
/// `spec.storageClassName` does.
#[tokio::test]
#[ignore = "needs the control plane: cargo xtask test"]
async fn an_old_pv_takes_its_deletion_secret_from_the_class_its_beta_annotation_names() {
    let s = Scenario::start("prov-beta", &[], &[]).await;
    create_secret(&s, "creds", &[("token", "from-the-beta-class")]).await;
    let beta = s
        .class(
            "beta",
            "Immediate",
            json!({"parameters": {
                "csi.storage.k8s.io/provisioner-secret-name": "creds",
                "csi.storage.k8s.io/provisioner-secret-namespace": s.ns,
            }}),
        )
        .await;
    let plain = s.class("plain", "Immediate", json!({})).await;
    s.claim("data", &plain, "1Gi", json!({})).await;
    let pv_name = s.bound_pv("data").await;
    let old = json!({"metadata": {"annotations": {
        "volume.kubernetes.io/provisioner-deletion-secret-name": null,
        "volume.kubernetes.io/provisioner-deletion-secret-namespace": null,
        "volume.beta.kubernetes.io/storage-class": beta,
    }}});
    s.volumes()
        .patch(&pv_name, &PatchParams::default(), &Patch::Merge(&old))
        .await
        .unwrap();
    s.delete_claim("data").await;
    wait_gone(&s.volumes(), &pv_name).await;
    let deletes = s.mock().calls_of("DeleteVolume");
    assert_eq!(deletes.len(), 1, "{deletes:#?}");
    assert_eq!(
        deletes[0]["request"]["secrets"]["token"], "from-the-beta-class",
        "{deletes:#?}"
    );
}
