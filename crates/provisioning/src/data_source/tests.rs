//! Table tests after upstream's TestProvisionFromSnapshot and TestProvisionFromPVC.

use std::collections::BTreeMap;

use csi::v1::volume_content_source::Type;
use k8s_openapi::api::core::v1::{
    CSIPersistentVolumeSource, ObjectReference, PersistentVolume, PersistentVolumeClaim,
    PersistentVolumeClaimStatus, PersistentVolumeSpec, PersistentVolumeStatus,
    TypedLocalObjectReference,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use pretty_assertions::assert_eq;

use super::clone::{CloneInputs, SOURCE_NOT_BOUND, clone_source, guards_source, pending_clones};
use super::snapshot::{
    RestoreInputs, SnapshotRef, VolumeSnapshot, VolumeSnapshotContent, VolumeSnapshotContentSpec,
    VolumeSnapshotContentStatus, VolumeSnapshotStatus, restore_source,
};
use super::*;
use crate::testutil::{DRIVER, claim, spec_mut};

/// Name, claim, snapshot, its content, the snapshot id or the error.
type RestoreCase = (
    &'static str,
    PersistentVolumeClaim,
    VolumeSnapshot,
    Option<VolumeSnapshotContent>,
    Result<String, String>,
);

/// Name, claim, source claim, its PV, the source volume id or the error.
type CloneCase = (
    &'static str,
    PersistentVolumeClaim,
    Option<PersistentVolumeClaim>,
    Option<PersistentVolume>,
    Result<String, String>,
);

fn deleting() -> Option<Time> {
    Some(Time(k8s_openapi::jiff::Timestamp::UNIX_EPOCH))
}

fn snapshot() -> VolumeSnapshot {
    serde_json::from_value(serde_json::json!({
        "metadata": {"name": "snap", "namespace": "default", "uid": "snap-uid"},
        "status": {"boundVolumeSnapshotContentName": "content", "readyToUse": true, "restoreSize": "1Gi"}
    }))
    .expect("a snapshot")
}

fn content() -> VolumeSnapshotContent {
    VolumeSnapshotContent {
        metadata: Default::default(),
        spec: VolumeSnapshotContentSpec {
            driver: DRIVER.into(),
            volume_snapshot_ref: SnapshotRef {
                name: Some("snap".into()),
                namespace: Some("default".into()),
                uid: Some("snap-uid".into()),
            },
            source_volume_mode: Some("Filesystem".into()),
        },
        status: Some(VolumeSnapshotContentStatus {
            snapshot_handle: Some("snap-handle".into()),
        }),
    }
}

fn restore(
    claim: &PersistentVolumeClaim,
    snapshot: &VolumeSnapshot,
    content: Option<&VolumeSnapshotContent>,
) -> Result<String, String> {
    restore_source(&RestoreInputs {
        claim,
        name: "snap",
        snapshot,
        content,
        provisioner: DRIVER,
        class: "sc",
        prevent_volume_mode_conversion: true,
    })
    .map(|r| match r.content_source.r#type {
        Some(Type::Snapshot(s)) => s.snapshot_id,
        other => panic!("not a snapshot source: {other:?}"),
    })
}

fn with_status(f: impl FnOnce(&mut VolumeSnapshotStatus)) -> VolumeSnapshot {
    let mut s = snapshot();
    f(s.status.as_mut().expect("status"));
    s
}

fn with_content(f: impl FnOnce(&mut VolumeSnapshotContent)) -> VolumeSnapshotContent {
    let mut c = content();
    f(&mut c);
    c
}

fn sized(size: &str) -> PersistentVolumeClaim {
    let mut c = claim();
    spec_mut(&mut c)
        .resources
        .as_mut()
        .and_then(|r| r.requests.as_mut())
        .expect("requests")
        .insert(
            "storage".into(),
            k8s_openapi::apimachinery::pkg::api::resource::Quantity(size.into()),
        );
    c
}

fn block(mut c: PersistentVolumeClaim) -> PersistentVolumeClaim {
    spec_mut(&mut c).volume_mode = Some("Block".into());
    c
}

#[test]
fn restore_checks_in_upstream_order() {
    let not_bound = Err("snapshot snap not bound".to_string());
    let elsewhere = Err(
        "snapshotcontent content for snapshot snap is bound to a different snapshot".to_string(),
    );
    let mut being_deleted = snapshot();
    being_deleted.metadata.deletion_timestamp = deleting();
    let mut deleting_but_ours = being_deleted.clone();
    deleting_but_ours.metadata.finalizers = Some(vec![names::SNAPSHOT_SOURCE_FINALIZER.into()]);
    let mut deleting_other_finalizer = being_deleted.clone();
    deleting_other_finalizer.metadata.finalizers = Some(vec![
        "snapshot.storage.k8s.io/volumesnapshot-as-source-protection".into(),
    ]);
    let no_status = VolumeSnapshot {
        status: None,
        ..snapshot()
    };
    let annotated = |value: &str| {
        with_content(|c| {
            c.metadata.annotations = Some(BTreeMap::from([(
                names::ANN_ALLOW_VOLUME_MODE_CHANGE.to_string(),
                value.to_string(),
            )]))
        })
    };
    let denied = "requested volume default/my-pvc modifies the mode of the source volume but does not have permission to do so. ";
    let content = content();
    let cases: Vec<RestoreCase> = vec![
        ("happy path", claim(), snapshot(), Some(content.clone()), Ok("snap-handle".into())),
        ("being deleted", claim(), being_deleted, Some(content.clone()), Err("snapshot snap is being deleted".into())),
        ("being deleted with another finalizer", claim(), deleting_other_finalizer, Some(content.clone()), Err("snapshot snap is being deleted".into())),
        ("being deleted with our finalizer", claim(), deleting_but_ours, Some(content.clone()), Ok("snap-handle".into())),
        ("no status", claim(), no_status, Some(content.clone()), not_bound.clone()),
        ("no bound content name", claim(), with_status(|s| s.bound_volume_snapshot_content_name = None), Some(content.clone()), not_bound.clone()),
        ("content not found", claim(), snapshot(), None, Err("error getting snapshotcontent content for snapshot snap".into())),
        ("content bound to another uid", claim(), snapshot(), Some(with_content(|c| c.spec.volume_snapshot_ref.uid = Some("x".into()))), elsewhere.clone()),
        ("content bound to another namespace", claim(), snapshot(), Some(with_content(|c| c.spec.volume_snapshot_ref.namespace = Some("x".into()))), elsewhere.clone()),
        ("content bound to another name", claim(), snapshot(), Some(with_content(|c| c.spec.volume_snapshot_ref.name = Some("x".into()))), elsewhere.clone()),
        ("content of another driver", claim(), snapshot(), Some(with_content(|c| c.spec.driver = "other.example.com".into())), Err("snapshotcontent content for snapshot snap is not handled by CSI driver of StorageClass sc".into())),
        ("nil readyToUse", claim(), with_status(|s| s.ready_to_use = None), Some(content.clone()), Err("snapshot snap is not Ready".into())),
        ("not ready", claim(), with_status(|s| s.ready_to_use = Some(false)), Some(content.clone()), Err("snapshot snap is not Ready".into())),
        ("no content status", claim(), snapshot(), Some(with_content(|c| c.status = None)), Err("snapshot handle snap is not available".into())),
        ("no snapshot handle", claim(), snapshot(), Some(with_content(|c| c.status = Some(Default::default()))), Err("snapshot handle snap is not available".into())),
        ("claim smaller than the snapshot", sized("512Mi"), snapshot(), Some(content.clone()), Err("requested volume size 536870912 is less than the size 1073741824 for the source snapshot snap".into())),
        ("claim larger than the snapshot (a warning only)", sized("2Gi"), snapshot(), Some(content.clone()), Ok("snap-handle".into())),
        ("no restore size", sized("1"), with_status(|s| s.restore_size = None), Some(content.clone()), Ok("snap-handle".into())),
        ("mode change without annotation", block(claim()), snapshot(), Some(content.clone()),
            Err(format!("{denied}snapshot.storage.kubernetes.io/allow-volume-mode-change annotation is not present on snapshotcontent content"))),
        ("mode change allowed", block(claim()), snapshot(), Some(annotated("true")), Ok("snap-handle".into())),
        ("mode change refused", block(claim()), snapshot(), Some(annotated("false")),
            Err(format!("{denied}snapshot.storage.kubernetes.io/allow-volume-mode-change is set to false on snapshotcontent content"))),
        ("mode change annotation not a bool", block(claim()), snapshot(), Some(annotated("yes")),
            Err(format!("{denied}failed to convert snapshot.storage.kubernetes.io/allow-volume-mode-change annotation value to boolean with error: strconv.ParseBool: parsing \"yes\": invalid syntax"))),
        ("no source mode recorded", block(claim()), snapshot(), Some(with_content(|c| c.spec.source_volume_mode = None)), Ok("snap-handle".into())),
    ];
    for (name, claim, snapshot, content, want) in cases {
        assert_eq!(restore(&claim, &snapshot, content.as_ref()), want, "{name}");
    }
}

#[test]
fn restore_size_warning_and_conversion_flag() {
    let larger = sized("2Gi");
    let snap = snapshot();
    let content = content();
    let inputs = RestoreInputs {
        claim: &larger,
        name: "snap",
        snapshot: &snap,
        content: Some(&content),
        provisioner: DRIVER,
        class: "sc",
        prevent_volume_mode_conversion: true,
    };
    assert_eq!(
        restore_source(&inputs).expect("restore").warning.as_deref(),
        Some(
            "requested volume size 2147483648 is greater than the size 1073741824 for the source snapshot snap. Volume plugin needs to handle volume expansion."
        )
    );
    let block = block(claim());
    let unchecked = RestoreInputs {
        claim: &block,
        prevent_volume_mode_conversion: false,
        ..inputs
    };
    assert!(restore_source(&unchecked).is_ok());
}

fn source_claim() -> PersistentVolumeClaim {
    let mut c = claim();
    c.metadata.name = Some("src".into());
    c.metadata.uid = Some("src-uid".into());
    spec_mut(&mut c).volume_name = Some("pv-src".into());
    c.status = Some(PersistentVolumeClaimStatus {
        phase: Some("Bound".into()),
        ..Default::default()
    });
    c
}

fn source_pv() -> PersistentVolume {
    PersistentVolume {
        metadata: Default::default(),
        spec: Some(PersistentVolumeSpec {
            csi: Some(CSIPersistentVolumeSource {
                driver: DRIVER.into(),
                volume_handle: "vol-src".into(),
                ..Default::default()
            }),
            claim_ref: Some(ObjectReference {
                name: Some("src".into()),
                namespace: Some("default".into()),
                uid: Some("src-uid".into()),
                ..Default::default()
            }),
            ..Default::default()
        }),
        status: Some(PersistentVolumeStatus {
            phase: Some("Bound".into()),
            ..Default::default()
        }),
    }
}

fn pv_spec(p: &mut PersistentVolume) -> &mut PersistentVolumeSpec {
    p.spec.as_mut().expect("spec")
}

fn cloned(
    claim: &PersistentVolumeClaim,
    source: Option<&PersistentVolumeClaim>,
    pv: Option<&PersistentVolume>,
) -> Result<String, String> {
    clone_source(&CloneInputs {
        claim,
        name: "src",
        source,
        source_pv: pv,
        provisioner: DRIVER,
    })
    .map(|s| match s.r#type {
        Some(Type::Volume(v)) => v.volume_id,
        other => panic!("not a volume source: {other:?}"),
    })
    .map_err(|e| e.message)
}

#[test]
fn clone_checks_in_upstream_order() {
    let src = source_claim;
    let pv = source_pv;
    let edit_src = |f: &dyn Fn(&mut PersistentVolumeClaim)| {
        let mut c = src();
        f(&mut c);
        c
    };
    let edit_pv = |f: &dyn Fn(&mut PersistentVolume)| {
        let mut p = pv();
        f(&mut p);
        p
    };
    let no_class = {
        let mut c = claim();
        spec_mut(&mut c).storage_class_name = None;
        c
    };
    let bad = Err(SOURCE_NOT_BOUND.to_string());
    let cases: Vec<CloneCase> = vec![
        ("happy path", claim(), Some(src()), Some(pv()), Ok("vol-src".into())),
        ("different classes are allowed", claim(), Some(edit_src(&|c| spec_mut(c).storage_class_name = Some("other".into()))), Some(pv()), Ok("vol-src".into())),
        ("larger than the source", sized("2Gi"), Some(src()), Some(pv()), Ok("vol-src".into())),
        ("source not found", claim(), None, None, Err(r#"error getting PVC src (namespace "default") from api server: persistentvolumeclaim "src" not found"#.into())),
        ("source pending", claim(), Some(edit_src(&|c| c.status.as_mut().unwrap().phase = Some("Pending".into()))), Some(pv()), Err("the PVC DataSource src must have a status of Bound.  Got Pending".into())),
        ("source lost", claim(), Some(edit_src(&|c| c.status.as_mut().unwrap().phase = Some("Lost".into()))), Some(pv()), Err("the PVC DataSource src must have a status of Bound.  Got Lost".into())),
        ("source being deleted", claim(), Some(edit_src(&|c| c.metadata.deletion_timestamp = deleting())), Some(pv()), Err("the PVC DataSource src is currently being deleted".into())),
        ("source without class", claim(), Some(edit_src(&|c| spec_mut(c).storage_class_name = None)), Some(pv()), Err("the source PVC (src) storageclass cannot be empty".into())),
        ("claim without class", no_class, Some(src()), Some(pv()), Err("the requested PVC (my-pvc) storageclass cannot be empty".into())),
        ("smaller than the source", sized("512Mi"), Some(src()), Some(pv()), Err("error, new PVC request must be greater than or equal in size to the specified PVC data source, requested 536870912 but source is 1073741824".into())),
        ("source without volume name", claim(), Some(edit_src(&|c| spec_mut(c).volume_name = None)), Some(pv()), Err("volume name is empty in source PVC src".into())),
        ("source PV not found", claim(), Some(src()), None, bad.clone()),
        ("source PV not CSI", claim(), Some(src()), Some(edit_pv(&|p| pv_spec(p).csi = None)), bad.clone()),
        ("source PV of another driver", claim(), Some(src()), Some(edit_pv(&|p| pv_spec(p).csi.as_mut().unwrap().driver = "other".into())), bad.clone()),
        ("source PV unbound", claim(), Some(src()), Some(edit_pv(&|p| pv_spec(p).claim_ref = None)), bad.clone()),
        ("source PV bound to another uid", claim(), Some(src()), Some(edit_pv(&|p| pv_spec(p).claim_ref.as_mut().unwrap().uid = Some("x".into()))), bad.clone()),
        ("source PV bound to another name", claim(), Some(src()), Some(edit_pv(&|p| pv_spec(p).claim_ref.as_mut().unwrap().name = Some("x".into()))), bad.clone()),
        ("source PV released", claim(), Some(src()), Some(edit_pv(&|p| p.status.as_mut().unwrap().phase = Some("Released".into()))), bad.clone()),
        ("block source, filesystem clone", claim(), Some(src()), Some(edit_pv(&|p| pv_spec(p).volume_mode = Some("Block".into()))),
            Err("the source PVC and destination PVCs must have the same volume mode for cloning.  Source is Block, but new PVC requested Filesystem".into())),
        ("filesystem source, block clone", block(claim()), Some(src()), Some(pv()),
            Err("the source PVC and destination PVCs must have the same volume mode for cloning.  Source is Filesystem, but new PVC requested Block".into())),
        ("block to block", block(claim()), Some(src()), Some(edit_pv(&|p| pv_spec(p).volume_mode = Some("Block".into()))), Ok("vol-src".into())),
    ];
    for (name, claim, source, pv, want) in cases {
        assert_eq!(cloned(&claim, source.as_ref(), pv.as_ref()), want, "{name}");
    }
}

#[test]
fn pending_clones_hold_the_source() {
    let source = source_claim();
    let clone = |name: &str, ns: &str, phase: &str, by_ref_only: bool| {
        let mut c = claim();
        c.metadata.name = Some(name.into());
        c.metadata.namespace = Some(ns.into());
        let reference = TypedLocalObjectReference {
            api_group: None,
            kind: names::PVC_KIND.into(),
            name: "src".into(),
        };
        if !by_ref_only {
            spec_mut(&mut c).data_source = Some(reference);
        }
        c.status = Some(PersistentVolumeClaimStatus {
            phase: Some(phase.into()),
            ..Default::default()
        });
        c
    };
    let claims = [
        clone("b", "default", "Pending", false),
        clone("a", "default", "Pending", false),
        clone("bound", "default", "Bound", false),
        clone("elsewhere", "other", "Pending", false),
        clone("by-ref", "default", "Pending", true),
        claim(),
    ];
    assert_eq!(pending_clones(&source, &claims), vec!["a", "b"]);
    assert!(pending_clones(&source, &claims[2..]).is_empty());
}

#[test]
fn a_held_source_is_looked_after_by_its_own_driver() {
    let annotated = |pairs: &[(&str, &str)]| {
        let mut c = source_claim();
        c.metadata.annotations = Some(
            pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        );
        c
    };
    let cases = [
        ("made beforehand: no annotation", annotated(&[]), true),
        (
            "ours",
            annotated(&[(names::ANN_STORAGE_PROVISIONER, DRIVER)]),
            true,
        ),
        (
            "ours, beta annotation only",
            annotated(&[(names::ANN_BETA_STORAGE_PROVISIONER, DRIVER)]),
            true,
        ),
        (
            "another driver's",
            annotated(&[(names::ANN_STORAGE_PROVISIONER, "other.csi.test")]),
            false,
        ),
        (
            "another driver's, beta annotation only",
            annotated(&[(names::ANN_BETA_STORAGE_PROVISIONER, "other.csi.test")]),
            false,
        ),
    ];
    for (what, claim, want) in cases {
        assert_eq!(guards_source(&claim, DRIVER), want, "{what}");
    }
}

#[test]
fn normalisation() {
    let with = |kind: &str, name: &str, group: Option<&str>| {
        let mut c = claim();
        spec_mut(&mut c).data_source = Some(TypedLocalObjectReference {
            api_group: group.map(str::to_string),
            kind: kind.into(),
            name: name.into(),
        });
        c
    };
    assert_eq!(normalise(&claim(), false), Ok(Normalised::Empty));
    assert_eq!(
        normalise(
            &with("VolumeSnapshot", "s", Some("snapshot.storage.k8s.io")),
            false
        ),
        Ok(Normalised::Source(DataSource {
            kind: SourceKind::Snapshot,
            name: "s".into(),
            namespace: "default".into()
        }))
    );
    assert_eq!(
        normalise(&with("Fancy", "s", Some("example.com")), false),
        Ok(Normalised::Populator {
            kind: "Fancy".into(),
            other_namespace: None
        })
    );
    let source = DataSource {
        kind: SourceKind::Claim,
        name: "src".into(),
        namespace: "default".into(),
    };
    let err = source.error("the PVC DataSource src is currently being deleted");
    assert_eq!(err.state, crate::errors::ProvisioningState::NoChange);
    assert_eq!(
        err.message,
        "error getting handle for DataSource Type PersistentVolumeClaim by Name src: the PVC DataSource src is currently being deleted"
    );
    assert_eq!(
        restored_snapshot(&with(
            "VolumeSnapshot",
            "s",
            Some("snapshot.storage.k8s.io")
        )),
        Some("s")
    );
    assert_eq!(
        restored_snapshot(&with("PersistentVolumeClaim", "s", None)),
        None
    );
}

/// After upstream's sweeper tests: RemoveFinalizerWhenNoPendingPVC, KeepFinalizerWhenPVCPending,
/// MultiplePVCs, DataSourceRefPending, cross-namespace references.
#[test]
fn orphan_sweep_keeps_only_snapshots_pending_claims_need() {
    use super::snapshot::unreferenced;
    use k8s_openapi::api::core::v1::TypedObjectReference;
    let pending = |ns: &str, snap: &str, phase: Option<&str>| {
        let mut c = claim();
        c.metadata.namespace = Some(ns.into());
        spec_mut(&mut c).data_source = Some(TypedLocalObjectReference {
            api_group: Some("snapshot.storage.k8s.io".into()),
            kind: "VolumeSnapshot".into(),
            name: snap.into(),
        });
        c.status = phase.map(|p| PersistentVolumeClaimStatus {
            phase: Some(p.into()),
            ..Default::default()
        });
        c
    };
    let by_ref_in = |group: Option<&str>, ns: &str, target_ns: Option<&str>, snap: &str| {
        let mut c = claim();
        c.metadata.namespace = Some(ns.into());
        spec_mut(&mut c).data_source_ref = Some(TypedObjectReference {
            api_group: group.map(str::to_string),
            kind: "VolumeSnapshot".into(),
            name: snap.into(),
            namespace: target_ns.map(str::to_string),
        });
        c
    };
    let by_ref = |ns: &str, target_ns: Option<&str>, snap: &str| {
        by_ref_in(Some("snapshot.storage.k8s.io"), ns, target_ns, snap)
    };
    let pair = |ns: &str, name: &str| (ns.to_string(), name.to_string());
    let protected = vec![
        pair("a", "pending"),
        pair("a", "no-phase"),
        pair("a", "bound"),
        pair("a", "nobody"),
        pair("b", "pending"),
        pair("a", "by-ref"),
        pair("c", "cross"),
        pair("a", "no-group"),
        pair("a", "other-group"),
    ];
    let claims = [
        pending("a", "pending", Some("Pending")),
        pending("a", "no-phase", None),
        pending("a", "bound", Some("Bound")),
        by_ref("a", None, "by-ref"),
        by_ref("a", Some("c"), "cross"),
        by_ref_in(None, "a", None, "no-group"),
        // Another group's VolumeSnapshot is a populator's source, not this snapshot.
        by_ref_in(Some("example.com"), "a", None, "other-group"),
    ];
    let refs: Vec<&PersistentVolumeClaim> = claims.iter().collect();
    let got: Vec<(String, String)> = unreferenced(&protected, &refs)
        .into_iter()
        .cloned()
        .collect();
    assert_eq!(
        got,
        vec![
            pair("a", "bound"),
            pair("a", "nobody"),
            pair("b", "pending"),
            pair("a", "other-group")
        ]
    );
    assert_eq!(unreferenced(&protected, &[]).len(), protected.len());
}

fn cross_namespace_claim(group: Option<&str>, kind: &str, name: &str) -> PersistentVolumeClaim {
    use k8s_openapi::api::core::v1::TypedObjectReference;
    let mut c = claim();
    spec_mut(&mut c).data_source_ref = Some(TypedObjectReference {
        api_group: group.map(str::to_string),
        kind: kind.into(),
        name: name.into(),
        namespace: Some("src-ns".into()),
    });
    c
}

#[test]
fn cross_namespace_sources_need_the_gate() {
    let c = cross_namespace_claim(Some("snapshot.storage.k8s.io"), "VolumeSnapshot", "snap");
    let off = normalise(&c, false).unwrap_err();
    assert_eq!(
        (off.state, off.message.as_str()),
        (
            crate::errors::ProvisioningState::Finished,
            "dataSourceRef namespace specified but the CrossNamespaceVolumeDataSource feature is disabled"
        )
    );
    assert_eq!(
        normalise(&c, true),
        Ok(Normalised::Source(DataSource {
            kind: SourceKind::Snapshot,
            name: "snap".into(),
            namespace: "src-ns".into()
        }))
    );
}

/// After upstream's ReferenceGrant permutations in TestProvisionFromSnapshot.
#[test]
fn reference_grants_allow_exactly_what_they_name() {
    use super::grant::{GrantFrom, GrantTo, ReferenceGrant, ReferenceGrantSpec, check};
    let snap = cross_namespace_claim(Some("snapshot.storage.k8s.io"), "VolumeSnapshot", "snap");
    let pvc = cross_namespace_claim(None, "PersistentVolumeClaim", "src");
    let from = |group: &str, kind: &str, ns: &str| GrantFrom {
        group: group.into(),
        kind: kind.into(),
        namespace: ns.into(),
    };
    let to = |group: &str, kind: &str, name: Option<&str>| GrantTo {
        group: group.into(),
        kind: kind.into(),
        name: name.map(str::to_string),
    };
    let grant = |from: Vec<GrantFrom>, to: Vec<GrantTo>| ReferenceGrant {
        spec: ReferenceGrantSpec { from, to },
    };
    let ok_from = || vec![from("", "PersistentVolumeClaim", "default")];
    let snap_to = |name: Option<&str>| vec![to("snapshot.storage.k8s.io", "VolumeSnapshot", name)];
    let denied = Err(
        "accessing src-ns/snap of VolumeSnapshot dataSource from default/my-pvc isn't allowed"
            .to_string(),
    );
    type Case<'a> = (
        &'a str,
        &'a PersistentVolumeClaim,
        Vec<ReferenceGrant>,
        Result<(), String>,
    );
    let cases: Vec<Case> = vec![
        ("named", &snap, vec![grant(ok_from(), snap_to(Some("snap")))], Ok(())),
        ("any name", &snap, vec![grant(ok_from(), snap_to(None))], Ok(())),
        ("empty name is any", &snap, vec![grant(ok_from(), snap_to(Some("")))], Ok(())),
        ("no grants", &snap, vec![], denied.clone()),
        ("other name", &snap, vec![grant(ok_from(), snap_to(Some("x")))], denied.clone()),
        ("wrong from namespace", &snap, vec![grant(vec![from("", "PersistentVolumeClaim", "x")], snap_to(None))], denied.clone()),
        ("wrong from group", &snap, vec![grant(vec![from("apps", "PersistentVolumeClaim", "default")], snap_to(None))], denied.clone()),
        ("wrong from kind", &snap, vec![grant(vec![from("", "Pod", "default")], snap_to(None))], denied.clone()),
        ("wrong to group", &snap, vec![grant(ok_from(), vec![to("x", "VolumeSnapshot", None)])], denied.clone()),
        ("wrong to kind", &snap, vec![grant(ok_from(), vec![to("snapshot.storage.k8s.io", "X", None)])], denied.clone()),
        ("empty from", &snap, vec![grant(vec![], snap_to(None))], denied.clone()),
        ("empty to", &snap, vec![grant(ok_from(), vec![])], denied.clone()),
        ("from and to in different grants", &snap, vec![grant(ok_from(), vec![]), grant(vec![], snap_to(None))], denied),
        ("core group claim", &pvc, vec![grant(ok_from(), vec![to("", "PersistentVolumeClaim", Some("src"))])], Ok(())),
        ("a group given for a core kind", &pvc, vec![grant(ok_from(), vec![to("core", "PersistentVolumeClaim", None)])],
            Err("accessing src-ns/src of PersistentVolumeClaim dataSource from default/my-pvc isn't allowed".into())),
    ];
    for (name, claim, grants, want) in cases {
        assert_eq!(check(claim, &grants), want, "{name}");
    }
}

#[test]
fn only_a_data_source_ref_into_another_namespace_needs_a_grant() {
    use k8s_openapi::api::core::v1::TypedObjectReference;
    let by_ref = |target_ns: Option<&str>| {
        let mut c = claim();
        spec_mut(&mut c).data_source_ref = Some(TypedObjectReference {
            api_group: Some("example.com".into()),
            kind: "Widget".into(),
            name: "w".into(),
            namespace: target_ns.map(str::to_string),
        });
        c
    };
    // (claim, namespace that needs a grant); the claim is in "default".
    let cases = [
        (claim(), None),
        (by_ref(None), None),
        (by_ref(Some("")), None),
        (by_ref(Some("default")), None),
        (by_ref(Some("next-door")), Some("next-door")),
    ];
    for (c, want) in &cases {
        let other_namespace = match normalise(c, true) {
            Ok(Normalised::Populator {
                other_namespace, ..
            }) => other_namespace,
            Ok(Normalised::Empty) => None,
            other => panic!("{other:?}"),
        };
        assert_eq!(other_namespace.as_deref(), *want, "{:?}", c.spec);
    }
}
