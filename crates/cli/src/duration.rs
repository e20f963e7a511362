//! Go's `time.ParseDuration`, ported for exact parity: the same inputs are accepted, the same
//! values produced (in nanoseconds, signed) and the same errors reported.

use std::fmt;

const NANOS_PER_UNIT: [(&str, u64); 9] = [
    ("ns", 1),
    ("us", 1_000),
    ("µs", 1_000), // U+00B5 micro sign
    ("μs", 1_000), // U+03BC Greek small letter mu
    ("ms", 1_000_000),
    ("s", 1_000_000_000),
    ("m", 60_000_000_000),
    ("h", 3_600_000_000_000),
    ("", 0), // sentinel, never matched (units are non-empty)
];

const LIMIT: u64 = 1 << 63;

/// Why a duration did not parse. `Display` matches Go's error text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DurationError {
    Invalid(String),
    MissingUnit(String),
    UnknownUnit { unit: String, input: String },
}

impl fmt::Display for DurationError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Invalid(s) => write!(f, "time: invalid duration {}", go_time_quote(s)),
            Self::MissingUnit(s) => {
                write!(f, "time: missing unit in duration {}", go_time_quote(s))
            }
            Self::UnknownUnit { unit, input } => write!(
                f,
                "time: unknown unit {} in duration {}",
                go_time_quote(unit),
                go_time_quote(input)
            ),
        }
    }
}

impl std::error::Error for DurationError {}

/// Parses a Go duration such as `300ms`, `-1.5h` or `2h45m` into signed nanoseconds.
/// Units are `ns`, `us` (or `µs`/`μs`), `ms`, `s`, `m`, `h`; a bare number is only allowed for 0.
pub fn parse_go_duration(input: &str) -> Result<i64, DurationError> {
    let invalid = || DurationError::Invalid(input.to_string());
    let mut s = input.as_bytes();
    let mut neg = false;
    if let Some(&c) = s.first()
        && (c == b'-' || c == b'+')
    {
        neg = c == b'-';
        s = &s[1..];
    }
    if s == b"0" {
        return Ok(0);
    }
    if s.is_empty() {
        return Err(invalid());
    }
    let mut total: u64 = 0;
    while !s.is_empty() {
        // The next character must be [0-9.].
        if !(s[0] == b'.' || s[0].is_ascii_digit()) {
            return Err(invalid());
        }
        // Consume [0-9]*.
        let before = s.len();
        let (mut v, rest) = leading_int(s).ok_or_else(invalid)?;
        s = rest;
        let pre = before != s.len();
        // Consume (\.[0-9]*)?.
        let mut post = false;
        let (mut frac, mut scale) = (0u64, 1f64);
        if s.first() == Some(&b'.') {
            s = &s[1..];
            let before = s.len();
            (frac, scale, s) = leading_fraction(s);
            post = before != s.len();
        }
        if !pre && !post {
            return Err(invalid()); // no digits, e.g. ".s" or "-.s"
        }
        // Consume the unit: everything up to the next digit or dot.
        let end = s
            .iter()
            .position(|&c| c == b'.' || c.is_ascii_digit())
            .unwrap_or(s.len());
        if end == 0 {
            return Err(DurationError::MissingUnit(input.to_string()));
        }
        let unit_text = String::from_utf8_lossy(&s[..end]).into_owned();
        s = &s[end..];
        let unit = NANOS_PER_UNIT
            .iter()
            .find(|(name, _)| !name.is_empty() && *name == unit_text)
            .map(|(_, n)| *n)
            .ok_or_else(|| DurationError::UnknownUnit {
                unit: unit_text.clone(),
                input: input.to_string(),
            })?;
        if v > LIMIT / unit {
            return Err(invalid()); // overflow
        }
        v *= unit;
        if frac > 0 {
            // Go computes the fraction in float64, which is nanosecond-exact up to hours.
            v += (frac as f64 * (unit as f64 / scale)) as u64;
            if v > LIMIT {
                return Err(invalid());
            }
        }
        // Two terms of 2^63 would wrap to 0 (Go's parser accepts that as 0).
        total = match total.checked_add(v) {
            Some(t) if t <= LIMIT => t,
            _ => return Err(invalid()),
        };
    }
    if neg {
        // total <= 2^63, so this is at least i64::MIN.
        return Ok((total as i128).wrapping_neg() as i64);
    }
    if total > LIMIT - 1 {
        return Err(invalid());
    }
    Ok(total as i64)
}

/// Consumes leading digits; `None` on overflow past 2^63.
fn leading_int(s: &[u8]) -> Option<(u64, &[u8])> {
    let mut x: u64 = 0;
    let mut i = 0;
    while i < s.len() && s[i].is_ascii_digit() {
        if x > LIMIT / 10 {
            return None;
        }
        x = x * 10 + u64::from(s[i] - b'0');
        if x > LIMIT {
            return None;
        }
        i += 1;
    }
    Some((x, &s[i..]))
}

/// Consumes leading fraction digits; digits past what fits are skipped, not an error.
fn leading_fraction(s: &[u8]) -> (u64, f64, &[u8]) {
    let (mut x, mut scale, mut overflow) = (0u64, 1f64, false);
    let mut i = 0;
    while i < s.len() && s[i].is_ascii_digit() {
        if !overflow {
            if x > (LIMIT - 1) / 10 {
                overflow = true;
            } else {
                let y = x * 10 + u64::from(s[i] - b'0');
                if y > LIMIT {
                    overflow = true;
                } else {
                    x = y;
                    scale *= 10.0;
                }
            }
        }
        i += 1;
    }
    (x, scale, &s[i..])
}

/// The quoting Go's time package uses in its errors: `"` around the text, `\"` and `\\`
/// escaped, and every byte of a non-ASCII or control character as `\xNN`.
fn go_time_quote(s: &str) -> String {
    let mut out = String::from("\"");
    for c in s.chars() {
        if (c as u32) >= 0x80 || c < ' ' {
            let mut buf = [0u8; 4];
            for b in c.encode_utf8(&mut buf).bytes() {
                out.push_str(&format!("\\x{b:02x}"));
            }
        } else {
            if c == '"' || c == '\\' {
                out.push('\\');
            }
            out.push(c);
        }
    }
    out.push('"');
    out
}

/// Formats signed nanoseconds like Go's `Duration.String()` (`1m30s`, `250ms`, `0s`), for help
/// texts and messages.
pub fn format_go_duration(nanos: i64) -> String {
    if nanos == 0 {
        return "0s".to_string();
    }
    let sign = if nanos < 0 { "-" } else { "" };
    let n = nanos.unsigned_abs();
    if n < 1_000_000_000 {
        // Sub-second values use the largest unit that keeps an integer part.
        let (unit, div) = match n {
            0..1_000 => ("ns", 1u64),
            1_000..1_000_000 => ("µs", 1_000),
            _ => ("ms", 1_000_000),
        };
        return format!("{sign}{}{unit}", fraction(n, div));
    }
    let (h, rem) = (n / 3_600_000_000_000, n % 3_600_000_000_000);
    let (m, rem) = (rem / 60_000_000_000, rem % 60_000_000_000);
    let secs = fraction(rem, 1_000_000_000);
    match (h, m) {
        (0, 0) => format!("{sign}{secs}s"),
        (0, m) => format!("{sign}{m}m{secs}s"),
        (h, m) => format!("{sign}{h}h{m}m{secs}s"),
    }
}

fn fraction(n: u64, div: u64) -> String {
    let (int, frac) = (n / div, n % div);
    if frac == 0 {
        return int.to_string();
    }
    let width = div.to_string().len() - 1;
    let digits = format!("{frac:0width$}");
    format!("{int}.{}", digits.trim_end_matches('0'))
}

#[cfg(test)]
mod tests {
    use super::*;
    use rstest::rstest;

    const NS: i64 = 1;
    const US: i64 = 1_000;
    const MS: i64 = 1_000_000;
    const S: i64 = 1_000_000_000;
    const M: i64 = 60 * S;
    const H: i64 = 60 * M;

    // The valid cases of Go's own table (time/time_test.go parseDurationTests), plus the
    // forms named in the flag documentation.
    #[rstest]
    #[case("0", 0)]
    #[case("5s", 5 * S)]
    #[case("30s", 30 * S)]
    #[case("1478s", 1478 * S)]
    #[case("-5s", -5 * S)]
    #[case("+5s", 5 * S)]
    #[case("-0", 0)]
    #[case("+0", 0)]
    #[case("5.0s", 5 * S)]
    #[case("5.6s", 5 * S + 600 * MS)]
    #[case("5.s", 5 * S)]
    #[case(".5s", 500 * MS)]
    #[case("1.0s", S)]
    #[case("1.00s", S)]
    #[case("1.004s", S + 4 * MS)]
    #[case("1.0040s", S + 4 * MS)]
    #[case("100.00100s", 100 * S + MS)]
    #[case("10ns", 10 * NS)]
    #[case("11us", 11 * US)]
    #[case("12µs", 12 * US)]
    #[case("12μs", 12 * US)]
    #[case("13ms", 13 * MS)]
    #[case("14s", 14 * S)]
    #[case("15m", 15 * M)]
    #[case("16h", 16 * H)]
    #[case("3h30m", 3 * H + 30 * M)]
    #[case("10.5s4m", 4 * M + 10 * S + 500 * MS)]
    #[case("-2m3.4s", -(2 * M + 3 * S + 400 * MS))]
    #[case("1h2m3s4ms5us6ns", H + 2 * M + 3 * S + 4 * MS + 5 * US + 6 * NS)]
    #[case("39h9m14.425s", 39 * H + 9 * M + 14 * S + 425 * MS)]
    #[case("52763797000ns", 52763797000 * NS)]
    #[case("0.3333333333333333333h", 20 * M)]
    #[case("9007199254740993ns", (1 << 53) + 1)]
    #[case("9223372036854775807ns", i64::MAX)]
    #[case("9223372036854775.807us", i64::MAX)]
    #[case("9223372036s854ms775us807ns", i64::MAX)]
    #[case("-9223372036854775808ns", i64::MIN)]
    #[case("-9223372036854775.808us", i64::MIN)]
    #[case("-9223372036s854ms775us808ns", i64::MIN)]
    #[case("-2562047h47m16.854775808s", i64::MIN)]
    #[case("0.100000000000000000000h", 6 * M)]
    #[case("0.830103483285477580700h", 49 * M + 48 * S + 372539827 * NS)]
    #[case("1m30s", 90 * S)]
    #[case("1.5h", 90 * M)]
    #[case("250ms", 250 * MS)]
    #[case("1us", US)]
    #[case("1µs", US)]
    #[case("-1s", -S)]
    fn parses_like_go(#[case] input: &str, #[case] want: i64) {
        assert_eq!(parse_go_duration(input), Ok(want), "{input}");
    }

    // The invalid cases of Go's table, with Go's exact messages.
    #[rstest]
    #[case("", r#"time: invalid duration """#)]
    #[case("3", r#"time: missing unit in duration "3""#)]
    #[case("-", r#"time: invalid duration "-""#)]
    #[case("s", r#"time: invalid duration "s""#)]
    #[case(".", r#"time: invalid duration ".""#)]
    #[case("-.", r#"time: invalid duration "-.""#)]
    #[case(".s", r#"time: invalid duration ".s""#)]
    #[case("+.s", r#"time: invalid duration "+.s""#)]
    #[case("1d", r#"time: unknown unit "d" in duration "1d""#)]
    #[case("\u{85}\u{85}", r#"time: invalid duration "\xc2\x85\xc2\x85""#)]
    #[case("\u{FFFD}", r#"time: invalid duration "\xef\xbf\xbd""#)]
    #[case(
        "9223372036854775810ns",
        r#"time: invalid duration "9223372036854775810ns""#
    )]
    #[case(
        "9223372036854775808ns",
        r#"time: invalid duration "9223372036854775808ns""#
    )]
    // Go wraps this sum to 0 and accepts it.
    #[case(
        "9223372036854775808ns9223372036854775808ns",
        r#"time: invalid duration "9223372036854775808ns9223372036854775808ns""#
    )]
    #[case(
        "-9223372036854775809ns",
        r#"time: invalid duration "-9223372036854775809ns""#
    )]
    #[case("9223372036854776us", r#"time: invalid duration "9223372036854776us""#)]
    #[case("3000000h", r#"time: invalid duration "3000000h""#)]
    #[case(
        "9223372036854775.808us",
        r#"time: invalid duration "9223372036854775.808us""#
    )]
    #[case(
        "9223372036854ms775us808ns",
        r#"time: invalid duration "9223372036854ms775us808ns""#
    )]
    #[case("10", r#"time: missing unit in duration "10""#)]
    #[case("1 s", r#"time: unknown unit " s" in duration "1 s""#)]
    #[case("5S", r#"time: unknown unit "S" in duration "5S""#)]
    fn rejects_like_go(#[case] input: &str, #[case] message: &str) {
        assert_eq!(
            parse_go_duration(input).unwrap_err().to_string(),
            message,
            "{input}"
        );
    }

    #[rstest]
    #[case(0, "0s")]
    #[case(10 * S, "10s")]
    #[case(90 * S, "1m30s")]
    #[case(5 * M, "5m0s")]
    #[case(H, "1h0m0s")]
    #[case(250 * MS, "250ms")]
    #[case(1500 * US, "1.5ms")]
    #[case(US, "1µs")]
    #[case(7, "7ns")]
    #[case(-S, "-1s")]
    #[case(S + 500 * MS, "1.5s")]
    fn formats_like_go(#[case] nanos: i64, #[case] want: &str) {
        assert_eq!(format_go_duration(nanos), want);
    }

    proptest::proptest! {
        #[test]
        fn never_panics(s in "\\PC{0,30}") {
            let _ = parse_go_duration(&s);
        }

        #[test]
        fn never_panics_on_duration_like_text(s in "[-+]?([0-9]{0,22}(\\.[0-9]{0,22})?(ns|us|µs|ms|s|m|h|d|)){1,4}") {
            let _ = parse_go_duration(&s);
        }

        #[test]
        fn formatting_round_trips(n in proptest::num::i64::ANY) {
            proptest::prop_assert_eq!(parse_go_duration(&format_go_duration(n)), Ok(n));
        }
    }
}
