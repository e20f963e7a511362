use super::*;
use crate::testutil::{DRIVER, annotate, claim, class, map, spec_mut, strings};
use csi::v1::Topology;
use csi::v1::volume_capability::{AccessMode, AccessType, MountVolume};
use k8s_openapi::api::core::v1::{
    NodeSelector, NodeSelectorRequirement, NodeSelectorTerm, VolumeNodeAffinity,
};
use pretty_assertions::assert_eq;

fn capability(mode: Mode) -> VolumeCapability {
    VolumeCapability {
        access_mode: Some(AccessMode { mode: mode as i32 }),
        access_type: Some(AccessType::Mount(MountVolume::default())),
    }
}

fn volume() -> Volume {
    Volume {
        capacity_bytes: 5 << 30,
        volume_id: "vol-123".into(),
        volume_context: [("foo".to_string(), "bar".to_string())].into(),
        content_source: None,
        accessible_topology: vec![],
    }
}

fn secret(name: &str, namespace: &str) -> Option<SecretRef> {
    Some(SecretRef {
        name: name.into(),
        namespace: namespace.into(),
    })
}

struct Fixture {
    claim: PersistentVolumeClaim,
    class: StorageClass,
    volume: Volume,
    capabilities: Vec<VolumeCapability>,
    secrets: SecretRefs,
}

impl Fixture {
    fn new() -> Fixture {
        Fixture {
            claim: claim(),
            class: StorageClass {
                reclaim_policy: Some("Delete".into()),
                ..class(DRIVER)
            },
            volume: volume(),
            capabilities: vec![capability(Mode::SingleNodeWriter)],
            secrets: SecretRefs::default(),
        }
    }

    fn build(&self, read_only_flag: bool, topology: bool, vac: bool) -> PersistentVolume {
        build_persistent_volume(&PersistentVolumeInputs {
            volume_name: "pvc-0f1c",
            claim: &self.claim,
            class: &self.class,
            driver_name: DRIVER,
            provisioner_identity: "1700000000000-1234-hostpath.csi.k8s.io",
            volume: &self.volume,
            capacity_bytes: capacity_decision(1 << 30, self.volume.capacity_bytes)
                .bytes(1 << 30)
                .unwrap(),
            fs_type: "ext4",
            capabilities: &self.capabilities,
            controller_publish_read_only: read_only_flag,
            secrets: &self.secrets,
            supports_topology: topology,
            volume_attributes_class_enabled: vac,
        })
    }
}

fn csi(pv: &PersistentVolume) -> &CSIPersistentVolumeSource {
    pv.spec.as_ref().unwrap().csi.as_ref().unwrap()
}

#[test]
fn normal_provision() {
    let pv = Fixture::new().build(false, false, true);
    let want = PersistentVolume {
        metadata: ObjectMeta {
            name: Some("pvc-0f1c".into()),
            annotations: Some(map(&[
                ("pv.kubernetes.io/provisioned-by", DRIVER),
                ("volume.kubernetes.io/provisioner-deletion-secret-name", ""),
                (
                    "volume.kubernetes.io/provisioner-deletion-secret-namespace",
                    "",
                ),
            ])),
            finalizers: Some(strings(&[
                "external-provisioner.volume.kubernetes.io/finalizer",
            ])),
            ..ObjectMeta::default()
        },
        spec: Some(PersistentVolumeSpec {
            access_modes: Some(strings(&["ReadWriteOnce"])),
            capacity: Some(BTreeMap::from([(
                "storage".to_string(),
                Quantity("5Gi".into()),
            )])),
            csi: Some(CSIPersistentVolumeSource {
                driver: DRIVER.into(),
                volume_handle: "vol-123".into(),
                volume_attributes: Some(map(&[
                    ("foo", "bar"),
                    (
                        "storage.kubernetes.io/csiProvisionerIdentity",
                        "1700000000000-1234-hostpath.csi.k8s.io",
                    ),
                ])),
                fs_type: Some("ext4".into()),
                ..CSIPersistentVolumeSource::default()
            }),
            claim_ref: Some(ObjectReference {
                api_version: Some("v1".into()),
                kind: Some("PersistentVolumeClaim".into()),
                name: Some("my-pvc".into()),
                namespace: Some("default".into()),
                uid: Some(crate::testutil::UID.into()),
                resource_version: Some("42".into()),
                field_path: None,
            }),
            storage_class_name: Some("sc".into()),
            persistent_volume_reclaim_policy: Some("Delete".into()),
            ..PersistentVolumeSpec::default()
        }),
        status: None,
    };
    assert_eq!(pv, want);
}

#[test]
fn secrets_reclaim_policy_mount_options_and_mode() {
    let mut f = Fixture::new();
    f.secrets = SecretRefs {
        provisioner: secret("prov", "ns1"),
        controller_publish: secret("cp", "ns2"),
        node_stage: secret("ns", "ns3"),
        node_publish: secret("np", "ns4"),
        controller_expand: secret("ce", "ns5"),
        node_expand: secret("ne", "ns6"),
        controller_modify: secret("cm", "ns7"),
    };
    f.class.reclaim_policy = Some("Retain".into());
    f.class.mount_options = Some(strings(&["noatime"]));
    spec_mut(&mut f.claim).volume_mode = Some("Filesystem".into());
    let pv = f.build(false, false, true);
    let annotations = pv.metadata.annotations.clone().unwrap();
    assert_eq!(
        annotations["volume.kubernetes.io/provisioner-deletion-secret-name"],
        "prov"
    );
    assert_eq!(
        annotations["volume.kubernetes.io/provisioner-deletion-secret-namespace"],
        "ns1"
    );
    assert_eq!(
        annotations["volume.kubernetes.io/controller-modify-secret-name"],
        "cm"
    );
    assert_eq!(
        annotations["volume.kubernetes.io/controller-modify-secret-namespace"],
        "ns7"
    );
    let source = csi(&pv);
    let r = |n: &str, ns: &str| {
        Some(SecretReference {
            name: Some(n.into()),
            namespace: Some(ns.into()),
        })
    };
    assert_eq!(source.controller_publish_secret_ref, r("cp", "ns2"));
    assert_eq!(source.node_stage_secret_ref, r("ns", "ns3"));
    assert_eq!(source.node_publish_secret_ref, r("np", "ns4"));
    assert_eq!(source.controller_expand_secret_ref, r("ce", "ns5"));
    assert_eq!(source.node_expand_secret_ref, r("ne", "ns6"));
    let spec = pv.spec.unwrap();
    assert_eq!(
        spec.persistent_volume_reclaim_policy.as_deref(),
        Some("Retain")
    );
    assert_eq!(spec.mount_options, Some(strings(&["noatime"])));
    assert_eq!(spec.volume_mode.as_deref(), Some("Filesystem"));
    assert_eq!(pv.metadata.finalizers, None, "only a Delete PV gets ours");
}

#[test]
fn block_volume_has_no_fs_type() {
    let mut f = Fixture::new();
    spec_mut(&mut f.claim).volume_mode = Some("Block".into());
    let pv = f.build(false, false, true);
    assert_eq!(csi(&pv).fs_type, None);
    assert_eq!(pv.spec.unwrap().volume_mode.as_deref(), Some("Block"));
}

#[test]
fn read_only_rule() {
    let rox = capability(Mode::MultiNodeReaderOnly);
    let rwx = capability(Mode::MultiNodeMultiWriter);
    let cases = [
        (vec![rox.clone()], true, Some(true)),
        (vec![rox.clone()], false, None),
        (vec![rwx.clone()], true, None),
        (vec![rox.clone(), rwx], true, None),
        (vec![rox.clone(), rox], true, None),
        (vec![], true, None),
    ];
    for (capabilities, flag, want) in cases {
        let mut f = Fixture::new();
        f.capabilities = capabilities;
        assert_eq!(
            csi(&f.build(flag, false, true)).read_only,
            want,
            "{:?} {flag}",
            f.capabilities.len()
        );
    }
}

#[test]
fn volume_context_wins_and_identity_is_kept() {
    let mut f = Fixture::new();
    f.volume.volume_context = [(
        names::PROVISIONER_IDENTITY_KEY.to_string(),
        "driver-said".to_string(),
    )]
    .into();
    let attributes = csi(&f.build(false, false, true))
        .volume_attributes
        .clone()
        .unwrap();
    assert_eq!(
        attributes,
        map(&[(names::PROVISIONER_IDENTITY_KEY, "driver-said")])
    );
}

#[test]
fn topology_only_when_supported() {
    let mut f = Fixture::new();
    f.volume.accessible_topology = vec![Topology {
        segments: [("zone".to_string(), "z1".to_string())].into(),
    }];
    let want = Some(VolumeNodeAffinity {
        required: Some(NodeSelector {
            node_selector_terms: vec![NodeSelectorTerm {
                match_expressions: Some(vec![NodeSelectorRequirement {
                    key: "zone".into(),
                    operator: "In".into(),
                    values: Some(strings(&["z1"])),
                }]),
                match_fields: None,
            }],
        }),
    });
    assert_eq!(f.build(false, true, true).spec.unwrap().node_affinity, want);
    assert_eq!(
        f.build(false, false, true).spec.unwrap().node_affinity,
        None
    );
}

#[test]
fn volume_attributes_class_follows_the_gate() {
    let mut f = Fixture::new();
    spec_mut(&mut f.claim).volume_attributes_class_name = Some("gold".into());
    assert_eq!(
        f.build(false, false, true)
            .spec
            .unwrap()
            .volume_attributes_class_name
            .as_deref(),
        Some("gold")
    );
    assert_eq!(
        f.build(false, false, false)
            .spec
            .unwrap()
            .volume_attributes_class_name,
        None
    );
}

#[test]
fn storage_class_name_from_the_legacy_annotation() {
    let mut f = Fixture::new();
    f.claim = annotate(f.claim, names::ANN_BETA_STORAGE_CLASS, "legacy");
    assert_eq!(
        f.build(false, false, true)
            .spec
            .unwrap()
            .storage_class_name
            .as_deref(),
        Some("legacy")
    );
    spec_mut(&mut f.claim).storage_class_name = None;
    f.claim.metadata.annotations = None;
    assert_eq!(
        f.build(false, false, true).spec.unwrap().storage_class_name,
        None
    );
}

// "fail vol with less capacity", "provision with size 0" and TestCreateDriverReturnsInvalidCapacity.
#[test]
fn capacity_decisions() {
    let cases = [
        (1 << 30, 0, CapacityDecision::UseRequested, Some(1 << 30)),
        (
            1 << 30,
            1 << 30,
            CapacityDecision::Use(1 << 30),
            Some(1 << 30),
        ),
        (
            1 << 30,
            2 << 30,
            CapacityDecision::Use(2 << 30),
            Some(2 << 30),
        ),
        (
            1 << 30,
            100,
            CapacityDecision::TooSmall {
                got: 100,
                want: 1 << 30,
            },
            None,
        ),
        (0, 0, CapacityDecision::UseRequested, Some(0)),
        (0, -5, CapacityDecision::TooSmall { got: -5, want: 0 }, None),
    ];
    for (requested, response, want, bytes) in cases {
        let decision = capacity_decision(requested, response);
        assert_eq!(decision, want, "{requested} {response}");
        assert_eq!(decision.bytes(requested), bytes);
    }
    assert_eq!(
        too_small_message(100, 1 << 30),
        "created volume capacity 100 less than requested capacity 1073741824"
    );
}

#[rstest::rstest]
#[case::no_source(None, None, true, false)]
#[case::data_source(Some(""), None, false, true)]
#[case::same_namespace_ref_only(None, Some(""), true, false)]
#[case::other_namespace_ref_with_gate(None, Some("src-ns"), true, true)]
#[case::other_namespace_ref_without_gate(None, Some("src-ns"), false, false)]
fn content_source_check(
    #[case] data_source: Option<&str>,
    #[case] ref_namespace: Option<&str>,
    #[case] gate: bool,
    #[case] wanted: bool,
) {
    use csi::v1::VolumeContentSource;
    use k8s_openapi::api::core::v1::{TypedLocalObjectReference, TypedObjectReference};
    let mut c = claim();
    spec_mut(&mut c).data_source = data_source.map(|_| TypedLocalObjectReference {
        api_group: None,
        kind: "PersistentVolumeClaim".into(),
        name: "src".into(),
    });
    spec_mut(&mut c).data_source_ref = ref_namespace.map(|ns| TypedObjectReference {
        api_group: None,
        kind: "PersistentVolumeClaim".into(),
        name: "src".into(),
        namespace: (!ns.is_empty()).then(|| ns.to_string()),
    });
    let mut answered = volume();
    assert_eq!(missing_content_source(&c, &answered, gate), wanted);
    answered.content_source = Some(VolumeContentSource { r#type: None });
    assert!(!missing_content_source(&c, &answered, gate));
}
