//! The CSI client against an in-process driver on a temporary unix socket.

mod support;

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use csi::{
    AddressError, CallMetrics, Client, ConnectError, ConnectOptions, DriverCapabilities, v1,
};
use prometheus_client::registry::Registry;
use support::{DRIVER_NAME, FakeDriver, LogCapture, serve, serve_black_hole};
use tonic::Code;

const SECRET_VALUE: &str = "s3cr3t-value-7f1e";

fn options(timeout: Duration) -> ConnectOptions {
    ConnectOptions {
        timeout,
        connect_timeout: Some(Duration::from_secs(5)),
        ..Default::default()
    }
}

fn scrape(metrics: &CallMetrics) -> String {
    let mut registry = Registry::default();
    metrics.register(&mut registry);
    let mut out = String::new();
    prometheus_client::encoding::text::encode(&mut out, &registry).unwrap();
    out
}

#[tokio::test]
async fn connects_with_each_unix_address_form() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("csi.sock");
    let server = serve(&path, Arc::default());
    let shown = path.display().to_string();
    for address in [
        shown.clone(),
        format!("unix://{shown}"),
        format!("unix:{shown}"),
    ] {
        let client = Client::connect(&address, options(Duration::from_secs(10)))
            .await
            .unwrap();
        assert_eq!(client.address(), format!("unix://{shown}"));
        let info = client
            .get_plugin_info(v1::GetPluginInfoRequest {})
            .await
            .unwrap();
        assert_eq!(info.name, DRIVER_NAME, "via {address}");
    }
    server.stop().await;
}

#[tokio::test]
async fn rejects_addresses_that_are_not_unix_sockets() {
    for address in ["localhost:10000", "dns:///driver:10000", ""] {
        let err = Client::connect(address, ConnectOptions::default())
            .await
            .unwrap_err();
        assert!(matches!(err, ConnectError::Address(_)), "{address}: {err}");
    }
    let err = Client::connect("tcp.example:1", ConnectOptions::default())
        .await
        .unwrap_err();
    assert!(matches!(
        err,
        ConnectError::Address(AddressError::NotUnix(_))
    ));
}

#[tokio::test]
async fn waits_until_the_socket_accepts() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("late.sock");
    let driver = Arc::new(FakeDriver::default());
    let late = {
        let (path, driver) = (path.clone(), Arc::clone(&driver));
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(300)).await;
            serve(&path, driver)
        })
    };
    let client = Client::connect(path.to_str().unwrap(), options(Duration::from_secs(10)))
        .await
        .expect("connects once the driver listens");
    client.probe(v1::ProbeRequest {}).await.unwrap();
    late.await.unwrap().stop().await;
}

#[tokio::test(start_paused = true)]
async fn gives_up_after_the_connect_timeout_and_logs_while_waiting() {
    let logs = LogCapture::default();
    let _guard = logs.install();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("nobody.sock");
    let opts = ConnectOptions {
        connect_timeout: Some(Duration::from_secs(25)),
        ..Default::default()
    };
    let err = Client::connect(path.to_str().unwrap(), opts)
        .await
        .unwrap_err();
    match err {
        ConnectError::Timeout {
            address, waited, ..
        } => {
            assert_eq!(address, format!("unix://{}", path.display()));
            assert_eq!(waited, Duration::from_secs(25));
        }
        other => panic!("want a timeout, got {other}"),
    }
    // Logged at 10 s and 20 s of (virtual) waiting.
    assert_eq!(
        logs.text().matches("Still connecting").count(),
        2,
        "{}",
        logs.text()
    );
}

#[tokio::test]
async fn a_slow_call_fails_locally_with_deadline_exceeded() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("hole.sock");
    let hole = serve_black_hole(&path);
    let metrics = CallMetrics::new();
    let opts = ConnectOptions {
        metrics: Some(metrics.clone()),
        ..options(Duration::from_millis(200))
    };
    let client = Client::connect(path.to_str().unwrap(), opts).await.unwrap();
    let status = client
        .create_volume(v1::CreateVolumeRequest::default())
        .await
        .unwrap_err();
    assert_eq!(status.code(), Code::DeadlineExceeded);
    assert_eq!(status.message(), "context deadline exceeded");
    let out = scrape(&metrics);
    assert!(
        out.contains(
            r#"grpc_status_code="DeadlineExceeded",method_name="/csi.v1.Controller/CreateVolume""#
        ),
        "{out}"
    );
    hole.abort();
}

#[tokio::test]
async fn every_call_carries_the_timeout_header() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("csi.sock");
    let driver = Arc::new(FakeDriver::default());
    let server = serve(&path, Arc::clone(&driver));
    let client = Client::connect(path.to_str().unwrap(), options(Duration::from_secs(7)))
        .await
        .unwrap();
    client.probe(v1::ProbeRequest {}).await.unwrap();
    client
        .get_capacity(v1::GetCapacityRequest::default())
        .await
        .unwrap();
    let headers = driver.timeout_headers.lock().unwrap().clone();
    assert_eq!(headers.len(), 2);
    for header in headers {
        // grpc-timeout is "<digits><unit>"; whatever the unit, it must say 7 s.
        let header = header.expect("grpc-timeout header sent");
        let (digits, unit) = header.split_at(header.len() - 1);
        let value: u64 = digits.parse().unwrap();
        let nanos = match unit {
            "H" => value * 3_600_000_000_000,
            "M" => value * 60_000_000_000,
            "S" => value * 1_000_000_000,
            "m" => value * 1_000_000,
            "u" => value * 1_000,
            "n" => value,
            other => panic!("bad unit {other}"),
        };
        assert_eq!(nanos, 7_000_000_000, "{header}");
    }
    server.stop().await;
}

#[tokio::test]
async fn probe_until_ready_waits_through_not_ready_answers() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("csi.sock");
    let driver = Arc::new(FakeDriver::default());
    driver.not_ready_probes.store(2, Ordering::SeqCst);
    let server = serve(&path, Arc::clone(&driver));
    let client = Client::connect(path.to_str().unwrap(), options(Duration::from_secs(10)))
        .await
        .unwrap();
    client
        .probe_until_ready(Duration::from_millis(10))
        .await
        .unwrap();
    assert_eq!(
        driver.probes.load(Ordering::SeqCst),
        3,
        "two not-ready answers, then ready"
    );

    // Any error other than a timeout ends the wait, as upstream's ProbeForever.
    *driver.probe_error.lock().unwrap() = Some(Code::Internal);
    let status = client
        .probe_until_ready(Duration::from_millis(10))
        .await
        .unwrap_err();
    assert_eq!(status.code(), Code::Internal);
    assert_eq!(driver.probes.load(Ordering::SeqCst), 4);
    server.stop().await;
}

#[tokio::test]
async fn capabilities_fold_both_lists() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("csi.sock");
    let server = serve(&path, Arc::default());
    let client = Client::connect(path.to_str().unwrap(), options(Duration::from_secs(10)))
        .await
        .unwrap();
    let caps = client.capabilities().await.unwrap();
    let want = DriverCapabilities {
        controller_service: true,
        volume_accessibility_constraints: true,
        create_delete_volume: true,
        get_capacity: true,
        ..Default::default()
    };
    assert_eq!(caps, want);
    server.stop().await;
}

#[tokio::test]
async fn connection_loss_fires_the_callback_once_per_loss() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("csi.sock");
    let driver = Arc::new(FakeDriver::default());
    let lost = Arc::new(AtomicUsize::new(0));
    let opts = ConnectOptions {
        on_connection_lost: Some({
            let lost = Arc::clone(&lost);
            Arc::new(move || {
                lost.fetch_add(1, Ordering::SeqCst);
            })
        }),
        ..options(Duration::from_secs(2))
    };
    let server = serve(&path, Arc::clone(&driver));
    let client = Client::connect(path.to_str().unwrap(), opts).await.unwrap();
    client.probe(v1::ProbeRequest {}).await.unwrap();
    assert_eq!(
        lost.load(Ordering::SeqCst),
        0,
        "the initial dial is not a loss"
    );

    server.stop().await;
    // The loss shows when the channel re-dials, on one of the next calls.
    let mut failures = 0;
    while lost.load(Ordering::SeqCst) == 0 && failures < 50 {
        client.probe(v1::ProbeRequest {}).await.unwrap_err();
        failures += 1;
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(lost.load(Ordering::SeqCst), 1);
    // Failed re-dials while the driver is still gone do not report again; they are Unavailable.
    for _ in 0..3 {
        let status = client.probe(v1::ProbeRequest {}).await.unwrap_err();
        assert_eq!(status.code(), Code::Unavailable, "{status:?}");
    }
    assert_eq!(lost.load(Ordering::SeqCst), 1);

    // The driver comes back: calls work again, and a second loss is reported again.
    let server = serve(&path, Arc::clone(&driver));
    let mut attempts = 0;
    while client.probe(v1::ProbeRequest {}).await.is_err() {
        attempts += 1;
        assert!(attempts < 50, "client never reconnected");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    server.stop().await;
    let mut attempts = 0;
    while lost.load(Ordering::SeqCst) == 1 {
        let _ = client.probe(v1::ProbeRequest {}).await;
        attempts += 1;
        assert!(attempts < 50, "second loss never reported");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(lost.load(Ordering::SeqCst), 2);
}

/// grpc-go notices a closed connection without a call; so must we (an idle provisioner would
/// otherwise never exit when its driver dies). Dropping the client is not a loss.
#[tokio::test]
async fn connection_loss_is_noticed_without_a_call_and_not_on_drop() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("csi.sock");
    let driver = Arc::new(FakeDriver::default());
    let lost = Arc::new(AtomicUsize::new(0));
    let opts = || ConnectOptions {
        on_connection_lost: Some({
            let lost = Arc::clone(&lost);
            Arc::new(move || {
                lost.fetch_add(1, Ordering::SeqCst);
            })
        }),
        ..options(Duration::from_secs(2))
    };
    let server = serve(&path, Arc::clone(&driver));
    let client = Client::connect(path.to_str().unwrap(), opts())
        .await
        .unwrap();
    client.probe(v1::ProbeRequest {}).await.unwrap();
    server.stop().await;
    let mut waited = 0;
    while lost.load(Ordering::SeqCst) == 0 {
        waited += 1;
        assert!(waited < 200, "the loss was not noticed without a call");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(lost.load(Ordering::SeqCst), 1);
    drop(client);

    let server = serve(&path, Arc::clone(&driver));
    let client = Client::connect(path.to_str().unwrap(), opts())
        .await
        .unwrap();
    client.probe(v1::ProbeRequest {}).await.unwrap();
    drop(client);
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(
        lost.load(Ordering::SeqCst),
        1,
        "dropping the client is not a lost connection"
    );
    server.stop().await;
}

#[tokio::test]
async fn metrics_record_driver_method_and_go_status_code() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("csi.sock");
    let driver = Arc::new(FakeDriver::default());
    *driver.delete_error.lock().unwrap() = Some(Code::FailedPrecondition);
    let server = serve(&path, Arc::clone(&driver));
    let metrics = CallMetrics::new();
    let opts = ConnectOptions {
        metrics: Some(metrics.clone()),
        ..options(Duration::from_secs(10))
    };
    let client = Client::connect(path.to_str().unwrap(), opts).await.unwrap();

    let info = client
        .get_plugin_info(v1::GetPluginInfoRequest {})
        .await
        .unwrap();
    client.set_driver_name(&info.name);
    client
        .create_volume(v1::CreateVolumeRequest {
            name: "pvc-1".into(),
            ..Default::default()
        })
        .await
        .unwrap();
    let status = client
        .delete_volume(v1::DeleteVolumeRequest {
            volume_id: "v".into(),
            secrets: HashMap::new(),
        })
        .await
        .unwrap_err();
    assert_eq!(status.code(), Code::FailedPrecondition);
    let unimplemented = client
        .list_volumes(v1::ListVolumesRequest::default())
        .await
        .unwrap_err();
    assert_eq!(unimplemented.code(), Code::Unimplemented);

    let out = scrape(&metrics);
    let count = |driver: &str, code: &str, method: &str| {
        format!(
            r#"csi_sidecar_operations_seconds_count{{driver_name="{driver}",grpc_status_code="{code}",method_name="{method}"}} 1"#
        )
    };
    for line in [
        count("unknown-driver", "OK", "/csi.v1.Identity/GetPluginInfo"),
        count(DRIVER_NAME, "OK", "/csi.v1.Controller/CreateVolume"),
        count(
            DRIVER_NAME,
            "FailedPrecondition",
            "/csi.v1.Controller/DeleteVolume",
        ),
        count(
            DRIVER_NAME,
            "Unimplemented",
            "/csi.v1.Controller/ListVolumes",
        ),
    ] {
        assert!(out.lines().any(|l| l == line), "missing {line} in:\n{out}");
    }
    server.stop().await;
}

#[tokio::test]
async fn v5_logs_show_sanitised_messages_and_no_secret() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("csi.sock");
    let driver = Arc::new(FakeDriver::default());
    *driver.delete_error.lock().unwrap() = Some(Code::NotFound);
    let server = serve(&path, Arc::clone(&driver));
    let client = Client::connect(path.to_str().unwrap(), options(Duration::from_secs(10)))
        .await
        .unwrap();
    let logs = LogCapture::default();
    let _guard = logs.install();
    let secrets = HashMap::from([("password".to_string(), SECRET_VALUE.to_string())]);

    klog::set_verbosity(5);
    let request = v1::CreateVolumeRequest {
        name: "pvc-1".into(),
        capacity_range: Some(v1::CapacityRange {
            required_bytes: 1024,
            limit_bytes: 0,
        }),
        secrets: secrets.clone(),
        ..Default::default()
    };
    client.create_volume(request.clone()).await.unwrap();
    client
        .delete_volume(v1::DeleteVolumeRequest {
            volume_id: "vol-9".into(),
            secrets: secrets.clone(),
        })
        .await
        .unwrap_err();
    let text = logs.text();
    for want in [
        "GRPC call",
        "method=\"/csi.v1.Controller/CreateVolume\"",
        r#"request={"capacity_range":{"required_bytes":1024},"name":"pvc-1","secrets":"***stripped***"}"#,
        r#"response={"volume":{"capacity_bytes":1024,"volume_id":"id-pvc-1"}}"#,
        r#"request={"secrets":"***stripped***","volume_id":"vol-9"}"#,
        "err=rpc error: code = NotFound desc = volume vol-9 is busy",
    ] {
        assert!(text.contains(want), "missing {want:?} in:\n{text}");
    }
    assert!(!text.contains(SECRET_VALUE), "secret leaked:\n{text}");

    // Below v5 the calls are not logged at all.
    logs.clear();
    klog::set_verbosity(4);
    client.create_volume(request).await.unwrap();
    klog::set_verbosity(0);
    assert!(!logs.text().contains("GRPC"), "{}", logs.text());
    server.stop().await;
}
