//! API errors as upstream prints them: the server's message (`persistentvolumeclaims "x" not
//! found`), without kube-rs's wrapping.

/// The API server's message for `e`, or the error itself when there is none.
pub fn message(e: &kube::Error) -> String {
    match e {
        kube::Error::Api(status) => status.message.clone(),
        other => other.to_string(),
    }
}
