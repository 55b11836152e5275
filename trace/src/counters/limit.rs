//! The client-side caps on what a counters session holds: distinct time series and
//! histograms (dotnet-counters' `MaxTimeSeries` and `MaxHistograms`, which the runtime is
//! asked to respect but a hostile or buggy one may not), and the size of one series' name.
//! Known series are remembered by a 64-bit hash, so the set costs 8 bytes per series
//! whatever the names; a collision only lets a new series pass as known.

use super::series::Series;
use super::{CounterKind, Notice};
use crate::hash::FxHashMap;

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
    /// The keys are hashes already (see [`Series`]).
    series: FxHashMap<u64, ()>,
    histograms: FxHashMap<u64, ()>,
    series_noticed: bool,
    histograms_noticed: bool,
}

impl SeriesLimits {
    /// At most `max_series` series and `max_histograms` histograms.
    pub(crate) fn new(max_series: u32, max_histograms: u32) -> Self {
        SeriesLimits {
            max_series: max_series as usize,
            max_histograms: max_histograms as usize,
            series: FxHashMap::default(),
            histograms: FxHashMap::default(),
            series_noticed: false,
            histograms_noticed: false,
        }
    }

    /// Whether a sample of `s` may be handed on.
    #[inline]
    pub(crate) fn admit(&mut self, s: &Series) -> Admit {
        if s.text > MAX_SERIES_TEXT {
            return Admit::TooLarge;
        }
        let (series, histogram) = s.keys;
        if let CounterKind::Percentile(_) = s.kind {
            let h = histogram;
            if !self.histograms.contains_key(&h) {
                if self.histograms.len() >= self.max_histograms {
                    let first = !std::mem::replace(&mut self.histograms_noticed, true);
                    return Admit::No(first.then_some(Notice::HistogramLimitReached));
                }
                self.histograms.insert(h, ());
            }
        }
        let h = series;
        if !self.series.contains_key(&h) {
            if self.series.len() >= self.max_series {
                let first = !std::mem::replace(&mut self.series_noticed, true);
                return Admit::No(first.then_some(Notice::TimeSeriesLimitReached));
            }
            self.series.insert(h, ());
        }
        Admit::Yes
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::counters::series::{SampleSpec, SeriesTable};
    use crate::counters::Source;
    use std::sync::Arc;

    fn sample(name: &str, tag: &str, kind: CounterKind) -> Arc<Series> {
        let tags = format!("k={}", tag);
        SeriesTable::new(0, 1.0).get(&SampleSpec {
            provider: "P",
            name,
            display_name: name,
            unit: "",
            kind,
            tags: &tags,
            tag_separator: '=',
            source: Source::Meter,
        })
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
