//! Kubernetes resource quantities (`10Gi`, `500M`, `1.5Ti`, `1e9`) as whole bytes.

use thiserror::Error;

/// Why a quantity string was rejected.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum QuantityError {
    #[error("{0:?} is not a quantity (expected e.g. 10Gi, 500M or 1073741824)")]
    Syntax(String),
    #[error("{0:?} does not fit in a signed 64-bit byte count")]
    TooLarge(String),
}

/// Parses a non-negative Kubernetes quantity into bytes.
///
/// Fractions round up to the next whole byte, as Kubernetes does when it turns a quantity into
/// an integer.
pub fn parse_quantity(input: &str) -> Result<i64, QuantityError> {
    let syntax = || QuantityError::Syntax(input.to_owned());
    let s = input.trim();
    let s = s.strip_prefix('+').unwrap_or(s);
    let number_end = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(s.len());
    let (number, suffix) = s.split_at(number_end);
    let (int_part, frac_part) = number.split_once('.').unwrap_or((number, ""));
    if (int_part.is_empty() && frac_part.is_empty()) || frac_part.contains('.') {
        return Err(syntax());
    }

    // value = mantissa * numerator / denominator, kept exact in u128 until the final rounding.
    let digits = format!("{int_part}{frac_part}");
    let too_large = || QuantityError::TooLarge(input.to_owned());
    let mantissa: u128 = digits.parse().map_err(|_| too_large())?;
    let mut denominator = 10u128
        .checked_pow(len_u32(frac_part)?)
        .ok_or_else(too_large)?;
    let mut numerator: u128 = 1;
    match suffix_factor(suffix) {
        Some(Factor::Multiply(f)) => numerator = f,
        Some(Factor::Divide(d)) => denominator *= d,
        None => {
            let exp = suffix
                .strip_prefix(['e', 'E'])
                .ok_or_else(syntax)?
                .parse::<i32>()
                .map_err(|_| syntax())?;
            let pow = 10u128
                .checked_pow(exp.unsigned_abs())
                .ok_or_else(too_large)?;
            if exp >= 0 {
                numerator = pow;
            } else {
                denominator = denominator.checked_mul(pow).ok_or_else(too_large)?;
            }
        }
    }
    let scaled = mantissa.checked_mul(numerator).ok_or_else(too_large)?;
    let bytes = scaled.div_ceil(denominator);
    i64::try_from(bytes).map_err(|_| too_large())
}

enum Factor {
    Multiply(u128),
    Divide(u128),
}

fn suffix_factor(suffix: &str) -> Option<Factor> {
    let f = match suffix {
        "" => 1,
        "m" => return Some(Factor::Divide(1000)),
        "k" => 1000,
        "M" => 1000u128.pow(2),
        "G" => 1000u128.pow(3),
        "T" => 1000u128.pow(4),
        "P" => 1000u128.pow(5),
        "E" => 1000u128.pow(6),
        "Ki" => 1 << 10,
        "Mi" => 1 << 20,
        "Gi" => 1 << 30,
        "Ti" => 1 << 40,
        "Pi" => 1 << 50,
        "Ei" => 1 << 60,
        _ => return None,
    };
    Some(Factor::Multiply(f))
}

fn len_u32(s: &str) -> Result<u32, QuantityError> {
    u32::try_from(s.len()).map_err(|_| QuantityError::TooLarge(s.to_owned()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use rstest::rstest;

    #[rstest]
    #[case("0", 0)]
    #[case("1073741824", 1 << 30)]
    #[case("10Gi", 10 << 30)]
    #[case("1Ti", 1 << 40)]
    #[case("1Pi", 1 << 50)]
    #[case("500M", 500_000_000)]
    #[case("1k", 1000)]
    #[case("1.5Gi", 3 << 29)]
    #[case(".5Ki", 512)]
    #[case("1e9", 1_000_000_000)]
    #[case("1E3", 1000)]
    #[case("15e-1", 2)] // 1.5 bytes rounds up
    #[case("1500m", 2)]
    #[case("+7", 7)]
    #[case("7Ei", 7 << 60)]
    fn parses(#[case] input: &str, #[case] want: i64) {
        assert_eq!(parse_quantity(input), Ok(want));
    }

    #[rstest]
    #[case("")]
    #[case("Gi")]
    #[case("-1Gi")]
    #[case("10GB")]
    #[case("10 Gi")]
    #[case("1.2.3")]
    #[case("1e")]
    #[case("abc")]
    fn rejects_syntax(#[case] input: &str) {
        assert_eq!(
            parse_quantity(input),
            Err(QuantityError::Syntax(input.to_owned()))
        );
    }

    #[rstest]
    #[case("8Ei")]
    #[case("1e40")]
    #[case("99999999999999999999999999999999999999999")]
    fn rejects_overflow(#[case] input: &str) {
        assert_eq!(
            parse_quantity(input),
            Err(QuantityError::TooLarge(input.to_owned()))
        );
    }
}
