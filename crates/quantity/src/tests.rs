use super::*;
use pretty_assertions::assert_eq;
use proptest::prelude::*;
use rstest::rstest;

const GI: i64 = 1 << 30;

// TestBytesToQuantity (upstream controller_test.go) plus the decimal/binary boundaries.
#[rstest]
#[case::five_gib(5 * GI, "5Gi")]
#[case::five_and_a_half_gib(5 * GI + GI / 2, "5632Mi")]
#[case::five_point_five_six_gib(5_970_004_541, "5970004541")]
#[case::hundred_kib(102_400, "100Ki")]
#[case::zero(0, "0")]
#[case::one(1, "1")]
#[case::hundred(100, "100")]
#[case::thousand_is_decimal(1000, "1k")]
#[case::below_kib(1023, "1023")]
#[case::kib(1024, "1Ki")]
#[case::not_a_multiple(1500, "1500")]
#[case::two_thousand(2000, "2000")]
#[case::one_million(1_000_000, "1000000")]
#[case::mib(1 << 20, "1Mi")]
#[case::tib(1 << 40, "1Ti")]
#[case::pib(1 << 50, "1Pi")]
#[case::eib(1 << 60, "1Ei")]
#[case::seven_eib(7 << 60, "7Ei")]
#[case::max(i64::MAX, "9223372036854775807")]
#[case::minus_thousand(-1000, "-1k")]
#[case::minus_kib(-1024, "-1Ki")]
#[case::min(i64::MIN, "-9223372036854775808")]
fn formats_like_binary_si(#[case] bytes: i64, #[case] want: &str) {
    assert_eq!(format_binary_si(bytes), want);
}

#[rstest]
#[case::plain("1", 1)]
#[case::zero("0", 0)]
#[case::zeros("000", 0)]
#[case::negative_zero("-0", 0)]
#[case::plus("+1Ki", 1024)]
#[case::gi("1Gi", GI)]
#[case::fraction_gi("5.5Gi", 5 * GI + GI / 2)]
#[case::fraction_rounds_up("1.5", 2)]
#[case::tiny_rounds_up("0.1", 1)]
#[case::milli("100m", 1)]
#[case::milli_exact("1000m", 1)]
#[case::milli_above("1001m", 2)]
#[case::micro("1u", 1)]
#[case::nano("1500000000n", 2)]
#[case::kilo("1k", 1000)]
#[case::mega_fraction("1.5M", 1_500_000)]
#[case::giga("10G", 10_000_000_000)]
#[case::exa("1E", 1_000_000_000_000_000_000)]
#[case::exponent("1e3", 1000)]
#[case::exponent_upper("1E3", 1000)]
#[case::exponent_plus("1e+3", 1000)]
#[case::exponent_negative("1e-3", 1)]
#[case::exponent_far_below("1e-20", 1)]
#[case::exponent_fraction("1.5e1", 15)]
#[case::exponent_wraps_like_int32("1e4294967296", 1)]
#[case::leading_zeros("007Mi", 7 << 20)]
#[case::trailing_dot("1.", 1)]
#[case::trailing_dot_suffix("1.Gi", GI)]
#[case::leading_dot(".5Ki", 512)]
#[case::only_dot(".", 0)]
#[case::only_sign("-", 0)]
#[case::suffix_without_digits("Ki", 0)]
#[case::long_fraction("1.000000000000000000000001", 2)]
#[case::many_digits("123456789012345678", 123_456_789_012_345_678)]
#[case::i64_max("9223372036854775807", i64::MAX)]
#[case::above_max_saturates("9223372036854775808", i64::MAX)]
#[case::eight_eib_is_capped("8Ei", i64::MAX)]
#[case::huge_decimal_saturates("100E", i64::MAX)]
#[case::huge_exponent_saturates("1e100", i64::MAX)]
#[case::max_exactly_from_fraction("9223372036854775806.5", i64::MAX)]
fn parses_like_value(#[case] input: &str, #[case] want: i64) {
    assert_eq!(parse_quantity(input), Ok(want), "{input:?}");
}

#[rstest]
#[case::empty("", QuantityError::FormatWrong)]
#[case::letters("abc", QuantityError::FormatWrong)]
#[case::two_dots("1.2.3", QuantityError::FormatWrong)]
#[case::space_before(" 1", QuantityError::FormatWrong)]
#[case::space_after("1 ", QuantityError::FormatWrong)]
#[case::unicode("1é", QuantityError::FormatWrong)]
#[case::upper_k("1K", QuantityError::Suffix)]
#[case::lower_ki("1ki", QuantityError::Suffix)]
#[case::bare_e("1e", QuantityError::Suffix)]
#[case::digits_after_binary("1Ki5", QuantityError::Suffix)]
#[case::exponent_sign_only("1e-", QuantityError::Suffix)]
#[case::exponent_too_big("1e99999999999999999999", QuantityError::Suffix)]
#[case::pi_without_digits("Pi", QuantityError::Numeric)]
#[case::exponent_without_digits("e-10", QuantityError::Numeric)]
#[case::negative("-1", QuantityError::Negative("-1".to_string()))]
#[case::negative_fraction("-0.5Gi", QuantityError::Negative("-0.5Gi".to_string()))]
fn rejects(#[case] input: &str, #[case] want: QuantityError) {
    assert_eq!(parse_quantity(input), Err(want), "{input:?}");
}

#[test]
fn error_texts_are_apimachinerys() {
    assert_eq!(
        QuantityError::FormatWrong.to_string(),
        "quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'"
    );
    assert_eq!(
        QuantityError::Suffix.to_string(),
        "unable to parse quantity's suffix"
    );
    assert_eq!(
        QuantityError::Numeric.to_string(),
        "unable to parse numeric part of quantity"
    );
}

proptest! {
    #[test]
    fn format_parse_round_trips(n in 0..=i64::MAX) {
        let text = format_binary_si(n);
        prop_assert_eq!(parse_quantity(&text), Ok(n));
        prop_assert_eq!(format_binary_si(parse_quantity(&text).unwrap()), text);
    }

    #[test]
    fn binary_multiples_round_trip(m in 1i64..1024, power in 0u32..6) {
        let n = m << (10 * power);
        prop_assert_eq!(parse_quantity(&format_binary_si(n)), Ok(n));
    }

    #[test]
    fn parse_never_panics(s in "\\PC{0,24}") {
        let _ = parse_quantity(&s);
    }

    #[test]
    fn parse_never_panics_on_quantity_like_input(s in "[-+]?[0-9.]{0,25}[eEinumkKMGTP]{0,3}[-+]?[0-9]{0,12}") {
        let _ = parse_quantity(&s);
    }
}
