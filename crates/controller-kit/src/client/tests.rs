//! Throttling under tokio's paused clock with a stand-in inner service, and the wiring into
//! a real kube client against a minimal local HTTP responder (headers only; the real
//! apiserver test is in `tests/client.rs`).

use std::convert::Infallible;
use std::time::Duration;

use futures::future::join_all;
use http::{Request, Response, StatusCode};
use prometheus_client::encoding::text::encode;
use prometheus_client::registry::Registry;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::time::Instant;
use tower::{Layer, Service, ServiceExt, service_fn};

use super::*;

#[test]
fn effective_limits_follow_client_go_defaults() {
    let cases = [
        (5.0, 10, Some((5.0, 10))),
        (0.0, 0, Some((5.0, 10))), // both defaulted
        (0.0, 3, Some((5.0, 3))),  // only QPS defaulted
        (1.0, 0, Some((1.0, 10))), // only burst defaulted
        (0.5, 1, Some((0.5, 1))),  // fractional QPS
        (-1.0, 10, None),          // negative disables throttling
        (f32::INFINITY, 10, None), // nothing to wait for
    ];
    for (qps, burst, want) in cases {
        assert_eq!(
            ClientLimits { qps, burst }.effective(),
            want,
            "qps {qps} burst {burst}"
        );
    }
}

/// Issues all `uris` at t=0 and returns, per request, when the inner service saw it (ms).
async fn issue(layer: ThrottleLayer, uris: &[&str]) -> Vec<u128> {
    let start = Instant::now();
    let mut svc = layer.layer(service_fn(move |_req: Request<()>| async move {
        Ok::<_, Infallible>(Response::new(start.elapsed().as_millis()))
    }));
    let mut pending = Vec::new();
    for uri in uris {
        let req = Request::get(*uri).body(()).unwrap();
        pending.push(svc.ready().await.unwrap().call(req));
    }
    join_all(pending)
        .await
        .into_iter()
        .map(|r| r.unwrap().into_body())
        .collect()
}

#[tokio::test(start_paused = true)]
async fn burst_passes_then_requests_are_spaced_one_over_qps() {
    let layer = ThrottleLayer::new(Some((5.0, 3)), "h", None);
    let seen = issue(layer, &["/api/v1/pods"; 6]).await;
    assert_eq!(seen, [0, 0, 0, 200, 400, 600]);
}

/// Background requests yield to queued normal ones and use only free tokens: normal work is
/// never delayed by them, and together they stay within the budget.
#[tokio::test(start_paused = true)]
async fn the_background_lane_waits_for_free_tokens() {
    let normal = ThrottleLayer::new(Some((5.0, 2)), "h", None);
    let background = normal.background();
    let start = Instant::now();
    let stamp = move |_req: Request<()>| async move {
        Ok::<_, Infallible>(Response::new(start.elapsed().as_millis()))
    };
    let mut bg = background.layer(service_fn(stamp));
    let mut fg = normal.layer(service_fn(stamp));
    // A background request arrives first, then four normal ones.
    let early_bg = tokio::spawn(
        bg.ready()
            .await
            .unwrap()
            .call(Request::get("/api/v1/events").body(()).unwrap()),
    );
    tokio::task::yield_now().await;
    let mut fgs = Vec::new();
    for _ in 0..4 {
        fgs.push(
            fg.ready()
                .await
                .unwrap()
                .call(Request::get("/api/v1/pods").body(()).unwrap()),
        );
    }
    let fg_seen: Vec<u128> = join_all(fgs)
        .await
        .into_iter()
        .map(|r| r.unwrap().into_body())
        .collect();
    let bg_seen = early_bg.await.unwrap().unwrap().into_body();
    // The first background request takes a free burst token at once; the normal ones then
    // use the remaining token and credit.
    assert_eq!(bg_seen, 0);
    assert_eq!(fg_seen, [0, 200, 400, 600]);
    // While normal work is queued on credit, a new background request waits behind all of it.
    let fgs: Vec<_> = (0..2)
        .map(|_| fg.call(Request::get("/api/v1/pods").body(()).unwrap()))
        .collect();
    let late_bg = tokio::spawn(bg.call(Request::get("/api/v1/events").body(()).unwrap()));
    let fg_seen: Vec<u128> = join_all(fgs)
        .await
        .into_iter()
        .map(|r| r.unwrap().into_body())
        .collect();
    let late = late_bg.await.unwrap().unwrap().into_body();
    assert_eq!(fg_seen, [800, 1000]);
    assert!(
        late >= 1200,
        "background request at {late} ms overtook queued normal work"
    );
}

/// Two pieces of work, each three requests in a row, issued while the bucket is empty: the
/// work that began first gets all its tokens first (client-go's issue order would interleave
/// them and finish both late). Requests without a priority rank by when they were issued.
#[tokio::test(start_paused = true)]
async fn older_work_is_served_first() {
    let layer = ThrottleLayer::new(Some((5.0, 1)), "h", None);
    tokio::time::advance(Duration::from_millis(100)).await;
    let start = Instant::now();
    let svc = layer.layer(service_fn(move |_req: Request<()>| async move {
        Ok::<_, Infallible>(Response::new(start.elapsed().as_millis()))
    }));
    // Empty the bucket.
    let mut first = svc.clone();
    first
        .ready()
        .await
        .unwrap()
        .call(Request::get("/api/v1/pods").body(()).unwrap())
        .await
        .unwrap();
    let work = |began: Instant, svc: Throttle<_>| {
        tokio::spawn(with_priority(began, async move {
            let mut seen = Vec::new();
            for _ in 0..3 {
                let mut svc = svc.clone();
                let req = Request::get("/api/v1/pods").body(()).unwrap();
                seen.push(
                    svc.ready()
                        .await
                        .unwrap()
                        .call(req)
                        .await
                        .unwrap()
                        .into_body(),
                );
            }
            seen
        }))
    };
    // The younger work is sent first; the older one overtakes it from its first request.
    let younger = work(start - Duration::from_millis(20), svc.clone());
    tokio::task::yield_now().await;
    let older = work(start - Duration::from_millis(50), svc.clone());
    let mut plain = svc.clone();
    let unranked = tokio::spawn(
        plain
            .ready()
            .await
            .unwrap()
            .call(Request::get("/api/v1/nodes").body(()).unwrap()),
    );
    assert_eq!(older.await.unwrap(), [200, 400, 600]);
    assert_eq!(younger.await.unwrap(), [800, 1000, 1200]);
    // Issued before most of their requests, but after both began: it comes last.
    assert_eq!(unranked.await.unwrap().unwrap().into_body(), 1400);
}

#[tokio::test(start_paused = true)]
async fn fractional_qps_spaces_requests_seconds_apart() {
    let layer = ThrottleLayer::new(Some((0.5, 1)), "h", None);
    let seen = issue(layer, &["/api/v1/pods"; 3]).await;
    assert_eq!(seen, [0, 2000, 4000]);
}

#[tokio::test(start_paused = true)]
async fn watches_are_never_delayed_and_take_no_tokens() {
    let layer = ThrottleLayer::new(Some((1.0, 1)), "h", None);
    let seen = issue(
        layer,
        &[
            "/api/v1/pods",
            "/api/v1/pods?watch=true",
            "/api/v1/pods",
            "/api/v1/namespaces/a/pods?watch=1&resourceVersion=7",
            "/api/v1/pods?watch=true",
        ],
    )
    .await;
    assert_eq!(seen, [0, 0, 1000, 0, 0]);
}

#[tokio::test(start_paused = true)]
async fn tokens_refill_while_idle() {
    let layer = ThrottleLayer::new(Some((1.0, 2)), "h", None);
    assert_eq!(issue(layer.clone(), &["/api/v1/pods"; 2]).await, [0, 0]);
    tokio::time::advance(Duration::from_secs(10)).await;
    // Refilled to the burst of 2, not 10.
    assert_eq!(issue(layer, &["/api/v1/pods"; 3]).await, [0, 0, 1000]);
}

/// A turn of the budget waits in line like a normal request and takes its token; the prepaid
/// request that follows does not wait again, and the normal requests after it see the token
/// gone.
#[tokio::test(start_paused = true)]
async fn a_turn_takes_the_token_its_prepaid_request_then_skips() {
    let layer = ThrottleLayer::new(Some((5.0, 1)), "h", None);
    let budget = layer.budget();
    let start = Instant::now();
    // The burst token goes to a normal request; the turn waits one refill for the next.
    assert_eq!(issue(layer.clone(), &["/api/v1/pods"]).await, [0]);
    budget.turn().await;
    assert_eq!(start.elapsed().as_millis(), 200);
    let seen = issue(layer.prepaid(), &["/api/v1/pods"; 3]).await;
    assert_eq!(seen, [0, 0, 0], "prepaid requests never wait");
    // The turn's token is spent: the next normal request waits for the refill after it.
    let seen = issue(layer, &["/api/v1/pods"]).await;
    assert_eq!(start.elapsed().as_millis(), 400, "{seen:?}");
    Budget::unlimited().turn().await;
    assert_eq!(
        start.elapsed().as_millis(),
        400,
        "an unlimited turn comes at once"
    );
}

#[tokio::test(start_paused = true)]
async fn unlimited_never_waits() {
    let layer = ThrottleLayer::new(None, "h", None);
    let seen = issue(layer, &["/api/v1/pods"; 50]).await;
    assert!(seen.iter().all(|&t| t == 0));
}

fn scrape(registry: &Registry) -> String {
    let mut out = String::new();
    encode(&mut out, registry).unwrap();
    out
}

#[tokio::test(start_paused = true)]
async fn requests_are_counted_by_code_host_method_and_by_verb_resource() {
    let metrics = RequestMetrics::new();
    let mut registry = Registry::default();
    metrics.register(&mut registry);
    let layer = ThrottleLayer::new(None, "10.0.0.1:6443", Some(metrics));
    let mut svc = layer.layer(service_fn(|req: Request<()>| async move {
        match req.uri().path() {
            "/api/v1/namespaces/ns/events" => Ok(Response::builder()
                .status(StatusCode::CREATED)
                .body(())
                .unwrap()),
            "/api/v1/persistentvolumes/missing" => Ok(Response::builder()
                .status(StatusCode::NOT_FOUND)
                .body(())
                .unwrap()),
            "/api/v1/persistentvolumes" => Ok(Response::new(())),
            _ => Err("connection refused"),
        }
    }));
    for (method, uri) in [
        ("POST", "/api/v1/namespaces/ns/events"),
        ("GET", "/api/v1/persistentvolumes/missing"),
        ("GET", "/api/v1/persistentvolumes"),
        ("GET", "/api/v1/persistentvolumes"),
        ("GET", "/api/v1/persistentvolumes?watch=true"),
        ("DELETE", "/api/v1/nodes/n"),
    ] {
        let req = Request::builder().method(method).uri(uri).body(()).unwrap();
        let _ = svc.ready().await.unwrap().call(req).await;
    }
    let text = scrape(&registry);
    for line in [
        r#"rest_client_requests_total{code="201",host="10.0.0.1:6443",method="POST"} 1"#,
        r#"rest_client_requests_total{code="404",host="10.0.0.1:6443",method="GET"} 1"#,
        r#"rest_client_requests_total{code="200",host="10.0.0.1:6443",method="GET"} 3"#,
        r#"rest_client_requests_total{code="<error>",host="10.0.0.1:6443",method="DELETE"} 1"#,
        r#"csi_provisioner_api_requests_total{verb="create",resource="events"} 1"#,
        r#"csi_provisioner_api_requests_total{verb="get",resource="persistentvolumes"} 1"#,
        r#"csi_provisioner_api_requests_total{verb="list",resource="persistentvolumes"} 2"#,
        r#"csi_provisioner_api_requests_total{verb="watch",resource="persistentvolumes"} 1"#,
        r#"csi_provisioner_api_requests_total{verb="delete",resource="nodes"} 1"#,
    ] {
        assert!(
            text.lines().any(|l| l == line),
            "missing {line:?} in\n{text}"
        );
    }
}

#[tokio::test]
async fn invalid_user_agent_is_rejected() {
    let config = kube::Config::new("http://127.0.0.1:1".parse().unwrap());
    let limits = ClientLimits {
        qps: 5.0,
        burst: 10,
    };
    let Err(err) = build_client(config, limits, "bad\nagent", None) else {
        panic!("a user agent with a newline was accepted");
    };
    assert!(matches!(err, ClientError::UserAgent { .. }), "{err}");
}

/// Answers one HTTP request with an empty NamespaceList and returns the request head.
async fn respond_once(listener: tokio::net::TcpListener) -> String {
    let (mut sock, _) = listener.accept().await.unwrap();
    let mut head = Vec::new();
    let mut buf = [0u8; 1024];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") {
        let n = sock.read(&mut buf).await.unwrap();
        assert!(n > 0, "client closed early");
        head.extend_from_slice(&buf[..n]);
    }
    let body = r#"{"kind":"NamespaceList","apiVersion":"v1","metadata":{"resourceVersion":"1"},"items":[]}"#;
    let response = format!(
        "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    );
    sock.write_all(response.as_bytes()).await.unwrap();
    String::from_utf8_lossy(&head).into_owned()
}

#[tokio::test]
async fn built_client_sends_the_user_agent_and_counts_requests() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let server = tokio::spawn(respond_once(listener));

    let metrics = RequestMetrics::new();
    let mut registry = Registry::default();
    metrics.register(&mut registry);
    let config = kube::Config::new(format!("http://{addr}").parse().unwrap());
    let limits = ClientLimits {
        qps: 5.0,
        burst: 10,
    };
    let client = build_client(config, limits, "csi-provisioner/test", Some(metrics)).unwrap();
    let api: kube::Api<k8s_openapi::api::core::v1::Namespace> = kube::Api::all(client);
    let list = api.list(&Default::default()).await.unwrap();
    assert!(list.items.is_empty());

    let head = server.await.unwrap().to_ascii_lowercase();
    assert!(
        head.contains("user-agent: csi-provisioner/test\r\n"),
        "{head}"
    );
    let text = scrape(&registry);
    let want = format!(r#"rest_client_requests_total{{code="200",host="{addr}",method="GET"}} 1"#);
    assert!(
        text.lines().any(|l| l == want),
        "missing {want:?} in\n{text}"
    );
}

#[test]
fn ranking_an_attempt_does_not_copy_its_state() {
    // An attempt's state is tens of KiB and every claim worker runs one: the ranking must
    // wrap it, not hold it twice.
    let work = async {
        let state = [0u8; 16 * 1024];
        tokio::task::yield_now().await;
        std::hint::black_box(&state);
    };
    let alone = std::mem::size_of_val(&work);
    let ranked = with_priority(Instant::now(), work);
    let size = std::mem::size_of_val(&ranked);
    assert!(
        size < alone + 256,
        "{size} bytes around an attempt of {alone}"
    );
}
