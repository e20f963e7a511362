//! Lock name, identity and namespace, resolved exactly as csi-lib-utils does.

/// Where Kubernetes mounts the pod's namespace for in-cluster clients.
pub const SERVICE_ACCOUNT_NAMESPACE_FILE: &str =
    "/var/run/secrets/kubernetes.io/serviceaccount/namespace";

/// Replaces every character outside `[a-zA-Z0-9-]` with `-` and appends `X` when the result ends
/// in `-` (csi-lib-utils `sanitizeName`). Applied to both the lock name and the identity.
///
/// Go panics on an empty name; we return it unchanged and let config validation reject it.
pub fn sanitize_name(name: &str) -> String {
    let mut out: String = name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' {
                c
            } else {
                '-'
            }
        })
        .collect();
    if out.ends_with('-') {
        out.push('X');
    }
    out
}

/// The Lease name for a driver: `/` becomes `-` (external-provisioner's main), then
/// [`sanitize_name`] (csi-lib-utils). `hostpath.csi.k8s.io` gives `hostpath-csi-k8s-io`.
pub fn lock_name(driver_name: &str) -> String {
    sanitize_name(&driver_name.replace('/', "-"))
}

/// The source component of the leader-election events: csi-lib-utils joins the lock name as
/// external-provisioner hands it over (`/` replaced, not yet sanitised) and the raw hostname.
pub fn event_component(driver_name: &str, hostname: &str) -> String {
    format!("{}/{hostname}", driver_name.replace('/', "-"))
}

/// The candidate identity: the override if given, else the hostname (the pod name in a
/// Deployment), sanitised like the lock name.
pub fn identity(override_identity: Option<&str>, hostname: &str) -> String {
    match override_identity {
        Some(id) if !id.is_empty() => sanitize_name(id),
        _ => sanitize_name(hostname),
    }
}

/// The identity from this machine's hostname (or the override).
pub fn identity_from_host(override_identity: Option<&str>) -> Result<String, std::io::Error> {
    if let Some(id) = override_identity.filter(|id| !id.is_empty()) {
        return Ok(sanitize_name(id));
    }
    let host = hostname::get()?;
    Ok(identity(None, &host.to_string_lossy()))
}

/// The Lease namespace: `--leader-election-namespace`, else `POD_NAMESPACE`, else the
/// service-account namespace file (trimmed), else `default`. Empty values count as unset.
pub fn resolve_namespace(
    flag: Option<&str>,
    pod_namespace_env: Option<&str>,
    service_account_file: Option<&str>,
) -> String {
    if let Some(ns) = flag.filter(|ns| !ns.is_empty()) {
        return ns.to_string();
    }
    if let Some(ns) = pod_namespace_env.filter(|ns| !ns.is_empty()) {
        return ns.to_string();
    }
    if let Some(ns) = service_account_file
        .map(str::trim)
        .filter(|ns| !ns.is_empty())
    {
        return ns.to_string();
    }
    "default".to_string()
}

/// [`resolve_namespace`] over this process's environment and file system.
pub fn namespace_from_environment(flag: Option<&str>) -> String {
    let env = std::env::var("POD_NAMESPACE").ok();
    let file = std::fs::read_to_string(SERVICE_ACCOUNT_NAMESPACE_FILE).ok();
    resolve_namespace(flag, env.as_deref(), file.as_deref())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn event_components_are_not_sanitised() {
        assert_eq!(
            event_component("hostpath.csi.k8s.io", "csi-provisioner-0"),
            "hostpath.csi.k8s.io/csi-provisioner-0"
        );
        assert_eq!(
            event_component("example.com/nfs", "h_1"),
            "example.com-nfs/h_1"
        );
    }

    #[test]
    fn lock_names() {
        let table = [
            ("hostpath.csi.k8s.io", "hostpath-csi-k8s-io"),
            ("example.com/nfs", "example-com-nfs"),
            ("ebs.csi.aws.com", "ebs-csi-aws-com"),
            ("already-fine", "already-fine"),
            ("ends.with.dot.", "ends-with-dot-X"),
            ("ends-with-dash-", "ends-with-dash-X"),
            ("trailing/", "trailing-X"),
            ("UPPER_case", "UPPER-case"),
            ("ünïcode.drv", "-n-code-drv"),
            ("", ""),
        ];
        for (driver, want) in table {
            assert_eq!(lock_name(driver), want, "driver {driver:?}");
        }
    }

    #[test]
    fn identities() {
        let table = [
            (
                None,
                "csi-provisioner-7d9f-abcde",
                "csi-provisioner-7d9f-abcde",
            ),
            (None, "node1.example.com", "node1-example-com"),
            (Some("my_pod"), "ignored", "my-pod"),
            (Some(""), "host.", "host-X"),
        ];
        for (over, host, want) in table {
            assert_eq!(
                identity(over, host),
                want,
                "override {over:?} host {host:?}"
            );
        }
    }

    #[test]
    fn namespaces() {
        let table = [
            (
                Some("flag-ns"),
                Some("env-ns"),
                Some("file-ns\n"),
                "flag-ns",
            ),
            (Some(""), Some("env-ns"), Some("file-ns"), "env-ns"),
            (None, Some("env-ns"), None, "env-ns"),
            (None, Some(""), Some("  file-ns\n"), "file-ns"),
            (None, None, Some("file-ns"), "file-ns"),
            (None, None, Some(" \n"), "default"),
            (None, None, None, "default"),
        ];
        for (flag, env, file, want) in table {
            assert_eq!(
                resolve_namespace(flag, env, file),
                want,
                "flag {flag:?} env {env:?} file {file:?}"
            );
        }
    }
}
