//! Wall-clock pieces for the klog header, without a time-zone database.
//!
//! klog prints local time. The upstream images are distroless without zone data, where Go falls
//! back to UTC, so in practice the sidecar logs UTC; we always print UTC.

use std::time::{SystemTime, UNIX_EPOCH};

/// Calendar fields of an instant in UTC.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Civil {
    pub year: i64,
    pub month: u32,
    pub day: u32,
    pub hour: u32,
    pub minute: u32,
    pub second: u32,
    pub micros: u32,
}

/// Splits `t` into UTC calendar fields. Instants before 1970 are supported.
pub fn civil_utc(t: SystemTime) -> Civil {
    let (secs, micros) = match t.duration_since(UNIX_EPOCH) {
        Ok(d) => (d.as_secs() as i64, d.subsec_micros()),
        Err(e) => {
            let d = e.duration();
            let mut secs = -(d.as_secs() as i64);
            let mut micros = d.subsec_micros();
            if micros > 0 {
                secs -= 1;
                micros = 1_000_000 - micros;
            }
            (secs, micros)
        }
    };
    let days = secs.div_euclid(86_400);
    let rem = secs.rem_euclid(86_400) as u32;
    let (year, month, day) = date_from_days(days);
    Civil {
        year,
        month,
        day,
        hour: rem / 3600,
        minute: rem % 3600 / 60,
        second: rem % 60,
        micros,
    }
}

/// Proleptic Gregorian date of the day `days` after 1970-01-01, computed over 400-year eras
/// (each era has exactly 146097 days), with years starting in March so leap days come last.
fn date_from_days(days: i64) -> (i64, u32, u32) {
    let shifted = days + 719_468; // days from 0000-03-01 to 1970-01-01
    let era = shifted.div_euclid(146_097);
    let day_of_era = shifted.rem_euclid(146_097);
    let year_of_era =
        (day_of_era - day_of_era / 1460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let month_index = (5 * day_of_year + 2) / 153; // 0 = March
    let day = (day_of_year - (153 * month_index + 2) / 5 + 1) as u32;
    let month = if month_index < 10 {
        month_index + 3
    } else {
        month_index - 9
    } as u32;
    let year = year_of_era + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

/// Milliseconds since the epoch as a float, like component-base's JSON `ts`.
pub fn epoch_millis(t: SystemTime) -> f64 {
    match t.duration_since(UNIX_EPOCH) {
        Ok(d) => d.as_nanos() as f64 / 1e6,
        Err(e) => -(e.duration().as_nanos() as f64) / 1e6,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rstest::rstest;
    use std::time::Duration;

    fn at(secs: i64, micros: u32) -> SystemTime {
        let base = if secs >= 0 {
            UNIX_EPOCH + Duration::from_secs(secs as u64)
        } else {
            UNIX_EPOCH - Duration::from_secs(secs.unsigned_abs())
        };
        base + Duration::from_micros(u64::from(micros))
    }

    // Reference values from `date -u -d @SECS`.
    #[rstest]
    #[case(0, (1970, 1, 1, 0, 0, 0))]
    #[case(951_782_400, (2000, 2, 29, 0, 0, 0))]
    #[case(1_700_622_420, (2023, 11, 22, 3, 7, 0))]
    #[case(4_107_542_399, (2100, 2, 28, 23, 59, 59))]
    #[case(4_107_542_400, (2100, 3, 1, 0, 0, 0))]
    #[case(-1, (1969, 12, 31, 23, 59, 59))]
    #[case(-2_208_988_800, (1900, 1, 1, 0, 0, 0))]
    fn utc_fields(#[case] secs: i64, #[case] want: (i64, u32, u32, u32, u32, u32)) {
        let c = civil_utc(at(secs, 0));
        assert_eq!((c.year, c.month, c.day, c.hour, c.minute, c.second), want);
    }

    #[test]
    fn micros_before_the_epoch_borrow_a_second() {
        let c = civil_utc(UNIX_EPOCH - Duration::from_micros(250));
        assert_eq!((c.second, c.micros), (59, 999_750));
    }

    #[test]
    fn millis_keep_the_fraction() {
        assert_eq!(
            epoch_millis(at(1_700_000_000, 123_456)),
            1_700_000_000_123.456
        );
    }
}
