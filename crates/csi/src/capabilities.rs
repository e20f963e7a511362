//! What a driver says it can do, folded into plain booleans.

use crate::v1::controller_service_capability::{self, rpc};
use crate::v1::plugin_capability::{self, service, volume_expansion};
use crate::v1::{ControllerServiceCapability, PluginCapability};

/// The answers of GetPluginCapabilities and ControllerGetCapabilities. A capability the driver
/// lists is `true`; anything else, including values this proto does not know, is ignored.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DriverCapabilities {
    // Plugin capabilities.
    /// `Service.CONTROLLER_SERVICE`.
    pub controller_service: bool,
    /// `Service.VOLUME_ACCESSIBILITY_CONSTRAINTS`: the driver uses topology.
    pub volume_accessibility_constraints: bool,
    /// `Service.GROUP_CONTROLLER_SERVICE`.
    pub group_controller_service: bool,
    /// `Service.SNAPSHOT_METADATA_SERVICE`.
    pub snapshot_metadata_service: bool,
    /// `Service.SNAPSHOT_ACCESSIBILITY_CONSTRAINTS` (alpha, CSI 1.13).
    pub snapshot_accessibility_constraints: bool,
    /// `VolumeExpansion.ONLINE`.
    pub online_expansion: bool,
    /// `VolumeExpansion.OFFLINE`.
    pub offline_expansion: bool,

    // Controller capabilities.
    /// `CREATE_DELETE_VOLUME`.
    pub create_delete_volume: bool,
    /// `PUBLISH_UNPUBLISH_VOLUME`.
    pub publish_unpublish_volume: bool,
    /// `LIST_VOLUMES`.
    pub list_volumes: bool,
    /// `GET_CAPACITY`.
    pub get_capacity: bool,
    /// `CREATE_DELETE_SNAPSHOT`.
    pub create_delete_snapshot: bool,
    /// `LIST_SNAPSHOTS`.
    pub list_snapshots: bool,
    /// `CLONE_VOLUME`.
    pub clone_volume: bool,
    /// `PUBLISH_READONLY`.
    pub publish_readonly: bool,
    /// `EXPAND_VOLUME`.
    pub expand_volume: bool,
    /// `LIST_VOLUMES_PUBLISHED_NODES`.
    pub list_volumes_published_nodes: bool,
    /// `GET_VOLUME`.
    pub get_volume: bool,
    /// `SINGLE_NODE_MULTI_WRITER`.
    pub single_node_multi_writer: bool,
    /// `MODIFY_VOLUME`.
    pub modify_volume: bool,
    /// `GET_SNAPSHOT`.
    pub get_snapshot: bool,
    /// `GET_VOLUME_HEALTH` (alpha, CSI 1.13).
    pub get_volume_health: bool,
    /// `LIST_VOLUME_HEALTH` (alpha, CSI 1.13).
    pub list_volume_health: bool,
}

/// Folds the two capability lists into [`DriverCapabilities`].
pub fn fold_capabilities(
    plugin: &[PluginCapability],
    controller: &[ControllerServiceCapability],
) -> DriverCapabilities {
    let mut caps = DriverCapabilities::default();
    for cap in plugin {
        match &cap.r#type {
            Some(plugin_capability::Type::Service(s)) => match service::Type::try_from(s.r#type) {
                Ok(service::Type::ControllerService) => caps.controller_service = true,
                Ok(service::Type::VolumeAccessibilityConstraints) => {
                    caps.volume_accessibility_constraints = true;
                }
                Ok(service::Type::GroupControllerService) => caps.group_controller_service = true,
                Ok(service::Type::SnapshotMetadataService) => caps.snapshot_metadata_service = true,
                Ok(service::Type::SnapshotAccessibilityConstraints) => {
                    caps.snapshot_accessibility_constraints = true;
                }
                Ok(service::Type::Unknown) | Err(_) => {}
            },
            Some(plugin_capability::Type::VolumeExpansion(e)) => {
                match volume_expansion::Type::try_from(e.r#type) {
                    Ok(volume_expansion::Type::Online) => caps.online_expansion = true,
                    Ok(volume_expansion::Type::Offline) => caps.offline_expansion = true,
                    Ok(volume_expansion::Type::Unknown) | Err(_) => {}
                }
            }
            None => {}
        }
    }
    for cap in controller {
        let Some(controller_service_capability::Type::Rpc(r)) = &cap.r#type else {
            continue;
        };
        let Ok(t) = rpc::Type::try_from(r.r#type) else {
            continue;
        };
        let flag = match t {
            rpc::Type::Unknown => continue,
            rpc::Type::CreateDeleteVolume => &mut caps.create_delete_volume,
            rpc::Type::PublishUnpublishVolume => &mut caps.publish_unpublish_volume,
            rpc::Type::ListVolumes => &mut caps.list_volumes,
            rpc::Type::GetCapacity => &mut caps.get_capacity,
            rpc::Type::CreateDeleteSnapshot => &mut caps.create_delete_snapshot,
            rpc::Type::ListSnapshots => &mut caps.list_snapshots,
            rpc::Type::CloneVolume => &mut caps.clone_volume,
            rpc::Type::PublishReadonly => &mut caps.publish_readonly,
            rpc::Type::ExpandVolume => &mut caps.expand_volume,
            rpc::Type::ListVolumesPublishedNodes => &mut caps.list_volumes_published_nodes,
            rpc::Type::GetVolume => &mut caps.get_volume,
            rpc::Type::SingleNodeMultiWriter => &mut caps.single_node_multi_writer,
            rpc::Type::ModifyVolume => &mut caps.modify_volume,
            rpc::Type::GetSnapshot => &mut caps.get_snapshot,
            rpc::Type::GetVolumeHealth => &mut caps.get_volume_health,
            rpc::Type::ListVolumeHealth => &mut caps.list_volume_health,
        };
        *flag = true;
    }
    caps
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::v1::controller_service_capability::Rpc;
    use crate::v1::plugin_capability::{Service, VolumeExpansion};

    fn svc(t: i32) -> PluginCapability {
        PluginCapability {
            r#type: Some(plugin_capability::Type::Service(Service { r#type: t })),
        }
    }

    fn expansion(t: i32) -> PluginCapability {
        PluginCapability {
            r#type: Some(plugin_capability::Type::VolumeExpansion(VolumeExpansion {
                r#type: t,
            })),
        }
    }

    fn ctrl(t: i32) -> ControllerServiceCapability {
        ControllerServiceCapability {
            r#type: Some(controller_service_capability::Type::Rpc(Rpc { r#type: t })),
        }
    }

    #[test]
    fn folds_each_capability_into_its_flag() {
        type Case = (
            Vec<PluginCapability>,
            Vec<ControllerServiceCapability>,
            DriverCapabilities,
        );
        let d = DriverCapabilities::default();
        let cases: Vec<Case> = vec![
            (vec![], vec![], d),
            (
                vec![svc(1)],
                vec![],
                DriverCapabilities {
                    controller_service: true,
                    ..d
                },
            ),
            (
                vec![svc(2)],
                vec![],
                DriverCapabilities {
                    volume_accessibility_constraints: true,
                    ..d
                },
            ),
            (
                vec![svc(3)],
                vec![],
                DriverCapabilities {
                    group_controller_service: true,
                    ..d
                },
            ),
            (
                vec![svc(4)],
                vec![],
                DriverCapabilities {
                    snapshot_metadata_service: true,
                    ..d
                },
            ),
            (
                vec![svc(5)],
                vec![],
                DriverCapabilities {
                    snapshot_accessibility_constraints: true,
                    ..d
                },
            ),
            (
                vec![expansion(1)],
                vec![],
                DriverCapabilities {
                    online_expansion: true,
                    ..d
                },
            ),
            (
                vec![expansion(2)],
                vec![],
                DriverCapabilities {
                    offline_expansion: true,
                    ..d
                },
            ),
            // Unknown values and empty oneofs are ignored.
            (
                vec![
                    svc(0),
                    svc(99),
                    expansion(7),
                    PluginCapability { r#type: None },
                ],
                vec![],
                d,
            ),
            (
                vec![],
                vec![
                    ctrl(0),
                    ctrl(99),
                    ControllerServiceCapability { r#type: None },
                ],
                d,
            ),
            (
                vec![],
                vec![ctrl(1)],
                DriverCapabilities {
                    create_delete_volume: true,
                    ..d
                },
            ),
            (
                vec![],
                vec![ctrl(2)],
                DriverCapabilities {
                    publish_unpublish_volume: true,
                    ..d
                },
            ),
            (
                vec![],
                vec![ctrl(3)],
                DriverCapabilities {
                    list_volumes: true,
                    ..d
                },
            ),
            (
                vec![],
                vec![ctrl(4)],
                DriverCapabilities {
                    get_capacity: true,
                    ..d
                },
            ),
            (
                vec![],
                vec![ctrl(5)],
                DriverCapabilities {
                    create_delete_snapshot: true,
                    ..d
                },
            ),
            (
                vec![],
                vec![ctrl(6)],
                DriverCapabilities {
                    list_snapshots: true,
                    ..d
                },
            ),
            (
                vec![],
                vec![ctrl(7)],
                DriverCapabilities {
                    clone_volume: true,
                    ..d
                },
            ),
            (
                vec![],
                vec![ctrl(8)],
                DriverCapabilities {
                    publish_readonly: true,
                    ..d
                },
            ),
            (
                vec![],
                vec![ctrl(9)],
                DriverCapabilities {
                    expand_volume: true,
                    ..d
                },
            ),
            (
                vec![],
                vec![ctrl(10)],
                DriverCapabilities {
                    list_volumes_published_nodes: true,
                    ..d
                },
            ),
            // VOLUME_CONDITION (11) was removed in CSI 1.13: ignored like any unknown value.
            (vec![], vec![ctrl(11)], d),
            (
                vec![],
                vec![ctrl(16), ctrl(17)],
                DriverCapabilities {
                    get_volume_health: true,
                    list_volume_health: true,
                    ..d
                },
            ),
            (
                vec![],
                vec![ctrl(12)],
                DriverCapabilities {
                    get_volume: true,
                    ..d
                },
            ),
            (
                vec![],
                vec![ctrl(13)],
                DriverCapabilities {
                    single_node_multi_writer: true,
                    ..d
                },
            ),
            (
                vec![],
                vec![ctrl(14)],
                DriverCapabilities {
                    modify_volume: true,
                    ..d
                },
            ),
            (
                vec![],
                vec![ctrl(15)],
                DriverCapabilities {
                    get_snapshot: true,
                    ..d
                },
            ),
            (
                vec![svc(1), svc(2), svc(1)],
                vec![ctrl(1), ctrl(4), ctrl(7)],
                DriverCapabilities {
                    controller_service: true,
                    volume_accessibility_constraints: true,
                    create_delete_volume: true,
                    get_capacity: true,
                    clone_volume: true,
                    ..d
                },
            ),
        ];
        for (plugin, controller, want) in cases {
            assert_eq!(
                fold_capabilities(&plugin, &controller),
                want,
                "{plugin:?} {controller:?}"
            );
        }
    }
}
