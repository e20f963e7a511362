//! Certificates, keys and credentials for the local API server.

use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa,
    Issuer, KeyPair, KeyUsagePurpose,
};

use crate::Error;

/// Names the serving certificate must cover: how tests dial it, plus the in-cluster names.
pub(crate) const SERVING_SANS: &[&str] = &[
    "127.0.0.1",
    "localhost",
    "10.0.0.1",
    "kubernetes.default.svc",
];

/// PEM material for one control plane.
pub(crate) struct Pki {
    pub ca_cert: String,
    pub serving_cert: String,
    pub serving_key: String,
    /// ECDSA P-256 PKCS#8 key that signs service account tokens.
    pub sa_key: String,
    /// Its public half (PKIX): the apiserver's verifier does not read PKCS#8 EC private keys.
    pub sa_pub: String,
}

pub(crate) fn generate() -> Result<Pki, Error> {
    let ca_key = KeyPair::generate()?;
    let mut ca_params = CertificateParams::default();
    ca_params.distinguished_name = name("testenv-ca");
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca_params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    let ca_cert = ca_params.self_signed(&ca_key)?;
    let issuer = Issuer::new(ca_params, ca_key);

    let serving_key = KeyPair::generate()?;
    let sans: Vec<String> = SERVING_SANS.iter().map(|s| s.to_string()).collect();
    let mut params = CertificateParams::new(sans)?;
    params.distinguished_name = name("kube-apiserver");
    params.key_usages = vec![
        KeyUsagePurpose::DigitalSignature,
        KeyUsagePurpose::KeyEncipherment,
    ];
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    let serving_cert = params.signed_by(&serving_key, &issuer)?;
    let sa = KeyPair::generate()?;

    Ok(Pki {
        ca_cert: ca_cert.pem(),
        serving_cert: serving_cert.pem(),
        serving_key: serving_key.serialize_pem(),
        sa_key: sa.serialize_pem(),
        sa_pub: sa.public_key_pem(),
    })
}

fn name(common_name: &str) -> DistinguishedName {
    let mut dn = DistinguishedName::new();
    dn.push(DnType::CommonName, common_name);
    dn
}

/// A random hex token for the static admin user.
pub(crate) fn random_token() -> String {
    let bytes: [u8; 16] = rand::random();
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// `--token-auth-file` content: token, user, uid, quoted group list.
pub(crate) fn tokens_csv(token: &str) -> String {
    format!("{token},admin,admin-uid,\"system:masters\"\n")
}

/// A kubeconfig for the admin user, trusting our CA.
pub(crate) fn kubeconfig(server: &str, ca_pem: &str, token: &str) -> String {
    let ca = base64(ca_pem.as_bytes());
    format!(
        "apiVersion: v1
kind: Config
clusters:
- name: testenv
  cluster:
    server: {server}
    certificate-authority-data: {ca}
users:
- name: admin
  user:
    token: {token}
contexts:
- name: testenv
  context:
    cluster: testenv
    user: admin
    namespace: default
current-context: testenv
"
    )
}

/// Standard base64 with padding (kubeconfig `*-data` fields).
pub(crate) fn base64(input: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(input.len().div_ceil(3) * 4);
    for chunk in input.chunks(3) {
        let b = [
            chunk[0],
            *chunk.get(1).unwrap_or(&0),
            *chunk.get(2).unwrap_or(&0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(ALPHABET[((n >> (18 - 6 * i)) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_table() {
        // RFC 4648 §10 test vectors.
        let cases = [
            ("", ""),
            ("f", "Zg=="),
            ("fo", "Zm8="),
            ("foo", "Zm9v"),
            ("foob", "Zm9vYg=="),
            ("fooba", "Zm9vYmE="),
            ("foobar", "Zm9vYmFy"),
        ];
        for (input, want) in cases {
            assert_eq!(base64(input.as_bytes()), want, "base64({input:?})");
        }
    }

    #[test]
    fn tokens_csv_puts_admin_in_system_masters() {
        assert_eq!(
            tokens_csv("abc"),
            "abc,admin,admin-uid,\"system:masters\"\n"
        );
    }

    #[test]
    fn kubeconfig_parses_and_points_at_the_server() {
        let text = kubeconfig("https://127.0.0.1:6443", "PEM", "tok");
        let kc = kube::config::Kubeconfig::from_yaml(&text).expect("valid kubeconfig");
        assert_eq!(kc.current_context.as_deref(), Some("testenv"));
        let cluster = kc.clusters[0].cluster.as_ref().expect("cluster");
        assert_eq!(cluster.server.as_deref(), Some("https://127.0.0.1:6443"));
        assert_eq!(cluster.certificate_authority_data.as_deref(), Some("UEVN"));
        let user = kc.auth_infos[0].auth_info.as_ref().expect("user");
        assert!(user.token.is_some());
    }

    #[test]
    fn pki_is_pem_and_tokens_are_random() {
        let pki = generate().expect("pki");
        assert!(pki.ca_cert.starts_with("-----BEGIN CERTIFICATE-----"));
        assert!(pki.serving_cert.starts_with("-----BEGIN CERTIFICATE-----"));
        assert!(pki.serving_key.starts_with("-----BEGIN PRIVATE KEY-----"));
        assert!(pki.sa_key.starts_with("-----BEGIN PRIVATE KEY-----"));
        assert!(pki.sa_pub.starts_with("-----BEGIN PUBLIC KEY-----"));
        let (a, b) = (random_token(), random_token());
        assert_eq!(a.len(), 32);
        assert_ne!(a, b);
    }
}
