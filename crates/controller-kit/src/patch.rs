//! Writes that change only what they mean to change, on objects other actors own.
//!
//! Our caches drop what we never read (`managedFields`, kubectl's last-applied annotation), and
//! our API types know only the fields of the Kubernetes version they were generated for. A PUT
//! of such a copy would remove all of that from the stored object: `kubectl apply` loses its
//! three-way merge, field owners lose their fields, and a newer server's fields vanish. So a
//! change is computed on our copy and sent as the difference alone ([`merge_diff`], a JSON
//! merge patch), guarded by the resourceVersion it was computed from ([`guarded`]).
//!
//! Upstream's RBAC grants only `update` on claims and snapshots. Without `patch`, the same
//! difference is applied to the whole object as the API server has it ([`apply_to`]) and that
//! is written back: one GET more per write, nothing lost.

use serde_json::{Map, Value};

/// The JSON merge patch (RFC 7386) that turns `before` into `after`, or `None` when they are
/// equal. Objects are compared key by key; anything else (arrays included) is replaced whole,
/// and a key `after` lacks becomes `null` (for a map: each of its keys). Pure.
pub fn merge_diff(before: &Value, after: &Value) -> Option<Value> {
    match (before, after) {
        (Value::Object(b), Value::Object(a)) => {
            let mut patch = Map::new();
            for (key, old) in b {
                match a.get(key) {
                    // A map we emptied: only the keys we knew go, not the whole map with what
                    // our copy lacks (the last-applied annotation).
                    None if old.is_object() => {
                        if let Some(p) = merge_diff(old, &Value::Object(Map::new())) {
                            patch.insert(key.clone(), p);
                        }
                    }
                    None => {
                        patch.insert(key.clone(), Value::Null);
                    }
                    Some(new) => {
                        if let Some(p) = merge_diff(old, new) {
                            patch.insert(key.clone(), p);
                        }
                    }
                }
            }
            for (key, new) in a {
                if !b.contains_key(key) {
                    patch.insert(key.clone(), new.clone());
                }
            }
            (!patch.is_empty()).then_some(Value::Object(patch))
        }
        // A null inside a merge patch means "remove": an object replacing a scalar is sent
        // whole, and a null value cannot be set through one (Kubernetes objects hold none).
        _ if before == after => None,
        _ => Some(after.clone()),
    }
}

/// `patch` with `metadata.resourceVersion` set to `resource_version`: the API server refuses
/// it with 409 Conflict if the object changed since that version, so a change decided on what
/// we read is never applied to something else. Pure.
pub fn guarded(mut patch: Value, resource_version: &str) -> Value {
    if let Value::Object(fields) = &mut patch {
        let metadata = fields
            .entry("metadata")
            .or_insert_with(|| Value::Object(Map::new()));
        if let Value::Object(m) = metadata {
            m.insert(
                "resourceVersion".into(),
                Value::String(resource_version.into()),
            );
        }
    }
    patch
}

/// Applies `patch` to the object as the API server has it (JSON merge patch semantics), for a
/// PUT where `patch` is not allowed. `managedFields` are left out of the result: a PUT without
/// them keeps the stored ones, whereas an empty list would reset them. Pure.
pub fn apply_to(mut stored: Value, patch: &Value) -> Value {
    json_patch::merge(&mut stored, patch);
    if let Some(Value::Object(m)) = stored.get_mut("metadata") {
        m.remove("managedFields");
    }
    stored
}

/// A JSON patch (RFC 6902) for a change of the finalizer list alone: it tests that the list is
/// still the one `before` has and replaces it with `after`'s. Unlike a merge patch guarded by
/// the resourceVersion, it passes while others write other fields (kube-controller-manager
/// writes a claim's status right after binding it, just when we release it) and fails (422)
/// only when the list itself changed. `None` when anything else differs, or when `before` has
/// no list to test (an `add` could replace one written meanwhile). Pure.
pub fn finalizers_only(before: &Value, after: &Value) -> Option<Value> {
    let diff = merge_diff(before, after)?;
    let only_finalizers = diff.as_object().is_some_and(|d| {
        d.len() == 1
            && d.get("metadata")
                .and_then(Value::as_object)
                .is_some_and(|m| m.len() == 1 && m.contains_key("finalizers"))
    });
    let old = before.pointer("/metadata/finalizers")?;
    if !only_finalizers || !old.is_array() {
        return None;
    }
    let new = after
        .pointer("/metadata/finalizers")
        .cloned()
        .unwrap_or_else(|| Value::Array(Vec::new()));
    Some(serde_json::json!([
        {"op": "test", "path": "/metadata/finalizers", "value": old},
        {"op": "replace", "path": "/metadata/finalizers", "value": new},
    ]))
}

/// Whether a 403 is RBAC's refusal of `verb` (rather than, say, an admission policy's): only
/// that says another way of writing may work.
pub fn refused_verb(message: &str, verb: &str) -> bool {
    message.contains(&format!("cannot {verb} resource"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_change_of_finalizers_alone_tests_the_list_it_replaces() {
        let claim = |finalizers: Value, phase: &str| {
            json!({"metadata": {"name": "c", "resourceVersion": "5", "finalizers": finalizers},
                   "status": {"phase": phase}})
        };
        let ours = "example.com/ours";
        let theirs = "example.com/theirs";
        let before = claim(json!([theirs, ours]), "Pending");
        // Removing ours: the list as read is tested, the new one replaces it.
        assert_eq!(
            finalizers_only(&before, &claim(json!([theirs]), "Pending")),
            Some(json!([
                {"op": "test", "path": "/metadata/finalizers", "value": [theirs, ours]},
                {"op": "replace", "path": "/metadata/finalizers", "value": [theirs]},
            ]))
        );
        // The last one gone (our types drop an empty list): replaced by an empty list.
        let mut none = claim(json!([]), "Pending");
        none["metadata"]
            .as_object_mut()
            .unwrap()
            .remove("finalizers");
        let only_ours = claim(json!([ours]), "Pending");
        assert_eq!(
            finalizers_only(&only_ours, &none).unwrap()[1]["value"],
            json!([])
        );
        // Anything else changed too, or no list to test: not this kind of write.
        assert_eq!(
            finalizers_only(&before, &claim(json!([theirs]), "Bound")),
            None
        );
        assert_eq!(finalizers_only(&none, &only_ours), None);
        assert_eq!(finalizers_only(&before, &before), None);
        // Applied where someone else wrote the status meanwhile, it passes; where the list
        // changed, the test fails.
        let patch: json_patch::Patch = serde_json::from_value(
            finalizers_only(&before, &claim(json!([theirs]), "Pending")).unwrap(),
        )
        .unwrap();
        let mut stored = claim(json!([theirs, ours]), "Bound");
        json_patch::patch(&mut stored, &patch).unwrap();
        assert_eq!(stored, claim(json!([theirs]), "Bound"));
        let mut changed = claim(json!([ours]), "Pending");
        assert!(json_patch::patch(&mut changed, &patch).is_err());
    }

    /// Drops empty maps: a map emptied by a patch is stored as `{}`, a typed copy omits it.
    fn without_empty(v: Value) -> Value {
        match v {
            Value::Object(m) => Value::Object(
                m.into_iter()
                    .map(|(k, v)| (k, without_empty(v)))
                    .filter(|(_, v)| v.as_object().is_none_or(|m| !m.is_empty()))
                    .collect(),
            ),
            other => other,
        }
    }

    #[test]
    fn merge_diff_table() {
        let claim = json!({
            "metadata": {"name": "c", "resourceVersion": "7", "finalizers": ["a"],
                "annotations": {"team": "x", "volume.kubernetes.io/selected-node": "n1"}},
            "spec": {"resources": {"requests": {"storage": "1Gi"}}}
        });
        let with = |f: &dyn Fn(&mut Value)| {
            let mut c = claim.clone();
            f(&mut c);
            c
        };
        let cases: [(&str, Value, Option<Value>); 7] = [
            (
                "the last annotation we knew removed: only that key goes",
                with(&|c| {
                    c["metadata"].as_object_mut().unwrap().remove("annotations");
                }),
                Some(json!({"metadata": {"annotations": {
                    "team": null, "volume.kubernetes.io/selected-node": null}}})),
            ),
            ("unchanged", claim.clone(), None),
            (
                "finalizer added: the list is replaced whole",
                with(&|c| c["metadata"]["finalizers"] = json!(["a", "b"])),
                Some(json!({"metadata": {"finalizers": ["a", "b"]}})),
            ),
            (
                "last finalizer removed",
                with(&|c| {
                    c["metadata"].as_object_mut().unwrap().remove("finalizers");
                }),
                Some(json!({"metadata": {"finalizers": null}})),
            ),
            (
                "one annotation removed, the others untouched",
                with(&|c| {
                    c["metadata"]["annotations"]
                        .as_object_mut()
                        .unwrap()
                        .remove("volume.kubernetes.io/selected-node");
                }),
                Some(
                    json!({"metadata": {"annotations": {"volume.kubernetes.io/selected-node": null}}}),
                ),
            ),
            (
                "a nested field added",
                with(&|c| c["spec"]["volumeName"] = json!("pv")),
                Some(json!({"spec": {"volumeName": "pv"}})),
            ),
            (
                "a scalar changed",
                with(&|c| c["spec"]["resources"]["requests"]["storage"] = json!("2Gi")),
                Some(json!({"spec": {"resources": {"requests": {"storage": "2Gi"}}}})),
            ),
        ];
        for (what, after, want) in cases {
            let got = merge_diff(&claim, &after);
            assert_eq!(got, want, "{what}");
            // Applying the diff to `before` gives `after`.
            if let Some(p) = got {
                let mut doc = claim.clone();
                json_patch::merge(&mut doc, &p);
                assert_eq!(without_empty(doc), after, "{what}: round trip");
            }
        }
    }

    #[test]
    fn the_diff_applied_to_the_stored_object_keeps_what_our_copy_lacks() {
        // Our copy: stripped of managedFields and last-applied, and without a field a newer
        // server has.
        let ours = json!({"metadata": {"name": "c", "resourceVersion": "7"}, "spec": {}});
        let mut changed = ours.clone();
        changed["metadata"]["finalizers"] = json!(["ours"]);
        let patch = guarded(merge_diff(&ours, &changed).unwrap(), "7");
        assert_eq!(
            patch,
            json!({"metadata": {"finalizers": ["ours"], "resourceVersion": "7"}})
        );
        let stored = json!({
            "metadata": {"name": "c", "resourceVersion": "7",
                "annotations": {"kubectl.kubernetes.io/last-applied-configuration": "{}"},
                "managedFields": [{"manager": "kubectl-client-side-apply"}]},
            "spec": {"newerField": true}
        });
        assert_eq!(
            apply_to(stored, &patch),
            json!({
                "metadata": {"name": "c", "resourceVersion": "7", "finalizers": ["ours"],
                    "annotations": {"kubectl.kubernetes.io/last-applied-configuration": "{}"}},
                "spec": {"newerField": true}
            })
        );
    }

    #[test]
    fn only_rbac_refusals_of_the_verb_count() {
        let rbac = r#"persistentvolumeclaims "c" is forbidden: User "system:serviceaccount:ns:csi-provisioner" cannot patch resource "persistentvolumeclaims" in API group "" in the namespace "ns""#;
        assert!(refused_verb(rbac, "patch"));
        assert!(!refused_verb(rbac, "update"));
        let policy = r#"persistentvolumeclaims "c" is forbidden: ValidatingAdmissionPolicy 'deny' with binding 'deny' denied request: no"#;
        assert!(!refused_verb(policy, "patch"));
    }
}
