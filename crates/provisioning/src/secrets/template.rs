//! Secret name templates: an exact port of Go's `os.Expand`, and upstream's `resolveTemplate`.
//!
//! `os.Expand` rules (byte-wise): `${name}` up to the first `}`; `$name` takes the longest run
//! of ASCII letters, digits and `_`; `$X` and `${X}` for one special character
//! `* # $ @ ! ? - 0..9` name that character alone (so `$$` asks for a variable named `$`);
//! `${}` and an unterminated `${` are swallowed; a `$` followed by anything else, or at the very
//! end, stays as it is.

/// Go's `os.Expand(s, mapping)`.
pub fn expand(s: &str, mut mapping: impl FnMut(&str) -> String) -> String {
    let bytes = s.as_bytes();
    let mut out: Option<String> = None;
    let mut copied_up_to = 0;
    let mut j = 0;
    while j < bytes.len() {
        if bytes[j] == b'$' && j + 1 < bytes.len() {
            let buf = out.get_or_insert_with(|| String::with_capacity(2 * s.len()));
            buf.push_str(&s[copied_up_to..j]);
            let (name, width) = shell_name(&s[j + 1..]);
            if name.is_empty() && width > 0 {
                // Invalid syntax: the characters are eaten.
            } else if name.is_empty() {
                // `$` not followed by a name stays literally.
                buf.push('$');
            } else {
                buf.push_str(&mapping(name));
            }
            j += width;
            copied_up_to = j + 1;
        }
        j += 1;
    }
    match out {
        None => s.to_string(),
        Some(mut buf) => {
            buf.push_str(&s[copied_up_to..]);
            buf
        }
    }
}

fn is_shell_special(c: u8) -> bool {
    matches!(
        c,
        b'*' | b'#' | b'$' | b'@' | b'!' | b'?' | b'-' | b'0'..=b'9'
    )
}

fn is_alphanumeric(c: u8) -> bool {
    c == b'_' || c.is_ascii_alphanumeric()
}

/// The variable name at the start of `s` (non-empty) and how many bytes it spans.
fn shell_name(s: &str) -> (&str, usize) {
    let b = s.as_bytes();
    if b[0] == b'{' {
        if b.len() > 2 && is_shell_special(b[1]) && b[2] == b'}' {
            return (&s[1..2], 3);
        }
        for (i, &c) in b.iter().enumerate().skip(1) {
            if c == b'}' {
                if i == 1 {
                    return ("", 2); // "${}"
                }
                return (&s[1..i], i + 1);
            }
        }
        return ("", 1); // "${" without a closing brace
    }
    if is_shell_special(b[0]) {
        return (&s[0..1], 1);
    }
    let end = b
        .iter()
        .position(|&c| !is_alphanumeric(c))
        .unwrap_or(b.len());
    (&s[..end], end)
}

/// Upstream's `resolveTemplate`: expands `template`, or returns every token `lookup` could not
/// resolve, sorted and without duplicates.
pub fn resolve(
    template: &str,
    lookup: impl Fn(&str) -> Option<String>,
) -> Result<String, Vec<String>> {
    let mut missing: Vec<String> = Vec::new();
    let resolved = expand(template, |name| {
        lookup(name).unwrap_or_else(|| {
            missing.push(name.to_string());
            String::new()
        })
    });
    if missing.is_empty() {
        Ok(resolved)
    } else {
        missing.sort();
        missing.dedup();
        Err(missing)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;
    use proptest::prelude::*;

    // Marks every variable so the table shows exactly what Go's os.Expand would look up.
    fn mark(s: &str) -> String {
        expand(s, |name| format!("<{name}>"))
    }

    #[test]
    fn expand_matches_go() {
        let cases = [
            ("", ""),
            ("plain", "plain"),
            ("${pv.name}", "<pv.name>"),
            ("a-${pvc.name}-b", "a-<pvc.name>-b"),
            ("$pvc", "<pvc>"),
            ("$pvc.name", "<pvc>.name"),
            ("$under_score9x", "<under_score9x>"),
            ("$$", "<$>"),
            ("$1abc", "<1>abc"),
            ("${1}", "<1>"),
            ("${12}", "<12>"),
            ("$*$#$@$!$?$-", "<*><#><@><!><?><->"),
            ("${}", ""),
            ("a${}b", "ab"),
            ("${", ""),
            ("a${b", "ab"),
            ("$", "$"),
            ("a$", "a$"),
            ("$ x", "$ x"),
            ("$.x", "$.x"),
            ("$}", "$}"),
            ("${a}${b}", "<a><b>"),
            ("${pvc.annotations['x/y']}", "<pvc.annotations['x/y']>"),
            ("${a{b}c}", "<a{b>c}"),
            ("ü${ü}ü", "ü<ü>ü"),
            ("$ü", "$ü"),
        ];
        for (input, want) in cases {
            assert_eq!(mark(input), want, "input {input:?}");
        }
    }

    #[test]
    fn resolve_reports_sorted_unique_missing_tokens() {
        let lookup = |name: &str| (name == "pv.name").then(|| "pv-1".to_string());
        assert_eq!(resolve("${pv.name}", lookup), Ok("pv-1".to_string()));
        assert_eq!(
            resolve("${zz}-${pv.name}-${aa}-${zz}", lookup),
            Err(vec!["aa".to_string(), "zz".to_string()])
        );
        assert_eq!(resolve("$$", lookup), Err(vec!["$".to_string()]));
        assert_eq!(resolve("static", lookup), Ok("static".to_string()));
    }

    proptest! {
        #[test]
        fn expand_never_panics(s in "\\PC{0,40}") {
            let _ = mark(&s);
        }

        #[test]
        fn expand_never_panics_on_dollar_heavy_input(s in "[${}a-z0-9_.*#@!?\\- ü]{0,30}") {
            let _ = mark(&s);
        }

        #[test]
        fn text_without_dollar_is_unchanged(s in "[^$]{0,40}") {
            prop_assert_eq!(mark(&s), s);
        }
    }
}
