use super::*;
use crate::testutil::{DRIVER, annotate, claim, class, spec_mut, without_annotations};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use pretty_assertions::assert_eq;

#[test]
fn provisioner_annotation_ga_then_beta() {
    let beta = names::ANN_BETA_STORAGE_PROVISIONER;
    let ga = names::ANN_STORAGE_PROVISIONER;
    let bare = without_annotations(claim());
    let cases = [
        (bare.clone(), None),
        (annotate(bare.clone(), ga, "a"), Some("a")),
        (annotate(bare.clone(), beta, "b"), Some("b")),
        (
            annotate(annotate(bare.clone(), beta, "b"), ga, "a"),
            Some("a"),
        ),
        // Present but empty GA wins: upstream checks presence, not value.
        (
            annotate(annotate(bare.clone(), beta, "b"), ga, ""),
            Some(""),
        ),
    ];
    for (claim, want) in cases {
        assert_eq!(
            provisioner_of(&claim),
            want,
            "{:?}",
            claim.metadata.annotations
        );
    }
}

#[test]
fn selected_node_ga_then_alpha() {
    let ga = names::ANN_SELECTED_NODE;
    let alpha = names::ANN_ALPHA_SELECTED_NODE;
    let bare = without_annotations(claim());
    let cases = [
        (bare.clone(), None),
        (annotate(bare.clone(), ga, "n1"), Some("n1")),
        (annotate(bare.clone(), alpha, "n2"), Some("n2")),
        (
            annotate(annotate(bare.clone(), alpha, "n2"), ga, "n1"),
            Some("n1"),
        ),
        (
            annotate(annotate(bare.clone(), alpha, "n2"), ga, ""),
            Some(""),
        ),
    ];
    for (claim, want) in cases {
        assert_eq!(
            selected_node(&claim),
            want,
            "{:?}",
            claim.metadata.annotations
        );
    }
}

#[test]
fn class_name_annotation_wins() {
    let mut no_class = claim();
    spec_mut(&mut no_class).storage_class_name = None;
    let cases = [
        (claim(), Some("sc")),
        (no_class.clone(), None),
        (
            annotate(no_class, names::ANN_BETA_STORAGE_CLASS, "legacy"),
            Some("legacy"),
        ),
        (
            annotate(claim(), names::ANN_BETA_STORAGE_CLASS, "legacy"),
            Some("legacy"),
        ),
        (
            annotate(claim(), names::ANN_BETA_STORAGE_CLASS, ""),
            Some(""),
        ),
    ];
    for (claim, want) in cases {
        assert_eq!(class_name(&claim), want);
    }
}

#[test]
fn claim_fields() {
    let mut block = claim();
    spec_mut(&mut block).volume_mode = Some("Block".into());
    spec_mut(&mut block).volume_attributes_class_name = Some("gold".into());
    assert!(is_block(&block));
    assert!(!is_block(&claim()));
    assert_eq!(volume_attributes_class(&block), Some("gold"));
    assert_eq!(volume_attributes_class(&claim()), None);

    let mut empty_vac = claim();
    spec_mut(&mut empty_vac).volume_attributes_class_name = Some(String::new());
    assert_eq!(volume_attributes_class(&empty_vac), None);

    assert_eq!(access_modes(&claim()), ["ReadWriteOnce".to_string()]);
    let mut no_spec = claim();
    no_spec.spec = None;
    assert!(access_modes(&no_spec).is_empty());
    assert_eq!(requested_bytes(&no_spec), Ok(0));
    assert_eq!(requested_bytes(&claim()), Ok(1 << 30));

    let mut garbage = claim();
    spec_mut(&mut garbage)
        .resources
        .as_mut()
        .and_then(|r| r.requests.as_mut())
        .map(|r| r.insert("storage".into(), Quantity("lots".into())));
    assert_eq!(storage_request(&garbage), Some("lots"));
    assert!(requested_bytes(&garbage).is_err());
}

#[test]
fn should_provision_table() {
    let immediate = class(DRIVER);
    let mut late = class(DRIVER);
    late.volume_binding_mode = Some("WaitForFirstConsumer".into());
    let other = class("other.csi.example.com");
    let mut bound = claim();
    spec_mut(&mut bound).volume_name = Some("pv-1".into());
    let mut empty_volume_name = claim();
    spec_mut(&mut empty_volume_name).volume_name = Some(String::new());
    let with_node = annotate(claim(), names::ANN_SELECTED_NODE, "node-1");
    let empty_node = annotate(claim(), names::ANN_SELECTED_NODE, "");
    let alpha_node = annotate(claim(), names::ANN_ALPHA_SELECTED_NODE, "node-1");
    let beta_only = annotate(
        without_annotations(claim()),
        names::ANN_BETA_STORAGE_PROVISIONER,
        DRIVER,
    );
    let migrated = annotate(
        annotate(
            without_annotations(claim()),
            names::ANN_STORAGE_PROVISIONER,
            "kubernetes.io/gce-pd",
        ),
        names::ANN_MIGRATED_TO,
        DRIVER,
    );
    use ShouldProvision::*;
    let cases = [
        ("bound", &bound, Some(&immediate), AlreadyBound),
        (
            "bound beats not ours",
            &annotate(bound.clone(), names::ANN_STORAGE_PROVISIONER, "x"),
            None,
            AlreadyBound,
        ),
        (
            "empty volumeName is unbound",
            &empty_volume_name,
            Some(&immediate),
            Provision,
        ),
        (
            "no annotation",
            &without_annotations(claim()),
            Some(&immediate),
            NotOurs,
        ),
        (
            "other provisioner",
            &annotate(claim(), names::ANN_STORAGE_PROVISIONER, "x"),
            Some(&immediate),
            NotOurs,
        ),
        (
            "migrated in-tree claim is not ours",
            &migrated,
            Some(&immediate),
            NotOurs,
        ),
        ("beta annotation", &beta_only, Some(&immediate), Provision),
        ("class missing", &claim(), None, ClassMissing),
        ("immediate", &claim(), Some(&immediate), Provision),
        (
            "late binding without node",
            &claim(),
            Some(&late),
            WaitForNode,
        ),
        (
            "late binding with empty node",
            &empty_node,
            Some(&late),
            WaitForNode,
        ),
        (
            "late binding with alpha node only",
            &alpha_node,
            Some(&late),
            WaitForNode,
        ),
        ("late binding with node", &with_node, Some(&late), Provision),
        (
            "class for another provisioner",
            &claim(),
            Some(&other),
            ClassForOtherProvisioner,
        ),
    ];
    for (name, claim, class, want) in cases {
        assert_eq!(should_provision(claim, class, DRIVER), want, "{name}");
    }
}

/// CSI migration, as upstream's TestProvisionWithMigration: the driver replaces
/// `kubernetes.io/gce-pd`.
#[test]
fn migrated_claims_and_classes_of_the_replaced_plugin_are_ours() {
    const PD: &str = "pd.csi.storage.gke.io";
    const IN_TREE: &str = "kubernetes.io/gce-pd";
    let in_tree_class = class(IN_TREE);
    let csi_class = class(PD);
    let named = |p: &str| {
        annotate(
            without_annotations(claim()),
            names::ANN_STORAGE_PROVISIONER,
            p,
        )
    };
    let beta_named = |p: &str| {
        annotate(
            without_annotations(claim()),
            names::ANN_BETA_STORAGE_PROVISIONER,
            p,
        )
    };
    let migrated = |c: PersistentVolumeClaim, to: &str| annotate(c, names::ANN_MIGRATED_TO, to);
    use ShouldProvision::*;
    let cases = [
        (
            "in-tree name, migrated to us",
            migrated(named(IN_TREE), PD),
            &in_tree_class,
            Provision,
        ),
        (
            "beta in-tree name, migrated to us",
            migrated(beta_named(IN_TREE), PD),
            &in_tree_class,
            Provision,
        ),
        (
            "our name, in-tree class",
            named(PD),
            &in_tree_class,
            Provision,
        ),
        (
            "our name and migrated-to, in-tree class",
            migrated(named(PD), PD),
            &in_tree_class,
            Provision,
        ),
        ("native CSI", named(PD), &csi_class, Provision),
        (
            "in-tree name, not migrated: the in-tree plugin's",
            named(IN_TREE),
            &in_tree_class,
            NotOurs,
        ),
        (
            "in-tree name migrated to another driver",
            migrated(named(IN_TREE), "other.csi"),
            &in_tree_class,
            NotOurs,
        ),
        (
            "another in-tree plugin migrated to us",
            migrated(named("kubernetes.io/aws-ebs"), PD),
            &in_tree_class,
            NotOurs,
        ),
        (
            "class of another in-tree plugin",
            named(PD),
            &class("kubernetes.io/aws-ebs"),
            ClassForOtherProvisioner,
        ),
    ];
    for (name, claim, class, want) in cases {
        assert_eq!(should_provision(&claim, Some(class), PD), want, "{name}");
    }
    // A driver that replaces no plugin knows no in-tree name.
    let not_migrating = migrated(named(IN_TREE), DRIVER);
    assert_eq!(
        should_provision(&not_migrating, Some(&class(DRIVER)), DRIVER),
        NotOurs
    );
}

#[test]
fn waits_for_node_table() {
    let claim =
        |v: serde_json::Value| -> PersistentVolumeClaim { serde_json::from_value(v).unwrap() };
    let node = serde_json::json!({"volume.kubernetes.io/selected-node": "n1"});
    let alpha = serde_json::json!({"volume.alpha.kubernetes.io/selected-node": "n1"});
    let cases = [
        (serde_json::json!({"metadata": {}, "spec": {}}), true),
        (
            serde_json::json!({"metadata": {"annotations": node}, "spec": {}}),
            false,
        ),
        (
            serde_json::json!({"metadata": {"annotations": alpha}, "spec": {}}),
            false,
        ),
        (
            serde_json::json!({"metadata": {}, "spec": {"volumeName": "pv"}}),
            false,
        ),
        (
            serde_json::json!({"metadata": {}, "spec": {"volumeName": ""}}),
            true,
        ),
        (
            serde_json::json!({"metadata": {"deletionTimestamp": "2026-01-01T00:00:00Z"}, "spec": {}}),
            false,
        ),
    ];
    for (c, want) in cases {
        let c = claim(c);
        assert_eq!(waits_for_node(&c), want, "{c:?}");
    }
}

#[test]
fn metric_labels_are_the_spec_class_and_the_data_source_kind() {
    use k8s_openapi::api::core::v1::TypedLocalObjectReference;
    let plain = claim();
    let class = plain.spec.as_ref().unwrap().storage_class_name.clone();
    assert_eq!(metric_labels(&plain), (class.as_deref().unwrap(), ""));
    // The beta annotation names the class for provisioning, not for the metrics.
    let mut beta = annotate(plain.clone(), names::ANN_BETA_STORAGE_CLASS, "legacy");
    spec_mut(&mut beta).storage_class_name = None;
    assert_eq!(metric_labels(&beta), ("", ""));
    let mut clone = plain.clone();
    spec_mut(&mut clone).data_source = Some(TypedLocalObjectReference {
        kind: "PersistentVolumeClaim".into(),
        name: "src".into(),
        api_group: None,
    });
    assert_eq!(metric_labels(&clone).1, "PersistentVolumeClaim");
}

#[test]
fn a_claim_is_ours_by_its_provisioner_or_as_a_migrated_in_tree_claim() {
    let ebs = "ebs.csi.aws.com";
    let ga = names::ANN_STORAGE_PROVISIONER;
    let migrated = names::ANN_MIGRATED_TO;
    let bare = without_annotations(claim());
    let cases = [
        (bare.clone(), false),
        (annotate(bare.clone(), ga, ebs), true),
        (annotate(bare.clone(), ga, "other.csi"), false),
        // The in-tree name alone is kube-controller-manager's business, not ours...
        (annotate(bare.clone(), ga, "kubernetes.io/aws-ebs"), false),
        // ...until it marks the claim migrated to us.
        (
            annotate(
                annotate(bare.clone(), ga, "kubernetes.io/aws-ebs"),
                migrated,
                ebs,
            ),
            true,
        ),
        (
            annotate(
                annotate(bare.clone(), ga, "kubernetes.io/gce-pd"),
                migrated,
                ebs,
            ),
            false,
        ),
        (
            annotate(
                annotate(bare.clone(), ga, "kubernetes.io/aws-ebs"),
                migrated,
                "x",
            ),
            false,
        ),
    ];
    for (claim, want) in cases {
        assert_eq!(
            is_ours(&claim, ebs),
            want,
            "{:?}",
            claim.metadata.annotations
        );
    }
}

#[test]
fn capacity_changes_recheck_unplaced_late_binding_claims_or_any_in_node_mode() {
    let claim =
        |v: serde_json::Value| -> PersistentVolumeClaim { serde_json::from_value(v).unwrap() };
    let class = |mode: Option<&str>| -> StorageClass {
        let mut v = serde_json::json!({"metadata": {"name": "sc"}, "provisioner": "d"});
        if let Some(m) = mode {
            v["volumeBindingMode"] = serde_json::json!(m);
        }
        serde_json::from_value(v).unwrap()
    };
    let pending = claim(serde_json::json!({"metadata": {}, "spec": {}}));
    let placed = claim(serde_json::json!({"metadata": {"annotations":
        {"volume.kubernetes.io/selected-node": "n1"}}, "spec": {}}));
    let bound = claim(serde_json::json!({"metadata": {}, "spec": {"volumeName": "pv"}}));
    let (late, immediate, unset) = (
        class(Some(names::WAIT_FOR_FIRST_CONSUMER)),
        class(Some("Immediate")),
        class(None),
    );
    let cases = [
        (&pending, Some(&late), false, true),
        (&pending, Some(&immediate), false, false),
        (&pending, Some(&unset), false, false),
        (&pending, None, false, false),
        (&pending, Some(&immediate), true, true),
        (&pending, None, true, true),
        (&placed, Some(&late), false, false),
        (&placed, Some(&immediate), true, false),
        (&bound, Some(&late), false, false),
        (&bound, Some(&late), true, false),
    ];
    for (i, (c, sc, distributed, want)) in cases.into_iter().enumerate() {
        assert_eq!(rechecked_on_capacity(c, sc, distributed), want, "case {i}");
    }
}
