//! Table tests of the pure helpers (no control plane needed).

use super::*;
use serde_json::{Value, json};
use std::collections::BTreeSet;

fn rbac_fixture() -> Vec<Value> {
    vec![
        json!({"kind": "ServiceAccount", "metadata": {"name": "csi-provisioner", "namespace": "default"}}),
        json!({"kind": "ClusterRole", "metadata": {"name": "external-provisioner-runner"},
        "rules": [
            {"apiGroups": [""], "resources": ["persistentvolumeclaims"], "verbs": ["get", "update"]},
            {"apiGroups": [""], "resources": ["nodes", "persistentvolumeclaims"], "verbs": ["list", "update"]},
            {"apiGroups": ["storage.k8s.io"], "resources": ["volumeattributesclasses"], "verbs": ["get"]},
        ]}),
        json!({"kind": "ClusterRoleBinding", "metadata": {"name": "csi-provisioner-role"},
               "subjects": [{"kind": "ServiceAccount", "name": "csi-provisioner", "namespace": "default"}],
               "roleRef": {"kind": "ClusterRole", "name": "external-provisioner-runner"}}),
        json!({"kind": "Role", "metadata": {"name": "external-provisioner-cfg", "namespace": "default"},
               "rules": [{"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["get", "patch"]}]}),
        json!({"kind": "RoleBinding", "metadata": {"name": "csi-provisioner-role-cfg", "namespace": "default"},
               "subjects": [{"kind": "ServiceAccount", "name": "csi-provisioner", "namespace": "default"}],
               "roleRef": {"kind": "Role", "name": "external-provisioner-cfg"}}),
    ]
}

#[test]
fn localize_moves_namespaces_and_renames_cluster_objects() {
    let mut objects = rbac_fixture();
    localize(&mut objects, "t1");
    // (object index, JSON pointer, wanted value)
    let cases: &[(usize, &str, Value)] = &[
        (0, "/metadata/namespace", json!("t1")),
        (0, "/metadata/name", json!("csi-provisioner")),
        (1, "/metadata/name", json!("external-provisioner-runner-t1")),
        (1, "/metadata/namespace", Value::Null),
        (2, "/metadata/name", json!("csi-provisioner-role-t1")),
        (2, "/subjects/0/namespace", json!("t1")),
        (2, "/roleRef/name", json!("external-provisioner-runner-t1")),
        (3, "/metadata/name", json!("external-provisioner-cfg")),
        (3, "/metadata/namespace", json!("t1")),
        (4, "/metadata/name", json!("csi-provisioner-role-cfg")),
        (4, "/subjects/0/namespace", json!("t1")),
        (4, "/roleRef/name", json!("external-provisioner-cfg")),
    ];
    for (i, pointer, want) in cases {
        let got = objects[*i].pointer(pointer).cloned().unwrap_or(Value::Null);
        assert_eq!(&got, want, "object {i} {pointer}");
    }
}

#[test]
fn drop_verb_table() {
    // (resource, verb, rules changed, remaining grants of that resource, rules left)
    let cases: &[(&str, &str, usize, &[&str], usize)] = &[
        ("persistentvolumeclaims", "update", 2, &["get", "list"], 4),
        (
            "persistentvolumeclaims",
            "delete",
            0,
            &["get", "list", "update"],
            4,
        ),
        ("leases", "patch", 1, &["get"], 4),
        ("volumeattributesclasses", "get", 1, &[], 3),
        ("secrets", "get", 0, &[], 4),
    ];
    for (resource, verb, want_changed, want_left, want_rules) in cases {
        let mut objects = rbac_fixture();
        let changed = drop_verb(&mut objects, resource, verb);
        assert_eq!(changed, *want_changed, "{resource} {verb}");
        let left: BTreeSet<String> = grants(&objects)
            .into_iter()
            .filter(|g| g.2 == *resource)
            .map(|g| g.3)
            .collect();
        let want: BTreeSet<String> = want_left.iter().map(|s| s.to_string()).collect();
        assert_eq!(left, want, "{resource} {verb}");
        let rules: usize = objects
            .iter()
            .filter_map(|o| o["rules"].as_array())
            .map(Vec::len)
            .sum();
        assert_eq!(
            rules, *want_rules,
            "{resource} {verb}: no empty rule is left"
        );
    }
}

#[test]
fn grants_beyond_upstream_are_found() {
    let objects = rbac_fixture();
    let ours = grants(&objects);
    assert_eq!(ours.len(), 8, "{ours:?}");
    let extra = beyond_upstream(&ours);
    let extra: Vec<(&str, &str, &str)> = extra
        .iter()
        .map(|g| (g.0.as_str(), g.2.as_str(), g.3.as_str()))
        .collect();
    // nodes/update and leases/patch are not upstream's; the VAC get is a documented extra.
    assert_eq!(
        extra,
        vec![
            ("cluster", "nodes", "update"),
            ("namespace", "leases", "patch")
        ]
    );
}

#[test]
fn scope_matters_for_upstream_grants() {
    let pods_cluster: BTreeSet<Grant> = [(
        "cluster".to_string(),
        String::new(),
        "pods".to_string(),
        "get".to_string(),
    )]
    .into();
    assert_eq!(
        beyond_upstream(&pods_cluster).len(),
        1,
        "pods get is a Role grant upstream"
    );
}

#[test]
fn forbidden_requests_are_counted() {
    let text = "\
# HELP rest_client_requests_total Number of HTTP requests
rest_client_requests_total{code=\"200\",host=\"127.0.0.1:1\",method=\"GET\"} 12
rest_client_requests_total{code=\"403\",host=\"127.0.0.1:1\",method=\"PUT\"} 3
rest_client_requests_total{code=\"403\",host=\"127.0.0.1:1\",method=\"GET\"} 1
other_total{code=\"403\"} 9
";
    let cases: &[(&[&str], f64)] = &[
        (&["code=\"403\""], 4.0),
        (&["code=\"200\""], 12.0),
        (&["code=\"201\""], 0.0),
        (&["code=\"403\"", "method=\"PUT\""], 3.0),
        (&["code=\"200\"", "method=\"PUT\""], 0.0),
    ];
    for (labels, want) in cases {
        assert_eq!(requests_with(text, labels), *want, "{labels:?}");
    }
}

#[test]
fn forbidden_log_lines_are_found() {
    let cases: &[(&str, usize)] = &[
        ("I0101 ok\nI0101 synced 1403 objects\n", 0),
        (
            "E0101 persistentvolumeclaims \"a\" is forbidden: User cannot update\n",
            1,
        ),
        (
            "E0101 ErrorResponse { reason: \"Forbidden\", code: 403 }\nI ok\n",
            1,
        ),
        ("{\"msg\":\"x\",\"code\":403}\n", 1),
    ];
    for (log, want) in cases {
        assert_eq!(forbidden_lines(log).len(), *want, "{log:?}");
    }
}
