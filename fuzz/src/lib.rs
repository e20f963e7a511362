//! Shared pieces of the fuzz targets: inputs that mix known vocabulary with arbitrary text (a
//! purely random string almost never hits a key the code looks up), and checks written from the
//! API server's rules rather than through the functions under test.

use arbitrary::{Arbitrary, Unstructured};

/// A string that is usually one of `vocabulary`, sometimes arbitrary text.
pub fn word(u: &mut Unstructured<'_>, vocabulary: &[&str]) -> arbitrary::Result<String> {
    if vocabulary.is_empty() || u.ratio(1, 4)? {
        return String::arbitrary(u);
    }
    Ok((*u.choose(vocabulary)?).to_string())
}

/// A short string over `[a-z0-9.-]` and a few troublesome characters: names that are often, but
/// not always, valid object names.
pub fn name(u: &mut Unstructured<'_>) -> arbitrary::Result<String> {
    const ALPHABET: &[u8] = b"abz019-.-._A /$";
    if u.ratio(1, 8)? {
        return String::arbitrary(u);
    }
    let len = u.int_in_range(0..=20)?;
    let mut s = String::with_capacity(len);
    for _ in 0..len {
        s.push(char::from(*u.choose(ALPHABET)?));
    }
    Ok(s)
}

/// Whether `s` is `[a-z0-9]([-a-z0-9]*[a-z0-9])?` of at most 63 bytes (written independently of
/// `provisioning::validation` so that each checks the other).
pub fn is_label(s: &str) -> bool {
    s.len() <= 63 && is_label_text(s)
}

/// Whether `s` is a DNS-1123 subdomain of at most 253 bytes (its dot-separated parts have no
/// length limit of their own in apimachinery's rule).
pub fn is_subdomain(s: &str) -> bool {
    s.len() <= 253 && s.split('.').all(is_label_text)
}

fn is_label_text(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && b.iter()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
        && b[0] != b'-'
        && b[b.len() - 1] != b'-'
}

/// Whether `s` is a qualified name (`[prefix/]name`), the API server's rule for label and
/// annotation keys and finalizers.
pub fn is_qualified_name(s: &str) -> bool {
    let (prefix, name) = match s.split_once('/') {
        Some((p, n)) => (Some(p), n),
        None => (None, s),
    };
    if prefix.is_some_and(|p| !is_subdomain(p)) {
        return false;
    }
    let b = name.as_bytes();
    let alnum = |c: &u8| c.is_ascii_alphanumeric();
    !b.is_empty()
        && b.len() <= 63
        && alnum(&b[0])
        && alnum(&b[b.len() - 1])
        && b.iter()
            .all(|c| alnum(c) || matches!(c, b'-' | b'_' | b'.'))
}

/// Asserts that `q` is the canonical quantity of `bytes`: it parses back to `bytes` and is
/// written the way the API server would write that amount again.
pub fn assert_canonical_quantity(q: &str, bytes: i64) {
    let parsed = quantity::parse_quantity(q)
        .unwrap_or_else(|e| panic!("published quantity {q:?} does not parse: {e}"));
    assert_eq!(parsed, bytes, "quantity {q:?} does not stand for {bytes}");
    assert_eq!(
        quantity::format_binary_si(parsed),
        q,
        "quantity {q:?} is not canonical"
    );
}
