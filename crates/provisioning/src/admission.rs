//! The MutatingAdmissionPolicy that lets the API server keep our creating-volume finalizer, so
//! the provisioner does not spend two claim writes per volume on it.
//!
//! The policy rides on writes that happen anyway: kube-controller-manager's write that names
//! our driver in `volume.kubernetes.io/storage-provisioner` (the claim now needs a volume from
//! us) gets the finalizer added, and the binder's write of `spec.volumeName` naming the claim's
//! own PV (`<prefix>-<uid>`: that PV owns the volume now) gets it removed. A claim bound to any
//! other PV (a matching static one) keeps it: a call of ours may have made a volume nobody owns,
//! and the provisioner cleans up and lets the claim go itself. A claim being deleted never gets
//! it added (the API server forbids that anyway). Claims of other drivers are not matched at
//! all.
//!
//! | Question | Function |
//! |---|---|
//! | What is the policy called for a driver? | [`policy_name`] |
//! | What are the policy and its binding? | [`policy`], [`binding`] |

use serde_json::{Value, json};

use crate::names::{
    ANN_BETA_STORAGE_PROVISIONER, ANN_STORAGE_PROVISIONER, CREATING_VOLUME_FINALIZER,
};

/// The API group and version of MutatingAdmissionPolicy (GA in Kubernetes 1.36).
pub const API_VERSION: &str = "admissionregistration.k8s.io/v1";

/// Kind and plural resource name of the policy.
pub const POLICY: (&str, &str) = ("MutatingAdmissionPolicy", "mutatingadmissionpolicies");

/// Kind and plural resource name of its binding.
pub const BINDING: (&str, &str) = (
    "MutatingAdmissionPolicyBinding",
    "mutatingadmissionpolicybindings",
);

/// The policy's (and binding's) name: one per driver, so several drivers' provisioners can
/// each install their own.
pub fn policy_name(driver: &str) -> String {
    format!("csi-provisioner-creating-volume.{driver}")
}

/// A CEL string literal holding `s` (driver names are DNS-like, but nothing is trusted).
fn cel_string(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('\'');
    for c in s.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\'' => out.push_str("\\'"),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
    out.push('\'');
    out
}

/// How the provisioner names a claim's PV (`--volume-name-prefix`, `--volume-name-uuid-length`,
/// as [`crate::volume_name::make_volume_name`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct VolumeNaming<'a> {
    /// The name's part before the dash.
    pub prefix: &'a str,
    /// `-1`: the whole UID; otherwise its first N characters without dashes.
    pub uuid_length: i32,
}

impl VolumeNaming<'_> {
    /// Upstream's defaults: `pvc-<uid>`.
    pub const DEFAULT: VolumeNaming<'static> = VolumeNaming {
        prefix: "pvc",
        uuid_length: -1,
    };
}

/// A CEL expression for the name of the claim's own PV. The UID is empty while a claim is
/// being created (it is set after admission), so a shortened one is guarded: an out-of-range
/// `substring` would fail the policy.
fn own_volume_expression(naming: VolumeNaming) -> String {
    let prefix = cel_string(&format!("{}-", naming.prefix));
    let uid = "object.metadata.?uid.orValue('')";
    match usize::try_from(naming.uuid_length) {
        Err(_) => format!("{prefix} + {uid}"),
        Ok(n) => format!(
            "{prefix} + ({uid}.replace('-', '').size() >= {n} ? {uid}.replace('-', '').substring(0, {n}) : '')"
        ),
    }
}

/// The policy for `driver`, whose PVs are named as `naming` says.
///
/// `failurePolicy: Ignore`: a policy that cannot run must never block kube-controller-manager's
/// writes; the provisioner still adds the finalizer itself when it is missing.
pub fn policy(driver: &str, naming: VolumeNaming) -> Value {
    let driver_lit = cel_string(driver);
    // As `claim::provisioner_of`: the GA annotation, else the beta one.
    let ours = format!(
        "object.metadata.?annotations[?{}].orValue(object.metadata.?annotations[?{}].orValue('')) == {driver_lit}",
        cel_string(ANN_STORAGE_PROVISIONER),
        cel_string(ANN_BETA_STORAGE_PROVISIONER),
    );
    let patch = "!variables.held && !variables.bound && !has(object.metadata.deletionTimestamp) ? \
         (has(object.metadata.finalizers) ? \
         [JSONPatch{op: 'add', path: '/metadata/finalizers/-', value: variables.finalizer}] : \
         [JSONPatch{op: 'add', path: '/metadata/finalizers', value: [variables.finalizer]}]) : \
         (variables.held && variables.boundToOwnVolume ? \
         [JSONPatch{op: 'remove', path: '/metadata/finalizers/' + \
         string(object.metadata.finalizers.indexOf(variables.finalizer))}] : [])";
    json!({
        "apiVersion": API_VERSION,
        "kind": POLICY.0,
        "metadata": {"name": policy_name(driver)},
        "spec": {
            "matchConstraints": {
                "resourceRules": [{
                    "apiGroups": [""],
                    "apiVersions": ["v1"],
                    "operations": ["CREATE", "UPDATE"],
                    "resources": ["persistentvolumeclaims"],
                }],
            },
            "matchConditions": [{"name": "provisioned-by-this-driver", "expression": ours}],
            "variables": [
                {"name": "finalizer", "expression": cel_string(CREATING_VOLUME_FINALIZER)},
                {
                    "name": "held",
                    "expression": "object.metadata.?finalizers.orValue([]).exists(f, f == variables.finalizer)",
                },
                {"name": "bound", "expression": "object.spec.?volumeName.orValue('') != ''"},
                {"name": "ownVolume", "expression": own_volume_expression(naming)},
                {
                    "name": "boundToOwnVolume",
                    "expression": "variables.bound && object.spec.volumeName == variables.ownVolume",
                },
            ],
            "failurePolicy": "Ignore",
            "reinvocationPolicy": "Never",
            "mutations": [{
                "patchType": "JSONPatch",
                "jsonPatch": {"expression": patch},
            }],
        },
    })
}

/// The binding that puts [`policy`] in force cluster-wide.
pub fn binding(driver: &str) -> Value {
    json!({
        "apiVersion": API_VERSION,
        "kind": BINDING.0,
        "metadata": {"name": policy_name(driver)},
        "spec": {"policyName": policy_name(driver)},
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cel_strings_are_quoted_and_escaped() {
        let cases = [
            ("hostpath.csi.k8s.io", "'hostpath.csi.k8s.io'"),
            ("it's", r"'it\'s'"),
            (r"a\b", r"'a\\b'"),
            ("a\nb", r"'a\nb'"),
        ];
        for (raw, want) in cases {
            assert_eq!(cel_string(raw), want, "{raw:?}");
        }
    }

    #[test]
    fn the_own_volume_follows_the_naming_flags() {
        assert_eq!(
            own_volume_expression(VolumeNaming::DEFAULT),
            "'pvc-' + object.metadata.?uid.orValue('')"
        );
        assert_eq!(
            own_volume_expression(VolumeNaming {
                prefix: "vol",
                uuid_length: 8
            }),
            "'vol-' + (object.metadata.?uid.orValue('').replace('-', '').size() >= 8 ? \
             object.metadata.?uid.orValue('').replace('-', '').substring(0, 8) : '')"
        );
        let p = policy("d", VolumeNaming::DEFAULT);
        let patch = p["spec"]["mutations"][0]["jsonPatch"]["expression"]
            .as_str()
            .unwrap();
        assert!(patch.contains("variables.held && variables.boundToOwnVolume ?"));
    }

    #[test]
    fn the_policy_matches_only_this_drivers_claims_and_keeps_our_finalizer() {
        let p = policy("hostpath.csi.k8s.io", VolumeNaming::DEFAULT);
        assert_eq!(
            p["metadata"]["name"],
            "csi-provisioner-creating-volume.hostpath.csi.k8s.io"
        );
        let condition = p["spec"]["matchConditions"][0]["expression"]
            .as_str()
            .unwrap();
        assert_eq!(
            condition,
            "object.metadata.?annotations[?'volume.kubernetes.io/storage-provisioner']\
             .orValue(object.metadata.?annotations[?'volume.beta.kubernetes.io/storage-provisioner']\
             .orValue('')) == 'hostpath.csi.k8s.io'"
        );
        assert_eq!(
            p["spec"]["variables"][0]["expression"],
            "'external-provisioner.volume.kubernetes.io/creating-volume'"
        );
        let rule = &p["spec"]["matchConstraints"]["resourceRules"][0];
        assert_eq!(rule["resources"], json!(["persistentvolumeclaims"]));
        assert_eq!(rule["operations"], json!(["CREATE", "UPDATE"]));
        assert_eq!(p["spec"]["failurePolicy"], "Ignore");
        let b = binding("hostpath.csi.k8s.io");
        assert_eq!(b["spec"]["policyName"], p["metadata"]["name"]);
        assert_eq!(b["metadata"]["name"], p["metadata"]["name"]);
    }
}
