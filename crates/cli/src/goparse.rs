//! The value grammars of Go's `strconv`, as pflag and Go's `flag` package apply them: booleans
//! (`ParseBool`), integers with base prefixes and digit separators (`ParseInt(s, 0, 64)`,
//! `ParseUint(s, 0, 64)`) and floats (`ParseFloat`).

/// Why a number did not parse, in the words of Go's `strconv.NumError`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NumError {
    Syntax,
    Range,
}

impl std::fmt::Display for NumError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Syntax => "invalid syntax",
            Self::Range => "value out of range",
        })
    }
}

/// `strconv.ParseBool`: 1, t, T, TRUE, true, True, 0, f, F, FALSE, false, False.
pub fn parse_go_bool(s: &str) -> Option<bool> {
    gofmt::parse_bool(s).ok()
}

/// `strconv.ParseInt(s, 0, 64)`: optional sign, then a number as [`parse_go_uint`] reads it.
pub fn parse_go_int(s: &str) -> Result<i64, NumError> {
    let (neg, digits) = match s.as_bytes().first() {
        Some(b'-') => (true, &s[1..]),
        Some(b'+') => (false, &s[1..]),
        _ => (false, s),
    };
    let magnitude = parse_go_uint(digits)?;
    if neg {
        if magnitude > 1 << 63 {
            return Err(NumError::Range);
        }
        Ok((magnitude as i128).wrapping_neg() as i64)
    } else {
        i64::try_from(magnitude).map_err(|_| NumError::Range)
    }
}

/// `strconv.ParseUint(s, 0, 64)`: decimal, `0x`/`0X` hex, `0o`/`0O` or leading-`0` octal,
/// `0b`/`0B` binary, with `_` allowed between digits. No sign.
pub fn parse_go_uint(s: &str) -> Result<u64, NumError> {
    if s.is_empty() {
        return Err(NumError::Syntax);
    }
    let b = s.as_bytes();
    let (base, digits): (u32, &[u8]) = if b[0] == b'0' {
        match b.get(1).map(u8::to_ascii_lowercase) {
            Some(b'b') if b.len() >= 3 => (2, &b[2..]),
            Some(b'o') if b.len() >= 3 => (8, &b[2..]),
            Some(b'x') if b.len() >= 3 => (16, &b[2..]),
            _ => (8, &b[1..]),
        }
    } else {
        (10, b)
    };
    let mut n: u64 = 0;
    let mut underscores = false;
    for &c in digits {
        if c == b'_' {
            underscores = true;
            continue;
        }
        let d = (c as char)
            .to_digit(16)
            .filter(|d| *d < base)
            .ok_or(NumError::Syntax)?;
        n = n
            .checked_mul(u64::from(base))
            .and_then(|n| n.checked_add(u64::from(d)))
            .ok_or(NumError::Range)?;
    }
    if underscores && !underscores_ok(s) {
        return Err(NumError::Syntax);
    }
    Ok(n)
}

/// Go's rule for `_` in number literals: only between digits, or after a base prefix.
fn underscores_ok(s: &str) -> bool {
    let b = s.as_bytes();
    let mut i = 0;
    // '^' start, '0' digit or prefix, '_' underscore, '!' anything else.
    let mut saw = '^';
    let mut hex = false;
    if b.len() >= 2 && b[0] == b'0' && matches!(b[1].to_ascii_lowercase(), b'b' | b'o' | b'x') {
        i = 2;
        saw = '0';
        hex = b[1].eq_ignore_ascii_case(&b'x');
    }
    while i < b.len() {
        let c = b[i];
        if c.is_ascii_digit() || (hex && c.is_ascii_hexdigit()) {
            saw = '0';
        } else if c == b'_' {
            if saw != '0' {
                return false;
            }
            saw = '_';
        } else {
            if saw == '_' {
                return false;
            }
            saw = '!';
        }
        i += 1;
    }
    saw != '_'
}

/// `strconv.ParseFloat(s, 64)` for decimal input, including `Inf`, `Infinity` and `NaN` in any
/// case. Go's hexadecimal floats and digit separators are not accepted (nobody writes a QPS
/// that way).
pub fn parse_go_float(s: &str) -> Result<f64, NumError> {
    if s.is_empty() || s.contains('_') || s.bytes().any(|c| c.is_ascii_whitespace()) {
        return Err(NumError::Syntax);
    }
    let v: f64 = s.parse().map_err(|_| NumError::Syntax)?;
    // Go reports overflow ("1e400") as a range error; Rust returns infinity.
    let spelled_infinite = s
        .trim_start_matches(['+', '-'])
        .to_ascii_lowercase()
        .starts_with("inf");
    if v.is_infinite() && !spelled_infinite {
        return Err(NumError::Range);
    }
    Ok(v)
}

/// `strconv.ParseFloat(s, 32)`: like [`parse_go_float`], with float32's range.
pub fn parse_go_float32(s: &str) -> Result<f32, NumError> {
    let v = parse_go_float(s)?;
    if v.is_finite() && v.abs() > f64::from(f32::MAX) {
        return Err(NumError::Range);
    }
    Ok(v as f32)
}

#[cfg(test)]
mod tests {
    use super::*;
    use rstest::rstest;

    #[rstest]
    #[case("1", Some(true))]
    #[case("t", Some(true))]
    #[case("T", Some(true))]
    #[case("TRUE", Some(true))]
    #[case("true", Some(true))]
    #[case("True", Some(true))]
    #[case("0", Some(false))]
    #[case("f", Some(false))]
    #[case("F", Some(false))]
    #[case("FALSE", Some(false))]
    #[case("false", Some(false))]
    #[case("False", Some(false))]
    #[case("tRUE", None)]
    #[case("yes", None)]
    #[case("", None)]
    #[case(" true", None)]
    fn bools(#[case] s: &str, #[case] want: Option<bool>) {
        assert_eq!(parse_go_bool(s), want);
    }

    #[rstest]
    #[case("0", Ok(0))]
    #[case("10", Ok(10))]
    #[case("-1", Ok(-1))]
    #[case("+7", Ok(7))]
    #[case("0x1F", Ok(31))]
    #[case("0X1f", Ok(31))]
    #[case("010", Ok(8))]
    #[case("0o17", Ok(15))]
    #[case("0b101", Ok(5))]
    #[case("1_000", Ok(1000))]
    #[case("0x_1f", Ok(31))]
    #[case("-0x10", Ok(-16))]
    #[case("9223372036854775807", Ok(i64::MAX))]
    #[case("-9223372036854775808", Ok(i64::MIN))]
    #[case("9223372036854775808", Err(NumError::Range))]
    #[case("-9223372036854775809", Err(NumError::Range))]
    #[case("", Err(NumError::Syntax))]
    #[case("-", Err(NumError::Syntax))]
    #[case("08", Err(NumError::Syntax))]
    #[case("0x", Err(NumError::Syntax))]
    #[case("1.5", Err(NumError::Syntax))]
    #[case("_1", Err(NumError::Syntax))]
    #[case("1_", Err(NumError::Syntax))]
    #[case("1__0", Err(NumError::Syntax))]
    #[case("abc", Err(NumError::Syntax))]
    #[case(" 1", Err(NumError::Syntax))]
    fn ints(#[case] s: &str, #[case] want: Result<i64, NumError>) {
        assert_eq!(parse_go_int(s), want, "{s}");
    }

    #[rstest]
    #[case("100", Ok(100))]
    #[case("0", Ok(0))]
    #[case("18446744073709551615", Ok(u64::MAX))]
    #[case("18446744073709551616", Err(NumError::Range))]
    #[case("+1", Err(NumError::Syntax))]
    #[case("-1", Err(NumError::Syntax))]
    fn uints(#[case] s: &str, #[case] want: Result<u64, NumError>) {
        assert_eq!(parse_go_uint(s), want, "{s}");
    }

    #[rstest]
    #[case("5", Ok(5.0))]
    #[case("0.5", Ok(0.5))]
    #[case(".5", Ok(0.5))]
    #[case("5.", Ok(5.0))]
    #[case("-1", Ok(-1.0))]
    #[case("1e3", Ok(1000.0))]
    #[case("+Inf", Ok(f64::INFINITY))]
    #[case("infinity", Ok(f64::INFINITY))]
    #[case("1e400", Err(NumError::Range))]
    #[case("", Err(NumError::Syntax))]
    #[case("five", Err(NumError::Syntax))]
    #[case("1_0", Err(NumError::Syntax))]
    fn floats(#[case] s: &str, #[case] want: Result<f64, NumError>) {
        assert_eq!(parse_go_float(s), want, "{s}");
    }

    #[test]
    fn float32_range() {
        assert_eq!(parse_go_float32("1.5"), Ok(1.5));
        assert_eq!(parse_go_float32("1e39"), Err(NumError::Range));
        assert!(parse_go_float32("NaN").unwrap().is_nan());
    }

    proptest::proptest! {
        #[test]
        fn never_panic(s in "\\PC{0,24}") {
            let _ = (parse_go_int(&s), parse_go_uint(&s), parse_go_float(&s), parse_go_bool(&s));
        }
    }
}
