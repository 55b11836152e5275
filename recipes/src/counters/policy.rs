//! When dotnet-counters' `collect` and `monitor` are over, without a clock: the elapsed
//! time and the samples so far are given.

use std::time::Duration;

/// How long a counters session waits for its first sample, and how long it collects.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CollectPolicy {
    /// How long to collect (`--duration`; `None`: until stopped from outside).
    pub duration: Option<Duration>,
    /// How long to wait for a first sample before giving up: three intervals, at least
    /// 10 s (a runtime publishes its first values one interval after the session starts).
    pub first_sample_limit: Duration,
}

/// What [`CollectPolicy::check`] says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Collecting {
    /// Go on.
    Go,
    /// The duration is over and samples came: done (what came is kept).
    Done,
    /// No sample came within [`CollectPolicy::first_sample_limit`].
    NoSamples,
}

impl CollectPolicy {
    /// Publications every `interval_secs`, collected for `duration`.
    pub fn new(interval_secs: f64, duration: Option<Duration>) -> CollectPolicy {
        CollectPolicy {
            duration,
            first_sample_limit: Duration::from_secs_f64((interval_secs * 3.0).max(10.0)),
        }
    }

    /// Whether to go on, `elapsed` since the session started with `samples` received. As
    /// dotnet-counters, a duration shorter than the runtime's first publication still waits
    /// for that first batch (up to the first-sample limit).
    pub fn check(&self, elapsed: Duration, samples: u64) -> Collecting {
        if samples == 0 {
            if elapsed >= self.first_sample_limit {
                Collecting::NoSamples
            } else {
                Collecting::Go
            }
        } else if self.duration.map_or(false, |d| elapsed >= d) {
            Collecting::Done
        } else {
            Collecting::Go
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_short_duration_still_waits_for_the_first_batch_and_silence_gives_up() {
        let s = Duration::from_secs;
        let p = CollectPolicy::new(1.0, Some(s(2)));
        assert_eq!(p.first_sample_limit, s(10));
        assert_eq!(p.check(s(1), 5), Collecting::Go);
        assert_eq!(p.check(s(2), 5), Collecting::Done);
        // No sample yet: the duration waits for the first.
        assert_eq!(p.check(s(5), 0), Collecting::Go);
        assert_eq!(p.check(s(10), 0), Collecting::NoSamples);
        // Three intervals when they are longer; until stopped without a duration.
        let p = CollectPolicy::new(5.0, None);
        assert_eq!(p.first_sample_limit, s(15));
        assert_eq!(p.check(s(14), 0), Collecting::Go);
        assert_eq!(p.check(s(15), 0), Collecting::NoSamples);
        assert_eq!(p.check(s(86_400), 1), Collecting::Go);
    }
}
