//! CollectTrace's `StoppingEvent`: the trace is read as it streams, and the first event of
//! the named provider and event name whose payload carries every `PayloadFilter` field with
//! its value (compared as text, ordinally, as dotnet-monitor compares them) stops it; its
//! `Duration` still bounds it. The bytes pass on unchanged ([`Nettrace`] checks the end).

use std::collections::HashMap;
use std::io;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use dsipc::nettrace::{Item, Value};
use dsipc::session::Outcome;
use dsipc_trace::{EventMetadata, TraceStream};
use tokio::sync::Notify;

use crate::rules::action::StoppingEvent;
use crate::session::{Nettrace, Sink};

/// The most metadata records whose match is remembered: a runtime defines one per event
/// kind (a few thousand for the busiest sessions); past this, records are not remembered
/// and their events cannot stop the trace (a stream defining more is not a runtime's).
const MAX_RECORDS: usize = 65_536;

/// Where the session's stop signal is put once the session streams (the sink exists
/// before it): a match before then is kept and signalled when it comes.
#[derive(Default)]
pub(crate) struct StopSlot(Mutex<(Option<Arc<Notify>>, bool)>);

impl StopSlot {
    /// The session's stop signal.
    pub(crate) fn set(&self, stop: Arc<Notify>) {
        let mut s = self.0.lock().unwrap_or_else(|p| p.into_inner());
        if s.1 {
            stop.notify_one();
        }
        s.0 = Some(stop);
    }

    fn fire(&self) {
        let mut s = self.0.lock().unwrap_or_else(|p| p.into_inner());
        s.1 = true;
        if let Some(stop) = &s.0 {
            stop.notify_one();
        }
    }
}

/// A trace's sink that stops the session at its stopping event.
pub(crate) struct Stopping {
    inner: Nettrace,
    stream: TraceStream,
    event: StoppingEvent,
    /// Metadata id -> the record, when it names the provider and event (`None`: it does
    /// not).
    records: HashMap<u32, Option<EventMetadata>>,
    slot: Arc<StopSlot>,
    fired: bool,
}

impl Stopping {
    /// A sink stopping at `event`, signalling through `slot`.
    pub(crate) fn new(event: StoppingEvent, slot: Arc<StopSlot>) -> Stopping {
        Stopping {
            inner: Nettrace,
            stream: TraceStream::new(),
            event,
            records: HashMap::new(),
            slot,
            fired: false,
        }
    }
}

/// A payload value as .NET's `ToString()` writes it (what `PayloadFilter` values are
/// compared with); `None` for objects and arrays.
fn text(v: &Value<'_>) -> Option<String> {
    Some(match v {
        Value::Boolean(b) => if *b { "True" } else { "False" }.to_string(),
        Value::Char(c) => char::from_u32(u32::from(*c))
            .map(String::from)
            .unwrap_or_default(),
        Value::F32(f) => f.to_string(),
        Value::F64(f) => f.to_string(),
        Value::Guid(g) => g.to_string(),
        Value::String(s) => s.to_string(),
        Value::Object(_) | Value::Array(_) => return None,
        other => match (other.as_i64(), other.as_u64()) {
            (Some(i), _) => i.to_string(),
            (None, Some(u)) => u.to_string(),
            _ => return None,
        },
    })
}

/// Whether `payload` (of an event `meta` describes) carries every field of `filter`.
fn payload_matches(
    filter: &std::collections::BTreeMap<String, String>,
    meta: &EventMetadata,
    payload: &[u8],
) -> bool {
    if filter.is_empty() {
        return true;
    }
    let record = match meta.record() {
        Ok(r) => r,
        Err(_) => return false,
    };
    filter
        .iter()
        .all(|(name, want)| match record.fields.walk(payload).get(name) {
            Ok(Some(v)) => text(&v).as_deref() == Some(want.as_str()),
            _ => false,
        })
}

impl Stopping {
    fn look(&mut self, data: &[u8]) {
        let mut hit = false;
        let Stopping {
            stream,
            records,
            event,
            ..
        } = self;
        let _ = stream.feed(data, |item| match item {
            Item::Metadata(m) => {
                if let Ok(r) = m.record() {
                    if records.len() < MAX_RECORDS || records.contains_key(&r.metadata_id) {
                        let named = r.provider_name.eq_str(&event.provider_name)
                            && r.event_name.eq_str(&event.event_name);
                        records.insert(
                            r.metadata_id,
                            if named {
                                Some(EventMetadata::from_record(&r))
                            } else {
                                None
                            },
                        );
                    }
                }
            }
            Item::Event(e) if !hit => {
                if let Some(Some(meta)) = records.get(&e.metadata_id) {
                    hit = payload_matches(&event.payload_filter, meta, e.payload);
                }
            }
            _ => {}
        });
        if hit {
            self.fired = true;
            self.slot.fire();
        }
    }
}

impl Sink for Stopping {
    fn chunk(&mut self, data: Vec<u8>) -> Option<Bytes> {
        if !self.fired {
            self.look(&data);
        }
        self.inner.chunk(data)
    }

    fn end(&mut self, outcome: &Outcome) -> Result<Option<Bytes>, io::Error> {
        self.inner.end(outcome)
    }
}
