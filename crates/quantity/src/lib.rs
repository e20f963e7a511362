//! Kubernetes quantities (`resource.Quantity`) as byte counts.
//!
//! [`parse_quantity`] answers "how many bytes does this storage request ask for?" exactly like
//! Go's `resource.MustParse(s).Value()` (fractions round up), and [`format_binary_si`] writes
//! bytes the way `resource.NewQuantity(n, resource.BinarySI).String()` does (PV capacities).

// No unsafe code here: `forbid`, unlike the workspace's `deny`, cannot be allowed again below.
#![forbid(unsafe_code)]
// Shipped code reports failures instead of panicking; tests are free to unwrap.
#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used))]

use thiserror::Error;

/// Why a quantity string was rejected. The first three texts are apimachinery's.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum QuantityError {
    /// The string is not `[+-]digits[.digits][suffix]`.
    #[error(
        "quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'"
    )]
    FormatWrong,
    /// The number has no digits where apimachinery needs some (for example `Pi` or `e-10`).
    #[error("unable to parse numeric part of quantity")]
    Numeric,
    /// Unknown suffix (`K`, `kb`, `e` without digits, ...).
    #[error("unable to parse quantity's suffix")]
    Suffix,
    /// A negative, non-zero amount.
    #[error("quantity {0:?} is negative, which is not a size in bytes")]
    Negative(String),
}

/// The pieces apimachinery's scanner extracts from a quantity string.
struct Scanned<'a> {
    positive: bool,
    /// Sign, integer and fraction as written (used only to decide whether digits exist).
    value: &'a str,
    /// Integer digits without leading zeros (`"0"` when there are none).
    num: &'a str,
    /// Fraction digits.
    denom: &'a str,
    suffix: &'a str,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Suffix {
    /// SI suffix (`m`, `k`, `M`, ...): power of ten.
    Decimal(i32),
    /// IEC suffix (`Ki` .. `Ei`): power of two.
    Binary(u32),
    /// `e<int>` / `E<int>`: power of ten.
    Exponent(i32),
}

/// Bytes requested by a quantity, rounded up to a whole byte like Go's `Quantity.Value()`.
///
/// Differs from upstream: amounts above `i64::MAX` saturate to `i64::MAX` (Go caps only
/// binary-suffixed amounts and wraps decimal ones, for example `100E`), and negative non-zero
/// amounts are an error (Go returns a negative number; the API server rejects negative storage
/// requests, so a size below zero only arrives through a bug).
pub fn parse_quantity(s: &str) -> Result<i64, QuantityError> {
    if s.is_empty() {
        return Err(QuantityError::FormatWrong);
    }
    if s == "0" {
        return Ok(0);
    }
    let scanned = scan(s)?;
    let suffix = interpret(scanned.suffix).ok_or(QuantityError::Suffix)?;
    // Apimachinery's slow path parses the number with inf.Dec, which needs at least one digit;
    // its fast path quietly treats a digit-less number as zero. Reproduce which is which.
    let has_digits = scanned.value.bytes().any(|b| b.is_ascii_digit());
    if !has_digits && !takes_fast_path(&scanned, suffix) {
        return Err(QuantityError::Numeric);
    }
    let digits = format!("{}{}", scanned.num, scanned.denom);
    let digits = digits.trim_start_matches('0');
    if digits.is_empty() {
        return Ok(0);
    }
    if !scanned.positive {
        return Err(QuantityError::Negative(s.to_string()));
    }
    let fraction_len = i64::try_from(scanned.denom.len()).unwrap_or(i64::MAX);
    let (power_of_ten, power_of_two) = match suffix {
        Suffix::Decimal(e) | Suffix::Exponent(e) => (i64::from(e) - fraction_len, 0),
        Suffix::Binary(e) => (-fraction_len, e),
    };
    Ok(ceil_saturating(digits, power_of_ten, power_of_two))
}

/// Port of apimachinery's `parseQuantityString` scanner.
fn scan(s: &str) -> Result<Scanned<'_>, QuantityError> {
    let b = s.as_bytes();
    let end = b.len();
    let mut pos = 0;
    let mut positive = true;
    match b.first() {
        Some(b'-') => {
            positive = false;
            pos += 1;
        }
        Some(b'+') => pos += 1,
        _ => {}
    }
    while pos < end && b[pos] == b'0' {
        pos += 1;
    }
    if pos >= end {
        return Ok(Scanned {
            positive,
            value: "0",
            num: "0",
            denom: "",
            suffix: "",
        });
    }
    let num_start = pos;
    while pos < end && b[pos].is_ascii_digit() {
        pos += 1;
    }
    if pos >= end {
        let num = &s[num_start..];
        return Ok(Scanned {
            positive,
            value: s,
            num,
            denom: "",
            suffix: "",
        });
    }
    let num = if pos == num_start {
        "0"
    } else {
        &s[num_start..pos]
    };
    let mut denom = "";
    if b[pos] == b'.' {
        pos += 1;
        let denom_start = pos;
        while pos < end && b[pos].is_ascii_digit() {
            pos += 1;
        }
        if pos >= end {
            let denom = &s[denom_start..];
            return Ok(Scanned {
                positive,
                value: s,
                num,
                denom,
                suffix: "",
            });
        }
        denom = &s[denom_start..pos];
    }
    let value = &s[..pos];
    let suffix_start = pos;
    while pos < end && b"eEinumkKMGTP".contains(&b[pos]) {
        pos += 1;
    }
    if pos < end && (b[pos] == b'-' || b[pos] == b'+') {
        pos += 1;
    }
    while pos < end && b[pos].is_ascii_digit() {
        pos += 1;
    }
    if pos < end {
        return Err(QuantityError::FormatWrong);
    }
    let suffix = &s[suffix_start..];
    Ok(Scanned {
        positive,
        value,
        num,
        denom,
        suffix,
    })
}

fn interpret(suffix: &str) -> Option<Suffix> {
    let decimal = |e| Some(Suffix::Decimal(e));
    let binary = |e| Some(Suffix::Binary(e));
    match suffix {
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
        "Ki" => binary(10),
        "Mi" => binary(20),
        "Gi" => binary(30),
        "Ti" => binary(40),
        "Pi" => binary(50),
        "Ei" => binary(60),
        // Go parses the exponent as int64 and then truncates it to int32.
        s if s.len() > 1 && (s.starts_with('e') || s.starts_with('E')) => s[1..]
            .parse::<i64>()
            .ok()
            .map(|e| Suffix::Exponent(e as i32)),
        _ => None,
    }
}

/// Whether apimachinery would take its int64 fast path (mirrors its precision estimate).
fn takes_fast_path(scanned: &Scanned<'_>, suffix: Suffix) -> bool {
    let num_len = scanned.num.len() as i64;
    let denom_len = scanned.denom.len() as i64;
    match suffix {
        Suffix::Decimal(e) | Suffix::Exponent(e) => {
            18 - (num_len + denom_len) >= 0 && i64::from(e) - denom_len >= -9
        }
        Suffix::Binary(e) => {
            let precision = 15 - num_len - i64::from(e) * 3 / 10 - 1;
            denom_len == 0 && precision >= 0
        }
    }
}

/// `ceil(digits * 10^power_of_ten * 2^power_of_two)`, saturating at `i64::MAX`.
/// `digits` is non-empty, decimal, without leading zeros.
fn ceil_saturating(digits: &str, power_of_ten: i64, power_of_two: u32) -> i64 {
    const MAX_DIGITS: i64 = 19; // i64::MAX has 19 digits
    let len = digits.len() as i64;
    // Anything with 20 or more integer digits is above i64::MAX already.
    if len.saturating_add(power_of_ten) > MAX_DIGITS {
        return i64::MAX;
    }
    let mut mantissa: Vec<u8> = digits.bytes().map(|b| b - b'0').collect();
    for _ in 0..power_of_two {
        double(&mut mantissa);
    }
    let (integer, round_up) = if power_of_ten >= 0 {
        (mantissa.as_slice(), false)
    } else {
        let shift = usize::try_from(power_of_ten.unsigned_abs()).unwrap_or(usize::MAX);
        if shift >= mantissa.len() {
            // 0 < value < 1
            return 1;
        }
        let (integer, fraction) = mantissa.split_at(mantissa.len() - shift);
        (integer, fraction.iter().any(|&d| d != 0))
    };
    if integer.len() as i64 + power_of_ten.max(0) > MAX_DIGITS {
        return i64::MAX;
    }
    let mut value: u128 = integer.iter().fold(0, |acc, &d| acc * 10 + u128::from(d));
    for _ in 0..power_of_ten.max(0) {
        value *= 10;
    }
    value += u128::from(round_up);
    i64::try_from(value).unwrap_or(i64::MAX)
}

/// Doubles a big-endian decimal digit vector in place.
fn double(digits: &mut Vec<u8>) {
    let mut carry = 0;
    for d in digits.iter_mut().rev() {
        let x = *d * 2 + carry;
        *d = x % 10;
        carry = x / 10;
    }
    if carry > 0 {
        digits.insert(0, carry);
    }
}

/// Bytes written like `resource.NewQuantity(n, resource.BinarySI).String()`.
///
/// Values strictly between -1024 and 1024 use the decimal form (`1000` is `1k`); larger values
/// use the largest power-of-1024 suffix that divides them exactly (`5632Mi`), or no suffix.
pub fn format_binary_si(bytes: i64) -> String {
    if bytes == 0 {
        return "0".to_string();
    }
    let sign = if bytes < 0 { "-" } else { "" };
    let mut mantissa = bytes.unsigned_abs();
    if mantissa < 1024 {
        let mut exponent = 0;
        while mantissa >= 10 && mantissa.is_multiple_of(10) {
            mantissa /= 10;
            exponent += 1;
        }
        // Decimal exponents are shown in multiples of three (k, M, ...).
        while exponent % 3 != 0 {
            mantissa *= 10;
            exponent -= 1;
        }
        let suffix = if exponent == 3 { "k" } else { "" };
        return format!("{sign}{mantissa}{suffix}");
    }
    if bytes == i64::MIN {
        // Go negates in int64 and the overflow leaves nothing to divide.
        return i64::MIN.to_string();
    }
    const SUFFIXES: [&str; 7] = ["", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei"];
    let mut power = 0;
    while mantissa >= 1024 && mantissa.is_multiple_of(1024) && power + 1 < SUFFIXES.len() {
        mantissa /= 1024;
        power += 1;
    }
    format!("{sign}{mantissa}{}", SUFFIXES[power])
}

#[cfg(test)]
mod tests;
