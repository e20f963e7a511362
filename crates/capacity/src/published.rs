//! Our CSIStorageCapacity objects: reading existing ones and building new ones.

use std::collections::BTreeMap;

use k8s_openapi::api::storage::v1::CSIStorageCapacity;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta, OwnerReference};

use crate::desired::Key;
use crate::quantity;
use crate::value::Capacity;
use crate::{DRIVER_NAME_LABEL, GENERATE_NAME, MANAGED_BY_LABEL};

/// What an existing object says, in the terms the planner compares.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Published {
    /// The object's name.
    pub name: String,
    /// The pair it represents; `None` for a shape we never write (a selector with
    /// expressions, no selector, no class), which therefore is obsolete.
    pub key: Option<Key>,
    /// `capacity` in bytes; `None` when unset or unparsable.
    pub capacity: Option<i64>,
    /// `maximumVolumeSize` in bytes; `None` when unset or unparsable.
    pub maximum_volume_size: Option<i64>,
    /// UID of the owner reference marked `controller: true`.
    pub controller_uid: Option<String>,
    /// The object has a deletion timestamp.
    pub deleting: bool,
}

impl Published {
    /// Reads an object from the cache. Never fails: odd objects become obsolete.
    pub fn from_object(obj: &CSIStorageCapacity) -> Published {
        let meta = &obj.metadata;
        Published {
            name: meta.name.clone().unwrap_or_default(),
            key: key_of(obj),
            capacity: obj.capacity.as_ref().and_then(quantity::to_bytes),
            maximum_volume_size: obj
                .maximum_volume_size
                .as_ref()
                .and_then(quantity::to_bytes),
            controller_uid: meta
                .owner_references
                .iter()
                .flatten()
                .find(|o| o.controller == Some(true))
                .map(|o| o.uid.clone()),
            deleting: meta.deletion_timestamp.is_some(),
        }
    }
}

fn key_of(obj: &CSIStorageCapacity) -> Option<Key> {
    let selector = obj.node_topology.as_ref()?;
    if selector
        .match_expressions
        .as_ref()
        .is_some_and(|e| !e.is_empty())
    {
        return None;
    }
    if obj.storage_class_name.is_empty() {
        return None;
    }
    Some(Key {
        segment: selector.match_labels.clone().unwrap_or_default(),
        class: obj.storage_class_name.clone(),
    })
}

/// Where and how our objects are written.
#[derive(Clone, Debug, PartialEq)]
pub struct ObjectTemplate {
    /// `NAMESPACE` of the provisioner.
    pub namespace: String,
    /// The CSI driver name, for the `drivername` label.
    pub driver: String,
    /// `managed-by` label value.
    pub managed_by: String,
    /// Owner per `--capacity-ownerref-level`; `None` for -1.
    pub owner: Option<OwnerReference>,
}

impl ObjectTemplate {
    /// The label selector that finds exactly our objects.
    pub fn label_selector(&self) -> String {
        format!(
            "{DRIVER_NAME_LABEL}={},{MANAGED_BY_LABEL}={}",
            self.driver, self.managed_by
        )
    }
}

/// A new object for `key` (created with `generateName: csisc-`).
pub fn build_object(
    key: &Key,
    capacity: Capacity,
    template: &ObjectTemplate,
) -> CSIStorageCapacity {
    let labels = BTreeMap::from([
        (DRIVER_NAME_LABEL.to_string(), template.driver.clone()),
        (MANAGED_BY_LABEL.to_string(), template.managed_by.clone()),
    ]);
    let mut obj = CSIStorageCapacity {
        metadata: ObjectMeta {
            generate_name: Some(GENERATE_NAME.to_string()),
            namespace: Some(template.namespace.clone()),
            labels: Some(labels),
            owner_references: template.owner.clone().map(|o| vec![o]),
            ..Default::default()
        },
        node_topology: Some(LabelSelector {
            match_labels: Some(key.segment.clone()),
            match_expressions: None,
        }),
        storage_class_name: key.class.clone(),
        ..Default::default()
    };
    set_values(&mut obj, capacity);
    obj
}

/// The replacement for an existing object: new values, our owner appended when missing (as
/// upstream does), everything else (labels, other owners, resourceVersion) kept. A reference
/// to our owner that is not marked as the controller is replaced by ours, which is: the
/// planner asks for our controller reference, and would otherwise ask again every poll.
pub fn updated_object(
    existing: &CSIStorageCapacity,
    capacity: Capacity,
    owner: Option<&OwnerReference>,
) -> CSIStorageCapacity {
    let mut obj = existing.clone();
    set_values(&mut obj, capacity);
    if let Some(owner) = owner {
        let owners = obj.metadata.owner_references.get_or_insert_with(Vec::new);
        match owners.iter_mut().find(|o| o.uid == owner.uid) {
            Some(ours) if ours.controller != Some(true) => *ours = owner.clone(),
            Some(_) => {}
            None => owners.push(owner.clone()),
        }
    }
    obj
}

fn set_values(obj: &mut CSIStorageCapacity, capacity: Capacity) {
    obj.capacity = Some(quantity::from_bytes(capacity.available));
    obj.maximum_volume_size = capacity.maximum_volume_size.map(quantity::from_bytes);
}

/// Convenience for tests and logs: the quantity string of a byte count.
pub fn format_bytes(bytes: i64) -> String {
    let Quantity(s) = quantity::from_bytes(bytes);
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::segment::Segment;

    fn template(owner: Option<OwnerReference>) -> ObjectTemplate {
        ObjectTemplate {
            namespace: "kube-system".into(),
            driver: "mock.csi.test".into(),
            managed_by: "external-provisioner".into(),
            owner,
        }
    }

    fn owner(uid: &str) -> OwnerReference {
        OwnerReference {
            api_version: "apps/v1".into(),
            kind: "StatefulSet".into(),
            name: "csi-provisioner".into(),
            uid: uid.into(),
            controller: Some(true),
            block_owner_deletion: None,
        }
    }

    fn key() -> Key {
        Key {
            segment: Segment::from([("topology.mock.csi/node".into(), "n1".into())]),
            class: "fast".into(),
        }
    }

    #[test]
    fn built_object_has_upstream_shape_and_reads_back() {
        let obj = build_object(
            &key(),
            Capacity::from_response(10 << 30, Some(4 << 30)),
            &template(Some(owner("u1"))),
        );
        assert_eq!(obj.metadata.generate_name.as_deref(), Some("csisc-"));
        assert_eq!(obj.metadata.namespace.as_deref(), Some("kube-system"));
        let labels = obj.metadata.labels.as_ref().unwrap();
        assert_eq!(labels[DRIVER_NAME_LABEL], "mock.csi.test");
        assert_eq!(labels[MANAGED_BY_LABEL], "external-provisioner");
        assert_eq!(obj.storage_class_name, "fast");
        assert_eq!(obj.capacity, Some(Quantity("10Gi".into())));
        assert_eq!(obj.maximum_volume_size, Some(Quantity("4Gi".into())));
        assert_eq!(
            obj.node_topology
                .as_ref()
                .unwrap()
                .match_labels
                .as_ref()
                .unwrap()["topology.mock.csi/node"],
            "n1"
        );
        let mut named = obj.clone();
        named.metadata.name = Some("csisc-abc".into());
        let read = Published::from_object(&named);
        assert_eq!(read.key, Some(key()));
        assert_eq!(read.capacity, Some(10 << 30));
        assert_eq!(read.maximum_volume_size, Some(4 << 30));
        assert_eq!(read.controller_uid.as_deref(), Some("u1"));
        assert!(!read.deleting);
    }

    #[test]
    fn no_maximum_when_driver_reports_none_and_no_owner_at_level_minus_one() {
        let obj = build_object(&key(), Capacity::from_response(0, None), &template(None));
        assert_eq!(obj.capacity, Some(Quantity("0".into())));
        assert_eq!(obj.maximum_volume_size, None);
        assert_eq!(obj.metadata.owner_references, None);
    }

    #[test]
    fn odd_shapes_have_no_key() {
        let mut obj = build_object(&key(), Capacity::from_response(1, None), &template(None));
        obj.node_topology.as_mut().unwrap().match_expressions = Some(vec![Default::default()]);
        assert_eq!(Published::from_object(&obj).key, None);
        obj.node_topology = None;
        assert_eq!(Published::from_object(&obj).key, None);
    }

    #[test]
    fn update_keeps_identity_and_appends_owner_once() {
        let mut existing = build_object(
            &key(),
            Capacity::from_response(1, None),
            &template(Some(owner("old"))),
        );
        existing.metadata.name = Some("csisc-x".into());
        existing.metadata.resource_version = Some("42".into());
        let updated = updated_object(
            &existing,
            Capacity::from_response(2 << 20, None),
            Some(&owner("new")),
        );
        assert_eq!(updated.metadata.name.as_deref(), Some("csisc-x"));
        assert_eq!(updated.metadata.resource_version.as_deref(), Some("42"));
        assert_eq!(updated.capacity, Some(Quantity("2Mi".into())));
        let uids: Vec<_> = updated
            .metadata
            .owner_references
            .iter()
            .flatten()
            .map(|o| o.uid.as_str())
            .collect();
        assert_eq!(uids, ["old", "new"]);
        let again = updated_object(
            &updated,
            Capacity::from_response(2 << 20, None),
            Some(&owner("new")),
        );
        assert_eq!(again.metadata.owner_references.unwrap().len(), 2);
    }

    #[test]
    fn our_reference_without_the_controller_mark_becomes_ours() {
        let mut loose = owner("ours");
        loose.controller = None;
        let existing = build_object(
            &key(),
            Capacity::from_response(1, None),
            &template(Some(loose)),
        );
        let updated = updated_object(
            &existing,
            Capacity::from_response(1, None),
            Some(&owner("ours")),
        );
        assert_eq!(updated.metadata.owner_references, Some(vec![owner("ours")]));
    }

    #[test]
    fn selector_string() {
        assert_eq!(
            template(None).label_selector(),
            "csi.storage.k8s.io/drivername=mock.csi.test,csi.storage.k8s.io/managed-by=external-provisioner"
        );
    }
}
