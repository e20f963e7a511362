//! `--leader-election-labels k:v,k2:v2`, parsed like csi-lib-utils' `stringMap`: every
//! comma-separated item must split on `:` into exactly two parts; the flag may repeat and the
//! pairs accumulate. Keys and values are not trimmed or validated here; the API server
//! validates them when the Lease is written.

use std::collections::BTreeMap;

/// Merges all occurrences. On error, returns the malformed item.
pub fn parse_labels<S: AsRef<str>>(values: &[S]) -> Result<BTreeMap<String, String>, String> {
    let mut labels = BTreeMap::new();
    for value in values {
        for item in value.as_ref().split(',') {
            let mut parts = item.split(':');
            match (parts.next(), parts.next(), parts.next()) {
                (Some(k), Some(v), None) => {
                    labels.insert(k.to_string(), v.to_string());
                }
                _ => return Err(item.to_string()),
            }
        }
    }
    Ok(labels)
}

#[cfg(test)]
mod tests {
    use super::*;
    use rstest::rstest;

    #[rstest]
    #[case(&["app:csi"], &[("app", "csi")])]
    #[case(&["a:1,b:2"], &[("a", "1"), ("b", "2")])]
    #[case(&["a:1", "b:2", "a:3"], &[("a", "3"), ("b", "2")])]
    #[case(&["a:"], &[("a", "")])]
    #[case(&["example.com/team:storage"], &[("example.com/team", "storage")])]
    fn parses(#[case] values: &[&str], #[case] want: &[(&str, &str)]) {
        let want: BTreeMap<String, String> = want
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        assert_eq!(parse_labels(values), Ok(want));
    }

    #[rstest]
    #[case(&["a"], "a")]
    #[case(&[""], "")]
    #[case(&["a:1,"], "")]
    #[case(&["a:1:2"], "a:1:2")]
    #[case(&["a:1", "b=2"], "b=2")]
    fn rejects(#[case] values: &[&str], #[case] bad: &str) {
        assert_eq!(parse_labels(values), Err(bad.to_string()));
    }

    proptest::proptest! {
        /// Whatever is given, the parser answers without panicking, and an error names an
        /// item that really was in the input.
        #[test]
        fn never_panics(values in proptest::collection::vec("\\PC{0,20}", 0..4)) {
            if let Err(bad) = parse_labels(&values) {
                proptest::prop_assert!(values.iter().any(|v| v.split(',').any(|i| i == bad)));
            }
        }

        /// Well-formed pairs come back as written; a later occurrence of a key wins.
        #[test]
        fn pairs_round_trip(pairs in proptest::collection::vec(("[a-z./-]{1,10}", "[a-z0-9-]{0,8}"), 1..6)) {
            let flag = pairs.iter().map(|(k, v)| format!("{k}:{v}")).collect::<Vec<_>>().join(",");
            let want: BTreeMap<String, String> = pairs.iter().cloned().collect();
            proptest::prop_assert_eq!(parse_labels(&[flag]), Ok(want));
        }
    }
}
