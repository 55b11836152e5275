//! The client-side caps on what a counters session holds: distinct time series and
//! histograms (dotnet-counters' `MaxTimeSeries` and `MaxHistograms`, which the runtime is
//! asked to respect but a hostile or buggy one may not), and the size of one series' name.
//! Known series are remembered by a 64-bit hash, so the set costs 8 bytes per series
//! whatever the names; a collision only lets a new series pass as known.

use std::collections::HashSet;
use std::hash::{Hash, Hasher};

use super::{CounterKind, Notice, Sample};

/// The most bytes of provider, name, display name, unit and tags one sample may carry
/// (larger ones are malformed: no real counter comes near it).
pub const MAX_SERIES_TEXT: usize = 4096;

/// What [`SeriesLimits::admit`] says of a sample.
#[derive(Debug, PartialEq)]
pub(crate) enum Admit {
    /// Hand it on.
    Yes,
    /// Drop it; the first time a cap is hit, with this notice.
    No(Option<Notice>),
    /// Drop it: its text is larger than [`MAX_SERIES_TEXT`].
    TooLarge,
}

/// Series and histograms seen so far, up to their caps.
#[derive(Debug)]
pub(crate) struct SeriesLimits {
    max_series: usize,
    max_histograms: usize,
    series: HashSet<u64>,
    histograms: HashSet<u64>,
    series_noticed: bool,
    histograms_noticed: bool,
}

fn hash_of(s: &Sample, with_series: bool) -> u64 {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    s.provider.hash(&mut h);
    s.name.hash(&mut h);
    if with_series {
        s.tags.hash(&mut h);
        match s.kind {
            CounterKind::Percentile(q) => q.to_bits().hash(&mut h),
            k => std::mem::discriminant(&k).hash(&mut h),
        }
    }
    h.finish()
}

impl SeriesLimits {
    /// At most `max_series` series and `max_histograms` histograms.
    pub(crate) fn new(max_series: u32, max_histograms: u32) -> Self {
        SeriesLimits {
            max_series: max_series as usize,
            max_histograms: max_histograms as usize,
            series: HashSet::new(),
            histograms: HashSet::new(),
            series_noticed: false,
            histograms_noticed: false,
        }
    }

    /// Whether `s` may be handed on.
    pub(crate) fn admit(&mut self, s: &Sample) -> Admit {
        let text = s.provider.len()
            + s.name.len()
            + s.display_name.len()
            + s.unit.len()
            + s.tags.iter().map(|(k, v)| k.len() + v.len()).sum::<usize>();
        if text > MAX_SERIES_TEXT {
            return Admit::TooLarge;
        }
        if let CounterKind::Percentile(_) = s.kind {
            let h = hash_of(s, false);
            if !self.histograms.contains(&h) {
                if self.histograms.len() >= self.max_histograms {
                    let first = !std::mem::replace(&mut self.histograms_noticed, true);
                    return Admit::No(first.then_some(Notice::HistogramLimitReached));
                }
                self.histograms.insert(h);
            }
        }
        let h = hash_of(s, true);
        if !self.series.contains(&h) {
            if self.series.len() >= self.max_series {
                let first = !std::mem::replace(&mut self.series_noticed, true);
                return Admit::No(first.then_some(Notice::TimeSeriesLimitReached));
            }
            self.series.insert(h);
        }
        Admit::Yes
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::counters::Source;
    use std::time::SystemTime;

    fn sample(name: &str, tag: &str, kind: CounterKind) -> Sample {
        Sample {
            timestamp: SystemTime::UNIX_EPOCH,
            provider: "P".into(),
            name: name.into(),
            display_name: name.into(),
            unit: String::new(),
            kind,
            value: 1.0,
            tags: vec![("k".into(), tag.into())],
            interval_secs: 1.0,
            source: Source::Meter,
        }
    }

    #[test]
    fn series_and_histogram_caps_drop_new_series_with_one_notice() {
        let mut l = SeriesLimits::new(3, 1);
        for t in ["a", "b", "c"] {
            assert_eq!(l.admit(&sample("x", t, CounterKind::Mean)), Admit::Yes);
        }
        // Known series still pass; a fourth is dropped, noticed once.
        assert_eq!(l.admit(&sample("x", "a", CounterKind::Mean)), Admit::Yes);
        assert_eq!(
            l.admit(&sample("x", "d", CounterKind::Mean)),
            Admit::No(Some(Notice::TimeSeriesLimitReached))
        );
        assert_eq!(
            l.admit(&sample("x", "e", CounterKind::Mean)),
            Admit::No(None)
        );
        let mut l = SeriesLimits::new(100, 1);
        let p = CounterKind::Percentile(50.0);
        assert_eq!(l.admit(&sample("h1", "a", p)), Admit::Yes);
        assert_eq!(l.admit(&sample("h1", "b", p)), Admit::Yes);
        assert_eq!(
            l.admit(&sample("h2", "a", p)),
            Admit::No(Some(Notice::HistogramLimitReached))
        );
        let big = "n".repeat(MAX_SERIES_TEXT);
        assert_eq!(
            l.admit(&sample(&big, "a", CounterKind::Mean)),
            Admit::TooLarge
        );
    }
}
