//! Everything from a claim and its class to the CreateVolumeRequest and the PV: `prepare`, the
//! request builder and the PV builder, with arbitrary claims, classes, flags and driver answers.
//!
//! Properties: the volume (PV) name is a DNS-1123 subdomain of at most 253 bytes; the request
//! asks for the claim's bytes, carries no reserved parameter but the `--extra-create-metadata`
//! ones, and its log form never shows the secret; a kept PV has our name, valid annotation keys
//! and finalizers, valid secret references, a canonical non-negative capacity no smaller than
//! the request, and is pre-bound to the claim.
#![no_main]

use std::collections::BTreeMap;

use arbitrary::{Arbitrary, Unstructured};
use csi::v1::{Topology, Volume};
use csi_provisioner_fuzz::{
    assert_canonical_quantity, is_label, is_qualified_name, is_subdomain, name, word,
};
use k8s_openapi::api::core::v1::{
    PersistentVolumeClaim, PersistentVolumeClaimSpec, TopologySelectorLabelRequirement,
    TopologySelectorTerm, TypedLocalObjectReference, VolumeResourceRequirements,
};
use k8s_openapi::api::storage::v1::StorageClass;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use libfuzzer_sys::fuzz_target;
use provisioning::names;
use provisioning::prepare::{
    DriverCapabilities, PrepareInputs, Prepared, ProvisionerConfig, TopologyFacts, prepare,
};
use provisioning::pv::{
    PersistentVolumeInputs, build_persistent_volume, capacity_decision, missing_content_source,
};
use provisioning::secrets::SecretRef;

const MARKER: &str = "Zq9FuzzSecretMarker";
const DRIVER: &str = "csi.example.com";
const PROVISIONERS: &[&str] = &[
    DRIVER,
    "kubernetes.io/aws-ebs",
    "kubernetes.io/gce-pd",
    "kubernetes.io/azure-disk",
    "kubernetes.io/portworx-volume",
    "kubernetes.io/vsphere-volume",
];
const PARAM_KEYS: &[&str] = &[
    "csi.storage.k8s.io/fstype",
    "csi.storage.k8s.io/provisioner-secret-name",
    "csi.storage.k8s.io/provisioner-secret-namespace",
    "csi.storage.k8s.io/node-stage-secret-name",
    "csi.storage.k8s.io/node-stage-secret-namespace",
    "csi.storage.k8s.io/controller-modify-secret-name",
    "csi.storage.k8s.io/controller-modify-secret-namespace",
    "csi.storage.k8s.io/secret-name",
    "csi.storage.k8s.io/secret-namespace",
    "csi.storage.k8s.io/unknown",
    "fstype",
    "fsType",
    "type",
    "zone",
    "zones",
];
const PARAM_VALUES: &[&str] = &[
    "${pvc.name}",
    "${pvc.namespace}",
    "${pv.name}",
    "${pvc.annotations['team']}",
    "ext4",
    "xfs",
    "us-east-1a",
    "gp2",
    "secret",
    "default",
];
const QUANTITIES: &[&str] = &[
    "1Gi",
    "0",
    "1",
    "1.5Gi",
    "-1Gi",
    "100E",
    "1k",
    "0.1",
    "1e3",
    "+",
    "9223372036854775807",
];
const ACCESS_MODES: &[&str] = &[
    "ReadWriteOnce",
    "ReadOnlyMany",
    "ReadWriteMany",
    "ReadWriteOncePod",
];
const ANNOTATION_KEYS: &[&str] = &[
    names::ANN_SELECTED_NODE,
    names::ANN_STORAGE_PROVISIONER,
    names::ANN_BETA_STORAGE_CLASS,
    "team",
];
const UIDS: &[&str] = &["0f1c2d3e-aaaa-bbbb-cccc-1234567890ab", "abc", ""];
const PREFIXES: &[&str] = &["pvc", "Pvc", "a.b", "-", ""];
const KINDS: &[&str] = &[names::SNAPSHOT_KIND, names::PVC_KIND, "Populator"];
const TOPOLOGY_KEYS: &[&str] = &["zone", "node", "topology.kubernetes.io/zone"];

#[derive(Debug)]
struct Input {
    claim: PersistentVolumeClaim,
    class: StorageClass,
    prefix: String,
    uuid_length: i32,
    default_fs_type: String,
    extra_create_metadata: bool,
    vac_enabled: bool,
    cross_namespace: bool,
    capabilities: DriverCapabilities,
    node_keys: Vec<String>,
    node_labels: BTreeMap<String, String>,
    volume: Volume,
    controller_publish_read_only: bool,
}

fn map(
    u: &mut Unstructured<'_>,
    keys: &[&str],
    values: &[&str],
    max: usize,
) -> arbitrary::Result<BTreeMap<String, String>> {
    let mut m = BTreeMap::new();
    for _ in 0..u.int_in_range(0..=max)? {
        let key = word(u, keys)?;
        let value = if u.ratio(1, 2)? {
            word(u, values)?
        } else {
            name(u)?
        };
        m.insert(key, value);
    }
    Ok(m)
}

fn maybe<T>(
    u: &mut Unstructured<'_>,
    f: impl FnOnce(&mut Unstructured<'_>) -> arbitrary::Result<T>,
) -> arbitrary::Result<Option<T>> {
    if u.ratio(1, 3)? {
        Ok(None)
    } else {
        f(u).map(Some)
    }
}

fn claim(u: &mut Unstructured<'_>) -> arbitrary::Result<PersistentVolumeClaim> {
    let annotations = map(u, ANNOTATION_KEYS, &["n1", DRIVER, "fast"], 3)?;
    let data_source = maybe(u, |u| {
        Ok(TypedLocalObjectReference {
            api_group: maybe(u, |u| word(u, &[names::SNAPSHOT_API_GROUP, ""]))?,
            kind: word(u, KINDS)?,
            name: name(u)?,
        })
    })?;
    let requests = maybe(u, |u| {
        Ok(BTreeMap::from([(
            word(u, &[names::RESOURCE_STORAGE])?,
            Quantity(word(u, QUANTITIES)?),
        )]))
    })?;
    Ok(PersistentVolumeClaim {
        metadata: ObjectMeta {
            name: maybe(u, name)?,
            namespace: maybe(u, name)?,
            uid: maybe(u, |u| word(u, UIDS))?,
            annotations: Some(annotations),
            ..ObjectMeta::default()
        },
        spec: maybe(u, |u| {
            Ok(PersistentVolumeClaimSpec {
                access_modes: maybe(u, |u| {
                    (0..u.int_in_range(0..=2)?)
                        .map(|_| word(u, ACCESS_MODES))
                        .collect()
                })?,
                volume_mode: maybe(u, |u| word(u, &["Block", "Filesystem"]))?,
                storage_class_name: maybe(u, |u| word(u, &["fast", ""]))?,
                volume_attributes_class_name: maybe(u, |u| word(u, &["gold", ""]))?,
                data_source,
                resources: Some(VolumeResourceRequirements {
                    requests,
                    limits: None,
                }),
                ..PersistentVolumeClaimSpec::default()
            })
        })?,
        status: None,
    })
}

fn class(u: &mut Unstructured<'_>) -> arbitrary::Result<StorageClass> {
    let allowed = maybe(u, |u| {
        (0..u.int_in_range(0..=2)?)
            .map(|_| {
                Ok(TopologySelectorTerm {
                    match_label_expressions: Some(vec![TopologySelectorLabelRequirement {
                        key: word(u, TOPOLOGY_KEYS)?,
                        values: vec![word(u, &["a", "b", "us-east-1a"])?],
                    }]),
                })
            })
            .collect()
    })?;
    Ok(StorageClass {
        metadata: ObjectMeta {
            name: Some("fast".into()),
            ..ObjectMeta::default()
        },
        provisioner: word(u, PROVISIONERS)?,
        parameters: maybe(u, |u| map(u, PARAM_KEYS, PARAM_VALUES, 5))?,
        reclaim_policy: maybe(u, |u| word(u, &["Delete", "Retain"]))?,
        mount_options: maybe(u, |u| {
            (0..u.int_in_range(0..=2)?).map(|_| name(u)).collect()
        })?,
        allowed_topologies: allowed,
        volume_binding_mode: maybe(u, |u| word(u, &["WaitForFirstConsumer", "Immediate"]))?,
        allow_volume_expansion: None,
    })
}

impl<'a> Arbitrary<'a> for Input {
    fn arbitrary(u: &mut Unstructured<'a>) -> arbitrary::Result<Self> {
        let capabilities = DriverCapabilities {
            controller_service: u.ratio(9, 10)?,
            create_delete_volume: u.ratio(9, 10)?,
            volume_accessibility_constraints: bool::arbitrary(u)?,
            create_delete_snapshot: bool::arbitrary(u)?,
            clone_volume: bool::arbitrary(u)?,
            modify_volume: bool::arbitrary(u)?,
            single_node_multi_writer: bool::arbitrary(u)?,
            ..DriverCapabilities::default()
        };
        let accessible_topology = (0..u.int_in_range(0..=2)?)
            .map(|_| {
                Ok(Topology {
                    segments: map(u, TOPOLOGY_KEYS, &["a", "b"], 2)?.into_iter().collect(),
                })
            })
            .collect::<arbitrary::Result<_>>()?;
        Ok(Input {
            claim: claim(u)?,
            class: class(u)?,
            prefix: word(u, PREFIXES)?,
            uuid_length: if u.ratio(1, 2)? {
                -1
            } else {
                i32::arbitrary(u)? % 40
            },
            default_fs_type: word(u, &["", "ext4"])?,
            extra_create_metadata: bool::arbitrary(u)?,
            vac_enabled: bool::arbitrary(u)?,
            cross_namespace: bool::arbitrary(u)?,
            capabilities,
            node_keys: (0..u.int_in_range(0..=2)?)
                .map(|_| word(u, TOPOLOGY_KEYS))
                .collect::<arbitrary::Result<_>>()?,
            node_labels: map(u, TOPOLOGY_KEYS, &["a", "b"], 3)?,
            volume: Volume {
                volume_id: word(u, &["vol-1", "projects/p/zones/z/disks/d", ""])?,
                capacity_bytes: match u.int_in_range(0..=3)? {
                    0 => 0,
                    1 => -1,
                    2 => 1 << 30,
                    _ => i64::arbitrary(u)?,
                },
                volume_context: map(u, &[names::PROVISIONER_IDENTITY_KEY, "k"], &["v"], 2)?
                    .into_iter()
                    .collect(),
                content_source: None,
                accessible_topology,
            },
            controller_publish_read_only: bool::arbitrary(u)?,
        })
    }
}

fn assert_valid_ref(r: &Option<SecretRef>) {
    if let Some(r) = r {
        assert!(is_subdomain(&r.name), "secret name {:?}", r.name);
        assert!(is_label(&r.namespace), "secret namespace {:?}", r.namespace);
    }
}

fuzz_target!(|input: Input| {
    let config = ProvisionerConfig {
        driver_name: DRIVER,
        volume_name_prefix: &input.prefix,
        volume_name_uuid_length: input.uuid_length,
        default_fs_type: &input.default_fs_type,
        extra_create_metadata: input.extra_create_metadata,
        volume_attributes_class_enabled: input.vac_enabled,
        cross_namespace_data_sources: input.cross_namespace,
    };
    let nodes: Vec<(&str, &[String])> = vec![("n1", &input.node_keys)];
    let labels: Vec<(&str, &BTreeMap<String, String>)> = vec![("n1", &input.node_labels)];
    let facts = TopologyFacts {
        strict_topology: false,
        immediate_topology: true,
        selected_node_topology_keys: Some(&input.node_keys),
        selected_node_labels: Some(&input.node_labels),
        csi_node_topology_keys: &nodes,
        node_labels: &labels,
        random_hash: 7,
    };
    let prepared = prepare(&PrepareInputs {
        claim: &input.claim,
        class: Some(&input.class),
        config: &config,
        capabilities: input.capabilities,
        topology: input
            .capabilities
            .volume_accessibility_constraints
            .then_some(facts),
        reused_topology: None,
    });
    let plan = match prepared {
        Ok(Prepared::Provision(plan)) => plan,
        Ok(Prepared::ExternalPopulator { .. }) => return,
        Err(e) => {
            assert!(!e.message.is_empty());
            return;
        }
    };
    assert!(
        is_subdomain(&plan.volume_name),
        "volume name {:?}",
        plan.volume_name
    );
    assert!(plan.requested_bytes >= 0);
    for key in plan.parameters.keys() {
        if key.starts_with(names::CSI_PARAMETER_PREFIX) {
            assert!(
                input.extra_create_metadata
                    && [
                        names::PARAM_PVC_NAME,
                        names::PARAM_PVC_NAMESPACE,
                        names::PARAM_PV_NAME
                    ]
                    .contains(&key.as_str()),
                "reserved key {key:?} reaches the driver"
            );
        }
    }
    let s = &plan.secrets;
    for r in [
        &s.provisioner,
        &s.controller_publish,
        &s.node_stage,
        &s.node_publish,
        &s.controller_expand,
        &s.node_expand,
        &s.controller_modify,
    ] {
        assert_valid_ref(r);
    }

    let secrets = BTreeMap::from([("password".to_string(), MARKER.to_string())]);
    let request = plan
        .create_volume_request(&input.claim, secrets, BTreeMap::new(), None)
        .expect("prepare accepted the claim, so its request builds");
    assert_eq!(request.name, plan.volume_name);
    assert_eq!(
        request.capacity_range.map(|c| c.required_bytes),
        Some(plan.requested_bytes)
    );
    let logged = csi::sanitize(&request).to_string();
    if !format!("{:?}{:?}", input.claim, input.class).contains(MARKER) {
        assert!(!logged.contains(MARKER), "secret in {logged}");
    }

    // The shell refuses an answer without a volume id before building anything.
    if input.volume.volume_id.is_empty() {
        return;
    }
    let Some(bytes) = capacity_decision(plan.requested_bytes, input.volume.capacity_bytes)
        .bytes(plan.requested_bytes)
    else {
        return;
    };
    if missing_content_source(&input.claim, &input.volume, input.cross_namespace) {
        return;
    }
    let pv = build_persistent_volume(&PersistentVolumeInputs {
        volume_name: &plan.volume_name,
        claim: &input.claim,
        class: &input.class,
        driver_name: DRIVER,
        provisioner_identity: "1700000000000-1234-csi.example.com",
        volume: &input.volume,
        capacity_bytes: bytes,
        fs_type: &plan.fs_type,
        capabilities: &plan.capabilities,
        controller_publish_read_only: input.controller_publish_read_only,
        secrets: &plan.secrets,
        supports_topology: input.capabilities.volume_accessibility_constraints,
        volume_attributes_class_enabled: input.vac_enabled,
    });
    assert_eq!(pv.metadata.name.as_deref(), Some(plan.volume_name.as_str()));
    for key in pv
        .metadata
        .annotations
        .iter()
        .flatten()
        .map(|(k, _)| k)
        .chain(pv.metadata.labels.iter().flatten().map(|(k, _)| k))
    {
        assert!(is_qualified_name(key), "PV metadata key {key:?}");
    }
    for f in pv.metadata.finalizers.iter().flatten() {
        assert!(is_qualified_name(f), "PV finalizer {f:?}");
    }
    let spec = pv.spec.as_ref().expect("a PV has a spec");
    let q = &spec.capacity.as_ref().expect("a PV has a capacity")[names::RESOURCE_STORAGE];
    assert!(bytes >= plan.requested_bytes && bytes >= 0);
    assert_canonical_quantity(&q.0, bytes);
    let claim_ref = spec.claim_ref.as_ref().expect("the PV is pre-bound");
    assert_eq!(claim_ref.name, input.claim.metadata.name);
    assert_eq!(claim_ref.namespace, input.claim.metadata.namespace);
    assert_eq!(claim_ref.uid, input.claim.metadata.uid);
    if let Some(affinity) = &spec.node_affinity {
        let terms = &affinity
            .required
            .as_ref()
            .expect("required terms")
            .node_selector_terms;
        assert!(!terms.is_empty(), "node affinity without terms");
    }
    if plan.migrated_from.is_some() {
        let _ = provisioning::migration::csi_pv_to_in_tree(&pv);
    }
});
