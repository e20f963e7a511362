//! Kubernetes name rules (apimachinery `IsDNS1123Label` / `IsDNS1123Subdomain`).

/// Longest DNS-1123 label (namespace names).
pub const DNS1123_LABEL_MAX: usize = 63;
/// Longest DNS-1123 subdomain (secret and PV names).
pub const DNS1123_SUBDOMAIN_MAX: usize = 253;

/// Whether `s` is a lowercase RFC 1123 label: `[a-z0-9]([-a-z0-9]*[a-z0-9])?`, at most 63 bytes.
pub fn is_dns1123_label(s: &str) -> bool {
    s.len() <= DNS1123_LABEL_MAX && is_label_body(s)
}

/// Whether `s` is a lowercase RFC 1123 subdomain: dot-separated labels, at most 253 bytes.
pub fn is_dns1123_subdomain(s: &str) -> bool {
    s.len() <= DNS1123_SUBDOMAIN_MAX && s.split('.').all(is_label_body)
}

/// Why `s` is not a DNS-1123 subdomain, or `None` if it is one.
pub fn dns1123_subdomain_problem(s: &str) -> Option<String> {
    if s.len() > DNS1123_SUBDOMAIN_MAX {
        return Some(format!(
            "it is {} characters long, the limit is {DNS1123_SUBDOMAIN_MAX}",
            s.len()
        ));
    }
    if !is_dns1123_subdomain(s) {
        return Some(
            "it must consist of lower case alphanumeric characters, '-' or '.', \
             and must start and end with an alphanumeric character"
                .to_string(),
        );
    }
    None
}

// One label without the length limit (the subdomain limit applies to the whole name).
fn is_label_body(s: &str) -> bool {
    let bytes = s.as_bytes();
    let alnum = |b: &u8| b.is_ascii_lowercase() || b.is_ascii_digit();
    match (bytes.first(), bytes.last()) {
        (Some(first), Some(last)) => {
            alnum(first) && alnum(last) && bytes.iter().all(|b| alnum(b) || *b == b'-')
        }
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels() {
        let long = "a".repeat(63);
        let too_long = "a".repeat(64);
        let cases = [
            ("default", true),
            ("a", true),
            ("0", true),
            ("a-b-1", true),
            (long.as_str(), true),
            (too_long.as_str(), false),
            ("", false),
            ("-a", false),
            ("a-", false),
            ("A", false),
            ("a.b", false),
            ("a_b", false),
            ("ä", false),
        ];
        for (input, want) in cases {
            assert_eq!(is_dns1123_label(input), want, "{input:?}");
        }
    }

    #[test]
    fn subdomains() {
        let max = format!("{}.{}", "a".repeat(126), "b".repeat(126));
        let over = format!("{}.{}", "a".repeat(126), "b".repeat(127));
        let cases = [
            ("pvc-0f1c", true),
            ("a.b.c", true),
            ("secret.example.com", true),
            (max.as_str(), true),
            (over.as_str(), false),
            ("", false),
            ("a..b", false),
            (".a", false),
            ("a.", false),
            ("a.-b", false),
            ("UPPER", false),
            ("with space", false),
        ];
        for (input, want) in cases {
            assert_eq!(is_dns1123_subdomain(input), want, "{input:?}");
            assert_eq!(
                dns1123_subdomain_problem(input).is_none(),
                want,
                "{input:?}"
            );
        }
        assert!(
            dns1123_subdomain_problem(&over).is_some_and(|p| p.contains("254 characters long"))
        );
    }
}
