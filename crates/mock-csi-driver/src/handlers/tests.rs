use super::*;
use crate::spec::{parse_pool, parse_segment};
use csi::v1::volume_capability::{AccessMode, AccessType, BlockVolume, MountVolume};
use rstest::rstest;

const GI: i64 = 1 << 30;

fn pools(specs: &[&str]) -> Pools {
    Pools::new(specs.iter().map(|s| parse_pool(s).unwrap()).collect())
}

fn cap(mode: Mode) -> VolumeCapability {
    VolumeCapability {
        access_type: Some(AccessType::Mount(MountVolume::default())),
        access_mode: Some(AccessMode { mode: mode.into() }),
    }
}

fn create(name: &str, required: i64) -> CreateVolumeRequest {
    CreateVolumeRequest {
        name: name.into(),
        capacity_range: Some(CapacityRange {
            required_bytes: required,
            limit_bytes: 0,
        }),
        volume_capabilities: vec![cap(Mode::SingleNodeWriter)],
        ..Default::default()
    }
}

fn snapshot_source(id: &str) -> VolumeContentSource {
    VolumeContentSource {
        r#type: Some(volume_content_source::Type::Snapshot(
            volume_content_source::SnapshotSource {
                snapshot_id: id.into(),
            },
        )),
    }
}

fn cloning() -> DriverConfig {
    DriverConfig {
        clone_volume: true,
        ..DriverConfig::default()
    }
}

/// A CreateVolume request for `name` cloning volume `source`.
fn clone_of(name: &str, source: &str) -> CreateVolumeRequest {
    CreateVolumeRequest {
        volume_content_source: Some(volume_source(source)),
        ..create(name, GI)
    }
}

fn topo(s: &str) -> Topology {
    topology(&parse_segment(s).unwrap())
}

#[rstest]
#[case::ok(|_: &mut CreateVolumeRequest| {}, None)]
#[case::no_name(|r: &mut CreateVolumeRequest| r.name.clear(), Some("name must not be empty"))]
#[case::no_caps(|r: &mut CreateVolumeRequest| r.volume_capabilities.clear(), Some("must not be empty"))]
#[case::no_access_type(|r: &mut CreateVolumeRequest| r.volume_capabilities[0].access_type = None, Some("no access type"))]
#[case::no_mode(|r: &mut CreateVolumeRequest| r.volume_capabilities[0].access_mode = None, Some("no access mode"))]
#[case::unknown_mode(|r: &mut CreateVolumeRequest| r.volume_capabilities[0] = cap(Mode::Unknown), Some("not a known mode"))]
#[case::bad_mode(|r: &mut CreateVolumeRequest| r.volume_capabilities[0].access_mode = Some(AccessMode { mode: 42 }), Some("42"))]
#[case::snmw(|r: &mut CreateVolumeRequest| r.volume_capabilities.push(cap(Mode::SingleNodeMultiWriter)), Some("--single-node-multi-writer"))]
#[case::block(|r: &mut CreateVolumeRequest| r.volume_capabilities[0].access_type = Some(AccessType::Block(BlockVolume {})), None)]
#[case::multi_node(|r: &mut CreateVolumeRequest| r.volume_capabilities[0] = cap(Mode::MultiNodeMultiWriter), None)]
#[case::untyped_source(|r: &mut CreateVolumeRequest| r.volume_content_source = Some(VolumeContentSource::default()), Some("has no type"))]
#[case::snapshot_source(|r: &mut CreateVolumeRequest| r.volume_content_source = Some(snapshot_source("snap-1")), Some("snapshots are not supported"))]
#[case::clone_off(|r: &mut CreateVolumeRequest| r.volume_content_source = Some(volume_source("mock-vol-0")), Some("cloning is not supported"))]
#[case::range(|r: &mut CreateVolumeRequest| r.capacity_range = Some(CapacityRange { required_bytes: 2, limit_bytes: 1 }), Some("capacity range is invalid"))]
fn create_validation(
    #[case] edit: fn(&mut CreateVolumeRequest),
    #[case] invalid_because: Option<&str>,
) {
    let mut req = create("v", 1);
    edit(&mut req);
    let got = create_volume(&mut pools(&[":1Ti"]), &DriverConfig::default(), &req);
    match (got, invalid_because) {
        (Ok(_), None) => {}
        (Err(status), Some(fragment)) => {
            assert_eq!(status.code(), Code::InvalidArgument, "{status:?}");
            assert!(status.message().contains(fragment), "{status:?}");
        }
        (got, want) => panic!("got {got:?}, want error {want:?}"),
    }
}

#[test]
fn snmw_modes_accepted_when_advertised() {
    let cfg = DriverConfig {
        single_node_multi_writer: true,
        ..DriverConfig::default()
    };
    let mut req = create("v", 1);
    req.volume_capabilities = vec![
        cap(Mode::SingleNodeSingleWriter),
        cap(Mode::SingleNodeMultiWriter),
    ];
    assert!(create_volume(&mut pools(&[":1Ti"]), &cfg, &req).is_ok());
}

#[test]
fn rejected_access_modes_are_refused_and_others_kept() {
    let cfg = DriverConfig {
        reject_access_modes: vec![Mode::MultiNodeMultiWriter],
        ..DriverConfig::default()
    };
    let err = check_capability(&cap(Mode::MultiNodeMultiWriter), &cfg).unwrap_err();
    assert_eq!(
        err,
        "access mode MULTI_NODE_MULTI_WRITER is not supported by this driver"
    );
    assert_eq!(check_capability(&cap(Mode::SingleNodeWriter), &cfg), Ok(()));
    assert_eq!(
        check_capability(&cap(Mode::MultiNodeMultiWriter), &DriverConfig::default()),
        Ok(())
    );
}

#[test]
fn create_returns_topology_id_and_context() {
    let mut p = pools(&["n=node-1:10Gi", "fast@n=node-2:10Gi", "bulk@:10Gi"]);
    let cfg = DriverConfig::default();
    let mut req = create("pvc-1", 0);
    req.accessibility_requirements = Some(TopologyRequirement {
        requisite: vec![topo("n=node-1")],
        preferred: vec![topo("n=node-1")],
    });
    let v = create_volume(&mut p, &cfg, &req).unwrap().volume.unwrap();
    assert_eq!(v.capacity_bytes, GI);
    assert_ne!(v.volume_id, "pvc-1");
    assert_eq!(v.accessible_topology, vec![topo("n=node-1")]);
    assert_eq!(v.volume_context[KIND_PARAMETER], "");

    let mut req = create("pvc-2", GI);
    req.parameters.insert(KIND_PARAMETER.into(), "fast".into());
    let v = create_volume(&mut p, &cfg, &req).unwrap().volume.unwrap();
    assert_eq!(v.accessible_topology, vec![topo("n=node-2")]);
    assert_eq!(v.volume_context[KIND_PARAMETER], "fast");

    let mut req = create("pvc-3", GI);
    req.parameters.insert(KIND_PARAMETER.into(), "bulk".into());
    let v = create_volume(&mut p, &cfg, &req).unwrap().volume.unwrap();
    assert!(v.accessible_topology.is_empty(), "no segment, no topology");
}

#[rstest]
#[case(PoolError::InvalidRange { required: 2, limit: 1 }, Code::InvalidArgument)]
#[case(PoolError::UnknownKind { kind: "x".into() }, Code::InvalidArgument)]
#[case(PoolError::NegativeMaxEntries(-1), Code::InvalidArgument)]
#[case(PoolError::AlreadyExists { name: "a".into(), capacity: 1, kind: String::new(), required: 2, limit: 0, asked_kind: String::new() }, Code::AlreadyExists)]
#[case(PoolError::NoMatchingPool { kind: String::new() }, Code::ResourceExhausted)]
#[case(PoolError::Exhausted { size: 5, largest_free: 4 }, Code::ResourceExhausted)]
#[case(PoolError::InvalidToken("t".into()), Code::Aborted)]
#[case(PoolError::NotFound("v".into()), Code::NotFound)]
#[case(PoolError::SourceNotFound("v".into()), Code::NotFound)]
#[case(PoolError::SourceMismatch { name: "a".into(), existing_source: None, asked_source: Some(Source::Volume("v".into())) }, Code::AlreadyExists)]
fn pool_error_codes(#[case] err: PoolError, #[case] want: Code) {
    let status = pool_status(&err);
    assert_eq!(status.code(), want);
    assert_eq!(status.message(), err.to_string());
}

#[test]
fn exhaustion_message_names_sizes() {
    let mut p = pools(&["n=1:1Gi", "n=2:2Gi"]);
    let err = create_volume(&mut p, &DriverConfig::default(), &create("v", 3 * GI)).unwrap_err();
    assert_eq!(err.code(), Code::ResourceExhausted);
    assert!(err.message().contains(&(3 * GI).to_string()), "{err:?}");
    assert!(err.message().contains(&(2 * GI).to_string()), "{err:?}");
}

#[test]
fn delete_validate_and_list() {
    let mut p = pools(&[":1Ti"]);
    let cfg = DriverConfig::default();
    let id = create_volume(&mut p, &cfg, &create("v", GI))
        .unwrap()
        .volume
        .unwrap()
        .volume_id;

    let validate = |p: &Pools, id: &str, caps: Vec<VolumeCapability>| {
        let req = ValidateVolumeCapabilitiesRequest {
            volume_id: id.into(),
            volume_capabilities: caps,
            ..Default::default()
        };
        validate_capabilities(p, &cfg, &req)
    };
    let ok = validate(&p, &id, vec![cap(Mode::SingleNodeWriter)]).unwrap();
    assert_eq!(
        ok.confirmed.unwrap().volume_capabilities,
        vec![cap(Mode::SingleNodeWriter)]
    );
    let refused = validate(&p, &id, vec![cap(Mode::SingleNodeMultiWriter)]).unwrap();
    assert!(refused.confirmed.is_none() && !refused.message.is_empty());
    assert_eq!(
        validate(&p, &id, vec![]).unwrap_err().code(),
        Code::InvalidArgument
    );
    assert_eq!(
        validate(&p, "", vec![cap(Mode::SingleNodeWriter)])
            .unwrap_err()
            .code(),
        Code::InvalidArgument
    );
    assert_eq!(
        validate(&p, "nope", vec![cap(Mode::SingleNodeWriter)])
            .unwrap_err()
            .code(),
        Code::NotFound
    );

    let listed = list_volumes(&p, &ListVolumesRequest::default()).unwrap();
    assert_eq!(listed.entries.len(), 1);
    assert_eq!(listed.next_token, "");
    let bad = ListVolumesRequest {
        starting_token: "invalid-token".into(),
        max_entries: 0,
    };
    assert_eq!(list_volumes(&p, &bad).unwrap_err().code(), Code::Aborted);

    let del = |p: &mut Pools, id: &str| {
        delete_volume(
            p,
            &DeleteVolumeRequest {
                volume_id: id.into(),
                ..Default::default()
            },
        )
    };
    assert!(del(&mut p, &id).is_ok());
    assert!(del(&mut p, &id).is_ok(), "unknown id is OK");
    assert_eq!(del(&mut p, "").unwrap_err().code(), Code::InvalidArgument);
    assert!(
        list_volumes(&p, &ListVolumesRequest::default())
            .unwrap()
            .entries
            .is_empty()
    );
}

#[rstest]
#[case(None, None, 25 * GI)]
#[case(None, Some("zone=a"), 15 * GI)]
#[case(Some("fast"), None, 100 * GI)]
#[case(Some("fast"), Some("zone=b"), 0)]
#[case(Some("none"), None, 0)]
fn capacity_by_kind_and_segment(
    #[case] kind: Option<&str>,
    #[case] seg: Option<&str>,
    #[case] want: i64,
) {
    let p = pools(&[
        "n=1,zone=a:5Gi",
        "n=2,zone=a:10Gi",
        "n=3,zone=b:10Gi",
        "fast@n=4,zone=a:100Gi",
    ]);
    let cfg = DriverConfig {
        max_volume_size: Some(1 << 50),
        ..DriverConfig::default()
    };
    let req = GetCapacityRequest {
        parameters: kind
            .map(|k| (KIND_PARAMETER.to_owned(), k.to_owned()))
            .into_iter()
            .collect(),
        accessible_topology: seg.map(topo),
        ..Default::default()
    };
    let got = get_capacity(&p, &cfg, &req).unwrap();
    assert_eq!(got.available_capacity, want);
    assert_eq!(
        got.maximum_volume_size,
        Some(1 << 50),
        "verbatim, even above capacity"
    );
}

#[test]
fn capacity_without_max_and_when_off() {
    let p = pools(&[":1Gi"]);
    let got = get_capacity(&p, &DriverConfig::default(), &GetCapacityRequest::default()).unwrap();
    assert_eq!(
        (got.available_capacity, got.maximum_volume_size),
        (GI, None)
    );
    let off = DriverConfig {
        no_capacity: true,
        ..DriverConfig::default()
    };
    let err = get_capacity(&p, &off, &GetCapacityRequest::default()).unwrap_err();
    assert_eq!(err.code(), Code::Unimplemented);
}

fn plugin_caps(cfg: &DriverConfig, p: &Pools) -> Vec<PluginCap> {
    plugin_capabilities(cfg, p)
        .capabilities
        .into_iter()
        .filter_map(|c| match c.r#type {
            Some(plugin_capability::Type::Service(s)) => PluginCap::try_from(s.r#type).ok(),
            _ => None,
        })
        .collect()
}

#[test]
fn plugin_capabilities_follow_pools_and_flags() {
    let with_topo = pools(&["n=1:1Gi"]);
    let without = pools(&[":1Gi"]);
    let cfg = DriverConfig::default();
    let off = DriverConfig {
        no_topology: true,
        ..DriverConfig::default()
    };
    let both = vec![
        PluginCap::ControllerService,
        PluginCap::VolumeAccessibilityConstraints,
    ];
    assert_eq!(plugin_caps(&cfg, &with_topo), both);
    assert_eq!(
        plugin_caps(&cfg, &without),
        vec![PluginCap::ControllerService]
    );
    assert_eq!(
        plugin_caps(&off, &with_topo),
        vec![PluginCap::ControllerService]
    );
}

fn ctrl_caps(cfg: &DriverConfig) -> Vec<CtrlCap> {
    controller_capabilities(cfg)
        .capabilities
        .into_iter()
        .filter_map(|c| match c.r#type {
            Some(controller_service_capability::Type::Rpc(r)) => CtrlCap::try_from(r.r#type).ok(),
            None => None,
        })
        .collect()
}

#[test]
fn controller_capabilities_follow_flags() {
    use CtrlCap::*;
    assert_eq!(
        ctrl_caps(&DriverConfig::default()),
        vec![CreateDeleteVolume, ListVolumes, GetCapacity]
    );
    let all = DriverConfig {
        no_capacity: true,
        publish_unpublish: true,
        single_node_multi_writer: true,
        modify_volume: true,
        clone_volume: true,
        ..DriverConfig::default()
    };
    assert_eq!(
        ctrl_caps(&all),
        vec![
            CreateDeleteVolume,
            ListVolumes,
            PublishUnpublishVolume,
            SingleNodeMultiWriter,
            ModifyVolume,
            CloneVolume
        ]
    );
    assert!(!ctrl_caps(&DriverConfig::default()).contains(&CloneVolume));
    assert!(ctrl_caps(&cloning()).contains(&CloneVolume));
}

#[test]
fn node_info_from_flags() {
    let cfg = DriverConfig::default();
    assert_eq!(node_info(&cfg).node_id, "mock-node");
    assert_eq!(node_info(&cfg).accessible_topology, None);
    let empty = DriverConfig {
        empty_node_topology: true,
        ..cfg.clone()
    };
    assert_eq!(
        node_info(&empty).accessible_topology,
        Some(csi::v1::Topology::default())
    );
    let cfg = DriverConfig {
        node_id: "n1".into(),
        node_topology: parse_segment("a=1").unwrap(),
        ..cfg
    };
    assert_eq!(node_info(&cfg).accessible_topology, Some(topo("a=1")));
    assert!(node_capabilities().capabilities.is_empty());
}

#[test]
fn modify_records_or_refuses() {
    let mut p = pools(&[":1Ti"]);
    let on = DriverConfig {
        modify_volume: true,
        ..DriverConfig::default()
    };
    let id = create_volume(&mut p, &on, &create("v", 1))
        .unwrap()
        .volume
        .unwrap()
        .volume_id;
    let req = |id: &str| ControllerModifyVolumeRequest {
        volume_id: id.into(),
        mutable_parameters: [("iops".to_owned(), "5".to_owned())].into(),
        ..Default::default()
    };
    assert!(modify_volume(&mut p, &on, &req(&id)).is_ok());
    assert_eq!(p.get(&id).unwrap().mutable_parameters["iops"], "5");
    assert_eq!(
        modify_volume(&mut p, &on, &req("nope")).unwrap_err().code(),
        Code::NotFound
    );
    assert_eq!(
        modify_volume(&mut p, &on, &req("")).unwrap_err().code(),
        Code::InvalidArgument
    );
    let off = DriverConfig::default();
    assert_eq!(
        modify_volume(&mut p, &off, &req(&id)).unwrap_err().code(),
        Code::Unimplemented
    );
}

#[test]
fn clone_of_unknown_volume_is_not_found() {
    let mut p = pools(&[":10Gi"]);
    let err = create_volume(&mut p, &cloning(), &clone_of("c", "nope")).unwrap_err();
    assert_eq!(err.code(), Code::NotFound, "{err:?}");
    assert!(err.message().contains("\"nope\""), "{err:?}");
    assert_eq!(p.capacity("", None), 10 * GI, "nothing allocated");
}

#[test]
fn clone_with_empty_source_id_is_invalid() {
    let err = create_volume(&mut pools(&[":10Gi"]), &cloning(), &clone_of("c", "")).unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument, "{err:?}");
}

#[test]
fn snapshot_source_is_refused_without_restore_snapshots() {
    let mut req = create("c", GI);
    req.volume_content_source = Some(snapshot_source("snap-1"));
    let err = create_volume(&mut pools(&[":10Gi"]), &cloning(), &req).unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument);
    assert!(
        err.message().contains("snapshots are not supported"),
        "{err:?}"
    );
}

#[test]
fn restores_take_any_snapshot_id_and_echo_it() {
    let mut p = pools(&[":10Gi"]);
    let cfg = DriverConfig {
        restore_snapshots: true,
        ..DriverConfig::default()
    };
    assert!(ctrl_caps(&cfg).contains(&CtrlCap::CreateDeleteSnapshot));
    assert!(!ctrl_caps(&DriverConfig::default()).contains(&CtrlCap::CreateDeleteSnapshot));
    let mut req = create("r", GI);
    req.volume_content_source = Some(snapshot_source("snap-1"));
    let restored = create_volume(&mut p, &cfg, &req).unwrap().volume.unwrap();
    assert_eq!(restored.content_source, req.volume_content_source);
    assert_eq!(
        p.get(&restored.volume_id).unwrap().source,
        Some(Source::Snapshot("snap-1".into()))
    );
    // The same name again is the same volume; from another source it is not.
    let again = create_volume(&mut p, &cfg, &req).unwrap().volume.unwrap();
    assert_eq!(again.volume_id, restored.volume_id);
    req.volume_content_source = Some(snapshot_source("snap-2"));
    let err = create_volume(&mut p, &cfg, &req).unwrap_err();
    assert_eq!(err.code(), Code::AlreadyExists, "{err:?}");
    req.volume_content_source = Some(snapshot_source(""));
    let err = create_volume(&mut p, &cfg, &req).unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument, "{err:?}");
}

#[test]
fn clone_echoes_content_source_and_uses_pool_space() {
    let mut p = pools(&[":10Gi"]);
    let cfg = cloning();
    let src = create_volume(&mut p, &cfg, &create("src", 2 * GI))
        .unwrap()
        .volume
        .unwrap();
    assert_eq!(src.content_source, None, "an empty volume has no source");

    let req = clone_of("c", &src.volume_id);
    let clone = create_volume(&mut p, &cfg, &req).unwrap().volume.unwrap();
    assert_eq!(clone.content_source, req.volume_content_source);
    assert_ne!(clone.volume_id, src.volume_id);
    assert_eq!(
        clone.capacity_bytes, GI,
        "sized by the request, like any volume"
    );
    assert_eq!(p.capacity("", None), 7 * GI);
    assert_eq!(
        p.get(&clone.volume_id).unwrap().source,
        Some(Source::Volume(src.volume_id.clone()))
    );

    // ListVolumes shows each volume's source.
    let listed: Vec<_> = list_volumes(&p, &ListVolumesRequest::default())
        .unwrap()
        .entries
        .into_iter()
        .map(|e| e.volume.unwrap().content_source)
        .collect();
    assert_eq!(listed, vec![None, req.volume_content_source.clone()]);
}

#[test]
fn omit_content_source_clones_but_answers_without_it() {
    let mut p = pools(&[":10Gi"]);
    let cfg = DriverConfig {
        omit_content_source: true,
        ..cloning()
    };
    let src = create_volume(&mut p, &cfg, &create("src", GI))
        .unwrap()
        .volume
        .unwrap();
    let req = clone_of("c", &src.volume_id);
    let clone = create_volume(&mut p, &cfg, &req).unwrap().volume.unwrap();
    assert_eq!(clone.content_source, None);
    let again = create_volume(&mut p, &cfg, &req).unwrap().volume.unwrap();
    assert_eq!(again.content_source, None, "retries omit it too");
    // The clone was still made from the source, and the listing tells.
    assert_eq!(
        p.get(&clone.volume_id).unwrap().source,
        Some(Source::Volume(src.volume_id))
    );
    let listed = list_volumes(&p, &ListVolumesRequest::default()).unwrap();
    assert_eq!(
        listed.entries[1].volume.as_ref().unwrap().content_source,
        req.volume_content_source
    );
    // Unknown sources are still NOT_FOUND: only the answer is broken.
    let err = create_volume(&mut p, &cfg, &clone_of("d", "nope")).unwrap_err();
    assert_eq!(err.code(), Code::NotFound);
}

#[test]
fn clone_idempotency_compares_sources() {
    let mut p = pools(&[":10Gi"]);
    let cfg = cloning();
    let id = |r: Result<CreateVolumeResponse, Status>| r.unwrap().volume.unwrap().volume_id;
    let a = id(create_volume(&mut p, &cfg, &create("a", GI)));
    let b = id(create_volume(&mut p, &cfg, &create("b", GI)));

    let first = create_volume(&mut p, &cfg, &clone_of("c", &a))
        .unwrap()
        .volume
        .unwrap();
    let again = create_volume(&mut p, &cfg, &clone_of("c", &a))
        .unwrap()
        .volume
        .unwrap();
    assert_eq!(again, first, "same name, same source: same volume");
    assert_eq!(p.capacity("", None), 7 * GI, "no space taken twice");

    let other = create_volume(&mut p, &cfg, &clone_of("c", &b)).unwrap_err();
    assert_eq!(other.code(), Code::AlreadyExists, "{other:?}");
    assert!(other.message().contains(&format!("{a:?}")), "{other:?}");
    let empty = create_volume(&mut p, &cfg, &create("c", GI)).unwrap_err();
    assert_eq!(
        empty.code(),
        Code::AlreadyExists,
        "clone asked again without source"
    );
    let cloned = create_volume(&mut p, &cfg, &clone_of("a", &b)).unwrap_err();
    assert_eq!(
        cloned.code(),
        Code::AlreadyExists,
        "empty volume asked again as a clone"
    );

    // A retry still answers after its source is gone, as the name is looked up first.
    delete_volume(
        &mut p,
        &DeleteVolumeRequest {
            volume_id: a.clone(),
            ..Default::default()
        },
    )
    .unwrap();
    let late = create_volume(&mut p, &cfg, &clone_of("c", &a))
        .unwrap()
        .volume
        .unwrap();
    assert_eq!(late, first);
    let new = create_volume(&mut p, &cfg, &clone_of("d", &a)).unwrap_err();
    assert_eq!(new.code(), Code::NotFound);
}
