//! Renderings of Go's `fmt` verbs that appear in upstream error texts (`%q`, `%v` of slices),
//! so that our messages read exactly like upstream's.

use std::fmt::Write as _;

/// `%q` of a string (Go's `strconv.Quote`).
///
/// Differs from upstream: Go decides printability from the full Unicode tables; for non-ASCII
/// characters we escape control, non-ASCII whitespace and the common invisible format characters,
/// and keep everything else.
pub(crate) fn quote(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\u{7}' => out.push_str("\\a"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{b}' => out.push_str("\\v"),
            ' '..='~' => out.push(c),
            c if c.is_ascii() => {
                let _ = write!(out, "\\x{:02x}", c as u32);
            }
            c if is_printable(c) => out.push(c),
            c if (c as u32) < 0x10000 => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => {
                let _ = write!(out, "\\U{:08x}", c as u32);
            }
        }
    }
    out.push('"');
    out
}

fn is_printable(c: char) -> bool {
    let invisible = matches!(
        c,
        '\u{ad}'
            | '\u{600}'..='\u{605}'
            | '\u{61c}'
            | '\u{200b}'..='\u{200f}'
            | '\u{2028}'..='\u{202e}'
            | '\u{2060}'..='\u{2064}'
            | '\u{feff}'
            | '\u{fff9}'..='\u{fffb}'
    );
    !(c.is_control() || c.is_whitespace() || invisible)
}

/// `%q` of a `[]string`: `["a" "b"]`.
pub(crate) fn quote_list<S: AsRef<str>>(items: &[S]) -> String {
    let quoted: Vec<String> = items.iter().map(|s| quote(s.as_ref())).collect();
    format!("[{}]", quoted.join(" "))
}

/// `%v` of a `[]string`: `[a b]`.
pub(crate) fn list<S: AsRef<str>>(items: &[S]) -> String {
    let plain: Vec<&str> = items.iter().map(AsRef::as_ref).collect();
    format!("[{}]", plain.join(" "))
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    #[test]
    fn quote_matches_strconv_quote() {
        let cases = [
            ("", r#""""#),
            ("plain", r#""plain""#),
            (r#"a"b\c"#, r#""a\"b\\c""#),
            ("tab\there\nnl", r#""tab\there\nnl""#),
            ("\u{1}\u{7f}", r#""\x01\x7f""#),
            ("\u{7}\u{8}\u{b}\u{c}\r", r#""\a\b\v\f\r""#),
            ("ünïcödé 世界", r#""ünïcödé 世界""#),
            ("nb\u{a0}sp", r#""nb\u00a0sp""#),
            ("zero\u{200b}width", r#""zero\u200bwidth""#),
            ("${pvc.annotations['a']}", r#""${pvc.annotations['a']}""#),
        ];
        for (input, want) in cases {
            assert_eq!(quote(input), want, "input {input:?}");
        }
    }

    #[test]
    fn lists() {
        assert_eq!(quote_list(&["pvc.name", "x"]), r#"["pvc.name" "x"]"#);
        assert_eq!(quote_list::<&str>(&[]), "[]");
        assert_eq!(list(&["zone", "rack"]), "[zone rack]");
        assert_eq!(list::<String>(&[]), "[]");
    }
}
