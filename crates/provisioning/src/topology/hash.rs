//! The StatefulSet-aware claim-name hash that spreads immediate-binding volumes over topologies.

/// 32-bit FNV-1 (not FNV-1a: multiply, then xor), as Go's `hash/fnv.New32`.
pub fn fnv32(data: &[u8]) -> u32 {
    const OFFSET_BASIS: u32 = 2_166_136_261;
    const PRIME: u32 = 16_777_619;
    data.iter().fold(OFFSET_BASIS, |hash, &byte| {
        hash.wrapping_mul(PRIME) ^ u32::from(byte)
    })
}

/// `(hash, index)` for a claim name (upstream's `getPVCNameHashAndIndexOffset`).
///
/// A name ending in `-<uint32>` contributes that number as the index and only the part before
/// the dash is hashed; if that part contains a dash too, only its last segment is hashed (the
/// StatefulSet name in `<claim>-<statefulset>-<ordinal>`), so all claims of one replica land in
/// the same topology while replicas rotate.
///
/// Differs from upstream: for an empty name upstream draws a random hash; this function takes it
/// as `random_hash` so that it stays pure.
pub fn pvc_name_hash_and_index(name: &str, random_hash: u32) -> (u32, u32) {
    if name.is_empty() {
        return (random_hash, 0);
    }
    let mut hashed = name;
    let mut index = 0;
    if let Some(last_dash) = name.rfind('-')
        && let Some(ordinal) = parse_uint32(&name[last_dash + 1..])
    {
        index = ordinal;
        hashed = &name[..last_dash];
        if let Some(dash) = hashed.rfind('-') {
            hashed = &hashed[dash + 1..];
        }
    }
    (fnv32(hashed.as_bytes()), index)
}

/// Go's `strconv.ParseUint(s, 10, 32)`: ASCII digits only (no sign), must fit in 32 bits.
fn parse_uint32(s: &str) -> Option<u32> {
    if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    s.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    #[test]
    fn fnv1_reference_vectors() {
        // Published FNV-1 32-bit test vectors.
        assert_eq!(fnv32(b""), 0x811c_9dc5);
        assert_eq!(fnv32(b"a"), 0x050c_5d7e);
        assert_eq!(fnv32(b"foobar"), 0x31f0_b262);
    }

    #[test]
    fn name_parsing() {
        let h = |s: &str| fnv32(s.as_bytes());
        let cases = [
            ("testpvc", (h("testpvc"), 0)),
            ("testset-2", (h("testset"), 2)),
            ("testpvcA-testset-1", (h("testset"), 1)),
            ("data-my-app-db-007", (h("db"), 7)),
            ("claim-4294967295", (h("claim"), u32::MAX)),
            ("claim-4294967296", (h("claim-4294967296"), 0)),
            ("claim-+1", (h("claim-+1"), 0)),
            ("claim-", (h("claim-"), 0)),
            ("claim-x1", (h("claim-x1"), 0)),
            ("-5", (h(""), 5)),
            ("a--5", (h(""), 5)),
        ];
        for (name, want) in cases {
            assert_eq!(pvc_name_hash_and_index(name, 99), want, "{name}");
        }
        assert_eq!(pvc_name_hash_and_index("", 1234), (1234, 0));
    }

    // TestStatefulSetSpreading's expectations pin these residues for four sorted terms.
    #[test]
    fn statefulset_spreading_residues() {
        let (hash, _) = pvc_name_hash_and_index("testset-1", 0);
        assert_eq!(hash % 4, 3);
        let (hash, index) = pvc_name_hash_and_index("testpvc", 0);
        assert_eq!((hash.wrapping_add(index) % 3, hash % 2), (2, 0));
    }
}
