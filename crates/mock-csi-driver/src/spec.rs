//! Parsing of the `--pool`, `--node-topology` and `--endpoint` flag values.

use std::collections::BTreeMap;
use std::path::PathBuf;

use thiserror::Error;

use quantity::{QuantityError, parse_quantity};

/// A topology segment: key/value pairs that all hold together. Sorted so output is stable.
pub type Segment = BTreeMap<String, String>;

/// The expected form of `--pool`, repeated in every error about it.
pub const POOL_FORM: &str =
    "[KIND@]SEGMENT:SIZE, e.g. fast@topology.mock.csi/node=node-1:10Gi or :1Ti";
/// The expected form of a segment (`--node-topology` and the SEGMENT of `--pool`).
pub const SEGMENT_FORM: &str = "key=value[,key=value...]";
/// The expected form of `--endpoint`.
pub const ENDPOINT_FORM: &str = "unix:///absolute/path.sock or /absolute/path.sock";

/// One storage pool from the command line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PoolSpec {
    /// Selected by the `kind` parameter; "" is the default kind.
    pub kind: String,
    /// Where volumes from this pool are accessible; empty means everywhere.
    pub segment: Segment,
    /// Total bytes.
    pub size: i64,
}

/// Why a flag value was rejected. Messages name the bad input and the expected form.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum SpecError {
    #[error(
        "segment entry {entry:?} is not key=value with a non-empty key and value (expected {SEGMENT_FORM})"
    )]
    SegmentEntry { entry: String },
    #[error("segment key {key:?} is given twice (expected {SEGMENT_FORM})")]
    DuplicateKey { key: String },
    #[error("pool {spec:?} has no :SIZE (expected {POOL_FORM})")]
    PoolNoSize { spec: String },
    #[error("pool {spec:?}: {} (expected {POOL_FORM})", size_problem(.source))]
    PoolSize { spec: String, source: QuantityError },
    #[error("pool {spec:?}: {source} (expected {POOL_FORM})")]
    PoolSegment {
        spec: String,
        source: Box<SpecError>,
    },
    #[error("endpoint {0:?} is not a unix socket path (expected {ENDPOINT_FORM})")]
    Endpoint(String),
}

/// Parses `key=value[,key=value...]`; the empty string is the empty segment.
pub fn parse_segment(input: &str) -> Result<Segment, SpecError> {
    let mut segment = Segment::new();
    if input.is_empty() {
        return Ok(segment);
    }
    for entry in input.split(',') {
        let (key, value) = entry
            .split_once('=')
            .filter(|(k, v)| !k.trim().is_empty() && !v.trim().is_empty())
            .ok_or_else(|| SpecError::SegmentEntry {
                entry: entry.to_owned(),
            })?;
        let (key, value) = (key.trim().to_owned(), value.trim().to_owned());
        if segment.contains_key(&key) {
            return Err(SpecError::DuplicateKey { key });
        }
        segment.insert(key, value);
    }
    Ok(segment)
}

/// Parses `[KIND@]SEGMENT:SIZE`.
pub fn parse_pool(input: &str) -> Result<PoolSpec, SpecError> {
    let (kind, rest) = input.split_once('@').unwrap_or(("", input));
    let (segment, size) = rest.rsplit_once(':').ok_or_else(|| SpecError::PoolNoSize {
        spec: input.to_owned(),
    })?;
    let size = parse_quantity(size).map_err(|source| SpecError::PoolSize {
        spec: input.to_owned(),
        source,
    })?;
    let segment = parse_segment(segment).map_err(|e| SpecError::PoolSegment {
        spec: input.to_owned(),
        source: Box::new(e),
    })?;
    Ok(PoolSpec {
        kind: kind.to_owned(),
        segment,
        size,
    })
}

/// Turns `unix:///p` or a bare absolute path into the socket path.
pub fn parse_endpoint(input: &str) -> Result<PathBuf, SpecError> {
    let path = input.strip_prefix("unix://").unwrap_or(input);
    if path.starts_with('/') && path.len() > 1 {
        Ok(PathBuf::from(path))
    } else {
        Err(SpecError::Endpoint(input.to_owned()))
    }
}

/// The pool used when no `--pool` is given: default kind, no topology, 1 PiB.
pub fn default_pool() -> PoolSpec {
    PoolSpec {
        kind: String::new(),
        segment: Segment::new(),
        size: 1 << 50,
    }
}

/// A size error in words for a command line (the shared parser speaks apimachinery's regex).
pub fn size_problem(e: &QuantityError) -> String {
    match e {
        QuantityError::Negative(s) => format!("{s:?} is negative"),
        _ => "the size is not a quantity such as 10Gi, 500M or 1073741824".to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rstest::rstest;

    fn seg(pairs: &[(&str, &str)]) -> Segment {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    #[rstest]
    #[case("", seg(&[]))]
    #[case("a=1", seg(&[("a", "1")]))]
    #[case("topology.mock.csi/node=node-1,zone=z", seg(&[("topology.mock.csi/node", "node-1"), ("zone", "z")]))]
    fn parses_segments(#[case] input: &str, #[case] want: Segment) {
        assert_eq!(parse_segment(input), Ok(want));
    }

    #[rstest]
    #[case("a", SpecError::SegmentEntry { entry: "a".into() })]
    #[case("a=", SpecError::SegmentEntry { entry: "a=".into() })]
    #[case("=1", SpecError::SegmentEntry { entry: "=1".into() })]
    #[case("a=1,", SpecError::SegmentEntry { entry: "".into() })]
    #[case("a=1,a=2", SpecError::DuplicateKey { key: "a".into() })]
    fn rejects_segments(#[case] input: &str, #[case] want: SpecError) {
        assert_eq!(parse_segment(input), Err(want));
    }

    #[rstest]
    #[case("topology.mock.csi/node=node-1:10Gi", "", seg(&[("topology.mock.csi/node", "node-1")]), 10 << 30)]
    #[case("fast@topology.mock.csi/node=node-2:100Gi", "fast", seg(&[("topology.mock.csi/node", "node-2")]), 100 << 30)]
    #[case(":1Ti", "", seg(&[]), 1 << 40)]
    #[case("slow@:0", "slow", seg(&[]), 0)]
    #[case("@a=b:1k", "", seg(&[("a", "b")]), 1000)]
    fn parses_pools(
        #[case] input: &str,
        #[case] kind: &str,
        #[case] segment: Segment,
        #[case] size: i64,
    ) {
        let want = PoolSpec {
            kind: kind.to_owned(),
            segment,
            size,
        };
        assert_eq!(parse_pool(input), Ok(want));
    }

    #[test]
    fn pool_errors_name_the_input_and_form() {
        let cases = [
            ("10Gi", "has no :SIZE"),
            ("a=b:ten", "is not a quantity"),
            ("a=b:-1", "is negative"),
            ("a:1Gi", "is not key=value"),
        ];
        for (input, fragment) in cases {
            let msg = parse_pool(input).expect_err(input).to_string();
            assert!(msg.contains(fragment), "{input}: {msg}");
            assert!(msg.contains(&format!("{input:?}")), "{input}: {msg}");
            assert!(msg.contains(POOL_FORM), "{input}: {msg}");
        }
    }

    #[rstest]
    #[case("unix:///tmp/csi.sock", Some("/tmp/csi.sock"))]
    #[case("/tmp/csi.sock", Some("/tmp/csi.sock"))]
    #[case("unix://relative.sock", None)]
    #[case("relative.sock", None)]
    #[case("tcp://127.0.0.1:10000", None)]
    #[case("unix:///", None)]
    fn parses_endpoints(#[case] input: &str, #[case] want: Option<&str>) {
        let got = parse_endpoint(input).ok();
        assert_eq!(got, want.map(PathBuf::from));
    }
}
