//! `--capacity-ownerref-level`: which object owns our CSIStorageCapacity objects.
//!
//! Level 0 is our Pod, 1 its controller (taken from the Pod's ownerReferences without reading
//! the controller), 2 that controller's controller (read generically through discovery), and
//! so on. The walk itself is pure over a fetch function, so it is tested on plain data.

use std::future::Future;

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::api::{Api, DynamicObject};
use kube::core::{GroupVersion, Status};
use kube::discovery::{Scope, pinned_kind};

/// One object on the owner chain.
#[derive(Clone, Debug, PartialEq)]
pub struct Link {
    pub api_version: String,
    pub kind: String,
    pub name: String,
    pub uid: String,
    pub owners: Vec<OwnerReference>,
}

/// Why the owner could not be found.
#[derive(Debug, thiserror::Error)]
pub enum OwnerError {
    #[error(
        "POD_NAME is not set; it is needed for --capacity-ownerref-level >= 0 (set it from the pod's metadata.name, or use --capacity-ownerref-level=-1)"
    )]
    NoPodName,
    #[error("cannot get {kind} {name}: {source}")]
    Get {
        kind: String,
        name: String,
        source: kube::Error,
    },
    #[error("{kind} {name} has an owner with an invalid apiVersion {api_version:?}")]
    ApiVersion {
        kind: String,
        name: String,
        api_version: String,
    },
    #[error(
        "{kind} {name} has no controller owner at level {level}; lower --capacity-ownerref-level"
    )]
    NoController {
        kind: String,
        name: String,
        level: u32,
    },
}

impl OwnerError {
    /// The error as the `kube::Error` [`super::lookup_owner`] returns: the message is ours,
    /// the HTTP code the API server's when there was one.
    pub fn into_kube(self) -> kube::Error {
        let code = match &self {
            OwnerError::Get {
                source: kube::Error::Api(s),
                ..
            } => s.code,
            OwnerError::Get { .. } => 500,
            _ => 404,
        };
        let mut status = Status::failure(&self.to_string(), "NotFound");
        status.code = code;
        kube::Error::Api(status.boxed())
    }
}

/// The controller among `owners` (the one reference marked `controller: true`).
pub fn controller_of(owners: &[OwnerReference]) -> Option<&OwnerReference> {
    owners.iter().find(|o| o.controller == Some(true))
}

/// The reference we put on our objects, as upstream builds it.
fn reference(api_version: &str, kind: &str, name: &str, uid: &str) -> OwnerReference {
    OwnerReference {
        api_version: api_version.into(),
        kind: kind.into(),
        name: name.into(),
        uid: uid.into(),
        controller: Some(true),
        block_owner_deletion: None,
    }
}

/// Walks `level` controllers up from `start`; `fetch` reads an owner when the walk must go
/// beyond it.
pub async fn walk<F, Fut>(
    start: Link,
    level: u32,
    mut fetch: F,
) -> Result<OwnerReference, OwnerError>
where
    F: FnMut(OwnerReference) -> Fut,
    Fut: Future<Output = Result<Link, OwnerError>>,
{
    let mut current = start;
    let mut step = 0;
    loop {
        if step == level {
            return Ok(reference(
                &current.api_version,
                &current.kind,
                &current.name,
                &current.uid,
            ));
        }
        step += 1;
        let Some(parent) = controller_of(&current.owners) else {
            return Err(OwnerError::NoController {
                kind: current.kind,
                name: current.name,
                level: step,
            });
        };
        let parent = reference(&parent.api_version, &parent.kind, &parent.name, &parent.uid);
        // The last controller is named by the reference: no need to read it.
        if step == level {
            return Ok(parent);
        }
        current = fetch(parent).await?;
    }
}

/// Resolves the owner of our objects from Pod `pod` in `namespace`.
pub async fn lookup(
    client: &kube::Client,
    namespace: &str,
    pod: &str,
    level: u32,
) -> Result<OwnerReference, OwnerError> {
    if pod.is_empty() {
        return Err(OwnerError::NoPodName);
    }
    let pods: Api<Pod> = Api::namespaced(client.clone(), namespace);
    let p = pods.get(pod).await.map_err(|source| OwnerError::Get {
        kind: "Pod".into(),
        name: format!("{namespace}/{pod}"),
        source,
    })?;
    let start = Link {
        api_version: "v1".into(),
        kind: "Pod".into(),
        name: pod.into(),
        uid: p.metadata.uid.unwrap_or_default(),
        owners: p.metadata.owner_references.unwrap_or_default(),
    };
    walk(start, level, |parent| fetch(client, namespace, parent)).await
}

/// Reads any owner through discovery (owners live in the same namespace or are cluster-scoped).
async fn fetch(
    client: &kube::Client,
    namespace: &str,
    owner: OwnerReference,
) -> Result<Link, OwnerError> {
    let get_error = |source| OwnerError::Get {
        kind: owner.kind.clone(),
        name: owner.name.clone(),
        source,
    };
    let gv: GroupVersion = owner
        .api_version
        .parse()
        .map_err(|_| OwnerError::ApiVersion {
            kind: owner.kind.clone(),
            name: owner.name.clone(),
            api_version: owner.api_version.clone(),
        })?;
    let (resource, caps) = pinned_kind(client, &gv.with_kind(&owner.kind))
        .await
        .map_err(get_error)?;
    let api: Api<DynamicObject> = match caps.scope {
        Scope::Namespaced => Api::namespaced_with(client.clone(), namespace, &resource),
        Scope::Cluster => Api::all_with(client.clone(), &resource),
    };
    let obj = api.get(&owner.name).await.map_err(get_error)?;
    Ok(Link {
        api_version: owner.api_version,
        kind: owner.kind,
        name: owner.name,
        uid: obj.metadata.uid.unwrap_or_default(),
        owners: obj.metadata.owner_references.unwrap_or_default(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn owner(kind: &str, name: &str, controller: Option<bool>) -> OwnerReference {
        OwnerReference {
            api_version: "apps/v1".into(),
            kind: kind.into(),
            name: name.into(),
            uid: format!("uid-{name}"),
            controller,
            block_owner_deletion: Some(true),
        }
    }

    fn link(kind: &str, name: &str, owners: Vec<OwnerReference>) -> Link {
        Link {
            api_version: if kind == "Pod" { "v1" } else { "apps/v1" }.into(),
            kind: kind.into(),
            name: name.into(),
            uid: format!("uid-{name}"),
            owners,
        }
    }

    #[tokio::test]
    async fn walk_table() {
        let pod = link(
            "Pod",
            "p",
            vec![
                owner("Other", "not-controller", Some(false)),
                owner("ReplicaSet", "rs", Some(true)),
            ],
        );
        let world: HashMap<String, Link> = [
            link(
                "ReplicaSet",
                "rs",
                vec![owner("Deployment", "dep", Some(true))],
            ),
            link("Deployment", "dep", vec![]),
        ]
        .into_iter()
        .map(|l| (l.name.clone(), l))
        .collect();
        let orphan = link("Pod", "lonely", vec![owner("X", "x", None)]);
        // (case, start, level, owner kind and name or error prefix, owners read)
        type Case<'a> = (
            &'a str,
            &'a Link,
            u32,
            Result<(&'a str, &'a str), &'a str>,
            usize,
        );
        let cases: Vec<Case> = vec![
            ("level 0 is the pod", &pod, 0, Ok(("Pod", "p")), 0),
            (
                "level 1: no read of the parent",
                &pod,
                1,
                Ok(("ReplicaSet", "rs")),
                0,
            ),
            (
                "level 2 reads the ReplicaSet",
                &pod,
                2,
                Ok(("Deployment", "dep")),
                1,
            ),
            (
                "level 3: the Deployment has no controller",
                &pod,
                3,
                Err("Deployment dep has no controller owner at level 3"),
                2,
            ),
            (
                "no controller on the pod",
                &orphan,
                1,
                Err("Pod lonely has no controller owner at level 1"),
                0,
            ),
        ];
        for (name, start, level, want, want_reads) in cases {
            let mut reads = 0;
            let got = walk(start.clone(), level, |r: OwnerReference| {
                reads += 1;
                let found = world.get(&r.name).cloned();
                async move { found.ok_or(OwnerError::NoPodName) }
            })
            .await;
            assert_eq!(reads, want_reads, "{name}: reads");
            match (got, want) {
                (Ok(r), Ok((kind, obj))) => {
                    assert_eq!((r.kind.as_str(), r.name.as_str()), (kind, obj), "{name}");
                    assert_eq!(r.uid, format!("uid-{obj}"), "{name}");
                    assert_eq!(r.controller, Some(true), "{name}");
                    assert_eq!(r.block_owner_deletion, None, "{name}");
                }
                (Err(e), Err(msg)) => {
                    assert!(e.to_string().starts_with(msg), "{name}: {e}");
                }
                (got, _) => panic!("{name}: unexpected {got:?}"),
            }
        }
    }

    #[test]
    fn errors_become_kube_errors_with_our_message() {
        let e = OwnerError::NoController {
            kind: "Pod".into(),
            name: "p".into(),
            level: 1,
        }
        .into_kube();
        match e {
            kube::Error::Api(s) => {
                assert_eq!(s.code, 404);
                assert!(
                    s.message
                        .contains("Pod p has no controller owner at level 1")
                );
            }
            other => panic!("{other:?}"),
        }
    }
}
