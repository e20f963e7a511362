//! String quoting the way the Go loggers do it, so that log parsers written for klog and
//! component-base's JSON format read our lines unchanged.

use std::fmt::Write as _;

/// Quotes like Go's `strconv.Quote` (shared with upstream-style error messages).
pub use gofmt::quote as go_quote;

/// Appends `s` as a JSON string the way zap's JSON encoder escapes it: `\"`, `\\`, `\n`, `\r`,
/// `\t`, and `\u00XX` for the other control characters below 0x20. Everything else, including
/// `<`, `>` and `&`, is written unescaped.
pub fn push_json_string(out: &mut String, s: &str) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if (c as u32) < 0x20 => {
                let _ = write!(out, "\\u00{:02x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

#[cfg(test)]
mod tests {
    use super::*;
    use rstest::rstest;

    #[rstest]
    #[case("plain", r#""plain""#)]
    #[case(r#"q"b\"#, r#""q\"b\\""#)]
    #[case("l1\nl2\r\t", r#""l1\nl2\r\t""#)]
    #[case("\u{0}\u{8}\u{1f}", r#""\u0000\u0008\u001f""#)]
    #[case("<a & b>", r#""<a & b>""#)]
    #[case("\u{7f}é", "\"\u{7f}é\"")]
    fn json_string_matches_zap(#[case] input: &str, #[case] want: &str) {
        let mut out = String::new();
        push_json_string(&mut out, input);
        assert_eq!(out, want);
    }
}
