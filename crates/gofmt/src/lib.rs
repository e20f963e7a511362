//! Go's renderings of strings, for texts that must read exactly like upstream's: klog's quoted
//! log values and the `%q` / `%v` verbs in upstream error messages.

// No unsafe code here: `forbid`, unlike the workspace's `deny`, cannot be allowed again below.
#![forbid(unsafe_code)]
// Shipped code reports failures instead of panicking; tests are free to unwrap.
#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used))]

use std::fmt::Write as _;

/// Quotes `s` like Go's `strconv.Quote` (and the `%q` verb): double quotes, Go's escapes for
/// control characters and for characters Go does not consider printable.
///
/// Go decides printability from its Unicode tables; we approximate them with the character
/// classes Rust exposes (controls, whitespace other than the ASCII space) plus the invisible
/// format and private-use characters Go escapes. Every other character is written as is.
pub fn quote(s: &str) -> String {
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
            c if is_printable(c) => out.push(c),
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

/// `%q` of a `[]string`: `["a" "b"]`.
pub fn quote_list<S: AsRef<str>>(items: &[S]) -> String {
    let quoted: Vec<String> = items.iter().map(|s| quote(s.as_ref())).collect();
    format!("[{}]", quoted.join(" "))
}

/// `%v` of a `[]string`: `[a b]`.
pub fn list<S: AsRef<str>>(items: &[S]) -> String {
    let plain: Vec<&str> = items.iter().map(AsRef::as_ref).collect();
    format!("[{}]", plain.join(" "))
}

/// `%v` of a `map[string]string`: `map[a:1 b:2]`, keys sorted as Go's fmt sorts them.
pub fn map<'a>(entries: impl IntoIterator<Item = (&'a String, &'a String)>) -> String {
    // Sorted by key, then formatted: sorting the "k:v" strings would put `a-b:2` before
    // `a:1`, as '-' sorts before ':'.
    let mut entries: Vec<(&String, &String)> = entries.into_iter().collect();
    entries.sort();
    let pairs: Vec<String> = entries.iter().map(|(k, v)| format!("{k}:{v}")).collect();
    format!("map[{}]", pairs.join(" "))
}

fn is_printable(c: char) -> bool {
    if c == ' ' {
        return true;
    }
    if c.is_control() || c.is_whitespace() {
        return false;
    }
    // Format characters (category Cf) and private-use planes Go's unicode.IsPrint rejects,
    // which would otherwise be invisible in a terminal.
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

/// Go's `strconv.ParseBool`: 1, t, T, TRUE, true, True and their false counterparts; the error
/// reads like Go's (`strconv.ParseBool: parsing "x": invalid syntax`).
pub fn parse_bool(s: &str) -> Result<bool, String> {
    match s {
        "1" | "t" | "T" | "TRUE" | "true" | "True" => Ok(true),
        "0" | "f" | "F" | "FALSE" | "false" | "False" => Ok(false),
        _ => Err(format!(
            "strconv.ParseBool: parsing {}: invalid syntax",
            quote(s)
        )),
    }
}

/// Go's `html.EscapeString` (the five characters `&`, `<`, `>`, `"`, `'`), as `http.Redirect`
/// writes its target into the body.
pub fn html_escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&#34;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use rstest::rstest;

    #[test]
    fn html_escape_is_gos() {
        assert_eq!(
            html_escape(r#"/a?b=1&c="<x>"'"#),
            "/a?b=1&amp;c=&#34;&lt;x&gt;&#34;&#39;"
        );
        assert_eq!(html_escape("plain"), "plain");
    }

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
    #[case("line\u{2028}sep", r#""line\u2028sep""#)]
    #[case("bom\u{feff}", r#""bom\ufeff""#)]
    #[case("\u{f0000}", r#""\U000f0000""#)]
    #[case("grüße µs 日本", r#""grüße µs 日本""#)]
    #[case("emoji 🚀", r#""emoji 🚀""#)]
    #[case("${pvc.annotations['a']}", r#""${pvc.annotations['a']}""#)]
    fn quote_matches_strconv_quote(#[case] input: &str, #[case] want: &str) {
        assert_eq!(quote(input), want);
    }

    #[test]
    fn lists() {
        assert_eq!(quote_list(&["pvc.name", "x"]), r#"["pvc.name" "x"]"#);
        assert_eq!(quote_list::<&str>(&[]), "[]");
        assert_eq!(list(&["zone", "rack"]), "[zone rack]");
        assert_eq!(list::<String>(&[]), "[]");
    }

    #[test]
    fn maps_sort_by_key_as_go() {
        let m: Vec<(String, String)> = [("a-b", "2"), ("b", "3"), ("a", "1")]
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        // Go prints fmt.Sprintf("%v", map[string]string{...}) as map[a:1 a-b:2 b:3].
        assert_eq!(map(m.iter().map(|(k, v)| (k, v))), "map[a:1 a-b:2 b:3]");
        assert_eq!(map(std::iter::empty()), "map[]");
    }

    #[test]
    fn parse_bool_like_go() {
        for (input, want) in [
            ("1", true),
            ("t", true),
            ("True", true),
            ("0", false),
            ("F", false),
            ("FALSE", false),
        ] {
            assert_eq!(parse_bool(input), Ok(want), "{input}");
        }
        assert_eq!(
            parse_bool("yes"),
            Err("strconv.ParseBool: parsing \"yes\": invalid syntax".to_string())
        );
    }
}
