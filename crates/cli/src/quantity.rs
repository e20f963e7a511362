//! Kubernetes resource quantities, as far as `--log-*-info-buffer-size` needs them: the syntax
//! check of `resource.ParseQuantity` and the integer value (rounded up, like `Quantity.Value()`),
//! approximated in floating point.

/// Parses `<sign?><digits>[.<digits>]<suffix>` with a binary (`Ki`..`Ei`), decimal
/// (`n u m "" k M G T P E`) or exponent (`e3`, `E-2`) suffix, and returns `Value()`: the
/// quantity rounded up to a whole number. `None` for malformed input.
pub fn parse_quantity_value(s: &str) -> Option<f64> {
    let (neg, rest) = match s.as_bytes().first()? {
        b'-' => (true, &s[1..]),
        b'+' => (false, &s[1..]),
        _ => (false, s),
    };
    let number_end = rest
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(rest.len());
    let (number, suffix) = rest.split_at(number_end);
    if number.is_empty() || number == "." || number.matches('.').count() > 1 {
        return None;
    }
    let magnitude: f64 = number.parse().ok()?;
    let scale = suffix_scale(suffix)?;
    let value = magnitude * scale;
    let value = if neg { -value } else { value };
    Some(value.ceil() + 0.0) // + 0.0 turns -0 into 0
}

fn suffix_scale(suffix: &str) -> Option<f64> {
    let binary = |p: i32| Some(1024f64.powi(p));
    let decimal = |p: i32| Some(10f64.powi(p));
    match suffix {
        "Ki" => binary(1),
        "Mi" => binary(2),
        "Gi" => binary(3),
        "Ti" => binary(4),
        "Pi" => binary(5),
        "Ei" => binary(6),
        "n" => decimal(-9),
        "u" => decimal(-6),
        "m" => decimal(-3),
        "" => decimal(0),
        "k" => decimal(3),
        "M" => decimal(6),
        "G" => decimal(9),
        "T" => decimal(12),
        "P" => decimal(15),
        "E" => decimal(18),
        exp => {
            let digits = exp.strip_prefix(['e', 'E'])?;
            let unsigned = digits.strip_prefix(['+', '-']).unwrap_or(digits);
            if unsigned.is_empty() || !unsigned.bytes().all(|b| b.is_ascii_digit()) {
                return None;
            }
            let p: i32 = digits.parse().ok()?;
            decimal(p)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rstest::rstest;

    #[rstest]
    #[case("0", Some(0.0))]
    #[case("512", Some(512.0))]
    #[case("1K", None)] // upper-case K is not a suffix
    #[case("1k", Some(1000.0))]
    #[case("2Ki", Some(2048.0))]
    #[case("3M", Some(3_000_000.0))]
    #[case("5Mi", Some(5.0 * 1024.0 * 1024.0))]
    #[case("0.5", Some(1.0))]
    #[case("1m", Some(1.0))]
    #[case("-1m", Some(0.0))]
    #[case("-2", Some(-2.0))]
    #[case("1e3", Some(1000.0))]
    #[case("1E-3", Some(1.0))]
    #[case("0Gi", Some(0.0))]
    #[case("", None)]
    #[case("Ki", None)]
    #[case(".", None)]
    #[case("1.2.3", None)]
    #[case("1e", None)]
    #[case("1 Ki", None)]
    #[case("abc", None)]
    fn quantities(#[case] s: &str, #[case] want: Option<f64>) {
        assert_eq!(parse_quantity_value(s), want, "{s}");
    }

    proptest::proptest! {
        #[test]
        fn never_panics(s in "\\PC{0,20}") {
            let _ = parse_quantity_value(&s);
        }
    }
}
