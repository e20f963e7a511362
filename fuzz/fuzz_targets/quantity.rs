//! Quantity parsing (claims' storage requests, CSIStorageCapacity values) and formatting (PV and
//! CSIStorageCapacity quantities).
//!
//! Properties: an accepted string has the API server's quantity syntax and stands for a
//! non-negative byte count; every non-negative count formats (both through `quantity` and
//! `capacity`) to a canonical quantity that parses back to the same bytes.
#![no_main]

use arbitrary::Arbitrary;
use csi_provisioner_fuzz::assert_canonical_quantity;
use libfuzzer_sys::fuzz_target;

#[derive(Arbitrary, Debug)]
struct Input<'a> {
    text: &'a str,
    bytes: i64,
}

/// `^[+-]?[0-9.]*[eEinumkKMGTP]*[-+]?[0-9]*$`: apimachinery's scanner. (Its error message
/// quotes a stricter pattern, but its scanner takes a lone sign as zero, and so does the API
/// server.)
fn has_quantity_syntax(s: &str) -> bool {
    let rest = s.strip_prefix(['+', '-']).unwrap_or(s);
    let number_end = rest
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(rest.len());
    let suffix = &rest[number_end..];
    let suffix = suffix.trim_start_matches(|c: char| "eEinumkKMGTP".contains(c));
    let suffix = suffix.strip_prefix(['+', '-']).unwrap_or(suffix);
    suffix.bytes().all(|b| b.is_ascii_digit())
}

fn check_formatting(bytes: i64) {
    let binary = quantity::format_binary_si(bytes);
    assert_canonical_quantity(&binary, bytes);
    assert_eq!(capacity::published::format_bytes(bytes), binary);
}

fuzz_target!(|input: Input<'_>| {
    if let Ok(bytes) = quantity::parse_quantity(input.text) {
        assert!(bytes >= 0, "{:?} parsed to negative {bytes}", input.text);
        assert!(
            has_quantity_syntax(input.text),
            "{:?} accepted but is not a quantity",
            input.text
        );
        check_formatting(bytes);
    }
    if input.bytes >= 0 {
        check_formatting(input.bytes);
    }
});
