//! Calendar time in UTC, the one conversion every writer of a date uses (dotnet-counters'
//! files, `/logs`' timestamps, dotnet-monitor's artifact names, default file names).

use std::time::{SystemTime, UNIX_EPOCH};

/// UTC calendar time of `t`: (year, month, day, hour, minute, second), the second rounded
/// down (before 1970 too).
pub fn civil(t: SystemTime) -> (i64, u32, u32, u32, u32, u32) {
    let secs = match t.duration_since(UNIX_EPOCH) {
        Ok(d) => d.as_secs() as i64,
        Err(e) => -(e.duration().as_secs() as i64) - i64::from(e.duration().subsec_nanos() > 0),
    };
    let days = secs.div_euclid(86_400);
    let rem = secs.rem_euclid(86_400);
    // Howard Hinnant's civil_from_days.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let y = yoe + era * 400 + i64::from(m <= 2);
    (
        y,
        m,
        d,
        (rem / 3600) as u32,
        (rem % 3600 / 60) as u32,
        (rem % 60) as u32,
    )
}

/// The dotnet-* tools' and dotnet-monitor's artifact time stamp, `yyyyMMdd_HHmmss` (UTC),
/// the one every default file and artifact name carries.
pub fn stamp(t: SystemTime) -> String {
    let (y, mo, d, h, mi, s) = civil(t);
    format!("{:04}{:02}{:02}_{:02}{:02}{:02}", y, mo, d, h, mi, s)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn civil_time_of_epochs_leap_days_and_before_1970() {
        assert_eq!(civil(UNIX_EPOCH), (1970, 1, 1, 0, 0, 0));
        assert_eq!(
            civil(UNIX_EPOCH + Duration::from_secs(951_782_400)),
            (2000, 2, 29, 0, 0, 0)
        );
        assert_eq!(
            civil(UNIX_EPOCH - Duration::from_millis(500)),
            (1969, 12, 31, 23, 59, 59)
        );
    }

    #[test]
    fn artifact_stamps_are_zero_padded_utc() {
        assert_eq!(
            stamp(UNIX_EPOCH + Duration::from_millis(951_782_405_999)),
            "20000229_000005"
        );
        assert_eq!(stamp(UNIX_EPOCH), "19700101_000000");
    }
}
