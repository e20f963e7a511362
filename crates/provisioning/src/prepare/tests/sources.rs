//! Data sources, VolumeAttributesClasses, secrets fetching and topology in `prepare`.

use super::*;
use crate::data_source::{DataSource, SourceKind};
use pretty_assertions::assert_eq;

fn with_data_source(kind: &str, name: &str, group: Option<&str>) -> PersistentVolumeClaim {
    let mut c = claim();
    spec_mut(&mut c).data_source = Some(TypedLocalObjectReference {
        api_group: group.map(str::to_string),
        kind: kind.into(),
        name: name.into(),
    });
    c
}

#[test]
fn data_sources() {
    let sc = class(DRIVER);
    let populator = with_data_source("Fancy", "src", Some("populators.example.com"));
    assert_eq!(
        run(&populator, Some(&sc), &CONFIG, caps()),
        Ok(Prepared::ExternalPopulator {
            kind: "Fancy".into(),
            other_namespace: None
        })
    );

    let mut by_ref = claim();
    spec_mut(&mut by_ref).data_source_ref = Some(TypedObjectReference {
        api_group: Some("populators.example.com".into()),
        kind: "Fancy".into(),
        name: "src".into(),
        namespace: None,
    });
    assert_eq!(
        run(&by_ref, Some(&sc), &CONFIG, caps()),
        Ok(Prepared::ExternalPopulator {
            kind: "Fancy".into(),
            other_namespace: None
        })
    );

    let mut cross_namespace = by_ref.clone();
    spec_mut(&mut cross_namespace)
        .data_source_ref
        .as_mut()
        .unwrap()
        .namespace = Some("other".into());
    let cases = [
        (
            with_data_source("VolumeSnapshot", "snap", Some("example.com")),
            "the PVC source does not belong to the right APIGroup. Expected snapshot.storage.k8s.io, Got example.com".to_string(),
        ),
        (with_data_source("VolumeSnapshot", "", Some("snapshot.storage.k8s.io")), "the PVC source not found for PVC my-pvc".to_string()),
        (cross_namespace.clone(), "dataSourceRef namespace specified but the CrossNamespaceVolumeDataSource feature is disabled".to_string()),
    ];
    for (c, message) in cases {
        assert_eq!(
            failure(run(&c, Some(&sc), &CONFIG, caps())),
            (Finished, message)
        );
    }
    // With the gate a populator's source elsewhere goes on, carrying the namespace whose
    // ReferenceGrant the caller must check first.
    let gated = ProvisionerConfig {
        cross_namespace_data_sources: true,
        ..CONFIG
    };
    assert_eq!(
        run(&cross_namespace, Some(&sc), &gated, caps()),
        Ok(Prepared::ExternalPopulator {
            kind: "Fancy".into(),
            other_namespace: Some("other".into())
        })
    );
    // Snapshots and claims go on, remembered in the plan for the caller's checks.
    let restore = with_data_source("VolumeSnapshot", "snap", Some("snapshot.storage.k8s.io"));
    let clone = with_data_source("PersistentVolumeClaim", "src", None);
    for (c, kind, name) in [
        (&restore, SourceKind::Snapshot, "snap"),
        (&clone, SourceKind::Claim, "src"),
    ] {
        assert_eq!(
            plan(run(c, Some(&sc), &CONFIG, caps())).data_source,
            Some(DataSource {
                kind,
                name: name.into(),
                namespace: "default".into()
            })
        );
    }
    // A driver that cannot fill a volume from the source: upstream's capability errors.
    let no_snapshots = DriverCapabilities {
        create_delete_snapshot: false,
        ..caps()
    };
    let no_clones = DriverCapabilities {
        clone_volume: false,
        ..caps()
    };
    assert_eq!(
        failure(run(&restore, Some(&sc), &CONFIG, no_snapshots)),
        (Finished, "CSI driver does not support snapshot restore: controller CREATE_DELETE_SNAPSHOT capability is not reported".into())
    );
    assert_eq!(
        failure(run(&clone, Some(&sc), &CONFIG, no_clones)),
        (Finished, "CSI driver does not support clone operations: controller CLONE_VOLUME capability is not reported".into())
    );
    // Each needs only its own capability.
    assert!(run(&clone, Some(&sc), &CONFIG, no_snapshots).is_ok());
    assert!(run(&restore, Some(&sc), &CONFIG, no_clones).is_ok());
    assert_eq!(
        plan(run(&claim(), Some(&sc), &CONFIG, caps())).data_source,
        None
    );

    assert_eq!(
        populator_reason("Fancy"),
        "data source (Fancy) is not handled by the provisioner, assuming an external populator will provision it"
    );
}

// The VAC rows: normal, gate disabled, driver lacks MODIFY_VOLUME, driver name mismatch.
#[test]
fn volume_attributes_classes() {
    let mut with_vac = claim();
    spec_mut(&mut with_vac).volume_attributes_class_name = Some("gold".into());
    let sc = class(DRIVER);
    assert_eq!(
        plan(run(&with_vac, Some(&sc), &CONFIG, caps()))
            .volume_attributes_class
            .as_deref(),
        Some("gold")
    );

    let gate_off = ProvisionerConfig {
        volume_attributes_class_enabled: false,
        ..CONFIG
    };
    let no_modify = DriverCapabilities {
        modify_volume: false,
        ..caps()
    };
    assert_eq!(
        plan(run(&with_vac, Some(&sc), &gate_off, no_modify)).volume_attributes_class,
        None
    );
    assert_eq!(
        failure(run(&with_vac, Some(&sc), &CONFIG, no_modify)),
        (Finished, "CSI driver does not support VolumeAttributesClass: controller MODIFY_VOLUME capability is not reported".into())
    );
    assert_eq!(
        check_volume_attributes_class("gold", DRIVER, DRIVER),
        Ok(())
    );
    let mismatch = check_volume_attributes_class("gold", "other.example.com", DRIVER).unwrap_err();
    assert_eq!(
        (mismatch.state, mismatch.message),
        (
            Finished,
            format!(
                "VAC gold referenced in PVC is for driver other.example.com which does not match driver name {DRIVER}"
            )
        )
    );
}

#[test]
fn secret_fetch_errors_are_retried() {
    let secret = SecretRef {
        name: "creds".into(),
        namespace: "kube-system".into(),
    };
    let err = secret_fetch_error(&secret, &"secrets \"creds\" not found");
    assert_eq!(err.state, NoChange);
    assert_eq!(
        err.message,
        r#"error getting secret creds in namespace kube-system: secrets "creds" not found"#
    );
}

#[test]
fn topology_failures_and_success() {
    let selected = annotate(claim(), names::ANN_SELECTED_NODE, "node-1");
    let keys = strings(&["zone"]);
    let labels = map(&[("zone", "z1")]);
    let all_labels = [("node-1", &labels)];
    let all_keys = [("node-1", keys.as_slice())];
    let sc = class(DRIVER);
    let base = TopologyFacts {
        strict_topology: false,
        immediate_topology: true,
        selected_node_topology_keys: Some(&keys),
        selected_node_labels: Some(&labels),
        csi_node_topology_keys: &all_keys,
        node_labels: &all_labels,
        random_hash: 0,
    };
    let run_with = |facts| {
        prepare(&PrepareInputs {
            claim: &selected,
            class: Some(&sc),
            config: &CONFIG,
            capabilities: caps(),
            topology: Some(facts),
            reused_topology: None,
        })
    };
    // "fail with selected node but node doesn't exist": the CSINode is gone → reschedule.
    assert_eq!(
        failure(run_with(TopologyFacts {
            selected_node_topology_keys: None,
            ..base
        })),
        (
            Reschedule,
            r#"failed to get selected CSINode node-1: csinode.storage.k8s.io "node-1" not found"#
                .into()
        )
    );
    assert_eq!(
        failure(run_with(TopologyFacts { selected_node_labels: None, ..base })),
        (NoChange, "error generating accessibility requirements: topology labels from selected node map[] does not match topology keys from CSINode [zone]".into())
    );
    // No Node carries the keys.
    assert_eq!(
        failure(run_with(TopologyFacts {
            node_labels: &[],
            ..base
        }))
        .0,
        NoChange
    );
    let got = plan(run_with(base));
    assert_eq!(got.selected_node.as_deref(), Some("node-1"));
    let requirement = got.accessibility_requirements.expect("a requirement");
    assert_eq!(requirement.requisite.len(), 1);
    assert_eq!(requirement.preferred, requirement.requisite);
}

/// upstream's TestProvisionWithDeletedNodeFromCache: a retry after the selected Node (or its
/// CSINode) is gone reuses the first attempt's requirement instead of failing or rescheduling.
#[test]
fn a_reused_requirement_survives_a_deleted_node() {
    let selected = annotate(claim(), names::ANN_SELECTED_NODE, "node-1");
    let sc = class(DRIVER);
    let first = TopologyRequirement {
        requisite: vec![csi::v1::Topology {
            segments: [("zone".to_string(), "z1".to_string())].into(),
        }],
        preferred: vec![],
    };
    let gone = TopologyFacts {
        strict_topology: false,
        immediate_topology: true,
        selected_node_topology_keys: None,
        selected_node_labels: None,
        csi_node_topology_keys: &[],
        node_labels: &[],
        random_hash: 0,
    };
    for reused in [Some(first.clone()), None] {
        let got = plan(prepare(&PrepareInputs {
            claim: &selected,
            class: Some(&sc),
            config: &CONFIG,
            capabilities: caps(),
            topology: Some(gone),
            reused_topology: Some(&reused),
        }));
        assert_eq!(got.accessibility_requirements, reused);
    }
    // Without the earlier requirement the same facts reschedule the claim.
    let err = prepare(&PrepareInputs {
        claim: &selected,
        class: Some(&sc),
        config: &CONFIG,
        capabilities: caps(),
        topology: Some(gone),
        reused_topology: None,
    })
    .unwrap_err();
    assert_eq!(err.state, Reschedule);
}
