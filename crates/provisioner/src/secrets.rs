//! Reading the Secrets that StorageClass parameters point at.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Secret;
use kube::{Api, Client};
use provisioning::secrets::SecretRef;

/// Why a secret could not be used. The messages name the secret, never its content.
#[derive(Debug, thiserror::Error)]
pub enum SecretError {
    /// The API server's own words (`secrets "x" not found`), as upstream prints them.
    #[error("{}", crate::api_error::message(.0))]
    Get(#[from] kube::Error),
    #[error("key {key:?} is not valid UTF-8 text; CSI secrets must be strings")]
    NotText { key: String },
}

/// The secret's data as strings, as upstream hands it to the driver.
pub async fn fetch(
    client: &Client,
    secret: &SecretRef,
) -> Result<BTreeMap<String, String>, SecretError> {
    let found = Api::<Secret>::namespaced(client.clone(), &secret.namespace)
        .get(&secret.name)
        .await?;
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
