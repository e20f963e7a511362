//! Reading the Secrets that StorageClass parameters point at.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Secret;
use kube::Client;
use kube::api::GetParams;
use kube::core::{Request, Resource};
use provisioning::secrets::SecretRef;

/// Why a secret could not be used. The messages name the secret, never its content.
#[derive(thiserror::Error)]
pub enum SecretError {
    /// The API server's own words (`secrets "x" not found`), as upstream prints them.
    #[error("{}", crate::api_error::message(.0))]
    Get(#[from] kube::Error),
    #[error("key {key:?} is not valid UTF-8 text; CSI secrets must be strings")]
    NotText { key: String },
    /// The answer was not a Secret. No parser detail: it could quote the content.
    #[error("the API server's answer for secret {namespace}/{name} could not be read as a Secret")]
    NotASecret { namespace: String, name: String },
}

/// As the message: kube's error for an unreadable answer carries the body, which may be the
/// Secret itself, in its derived `Debug`.
impl std::fmt::Debug for SecretError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "SecretError({self})")
    }
}

impl SecretError {
    /// Whether a DeleteVolume must wait for this secret to be fixed. One that cannot be read
    /// (it may be gone with its namespace) does not hold the deletion, as upstream: the driver
    /// decides whether it needs it. One that is there but not text does: upstream cannot send
    /// it either (gRPC refuses a non-UTF-8 string, so its call fails and is retried), and
    /// sending no secrets at all instead would ask the driver to delete without the
    /// credentials it was given.
    pub fn blocks_deletion(&self) -> bool {
        matches!(self, SecretError::NotText { .. })
    }
}

/// The secret's data as strings, as upstream hands it to the driver.
pub async fn fetch(
    client: &Client,
    secret: &SecretRef,
) -> Result<BTreeMap<String, String>, SecretError> {
    // Read as text and parsed here: kube's own `get` logs the whole answer, content included,
    // when it cannot parse it.
    let request = Request::new(Secret::url_path(&(), Some(&secret.namespace)))
        .get(&secret.name, &GetParams::default())
        .map_err(kube::Error::BuildRequest)?;
    let text = client.request_text(request).await?;
    parse(&text, secret)
}

/// The data of the Secret the API server answered with `text`.
fn parse(text: &str, secret: &SecretRef) -> Result<BTreeMap<String, String>, SecretError> {
    let found: Secret = serde_json::from_str(text).map_err(|_| SecretError::NotASecret {
        namespace: secret.namespace.clone(),
        name: secret.name.clone(),
    })?;
    found
        .data
        .unwrap_or_default()
        .into_iter()
        .map(|(key, value)| match String::from_utf8(value.0) {
            Ok(text) => Ok((key, text)),
            Err(_) => Err(SecretError::NotText { key }),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_says_only_what_the_message_says() {
        let err = SecretError::NotText {
            key: "token".into(),
        };
        assert_eq!(format!("{err:?}"), format!("SecretError({err})"));
        // kube's error for an answer that is not text carries the body in its own Debug.
        let body = kube::Error::FromUtf8(String::from_utf8(vec![0xff, b's']).unwrap_err());
        let err = SecretError::Get(body);
        assert!(!format!("{err:?}").contains("FromUtf8Error"), "{err:?}");
    }

    fn secret_ref() -> SecretRef {
        SecretRef {
            name: "creds".into(),
            namespace: "ns".into(),
        }
    }

    #[test]
    fn data_is_decoded_to_text() {
        // "s3cr3t" and "x" in base64.
        let text = r#"{"apiVersion":"v1","kind":"Secret","metadata":{"name":"creds"},"data":{"password":"czNjcjN0","user":"eA=="}}"#;
        let data = parse(text, &secret_ref()).unwrap();
        assert_eq!(data["password"], "s3cr3t");
        assert_eq!(data["user"], "x");
        assert!(
            parse(r#"{"metadata":{}}"#, &secret_ref())
                .unwrap()
                .is_empty()
        );
    }

    #[test]
    fn errors_name_the_secret_or_key_never_the_content() {
        // A value of the wrong type, which serde's own message would quote.
        let wrong = r#"{"metadata":{"name":"creds"},"data":{"password":12345678}}"#;
        let not_text = r#"{"metadata":{"name":"creds"},"data":{"password":"/w=="}}"#;
        let cases = [
            (
                wrong,
                "the API server's answer for secret ns/creds could not be read as a Secret",
            ),
            (
                "not json at all: hunter2",
                "the API server's answer for secret ns/creds could not be read as a Secret",
            ),
            (
                not_text,
                "key \"password\" is not valid UTF-8 text; CSI secrets must be strings",
            ),
        ];
        for (text, want) in cases {
            let err = parse(text, &secret_ref()).unwrap_err().to_string();
            assert_eq!(err, want);
            assert!(!err.contains("12345678") && !err.contains("hunter2"));
        }
    }

    #[test]
    fn only_a_secret_that_is_not_text_holds_a_deletion() {
        let not_text = r#"{"metadata":{"name":"creds"},"data":{"password":"/w=="}}"#;
        assert!(
            parse(not_text, &secret_ref())
                .unwrap_err()
                .blocks_deletion()
        );
        let unreadable = parse("{}x", &secret_ref()).unwrap_err();
        assert!(!unreadable.blocks_deletion());
        let gone = SecretError::Get(kube::Error::Api(
            kube::core::Status::failure("secrets \"creds\" not found", "NotFound")
                .with_code(404)
                .boxed(),
        ));
        assert!(!gone.blocks_deletion());
    }
}
