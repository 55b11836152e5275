//! Counter series: a series' identity (provider, name, display name, unit, kind, tags) built
//! once and shared by every sample of it ([`SeriesSample`]), instead of strings built for
//! every sample.

use std::hash::{Hash, Hasher};
use std::sync::Arc;
use std::time::SystemTime;

use super::events::parse_tags;
use super::{CounterEvent, CounterKind, Notice, Sample, Source};
use crate::hash::{FxHashMap, FxHasher};

/// What a counter series is: built once per series, shared by its samples.
#[derive(Debug, Clone, PartialEq)]
pub struct Series {
    /// Provider (EventSource) or Meter name.
    pub provider: String,
    /// Counter or instrument name (`cpu-usage`).
    pub name: String,
    /// Display name (`CPU Usage`; the instrument name for Meters).
    pub display_name: String,
    /// Unit (`%`, `MB`, `By`; may be empty).
    pub unit: String,
    /// What the values measure.
    pub kind: CounterKind,
    /// Tags (Meter tags, EventCounter metadata), in the order published.
    pub tags: Vec<(String, String)>,
    /// The publication interval in seconds.
    pub interval_secs: f64,
    /// EventCounter or Meter.
    pub source: Source,
    /// Bytes of provider, name, display name, unit and tags (see `MAX_SERIES_TEXT`).
    pub(crate) text: usize,
    /// The series' key and its histogram's (provider and name) for the session's caps.
    pub(crate) keys: (u64, u64),
}

impl Series {
    fn new(spec: &SampleSpec<'_>, interval_secs: f64) -> Series {
        let tags = parse_tags(spec.tags, spec.tag_separator);
        let text = spec.provider.len()
            + spec.name.len()
            + spec.display_name.len()
            + spec.unit.len()
            + tags.iter().map(|(k, v)| k.len() + v.len()).sum::<usize>();
        // The caps' keys, as dotnet-counters counts series: a histogram is its provider and
        // name; a series adds its tags and kind (each percentile its own).
        let mut h = std::collections::hash_map::DefaultHasher::new();
        spec.provider.hash(&mut h);
        spec.name.hash(&mut h);
        let histogram = h.finish();
        tags.hash(&mut h);
        match spec.kind {
            CounterKind::Percentile(q) => q.to_bits().hash(&mut h),
            k => std::mem::discriminant(&k).hash(&mut h),
        }
        Series {
            provider: spec.provider.to_string(),
            name: spec.name.to_string(),
            display_name: spec.display_name.to_string(),
            unit: spec.unit.to_string(),
            kind: spec.kind,
            tags,
            interval_secs,
            source: spec.source,
            text,
            keys: (h.finish(), histogram),
        }
    }
}

/// One value of a series.
#[derive(Debug, Clone, PartialEq)]
pub struct SeriesSample {
    /// The series (shared, not copied, by its samples).
    pub series: Arc<Series>,
    /// When the runtime published it (the event's time on the trace clock).
    pub timestamp: SystemTime,
    /// The value.
    pub value: f64,
}

impl SeriesSample {
    /// An owned [`Sample`] of the same value (strings copied).
    pub fn to_sample(&self) -> Sample {
        let s = &*self.series;
        Sample {
            timestamp: self.timestamp,
            provider: s.provider.clone(),
            name: s.name.clone(),
            display_name: s.display_name.clone(),
            unit: s.unit.clone(),
            kind: s.kind,
            value: self.value,
            tags: s.tags.clone(),
            interval_secs: s.interval_secs,
            source: s.source,
        }
    }
}

/// What a [`CounterSink`](super::CounterSink) hands out.
#[derive(Debug, Clone, PartialEq)]
pub enum SeriesEvent {
    /// A counter value.
    Sample(SeriesSample),
    /// An error or limit reported by the runtime.
    Notice(Notice),
}

impl SeriesEvent {
    /// The same event with an owned [`Sample`].
    pub fn to_counter_event(&self) -> CounterEvent {
        match self {
            SeriesEvent::Sample(s) => CounterEvent::Sample(s.to_sample()),
            SeriesEvent::Notice(n) => CounterEvent::Notice(n.clone()),
        }
    }
}

/// A sample as an event describes it, borrowing the event's decoded fields.
#[derive(Debug, Clone, Copy)]
pub(crate) struct SampleSpec<'a> {
    pub(crate) provider: &'a str,
    pub(crate) name: &'a str,
    pub(crate) display_name: &'a str,
    pub(crate) unit: &'a str,
    pub(crate) kind: CounterKind,
    /// The tag list as published (`k=v,...` or `k:v,...`).
    pub(crate) tags: &'a str,
    pub(crate) tag_separator: char,
    pub(crate) source: Source,
}

impl SampleSpec<'_> {
    fn hash(&self) -> u64 {
        let mut h = FxHasher::default();
        self.provider.hash(&mut h);
        self.name.hash(&mut h);
        self.display_name.hash(&mut h);
        self.unit.hash(&mut h);
        self.tags.hash(&mut h);
        match self.kind {
            CounterKind::Percentile(q) => q.to_bits().hash(&mut h),
            k => std::mem::discriminant(&k).hash(&mut h),
        }
        h.finish()
    }

    /// True if `s` is the series this spec describes.
    fn is(&self, s: &Cached) -> bool {
        let series = &*s.series;
        series.kind == self.kind
            && series.source == self.source
            && &*s.tags == self.tags
            && series.provider == self.provider
            && series.name == self.name
            && series.display_name == self.display_name
            && series.unit == self.unit
    }
}

#[derive(Debug)]
struct Cached {
    series: Arc<Series>,
    /// The tag list as published, to compare with the next spec without parsing it.
    tags: Box<str>,
}

/// The series seen so far, by identity: a sample of a known series costs one hash and one
/// comparison, no string built.
#[derive(Debug)]
pub(crate) struct SeriesTable {
    by_hash: FxHashMap<u64, Vec<Cached>>,
    len: usize,
    /// At most this many series are kept: what a runtime honouring the session's
    /// `MaxTimeSeries` and `MaxHistograms` publishes. Series past it (a runtime ignoring the
    /// caps, whose samples the caps then drop) are built for each sample, not kept.
    max: usize,
    interval_secs: f64,
}

impl SeriesTable {
    pub(crate) fn new(max: usize, interval_secs: f64) -> Self {
        SeriesTable {
            by_hash: FxHashMap::default(),
            len: 0,
            max,
            interval_secs,
        }
    }

    /// The series `spec` describes.
    pub(crate) fn get(&mut self, spec: &SampleSpec<'_>) -> Arc<Series> {
        let h = spec.hash();
        if let Some(list) = self.by_hash.get(&h) {
            if let Some(c) = list.iter().find(|c| spec.is(c)) {
                return Arc::clone(&c.series);
            }
        }
        let series = Arc::new(Series::new(spec, self.interval_secs));
        // Series larger than the caps' text limit are refused by them: never kept.
        if self.len < self.max && series.text <= super::MAX_SERIES_TEXT {
            self.len += 1;
            self.by_hash.entry(h).or_default().push(Cached {
                series: Arc::clone(&series),
                tags: spec.tags.into(),
            });
        }
        series
    }
}
