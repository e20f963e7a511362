//! The claim controller's per-claim memory is bounded by live claims: 2,000 claims provisioned
//! and deleted leave nothing remembered (`csi_provisioner_claims_remembered` back to zero).

use crate::support;
use crate::support::eventually;
use std::collections::HashSet;
use std::time::Duration;

use crate::support::Scenario;
use futures::StreamExt;
use serde_json::json;

const CLAIMS: usize = 2_000;

#[tokio::test]
#[ignore = "needs the control plane: cargo xtask test"]
async fn claim_memory_returns_to_zero_after_2000_claims() {
    let port = support::free_port();
    let endpoint = format!("--http-endpoint=127.0.0.1:{port}");
    // 2,000 claims at 300 requests a second: on an API server of their own, as when this test
    // had its test binary's control plane to itself, so that tests running beside it in this
    // process neither slow it down nor are slowed down by it.
    let cp = testenv::ControlPlane::start(Default::default())
        .await
        .unwrap_or_else(|e| panic!("a control plane of the memory test's own: {e}"));
    let mut s = Scenario::new_on(&cp, "prov-memory").await;
    s.start_driver::<&str>(&[]);
    s.start_provisioner(&[
        endpoint.as_str(),
        "--kube-api-qps=300",
        "--kube-api-burst=600",
        "--worker-threads=50",
    ]);
    let class = s.class("imm", "Immediate", json!({})).await;
    // Claims are remembered only while in flight (from their first attempt until their PV is
    // saved), and the provisioner keeps up with the creation of the claims: sample the gauge
    // all through the burst, from before the first claim.
    let sampling = tokio_util::sync::CancellationToken::new();
    let sampler = tokio::spawn({
        let stop = sampling.clone();
        async move {
            let mut most = 0.0_f64;
            while !stop.is_cancelled() {
                if let Some(now) = remembered(port).await {
                    most = most.max(now);
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            most
        }
    });
    futures::stream::iter(0..CLAIMS)
        .for_each_concurrent(32, |i| {
            let (s, class) = (&s, &class);
            async move {
                s.claim(&format!("c{i}"), class, "1Mi", json!({})).await;
            }
        })
        .await;

    // Every claim gets its volume.
    let created = eventually("every volume created", Duration::from_secs(600), || {
        let s = &s;
        async move {
            let names: HashSet<String> = s
                .mock()
                .calls_of("CreateVolume")
                .iter()
                .filter(|c| c["response"]["volume"].is_object())
                .map(|c| c["request"]["name"].as_str().unwrap().to_string())
                .collect();
            (names.len() == CLAIMS).then_some(names.len())
        }
    })
    .await;
    sampling.cancel();
    let most = sampler.await.expect("sampler");
    assert_eq!(created, CLAIMS);

    s.claims()
        .delete_collection(&Default::default(), &Default::default())
        .await
        .unwrap();
    s.wait_no_claims(Duration::from_secs(900)).await;
    eventually("every volume deleted", Duration::from_secs(900), || async {
        let deleted = s.mock().calls_of("DeleteVolume").len();
        (deleted >= CLAIMS).then_some(())
    })
    .await;
    eventually("no claim remembered", Duration::from_secs(60), || async {
        let now = remembered(port).await?;
        (now == 0.0).then_some(())
    })
    .await;
    let successful = s.mock().succeeded("DeleteVolume");
    assert_eq!(successful, CLAIMS, "one DeleteVolume per created volume");
    assert!(s.driver_volumes().await.is_empty());
    assert!(
        most > 0.0,
        "the gauge counts claims in flight (saw at most {most})"
    );
}

async fn remembered(port: u16) -> Option<f64> {
    let text = support::scrape(port).await?;
    support::sample(&text, "csi_provisioner_claims_remembered", &[])
}
