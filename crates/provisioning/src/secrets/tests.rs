use super::*;
use crate::testutil::map;
use pretty_assertions::assert_eq;
use proptest::prelude::*;

const NP_NAME: &str = "csi.storage.k8s.io/node-publish-secret-name";
const NP_NS: &str = "csi.storage.k8s.io/node-publish-secret-namespace";
const NP_OLD_NAME: &str = "csiNodePublishSecretName";
const NP_OLD_NS: &str = "csiNodePublishSecretNamespace";
const PROV_NAME: &str = "csi.storage.k8s.io/provisioner-secret-name";
const PROV_NS: &str = "csi.storage.k8s.io/provisioner-secret-namespace";

fn secret(name: &str, namespace: &str) -> Option<SecretRef> {
    Some(SecretRef {
        name: name.into(),
        namespace: namespace.into(),
    })
}

// TestGetSecretReference, with exact error texts.
#[test]
fn secret_reference_table() {
    let annotations = map(&[("akey", "avalue"), ("example.com/key", "from-annotation")]);
    let claim = TemplateClaim {
        name: "pvcname",
        namespace: "pvcnamespace",
        annotations: Some(&annotations),
    };
    let plain_claim = TemplateClaim {
        name: "name",
        namespace: "ns",
        annotations: None,
    };
    let name_tpl = "static-${pv.name}-${pvc.namespace}-${pvc.name}-${pvc.annotations['akey']}";
    let ns_tpl = "static-${pv.name}-${pvc.namespace}";
    type Case<'a> = (
        &'a str,
        SecretKind,
        Vec<(&'a str, &'a str)>,
        Option<&'a TemplateClaim<'a>>,
        Result<Option<SecretRef>, String>,
    );
    use SecretKind::*;
    let cases: Vec<Case> = vec![
        ("no params", NodePublish, vec![], Some(&claim), Ok(None)),
        (
            "empty err",
            NodePublish,
            vec![(NP_NAME, ""), (NP_NS, "")],
            Some(&claim),
            Err("failed to get name and namespace template from params: NodePublish secrets specified in parameters but value of either namespace or name is empty".into()),
        ),
        (
            "[deprecated] name, no namespace",
            NodePublish,
            vec![(NP_OLD_NAME, "foo")],
            Some(&claim),
            Err("failed to get name and namespace template from params: either name and namespace for NodePublish secrets specified, Both must be specified".into()),
        ),
        (
            "name, no namespace",
            NodePublish,
            vec![(NP_NAME, "foo")],
            Some(&claim),
            Err("failed to get name and namespace template from params: either name and namespace for NodePublish secrets specified, Both must be specified".into()),
        ),
        (
            "namespace, no name",
            NodePublish,
            vec![(NP_NS, "foo")],
            Some(&claim),
            Err("failed to get name and namespace template from params: either name and namespace for NodePublish secrets specified, Both must be specified".into()),
        ),
        ("[deprecated] simple - valid", NodePublish, vec![(NP_OLD_NAME, "name"), (NP_OLD_NS, "ns")], Some(&claim), Ok(secret("name", "ns"))),
        (
            "deprecated and new both",
            NodePublish,
            vec![(NP_OLD_NAME, "name"), (NP_OLD_NS, "ns"), (NP_NAME, "name"), (NP_NS, "ns")],
            Some(&claim),
            Err(r#"failed to get name and namespace template from params: NodePublish secrets specified in parameters with both "csi" and "csi.storage.k8s.io/" keys"#.into()),
        ),
        (
            "deprecated and new names",
            NodePublish,
            vec![(NP_OLD_NAME, "name"), (NP_NAME, "name"), (NP_NS, "ns")],
            Some(&claim),
            Err(r#"failed to get name and namespace template from params: NodePublish secrets specified in parameters with both "csi" and "csi.storage.k8s.io/" keys"#.into()),
        ),
        (
            "deprecated and new namespace",
            NodePublish,
            vec![(NP_OLD_NS, "ns"), (NP_NAME, "name"), (NP_NS, "ns")],
            Some(&claim),
            Err(r#"failed to get name and namespace template from params: NodePublish secrets specified in parameters with both "csi" and "csi.storage.k8s.io/" keys"#.into()),
        ),
        ("deprecated and new mixed", NodePublish, vec![(NP_OLD_NAME, "name"), (NP_NS, "ns")], Some(&claim), Ok(secret("name", "ns"))),
        ("simple - valid", NodePublish, vec![(NP_NAME, "name"), (NP_NS, "ns")], Some(&claim), Ok(secret("name", "ns"))),
        ("simple - valid, no pvc", Provisioner, vec![(PROV_NAME, "name"), (PROV_NS, "ns")], None, Ok(secret("name", "ns"))),
        (
            "simple - valid, pvc name and namespace",
            NodePublish,
            vec![(NP_NAME, "${pvc.name}"), (NP_NS, "${pvc.namespace}")],
            Some(&plain_claim),
            Ok(secret("name", "ns")),
        ),
        (
            "simple - invalid name",
            NodePublish,
            vec![(NP_NAME, "bad name"), (NP_NS, "ns")],
            Some(&claim),
            Err(r#""bad name" is not a valid secret name"#.into()),
        ),
        (
            "simple - invalid namespace",
            NodePublish,
            vec![(NP_NAME, "name"), (NP_NS, "bad ns")],
            Some(&claim),
            Err(r#""bad ns" is not a valid namespace name"#.into()),
        ),
        (
            "template - annotation missing on the claim (deletion synthesises one without)",
            Provisioner,
            vec![(PROV_NAME, name_tpl), (PROV_NS, ns_tpl)],
            Some(&plain_claim),
            Err(r#"error resolving value "static-${pv.name}-${pvc.namespace}-${pvc.name}-${pvc.annotations['akey']}": invalid tokens: ["pvc.annotations['akey']"]"#.into()),
        ),
        (
            "template - valid PVC annotations for provisioner",
            Provisioner,
            vec![(PROV_NAME, name_tpl), (PROV_NS, ns_tpl)],
            Some(&claim),
            Ok(secret("static-pvname-pvcnamespace-pvcname-avalue", "static-pvname-pvcnamespace")),
        ),
        (
            "template - valid nodepublish secret ref",
            NodePublish,
            vec![(NP_NAME, name_tpl), (NP_NS, ns_tpl)],
            Some(&claim),
            Ok(secret("static-pvname-pvcnamespace-pvcname-avalue", "static-pvname-pvcnamespace")),
        ),
        (
            "template - annotation key with a slash",
            NodePublish,
            vec![(NP_NAME, "${pvc.annotations['example.com/key']}"), (NP_NS, "ns")],
            Some(&claim),
            Ok(secret("from-annotation", "ns")),
        ),
        (
            "template - valid, with pvc.name",
            Provisioner,
            vec![(PROV_NAME, "${pvc.name}"), (PROV_NS, "ns")],
            Some(&claim),
            Ok(secret("pvcname", "ns")),
        ),
        (
            "template - valid, provisioner with pvc name and namespace",
            Provisioner,
            vec![(PROV_NAME, "${pvc.name}"), (PROV_NS, "${pvc.namespace}")],
            Some(&claim),
            Ok(secret("pvcname", "pvcnamespace")),
        ),
        (
            "template - valid, static pvc name and templated namespace",
            Provisioner,
            vec![(PROV_NAME, "static-name-1"), (PROV_NS, "${pvc.namespace}")],
            Some(&claim),
            Ok(secret("static-name-1", "pvcnamespace")),
        ),
        (
            "template - invalid namespace tokens",
            NodePublish,
            vec![(NP_NAME, "myname"), (NP_NS, "mynamespace${bar}")],
            Some(&claim),
            Err(r#"error resolving value "mynamespace${bar}": invalid tokens: ["bar"]"#.into()),
        ),
        (
            "template - invalid name tokens",
            NodePublish,
            vec![(NP_NAME, "myname${foo}"), (NP_NS, "mynamespace")],
            Some(&claim),
            Err(r#"error resolving value "myname${foo}": invalid tokens: ["foo"]"#.into()),
        ),
        (
            "template - pvc.name is not allowed in the namespace",
            NodePublish,
            vec![(NP_NAME, "myname"), (NP_NS, "${pvc.name}-${x}")],
            Some(&claim),
            Err(r#"error resolving value "${pvc.name}-${x}": invalid tokens: ["pvc.name" "x"]"#.into()),
        ),
        (
            "template - annotations are not allowed in the namespace",
            NodePublish,
            vec![(NP_NAME, "myname"), (NP_NS, "${pvc.annotations['akey']}")],
            Some(&claim),
            Err(r#"error resolving value "${pvc.annotations['akey']}": invalid tokens: ["pvc.annotations['akey']"]"#.into()),
        ),
        (
            "template - no pvc leaves only pv.name",
            Provisioner,
            vec![(PROV_NAME, "${pvc.name}"), (PROV_NS, "${pv.name}")],
            None,
            Err(r#"error resolving value "${pvc.name}": invalid tokens: ["pvc.name"]"#.into()),
        ),
        (
            "template - resolves to an invalid name",
            NodePublish,
            vec![(NP_NAME, "${pvc.annotations['akey']}_x"), (NP_NS, "ns")],
            Some(&claim),
            Err(r#""${pvc.annotations['akey']}_x" resolved to "avalue_x" which is not a valid secret name"#.into()),
        ),
        (
            "template - resolves to an empty namespace",
            NodePublish,
            vec![(NP_NAME, "n"), (NP_NS, "${pvc.namespace}")],
            Some(&TemplateClaim { name: "n", namespace: "", annotations: None }),
            Err(r#""${pvc.namespace}" resolved to "" which is not a valid namespace name"#.into()),
        ),
        (
            "$$ is a token named $",
            NodePublish,
            vec![(NP_NAME, "a$$b"), (NP_NS, "ns")],
            Some(&claim),
            Err(r#"error resolving value "a$$b": invalid tokens: ["$"]"#.into()),
        ),
    ];
    for (name, kind, params, claim, want) in cases {
        let params = map(&params);
        let got = secret_reference(kind, &params, "pvname", claim).map_err(|e| e.to_string());
        assert_eq!(got, want, "{name}");
    }
}

#[test]
fn default_pair_applies_to_kinds_without_their_own_keys() {
    let params = map(&[
        ("csi.storage.k8s.io/secret-name", "${pv.name}-default"),
        ("csi.storage.k8s.io/secret-namespace", "defaults"),
        ("csi.storage.k8s.io/node-stage-secret-name", "stage"),
        ("csi.storage.k8s.io/node-stage-secret-namespace", "stages"),
    ]);
    let refs = secret_references(&params, "pv-1", None).unwrap();
    let default = secret("pv-1-default", "defaults");
    assert_eq!(
        refs,
        SecretRefs {
            provisioner: default.clone(),
            controller_publish: default.clone(),
            node_stage: secret("stage", "stages"),
            node_publish: default.clone(),
            controller_expand: default.clone(),
            node_expand: default.clone(),
            controller_modify: default,
        }
    );
}

#[test]
fn default_pair_errors_are_reported_as_default() {
    let params = map(&[("csi.storage.k8s.io/secret-name", "x")]);
    assert_eq!(
        secret_reference(SecretKind::ControllerModify, &params, "pv", None).map_err(|e| e.to_string()),
        Err("failed to get default name and namespace template from params: either name and namespace for Default secrets specified, Both must be specified".into())
    );
    // A kind's own broken keys are reported even when a default pair exists.
    let params = map(&[
        ("csi.storage.k8s.io/secret-name", "x"),
        ("csi.storage.k8s.io/secret-namespace", "y"),
        ("csi.storage.k8s.io/node-expand-secret-name", "z"),
    ]);
    assert!(matches!(
        secret_reference(SecretKind::NodeExpand, &params, "pv", None),
        Err(SecretError::Keys(TemplateProblem::OnlyOneOfPair(
            "NodeExpand"
        )))
    ));
}

#[test]
fn no_secrets_at_all() {
    assert_eq!(
        secret_references(&map(&[("foo", "bar")]), "pv", None),
        Ok(SecretRefs::default())
    );
}

#[test]
fn kinds_have_consistent_keys() {
    let with_deprecated: Vec<SecretKind> = SecretKind::ALL
        .into_iter()
        .filter(|k| k.deprecated_keys().is_some())
        .collect();
    assert_eq!(
        with_deprecated,
        [
            SecretKind::Provisioner,
            SecretKind::ControllerPublish,
            SecretKind::NodeStage,
            SecretKind::NodePublish
        ]
    );
    for kind in SecretKind::ALL {
        assert!(
            crate::names::RESERVED_PARAMETER_KEYS.contains(&kind.name_key()),
            "{kind:?}"
        );
        assert!(
            crate::names::RESERVED_PARAMETER_KEYS.contains(&kind.namespace_key()),
            "{kind:?}"
        );
        assert_eq!(
            kind.name_key().replace("-name", "-namespace"),
            kind.namespace_key()
        );
    }
}

#[test]
fn secret_ref_converts_to_kubernetes_reference() {
    let r = SecretRef {
        name: "n".into(),
        namespace: "ns".into(),
    };
    assert_eq!(
        SecretReference::from(&r),
        SecretReference {
            name: Some("n".into()),
            namespace: Some("ns".into())
        }
    );
}

proptest! {
    #[test]
    fn never_panics(
        name in "\\PC{0,30}",
        namespace in "\\PC{0,30}",
        pvc_name in "\\PC{0,12}",
        key in "\\PC{0,12}",
        value in "\\PC{0,12}",
    ) {
        let annotations = map(&[(key.as_str(), value.as_str())]);
        let claim = TemplateClaim { name: &pvc_name, namespace: "ns", annotations: Some(&annotations) };
        let params = map(&[(PROV_NAME, name.as_str()), (PROV_NS, namespace.as_str())]);
        let _ = secret_reference(SecretKind::Provisioner, &params, "pv", Some(&claim));
        let _ = secret_references(&params, "pv", None);
    }

    #[test]
    fn resolved_references_are_valid(name in "[a-z${}.'\\[\\]]{1,20}", namespace in "[a-z${}.]{1,20}") {
        let params = map(&[(NP_NAME, name.as_str()), (NP_NS, namespace.as_str())]);
        let claim = TemplateClaim { name: "pvc", namespace: "ns", annotations: None };
        if let Ok(Some(r)) = secret_reference(SecretKind::NodePublish, &params, "pv-1", Some(&claim)) {
            prop_assert!(crate::validation::is_dns1123_subdomain(&r.name));
            prop_assert!(crate::validation::is_dns1123_label(&r.namespace));
        }
    }
}
