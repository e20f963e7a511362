//! Operating the provisioner as a deployment would: metrics after real work, leader election
//! between two replicas, secrets kept out of the logs at any verbosity, and command-line
//! errors. Each control-plane test has its own namespace, driver name and classes.

use std::process::Command;
use std::time::{Duration, Instant};

use crate::support::ops::{FAST_ELECTION, Ops};
use crate::support::{eventually, free_port, http_get, sample, scrape};
use k8s_openapi::api::coordination::v1::Lease;
use kube::Api;
use serde_json::json;

const PROVISIONED: &str = "controller_persistentvolumeclaim_provision_total";
const PROVISION_FAILED: &str = "controller_persistentvolumeclaim_provision_failed_total";
const DELETED: &str = "controller_persistentvolume_delete_total";
const MASTER: &str = "leader_election_master_status";
const SYNC_ERRORS: &str = "csi_provisioner_sync_errors_total";

/// Three claims provisioned, one failing, one deleted: the scrape counts exactly that. The
/// labels are upstream's: `class` from the claim's spec, `source` the kind of its data source
/// (a clone the mock driver cannot make fails under `source="PersistentVolumeClaim"`).
#[tokio::test]
#[ignore = "needs the control plane: cargo xtask test"]
async fn metrics_count_what_happened() {
    let ops = Ops::start("ops-metrics").await;
    let port = free_port();
    let endpoint = format!("--http-endpoint=127.0.0.1:{port}");
    let provisioner = ops.provisioner("csi-provisioner", &[&endpoint, "-v=3"]);
    let fast = ops.class("fast", json!({})).await;
    let bad = ops
        .class("bad", json!({"csi.storage.k8s.io/bogus": "x"}))
        .await;
    for name in ["a", "b", "c"] {
        ops.claim(name, &fast).await;
    }
    let mut volumes = Vec::new();
    for name in ["a", "b", "c"] {
        volumes.push(ops.wait_bound(name).await);
    }
    ops.claim("broken", &bad).await;
    let mut clone = ops.claim_object("copy", &fast);
    clone.spec.as_mut().unwrap().data_source = Some(
        serde_json::from_value(json!({"kind": "PersistentVolumeClaim", "name": "b"})).unwrap(),
    );
    ops.claims()
        .create(&kube::api::PostParams::default(), &clone)
        .await
        .expect("clone claim");
    // Ours for the API server (kube-controller-manager names our driver on claims whose class
    // it knows; here we do), but its class does not exist: a typed ClassMissing error.
    let orphan = format!("{}-no-such-class", ops.ns);
    let mut claimless = ops.claim_object("orphan", &orphan);
    claimless.metadata.annotations = Some(
        [(
            "volume.kubernetes.io/storage-provisioner".to_string(),
            ops.driver.clone(),
        )]
        .into(),
    );
    ops.claims()
        .create(&kube::api::PostParams::default(), &claimless)
        .await
        .expect("orphan claim");
    eventually(
        "the missing class to be counted",
        Duration::from_secs(60),
        move || async move {
            let m = scrape(port).await?;
            let labels = [("kind", "class_missing"), ("name", "claims")];
            (sample(&m, SYNC_ERRORS, &labels)? >= 1.0).then_some(())
        },
    )
    .await;
    let (bad_ref, fast_ref, orphan_ref) = (bad.as_str(), fast.as_str(), orphan.as_str());
    eventually(
        "the failed provisioning to be counted",
        Duration::from_secs(60),
        move || async move {
            let m = scrape(port).await?;
            let clone = [("class", fast_ref), ("source", "PersistentVolumeClaim")];
            (sample(&m, PROVISION_FAILED, &[("class", bad_ref)])? >= 1.0
                && sample(&m, PROVISION_FAILED, &clone)? >= 1.0
                && sample(&m, PROVISION_FAILED, &[("class", orphan_ref)])? >= 1.0)
                .then_some(())
        },
    )
    .await;
    ops.delete_and_wait_gone("a", &volumes[0]).await;
    // Poll by hand to say what the counter showed when it never got to 1.
    let deadline = Instant::now() + Duration::from_secs(60);
    let m = loop {
        let m = scrape(port).await.unwrap_or_default();
        let deleted = sample(&m, DELETED, &[("class", &fast)]);
        if deleted == Some(1.0) {
            break m;
        }
        assert!(
            Instant::now() < deadline,
            "the deletion was not counted within 60s: {DELETED}{{class={fast:?}}} = {deleted:?} \
             (the PV is gone, DeleteVolume calls: {}); provisioner log in {}",
            ops.mock.calls_of("DeleteVolume").len(),
            provisioner.log_path().display()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    };

    let create_ok = [
        ("driver_name", ops.driver.as_str()),
        ("method_name", "/csi.v1.Controller/CreateVolume"),
        ("grpc_status_code", "OK"),
    ];
    // Exactly the driver's answers: the clone, the bad class and the orphan never reach it.
    let answered = ops
        .mock
        .calls_of("CreateVolume")
        .iter()
        .filter(|c| c.get("error").is_none())
        .count();
    assert_eq!(answered, 3, "the driver's successful CreateVolume calls");
    let creates = sample(&m, "csi_sidecar_operations_seconds_count", &create_ok);
    assert_eq!(creates, Some(3.0), "CreateVolume OK count in:\n{m}");
    assert_eq!(
        sample(&m, PROVISIONED, &[("class", &fast), ("source", "")]),
        Some(3.0),
        "{m}"
    );
    assert_eq!(sample(&m, PROVISIONED, &[("class", &bad)]), None, "{m}");
    assert!(sample(&m, PROVISION_FAILED, &[("class", &bad), ("source", "")]) >= Some(1.0));
    assert_eq!(
        sample(&m, PROVISION_FAILED, &[("class", &fast), ("source", "")]),
        None,
        "{m}"
    );
    assert_eq!(
        sample(
            &m,
            PROVISIONED,
            &[("class", &fast), ("source", "PersistentVolumeClaim")]
        ),
        None,
        "{m}"
    );
    assert_eq!(sample(&m, DELETED, &[("class", &fast)]), Some(1.0), "{m}");
    // The driver has no topology and capacity tracking is off: nothing reads Nodes or
    // CSINodes, so they are not watched (as upstream).
    for resource in ["nodes", "csinodes"] {
        assert_eq!(
            sample(
                &m,
                "csi_provisioner_api_requests_total",
                &[("resource", resource)]
            ),
            None,
            "{resource}: {m}"
        );
    }
    // Only the orphan's failures were retried with an error: a failed CreateVolume holds the
    // claim instead (an event and a hold, no error), and nothing else failed.
    let errors: Vec<&str> = m.lines().filter(|l| l.starts_with(SYNC_ERRORS)).collect();
    assert!(
        !errors.is_empty()
            && errors
                .iter()
                .all(|l| l.contains(r#"kind="class_missing""#) && l.contains(r#"name="claims""#)),
        "{errors:#?}"
    );
    let log = std::fs::read_to_string(provisioner.log_path()).expect("provisioner log");
    assert!(
        log.lines().any(|l| l.contains("Will retry")
            && l.contains("class_missing")
            && l.contains(&orphan)),
        "no 'Will retry' line with kind class_missing naming {orphan:?} in {}",
        provisioner.log_path().display()
    );
    for (name, labels) in [
        (
            "controller_persistentvolumeclaim_provision_duration_seconds_count",
            vec![("class", fast.as_str())],
        ),
        (
            "controller_persistentvolume_delete_duration_seconds_count",
            vec![("class", fast.as_str())],
        ),
        ("workqueue_adds_total", vec![("name", "claims")]),
        ("workqueue_adds_total", vec![("name", "volumes")]),
        ("workqueue_depth", vec![("name", "claims")]),
        ("process_cpu_seconds_total", vec![]),
        ("process_resident_memory_bytes", vec![]),
        ("process_virtual_memory_bytes", vec![]),
        ("process_open_fds", vec![]),
        ("process_max_fds", vec![]),
        ("process_start_time_seconds", vec![]),
    ] {
        assert!(
            sample(&m, name, &labels).is_some(),
            "no {name}{labels:?} in:\n{m}"
        );
    }
    // No leader election here: no health route, no election metrics.
    let health = http_get(port, "/healthz/leader-election")
        .await
        .expect("answer");
    assert_eq!(health.0, 404);
    assert_eq!(sample(&m, MASTER, &[]), None);
    let (status, content_type, _) = http_get(port, "/metrics").await.expect("answer");
    assert_eq!(status, 200);
    assert!(
        content_type.starts_with("application/openmetrics-text; version=1.0.0"),
        "{content_type}"
    );
    drop(provisioner);
}

/// The provision duration times the successful attempt alone, as upstream's: two failed
/// attempts and the backoff waits after them (six seconds) stay out of it.
#[tokio::test]
#[ignore = "needs the control plane: cargo xtask test"]
async fn the_provision_duration_times_the_successful_attempt_alone() {
    let ops = Ops::start("ops-duration").await;
    // Two final errors, then a call that takes 1.5s and succeeds.
    ops.mock.set_faults(json!({"CreateVolume": [
        {"code": "Internal", "message": "test: not yet", "times": 2},
        {"delay_ms": 1500, "times": 1},
    ]}));
    let port = free_port();
    let endpoint = format!("--http-endpoint=127.0.0.1:{port}");
    let _provisioner = ops.provisioner(
        "csi-provisioner",
        &[&endpoint, "--retry-interval-start=2s", "-v=3"],
    );
    let class = ops.class("slow", json!({})).await;
    let began = Instant::now();
    ops.claim("data", &class).await;
    ops.wait_bound("data").await;
    let whole = began.elapsed().as_secs_f64();
    let creates = ops.mock.calls_of("CreateVolume");
    assert_eq!(creates.len(), 3, "two failures, one success: {creates:?}");
    assert_eq!(ops.mock.succeeded("CreateVolume"), 1);
    let labels = [("class", class.as_str()), ("source", "")];
    let class_ref = class.as_str();
    let (count, sum) = eventually(
        "the success to be timed",
        Duration::from_secs(30),
        move || async move {
            let m = scrape(port).await?;
            let labels = [("class", class_ref), ("source", "")];
            let count = sample(
                &m,
                "controller_persistentvolumeclaim_provision_duration_seconds_count",
                &labels,
            )?;
            let sum = sample(
                &m,
                "controller_persistentvolumeclaim_provision_duration_seconds_sum",
                &labels,
            )?;
            Some((count, sum))
        },
    )
    .await;
    assert_eq!(count, 1.0, "one successful attempt timed ({labels:?})");
    assert!(sum >= 1.5, "the successful call alone took 1.5s: {sum}s");
    // Timed from the first attempt it would be nearly all of the time to Bound, which holds
    // 2s and 4s of backoff.
    assert!(whole >= 7.5, "the backoff ran: {whole}s to Bound");
    assert!(
        sum < whole - 5.0,
        "failed attempts and waits counted: {sum}s of {whole}s"
    );
}

struct Replica {
    host: String,
    port: u16,
    process: testenv::Process,
}

/// Two replicas on one driver: only the Lease holder provisions; after a SIGKILL of the holder
/// the other takes over and provisions, and no volume is created twice.
#[tokio::test]
#[ignore = "needs the control plane: cargo xtask test"]
async fn only_the_leader_provisions_and_a_standby_takes_over() {
    let ops = Ops::start("ops-le").await;
    let ns_flag = format!("--leader-election-namespace={}", ops.ns);
    let mut replicas: Vec<Replica> = ["a", "b"]
        .iter()
        .map(|suffix| {
            let host = format!("{}-{suffix}", ops.ns);
            let port = free_port();
            // b serves metrics through the older flag, which has no health route upstream.
            let flag = if *suffix == "a" {
                "--http-endpoint"
            } else {
                "--metrics-address"
            };
            let endpoint = format!("{flag}=127.0.0.1:{port}");
            let mut args = FAST_ELECTION.to_vec();
            args.extend([ns_flag.as_str(), endpoint.as_str(), "-v=3"]);
            let process =
                ops.provisioner_on_host(&format!("csi-provisioner-{suffix}"), &host, &args);
            Replica {
                host,
                port,
                process,
            }
        })
        .collect();
    let leases: Api<Lease> = Api::namespaced(ops.client.clone(), &ops.ns);
    let lease_name = leader_election::lock_name(&ops.driver);
    let hosts: Vec<String> = replicas.iter().map(|r| r.host.clone()).collect();
    let holder = |leases: &Api<Lease>, lease_name: &str| {
        let (leases, lease_name) = (leases.clone(), lease_name.to_string());
        async move {
            let lease = leases.get_opt(&lease_name).await.ok()??;
            lease.spec?.holder_identity
        }
    };
    let first_holder = eventually(
        "a replica to hold the Lease",
        Duration::from_secs(60),
        || async {
            holder(&leases, &lease_name)
                .await
                .filter(|h| hosts.contains(h))
        },
    )
    .await;
    let leader = hosts
        .iter()
        .position(|h| *h == first_holder)
        .expect("known host");
    let standby = 1 - leader;
    eprintln!(
        "leader {} (port {}), standby {} (port {})",
        replicas[leader].host,
        replicas[leader].port,
        replicas[standby].host,
        replicas[standby].port
    );

    // a serves health (b, with --metrics-address, does not, as upstream); only the leader
    // says it is master.
    for (r, want) in replicas
        .iter()
        .zip([(200, "ok"), (404, "404 page not found\n")])
    {
        let (status, _, body) = eventually("the health endpoint", Duration::from_secs(60), || {
            http_get(r.port, "/healthz/leader-election")
        })
        .await;
        assert_eq!((status, body.as_str()), want, "{}", r.host);
    }
    let leader_port = replicas[leader].port;
    eventually("the leader to report master_status 1", Duration::from_secs(30), move || async move {
        (sample(&scrape(leader_port).await?, MASTER, &[])? == 1.0).then_some(())
    })
    .await;
    let standby_metrics = scrape(replicas[standby].port)
        .await
        .expect("standby metrics");
    assert_ne!(
        sample(&standby_metrics, MASTER, &[]),
        Some(1.0),
        "{standby_metrics}"
    );
    // The standby runs no queue, yet exports the queues' series at zero, as upstream's
    // replicas do from start-up.
    for name in ["claims", "volumes"] {
        assert_eq!(
            sample(&standby_metrics, "workqueue_adds_total", &[("name", name)]),
            Some(0.0),
            "{standby_metrics}"
        );
    }

    let class = ops.class("le", json!({})).await;
    ops.claim("first", &class).await;
    let first = ops.wait_bound("first").await;
    let class_ref = class.as_str();
    eventually(
        "the leader to count the provisioning",
        Duration::from_secs(30),
        move || async move {
            (sample(
                &scrape(leader_port).await?,
                PROVISIONED,
                &[("class", class_ref)],
            )? == 1.0)
                .then_some(())
        },
    )
    .await;
    let standby_metrics = scrape(replicas[standby].port)
        .await
        .expect("standby metrics");
    assert_eq!(
        sample(&standby_metrics, PROVISIONED, &[("class", &class)]),
        None,
        "the standby provisioned:\n{standby_metrics}"
    );

    replicas[leader].process.kill9();
    let killed = Instant::now();
    let standby_host = replicas[standby].host.clone();
    eventually(
        "the standby to take the Lease",
        Duration::from_secs(30),
        || async { (holder(&leases, &lease_name).await? == standby_host).then_some(()) },
    )
    .await;
    // The lease (6 s) plus a retry (1 s, with jitter): the defaults (15 s, 5 s) would mostly
    // take longer, so an unwired flag shows here.
    let takeover = killed.elapsed();
    assert!(
        takeover < Duration::from_secs(12),
        "takeover {:.1}s after SIGKILL (lease duration 6s)",
        takeover.as_secs_f64()
    );
    ops.claim("second", &class).await;
    let second = ops.wait_bound("second").await;
    let standby_port = replicas[standby].port;
    let m = eventually(
        "the new leader to count its provisioning",
        Duration::from_secs(30),
        move || async move {
            let m = scrape(standby_port).await?;
            (sample(&m, PROVISIONED, &[("class", class_ref)])? == 1.0).then_some(m)
        },
    )
    .await;
    assert_eq!(sample(&m, MASTER, &[]), Some(1.0), "{m}");

    let creates = ops.successful_creates();
    assert_eq!(creates.get(&first), Some(&1), "{creates:?}");
    assert_eq!(creates.get(&second), Some(&1), "{creates:?}");
    assert!(
        creates.values().all(|n| *n == 1),
        "a volume was created twice: {creates:?}"
    );
}

/// As client-go's `LeaseLock.RecordEvent` under csi-lib-utils: acquiring the Lease records one
/// Normal `LeaderElection` event "<identity> became leader" on the Lease, from component
/// `<driver name>/<hostname>`: csi-lib-utils joins the lock name before it sanitises it
/// (issue 13, item 10).
#[tokio::test]
#[ignore = "needs the control plane: cargo xtask test"]
async fn becoming_leader_records_an_event_on_the_lease() {
    use k8s_openapi::api::core::v1::Event;
    use kube::api::ListParams;
    let ops = Ops::start("ops-le-ev").await;
    let host = format!("{}-a", ops.ns);
    let ns_flag = format!("--leader-election-namespace={}", ops.ns);
    // Renewals every second: an event per renewal, not per acquisition, would show below.
    let _replica = ops.provisioner_on_host(
        "csi-provisioner",
        &host,
        &[
            "--leader-election",
            ns_flag.as_str(),
            "--leader-election-retry-period=1s",
        ],
    );
    let lease_name = leader_election::lock_name(&ops.driver);
    let leases: Api<Lease> = Api::namespaced(ops.client.clone(), &ops.ns);
    let lease = eventually(
        "our replica to hold the Lease",
        Duration::from_secs(60),
        || async {
            let lease = leases.get_opt(&lease_name).await.ok()??;
            let holder = lease.spec.as_ref()?.holder_identity.as_deref()?;
            (holder == host).then_some(lease)
        },
    )
    .await;
    let events: Api<Event> = Api::namespaced(ops.client.clone(), &ops.ns);
    let fields = format!("involvedObject.name={lease_name}");
    eventually(
        "the LeaderElection event",
        Duration::from_secs(30),
        || async {
            let list = events
                .list(&ListParams::default().fields(&fields))
                .await
                .ok()?;
            (!list.items.is_empty()).then_some(())
        },
    )
    .await;
    // Three renewals later, still the one event, recorded once.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let ours = events
        .list(&ListParams::default().fields(&fields))
        .await
        .unwrap()
        .items;
    assert_eq!(ours.len(), 1, "one event: {ours:#?}");
    let e = &ours[0];
    assert_eq!(
        (
            e.type_.as_deref(),
            e.reason.as_deref(),
            e.message.as_deref(),
            e.count,
        ),
        (
            Some("Normal"),
            Some("LeaderElection"),
            Some(format!("{host} became leader").as_str()),
            Some(1),
        )
    );
    let component = format!("{}/{host}", ops.driver);
    assert_eq!(
        e.source.as_ref().and_then(|s| s.component.as_deref()),
        Some(component.as_str())
    );
    assert_eq!(
        e.reporting_component.as_deref(),
        Some(component.as_str()),
        "client-go repeats the source as the reporting controller"
    );
    let involved = &e.involved_object;
    assert_eq!(
        (
            involved.kind.as_deref(),
            involved.api_version.as_deref(),
            involved.namespace.as_deref(),
            involved.uid.as_ref(),
        ),
        (
            Some("Lease"),
            Some("coordination.k8s.io/v1"),
            Some(ops.ns.as_str()),
            lease.metadata.uid.as_ref(),
        )
    );
}

/// Secrets of every kind a class can name, provisioned and deleted at `-v=10`: no value shows
/// up in the provisioner's output, while the sanitised requests do.
async fn secrets_stay_out_of_the_log(prefix: &str, format: &str) {
    let ops = Ops::start(prefix).await;
    let token = uuid::Uuid::new_v4().simple().to_string();
    let values: Vec<(&str, String)> = ["prov", "publish", "stage", "expand"]
        .iter()
        .map(|kind| (*kind, format!("S3cr3t-{kind}-{token}")))
        .collect();
    for (kind, value) in &values {
        ops.secret(
            kind,
            &[("password", value), ("user", &format!("user-{value}"))],
        )
        .await;
    }
    let ns = ops.ns.as_str();
    let class = ops
        .class(
            "sec",
            json!({
                "csi.storage.k8s.io/provisioner-secret-name": "prov",
                "csi.storage.k8s.io/provisioner-secret-namespace": ns,
                "csi.storage.k8s.io/controller-publish-secret-name": "publish",
                "csi.storage.k8s.io/controller-publish-secret-namespace": ns,
                "csi.storage.k8s.io/node-stage-secret-name": "stage",
                "csi.storage.k8s.io/node-stage-secret-namespace": ns,
                "csi.storage.k8s.io/controller-expand-secret-name": "expand",
                "csi.storage.k8s.io/controller-expand-secret-namespace": ns,
            }),
        )
        .await;
    let logging = format!("--logging-format={format}");
    let provisioner = ops.provisioner("csi-provisioner", &["-v=10", &logging]);
    ops.claim("data", &class).await;
    let volume = ops.wait_bound("data").await;
    ops.delete_and_wait_gone("data", &volume).await;

    // The driver did receive the provisioner secret: there was something to leak.
    let prov_value = &values[0].1;
    for method in ["CreateVolume", "DeleteVolume"] {
        let calls = ops.mock.calls_of(method);
        assert!(
            calls
                .iter()
                .any(|c| c["request"]["secrets"]["password"] == json!(prov_value)),
            "{method} without the secret: {calls:#?}"
        );
    }
    let log = provisioner.log();
    let path = provisioner.log_path().display();
    for (kind, value) in &values {
        assert!(
            !log.contains(value.as_str()),
            "the {kind} secret value is in {path}"
        );
    }
    let stripped: Vec<&str> = log
        .lines()
        .filter(|l| l.contains(csi::sanitize::STRIPPED))
        .collect();
    assert!(
        !stripped.is_empty(),
        "no sanitised CSI request in {path}: was -v=10 honoured?"
    );
    if format == "json" {
        for line in &stripped {
            let parsed: serde_json::Value = serde_json::from_str(line)
                .unwrap_or_else(|e| panic!("not a JSON log line ({e}): {line}"));
            assert!(parsed.get("msg").is_some(), "{line}");
        }
    }
}

#[tokio::test]
#[ignore = "needs the control plane: cargo xtask test"]
async fn secrets_stay_out_of_the_text_log() {
    secrets_stay_out_of_the_log("ops-sec-text", "text").await;
}

#[tokio::test]
#[ignore = "needs the control plane: cargo xtask test"]
async fn secrets_stay_out_of_the_json_log() {
    secrets_stay_out_of_the_log("ops-sec-json", "json").await;
}

/// Runs without a cluster: the binary rejects a bad value before connecting to anything.
#[test]
fn bad_flag_value_exits_2_naming_the_flag_and_version_exits_0() {
    let binary = env!("CARGO_BIN_EXE_csi-provisioner");
    let out = Command::new(binary)
        .arg("--timeout=abc")
        .output()
        .expect("run csi-provisioner");
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    let lines: Vec<&str> = stderr.lines().collect();
    assert_eq!(lines.len(), 1, "one line: {stderr}");
    assert!(lines[0].contains("--timeout"), "{stderr}");
    assert!(lines[0].contains("abc"), "{stderr}");
    assert!(out.stdout.is_empty(), "{out:?}");

    let out = Command::new(binary)
        .arg("--version")
        .output()
        .expect("run csi-provisioner");
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.trim_end().ends_with(csi_provisioner::VERSION),
        "{stdout}"
    );
    assert_eq!(stdout.lines().count(), 1, "{stdout}");
}

/// SIGTERM while the caches wait for an API server that does not answer: the process exits at
/// once with status 0, as upstream's (which installs no handler and dies), instead of waiting
/// out the five-minute cache-sync limit.
#[tokio::test]
#[ignore = "needs the control plane: cargo xtask test"]
async fn sigterm_ends_the_wait_for_caches_that_cannot_sync() {
    let ops = Ops::start("ops-nosync").await;
    let kubeconfig = ops.dir.join("nowhere.kubeconfig");
    let server = format!("https://127.0.0.1:{}", free_port());
    std::fs::write(
        &kubeconfig,
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: {server}\n    insecure-skip-tls-verify: true\ncontexts:\n- name: c\n  context:\n    cluster: c\n    user: u\nusers:\n- name: u\n  user:\n    token: t\ncurrent-context: c\n"
        ),
    )
    .unwrap();
    let mut provisioner = testenv::Provisioner::start(
        &ops.dir,
        "csi-provisioner",
        &kubeconfig,
        &ops.mock.socket,
        &["-v=4"],
        &[],
    );
    eventually(
        "the provisioner to wait for its caches",
        Duration::from_secs(30),
        || async {
            let log = provisioner.log();
            log.contains("Failed to watch").then_some(())
        },
    )
    .await;
    assert!(provisioner.is_running(), "{}", provisioner.log());
    let pid = provisioner.process().pid().to_string();
    assert!(
        Command::new("kill")
            .args(["-TERM", &pid])
            .status()
            .unwrap()
            .success()
    );
    let status = wait_exit(&mut provisioner, 10, "after SIGTERM").await;
    assert_eq!(status.code(), Some(0), "{}", provisioner.log());
    // Upstream's first line names the version.
    let log = provisioner.log();
    let first = log
        .lines()
        .find(|l| !l.starts_with("---"))
        .unwrap_or_default();
    assert!(first.contains(r#""Version" version=""#), "{first}");
}

/// Capacity tracking with an owner that cannot be found: every replica stops at start-up, a
/// standby too (upstream looks the owner up before leader election), instead of looking
/// healthy until it wins the Lease.
#[tokio::test]
#[ignore = "needs the control plane: cargo xtask test"]
async fn a_missing_capacity_owner_stops_a_standby_at_start_up() {
    use kube::api::PostParams;
    let ops = Ops::start("ops-owner").await;
    // Someone else holds the Lease for an hour: this replica stays a standby.
    let lease_name = leader_election::lock_name(&ops.driver);
    let lease: Lease = serde_json::from_value(json!({
        "metadata": {"name": lease_name, "namespace": ops.ns},
        "spec": {"holderIdentity": "someone-else", "leaseDurationSeconds": 3600,
                 "renewTime": k8s_openapi::jiff::Timestamp::now().to_string()},
    }))
    .unwrap();
    Api::<Lease>::namespaced(ops.client.clone(), &ops.ns)
        .create(&PostParams::default(), &lease)
        .await
        .unwrap();
    let ns_flag = format!("--leader-election-namespace={}", ops.ns);
    let mut provisioner = testenv::Provisioner::start(
        &ops.dir,
        "csi-provisioner",
        testenv::ControlPlane::shared().kubeconfig(),
        &ops.mock.socket,
        &["--leader-election", &ns_flag, "--enable-capacity"],
        &[("NAMESPACE", ops.ns.as_str()), ("POD_NAME", "no-such-pod")],
    );
    let status = wait_exit(&mut provisioner, 30, "as a standby with a missing owner").await;
    assert_eq!(status.code(), Some(1));
    let log = provisioner.log();
    assert!(
        log.contains("cannot look up the owner for CSIStorageCapacity objects")
            && log.contains("no-such-pod"),
        "{log}"
    );
    assert!(
        !log.contains("attempting to acquire leader lease"),
        "the owner is looked up before the election: {log}"
    );
}

/// Waits up to `seconds` for the provisioner to exit; fails with its log tail otherwise.
async fn wait_exit(
    provisioner: &mut testenv::Provisioner,
    seconds: u64,
    when: &str,
) -> std::process::ExitStatus {
    let deadline = Instant::now() + Duration::from_secs(seconds);
    loop {
        if let Some(status) = provisioner.process().try_wait().unwrap() {
            return status;
        }
        assert!(
            Instant::now() < deadline,
            "still running {seconds} s {when}; log tail:\n{}",
            provisioner.process().log_tail(20)
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
