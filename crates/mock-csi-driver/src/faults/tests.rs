use super::*;
use rstest::rstest;

fn action(delay_ms: u64, error: Option<(Code, &str)>) -> Option<FaultAction> {
    Some(FaultAction {
        delay: Duration::from_millis(delay_ms),
        error: error.map(|(c, m)| (c, m.to_owned())),
    })
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
    assert_eq!(state.next(method), want);
}

#[test]
fn times_limits_the_next_calls() {
    let mut state = parse_faults(r#"{"DeleteVolume": {"code": "Aborted", "times": 2}}"#).unwrap();
    let hit = action(0, Some((Code::Aborted, "injected fault for DeleteVolume")));
    assert_eq!(state.next("DeleteVolume"), hit);
    assert_eq!(state.next("CreateVolume"), None);
    assert_eq!(state.next("DeleteVolume"), hit);
    assert_eq!(state.next("DeleteVolume"), None);
    assert_eq!(state.next("DeleteVolume"), None);
}

#[test]
fn without_times_every_call_fails() {
    let mut state = parse_faults(r#"{"Probe": {"code": "Internal"}}"#).unwrap();
    for _ in 0..5 {
        assert!(state.next("Probe").is_some());
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
fn rejects(#[case] text: &str, #[case] fragment: &str) {
    let msg = parse_faults(text).expect_err(text).to_string();
    assert!(msg.contains(fragment), "{text}: {msg}");
}

#[test]
fn file_is_reread_when_it_changes_and_counters_reset() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("faults.json");
    let mut file = FaultFile::new(Some(path.clone()));
    assert_eq!(file.next("Probe"), None, "missing file means no faults");

    let once = r#"{"Probe": {"code": "Internal", "times": 1}}"#;
    std::fs::write(&path, once).unwrap();
    assert!(file.next("Probe").is_some());
    assert_eq!(file.next("Probe"), None, "times=1 used up");

    // Rewriting through a new inode (rename) is a new version even with equal size and mtime.
    let tmp = dir.path().join("faults.tmp");
    std::fs::write(&tmp, once).unwrap();
    std::fs::rename(&tmp, &path).unwrap();
    assert!(file.next("Probe").is_some(), "counters reset on change");

    std::fs::write(&path, r#"{"Probe": {"code": "Unavailable"}}"#).unwrap();
    let unavailable = action(0, Some((Code::Unavailable, "injected fault for Probe")));
    assert_eq!(file.next("Probe"), unavailable);

    std::fs::write(&path, "{ half-written").unwrap();
    assert_eq!(
        file.next("Probe"),
        unavailable,
        "broken file keeps previous faults"
    );

    std::fs::remove_file(&path).unwrap();
    assert_eq!(file.next("Probe"), None, "removed file means no faults");
}

#[test]
fn no_path_means_no_faults() {
    assert_eq!(FaultFile::new(None).next("CreateVolume"), None);
}
