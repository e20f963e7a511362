//! Byte counts of Kubernetes quantities as CSIStorageCapacity objects carry them.

/// Bytes of a quantity such as `100Gi`, `1.5Ti`, `500M`, `1e9` or `107374182400`; `None` for
/// anything else.
pub fn bytes(q: &str) -> Option<f64> {
    let q = q.trim();
    const SUFFIXES: &[(&str, f64)] = &[
        ("Ki", 1024.0),
        ("Mi", 1048576.0),
        ("Gi", 1073741824.0),
        ("Ti", 1099511627776.0),
        ("Pi", 1125899906842624.0),
        ("Ei", 1152921504606846976.0),
        ("k", 1e3),
        ("M", 1e6),
        ("G", 1e9),
        ("T", 1e12),
        ("P", 1e15),
        ("E", 1e18),
        ("m", 1e-3),
    ];
    let (number, factor) = SUFFIXES
        .iter()
        .find_map(|(s, f)| q.strip_suffix(s).map(|n| (n, *f)))
        .unwrap_or((q, 1.0));
    if number.is_empty() || number.starts_with(['e', 'E']) {
        return None;
    }
    let value: f64 = number.parse().ok()?;
    value.is_finite().then_some(value * factor)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantities() {
        let gi = 1073741824.0;
        let cases: &[(&str, Option<f64>)] = &[
            ("100Gi", Some(100.0 * gi)),
            ("1.5Ti", Some(1536.0 * gi)),
            ("107374182400", Some(100.0 * gi)),
            ("500M", Some(5e8)),
            ("1e9", Some(1e9)),
            ("0", Some(0.0)),
            ("", None),
            ("Gi", None),
            ("e3", None),
            ("ten", None),
        ];
        for (q, want) in cases {
            assert_eq!(bytes(q), *want, "{q:?}");
        }
    }
}
