use super::*;

fn ts(s: &str) -> Timestamp {
    s.parse().expect("test timestamp")
}

const T0: &str = "2026-01-01T00:00:00Z";
const WALL: &str = "2026-01-01T00:01:00Z";

fn held_by(holder: &str, secs: i32, transitions: i32) -> LeaseRecord {
    LeaseRecord {
        holder_identity: holder.into(),
        lease_duration_seconds: secs,
        acquire_time: Some(ts(T0)),
        renew_time: Some(ts(T0)),
        lease_transitions: transitions,
        preferred_holder: None,
        strategy: None,
    }
}

fn mine(acquire: &str, transitions: i32) -> LeaseRecord {
    LeaseRecord {
        holder_identity: "me".into(),
        lease_duration_seconds: 15,
        acquire_time: Some(ts(acquire)),
        renew_time: Some(ts(WALL)),
        lease_transitions: transitions,
        preferred_holder: None,
        strategy: None,
    }
}

#[test]
fn decisions() {
    let base = Instant::now();
    let secs = |s: u64| base + Duration::from_secs(s);
    let now_at = |s: u64| Now {
        instant: secs(s),
        wall: ts(WALL),
    };
    // (what we read, observed_at offset, now offset, expected)
    let table: Vec<(&str, Option<LeaseRecord>, u64, u64, Decision)> = vec![
        (
            "no lease: create",
            None,
            0,
            0,
            Decision::Create(mine(WALL, 0)),
        ),
        (
            "other holder, fresh: wait",
            Some(held_by("other", 15, 2)),
            0,
            14,
            Decision::Wait {
                holder: "other".into(),
                expires_at: secs(15),
            },
        ),
        (
            "other holder, exactly at expiry: take over (validity is strict)",
            Some(held_by("other", 15, 2)),
            0,
            15,
            Decision::TakeOver(mine(WALL, 3)),
        ),
        (
            "other holder, expired by our clock: take over, transitions + 1",
            Some(held_by("other", 15, 2)),
            5,
            30,
            Decision::TakeOver(mine(WALL, 3)),
        ),
        (
            "expiry counts from when WE observed it, not its renewTime",
            Some(held_by("other", 15, 2)),
            100,
            110,
            Decision::Wait {
                holder: "other".into(),
                expires_at: secs(115),
            },
        ),
        (
            "we hold it: renew, keep acquire time and transitions",
            Some(held_by("me", 15, 4)),
            0,
            3,
            Decision::Renew(mine(T0, 4)),
        ),
        (
            "we hold it but it lapsed locally: still renew (nobody wrote since)",
            Some(held_by("me", 15, 4)),
            0,
            100,
            Decision::Renew(mine(T0, 4)),
        ),
        (
            "released lease (empty holder): take over at once",
            Some(LeaseRecord {
                holder_identity: String::new(),
                ..held_by("", 1, 6)
            }),
            0,
            0,
            Decision::TakeOver(mine(WALL, 7)),
        ),
        (
            "empty spec: take over, transitions 0 + 1",
            Some(LeaseRecord::default()),
            0,
            0,
            Decision::TakeOver(mine(WALL, 1)),
        ),
        (
            "holder without duration: expired on sight",
            Some(LeaseRecord {
                holder_identity: "other".into(),
                ..LeaseRecord::default()
            }),
            0,
            0,
            Decision::TakeOver(mine(WALL, 1)),
        ),
        (
            "negative duration: expired on sight",
            Some(held_by("other", -30, 1)),
            0,
            0,
            Decision::TakeOver(mine(WALL, 2)),
        ),
        (
            "transitions at i32::MAX saturate",
            Some(held_by("other", 15, i32::MAX)),
            0,
            20,
            Decision::TakeOver(mine(WALL, i32::MAX)),
        ),
        (
            "we hold it without acquireTime: keep it absent",
            Some(LeaseRecord {
                acquire_time: None,
                ..held_by("me", 15, 0)
            }),
            0,
            1,
            Decision::Renew(LeaseRecord {
                acquire_time: None,
                ..mine(WALL, 0)
            }),
        ),
    ];
    for (name, current, observed, now, want) in table {
        let got = decide(current.as_ref(), secs(observed), "me", now_at(now), 15);
        assert_eq!(got, want, "{name}");
    }
}

#[test]
fn new_records_use_our_lease_duration_and_drop_coordination_fields() {
    let base = Instant::now();
    let current = LeaseRecord {
        preferred_holder: Some("x".into()),
        strategy: Some("OldestEmulationVersion".into()),
        ..held_by("me", 60, 0)
    };
    let now = Now {
        instant: base,
        wall: ts(WALL),
    };
    let Decision::Renew(rec) = decide(Some(&current), base, "me", now, 15) else {
        panic!("expected a renewal");
    };
    assert_eq!(rec.lease_duration_seconds, 15);
    assert_eq!(rec.preferred_holder, None);
    assert_eq!(rec.strategy, None);
}

#[test]
fn fast_path() {
    let base = Instant::now();
    let at = |s: u64| base + Duration::from_secs(s);
    let table = [
        ("ours and valid", held_by("me", 15, 0), 10, true),
        ("ours but lapsed", held_by("me", 15, 0), 15, false),
        ("someone else's", held_by("other", 15, 0), 1, false),
        ("released", held_by("", 1, 0), 0, false),
    ];
    for (name, rec, now, want) in table {
        assert_eq!(
            may_renew_without_reading(&rec, base, "me", at(now)),
            want,
            "{name}"
        );
    }
}

#[test]
fn release() {
    let now = ts(WALL);
    let table = [
        (
            "we hold it",
            held_by("me", 15, 5),
            Some(LeaseRecord {
                holder_identity: String::new(),
                lease_duration_seconds: 1,
                acquire_time: Some(now),
                renew_time: Some(now),
                lease_transitions: 5,
                preferred_holder: None,
                strategy: None,
            }),
        ),
        ("someone else holds it", held_by("other", 15, 5), None),
        ("already released", held_by("", 1, 5), None),
    ];
    for (name, observed, want) in table {
        assert_eq!(release_record(&observed, "me", now), want, "{name}");
    }
}

#[test]
fn health() {
    let base = Instant::now();
    let lease = Duration::from_secs(15);
    let tol = Duration::from_secs(20);
    let table = [
        ("standby, ancient observation", false, 1000, true),
        ("leader, just renewed", true, 0, true),
        ("leader, exactly lease + tolerance", true, 35, true),
        ("leader, past lease + tolerance", true, 36, false),
    ];
    for (name, leader, elapsed, healthy) in table {
        let now = base + Duration::from_secs(elapsed);
        let got = health_verdict(leader, base, now, lease, tol, "ns/lock");
        assert_eq!(got.is_ok(), healthy, "{name}: {got:?}");
    }
    assert_eq!(
        health_verdict(true, base, base + Duration::from_secs(99), lease, tol, "x"),
        Err("failed election to renew leadership on lease x".to_string())
    );
}

#[test]
fn jitter() {
    let p = Duration::from_secs(5);
    let table = [
        (0.0, Duration::from_secs(5)),
        (0.5, Duration::from_secs(8)),
        (0.999_999, Duration::from_micros(10_999_994)),
        (-1.0, Duration::from_secs(5)),
        (f64::NAN, Duration::from_secs(5)),
        (7.0, Duration::from_secs(11)),
    ];
    for (unit, want) in table {
        let got = jittered(p, 1.2, unit);
        let diff = got.abs_diff(want);
        assert!(
            diff < Duration::from_micros(2),
            "unit {unit}: got {got:?}, want {want:?}"
        );
    }
}
