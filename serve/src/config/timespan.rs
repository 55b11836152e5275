//! .NET's `TimeSpan` as its configuration binder reads it (`TimeSpan.Parse`, invariant
//! culture): `[-]d`, `[-][d.]hh:mm[:ss[.fffffff]]` and `[-]d:hh:mm:ss[.fffffff]`.
//! `"5"` is five *days*, as in .NET; `"00:00:05"` is five seconds.

use std::fmt;
use std::time::Duration;

/// Ticks (100 ns) in a second.
const TICKS_PER_SECOND: i64 = 10_000_000;

/// A .NET `TimeSpan`: a signed count of 100 ns ticks.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct TimeSpan {
    ticks: i64,
}

/// Why a text is not a `TimeSpan`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TimeSpanError(&'static str);

impl fmt::Display for TimeSpanError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "not a TimeSpan ([d.]hh:mm:ss[.fffffff], e.g. 00:01:00): {}",
            self.0
        )
    }
}

impl std::error::Error for TimeSpanError {}

impl TimeSpan {
    /// A span of `ticks` 100 ns ticks.
    pub fn from_ticks(ticks: i64) -> TimeSpan {
        TimeSpan { ticks }
    }

    /// Its 100 ns ticks.
    pub fn ticks(self) -> i64 {
        self.ticks
    }

    /// As a `Duration`; `None` when negative.
    pub fn to_duration(self) -> Option<Duration> {
        if self.ticks < 0 {
            return None;
        }
        let t = self.ticks as u64;
        Some(Duration::new(
            t / TICKS_PER_SECOND as u64,
            (t % TICKS_PER_SECOND as u64) as u32 * 100,
        ))
    }

    /// Parses .NET's invariant forms (surrounding whitespace allowed).
    pub fn parse(text: &str) -> Result<TimeSpan, TimeSpanError> {
        let mut s = text.trim();
        let negative = s.starts_with('-');
        if negative {
            s = &s[1..];
        }
        if s.is_empty() {
            return Err(TimeSpanError("empty"));
        }
        let parts: Vec<&str> = s.split(':').collect();
        let (days, hours, minutes, seconds) = match parts.len() {
            // `d`: days alone.
            1 => (parts[0], "0", "0", "0"),
            // `[d.]hh:mm`
            2 => {
                let (d, h) = split_days(parts[0]);
                (d, h, parts[1], "0")
            }
            // `[d.]hh:mm:ss[.f]`
            3 => {
                let (d, h) = split_days(parts[0]);
                (d, h, parts[1], parts[2])
            }
            // `d:hh:mm:ss[.f]` (the "g" format)
            4 => (parts[0], parts[1], parts[2], parts[3]),
            _ => return Err(TimeSpanError("too many ':'")),
        };
        let (whole_seconds, fraction) = match seconds.split_once('.') {
            Some((s, f)) => (s, Some(f)),
            None => (seconds, None),
        };
        // .NET's bound: TimeSpan.MaxValue is 10675199 days.
        let days = number(days, 10_675_199, "the days are not 0 to 10675199")?;
        let hours = number(hours, 23, "the hours are not 0 to 23")?;
        let minutes = number(minutes, 59, "the minutes are not 0 to 59")?;
        let whole_seconds = number(whole_seconds, 59, "the seconds are not 0 to 59")?;
        let fraction_ticks = match fraction {
            None => 0,
            Some(f) => {
                // Seven digits: a tick (100 ns) is the finest a TimeSpan holds.
                if f.is_empty() || f.len() > 7 || !f.bytes().all(|b| b.is_ascii_digit()) {
                    return Err(TimeSpanError("the fraction is not 1 to 7 digits"));
                }
                let v: i64 = f.parse().map_err(|_| TimeSpanError("bad fraction"))?;
                v * 10i64.pow(7 - f.len() as u32)
            }
        };
        let seconds = ((days * 24 + hours) * 60 + minutes) * 60 + whole_seconds;
        let ticks = seconds
            .checked_mul(TICKS_PER_SECOND)
            .and_then(|t| t.checked_add(fraction_ticks))
            .ok_or(TimeSpanError("too long"))?;
        Ok(TimeSpan {
            ticks: if negative { -ticks } else { ticks },
        })
    }
}

/// `d.hh` into (`d`, `hh`); `hh` alone into (`0`, `hh`).
fn split_days(s: &str) -> (&str, &str) {
    match s.split_once('.') {
        Some((d, h)) => (d, h),
        None => ("0", s),
    }
}

/// Decimal digits only, at most `max`.
fn number(s: &str, max: i64, why: &'static str) -> Result<i64, TimeSpanError> {
    // At most 8 digits: enough for 10675199 days (and leading zeros such as `0005`).
    if s.is_empty() || s.len() > 8 || !s.bytes().all(|b| b.is_ascii_digit()) {
        return Err(TimeSpanError(why));
    }
    let v: i64 = s.parse().map_err(|_| TimeSpanError(why))?;
    if v > max {
        return Err(TimeSpanError(why));
    }
    Ok(v)
}

/// .NET's "c" format: `[-][d.]hh:mm:ss[.fffffff]`.
impl fmt::Display for TimeSpan {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.ticks < 0 {
            f.write_str("-")?;
        }
        let t = self.ticks.unsigned_abs();
        let per_second = TICKS_PER_SECOND as u64;
        let fraction = t % per_second;
        let s = t / per_second;
        let (days, h, m, sec) = (s / 86_400, s / 3600 % 24, s / 60 % 60, s % 60);
        if days > 0 {
            write!(f, "{}.", days)?;
        }
        write!(f, "{:02}:{:02}:{:02}", h, m, sec)?;
        if fraction > 0 {
            write!(f, ".{:07}", fraction)?;
        }
        Ok(())
    }
}

impl<'de> serde::Deserialize<'de> for TimeSpan {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<TimeSpan, D::Error> {
        let text = String::deserialize(d)?;
        TimeSpan::parse(&text).map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn secs(s: &str) -> f64 {
        TimeSpan::parse(s).unwrap().ticks() as f64 / 1e7
    }

    #[test]
    fn timespan_parses_dotnet_invariant_forms() {
        assert_eq!(secs("00:01:00"), 60.0);
        assert_eq!(secs(" 00:00:05 "), 5.0);
        assert_eq!(secs("01:02"), 3720.0);
        assert_eq!(secs("1.00:00:00"), 86_400.0);
        assert_eq!(secs("1:02:03:04"), 93_784.0);
        // A bare number is days, as TimeSpan.Parse reads it.
        assert_eq!(secs("5"), 5.0 * 86_400.0);
        assert_eq!(secs("00:00:00.5"), 0.5);
        assert_eq!(TimeSpan::parse("00:00:00.0000001").unwrap().ticks(), 1);
        assert_eq!(secs("-00:00:10"), -10.0);
        assert_eq!(
            TimeSpan::parse("00:00:01.25").unwrap().to_duration(),
            Some(Duration::from_millis(1250))
        );
        assert_eq!(TimeSpan::parse("-00:00:01").unwrap().to_duration(), None);
    }

    #[test]
    fn timespan_rejects_what_dotnet_rejects() {
        for bad in [
            "",
            "-",
            "abc",
            "00:60:00",
            "24:00:00",
            "00:00:60",
            "1:2:3:4:5",
            "00:00:00.12345678",
            "00:00:00.",
            "1.5",
            "00:-1:00",
            "99999999",
        ] {
            assert!(TimeSpan::parse(bad).is_err(), "{:?}", bad);
        }
    }

    #[test]
    fn timespan_displays_in_the_c_format() {
        for s in ["00:01:00", "1.02:03:04", "00:00:00.5000000", "-00:00:10"] {
            assert_eq!(TimeSpan::parse(s).unwrap().to_string(), s);
        }
    }
}
