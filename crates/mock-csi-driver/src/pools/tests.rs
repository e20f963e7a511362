use super::*;
use crate::spec::parse_pool;
use rstest::rstest;

const GI: i64 = 1 << 30;

fn seg(s: &str) -> Segment {
    crate::spec::parse_segment(s).expect("test segment")
}

fn pools(specs: &[&str]) -> Pools {
    Pools::new(
        specs
            .iter()
            .map(|s| parse_pool(s).expect("test pool"))
            .collect(),
    )
}

fn req(name: &str, required: i64) -> CreateRequest {
    CreateRequest {
        name: name.to_owned(),
        required_bytes: required,
        ..CreateRequest::default()
    }
}

/// node-1 has 10Gi, node-2 has 20Gi, both in zone a; node-3 (zone b) has 5Gi; "fast" on node-2.
fn three_nodes() -> Pools {
    pools(&[
        "n=node-1,zone=a:10Gi",
        "n=node-2,zone=a:20Gi",
        "n=node-3,zone=b:5Gi",
        "fast@n=node-2,zone=a:100Gi",
    ])
}

#[rstest]
#[case("", "", true)]
#[case("a=1,b=2", "", true)]
#[case("a=1,b=2", "a=1", true)]
#[case("a=1,b=2", "a=1,b=2", true)]
#[case("a=1,b=2", "a=2", false)]
#[case("a=1", "a=1,b=2", false)]
#[case("", "a=1", false)]
fn containment(#[case] segment: &str, #[case] term: &str, #[case] want: bool) {
    assert_eq!(segment_contains(&seg(segment), &seg(term)), want);
}

#[rstest]
#[case(0, 0, Ok(GI))]
#[case(5, 0, Ok(5))]
#[case(0, 100, Ok(100))]
#[case(0, 2 * GI, Ok(GI))]
#[case(10, 10, Ok(10))]
#[case(10, 20, Ok(10))]
#[case(20, 10, Err(PoolError::InvalidRange { required: 20, limit: 10 }))]
#[case(-1, 0, Err(PoolError::InvalidRange { required: -1, limit: 0 }))]
#[case(0, -1, Err(PoolError::InvalidRange { required: 0, limit: -1 }))]
fn sizes(#[case] required: i64, #[case] limit: i64, #[case] want: Result<i64, PoolError>) {
    assert_eq!(volume_size(required, limit), want);
}

/// (preferred, requisite, size) -> chosen pool index or error.
#[rstest]
#[case(&[], &[], 1, Ok(0))]
#[case(&[], &[], 11 * GI, Ok(1))] // first pool with room
#[case(&["n=node-2"], &[], 1, Ok(1))]
#[case(&["n=node-3", "n=node-1"], &[], 1, Ok(2))] // preferred order wins
#[case(&["n=node-3", "n=node-1"], &[], 6 * GI, Ok(0))] // next preferred when full
#[case(&["n=node-3"], &["zone=a"], 6 * GI, Ok(0))] // then requisite
#[case(&[], &["zone=a"], 15 * GI, Ok(1))]
#[case(&[], &["zone=b"], 6 * GI, Err(PoolError::Exhausted { size: 6 * GI, largest_free: 5 * GI }))]
#[case(&["n=node-1"], &["zone=a"], 30 * GI, Err(PoolError::Exhausted { size: 30 * GI, largest_free: 20 * GI }))]
#[case(&[], &["zone=c"], 1, Err(PoolError::NoMatchingPool { kind: String::new() }))]
#[case(&[], &["n=node-1,zone=b"], 1, Err(PoolError::NoMatchingPool { kind: String::new() }))]
fn placement(
    #[case] preferred: &[&str],
    #[case] requisite: &[&str],
    #[case] size: i64,
    #[case] want: Result<usize, PoolError>,
) {
    let mut p = three_nodes();
    let r = CreateRequest {
        preferred: preferred.iter().map(|s| seg(s)).collect(),
        requisite: requisite.iter().map(|s| seg(s)).collect(),
        ..req("v", size)
    };
    let got = p.create(&r).map(|(v, _)| v.pool);
    assert_eq!(got, want);
}

#[test]
fn created_volume_carries_pool_segment_and_kind() {
    let mut p = three_nodes();
    let r = CreateRequest {
        kind: "fast".into(),
        ..req("v", 50 * GI)
    };
    let (v, existed) = p.create(&r).unwrap();
    assert!(!existed);
    assert_eq!(v.pool, 3);
    assert_eq!(v.segment, seg("n=node-2,zone=a"));
    assert_eq!(v.capacity, 50 * GI);
    assert_ne!(v.id, v.name);
    assert_eq!(v.context()["kind"], "fast");
    assert_eq!(p.capacity("fast", None), 50 * GI);
}

#[test]
fn unknown_kind_is_named() {
    let mut p = three_nodes();
    let r = CreateRequest {
        kind: "slow".into(),
        ..req("v", 1)
    };
    assert_eq!(
        p.create(&r),
        Err(PoolError::UnknownKind {
            kind: "slow".into()
        })
    );
}

#[test]
fn exhaustion_then_room_after_delete() {
    let mut p = pools(&["n=1:10Gi"]);
    let (a, _) = p.create(&req("a", 6 * GI)).unwrap();
    assert_eq!(
        p.create(&req("b", 6 * GI)),
        Err(PoolError::Exhausted {
            size: 6 * GI,
            largest_free: 4 * GI
        })
    );
    assert_eq!(p.delete(&a.id).map(|v| v.name), Some("a".to_owned()));
    assert_eq!(p.delete(&a.id), None);
    assert!(p.get(&a.id).is_none());
    assert_eq!(p.capacity("", None), 10 * GI);
    assert!(p.create(&req("b", 6 * GI)).is_ok());
}

#[test]
fn overcommit_places_beyond_free_space_and_reads_zero_free() {
    let mut p = pools(&["n=1:10Gi", "n=2:10Gi"]).with_overcommit(true);
    let r = CreateRequest {
        requisite: vec![seg("n=1")],
        ..req("big", 30 * GI)
    };
    let (v, _) = p.create(&r).unwrap();
    assert_eq!((v.pool, v.capacity), (0, 30 * GI));
    assert_eq!(p.capacity("", Some(&seg("n=1"))), 0);
    assert_eq!(p.capacity("", Some(&seg("n=2"))), 10 * GI);
    p.delete(&v.id).unwrap();
    assert_eq!(p.capacity("", Some(&seg("n=1"))), 10 * GI);
}

#[test]
fn idempotent_by_name() {
    let mut p = pools(&[":10Gi"]);
    let (first, existed) = p.create(&req("a", 2 * GI)).unwrap();
    assert!(!existed);
    // Same name, compatible range: same volume, no extra space used.
    for (required, limit) in [(2 * GI, 0), (GI, 0), (0, 0), (GI, 3 * GI)] {
        let r = CreateRequest {
            limit_bytes: limit,
            ..req("a", required)
        };
        let (again, existed) = p.create(&r).unwrap();
        assert!(existed);
        assert_eq!(again.id, first.id);
    }
    assert_eq!(p.capacity("", None), 8 * GI);
    // Incompatible: larger required, smaller limit, other kind.
    for (required, limit) in [(3 * GI, 0), (0, GI)] {
        let r = CreateRequest {
            limit_bytes: limit,
            ..req("a", required)
        };
        assert!(matches!(p.create(&r), Err(PoolError::AlreadyExists { .. })));
    }
}

#[test]
fn clones_need_their_source_and_keep_it() {
    let mut p = pools(&[":10Gi"]);
    let (src, _) = p.create(&req("src", GI)).unwrap();
    let clone = |name: &str, source: &str| CreateRequest {
        source: Some(Source::Volume(source.to_owned())),
        ..req(name, GI)
    };
    assert_eq!(
        p.create(&clone("c", "nope")),
        Err(PoolError::SourceNotFound("nope".into()))
    );
    let (c, existed) = p.create(&clone("c", &src.id)).unwrap();
    assert!(!existed);
    assert_eq!(c.source, Some(Source::Volume(src.id.clone())));
    assert_eq!(p.capacity("", None), 8 * GI);
    assert!(p.create(&clone("c", &src.id)).unwrap().1);
    assert_eq!(
        p.create(&req("c", GI)),
        Err(PoolError::SourceMismatch {
            name: "c".into(),
            existing_source: Some(Source::Volume(src.id.clone())),
            asked_source: None,
        })
    );
}

/// GetCapacity: (kind, segment or None) -> free bytes, with 3Gi used on node-2.
#[rstest]
#[case("", None, 32 * GI)]
#[case("", Some("zone=a"), 27 * GI)]
#[case("", Some("n=node-2"), 17 * GI)]
#[case("", Some("n=node-2,zone=a"), 17 * GI)]
#[case("", Some("zone=b"), 5 * GI)]
#[case("", Some("zone=c"), 0)]
#[case("", Some(""), 32 * GI)]
#[case("fast", Some("n=node-2"), 100 * GI)]
#[case("slow", None, 0)]
fn capacity_sums(#[case] kind: &str, #[case] segment: Option<&str>, #[case] want: i64) {
    let mut p = three_nodes();
    let r = CreateRequest {
        preferred: vec![seg("n=node-2")],
        ..req("v", 3 * GI)
    };
    p.create(&r).unwrap();
    assert_eq!(p.capacity(kind, segment.map(seg).as_ref()), want);
}

#[test]
fn capacity_never_negative_and_saturates() {
    let p = pools(&[":0", &format!(":{}", i64::MAX), &format!(":{}", i64::MAX)]);
    assert_eq!(p.capacity("", None), i64::MAX);
    assert_eq!(pools(&[":0"]).capacity("", None), 0);
}

fn names(page: &[&Volume]) -> Vec<String> {
    page.iter().map(|v| v.name.clone()).collect()
}

#[test]
fn pagination_survives_deletes_and_sees_new_volumes() {
    let mut p = pools(&[":1Ti"]);
    let ids: Vec<String> = ["a", "b", "c", "d"]
        .iter()
        .map(|n| p.create(&req(n, 1)).unwrap().0.id)
        .collect();

    let (page, token) = p.list(2, "").unwrap();
    assert_eq!(names(&page), ["a", "b"]);
    let token = token.expect("more pages");

    // The last volume of the page goes away and a new one appears before the next page.
    p.delete(&ids[1]);
    p.create(&req("e", 1)).unwrap();
    let (page, next) = p.list(2, &token).unwrap();
    assert_eq!(names(&page), ["c", "d"]);
    let (page, next) = p.list(2, &next.expect("e remains")).unwrap();
    assert_eq!(names(&page), ["e"]);
    assert_eq!(next, None);

    let (all, next) = p.list(0, "").unwrap();
    assert_eq!(names(&all), ["a", "c", "d", "e"]);
    assert_eq!(next, None);
}

#[rstest]
#[case(0, "", Ok(0))]
#[case(5, "", Ok(0))]
#[case(1, "0", Ok(0))]
#[case(0, "invalid-token", Err(PoolError::InvalidToken("invalid-token".into())))]
#[case(0, "-1", Err(PoolError::InvalidToken("-1".into())))]
#[case(0, "99", Err(PoolError::InvalidToken("99".into())))]
#[case(-1, "", Err(PoolError::NegativeMaxEntries(-1)))]
fn list_arguments(#[case] max: i32, #[case] token: &str, #[case] want: Result<usize, PoolError>) {
    let p = pools(&[":1Ti"]);
    assert_eq!(p.list(max, token).map(|(page, _)| page.len()), want);
}

#[test]
fn modify_merges_parameters_and_rejects_unknown() {
    let mut p = pools(&[":1Ti"]);
    let (v, _) = p.create(&req("a", 1)).unwrap();
    let params = BTreeMap::from([("iops".to_owned(), "100".to_owned())]);
    let got = p.modify(&v.id, params.clone()).unwrap();
    assert_eq!(got.mutable_parameters, params);
    assert_eq!(
        p.modify("nope", params),
        Err(PoolError::NotFound("nope".into()))
    );
}

#[test]
fn topology_is_advertised_only_with_segments() {
    assert!(three_nodes().has_topology());
    assert!(!pools(&[":1Ti", "fast@:1Gi"]).has_topology());
}

#[test]
fn volume_ids_follow_the_format() {
    let segment: Segment = [(
        "topology.gke.io/zone".to_string(),
        "europe-west1-b".to_string(),
    )]
    .into_iter()
    .collect();
    let cases = [
        (None, "mock-vol-7"),
        (Some("vol-{seq}"), "vol-7"),
        (
            Some("projects/p/zones/{segment}/disks/{name}"),
            "projects/p/zones/europe-west1-b/disks/pvc-1",
        ),
    ];
    for (format, want) in cases {
        assert_eq!(volume_id(format, 7, "pvc-1", &segment), want, "{format:?}");
    }
}
