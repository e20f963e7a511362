//! What an API request is, read from its method and URI the way the apiserver's
//! `RequestInfoFactory` reads it: the Kubernetes verb and the resource. Pure.

use http::{Method, Uri};

/// Whether the request is a watch (`?watch=true`, or any value Go's `strconv.ParseBool`
/// reads as true). client-go never throttles watches.
pub fn is_watch(uri: &Uri) -> bool {
    uri.query()
        .into_iter()
        .flat_map(|q| q.split('&'))
        .filter_map(|pair| pair.split_once('='))
        .any(|(k, v)| k == "watch" && matches!(v, "1" | "t" | "T" | "true" | "TRUE" | "True"))
}

/// The Kubernetes verb and resource of a request, for
/// `csi_provisioner_api_requests_total{verb, resource}`.
///
/// The resource includes a subresource as `pods/status`. Non-resource paths (discovery,
/// `/version`) get an empty resource and the lower-cased HTTP method as verb.
pub fn classify(method: &Method, uri: &Uri) -> (&'static str, String) {
    let parts: Vec<&str> = uri.path().split('/').filter(|p| !p.is_empty()).collect();
    let rest = match parts.as_slice() {
        ["api", _version, rest @ ..] => rest,
        ["apis", _group, _version, rest @ ..] => rest,
        _ => &[][..],
    };
    // `namespaces/{ns}/{resource}...`, except the namespace's own subresources.
    let rest = match rest {
        ["namespaces", _ns, next, tail @ ..] if !matches!(*next, "status" | "finalize") => {
            let mut v = vec![*next];
            v.extend_from_slice(tail);
            v
        }
        other => other.to_vec(),
    };
    let (resource, has_name) = match rest.as_slice() {
        [] => {
            return (non_resource_verb(method), String::new());
        }
        [resource] => (resource.to_string(), false),
        [resource, _name] => (resource.to_string(), true),
        [resource, _name, sub, ..] => (format!("{resource}/{sub}"), true),
    };
    let verb = if is_watch(uri) {
        "watch"
    } else {
        match *method {
            Method::GET | Method::HEAD if has_name => "get",
            Method::GET | Method::HEAD => "list",
            Method::POST => "create",
            Method::PUT => "update",
            Method::PATCH => "patch",
            Method::DELETE if has_name => "delete",
            Method::DELETE => "deletecollection",
            _ => "unknown",
        }
    };
    (verb, resource)
}

fn non_resource_verb(method: &Method) -> &'static str {
    match *method {
        Method::GET => "get",
        Method::HEAD => "head",
        Method::POST => "post",
        Method::PUT => "put",
        Method::PATCH => "patch",
        Method::DELETE => "delete",
        _ => "unknown",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn verbs_and_resources() {
        let cases = [
            (
                "GET",
                "/api/v1/persistentvolumes",
                "list",
                "persistentvolumes",
            ),
            (
                "GET",
                "/api/v1/persistentvolumes/pv-1",
                "get",
                "persistentvolumes",
            ),
            (
                "GET",
                "/api/v1/persistentvolumes?watch=true&resourceVersion=5",
                "watch",
                "persistentvolumes",
            ),
            (
                "GET",
                "/api/v1/namespaces/ns/persistentvolumeclaims?watch=1",
                "watch",
                "persistentvolumeclaims",
            ),
            (
                "GET",
                "/api/v1/namespaces/ns/persistentvolumeclaims?watch=false",
                "list",
                "persistentvolumeclaims",
            ),
            (
                "GET",
                "/api/v1/namespaces/ns/persistentvolumeclaims/c",
                "get",
                "persistentvolumeclaims",
            ),
            (
                "PUT",
                "/api/v1/namespaces/ns/persistentvolumeclaims/c",
                "update",
                "persistentvolumeclaims",
            ),
            (
                "PUT",
                "/api/v1/namespaces/ns/persistentvolumeclaims/c/status",
                "update",
                "persistentvolumeclaims/status",
            ),
            ("POST", "/api/v1/namespaces/ns/events", "create", "events"),
            (
                "PATCH",
                "/api/v1/namespaces/default/events/pv.1a2b",
                "patch",
                "events",
            ),
            (
                "PATCH",
                "/api/v1/persistentvolumes/pv-1",
                "patch",
                "persistentvolumes",
            ),
            (
                "DELETE",
                "/api/v1/persistentvolumes/pv-1",
                "delete",
                "persistentvolumes",
            ),
            (
                "DELETE",
                "/apis/storage.k8s.io/v1/namespaces/kube-system/csistoragecapacities",
                "deletecollection",
                "csistoragecapacities",
            ),
            (
                "POST",
                "/apis/storage.k8s.io/v1/namespaces/kube-system/csistoragecapacities",
                "create",
                "csistoragecapacities",
            ),
            (
                "GET",
                "/apis/coordination.k8s.io/v1/namespaces/kube-system/leases/my-lock",
                "get",
                "leases",
            ),
            ("GET", "/api/v1/namespaces", "list", "namespaces"),
            ("GET", "/api/v1/namespaces/ns", "get", "namespaces"),
            (
                "PUT",
                "/api/v1/namespaces/ns/finalize",
                "update",
                "namespaces/finalize",
            ),
            (
                "GET",
                "/api/v1/namespaces/ns/status",
                "get",
                "namespaces/status",
            ),
            ("GET", "/apis/storage.k8s.io/v1", "get", ""),
            ("GET", "/version", "get", ""),
            ("GET", "/api", "get", ""),
        ];
        for (method, uri, verb, resource) in cases {
            let method: Method = method.parse().unwrap();
            let uri: Uri = uri.parse().unwrap();
            assert_eq!(
                classify(&method, &uri),
                (verb, resource.to_string()),
                "{method} {uri}"
            );
        }
    }

    #[test]
    fn watch_detection_follows_go_parse_bool() {
        for (uri, watch) in [
            ("/api/v1/pods?watch=true", true),
            ("/api/v1/pods?labelSelector=a%3Db&watch=1", true),
            ("/api/v1/pods?watch=True", true),
            ("/api/v1/pods?watch=t", true),
            ("/api/v1/pods?watch=0", false),
            ("/api/v1/pods?watch=false", false),
            ("/api/v1/pods?watch", false),
            ("/api/v1/pods?allowWatchBookmarks=true", false),
            ("/api/v1/pods", false),
        ] {
            assert_eq!(is_watch(&uri.parse().unwrap()), watch, "{uri}");
        }
    }
}
