//! A catalogue of bad input users create, through the real API server: quantities, class
//! parameters, topology, access modes, data sources, odd-but-valid names, and a driver that
//! answers nonsense. Each case is a claim (with a StorageClass of its own where the class is
//! the bad part) and says what the user must get: the API server's refusal, one clear event,
//! or a bound claim. For every case the provisioner keeps running, no volume leaks, no PV has
//! an empty handle, and input refused before the driver never reaches CreateVolume.
//!
//! One scenario per test function with all its claims at once, checked concurrently, so the
//! waits overlap.

use crate::support;
use crate::support::WAIT;
use std::collections::BTreeMap;
use std::fmt;
use std::future::Future;
use std::time::{Duration, Instant};

use crate::support::{NODE_KEY, Scenario, create_secret, merge, on_nodes, pod};
use k8s_openapi::api::core::v1::{
    Event, Namespace, PersistentVolume, PersistentVolumeClaim, Secret,
};
use k8s_openapi::api::storage::v1::{CSIStorageCapacity, VolumeAttributesClass};
use kube::api::{DeleteParams, ListParams, PostParams};
use kube::{Api, Client};
use serde_json::{Value, json};

/// How long one case may take to show its outcome (several run at once on a busy machine).
const CASE_TIMEOUT: Duration = Duration::from_secs(45);
/// Text of kube-rs's `Debug` form of an API error, which no event should carry.
const DEBUG_DUMP: [&str; 3] = ["ApiError:", "Status {", "ListMeta {"];
/// How long a created volume may go without its PV.
const PV_TIMEOUT: Duration = Duration::from_secs(20);

/// What the user gets for one bad input.
#[derive(Debug, Clone)]
enum Expect {
    /// The API server refuses to store the claim; its message contains this.
    ApiRefuses(String),
    /// A `ProvisioningFailed` event containing this; the driver is never asked.
    FailsBeforeDriver(String),
    /// The driver is asked and refuses: a `ProvisioningFailed` event containing this, and no
    /// volume.
    DriverRefuses(String),
    /// A `ProvisioningFailed` event containing this, then the claim binds on a later attempt.
    FailsThenBinds(String),
    /// Odd but valid: the claim binds, with a `ProvisioningSucceeded` event.
    Binds,
    /// Back to the scheduler: a `ProvisioningFailed` event containing this, the
    /// selected-node annotation removed, the driver never asked.
    Rescheduled(String),
    /// Not ours to provision: a Normal `Provisioning` event containing this, no
    /// `ProvisioningFailed`, the driver never asked.
    LeftToOthers(String),
    /// No event of ours: the provisioner's log (default verbosity) has a line containing
    /// this, and the driver is never asked.
    Logged(String),
    /// The scheduler cannot place the claim's pod (a `FailedScheduling` event on the pod
    /// containing this), so the provisioner is never asked.
    Unschedulable(String),
}

use Expect::*;

fn api_refuses(s: impl Into<String>) -> Expect {
    ApiRefuses(s.into())
}
fn fails_before_driver(s: impl Into<String>) -> Expect {
    FailsBeforeDriver(s.into())
}
fn driver_refuses(s: impl Into<String>) -> Expect {
    DriverRefuses(s.into())
}
fn fails_then_binds(s: impl Into<String>) -> Expect {
    FailsThenBinds(s.into())
}
fn rescheduled(s: impl Into<String>) -> Expect {
    Rescheduled(s.into())
}

/// One bad input: a claim named after what is wrong with it.
struct Case {
    name: String,
    expect: Expect,
    /// The storage request; `None` leaves `resources.requests` out.
    size: Option<String>,
    /// Merged into the claim.
    claim: Value,
    /// Merged into a StorageClass of this case's own (`<ns>-<name>`), when the class is the
    /// bad part; otherwise the scenario's plain Immediate class.
    class: Option<Value>,
    /// An existing class to use instead.
    class_name: Option<String>,
    /// Another namespace for the claim.
    namespace: Option<String>,
    /// Also create a pod using the claim, on the scenario's nodes.
    pod: Option<Vec<String>>,
}

fn case(name: impl Into<String>, expect: Expect) -> Case {
    Case {
        name: name.into(),
        expect,
        size: Some("1Gi".into()),
        claim: json!({}),
        class: None,
        class_name: None,
        namespace: None,
        pod: None,
    }
}

impl Case {
    fn size(mut self, size: Option<&str>) -> Case {
        self.size = size.map(str::to_string);
        self
    }
    fn claim(mut self, extra: Value) -> Case {
        self.claim = extra;
        self
    }
    fn class(mut self, extra: Value) -> Case {
        self.class = Some(extra);
        self
    }
    fn class_name(mut self, name: &str) -> Case {
        self.class_name = Some(name.to_string());
        self
    }
    fn namespace(mut self, ns: &str) -> Case {
        self.namespace = Some(ns.to_string());
        self
    }
    fn with_pod(mut self, nodes: &[String]) -> Case {
        self.pod = Some(nodes.to_vec());
        self
    }
}

impl fmt::Display for Expect {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ApiRefuses(n) => write!(f, "API server refuses: {n:?}"),
            FailsBeforeDriver(n) => write!(f, "ProvisioningFailed, driver not asked: {n:?}"),
            DriverRefuses(n) => write!(f, "driver refuses, ProvisioningFailed: {n:?}"),
            FailsThenBinds(n) => write!(f, "ProvisioningFailed {n:?}, then Bound"),
            Binds => write!(f, "Bound"),
            Rescheduled(n) => write!(f, "rescheduled, ProvisioningFailed: {n:?}"),
            LeftToOthers(n) => write!(f, "left to a populator: {n:?}"),
            Unschedulable(n) => write!(f, "pod unschedulable: {n:?}"),
            Logged(n) => write!(f, "logged: {n:?}"),
        }
    }
}

/// A stored claim of a case.
struct Created<'a> {
    case: &'a Case,
    claim: PersistentVolumeClaim,
}

impl Created<'_> {
    fn ns(&self) -> &str {
        self.claim.metadata.namespace.as_deref().unwrap_or_default()
    }
    fn pv_name(&self) -> String {
        pv_name(&self.claim)
    }
}

/// Creates every case's class and claim, checks what the user got, then the invariants that
/// hold for all of them. Fails with the list of every case that went wrong. Returns the stored
/// claims by case name for further checks.
async fn run(s: &mut Scenario, cases: &[Case]) -> BTreeMap<String, PersistentVolumeClaim> {
    let started = Instant::now();
    let plain = s.class("plain", "Immediate", json!({})).await;
    let mut problems = Vec::new();
    let mut created = Vec::new();
    for case in cases {
        let class = match (&case.class, &case.class_name) {
            (_, Some(name)) => name.clone(),
            (Some(extra), None) => s.class(&case.name, "Immediate", extra.clone()).await,
            (None, None) => plain.clone(),
        };
        let ns = case.namespace.clone().unwrap_or_else(|| s.ns.clone());
        let stored = claims(&s.client, &ns)
            .create(&PostParams::default(), &claim_object(case, &ns, &class))
            .await;
        match (&case.expect, stored) {
            (ApiRefuses(needle), Err(kube::Error::Api(e))) if e.message.contains(needle) => {
                eprintln!("{}: API server: {} ({})", case.name, e.message, e.code);
            }
            (ApiRefuses(needle), Err(e)) => problems.push(format!(
                "{}: the API server's refusal does not contain {needle:?}: {e}",
                case.name
            )),
            (ApiRefuses(_), Ok(_)) => problems.push(format!(
                "{}: the API server stored the claim; expected a refusal",
                case.name
            )),
            (_, Err(e)) => problems.push(format!("{}: the API server refused: {e}", case.name)),
            (_, Ok(claim)) => {
                if let Some(nodes) = &case.pod {
                    let pods: Api<k8s_openapi::api::core::v1::Pod> =
                        Api::namespaced(s.client.clone(), &ns);
                    pods.create(
                        &PostParams::default(),
                        &pod(&case.name, &case.name, on_nodes(nodes)),
                    )
                    .await
                    .unwrap();
                }
                created.push(Created { case, claim });
            }
        }
    }

    // Every case's outcome at once: the waits overlap.
    let outcomes = futures::future::join_all(created.iter().map(|c| outcome(s, c))).await;
    for (c, got) in created.iter().zip(outcomes) {
        match got {
            Ok(seen) => eprintln!("{}: {seen}", c.case.name),
            Err(e) => problems.push(format!(
                "{}: expected {}; {e}\n  {}",
                c.case.name,
                c.case.expect,
                situation(&s.client, c.ns(), &c.case.name).await
            )),
        }
    }

    // Whether the driver was asked, once every outcome is in.
    for c in &created {
        let calls = s.create_calls(&c.pv_name());
        let answered = calls.iter().filter(|c| c.get("response").is_some()).count();
        match &c.case.expect {
            FailsBeforeDriver(_) | Rescheduled(_) | LeftToOthers(_) | Unschedulable(_)
            | Logged(_)
                if !calls.is_empty() =>
            {
                problems.push(format!(
                    "{}: the driver must not be asked, yet CreateVolume was called {} times: {calls:#?}",
                    c.case.name,
                    calls.len()
                ));
            }
            DriverRefuses(_) if calls.is_empty() || answered > 0 => problems.push(format!(
                "{}: expected CreateVolume calls that all failed: {calls:#?}",
                c.case.name
            )),
            _ => {}
        }
        if matches!(c.case.expect, LeftToOthers(_))
            && let Some(e) = events_in(&s.client, c.ns(), &c.case.name)
                .await
                .into_iter()
                .find(|e| e.reason.as_deref() == Some("ProvisioningFailed"))
        {
            problems.push(format!(
                "{}: a populator's claim got ProvisioningFailed: {:?}",
                c.case.name, e.message
            ));
        }
    }

    if let Err(e) = no_volume_leaked(s).await {
        problems.push(e);
    }
    if !s.provisioner().is_running() {
        problems.push(format!(
            "the provisioner is not running; log tail:\n{}",
            s.provisioner().process().log_tail(40)
        ));
    }
    eprintln!(
        "{} cases in {:.1}s, {} problems",
        cases.len(),
        started.elapsed().as_secs_f64(),
        problems.len()
    );
    assert!(
        problems.is_empty(),
        "{} problem(s) (provisioner log: {}):\n- {}",
        problems.len(),
        s.provisioner().log_path().display(),
        problems.join("\n- ")
    );
    created
        .into_iter()
        .map(|c| (c.case.name.clone(), c.claim))
        .collect()
}

/// Waits for what the user must see for one case; describes what was seen.
async fn outcome(s: &Scenario, c: &Created<'_>) -> Result<String, String> {
    let name = c.case.name.as_str();
    let ns = c.ns();
    let client = &s.client;
    match &c.case.expect {
        ApiRefuses(_) => unreachable!("never stored"),
        FailsBeforeDriver(needle) | DriverRefuses(needle) => {
            event(client, ns, name, "ProvisioningFailed", needle).await
        }
        FailsThenBinds(needle) => {
            let seen = event(client, ns, name, "ProvisioningFailed", needle).await?;
            bound(client, ns, name).await?;
            Ok(format!("{seen}; then Bound"))
        }
        Binds => {
            bound(client, ns, name).await?;
            event(client, ns, name, "ProvisioningSucceeded", "").await
        }
        Rescheduled(needle) => {
            let seen = event(client, ns, name, "ProvisioningFailed", needle).await?;
            within(
                "the selected-node annotation to be removed",
                CASE_TIMEOUT,
                || async {
                    let claim = claims(client, ns).get(name).await.ok()?;
                    let annotations = claim.metadata.annotations.unwrap_or_default();
                    (!annotations.contains_key("volume.kubernetes.io/selected-node")).then_some(())
                },
            )
            .await?;
            Ok(format!("{seen}; selected-node removed"))
        }
        LeftToOthers(needle) => event(client, ns, name, "Provisioning", needle).await,
        Unschedulable(needle) => event(client, ns, name, "FailedScheduling", needle).await,
        Logged(needle) => {
            let log = s.dir.join("csi-provisioner.log");
            within(
                &format!("a log line containing {needle:?}"),
                CASE_TIMEOUT,
                || async {
                    let text = std::fs::read_to_string(&log).unwrap_or_default();
                    text.lines()
                        .find(|l| l.contains(needle.as_str()))
                        .map(|l| format!("log: {l}"))
                },
            )
            .await
        }
    }
}

/// The claim's phase and annotations and its events, for a case that went wrong.
async fn situation(client: &Client, ns: &str, name: &str) -> String {
    let claim = claims(client, ns).get(name).await.ok();
    let phase = claim
        .as_ref()
        .and_then(|c| c.status.as_ref()?.phase.clone())
        .unwrap_or_default();
    let annotations = claim
        .and_then(|c| c.metadata.annotations)
        .unwrap_or_default();
    let events: Vec<String> = events_in(client, ns, name)
        .await
        .into_iter()
        .map(|e| {
            format!(
                "{} {}: {}",
                e.type_.unwrap_or_default(),
                e.reason.unwrap_or_default(),
                e.message.unwrap_or_default()
            )
        })
        .collect();
    format!("claim phase {phase:?}, annotations {annotations:?}, events {events:#?}")
}

/// Polls `f` for up to `timeout`.
async fn within<T, F, Fut>(what: &str, timeout: Duration, f: F) -> Result<T, String>
where
    F: Fn() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(v) = f().await {
            return Ok(v);
        }
        if Instant::now() > deadline {
            return Err(format!("timed out after {timeout:?} waiting for {what}"));
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// Waits for a `reason` event on `name` containing `needle`; on timeout says which events
/// there were instead.
async fn event(
    client: &Client,
    ns: &str,
    name: &str,
    reason: &str,
    needle: &str,
) -> Result<String, String> {
    let found = within(
        &format!("a {reason} event containing {needle:?}"),
        CASE_TIMEOUT,
        || async {
            events_in(client, ns, name)
                .await
                .into_iter()
                .find(|e| {
                    e.reason.as_deref() == Some(reason)
                        && e.message.as_deref().is_some_and(|m| m.contains(needle))
                })
                .map(|e| format!("{reason}: {}", e.message.unwrap_or_default()))
        },
    )
    .await;
    match found {
        // Users read these: the API server's words, not a Rust debug dump of its answer.
        Ok(seen) if DEBUG_DUMP.iter().any(|d| seen.contains(d)) => Err(format!(
            "the event carries a debug dump of an API error (upstream prints only the \
             server's message): {seen}"
        )),
        found => found,
    }
}

async fn bound(client: &Client, ns: &str, name: &str) -> Result<(), String> {
    within("the claim to be Bound", CASE_TIMEOUT, || async {
        let claim = claims(client, ns).get(name).await.ok()?;
        (claim.status?.phase.as_deref() == Some("Bound")).then_some(())
    })
    .await
}

async fn events_in(client: &Client, ns: &str, name: &str) -> Vec<Event> {
    Api::<Event>::namespaced(client.clone(), ns)
        .list(&ListParams::default().fields(&format!("involvedObject.name={name}")))
        .await
        .map(|l| l.items)
        .unwrap_or_default()
}

fn claims(client: &Client, ns: &str) -> Api<PersistentVolumeClaim> {
    Api::namespaced(client.clone(), ns)
}

fn claim_object(case: &Case, ns: &str, class: &str) -> PersistentVolumeClaim {
    let mut obj = json!({
        "apiVersion": "v1", "kind": "PersistentVolumeClaim",
        "metadata": {"name": case.name, "namespace": ns},
        "spec": {"accessModes": ["ReadWriteOnce"], "storageClassName": class,
                 "resources": {"requests": {}}},
    });
    if let Some(size) = &case.size {
        obj["spec"]["resources"]["requests"]["storage"] = json!(size);
    }
    merge(&mut obj, case.claim.clone());
    serde_json::from_value(obj).unwrap()
}

/// Every volume the driver holds has a PV of ours with its handle (eventually: a volume just
/// created gets its PV a moment later), and no PV of ours has an empty handle.
async fn no_volume_leaked(s: &Scenario) -> Result<(), String> {
    let pvs = || async {
        let list = s.volumes().list(&ListParams::default()).await.unwrap();
        list.items
            .into_iter()
            .filter(|pv| csi_of(pv).is_some_and(|c| c.driver == s.driver))
            .collect::<Vec<_>>()
    };
    let orphans = || async {
        let handles: Vec<String> = pvs()
            .await
            .iter()
            .filter_map(|pv| csi_of(pv).map(|c| c.volume_handle.clone()))
            .collect();
        let volumes = s.driver_volumes().await;
        volumes
            .into_iter()
            .filter(|v| !handles.contains(v))
            .collect::<Vec<_>>()
    };
    let leaked = within("every driver volume to have a PV", PV_TIMEOUT, || async {
        orphans().await.is_empty().then_some(())
    })
    .await;
    if let Err(e) = leaked {
        return Err(format!(
            "leaked volumes {:?} (no PV of ours has their handle): {e}",
            orphans().await
        ));
    }
    let empty: Vec<String> = pvs()
        .await
        .iter()
        .filter(|pv| csi_of(pv).is_some_and(|c| c.volume_handle.is_empty()))
        .filter_map(|pv| pv.metadata.name.clone())
        .collect();
    if !empty.is_empty() {
        return Err(format!("PVs with an empty volume handle: {empty:?}"));
    }
    Ok(())
}

fn csi_of(pv: &PersistentVolume) -> Option<&k8s_openapi::api::core::v1::CSIPersistentVolumeSource> {
    pv.spec.as_ref()?.csi.as_ref()
}

async fn pv_of(s: &Scenario, claim: &PersistentVolumeClaim) -> PersistentVolume {
    let claim = s
        .claims()
        .get(claim.metadata.name.as_deref().unwrap())
        .await
        .unwrap();
    let pv = claim.spec.unwrap().volume_name.unwrap();
    s.volumes().get(&pv).await.unwrap()
}

fn capacity_bytes(pv: &PersistentVolume) -> i64 {
    let q = &pv.spec.as_ref().unwrap().capacity.as_ref().unwrap()["storage"];
    provisioning::quantity::parse_quantity(&q.0).unwrap()
}

fn pv_name(claim: &PersistentVolumeClaim) -> String {
    format!("pvc-{}", claim.metadata.uid.as_deref().unwrap_or_default())
}

/// Storage requests: what the API server refuses, what the driver refuses, and fractions
/// rounded up to whole bytes.
#[tokio::test]
#[ignore = "needs the control plane: cargo xtask test"]
async fn quantities() {
    // --max-volume-size is only reported by GetCapacity, never enforced.
    let mut s = Scenario::start("bad-qty", &["--max-volume-size=1Gi"], &[]).await;
    let exhausted =
        "rpc error: code = ResourceExhausted desc = not enough space for 9223372036854775807 bytes";
    let cases = [
        case(
            "no-storage-request",
            api_refuses("spec.resources[storage]: Required value"),
        )
        .size(None),
        case(
            "size-zero",
            api_refuses("spec.resources[storage]: Invalid value: \"0\": must be greater than zero"),
        )
        .size(Some("0")),
        case(
            "size-negative",
            api_refuses(
                "spec.resources[storage]: Invalid value: \"-1Gi\": must be greater than zero",
            ),
        )
        .size(Some("-1Gi")),
        case(
            "size-not-a-quantity",
            api_refuses(
                "cannot be handled as a PersistentVolumeClaim: unable to parse quantity's suffix",
            ),
        )
        .size(Some("1K")),
        // 2^63 bytes does not fit in CSI's int64: asked as i64::MAX, as Go caps binary sizes.
        case("size-8ei", driver_refuses(exhausted)).size(Some("8Ei")),
        // 10^20 bytes: capped the same way (Go would wrap it to a nonsense number).
        case("size-100e", driver_refuses(exhausted)).size(Some("100E")),
        case("size-above-max-volume-size", Binds).size(Some("2Gi")),
        // Claim limits never reach the driver (as upstream), even below the request.
        case("limit-below-request", Binds)
            .size(Some("2Gi"))
            .claim(json!({"spec": {"resources": {"limits": {"storage": "1Gi"}}}})),
        case("size-fraction", Binds).size(Some("1.5")),
        case("size-milli", Binds).size(Some("1m")),
        case("size-exponent", Binds).size(Some("1e3")),
    ];
    let claims = run(&mut s, &cases).await;
    // Fractions round up to whole bytes; the PV records the driver's size.
    for (name, want) in [
        ("size-fraction", 2),
        ("size-milli", 1),
        ("size-exponent", 1000),
    ] {
        let claim = &claims[name];
        let calls = s.create_calls(&pv_name(claim));
        assert_eq!(
            calls[0]["request"]["capacity_range"]["required_bytes"],
            json!(want),
            "{name}"
        );
        assert_eq!(capacity_bytes(&pv_of(&s, claim).await), want, "{name}");
    }
}

/// StorageClass parameters and the secrets they name.
#[tokio::test]
#[ignore = "needs the control plane: cargo xtask test"]
async fn class_parameters() {
    let mut s = Scenario::start("bad-param", &[], &[]).await;
    let ns = s.ns.clone();
    // A secret whose value is not text (0xff 0xfe): CSI secrets are strings.
    let binary: Secret = serde_json::from_value(json!({
        "metadata": {"name": "binary", "namespace": ns},
        "data": {"password": "//4="},
    }))
    .unwrap();
    Api::<Secret>::namespaced(s.client.clone(), &ns)
        .create(&PostParams::default(), &binary)
        .await
        .unwrap();
    create_secret(&s, "s", &[("password", "x")]).await;
    let secret = |name: &str, namespace: &str| {
        json!({"parameters": {
            "csi.storage.k8s.io/provisioner-secret-name": name,
            "csi.storage.k8s.io/provisioner-secret-namespace": namespace}})
    };
    let cases = [
        case(
            "unknown-reserved-key",
            fails_before_driver(
                r#"failed to strip CSI Parameters of prefixed keys: found unknown parameter key "csi.storage.k8s.io/foo" with reserved namespace csi.storage.k8s.io/"#,
            ),
        )
        .class(json!({"parameters": {"csi.storage.k8s.io/foo": "x"}})),
        case(
            "two-fstypes",
            fails_before_driver(
                r#"fstype specified in parameters with both "fstype" and "csi.storage.k8s.io/fstype" keys"#,
            ),
        )
        .class(json!({"parameters": {"fstype": "xfs", "csi.storage.k8s.io/fstype": "ext4"}})),
        case(
            "secret-name-without-namespace",
            fails_before_driver(
                "failed to get name and namespace template from params: either name and namespace for Provisioner secrets specified, Both must be specified",
            ),
        )
        .class(json!({"parameters": {"csi.storage.k8s.io/provisioner-secret-name": "s"}})),
        case(
            "secret-empty-name",
            fails_before_driver(
                "Provisioner secrets specified in parameters but value of either namespace or name is empty",
            ),
        )
        .class(secret("", "${pvc.namespace}")),
        case(
            "secret-both-key-styles",
            fails_before_driver(
                r#"Provisioner secrets specified in parameters with both "csi" and "csi.storage.k8s.io/" keys"#,
            ),
        )
        .class(json!({"parameters": {
            "csiProvisionerSecretName": "s", "csiProvisionerSecretNamespace": "${pvc.namespace}",
            "csi.storage.k8s.io/provisioner-secret-name": "s",
            "csi.storage.k8s.io/provisioner-secret-namespace": "${pvc.namespace}"}})),
        case(
            "secret-unknown-token",
            fails_before_driver(r#"error resolving value "${pvc.foo}": invalid tokens: ["pvc.foo"]"#),
        )
        .class(secret("${pvc.foo}", "${pvc.namespace}")),
        case(
            "secret-bad-char",
            fails_before_driver(
                r#""${pvc.name}_key" resolved to "secret-bad-char_key" which is not a valid secret name"#,
            ),
        )
        .class(secret("${pvc.name}_key", "${pvc.namespace}")),
        case(
            "secret-bad-namespace",
            fails_before_driver(r#""Not_A_Namespace" is not a valid namespace name"#),
        )
        .class(secret("s", "Not_A_Namespace")),
        case(
            "secret-missing",
            fails_before_driver(format!(
                r#"error getting secret missing in namespace {ns}: secrets "missing" not found"#
            )),
        )
        .class(secret("missing", "${pvc.namespace}")),
        case(
            "secret-not-text",
            fails_before_driver(format!(
                r#"error getting secret binary in namespace {ns}: key "password" is not valid UTF-8 text; CSI secrets must be strings"#
            )),
        )
        .class(secret("binary", "${pvc.namespace}")),
        case(
            "secret-namespace-missing",
            fails_before_driver(format!(
                r#"error getting secret s in namespace {ns}-gone: secrets "s" not found"#
            )),
        )
        .class(secret("s", &format!("{ns}-gone"))),
        // Annotated for our driver by hand (kube-controller-manager does not annotate without
        // a class, and says so in its own event). Retried until the class appears; upstream
        // logs each failed sync at error level ("error syncing claim ...").
        case(
            "class-missing",
            Logged(format!(
                r#"storageclass.storage.k8s.io \"{ns}-no-such-class\" not found"#
            )),
        )
        .class_name(&format!("{ns}-no-such-class"))
        .claim(json!({"metadata": {"annotations": {
            "volume.kubernetes.io/storage-provisioner": s.driver}}})),
        case(
            "vac-on-driver-without-modify-volume",
            fails_before_driver(
                "CSI driver does not support VolumeAttributesClass: controller MODIFY_VOLUME capability is not reported",
            ),
        )
        .claim(json!({"spec": {"volumeAttributesClassName": "any"}})),
        // A parameter only the driver can judge.
        case(
            "kind-unknown-to-driver",
            driver_refuses(
                r#"Volume provisioning failed with infeasible error. Retries will be delayed. rpc error: code = InvalidArgument desc = no pool has kind "gold""#,
            ),
        )
        .class(json!({"parameters": {"kind": "gold"}})),
    ];
    run(&mut s, &cases).await;
    // Secret values never reach the log, not even the one that is not text.
    let log = s.provisioner().log();
    assert!(!log.contains("//4="), "secret data in the log");
}

/// VolumeAttributesClasses that are missing or another driver's.
#[tokio::test]
#[ignore = "needs the control plane: cargo xtask test"]
async fn volume_attributes_classes() {
    let mut s = Scenario::start("bad-vac", &["--modify-volume"], &[]).await;
    let other = format!("{}-other-driver", s.ns);
    let vac: VolumeAttributesClass = serde_json::from_value(json!({
        "metadata": {"name": other},
        "driverName": format!("other.{}", s.driver),
        "parameters": {"iops": "1"},
    }))
    .unwrap();
    Api::<VolumeAttributesClass>::all(s.client.clone())
        .create(&PostParams::default(), &vac)
        .await
        .unwrap();
    let missing = format!("{}-missing", s.ns);
    let vac_claim = |name: &str| json!({"spec": {"volumeAttributesClassName": name}});
    let cases = [
        // Retried: the class may yet be created.
        case(
            "vac-missing",
            fails_before_driver(format!(
                r#"volumeattributesclasses.storage.k8s.io "{missing}" not found"#
            )),
        )
        .claim(vac_claim(&missing)),
        case(
            "vac-of-another-driver",
            fails_before_driver(format!(
                "VAC {other} referenced in PVC is for driver other.{d} which does not match driver name {d}",
                d = s.driver
            )),
        )
        .claim(vac_claim(&other)),
    ];
    run(&mut s, &cases).await;
}

/// allowedTopologies nobody can satisfy, and selected nodes that are not what they claim.
#[tokio::test]
#[ignore = "needs the control plane: cargo xtask test"]
async fn topology() {
    let (mut s, names) = Scenario::with_nodes("bad-topo", &["a", "b"], "100Gi", &[]).await;
    let [ghost, bare, other, unlabelled] =
        ["ghost", "bare", "other", "unlabelled"].map(|n| format!("{}-{n}", s.ns));
    // A node without any CSINode, and one whose CSINode lists only another driver.
    testenv::try_create_bare_nodes(&s.client, NODE_KEY, &[&bare])
        .await
        .unwrap();
    testenv::create_fake_nodes(
        &s.client,
        &format!("other.{}", s.driver),
        NODE_KEY,
        &[&other],
    )
    .await;
    // A node whose CSINode names our driver's key, but which lacks that label.
    testenv::create_fake_nodes(&s.client, &s.driver, NODE_KEY, &[&unlabelled]).await;
    kube::Api::<k8s_openapi::api::core::v1::Node>::all(s.client.clone())
        .patch(
            &unlabelled,
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(json!({"metadata": {"labels": {NODE_KEY: null}}})),
        )
        .await
        .unwrap();
    let wffc = s.class("wffc", "WaitForFirstConsumer", json!({})).await;
    let allowed = |key: &str, value: &str| json!({"allowedTopologies": [{"matchLabelExpressions": [{"key": key, "values": [value]}]}]});
    let selected = |node: &str| json!({"metadata": {"annotations": {"volume.kubernetes.io/selected-node": node}}});
    let no_pool = r#"rpc error: code = ResourceExhausted desc = no pool of kind "" matches the accessibility requirements"#;
    let csinode_missing = |node: &str| {
        format!(
            r#"failed to get selected CSINode {node}: csinode.storage.k8s.io "{node}" not found"#
        )
    };
    let cases = [
        // Immediate binding sends allowedTopologies as they are; the driver finds no place.
        case("allowed-key-no-node-has", driver_refuses(no_pool))
            .class(allowed("topology.mock.csi/rack", "r1")),
        case("allowed-value-no-node-has", driver_refuses(no_pool))
            .class(allowed(NODE_KEY, &format!("{}-nowhere", s.ns))),
        // Late binding: the scheduler finds no node for the pod, nobody asks us.
        case(
            "wffc-allowed-no-node-has",
            Unschedulable("didn't find available persistent volumes to bind".into()),
        )
        .class(merge_all(
            allowed(NODE_KEY, &format!("{}-nowhere", s.ns)),
            json!({"volumeBindingMode": "WaitForFirstConsumer"}),
        ))
        .with_pod(&names),
        // Annotated by hand, no pod.
        case("selected-node-missing", rescheduled(csinode_missing(&ghost)))
            .class_name(&wffc)
            .claim(selected(&ghost)),
        case("selected-node-without-csinode", rescheduled(csinode_missing(&bare)))
            .class_name(&wffc)
            .claim(selected(&bare)),
        case(
            "selected-node-without-driver",
            fails_before_driver(format!(
                "error generating accessibility requirements: no topology key found for node {other}"
            )),
        )
        .class_name(&wffc)
        .claim(selected(&other)),
        // Upstream prints the Node's labels: the missing one shows by its absence.
        case(
            "selected-node-without-the-label",
            fails_before_driver(format!(
                "error generating accessibility requirements: topology labels from selected node \
                 map[kubernetes.io/hostname:{unlabelled}] does not match topology keys from CSINode \
                 [{NODE_KEY}]"
            )),
        )
        .class_name(&wffc)
        .claim(selected(&unlabelled)),
    ];
    run(&mut s, &cases).await;
}

/// Access modes and volume modes.
#[tokio::test]
#[ignore = "needs the control plane: cargo xtask test"]
async fn access_modes() {
    let mut s = Scenario::start(
        "bad-mode",
        &["--reject-access-mode=MULTI_NODE_MULTI_WRITER"],
        &[],
    )
    .await;
    let modes = |m: Value| json!({"spec": {"accessModes": m}});
    let cases = [
        case(
            "rwx-refused-by-driver",
            driver_refuses(
                "Volume provisioning failed with infeasible error. Retries will be delayed. rpc error: code = InvalidArgument desc = access mode MULTI_NODE_MULTI_WRITER is not supported by this driver",
            ),
        )
        .claim(modes(json!(["ReadWriteMany"]))),
        case("read-write-once-pod", Binds).claim(modes(json!(["ReadWriteOncePod"]))),
        case(
            "read-write-once-pod-and-more",
            api_refuses("may not use ReadWriteOncePod with other access modes"),
        )
        .claim(modes(json!(["ReadWriteOncePod", "ReadWriteOnce"]))),
        case(
            "no-access-modes",
            api_refuses("spec.accessModes: Required value"),
        )
        .claim(modes(json!([]))),
        case(
            "unknown-access-mode",
            api_refuses(r#"spec.accessModes: Unsupported value: "ReadWriteSometimes""#),
        )
        .claim(modes(json!(["ReadWriteSometimes"]))),
        // Mount options mean nothing to a block volume: the driver gets none, the PV keeps
        // the class's (as upstream).
        case("block-with-mount-options", Binds)
            .class(json!({"mountOptions": ["noatime"]}))
            .claim(json!({"spec": {"volumeMode": "Block"}})),
        case("selector", fails_before_driver("claim Selector is not supported"))
            .claim(json!({"spec": {"selector": {"matchLabels": {"a": "b"}}}})),
    ];
    let claims = run(&mut s, &cases).await;
    let block = &claims["block-with-mount-options"];
    let calls = s.create_calls(&pv_name(block));
    let capability = &calls[0]["request"]["volume_capabilities"][0];
    assert!(capability.get("block").is_some(), "{capability}");
    assert!(capability.get("mount").is_none(), "{capability}");
    let pv = pv_of(&s, block).await.spec.unwrap();
    assert_eq!(pv.volume_mode.as_deref(), Some("Block"));
    assert_eq!(pv.mount_options, Some(vec!["noatime".to_string()]));
}

/// Data sources that are wrong, missing or someone else's.
#[tokio::test]
#[ignore = "needs the control plane: cargo xtask test"]
async fn data_sources() {
    let mut s = Scenario::start("bad-source", &["--clone-volume"], &[]).await;
    // A source claim that never binds (its class does not exist).
    s.claim("pending-source", "no-such-class", "1Gi", json!({}))
        .await;
    let source = |v: Value| json!({"spec": {"dataSource": v}});
    let source_ref = |v: Value| json!({"spec": {"dataSourceRef": v}});
    let cases = [
        case(
            "snapshot-wrong-api-group",
            fails_before_driver(
                "the PVC source does not belong to the right APIGroup. Expected snapshot.storage.k8s.io, Got wrong.example.com",
            ),
        )
        .claim(source_ref(json!({"apiGroup": "wrong.example.com", "kind": "VolumeSnapshot", "name": "snap"}))),
        // The legacy dataSource field keeps only claims and snapshot.storage.k8s.io snapshots:
        // the API server drops anything else without a word, so the user gets an empty volume.
        case("snapshot-wrong-api-group-in-data-source", Binds)
            .claim(source(json!({"apiGroup": "wrong.example.com", "kind": "VolumeSnapshot", "name": "snap"}))),
        case(
            "source-empty-name",
            api_refuses("spec.dataSource.name: Required value"),
        )
        .claim(source(json!({"apiGroup": "snapshot.storage.k8s.io", "kind": "VolumeSnapshot", "name": ""}))),
        case(
            "source-core-kind-not-a-claim",
            api_refuses(
                r#"spec.dataSourceRef: Invalid value: "Secret": must be 'PersistentVolumeClaim' when referencing the default apiGroup"#,
            ),
        )
        .claim(source_ref(json!({"kind": "Secret", "name": "x"}))),
        case(
            "source-and-ref-disagree",
            api_refuses("must match dataSourceRef"),
        )
        .claim(json!({"spec": {
            "dataSource": {"kind": "PersistentVolumeClaim", "name": "a"},
            "dataSourceRef": {"kind": "PersistentVolumeClaim", "name": "b"}}})),
        case(
            "clone-missing-source",
            fails_before_driver(format!(
                r#"error getting handle for DataSource Type PersistentVolumeClaim by Name missing-source: error getting PVC missing-source (namespace "{}") from api server: persistentvolumeclaim "missing-source" not found"#,
                s.ns
            )),
        )
        .claim(source(json!({"kind": "PersistentVolumeClaim", "name": "missing-source"}))),
        case(
            "clone-unbound-source",
            fails_before_driver(
                "error getting handle for DataSource Type PersistentVolumeClaim by Name pending-source: the PVC DataSource pending-source must have a status of Bound.  Got Pending",
            ),
        )
        .claim(source(json!({"kind": "PersistentVolumeClaim", "name": "pending-source"}))),
        case(
            "populator",
            LeftToOthers("Assuming an external populator will provision the volume".into()),
        )
        .claim(source_ref(json!({"apiGroup": "populators.example.com", "kind": "Sample", "name": "x"}))),
    ];
    let claims = run(&mut s, &cases).await;
    let dropped = &claims["snapshot-wrong-api-group-in-data-source"];
    let spec = dropped.spec.as_ref().unwrap();
    assert!(
        spec.data_source.is_none() && spec.data_source_ref.is_none(),
        "{spec:?}"
    );
}

/// Bad-looking but valid names at the API's limits provision normally.
#[tokio::test]
#[ignore = "needs the control plane: cargo xtask test"]
async fn names_at_the_limits() {
    let mut s = Scenario::start("bad-name", &[], &[]).await;
    // Namespaces are DNS labels (63), claim and class names DNS subdomains (253).
    let long_ns = testenv::create_namespace(&s.client, &"n".repeat(63 - 7)).await;
    assert_eq!(long_ns.len(), 63);
    let class_suffix = "c".repeat(253 - s.ns.len() - 1);
    let long_class = s.class(&class_suffix, "Immediate", json!({})).await;
    assert_eq!(long_class.len(), 253);
    let cases = [
        case("l".repeat(253), Binds),
        case("long-class-name", Binds).class_name(&long_class),
        case("in-long-namespace", Binds).namespace(&long_ns),
    ];
    run(&mut s, &cases).await;
    let _ = Api::<Namespace>::all(s.client.clone())
        .delete(&long_ns, &DeleteParams::default())
        .await;
}

/// A driver whose successful answers are nonsense (the mock's `reply` faults, one class
/// parameter `case` per nonsense): what the user sees, and that nothing leaks.
#[tokio::test]
#[ignore = "needs the control plane: cargo xtask test"]
async fn driver_nonsense() {
    let (mut s, names) = Scenario::with_nodes(
        "bad-driver",
        &["a", "b"],
        "100Gi",
        &["--enable-capacity", "--capacity-ownerref-level=-1", "-v=2"],
    )
    .await;
    let identity = "storage.kubernetes.io/csiProvisionerIdentity";
    // The first answer of each "times: 1" case is nonsense; the retry gets the truth.
    s.mock().set_faults(json!({
        "CreateVolume": [
            nonsense("negative", json!({"capacity_bytes": -1}), Some(1)),
            nonsense("smaller", json!({"capacity_bytes": 1024}), Some(1)),
            nonsense("zero", json!({"capacity_bytes": 0}), None),
            nonsense("huge", json!({"capacity_bytes": i64::MAX}), None),
            nonsense("elsewhere", json!({"accessible_topology": [{NODE_KEY: "nowhere"}]}), None),
            nonsense("identity", json!({"volume_context": {identity: "driver-says-so"}}), None),
        ],
        "GetCapacity": nonsense("negcap", json!({"available_capacity": -5}), None),
    }));
    let gi = 1i64 << 30;
    let cases = [
        case(
            "negative-capacity",
            fails_then_binds(format!(
                "created volume capacity -1 less than requested capacity {gi}"
            )),
        )
        .class(param("negative")),
        case(
            "capacity-smaller-than-requested",
            fails_then_binds(format!(
                "created volume capacity 1024 less than requested capacity {gi}"
            )),
        )
        .class(param("smaller")),
        // 0 is "unknown" in CSI: the PV gets the requested size.
        case("capacity-zero", Binds).class(param("zero")),
        case("capacity-huge", Binds).class(param("huge")),
        case("topology-outside-request", Binds).class(param("elsewhere")),
        case("context-overrides-identity", Binds).class(param("identity")),
    ];
    let claims = run(&mut s, &cases).await;

    // Too small: the volume of the first answer was deleted again, by its id.
    for name in ["negative-capacity", "capacity-smaller-than-requested"] {
        let calls = s.create_calls(&pv_name(&claims[name]));
        let first = calls[0]["response"]["volume"]["volume_id"]
            .as_str()
            .unwrap()
            .to_string();
        let deletes = s.mock().calls_of("DeleteVolume");
        assert!(
            deletes
                .iter()
                .any(|d| d["request"]["volume_id"] == first.as_str()),
            "{name}: no DeleteVolume of {first}: {deletes:#?}"
        );
        let handle = s.volume_handle(&pv_name(&claims[name])).await;
        assert_ne!(handle, first, "{name}: the PV is the retry's volume");
    }
    // The PV records what the driver said: its size, where it is, its context.
    let pv = pv_of(&s, &claims["capacity-zero"]).await;
    assert_eq!(capacity_bytes(&pv), gi, "0 means the requested size");
    let pv = pv_of(&s, &claims["capacity-huge"]).await;
    assert_eq!(capacity_bytes(&pv), i64::MAX);
    let pv = pv_of(&s, &claims["topology-outside-request"]).await;
    let terms = pv.spec.unwrap().node_affinity.unwrap().required.unwrap();
    let expr = &terms.node_selector_terms[0]
        .match_expressions
        .as_ref()
        .unwrap()[0];
    assert_eq!(
        (expr.key.as_str(), expr.values.clone().unwrap()),
        (NODE_KEY, vec!["nowhere".to_string()])
    );
    let pv = pv_of(&s, &claims["context-overrides-identity"]).await;
    let attrs = csi_of(&pv).unwrap().volume_attributes.clone().unwrap();
    assert_eq!(
        attrs[identity], "driver-says-so",
        "the driver's context wins, as upstream"
    );
    // Such a PV is still ours to delete.
    let handle = csi_of(&pv).unwrap().volume_handle.clone();
    s.delete_claim("context-overrides-identity").await;
    support::eventually(
        "the volume with the driver's identity to be deleted",
        WAIT,
        || async { (!s.driver_volumes().await.contains(&handle)).then_some(()) },
    )
    .await;

    // GetCapacity below zero: published as 0, and the log says why.
    let class = s
        .class("negcap", "WaitForFirstConsumer", param("negcap"))
        .await;
    let published = support::eventually("capacity objects of the negcap class", WAIT, || async {
        let list = Api::<CSIStorageCapacity>::namespaced(s.client.clone(), &s.ns)
            .list(&ListParams::default())
            .await
            .ok()?;
        let ours: Vec<CSIStorageCapacity> = list
            .items
            .into_iter()
            .filter(|c| c.storage_class_name == class)
            .collect();
        (ours.len() == names.len()).then_some(ours)
    })
    .await;
    for c in &published {
        assert_eq!(
            c.capacity.as_ref().map(|q| q.0.as_str()),
            Some("0"),
            "negative capacity is published as 0: {c:?}"
        );
    }
    s.provisioner().wait_for_log(
        "GetCapacity returned a negative value; publishing 0 instead",
        Duration::from_secs(30),
    );
    assert!(s.provisioner().is_running());
}

/// Answers no PV can be written for: the volume must not stay behind without one, and the user
/// must hear why. Each first answer is nonsense, the retry gets the truth.
#[tokio::test]
#[ignore = "needs the control plane: cargo xtask test"]
async fn driver_answers_no_pv_can_hold() {
    let (mut s, _) = Scenario::with_nodes("bad-nopv", &["a", "b"], "100Gi", &[]).await;
    s.mock().set_faults(json!({
        "CreateVolume": [
            nonsense("empty-id", json!({"volume_id": ""}), Some(1)),
            nonsense("bad-key", json!({"accessible_topology": [{"not a label key": "x"}]}), Some(1)),
            nonsense("bad-value", json!({"accessible_topology": [{NODE_KEY: "not a label value!"}]}), Some(1)),
        ],
    }));
    let invalid = |field: &str, value: &str| {
        format!(
            r#"spec.nodeAffinity.required.nodeSelectorTerms[0].matchExpressions[0].{field}: Invalid value: "{value}""#
        )
    };
    let cases = [
        // Upstream writes a PV with an empty handle (refused by the API server) and then
        // calls DeleteVolume with an empty id: there is no upstream text to copy.
        case(
            "empty-volume-id",
            fails_then_binds("CreateVolume returned a volume with an empty volume_id"),
        )
        .class(param("empty-id")),
        // The API server refuses such a PV; the user needs its words.
        case(
            "topology-key-not-a-label",
            fails_then_binds(invalid("key", "not a label key")),
        )
        .class(param("bad-key")),
        case(
            "topology-value-not-a-label",
            fails_then_binds(invalid("values[0]", "not a label value!")),
        )
        .class(param("bad-value")),
    ];
    run(&mut s, &cases).await;
}

/// A mock `reply` fault for the claims of classes with parameter `case` (see [`param`]).
fn nonsense(case: &str, reply: Value, times: Option<u64>) -> Value {
    let mut f = json!({"match_parameters": {"case": case}, "reply": reply});
    if let Some(t) = times {
        f["times"] = json!(t);
    }
    f
}

/// Class parameters that pick a mock fault.
fn param(case: &str) -> Value {
    json!({"parameters": {"case": case}})
}

fn merge_all(mut a: Value, b: Value) -> Value {
    merge(&mut a, b);
    a
}
