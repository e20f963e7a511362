//! String quoting the way the Go loggers do it, so that log parsers written for klog and
//! component-base's JSON format read our lines unchanged.

use std::fmt::Write as _;

/// Quotes `s` like Go's `strconv.Quote`: double quotes, Go escapes for control characters and
/// for characters Go does not consider printable.
///
/// Go decides printability with its Unicode tables; we approximate that with the character
/// classes Rust exposes (controls, whitespace other than the ASCII space, and the common
/// invisible format characters). Every other character is written as is.
pub fn go_quote(s: &str) -> String {
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
            c if is_go_printable(c) => out.push(c),
            // Go writes non-printable ASCII as \xNN, the rest as \uNNNN or \UNNNNNNNN.
            c if (c as u32) < 0x80 => {
                let _ = write!(out, "\\x{:02x}", c as u32);
            }
            c if (c as u32) < 0x1_0000 => {
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

fn is_go_printable(c: char) -> bool {
    if c == ' ' {
        return true;
    }
    if c.is_control() || c.is_whitespace() {
        return false;
    }
    // Unicode format characters (category Cf) that Go's unicode.IsPrint rejects and that
    // would otherwise be invisible in a terminal.
    !matches!(c,
        '\u{ad}'
        | '\u{600}'..='\u{605}'
        | '\u{61c}'
        | '\u{6dd}'
        | '\u{70f}'
        | '\u{180e}'
        | '\u{200b}'..='\u{200f}'
        | '\u{202a}'..='\u{202e}'
        | '\u{2060}'..='\u{2064}'
        | '\u{2066}'..='\u{206f}'
        | '\u{feff}'
        | '\u{fff9}'..='\u{fffb}'
        | '\u{e000}'..='\u{f8ff}'
        | '\u{f0000}'..='\u{10ffff}')
}

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

    // Expected values are what Go's strconv.Quote prints for the same input.
    #[rstest]
    #[case("", r#""""#)]
    #[case("hello world", r#""hello world""#)]
    #[case(r#"say "hi""#, r#""say \"hi\"""#)]
    #[case(r"C:\dir", r#""C:\\dir""#)]
    #[case("a\nb\tc\r", r#""a\nb\tc\r""#)]
    #[case("\u{7}\u{8}\u{c}\u{b}", r#""\a\b\f\v""#)]
    #[case("\u{0}\u{1f}\u{7f}", r#""\x00\x1f\x7f""#)]
    #[case("\u{85}", r#""\u0085""#)]
    #[case("no\u{a0}break", r#""no\u00a0break""#)]
    #[case("zero\u{200b}width", r#""zero\u200bwidth""#)]
    #[case("bom\u{feff}", r#""bom\ufeff""#)]
    #[case("\u{f0000}", r#""\U000f0000""#)]
    #[case("grüße µs 日本", r#""grüße µs 日本""#)]
    #[case("emoji 🚀", r#""emoji 🚀""#)]
    fn go_quote_matches_strconv_quote(#[case] input: &str, #[case] want: &str) {
        assert_eq!(go_quote(input), want);
    }

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
