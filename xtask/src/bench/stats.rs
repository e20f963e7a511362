//! Statistics over a handful of runs: median with min–max, percentiles, paired ratios.

/// Median and range of one metric over the runs that produced it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Summary {
    pub median: f64,
    pub min: f64,
    pub max: f64,
    pub n: usize,
}

/// The finite values in ascending order (NaN and infinities are results of failed runs).
fn sorted_finite(values: &[f64]) -> Vec<f64> {
    let mut v: Vec<f64> = values.iter().copied().filter(|x| x.is_finite()).collect();
    v.sort_by(f64::total_cmp);
    v
}

/// Median (mean of the middle two for an even count), min and max of the finite values.
pub fn summarize(values: &[f64]) -> Option<Summary> {
    let v = sorted_finite(values);
    let n = v.len();
    if n == 0 {
        return None;
    }
    let median = if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    };
    Some(Summary {
        median,
        min: v[0],
        max: v[n - 1],
        n,
    })
}

/// Nearest-rank percentile (`p` in 0..=100) of the finite values.
pub fn percentile(values: &[f64], p: f64) -> Option<f64> {
    let v = sorted_finite(values);
    if v.is_empty() {
        return None;
    }
    let p = p.clamp(0.0, 100.0);
    // Nearest rank: the smallest value with at least p% of the values at or below it.
    let rank = ((p / 100.0) * v.len() as f64).ceil() as usize;
    Some(v[rank.clamp(1, v.len()) - 1])
}

/// `ours / upstream` for every run index both have, skipping a zero or missing denominator.
/// Runs are interleaved (ours and upstream one after the other), so pairing by index cancels
/// slow drifts of a shared, noisy machine.
pub fn paired_ratios(ours: &[(u32, f64)], upstream: &[(u32, f64)]) -> Vec<f64> {
    ours.iter()
        .filter_map(|(run, a)| {
            let (_, b) = upstream.iter().find(|(r, _)| r == run)?;
            // A negative value (a capacity update seen before the CreateVolume it follows)
            // over a positive one is no factor of speed: such a pair gets no ratio.
            let ratio = a / b;
            (ratio.is_finite() && *a >= 0.0 && *b > 0.0).then_some(ratio)
        })
        .collect()
}

/// Index of the run whose value is the (lower) median: the run a plot shows.
pub fn median_index(values: &[f64]) -> Option<usize> {
    let mut idx: Vec<usize> = (0..values.len())
        .filter(|&i| values[i].is_finite())
        .collect();
    if idx.is_empty() {
        return None;
    }
    idx.sort_by(|&a, &b| values[a].total_cmp(&values[b]));
    Some(idx[(idx.len() - 1) / 2])
}

/// Empirical CDF points `(value, fraction ≤ value)` of the finite values, for plots.
pub fn cdf(values: &[f64]) -> Vec<(f64, f64)> {
    let v = sorted_finite(values);
    let n = v.len() as f64;
    v.iter()
        .enumerate()
        .map(|(i, x)| (*x, (i + 1) as f64 / n))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn summaries() {
        type Want = Option<(f64, f64, f64, usize)>;
        let cases: &[(&[f64], Want)] = &[
            (&[], None),
            (&[f64::NAN], None),
            (&[3.0], Some((3.0, 3.0, 3.0, 1))),
            (&[3.0, 1.0, 2.0], Some((2.0, 1.0, 3.0, 3))),
            (&[4.0, 1.0, 2.0, 3.0], Some((2.5, 1.0, 4.0, 4))),
            (
                &[5.0, f64::NAN, 1.0, f64::INFINITY],
                Some((3.0, 1.0, 5.0, 2)),
            ),
        ];
        for (values, want) in cases {
            let got = summarize(values).map(|s| (s.median, s.min, s.max, s.n));
            assert_eq!(got, *want, "{values:?}");
        }
    }

    #[test]
    fn percentiles() {
        let hundred: Vec<f64> = (1..=100).map(f64::from).collect();
        let cases: &[(&[f64], f64, Option<f64>)] = &[
            (&[], 50.0, None),
            (&[7.0], 99.0, Some(7.0)),
            (&hundred, 50.0, Some(50.0)),
            (&hundred, 99.0, Some(99.0)),
            (&hundred, 100.0, Some(100.0)),
            (&hundred, 0.0, Some(1.0)),
            (&[10.0, 20.0, 30.0], 50.0, Some(20.0)),
            (&[10.0, 20.0, 30.0], 99.0, Some(30.0)),
        ];
        for (values, p, want) in cases {
            assert_eq!(
                percentile(values, *p),
                *want,
                "p{p} of {} values",
                values.len()
            );
        }
    }

    #[test]
    fn ratios_pair_runs_by_index() {
        let ours = [(1, 2.0), (2, 3.0), (3, 4.0)];
        let upstream = [(1, 4.0), (3, 0.0), (2, 6.0)];
        assert_eq!(paired_ratios(&ours, &upstream), vec![0.5, 0.5]);
        assert!(paired_ratios(&ours, &[]).is_empty());
        assert_eq!(paired_ratios(&[(1, 0.0)], &[(1, 2.0)]), vec![0.0]);
        assert!(paired_ratios(&[(1, -300.0)], &[(1, 90.0)]).is_empty());
    }

    #[test]
    fn median_run_is_found() {
        let cases: &[(&[f64], Option<usize>)] = &[
            (&[], None),
            (&[f64::NAN], None),
            (&[9.0], Some(0)),
            (&[9.0, 1.0, 5.0], Some(2)),
            (&[4.0, 1.0, 3.0, 2.0], Some(3)),
            (&[f64::NAN, 2.0, 1.0], Some(2)),
        ];
        for (values, want) in cases {
            assert_eq!(median_index(values), *want, "{values:?}");
        }
    }

    #[test]
    fn cdf_steps_to_one() {
        assert!(cdf(&[]).is_empty());
        assert_eq!(
            cdf(&[3.0, 1.0, f64::NAN, 2.0, 4.0]),
            vec![(1.0, 0.25), (2.0, 0.5), (3.0, 0.75), (4.0, 1.0)]
        );
    }
}
