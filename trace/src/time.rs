//! The trace's wall clock: its header's SYSTEMTIME (UTC) as a `SystemTime`.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use dsipc::nettrace::TraceHeader;

/// The trace's clock: wall time (UTC) at the header's sync point, and the QPC ticks events
/// carry, so an event's timestamp becomes a `SystemTime`.
#[derive(Debug, Clone, Copy)]
pub struct TraceClock {
    sync_utc: SystemTime,
    sync_qpc: i64,
    freq: i64,
}

impl TraceClock {
    /// The clock `header` describes.
    pub fn new(header: &TraceHeader<'_>) -> TraceClock {
        TraceClock {
            sync_utc: sync_time_utc(header),
            sync_qpc: header.sync_time_qpc,
            freq: header.qpc_frequency,
        }
    }

    /// The wall time of the event timestamp `ts` (QPC ticks); the sync point itself when the
    /// header's frequency is not positive, saturating far from it.
    pub fn time(&self, ts: i64) -> SystemTime {
        if self.freq <= 0 {
            return self.sync_utc;
        }
        let delta = i128::from(ts) - i128::from(self.sync_qpc);
        let nanos = delta * 1_000_000_000 / i128::from(self.freq);
        let abs = Duration::from_nanos(nanos.unsigned_abs().min(u128::from(u64::MAX)) as u64);
        if nanos >= 0 {
            self.sync_utc.checked_add(abs).unwrap_or(self.sync_utc)
        } else {
            self.sync_utc.checked_sub(abs).unwrap_or(self.sync_utc)
        }
    }
}

/// When the trace's clocks were synchronised (`sync_time_utc`, a UTC SYSTEMTIME) as a
/// `SystemTime`; the Unix epoch when the fields are nonsense (a month of 13, an hour of 25).
pub fn sync_time_utc(header: &TraceHeader<'_>) -> SystemTime {
    let t = header.sync_time_utc;
    if !(1..=12).contains(&t.month)
        || !(1..=31).contains(&t.day)
        || t.hour > 23
        || t.minute > 59
        || t.second > 60
    {
        return UNIX_EPOCH;
    }
    let days = days_from_civil(i64::from(t.year), u32::from(t.month), u32::from(t.day));
    let secs =
        days * 86_400 + i64::from(t.hour) * 3600 + i64::from(t.minute) * 60 + i64::from(t.second);
    let d = Duration::from_secs(secs.unsigned_abs())
        + Duration::from_millis(u64::from(t.millisecond.min(999)));
    if secs >= 0 {
        UNIX_EPOCH + d
    } else {
        UNIX_EPOCH.checked_sub(d).unwrap_or(UNIX_EPOCH)
    }
}

/// Days since 1970-01-01 of a civil date (Howard Hinnant's days_from_civil).
fn days_from_civil(y: i64, m: u32, d: u32) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let m = i64::from(m);
    let doy = (153 * (if m > 2 { m - 3 } else { m + 9 }) + 2) / 5 + i64::from(d) - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

#[cfg(test)]
mod tests {
    use super::*;
    use dsipc::nettrace::{Format, KeyValues, SystemTime as Utc};

    fn at(year: u16, month: u16, day: u16, hms: (u16, u16, u16), ms: u16) -> SystemTime {
        sync_time_utc(&TraceHeader {
            format: Format::V4,
            sync_time_utc: Utc {
                year,
                month,
                day,
                hour: hms.0,
                minute: hms.1,
                second: hms.2,
                millisecond: ms,
                ..Utc::default()
            },
            sync_time_qpc: 0,
            qpc_frequency: 1,
            pointer_size: 8,
            process_id: 0,
            number_of_processors: 0,
            sampling_interval_ns: 0,
            key_values: KeyValues::EMPTY,
        })
    }

    #[test]
    fn civil_dates_and_nonsense() {
        // 2024-03-01 12:34:56 UTC is 1709296496 s after the epoch (a leap year's March).
        assert_eq!(
            at(2024, 3, 1, (12, 34, 56), 789),
            UNIX_EPOCH + Duration::from_millis(1_709_296_496_789)
        );
        assert_eq!(at(1970, 1, 1, (0, 0, 0), 0), UNIX_EPOCH);
        assert_eq!(
            at(1969, 12, 31, (23, 59, 59), 0),
            UNIX_EPOCH - Duration::from_secs(1)
        );
        assert_eq!(at(2024, 13, 1, (0, 0, 0), 0), UNIX_EPOCH);
        assert_eq!(at(2024, 1, 1, (25, 0, 0), 0), UNIX_EPOCH);
    }
}
