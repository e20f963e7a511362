use super::*;
use crate::errors::ProvisioningState::{Finished, NoChange, Reschedule};
use crate::names;
use crate::testutil::{DRIVER, UID, annotate, claim, class, map, spec_mut, strings};
use csi::v1::volume_capability::access_mode::Mode;
use k8s_openapi::api::core::v1::{TypedLocalObjectReference, TypedObjectReference};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use pretty_assertions::assert_eq;

mod sources;

const CONFIG: ProvisionerConfig<'static> = ProvisionerConfig {
    driver_name: DRIVER,
    volume_name_prefix: "pvc",
    volume_name_uuid_length: -1,
    default_fs_type: "",
    extra_create_metadata: false,
    volume_attributes_class_enabled: true,
    cross_namespace_data_sources: false,
};

fn caps() -> DriverCapabilities {
    DriverCapabilities {
        controller_service: true,
        create_delete_volume: true,
        modify_volume: true,
        create_delete_snapshot: true,
        clone_volume: true,
        ..DriverCapabilities::default()
    }
}

fn run(
    claim: &PersistentVolumeClaim,
    class: Option<&StorageClass>,
    config: &ProvisionerConfig<'_>,
    caps: DriverCapabilities,
) -> Result<Prepared, ProvisionError> {
    prepare(&PrepareInputs {
        claim,
        class,
        config,
        capabilities: caps,
        topology: None,
        reused_topology: None,
    })
}

fn plan(result: Result<Prepared, ProvisionError>) -> ProvisionPlan {
    match result {
        Ok(Prepared::Provision(plan)) => *plan,
        other => panic!("expected a plan, got {other:?}"),
    }
}

fn failure(result: Result<Prepared, ProvisionError>) -> (ProvisioningState, String) {
    let err = result.expect_err("expected an error");
    (err.state, err.message)
}

fn class_with(params: &[(&str, &str)]) -> StorageClass {
    let mut sc = class(DRIVER);
    sc.parameters = Some(map(params));
    sc
}

#[test]
fn normal_provision() {
    let sc = class_with(&[("type", "ssd"), (names::PARAM_FSTYPE, "xfs")]);
    let got = plan(run(&claim(), Some(&sc), &CONFIG, caps()));
    assert_eq!(got.volume_name, format!("pvc-{UID}"));
    assert_eq!(got.fs_type, "xfs");
    assert_eq!(got.requested_bytes, 1 << 30);
    assert_eq!(got.parameters, map(&[("type", "ssd")]));
    assert_eq!(got.selected_node, None);
    assert_eq!(got.accessibility_requirements, None);
    assert_eq!(got.secrets, SecretRefs::default());
    assert_eq!(got.volume_attributes_class, None);
    assert_eq!(got.capabilities.len(), 1);
    assert_eq!(
        got.capabilities[0].access_mode.map(|m| m.mode),
        Some(Mode::SingleNodeWriter as i32)
    );

    let request = got
        .create_volume_request(&claim(), map(&[("k", "v")]), map(&[("iops", "1")]), None)
        .unwrap();
    assert_eq!(request.name, got.volume_name);
    assert_eq!(
        request.capacity_range.map(|c| c.required_bytes),
        Some(1 << 30)
    );
    assert_eq!(request.secrets.get("k").map(String::as_str), Some("v"));
    assert_eq!(
        request.mutable_parameters.get("iops").map(String::as_str),
        Some("1")
    );
    assert_eq!(request.parameters.len(), 1);
}

#[test]
fn extra_metadata_and_uuid_length() {
    let config = ProvisionerConfig {
        extra_create_metadata: true,
        volume_name_uuid_length: 8,
        ..CONFIG
    };
    let got = plan(run(
        &claim(),
        Some(&class_with(&[("type", "ssd")])),
        &config,
        caps(),
    ));
    assert_eq!(got.volume_name, "pvc-0f1c2d3e");
    assert_eq!(
        got.parameters,
        map(&[
            ("type", "ssd"),
            ("csi.storage.k8s.io/pvc/name", "my-pvc"),
            ("csi.storage.k8s.io/pvc/namespace", "default"),
            ("csi.storage.k8s.io/pv/name", "pvc-0f1c2d3e"),
        ])
    );
}

// The fstype rows of TestFSTypeProvision.
#[test]
fn fs_types() {
    let cases = [
        ("fstype not set, no default", vec![], "", "".to_string()),
        (
            "fstype not set, default",
            vec![],
            "ext4",
            "ext4".to_string(),
        ),
        (
            "prefixed key",
            vec![(names::PARAM_FSTYPE, "xfs")],
            "ext4",
            "xfs".to_string(),
        ),
        (
            "legacy key",
            vec![("fstype", "btrfs")],
            "",
            "btrfs".to_string(),
        ),
    ];
    for (name, params, default, want) in cases {
        let config = ProvisionerConfig {
            default_fs_type: default,
            ..CONFIG
        };
        let got = plan(run(&claim(), Some(&class_with(&params)), &config, caps()));
        assert_eq!(got.fs_type, want, "{name}");
    }
    let sc = class_with(&[("fstype", "xfs"), (names::PARAM_FSTYPE, "ext4")]);
    assert_eq!(
        failure(run(&claim(), Some(&sc), &CONFIG, caps())),
        (Finished, r#"fstype specified in parameters with both "fstype" and "csi.storage.k8s.io/fstype" keys"#.into())
    );
}

#[test]
fn secrets_and_default_secrets() {
    let sc = class_with(&[
        (names::PARAM_DEFAULT_SECRET_NAME, "${pvc.name}-default"),
        (names::PARAM_DEFAULT_SECRET_NAMESPACE, "${pvc.namespace}"),
        ("csi.storage.k8s.io/node-publish-secret-name", "publish"),
        (
            "csi.storage.k8s.io/node-publish-secret-namespace",
            "secrets",
        ),
    ]);
    let got = plan(run(&claim(), Some(&sc), &CONFIG, caps()));
    let default = Some(SecretRef {
        name: "my-pvc-default".into(),
        namespace: "default".into(),
    });
    assert_eq!(got.secrets.provisioner, default);
    assert_eq!(got.secrets.controller_modify, default);
    assert_eq!(
        got.secrets.node_publish,
        Some(SecretRef {
            name: "publish".into(),
            namespace: "secrets".into()
        })
    );
    assert!(got.parameters.is_empty());
}

#[test]
fn failures_in_upstream_order() {
    let mut with_selector = claim();
    spec_mut(&mut with_selector).selector = Some(LabelSelector::default());
    let mut no_uid = claim();
    no_uid.metadata.uid = None;
    let mut bad_mode = claim();
    spec_mut(&mut bad_mode).access_modes = Some(strings(&["ReadWriteSometimes"]));
    let mut bad_size = claim();
    spec_mut(&mut bad_size)
        .resources
        .as_mut()
        .and_then(|r| r.requests.as_mut())
        .unwrap()
        .insert(
            "storage".into(),
            k8s_openapi::apimachinery::pkg::api::resource::Quantity("1K".into()),
        );
    let plain = class(DRIVER);
    let normal = claim();
    let bad_secret = class_with(&[("csi.storage.k8s.io/provisioner-secret-name", "x")]);
    let bad_template = class_with(&[
        (names::PARAM_DEFAULT_SECRET_NAME, "${pvc.foo}"),
        (names::PARAM_DEFAULT_SECRET_NAMESPACE, "ns"),
    ]);
    let unknown_key = class_with(&[("csi.storage.k8s.io/foo", "bar")]);
    let no_caps = DriverCapabilities {
        controller_service: false,
        ..caps()
    };
    let no_create = DriverCapabilities {
        create_delete_volume: false,
        ..caps()
    };
    type Case<'a> = (
        &'a str,
        &'a PersistentVolumeClaim,
        Option<&'a StorageClass>,
        DriverCapabilities,
        ProvisioningState,
        &'a str,
    );
    let cases: Vec<Case> = vec![
        (
            "no class",
            &with_selector,
            None,
            caps(),
            Finished,
            "storage class was nil",
        ),
        (
            "no controller service",
            &with_selector,
            Some(&plain),
            no_caps,
            Finished,
            "CSI driver does not support dynamic provisioning: plugin CONTROLLER_SERVICE capability is not reported",
        ),
        (
            "no create/delete",
            &with_selector,
            Some(&plain),
            no_create,
            Finished,
            "CSI driver does not support dynamic provisioning: controller CREATE_DELETE_VOLUME capability is not reported",
        ),
        (
            "fail not nil selector",
            &with_selector,
            Some(&plain),
            caps(),
            Finished,
            "claim Selector is not supported",
        ),
        (
            "fail to make volume name",
            &no_uid,
            Some(&plain),
            caps(),
            Finished,
            "corrupted PVC object, it is missing UID",
        ),
        (
            "unsupported access mode",
            &bad_mode,
            Some(&plain),
            caps(),
            Finished,
            "unsupported AccessMode combination: [ReadWriteSometimes]",
        ),
        (
            "invalid size",
            &bad_size,
            Some(&plain),
            caps(),
            Finished,
            "invalid storage request in claim default/my-pvc: unable to parse quantity's suffix",
        ),
        (
            "fail to get secret reference",
            &normal,
            Some(&bad_secret),
            caps(),
            NoChange,
            "failed to get name and namespace template from params: either name and namespace for Provisioner secrets specified, Both must be specified",
        ),
        (
            "fail invalid default secret template",
            &normal,
            Some(&bad_template),
            caps(),
            NoChange,
            r#"error resolving value "${pvc.foo}": invalid tokens: ["pvc.foo"]"#,
        ),
        (
            "unknown reserved parameter",
            &normal,
            Some(&unknown_key),
            caps(),
            Finished,
            r#"failed to strip CSI Parameters of prefixed keys: found unknown parameter key "csi.storage.k8s.io/foo" with reserved namespace csi.storage.k8s.io/"#,
        ),
    ];
    for (name, claim, class, caps, state, message) in cases {
        assert_eq!(
            failure(run(claim, class, &CONFIG, caps)),
            (state, message.to_string()),
            "{name}"
        );
    }
}

/// CSI migration: an in-tree class is provisioned with its translated parameters, and the plan
/// says which plugin it came from (upstream's TranslateInTreeStorageClassToCSI step).
#[test]
fn in_tree_class_is_translated() {
    let mut sc = class("kubernetes.io/aws-ebs");
    sc.parameters = Some(map(&[("fstype", "xfs"), ("type", "gp3")]));
    let got = plan(run(&claim(), Some(&sc), &CONFIG, caps()));
    assert_eq!(got.migrated_from, Some("kubernetes.io/aws-ebs"));
    assert_eq!(got.fs_type, "xfs");
    assert_eq!(got.parameters, map(&[("type", "gp3")]));
    let native = plan(run(
        &claim(),
        Some(&class_with(&[("type", "gp3")])),
        &CONFIG,
        caps(),
    ));
    assert_eq!(native.migrated_from, None);

    // An in-tree class the translation refuses: zones and allowedTopologies together.
    sc.parameters = Some(map(&[("zone", "us-east-1a")]));
    sc.allowed_topologies = Some(vec![Default::default()]);
    let (state, message) = failure(run(&claim(), Some(&sc), &CONFIG, caps()));
    assert_eq!(state, Finished);
    assert!(
        message.starts_with("failed to translate storage class: "),
        "{message}"
    );
}

#[test]
fn deleting_needs_the_create_delete_capability() {
    assert_eq!(can_delete_volumes(caps()), Ok(()));
    let without = |f: fn(&mut DriverCapabilities)| {
        let mut c = caps();
        f(&mut c);
        can_delete_volumes(c).unwrap_err()
    };
    assert_eq!(
        without(|c| c.controller_service = false),
        "CSI driver does not support dynamic provisioning: plugin CONTROLLER_SERVICE capability is not reported"
    );
    assert_eq!(
        without(|c| c.create_delete_volume = false),
        "CSI driver does not support dynamic provisioning: controller CREATE_DELETE_VOLUME capability is not reported"
    );
    // VolumeAttributesClass support matters for creating only.
    assert_eq!(
        can_delete_volumes(DriverCapabilities {
            modify_volume: false,
            ..caps()
        }),
        Ok(())
    );
}
