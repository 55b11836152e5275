//! The nettrace stream of a counters session, decoded with [`dsipc::nettrace`] into
//! counter events.

use crate::TraceClock;
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use dsipc::nettrace::{Format, Item, MetadataRecord, PayloadFields, Value as V};

use crate::{MetadataTable, TraceStream};

use super::events::{Fields, Interpreter, Outcome, Value};
use super::limit::{Admit, SeriesLimits};
use super::{CounterEvent, CountersConfig};

/// Most distinct metadata records kept (a counters session needs a few dozen).
pub(crate) const MAX_METADATA: usize = 4096;
/// Deepest nesting of objects flattened.
const MAX_DEPTH: u32 = 8;

/// What the decoder saw.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DecodeStats {
    /// Stream bytes fed.
    pub bytes: u64,
    /// Events decoded (any provider).
    pub events: u64,
    /// Samples handed out.
    pub samples: u64,
    /// Notices handed out.
    pub notices: u64,
    /// Counter events skipped because their payload lacked what it must carry.
    pub malformed: u64,
    /// Events of other sessions, other events, counters not asked for.
    pub ignored: u64,
    /// Samples of series or histograms past the session's caps (`MaxTimeSeries`,
    /// `MaxHistograms`), dropped.
    pub over_limit: u64,
    /// Metadata records dropped over the table limit (4096 distinct records).
    pub metadata_dropped: u64,
    /// The stream could not be parsed past this error (later bytes are discarded).
    pub stream_error: Option<String>,
    /// The stream ended without its end-of-stream marker (the runtime exited or was
    /// killed); what came before was decoded.
    pub truncated: bool,
}

#[derive(Debug)]
struct Meta {
    /// Shared, not copied, by every event of the record.
    provider: Arc<str>,
    name: Arc<str>,
    raw: Vec<u8>,
    format: Format,
    interesting: bool,
}

/// Decodes a counters session's stream, fed in chunks of any size.
#[derive(Debug)]
pub struct Decoder {
    /// The one stream driver (receive buffer, parser, block limit, truncation rule).
    stream: TraceStream,
    /// Everything items update: apart from `stream`, so that the stream can hand items to it.
    state: State,
}

#[derive(Debug)]
struct State {
    interp: Interpreter,
    stats: DecodeStats,
    limits: SeriesLimits,
    metadata: MetadataTable<Meta>,
    clock: Option<TraceClock>,
    latest: Option<SystemTime>,
}

/// The fields of a payload by name, nested objects flattened into the list (EventCounters
/// carry one Object field `Payload`); `None` if the payload does not match its description.
fn flatten(walk: PayloadFields<'_>, depth: u32) -> Option<Fields> {
    let mut out = Vec::new();
    flatten_into(walk, depth, &mut out)?;
    Some(out)
}

fn flatten_into(walk: PayloadFields<'_>, depth: u32, out: &mut Fields) -> Option<()> {
    for f in walk {
        let f = f.ok()?;
        let name: String = f.name.chars_lossy().collect();
        let value = match f.value {
            V::Object(o) => {
                if depth >= MAX_DEPTH {
                    return None;
                }
                flatten_into(o.fields(), depth + 1, out)?;
                continue;
            }
            V::String(s) => Value::Str(s.chars_lossy().collect()),
            v => match v.as_f64() {
                Some(n) => Value::Num(n),
                None => Value::Other,
            },
        };
        out.push((name, value));
    }
    Some(())
}

impl Decoder {
    /// A decoder for the session `config` describes (its counters and Metrics session).
    pub fn new(config: &CountersConfig) -> Decoder {
        let (session_id, client_id) = match &config.metrics {
            Some(super::MetricsSession::Shared { client_id }) => (
                Some(super::SHARED_SESSION_ID.to_string()),
                Some(client_id.clone()),
            ),
            Some(super::MetricsSession::Private { session_id }) => (Some(session_id.clone()), None),
            None => (None, None),
        };
        Decoder {
            stream: TraceStream::new(),
            state: State {
                interp: Interpreter::new(
                    config.counters.clone(),
                    session_id,
                    client_id,
                    config.interval_secs,
                ),
                stats: DecodeStats::default(),
                limits: SeriesLimits::new(config.max_time_series, config.max_histograms),
                metadata: MetadataTable::new(),
                clock: None,
                latest: None,
            },
        }
    }

    /// What was seen so far.
    pub fn stats(&self) -> &DecodeStats {
        &self.state.stats
    }

    /// Feeds the next stream bytes; events go to `out` as soon as their block is whole.
    /// A stream that cannot be parsed is reported in [`DecodeStats::stream_error`] and the
    /// rest of it discarded; a payload that cannot be decoded is counted and skipped.
    pub fn feed(&mut self, data: &[u8], out: &mut dyn FnMut(CounterEvent)) {
        self.state.stats.bytes += data.len() as u64;
        if self.state.stats.stream_error.is_some() {
            return;
        }
        let state = &mut self.state;
        if let Err(e) = self.stream.feed(data, |item| state.item(item, out)) {
            state.stats.stream_error = Some(e.to_string());
        }
        state.release(out);
    }

    /// When EventCounter samples held back for Meter data of their provider (for a second
    /// after its first sample, dotnet-counters' BufferDelaySecs) are due, on the trace's
    /// clock; `None` when nothing is held. [`feed`](Self::feed) releases them when later
    /// events pass that time; a driver that wants them out on time even while the runtime
    /// sends nothing (until its next publication, an interval later) calls
    /// [`release_due`](Self::release_due) then.
    pub fn held_until(&self) -> Option<SystemTime> {
        self.state.interp.held_due()
    }

    /// Hands out the held samples due by `now` (the runtime's trace clock is the wall clock
    /// of its machine), as dotnet-counters hands out its buffered EventCounter payloads
    /// once the delay passed by the clock.
    pub fn release_due(&mut self, now: SystemTime, out: &mut dyn FnMut(CounterEvent)) {
        let state = &mut self.state;
        for ev in state.interp.release(Some(now)) {
            state.emit(ev, out);
        }
    }

    /// End of stream: hands out what is still held back, and notes a stream that ended
    /// without its end marker (truncated) or could not be parsed.
    pub fn finish(&mut self, out: &mut dyn FnMut(CounterEvent)) {
        let state = &mut self.state;
        if state.stats.stream_error.is_none() {
            match self.stream.finish(|item| state.item(item, out)) {
                Ok(()) => {}
                Err(e) if e.is_truncation() => state.stats.truncated = true,
                Err(e) => state.stats.stream_error = Some(e.to_string()),
            }
        }
        for ev in state.interp.release(None) {
            state.emit(ev, out);
        }
    }
}

impl State {
    fn item(&mut self, item: &Item<'_>, out: &mut dyn FnMut(CounterEvent)) {
        match item {
            Item::Trace(h) => self.clock = Some(TraceClock::new(h)),
            Item::Metadata(m) => {
                if let Ok(m) = m.record() {
                    self.on_metadata(&m);
                }
            }
            Item::Event(e) => {
                self.stats.events += 1;
                let meta = match self.metadata.get(e.metadata_id) {
                    Some(m) if m.interesting => m,
                    _ => {
                        self.stats.ignored += 1;
                        return;
                    }
                };
                let fields = match MetadataRecord::parse(&meta.raw, meta.format, 0) {
                    Ok(rec) if !rec.fields_malformed => flatten(rec.fields.walk(e.payload), 0),
                    _ => None,
                };
                // Reference counts, not string copies: the borrow of `self.metadata` must
                // end before `on_fields` takes `self`.
                let provider = Arc::clone(&meta.provider);
                let name = Arc::clone(&meta.name);
                self.on_fields(&provider, &name, fields, e.timestamp, out);
            }
            _ => {}
        }
    }

    fn emit(&mut self, ev: CounterEvent, out: &mut dyn FnMut(CounterEvent)) {
        if let CounterEvent::Sample(s) = &ev {
            match self.limits.admit(s) {
                Admit::Yes => {}
                Admit::No(notice) => {
                    self.stats.over_limit += 1;
                    if let Some(n) = notice {
                        self.stats.notices += 1;
                        out(CounterEvent::Notice(n));
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
            CounterEvent::Sample(_) => self.stats.samples += 1,
            CounterEvent::Notice(_) => self.stats.notices += 1,
        }
        out(ev);
    }

    fn on_metadata(&mut self, m: &MetadataRecord<'_>) {
        let id = m.metadata_id;
        if !self.metadata.has_room_for(id, MAX_METADATA) {
            self.stats.metadata_dropped += 1;
            return;
        }
        let provider: Arc<str> = m.provider_name.chars_lossy().collect::<String>().into();
        let name: Arc<str> = m.event_name.chars_lossy().collect::<String>().into();
        let interesting = &*name == "EventCounters" || &*provider == super::METRICS_PROVIDER;
        self.metadata.insert(
            id,
            Meta {
                provider,
                name,
                // Only counter events need their field descriptions kept.
                raw: if interesting {
                    m.raw.to_vec()
                } else {
                    Vec::new()
                },
                format: m.format,
                interesting,
            },
        );
    }

    fn on_fields(
        &mut self,
        provider: &str,
        name: &str,
        fields: Option<Fields>,
        timestamp: i64,
        out: &mut dyn FnMut(CounterEvent),
    ) {
        let time = match &self.clock {
            Some(c) => c.time(timestamp),
            None => UNIX_EPOCH,
        };
        if self.latest.map_or(true, |l| time > l) {
            self.latest = Some(time);
        }
        // Held-back samples that are due go first, so samples come out in time order.
        self.release(out);
        let fields = match fields {
            Some(f) => f,
            None => {
                self.stats.malformed += 1;
                return;
            }
        };
        match self.interp.event(provider, name, &fields, time) {
            Outcome::Events(evs) => {
                for ev in evs {
                    self.emit(ev, out);
                }
            }
            Outcome::Ignored => self.stats.ignored += 1,
            Outcome::Malformed => self.stats.malformed += 1,
        }
    }

    fn release(&mut self, out: &mut dyn FnMut(CounterEvent)) {
        let latest = self.latest;
        for ev in self.interp.release(latest) {
            self.emit(ev, out);
        }
    }
}
