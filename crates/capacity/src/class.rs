//! Which StorageClasses get capacity objects.

use std::collections::BTreeMap;

use k8s_openapi::api::storage::v1::StorageClass;

/// The parts of a StorageClass the capacity controller needs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Class {
    /// The StorageClass name, the `storageClassName` of its objects.
    pub name: String,
    /// Raw parameters, passed to GetCapacity unchanged (upstream does not strip reserved keys).
    pub parameters: BTreeMap<String, String>,
}

/// The classes of `driver` that get objects: WaitForFirstConsumer ones, plus Immediate ones when
/// `include_immediate` (`--capacity-for-immediate-binding`). The scheduler only consults
/// capacity for late binding, so Immediate objects would be noise. An unset binding mode counts
/// as late binding, as upstream does.
pub fn eligible<'a>(
    classes: impl IntoIterator<Item = &'a StorageClass>,
    driver: &str,
    include_immediate: bool,
) -> Vec<Class> {
    let mut out: Vec<Class> = classes
        .into_iter()
        .filter(|sc| sc.provisioner == driver)
        .filter(|sc| include_immediate || sc.volume_binding_mode.as_deref() != Some("Immediate"))
        .filter_map(|sc| {
            Some(Class {
                name: sc.metadata.name.clone()?,
                parameters: sc.parameters.clone().unwrap_or_default(),
            })
        })
        .collect();
    out.sort_by(|a, b| a.name.cmp(&b.name));
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    fn sc(name: &str, provisioner: &str, mode: Option<&str>) -> StorageClass {
        StorageClass {
            metadata: ObjectMeta {
                name: Some(name.into()),
                ..Default::default()
            },
            provisioner: provisioner.into(),
            volume_binding_mode: mode.map(String::from),
            ..Default::default()
        }
    }

    #[test]
    fn table() {
        let all = [
            sc("wffc", "drv", Some("WaitForFirstConsumer")),
            sc("imm", "drv", Some("Immediate")),
            sc("unset", "drv", None),
            sc("other", "other-driver", Some("WaitForFirstConsumer")),
        ];
        let names = |v: Vec<Class>| v.into_iter().map(|c| c.name).collect::<Vec<_>>();
        assert_eq!(names(eligible(&all, "drv", false)), ["unset", "wffc"]);
        assert_eq!(names(eligible(&all, "drv", true)), ["imm", "unset", "wffc"]);
        assert!(eligible(&all, "nobody", true).is_empty());
    }
}
