//! How much capacity work a provisioner got done, read from the driver's call log alone, so
//! measuring it costs the provisioner nothing (scenario 5).

use std::collections::HashSet;

use jiff::{SignedDuration, Timestamp};

use super::calllog::Call;

/// For each whole `window` from `from` up to `to`: the share (%) of the `total` objects whose
/// GetCapacity ran at least once in it. With a poll every `window`, 100 means every object was
/// refreshed in every interval.
pub fn coverage(
    calls: &[Call],
    from: Timestamp,
    to: Timestamp,
    window: SignedDuration,
    total: usize,
) -> Vec<f64> {
    let mut out = Vec::new();
    if total == 0 || window <= SignedDuration::ZERO {
        return out;
    }
    let mut start = from;
    while let Ok(end) = start.checked_add(window) {
        if end > to {
            break;
        }
        let seen: HashSet<&str> = calls
            .iter()
            .filter(|c| c.start >= start && c.start < end)
            .filter_map(|c| c.capacity_key.as_deref())
            .collect();
        out.push(100.0 * seen.len() as f64 / total as f64);
        start = end;
    }
    out
}

/// GetCapacity calls in `[from, to)` per second.
pub fn rate(calls: &[Call], from: Timestamp, to: Timestamp) -> f64 {
    let secs = to.duration_since(from).as_secs_f64();
    if secs <= 0.0 {
        return f64::NAN;
    }
    let n = calls
        .iter()
        .filter(|c| c.capacity_key.is_some() && c.start >= from && c.start < to)
        .count();
    n as f64 / secs
}

/// `(seconds since t0, GetCapacity calls in that second)` for a plot, one point per second
/// from 0 to the last call (seconds without calls are 0).
pub fn per_second(calls: &[Call], t0: Timestamp) -> Vec<(f64, f64)> {
    let secs: Vec<usize> = calls
        .iter()
        .filter(|c| c.capacity_key.is_some())
        .filter_map(|c| {
            let s = c.start.duration_since(t0).as_secs_f64();
            (s >= 0.0).then_some(s as usize)
        })
        .collect();
    let Some(&last) = secs.iter().max() else {
        return Vec::new();
    };
    let mut bins = vec![0.0; last + 1];
    for s in secs {
        bins[s] += 1.0;
    }
    bins.into_iter()
        .enumerate()
        .map(|(i, n)| (i as f64, n))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(ms: i64) -> Timestamp {
        Timestamp::UNIX_EPOCH
            .checked_add(SignedDuration::from_millis(ms))
            .unwrap()
    }

    fn get(ms: i64, key: &str) -> Call {
        Call {
            method: "GetCapacity".into(),
            start: at(ms),
            duration_ms: 0,
            error: None,
            name: None,
            volume_id: None,
            capacity_key: Some(key.into()),
        }
    }

    fn create(ms: i64) -> Call {
        Call {
            method: "CreateVolume".into(),
            start: at(ms),
            duration_ms: 1,
            error: None,
            name: Some("pvc-1".into()),
            volume_id: None,
            capacity_key: None,
        }
    }

    #[test]
    fn coverage_counts_distinct_objects_per_whole_window() {
        let calls = [
            // Window 1 (0..10 s): a twice, b once; c never.
            get(100, "a"),
            get(200, "a"),
            get(9_999, "b"),
            create(5_000),
            // Window 2 (10..20 s): all three.
            get(10_000, "a"),
            get(11_000, "b"),
            get(19_000, "c"),
            // After the last whole window: ignored.
            get(25_000, "a"),
        ];
        let got = coverage(&calls, at(0), at(25_000), SignedDuration::from_secs(10), 3);
        assert_eq!(got.len(), 2);
        assert!((got[0] - 200.0 / 3.0).abs() < 1e-9, "{got:?}");
        assert_eq!(got[1], 100.0);
        assert!(coverage(&calls, at(0), at(5_000), SignedDuration::from_secs(10), 3).is_empty());
        assert!(coverage(&calls, at(0), at(25_000), SignedDuration::from_secs(10), 0).is_empty());
    }

    #[test]
    fn rate_counts_only_getcapacity_in_the_range() {
        let calls = [get(0, "a"), get(500, "b"), create(600), get(2_000, "a")];
        assert_eq!(rate(&calls, at(0), at(2_000)), 1.0);
        assert!(rate(&calls, at(1_000), at(1_000)).is_nan());
    }

    #[test]
    fn per_second_bins_from_t0() {
        let calls = [get(100, "a"), get(900, "b"), get(2_500, "a"), create(3_000)];
        assert_eq!(
            per_second(&calls, at(0)),
            vec![(0.0, 2.0), (1.0, 0.0), (2.0, 1.0)]
        );
        // Calls before t0 are not plotted.
        assert_eq!(per_second(&calls, at(1_000)), vec![(0.0, 0.0), (1.0, 1.0)]);
        assert!(per_second(&[], at(0)).is_empty());
    }
}
