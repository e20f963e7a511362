//! API errors as upstream prints them: the server's message (`persistentvolumeclaims "x" not
//! found`), without kube-rs's wrapping.

/// The API server's message for `e`, or the error itself when there is none.
pub fn message(e: &kube::Error) -> String {
    match e {
        kube::Error::Api(status) => status.message.clone(),
        other => other.to_string(),
    }
}

/// Whether the API server refused an object as invalid in itself (a field fails validation:
/// `PersistentVolume "x" is invalid: spec...`), which no retry can change; an admission
/// policy's denial has the same code (422) but may be lifted, and reads `... is forbidden: ...`.
pub fn invalid_object(e: &kube::core::Status) -> bool {
    e.code == 422 && e.message.contains("\" is invalid: ")
}

/// Whether the API server refused a write on the caller's account (RBAC, an admission webhook
/// or policy) rather than for a moment (a conflict, a timeout): only someone changing that
/// lets it through.
pub fn refused(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == 403 || (s.code == 422 && !invalid_object(s)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn response(code: u16, message: &str) -> kube::core::Status {
        serde_json::from_value(serde_json::json!({
            "status": "Failure", "message": message, "reason": "Invalid", "code": code
        }))
        .expect("an error response")
    }

    #[test]
    fn only_field_validation_failures_are_final() {
        let invalid = response(
            422,
            "PersistentVolume \"pvc-1\" is invalid: spec.csi.volumeHandle: Required value",
        );
        let denied = response(
            422,
            "persistentvolumes \"pvc-1\" is forbidden: ValidatingAdmissionPolicy 'p' with binding 'b' denied request: no",
        );
        let conflict = response(409, "PersistentVolume \"pvc-1\" is invalid: x");
        assert!(invalid_object(&invalid));
        assert!(!invalid_object(&denied));
        assert!(!invalid_object(&conflict));
    }

    #[test]
    fn refusals_are_told_from_passing_failures() {
        let api = |code, message| kube::Error::Api(Box::new(response(code, message)));
        let cases = [
            (
                api(
                    403,
                    "persistentvolumeclaims \"c\" is forbidden: User cannot update",
                ),
                true,
            ),
            (
                api(
                    422,
                    "persistentvolumeclaims \"c\" is forbidden: ValidatingAdmissionPolicy",
                ),
                true,
            ),
            (
                api(
                    422,
                    "PersistentVolumeClaim \"c\" is invalid: metadata.finalizers",
                ),
                false,
            ),
            (api(409, "the object has been modified"), false),
            (api(500, "etcdserver: request timed out"), false),
        ];
        for (e, want) in cases {
            assert_eq!(refused(&e), want, "{e}");
        }
    }
}
