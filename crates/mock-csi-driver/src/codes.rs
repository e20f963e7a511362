//! gRPC status codes by their Go names (`codes.Code.String()`), as used in the faults file and
//! the call log.

use tonic::Code;

const NAMES: [(Code, &str); 17] = [
    (Code::Ok, "OK"),
    (Code::Cancelled, "Canceled"),
    (Code::Unknown, "Unknown"),
    (Code::InvalidArgument, "InvalidArgument"),
    (Code::DeadlineExceeded, "DeadlineExceeded"),
    (Code::NotFound, "NotFound"),
    (Code::AlreadyExists, "AlreadyExists"),
    (Code::PermissionDenied, "PermissionDenied"),
    (Code::ResourceExhausted, "ResourceExhausted"),
    (Code::FailedPrecondition, "FailedPrecondition"),
    (Code::Aborted, "Aborted"),
    (Code::OutOfRange, "OutOfRange"),
    (Code::Unimplemented, "Unimplemented"),
    (Code::Internal, "Internal"),
    (Code::Unavailable, "Unavailable"),
    (Code::DataLoss, "DataLoss"),
    (Code::Unauthenticated, "Unauthenticated"),
];

/// The Go name of a code, e.g. `ResourceExhausted`.
pub fn code_name(code: Code) -> &'static str {
    NAMES
        .iter()
        .find(|(c, _)| *c == code)
        .map_or("Unknown", |(_, name)| name)
}

/// Parses a Go code name (`Unavailable`) or its proto enum spelling (`UNAVAILABLE`).
pub fn parse_code(name: &str) -> Option<Code> {
    NAMES.iter().find_map(|(code, go)| {
        let upper = go_to_upper_snake(go);
        (name == *go || name == upper || (*code == Code::Cancelled && name == "CANCELLED"))
            .then_some(*code)
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
        for (code, name) in NAMES {
            assert_eq!(code_name(code), name);
            assert_eq!(parse_code(name), Some(code));
        }
    }
}
