use super::*;
use rstest::rstest;

fn action(delay_ms: u64, error: Option<(Code, &str)>) -> Option<FaultAction> {
    Some(FaultAction {
        delay: Duration::from_millis(delay_ms),
        error: error.map(|(c, m)| (c, m.to_owned())),
        reply: None,
    })
}

fn params(pairs: &[(&str, &str)]) -> HashMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

#[rstest]
#[case("", "CreateVolume", None)]
#[case("  \n", "CreateVolume", None)]
#[case("{}", "CreateVolume", None)]
#[case(r#"{"CreateVolume": {"code": "Unavailable", "message": "down"}}"#, "CreateVolume",
       action(0, Some((Code::Unavailable, "down"))))]
#[case(
    r#"{"CreateVolume": {"code": "Unavailable", "message": "down"}}"#,
    "GetCapacity",
    None
)]
#[case(r#"{"GetCapacity": {"code": "RESOURCE_EXHAUSTED"}}"#, "GetCapacity",
       action(0, Some((Code::ResourceExhausted, "injected fault for GetCapacity"))))]
#[case(r#"{"Probe": {"delay_ms": 250}}"#, "Probe", action(250, None))]
#[case(
    r#"{"Probe": {"delay_ms": 5, "code": "OK"}}"#,
    "Probe",
    action(5, None)
)]
#[case(r#"{"Probe": {"times": 0, "code": "Internal"}}"#, "Probe", None)]
fn first_call(#[case] text: &str, #[case] method: &str, #[case] want: Option<FaultAction>) {
    let mut state = parse_faults(text).expect("valid faults file");
    assert_eq!(state.next(method, None), want);
}

#[test]
fn times_limits_the_next_calls() {
    let mut state = parse_faults(r#"{"DeleteVolume": {"code": "Aborted", "times": 2}}"#).unwrap();
    let hit = action(0, Some((Code::Aborted, "injected fault for DeleteVolume")));
    assert_eq!(state.next("DeleteVolume", None), hit);
    assert_eq!(state.next("CreateVolume", None), None);
    assert_eq!(state.next("DeleteVolume", None), hit);
    assert_eq!(state.next("DeleteVolume", None), None);
    assert_eq!(state.next("DeleteVolume", None), None);
}

#[test]
fn without_times_every_call_fails() {
    let mut state = parse_faults(r#"{"Probe": {"code": "Internal"}}"#).unwrap();
    for _ in 0..5 {
        assert!(state.next("Probe", None).is_some());
    }
}

#[rstest]
#[case("[1]", "not valid JSON")]
#[case("{", "not valid JSON")]
#[case(r#"{"Probe": {"cod": "Internal"}}"#, "not valid JSON")]
#[case(r#"{"Probe": {"delay_ms": -1}}"#, "not valid JSON")]
#[case(r#"{"CreateVolumes": {}}"#, "unknown method \"CreateVolumes\"")]
#[case(
    r#"{"Probe": {"code": "Broken"}}"#,
    "unknown code \"Broken\" for Probe"
)]
#[case(r#"{"Probe": [{"cod": "Internal"}]}"#, "not valid JSON")]
#[case(r#"{"CreateVolume": {"reply": {"volume_idd": ""}}}"#, "not valid JSON")]
#[case(
    r#"{"CreateVolume": {"reply": {"available_capacity": -1}}}"#,
    "rewrites \"available_capacity\" of CreateVolume's reply"
)]
#[case(
    r#"{"DeleteVolume": {"reply": {"volume_id": "x"}}}"#,
    "rewrites \"volume_id\" of DeleteVolume's reply"
)]
#[case(
    r#"{"CreateVolume": {"code": "Internal", "reply": {"volume_id": ""}}}"#,
    "both fails CreateVolume (code) and rewrites its reply"
)]
fn rejects(#[case] text: &str, #[case] fragment: &str) {
    let msg = parse_faults(text).expect_err(text).to_string();
    assert!(msg.contains(fragment), "{text}: {msg}");
}

#[test]
fn file_is_reread_when_it_changes_and_counters_reset() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("faults.json");
    let mut file = FaultFile::new(Some(path.clone()));
    assert_eq!(
        file.next("Probe", None),
        None,
        "missing file means no faults"
    );

    let once = r#"{"Probe": {"code": "Internal", "times": 1}}"#;
    std::fs::write(&path, once).unwrap();
    assert!(file.next("Probe", None).is_some());
    assert_eq!(file.next("Probe", None), None, "times=1 used up");

    // Rewriting through a new inode (rename) is a new version even with equal size and mtime.
    let tmp = dir.path().join("faults.tmp");
    std::fs::write(&tmp, once).unwrap();
    std::fs::rename(&tmp, &path).unwrap();
    assert!(
        file.next("Probe", None).is_some(),
        "counters reset on change"
    );

    std::fs::write(&path, r#"{"Probe": {"code": "Unavailable"}}"#).unwrap();
    let unavailable = action(0, Some((Code::Unavailable, "injected fault for Probe")));
    assert_eq!(file.next("Probe", None), unavailable);

    std::fs::write(&path, "{ half-written").unwrap();
    assert_eq!(
        file.next("Probe", None),
        unavailable,
        "broken file keeps previous faults"
    );

    std::fs::remove_file(&path).unwrap();
    assert_eq!(
        file.next("Probe", None),
        None,
        "removed file means no faults"
    );
}

#[test]
fn no_path_means_no_faults() {
    assert_eq!(FaultFile::new(None).next("CreateVolume", None), None);
}

#[test]
fn a_list_of_faults_picks_by_parameters_each_with_its_own_times() {
    let text = r#"{"CreateVolume": [
        {"match_parameters": {"case": "empty-id"}, "reply": {"volume_id": ""}, "times": 1},
        {"match_parameters": {"case": "small"}, "reply": {"capacity_bytes": 1}},
        {"code": "Unavailable"}
    ]}"#;
    let mut state = parse_faults(text).unwrap();
    let reply = |r: Reply| {
        Some(FaultAction {
            delay: Duration::ZERO,
            error: None,
            reply: Some(r),
        })
    };
    let empty_id = Reply {
        volume_id: Some(String::new()),
        ..Reply::default()
    };
    let small = Reply {
        capacity_bytes: Some(1),
        ..Reply::default()
    };
    let unavailable = action(
        0,
        Some((Code::Unavailable, "injected fault for CreateVolume")),
    );
    let case = |c| params(&[("case", c), ("kind", "")]);
    assert_eq!(
        state.next("CreateVolume", Some(&case("empty-id"))),
        reply(empty_id)
    );
    assert_eq!(
        state.next("CreateVolume", Some(&case("empty-id"))),
        unavailable,
        "its times used up, the next matching entry applies"
    );
    assert_eq!(
        state.next("CreateVolume", Some(&case("small"))),
        reply(small.clone())
    );
    assert_eq!(
        state.next("CreateVolume", Some(&case("small"))),
        reply(small)
    );
    assert_eq!(state.next("CreateVolume", None), unavailable);
}

#[test]
fn replies_rewrite_only_what_they_name() {
    let mut volume = csi::v1::Volume {
        capacity_bytes: 10,
        volume_id: "mock-vol-1".into(),
        volume_context: params(&[("pool", "0")]),
        ..Default::default()
    };
    let reply = Reply {
        capacity_bytes: Some(-1),
        accessible_topology: Some(vec![BTreeMap::from([("zone".into(), "z9".into())])]),
        volume_context: Some(BTreeMap::from([("extra".into(), "x".into())])),
        ..Reply::default()
    };
    reply.apply_to_volume(&mut volume);
    assert_eq!(volume.volume_id, "mock-vol-1");
    assert_eq!(volume.capacity_bytes, -1);
    assert_eq!(
        volume.volume_context,
        params(&[("pool", "0"), ("extra", "x")])
    );
    assert_eq!(
        volume.accessible_topology[0].segments,
        params(&[("zone", "z9")])
    );

    let mut capacity = GetCapacityResponse {
        available_capacity: 5,
        maximum_volume_size: None,
        minimum_volume_size: None,
    };
    Reply {
        available_capacity: Some(-5),
        ..Reply::default()
    }
    .apply_to_capacity(&mut capacity);
    assert_eq!(
        (capacity.available_capacity, capacity.maximum_volume_size),
        (-5, None)
    );
}

#[test]
fn a_probability_picks_calls_by_the_dice_and_skipped_calls_fall_through() {
    let text = r#"{"CreateVolume": [
        {"code": "Unavailable", "probability": 0.25, "times": 1},
        {"code": "Internal", "probability": 0.5}]}"#;
    let mut state = parse_faults(text).unwrap();
    let unavailable = action(
        0,
        Some((Code::Unavailable, "injected fault for CreateVolume")),
    );
    let internal = action(0, Some((Code::Internal, "injected fault for CreateVolume")));
    let rolls = |r: &'static [f64]| {
        let mut it = r.iter().copied();
        move || it.next().expect("no more dice")
    };
    // 0.9 misses the first entry (and does not use up its one time), 0.3 hits the second.
    assert_eq!(
        state.next_with("CreateVolume", None, &mut rolls(&[0.9, 0.3])),
        internal
    );
    assert_eq!(
        state.next_with("CreateVolume", None, &mut rolls(&[0.6, 0.7])),
        None
    );
    assert_eq!(
        state.next_with("CreateVolume", None, &mut rolls(&[0.1])),
        unavailable
    );
    // Its one time is used: the first entry is skipped without a roll.
    assert_eq!(
        state.next_with("CreateVolume", None, &mut rolls(&[0.2])),
        internal
    );
}

#[test]
fn a_delay_range_is_drawn_per_call() {
    let mut state =
        parse_faults(r#"{"CreateVolume": {"delay_ms": 100, "delay_max_ms": 3100}}"#).unwrap();
    for (roll, want_ms) in [(0.0, 100), (0.5, 1600), (0.999, 3097)] {
        let got = state.next_with("CreateVolume", None, &mut || roll).unwrap();
        assert_eq!(got.delay.as_millis(), want_ms, "roll {roll}");
        assert_eq!(got.error, None);
    }
}

#[rstest]
#[case(r#"{"Probe": {"probability": 1.5}}"#, "probability of 1.5")]
#[case(r#"{"Probe": {"probability": -0.1}}"#, "from 0 to 1")]
#[case(
    r#"{"Probe": {"delay_ms": 10, "delay_max_ms": 5}}"#,
    "delay_max_ms below"
)]
fn bad_chances_and_ranges_are_refused(#[case] text: &str, #[case] says: &str) {
    let err = parse_faults(text).unwrap_err().to_string();
    assert!(err.contains(says), "{err}");
}
