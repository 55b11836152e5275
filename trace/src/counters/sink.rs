//! [`CounterSink`]: counter events decoded from a [`TraceDispatcher`](crate::TraceDispatcher)'s
//! items, each payload read through its record's layout (decoded once per metadata id), each
//! series' identity built once.

use std::time::SystemTime;

use dsipc::nettrace::{Event, Item, PayloadFields, Value as V};

use super::events::{Fields, Interpreter, Outcome, Value};
use super::limit::{Admit, SeriesLimits};
use super::series::SeriesEvent;
use super::{CountersConfig, DecodeStats, METRICS_PROVIDER};
use crate::{EventInfo, LayoutField, StreamError, TraceContext, TraceSink};

/// Deepest nesting of objects flattened.
const MAX_DEPTH: u32 = 8;

/// The counters of a session as one sink of a stream: samples and notices, ready to be taken
/// with [`drain`](Self::drain) after each feed.
///
/// Memory: the series seen (at most the session's `MaxTimeSeries` identities), the samples
/// held back for Meter data (at most 10,000), the events of the bytes fed since the last
/// drain, and one event's fields.
#[derive(Debug)]
pub struct CounterSink {
    interp: Interpreter,
    stats: DecodeStats,
    limits: SeriesLimits,
    latest: Option<SystemTime>,
    /// Ready to hand out.
    ready: Vec<SeriesEvent>,
    /// The interpreter's output for one event, before the caps.
    scratch: Vec<SeriesEvent>,
    /// One event's values and their text, reused from event to event.
    values: Vec<Value>,
    text: String,
    /// The field names of an event whose layout is not flat (decoded by the core's walker).
    names: Vec<LayoutField>,
}

impl CounterSink {
    /// A sink for the session `config` describes (its counters and Metrics session).
    pub fn new(config: &CountersConfig) -> CounterSink {
        let (session_id, client_id) = match &config.metrics {
            Some(super::MetricsSession::Shared { client_id }) => (
                Some(super::SHARED_SESSION_ID.to_string()),
                Some(client_id.clone()),
            ),
            Some(super::MetricsSession::Private { session_id }) => (Some(session_id.clone()), None),
            None => (None, None),
        };
        CounterSink {
            interp: Interpreter::new(
                config.counters.clone(),
                session_id,
                client_id,
                config.interval_secs,
                config.max_time_series as usize,
            ),
            stats: DecodeStats::default(),
            limits: SeriesLimits::new(config.max_time_series, config.max_histograms),
            latest: None,
            ready: Vec::new(),
            scratch: Vec::new(),
            values: Vec::new(),
            text: String::new(),
            names: Vec::new(),
        }
    }

    /// What was seen so far (`bytes` is counted by [`Decoder`](super::Decoder) only).
    pub fn stats(&self) -> &DecodeStats {
        &self.stats
    }

    pub(crate) fn stats_mut(&mut self) -> &mut DecodeStats {
        &mut self.stats
    }

    /// Takes the samples and notices ready, in order.
    pub fn drain(&mut self) -> std::vec::Drain<'_, SeriesEvent> {
        self.ready.drain(..)
    }

    /// When EventCounter samples held back for Meter data of their provider are due (see
    /// [`Decoder::held_until`](super::Decoder::held_until)).
    pub fn held_until(&self) -> Option<SystemTime> {
        self.interp.held_due()
    }

    /// Makes the held samples due by `now` (the trace's clock) ready.
    pub fn release_due(&mut self, now: SystemTime) {
        self.release(Some(now));
    }

    /// Makes the held samples due by the latest event's time ready.
    pub fn release_latest(&mut self) {
        let latest = self.latest;
        self.release(latest);
    }

    /// End of stream: makes everything still held ready.
    pub fn finish(&mut self) {
        self.release(None);
    }

    fn release(&mut self, now: Option<SystemTime>) {
        let mut out = std::mem::take(&mut self.scratch);
        self.interp.release(now, &mut out);
        for ev in out.drain(..) {
            self.emit(ev);
        }
        self.scratch = out;
    }

    #[inline]
    fn emit(&mut self, ev: SeriesEvent) {
        if let SeriesEvent::Sample(s) = &ev {
            match self.limits.admit(&s.series) {
                Admit::Yes => {}
                Admit::No(notice) => {
                    self.stats.over_limit += 1;
                    if let Some(n) = notice {
                        self.stats.notices += 1;
                        self.ready.push(SeriesEvent::Notice(n));
                    }
                    return;
                }
                Admit::TooLarge => {
                    self.stats.malformed += 1;
                    return;
                }
            }
        }
        match &ev {
            SeriesEvent::Sample(_) => self.stats.samples += 1,
            SeriesEvent::Notice(_) => self.stats.notices += 1,
        }
        self.ready.push(ev);
    }

    /// Reads `payload` into `values` and `text`: through the layout when it is flat, else
    /// (arrays) with the core's walker over the record. False if it does not match.
    fn read(&mut self, info: &EventInfo, payload: &[u8]) -> bool {
        self.values.clear();
        self.text.clear();
        self.names.clear();
        let layout = match &info.layout {
            Some(l) if l.depth() <= MAX_DEPTH => l,
            _ => return false,
        };
        let (values, text) = (&mut self.values, &mut self.text);
        if layout.is_flat() {
            return layout
                .read(payload, |_, v| values.push(value(v, text)))
                .is_ok();
        }
        match info.meta.record() {
            Ok(rec) => flatten(rec.fields.walk(payload), &mut self.names, values, text),
            Err(_) => false,
        }
    }
}

/// A payload value as the interpreter sees it (strings appended to `text`).
#[inline]
fn value(v: V<'_>, text: &mut String) -> Value {
    match v {
        V::String(s) => {
            let a = text.len() as u32;
            crate::metadata::push_lossy(s, text);
            Value::Str(a, text.len() as u32)
        }
        v => match v.as_f64() {
            Some(n) => Value::Num(n),
            None => Value::Other,
        },
    }
}

/// The fields of a payload by name with the core's walker, nested objects flattened into the
/// list (a layout with arrays; the depth was checked on the layout).
fn flatten(
    walk: PayloadFields<'_>,
    names: &mut Vec<LayoutField>,
    values: &mut Vec<Value>,
    text: &mut String,
) -> bool {
    for f in walk {
        let f = match f {
            Ok(f) => f,
            Err(_) => return false,
        };
        if let V::Object(o) = f.value {
            if !flatten(o.fields(), names, values, text) {
                return false;
            }
            continue;
        }
        names.push(LayoutField {
            name: crate::metadata::lossy(f.name).into_boxed_str(),
            code: f.ty.code,
            depth: 0,
        });
        values.push(value(f.value, text));
    }
    true
}

impl TraceSink for CounterSink {
    #[inline]
    fn event(&mut self, e: &Event<'_>, info: Option<&EventInfo>, cx: &TraceContext<'_>) {
        self.stats.events += 1;
        let info = match info {
            Some(i) if i.meta.name == "EventCounters" || i.meta.provider == METRICS_PROVIDER => i,
            _ => {
                self.stats.ignored += 1;
                return;
            }
        };
        let ok = self.read(info, e.payload);
        let time = cx.time(e.timestamp);
        if self.latest.map_or(true, |l| time > l) {
            self.latest = Some(time);
        }
        // Held-back samples that are due go first, so samples come out in time order.
        self.release_latest();
        if !ok {
            self.stats.malformed += 1;
            return;
        }
        let names = match &info.layout {
            Some(l) if l.is_flat() => l.fields(),
            _ => &self.names,
        };
        let fields = Fields {
            names,
            values: &self.values,
            text: &self.text,
        };
        let mut out = std::mem::take(&mut self.scratch);
        let outcome = self.interp.event(
            &info.meta.provider,
            &info.meta.name,
            &fields,
            time,
            &mut out,
        );
        match outcome {
            Outcome::Events => {
                for ev in out.drain(..) {
                    self.emit(ev);
                }
            }
            Outcome::Ignored => self.stats.ignored += 1,
            Outcome::Malformed => self.stats.malformed += 1,
        }
        self.scratch = out;
    }

    fn item(&mut self, item: &Item<'_>, cx: &TraceContext<'_>) {
        if let Item::Metadata(m) = item {
            if !cx.metadata().contains(m.metadata_id) {
                self.stats.metadata_dropped += 1;
            }
        }
    }

    fn end(&mut self, end: &Result<(), StreamError>, _: &TraceContext<'_>) {
        match end {
            Ok(()) => {}
            Err(e) if e.is_truncation() => self.stats.truncated = true,
            Err(e) => {
                if self.stats.stream_error.is_none() {
                    self.stats.stream_error = Some(e.to_string());
                }
            }
        }
        self.finish();
    }
}
