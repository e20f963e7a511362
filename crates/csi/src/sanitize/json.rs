//! A minimal JSON value and writer that formats exactly like Go's `encoding/json`, so that our
//! sanitised log lines read the same as those of the Go sidecars: object keys sorted, HTML
//! characters escaped as `\u003c`, floats in Go's shortest form, bytes as padded base64.

use std::collections::BTreeMap;
use std::fmt::Write as _;

/// A JSON value. Objects keep their keys sorted, as Go does when it encodes a map.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Json {
    Bool(bool),
    Int(i64),
    Uint(u64),
    F32(f32),
    F64(f64),
    Str(String),
    Bytes(Vec<u8>),
    Array(Vec<Json>),
    Object(BTreeMap<String, Json>),
}

/// Go's `json.Marshal` refuses NaN and infinities; the caller reports this like Go does.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("json: unsupported value: {0}")]
pub(crate) struct UnsupportedValue(pub(crate) String);

impl Json {
    /// Renders the value as compact JSON.
    pub(crate) fn render(&self) -> Result<String, UnsupportedValue> {
        let mut out = String::new();
        self.write(&mut out)?;
        Ok(out)
    }

    fn write(&self, out: &mut String) -> Result<(), UnsupportedValue> {
        match self {
            Json::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
            Json::Int(i) => push_display(out, i),
            Json::Uint(u) => push_display(out, u),
            Json::F32(f) => write_f32(out, *f)?,
            Json::F64(f) => write_f64(out, *f)?,
            Json::Str(s) => write_string(out, s),
            Json::Bytes(b) => {
                out.push('"');
                out.push_str(&base64(b));
                out.push('"');
            }
            Json::Array(items) => {
                out.push('[');
                for (i, item) in items.iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    item.write(out)?;
                }
                out.push(']');
            }
            Json::Object(fields) => {
                out.push('{');
                for (i, (key, value)) in fields.iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    write_string(out, key);
                    out.push(':');
                    value.write(out)?;
                }
                out.push('}');
            }
        }
        Ok(())
    }
}

fn push_display(out: &mut String, value: impl std::fmt::Display) {
    // Writing to a String cannot fail.
    let _ = write!(out, "{value}");
}

/// Go escapes `"`, `\`, control characters, the HTML characters `<`, `>`, `&`, and U+2028/2029.
fn write_string(out: &mut String, s: &str) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\u{08}' => out.push_str("\\b"),
            '\u{0c}' => out.push_str("\\f"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '<' | '>' | '&' | '\u{2028}' | '\u{2029}' | '\u{00}'..='\u{1f}' => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

/// Go uses plain notation for 1e-6 <= |x| < 1e21 and exponent notation (`1e+21`, `1e-7`)
/// outside that range, always with the shortest digits that round-trip.
fn write_f64(out: &mut String, f: f64) -> Result<(), UnsupportedValue> {
    if !f.is_finite() {
        return Err(UnsupportedValue(go_non_finite(f.is_nan(), f > 0.0)));
    }
    let abs = f.abs();
    if abs != 0.0 && !(1e-6..1e21).contains(&abs) {
        push_exponent(out, &format!("{f:e}"));
    } else {
        push_display(out, f);
    }
    Ok(())
}

fn write_f32(out: &mut String, f: f32) -> Result<(), UnsupportedValue> {
    if !f.is_finite() {
        return Err(UnsupportedValue(go_non_finite(f.is_nan(), f > 0.0)));
    }
    let abs = f.abs();
    if abs != 0.0 && !(1e-6..1e21).contains(&abs) {
        push_exponent(out, &format!("{f:e}"));
    } else {
        push_display(out, f);
    }
    Ok(())
}

fn go_non_finite(nan: bool, positive: bool) -> String {
    match (nan, positive) {
        (true, _) => "NaN".to_string(),
        (false, true) => "+Inf".to_string(),
        (false, false) => "-Inf".to_string(),
    }
}

/// Rust prints `1e21` and `1e-7`; Go prints `1e+21` and `1e-7`.
fn push_exponent(out: &mut String, rust: &str) {
    match rust.split_once('e') {
        Some((mantissa, exp)) if !exp.starts_with('-') => {
            out.push_str(mantissa);
            out.push_str("e+");
            out.push_str(exp);
        }
        _ => out.push_str(rust),
    }
}

/// Standard base64 with padding, as Go encodes `[]byte`.
fn base64(bytes: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let b = [
            chunk[0],
            *chunk.get(1).unwrap_or(&0),
            *chunk.get(2).unwrap_or(&0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for (i, shift) in [18u32, 12, 6, 0].into_iter().enumerate() {
            if i <= chunk.len() {
                out.push(char::from(ALPHABET[((n >> shift) & 63) as usize]));
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

    fn render(j: Json) -> String {
        j.render().unwrap()
    }

    #[test]
    fn strings_are_escaped_like_go() {
        let cases = [
            ("plain", r#""plain""#),
            ("a\"b\\c", r#""a\"b\\c""#),
            ("<a&b>", r#""\u003ca\u0026b\u003e""#),
            ("\n\r\t\u{08}\u{0c}", r#""\n\r\t\b\f""#),
            ("\u{01}\u{1f}\u{7f}", "\"\\u0001\\u001f\u{7f}\""),
            ("\u{2028}\u{2029}", r#""\u2028\u2029""#),
            ("ünï", "\"ünï\""),
        ];
        for (input, want) in cases {
            assert_eq!(
                render(Json::Str(input.to_string())),
                want,
                "input {input:?}"
            );
        }
    }

    #[test]
    fn numbers_are_formatted_like_go() {
        let cases = [
            (Json::Int(-42), "-42"),
            (Json::Uint(u64::MAX), "18446744073709551615"),
            (Json::F64(1.0), "1"),
            (Json::F64(0.5), "0.5"),
            (Json::F64(-0.0), "-0"),
            (Json::F64(1e20), "100000000000000000000"),
            (Json::F64(1e21), "1e+21"),
            (Json::F64(1.5e-7), "1.5e-7"),
            (Json::F64(0.000001), "0.000001"),
            (Json::F32(0.1), "0.1"),
            (Json::F32(3e30), "3e+30"),
        ];
        for (input, want) in cases {
            assert_eq!(render(input.clone()), want, "input {input:?}");
        }
    }

    #[test]
    fn non_finite_floats_are_refused_like_go() {
        assert_eq!(
            Json::F64(f64::NAN).render(),
            Err(UnsupportedValue("NaN".into()))
        );
        assert_eq!(
            Json::F32(f32::INFINITY).render(),
            Err(UnsupportedValue("+Inf".into()))
        );
        assert_eq!(
            Json::F64(f64::NEG_INFINITY).render(),
            Err(UnsupportedValue("-Inf".into()))
        );
    }

    #[test]
    fn bytes_are_padded_base64() {
        let cases: [(&[u8], &str); 5] = [
            (b"", r#""""#),
            (b"f", r#""Zg==""#),
            (b"fo", r#""Zm8=""#),
            (b"foo", r#""Zm9v""#),
            (&[0xfb, 0xff], r#""+/8=""#),
        ];
        for (input, want) in cases {
            assert_eq!(render(Json::Bytes(input.to_vec())), want, "input {input:?}");
        }
    }

    #[test]
    fn objects_sort_keys_and_nest() {
        let mut inner = BTreeMap::new();
        inner.insert("b".to_string(), Json::Bool(false));
        let mut outer = BTreeMap::new();
        outer.insert(
            "z".to_string(),
            Json::Array(vec![Json::Int(1), Json::Object(inner)]),
        );
        outer.insert("a".to_string(), Json::Str("x".into()));
        outer.insert("10".to_string(), Json::Bool(true));
        outer.insert("2".to_string(), Json::Object(BTreeMap::new()));
        assert_eq!(
            render(Json::Object(outer)),
            r#"{"10":true,"2":{},"a":"x","z":[1,{"b":false}]}"#
        );
    }
}
