//! gRPC status codes by their Go names (`codes.Code.String()`), as used in the faults file and
//! the call log.

use tonic::Code;

/// The Go name of a code, e.g. `ResourceExhausted` (shared with the provisioner's logs).
pub use csi::status::go_code_name as code_name;

/// Every gRPC code (0 to 16).
fn all_codes() -> impl Iterator<Item = Code> {
    (0..=16).map(Code::from_i32)
}

/// Parses a Go code name (`Unavailable`) or its proto enum spelling (`UNAVAILABLE`).
pub fn parse_code(name: &str) -> Option<Code> {
    all_codes().find(|code| {
        let go = code_name(*code);
        name == go
            || name == go_to_upper_snake(go)
            || (*code == Code::Cancelled && name == "CANCELLED")
    })
}

fn go_to_upper_snake(go: &str) -> String {
    let mut out = String::with_capacity(go.len() + 4);
    for (i, c) in go.chars().enumerate() {
        if c.is_ascii_uppercase() && i > 0 && !go.starts_with("OK") {
            out.push('_');
        }
        out.push(c.to_ascii_uppercase());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use rstest::rstest;

    #[rstest]
    #[case("Unavailable", Some(Code::Unavailable))]
    #[case("UNAVAILABLE", Some(Code::Unavailable))]
    #[case("ResourceExhausted", Some(Code::ResourceExhausted))]
    #[case("RESOURCE_EXHAUSTED", Some(Code::ResourceExhausted))]
    #[case("Canceled", Some(Code::Cancelled))]
    #[case("CANCELLED", Some(Code::Cancelled))]
    #[case("OK", Some(Code::Ok))]
    #[case("unavailable", None)]
    #[case("Resource_Exhausted", None)]
    #[case("", None)]
    fn parses(#[case] name: &str, #[case] want: Option<Code>) {
        assert_eq!(parse_code(name), want);
    }

    #[test]
    fn names_round_trip() {
        for code in all_codes() {
            assert_eq!(parse_code(code_name(code)), Some(code));
        }
        assert_eq!(all_codes().count(), 17);
    }
}
