//! The endpoint served for real on loopback, spoken to with plain HTTP/1.1.

use std::net::SocketAddr;

use prometheus_client::metrics::counter::Counter;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::*;

struct Reply {
    status: u16,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
}

impl Reply {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
    fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }
}

async fn get(addr: SocketAddr, target: &str) -> Reply {
    let mut stream = tokio::net::TcpStream::connect(addr).await.expect("connect");
    let request = format!("GET {target} HTTP/1.1\r\nHost: test\r\nConnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).await.expect("send");
    let mut raw = Vec::new();
    stream.read_to_end(&mut raw).await.expect("read");
    let split = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .expect("end of headers");
    let head = String::from_utf8_lossy(&raw[..split]).into_owned();
    let mut lines = head.lines();
    let status = lines
        .next()
        .and_then(|l| l.split(' ').nth(1))
        .and_then(|s| s.parse().ok())
        .expect("status line");
    let headers = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(n, v)| (n.trim().to_string(), v.trim().to_string()))
        .collect();
    Reply {
        status,
        headers,
        body: raw[split + 4..].to_vec(),
    }
}

struct Server {
    addr: SocketAddr,
    shutdown: CancellationToken,
    task: tokio::task::JoinHandle<()>,
}

async fn start_server(pprof: bool, health: Option<Health>) -> Server {
    let mut registry = Registry::default();
    let counter: Counter = Counter::default();
    counter.inc_by(7);
    registry.register("test_things", "Things seen", counter);
    let shutdown = CancellationToken::new();
    let (addr, future) = start(
        HttpOptions {
            address: "127.0.0.1:0".into(),
            metrics_path: "/metrics".into(),
            enable_pprof: pprof,
            capacity: None,
        },
        Arc::new(registry),
        health,
        shutdown.clone(),
    )
    .await
    .expect("start");
    Server {
        addr,
        shutdown,
        task: tokio::spawn(future),
    }
}

impl Server {
    async fn stop(self) {
        self.shutdown.cancel();
        self.task.await.expect("server task");
    }
}

#[tokio::test]
async fn serves_metrics_and_404_elsewhere() {
    let server = start_server(false, None).await;
    let r = get(server.addr, "/metrics").await;
    assert_eq!(r.status, 200);
    assert_eq!(r.header("content-type"), Some(OPENMETRICS));
    let body = r.text();
    assert!(
        body.contains("# TYPE test_things counter\ntest_things_total 7\n"),
        "{body}"
    );
    assert!(body.ends_with("# EOF\n"), "{body}");
    for path in [
        "/",
        "/metrics/",
        "/healthz/leader-election",
        "/debug/pprof/",
    ] {
        let r = get(server.addr, path).await;
        assert_eq!(
            (r.status, r.text().as_str()),
            (404, "404 page not found\n"),
            "{path}"
        );
        assert_eq!(r.header("x-content-type-options"), Some("nosniff"));
    }
    server.stop().await;
}

#[tokio::test]
async fn leader_health_reports_ok_and_the_failure_reason() {
    let healthy: Health = Arc::new(|| Ok(()));
    let server = start_server(false, Some(healthy)).await;
    let r = get(server.addr, "/healthz/leader-election").await;
    assert_eq!((r.status, r.text().as_str()), (200, "ok"));
    server.stop().await;

    let stuck: Health = Arc::new(|| Err("failed election to renew leadership on lease x".into()));
    let server = start_server(false, Some(stuck)).await;
    let r = get(server.addr, "/healthz/leader-election").await;
    assert_eq!(r.status, 500);
    assert_eq!(
        r.text(),
        "internal server error: failed election to renew leadership on lease x\n"
    );
    server.stop().await;
}

/// The public entry point with a real elector's check (not yet running: healthy).
#[tokio::test]
async fn serve_wires_a_real_health_check() {
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").expect("probe port");
        l.local_addr().expect("addr").port()
    };
    let config = kube::Config::new("http://127.0.0.1:9".parse().expect("url"));
    let client = kube::Client::try_from(config).expect("client");
    let elector = leader_election::LeaderElector::new(
        client,
        leader_election::LeaderElectionConfig::new("lock".into(), "ns".into(), "me".into()),
    )
    .expect("elector");
    let shutdown = CancellationToken::new();
    let server = serve(
        HttpOptions {
            address: format!("127.0.0.1:{port}"),
            metrics_path: "/m".into(),
            enable_pprof: false,
            capacity: Some(crate::capacity_controller::CapacityMetrics::new()),
        },
        Arc::new(Registry::default()),
        Some(elector.health_check()),
        shutdown.clone(),
    )
    .await
    .expect("serve");
    let task = tokio::spawn(server);
    let addr: SocketAddr = ([127, 0, 0, 1], port).into();
    let r = get(addr, "/healthz/leader-election").await;
    assert_eq!((r.status, r.text().as_str()), (200, "ok"));
    assert_eq!(get(addr, "/m").await.text(), "# EOF\n");
    // With --enable-capacity but no running controller: said, not a blank page.
    let r = get(addr, "/capacity").await;
    assert_eq!(r.status, 503);
    assert!(r.text().contains("not the leader"), "{}", r.text());
    shutdown.cancel();
    task.await.expect("server ends after shutdown");
}

#[tokio::test]
async fn pprof_routes_when_enabled() {
    let server = start_server(true, None).await;
    let index = get(server.addr, "/debug/pprof/").await;
    assert_eq!(index.status, 200);
    assert!(
        index.text().contains("/debug/pprof/profile"),
        "{}",
        index.text()
    );
    // Go's mux sends the subtree's root without its slash there, keeping the query.
    let moved = get(server.addr, "/debug/pprof?debug=1").await;
    assert_eq!(moved.status, 301);
    assert_eq!(moved.header("location"), Some("/debug/pprof/?debug=1"));
    assert_eq!(
        moved.text(),
        "<a href=\"/debug/pprof/?debug=1\">Moved Permanently</a>.\n\n"
    );
    let cmdline = get(server.addr, "/debug/pprof/cmdline").await;
    assert_eq!(cmdline.status, 200);
    let args: Vec<String> = std::env::args().collect();
    assert_eq!(cmdline.text(), args.join("\0"));
    let heap = get(server.addr, "/debug/pprof/heap").await;
    assert_eq!(heap.status, 404);
    assert!(
        heap.text().starts_with("Unknown profile: heap."),
        "{}",
        heap.text()
    );
    let profile = {
        let _one_profiler = pprof::PROFILER_TEST_LOCK.lock().await;
        get(server.addr, "/debug/pprof/profile?seconds=1").await
    };
    assert_eq!(profile.status, 200, "{}", profile.text());
    assert_eq!(
        profile.header("content-type"),
        Some("application/octet-stream")
    );
    assert_eq!(
        profile.header("content-disposition"),
        Some("attachment; filename=\"profile\"")
    );
    let decoded = <profile::Profile as prost::Message>::decode(profile.body.as_slice())
        .expect("a pprof protobuf");
    assert_eq!(decoded.period, 10_000_000);
    server.stop().await;
}

#[tokio::test]
async fn bad_addresses_fail_start_up_naming_the_value() {
    for address in ["8080", ":http", "[::1", ":99999", "[1:2::zz]:80"] {
        let err = serve(
            HttpOptions {
                address: address.into(),
                metrics_path: "/metrics".into(),
                enable_pprof: false,
                capacity: None,
            },
            Arc::new(Registry::default()),
            None,
            CancellationToken::new(),
        )
        .await
        .err()
        .unwrap_or_else(|| panic!("{address} was accepted"));
        let message = err.to_string();
        assert!(
            message.starts_with(&format!("cannot listen on {address}: ")),
            "{message}"
        );
    }
}
