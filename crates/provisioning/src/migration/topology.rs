//! Topology translation shared by the plugins: Kubernetes zone (and region) keys in node
//! affinity, PV labels and class `allowedTopologies` versus each driver's own key.
//!
//! Which Kubernetes keys a PV uses is decided once per PV ([`labels_in_use`]): the GA keys if
//! its node affinity or labels mention the GA zone, else the beta keys if they mention the beta
//! zone, else GA.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::core::v1::{
    NodeSelector, NodeSelectorRequirement, NodeSelectorTerm, PersistentVolume,
    TopologySelectorLabelRequirement, TopologySelectorTerm, VolumeNodeAffinity,
};
use k8s_openapi::api::storage::v1::StorageClass;

use super::{TranslationError, class_name, go_lower, pv_name, spec_mut};

/// The GA zone label.
pub(super) const ZONE: &str = "topology.kubernetes.io/zone";
/// The GA region label.
pub(super) const REGION: &str = "topology.kubernetes.io/region";
/// The deprecated zone label, still on PVs provisioned by older clusters.
pub(super) const BETA_ZONE: &str = "failure-domain.beta.kubernetes.io/zone";
/// The deprecated region label.
pub(super) const BETA_REGION: &str = "failure-domain.beta.kubernetes.io/region";
/// Separates the zones of a multi-zone (regional) volume in a zone label.
pub(super) const MULTI_ZONE_SEPARATOR: &str = "__";

/// A plugin's derivation of the region from one term's zones; `Err` says why it failed.
pub(super) type RegionOf = fn(&[String]) -> Result<String, String>;

fn terms(pv: &PersistentVolume) -> &[NodeSelectorTerm] {
    pv.spec
        .as_ref()
        .and_then(|s| s.node_affinity.as_ref())
        .and_then(|a| a.required.as_ref())
        .map_or(&[], |r| r.node_selector_terms.as_slice())
}

/// The node selector terms, if there is at least one.
fn terms_mut(pv: &mut PersistentVolume) -> Option<&mut Vec<NodeSelectorTerm>> {
    let terms = &mut pv
        .spec
        .as_mut()?
        .node_affinity
        .as_mut()?
        .required
        .as_mut()?
        .node_selector_terms;
    (!terms.is_empty()).then_some(terms)
}

fn expressions(term: &NodeSelectorTerm) -> &[NodeSelectorRequirement] {
    term.match_expressions.as_deref().unwrap_or_default()
}

/// Whether any term of the node affinity has an expression on `key`.
pub(super) fn has_key(pv: &PersistentVolume, key: &str) -> bool {
    terms(pv).iter().flat_map(expressions).any(|e| e.key == key)
}

/// The PV's label `key`, if set.
pub(super) fn label<'a>(pv: &'a PersistentVolume, key: &str) -> Option<&'a str> {
    pv.metadata.labels.as_ref()?.get(key).map(String::as_str)
}

/// The (zone, region) Kubernetes keys the PV uses: node affinity first, then labels, GA before
/// beta, GA when neither says.
pub(super) fn labels_in_use(pv: &PersistentVolume) -> (&'static str, &'static str) {
    if has_key(pv, ZONE) {
        (ZONE, REGION)
    } else if has_key(pv, BETA_ZONE) {
        (BETA_ZONE, BETA_REGION)
    } else if label(pv, ZONE).is_some() {
        (ZONE, REGION)
    } else if label(pv, BETA_ZONE).is_some() {
        (BETA_ZONE, BETA_REGION)
    } else {
        (ZONE, REGION)
    }
}

/// Every value of `key` over all terms, sorted and without duplicates.
pub(super) fn values_of(pv: &PersistentVolume, key: &str) -> Vec<String> {
    let values: BTreeSet<&String> = terms(pv)
        .iter()
        .flat_map(expressions)
        .filter(|e| e.key == key)
        .flat_map(|e| e.values.iter().flatten())
        .collect();
    values.into_iter().cloned().collect()
}

/// Renames the key of every expression on `from` to `to`. Expressions already on `to` are not
/// merged, as upstream.
pub(super) fn rename_key(pv: &mut PersistentVolume, from: &str, to: &str) {
    let Some(terms) = terms_mut(pv) else { return };
    for e in terms
        .iter_mut()
        .flat_map(|t| t.match_expressions.iter_mut().flatten())
        .filter(|e| e.key == from)
    {
        e.key = to.to_string();
    }
}

fn requirement(key: &str, values: Vec<String>) -> NodeSelectorRequirement {
    NodeSelectorRequirement {
        key: key.to_string(),
        operator: "In".to_string(),
        values: Some(values),
    }
}

/// Appends `key In values` to every term (creating one term if there is none). Values are
/// trimmed, empty ones dropped, the rest sorted and deduplicated; with none left nothing is
/// added and the answer is `false` (upstream's error, which every caller ignores).
pub(super) fn add_requirement<'v>(
    pv: &mut PersistentVolume,
    key: &str,
    values: impl IntoIterator<Item = &'v str>,
) -> bool {
    let values: BTreeSet<&str> = values
        .into_iter()
        .map(str::trim)
        .filter(|v| !v.is_empty())
        .collect();
    if values.is_empty() {
        return false;
    }
    let values: Vec<String> = values.into_iter().map(str::to_string).collect();
    let affinity = spec_mut(pv)
        .node_affinity
        .get_or_insert_with(VolumeNodeAffinity::default);
    let terms = &mut affinity
        .required
        .get_or_insert_with(NodeSelector::default)
        .node_selector_terms;
    if terms.is_empty() {
        terms.push(NodeSelectorTerm::default());
    }
    for term in terms {
        term.match_expressions
            .get_or_insert_with(Vec::new)
            .push(requirement(key, values.clone()));
    }
    true
}

/// Sets label `key` unless the PV already has it (whatever its value).
pub(super) fn set_label_if_absent(pv: &mut PersistentVolume, key: &str, value: String) {
    pv.metadata
        .labels
        .get_or_insert_with(BTreeMap::new)
        .entry(key.to_string())
        .or_insert(value);
}

/// In-tree → CSI: the Kubernetes zone key of the node affinity becomes `csi_key`; without one,
/// the zone label (possibly several zones joined by `__`) becomes a `csi_key` requirement. A
/// beta region key in the affinity is upgraded to the GA one, so that nodes with GA labels only
/// still match.
pub(super) fn in_tree_to_csi(pv: &mut PersistentVolume, csi_key: &str) {
    let (zone_key, region_key) = labels_in_use(pv);
    if !values_of(pv, zone_key).is_empty() {
        rename_key(pv, zone_key, csi_key);
    } else if let Some(zones) = label(pv, zone_key).map(str::to_string) {
        add_requirement(pv, csi_key, zones.split(MULTI_ZONE_SEPARATOR));
    }
    if region_key == BETA_REGION && !values_of(pv, region_key).is_empty() {
        rename_key(pv, region_key, REGION);
    }
}

/// CSI → in-tree: `csi_key` in the node affinity becomes the Kubernetes zone key, and the zone
/// label is set from the affinity's zones (joined by `__`) unless already present. Plugins that
/// can tell the region from the zones then call [`add_regions`].
pub(super) fn csi_to_in_tree(pv: &mut PersistentVolume, csi_key: &str) {
    let (zone_key, _) = labels_in_use(pv);
    rename_key(pv, csi_key, zone_key);
    let zones = values_of(pv, zone_key);
    if !zones.is_empty() {
        set_label_if_absent(pv, zone_key, zones.join(MULTI_ZONE_SEPARATOR));
    }
}

/// Adds a region requirement to every term that lacks one, derived from that term's zones
/// (a term without zones is an error), and the region label, unless present, when all terms
/// agree on one region. Without node affinity terms nothing happens.
pub(super) fn add_regions(
    pv: &mut PersistentVolume,
    region_of: RegionOf,
) -> Result<(), TranslationError> {
    let (zone_key, region_key) = labels_in_use(pv);
    let name = pv_name(pv);
    let Some(terms) = terms_mut(pv) else {
        return Ok(());
    };
    for term in terms.iter_mut() {
        let mut zones = Vec::new();
        let mut has_region = false;
        for e in expressions(term) {
            if e.key == region_key {
                has_region = true;
                break;
            }
            if e.key == zone_key {
                zones.extend(e.values.iter().flatten().cloned());
            }
        }
        if has_region {
            continue;
        }
        let region = region_of(&zones).map_err(|reason| TranslationError::Region {
            pv: name.clone(),
            zones,
            reason,
        })?;
        term.match_expressions
            .get_or_insert_with(Vec::new)
            .push(requirement(region_key, vec![region]));
    }
    if let [region] = values_of(pv, region_key).as_slice() {
        set_label_if_absent(pv, region_key, region.clone());
    }
    Ok(())
}

/// The zones of a legacy `zone` (one) or `zones` (comma-separated) class parameter, given the
/// lowercased key; `None` for any other key.
pub(super) fn legacy_zones(lower_key: &str, value: &str) -> Option<Vec<String>> {
    match lower_key {
        "zone" => Some(vec![value.to_string()]),
        "zones" => Some(value.split(',').map(str::to_string).collect()),
        _ => None,
    }
}

/// One term requiring `key` in `values`.
pub(super) fn selector(key: &str, values: Vec<String>) -> Vec<TopologySelectorTerm> {
    vec![TopologySelectorTerm {
        match_label_expressions: Some(vec![TopologySelectorLabelRequirement {
            key: key.to_string(),
            values,
        }]),
    }]
}

/// `allowedTopologies` with the Kubernetes zone keys (GA and beta) renamed to `csi_key`; other
/// keys, the region ones included, pass unchanged.
pub(super) fn translate_allowed(
    terms: &[TopologySelectorTerm],
    csi_key: &str,
) -> Vec<TopologySelectorTerm> {
    terms
        .iter()
        .map(|term| {
            let expressions: Vec<_> = term
                .match_label_expressions
                .iter()
                .flatten()
                .map(|e| {
                    let mut e = e.clone();
                    if e.key == ZONE || e.key == BETA_ZONE {
                        e.key = csi_key.to_string();
                    }
                    e
                })
                .collect();
            TopologySelectorTerm {
                match_label_expressions: (!expressions.is_empty()).then_some(expressions),
            }
        })
        .collect()
}

/// A legacy `zone`/`zones` class parameter: its key as written, and its zones.
pub(super) type LegacyZones = (String, Vec<String>);

/// A zonal plugin's class parameters: a legacy `zone`/`zones` key is set aside (its key as
/// written, and its zones) for [`class_topology`]; every other key goes through `carry`, which
/// inserts what the driver gets for it (`carry(lowercased key, key, value, out)`).
pub(super) fn split_parameters(
    class: &StorageClass,
    mut carry: impl FnMut(&str, &str, &str, &mut BTreeMap<String, String>),
) -> (BTreeMap<String, String>, Option<LegacyZones>) {
    let mut params = BTreeMap::new();
    let mut legacy = None;
    for (key, value) in class.parameters.iter().flatten() {
        let lower = go_lower(key);
        match legacy_zones(&lower, value) {
            Some(zones) => legacy = Some((key.clone(), zones)),
            None => carry(&lower, key, value, &mut params),
        }
    }
    (params, legacy)
}

/// The class's topology after its parameters were read: a legacy `zone`/`zones` parameter
/// (its key as written, and its zones) becomes the class's only allowed term on `csi_key`, and
/// may not be combined with `allowedTopologies`; otherwise `allowedTopologies` is translated.
pub(super) fn class_topology(
    class: &mut StorageClass,
    legacy: Option<LegacyZones>,
    csi_key: &str,
) -> Result<(), TranslationError> {
    let allowed = class.allowed_topologies.as_deref().unwrap_or_default();
    match legacy {
        Some((parameter, _)) if !allowed.is_empty() => {
            Err(TranslationError::ZonesWithAllowedTopologies {
                class: class_name(class),
                parameter,
            })
        }
        Some((_, zones)) => {
            class.allowed_topologies = Some(selector(csi_key, zones));
            Ok(())
        }
        None => {
            if !allowed.is_empty() {
                class.allowed_topologies = Some(translate_allowed(allowed, csi_key));
            }
            Ok(())
        }
    }
}
