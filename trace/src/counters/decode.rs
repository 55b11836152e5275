//! The nettrace stream of a counters session, decoded with [`dsipc::nettrace`] into
//! counter events: a [`TraceDispatcher`] feeding one [`CounterSink`].

use std::time::SystemTime;

use crate::{TraceDispatcher, TraceSink};

use super::{CounterEvent, CounterSink, CountersConfig};

/// Most distinct metadata records kept (a counters session needs a few dozen).
pub(crate) const MAX_METADATA: usize = 4096;

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

/// Decodes a counters session's stream, fed in chunks of any size: a [`TraceDispatcher`]
/// feeding one [`CounterSink`], its samples handed out as owned [`CounterEvent`]s.
#[derive(Debug)]
pub struct Decoder {
    dispatcher: TraceDispatcher,
    sink: CounterSink,
}

impl Decoder {
    /// A decoder for the session `config` describes (its counters and Metrics session).
    pub fn new(config: &CountersConfig) -> Decoder {
        Decoder {
            dispatcher: TraceDispatcher::with_max_metadata(MAX_METADATA),
            sink: CounterSink::new(config),
        }
    }

    /// What was seen so far.
    pub fn stats(&self) -> &DecodeStats {
        self.sink.stats()
    }

    /// Feeds the next stream bytes; events go to `out` as soon as their block is whole.
    /// A stream that cannot be parsed is reported in [`DecodeStats::stream_error`] and the
    /// rest of it discarded; a payload that cannot be decoded is counted and skipped.
    pub fn feed(&mut self, data: &[u8], out: &mut dyn FnMut(CounterEvent)) {
        self.feed_with(data, &mut (), out)
    }

    /// [`feed`](Self::feed), the same parse also handed to `also` (another sink of the
    /// session's stream: the request events of a session that asks for them beside its
    /// counters, say).
    pub fn feed_with(
        &mut self,
        data: &[u8],
        also: &mut dyn TraceSink,
        out: &mut dyn FnMut(CounterEvent),
    ) {
        let stats = self.sink.stats_mut();
        stats.bytes += data.len() as u64;
        if stats.stream_error.is_some() {
            return;
        }
        if let Err(e) = self.dispatcher.feed(data, &mut (&mut self.sink, also)) {
            self.sink.stats_mut().stream_error = Some(e.to_string());
        }
        self.sink.release_latest();
        self.hand_out(out);
    }

    /// When EventCounter samples held back for Meter data of their provider (for a second
    /// after its first sample, dotnet-counters' BufferDelaySecs) are due, on the trace's
    /// clock; `None` when nothing is held. [`feed`](Self::feed) releases them when later
    /// events pass that time; a driver that wants them out on time even while the runtime
    /// sends nothing (until its next publication, an interval later) calls
    /// [`release_due`](Self::release_due) then.
    pub fn held_until(&self) -> Option<SystemTime> {
        self.sink.held_until()
    }

    /// Hands out the held samples due by `now` (the runtime's trace clock is the wall clock
    /// of its machine), as dotnet-counters hands out its buffered EventCounter payloads
    /// once the delay passed by the clock.
    pub fn release_due(&mut self, now: SystemTime, out: &mut dyn FnMut(CounterEvent)) {
        self.sink.release_due(now);
        self.hand_out(out);
    }

    /// End of stream: hands out what is still held back, and notes a stream that ended
    /// without its end marker (truncated) or could not be parsed.
    pub fn finish(&mut self, out: &mut dyn FnMut(CounterEvent)) {
        self.finish_with(&mut (), out)
    }

    /// [`finish`](Self::finish), `also` (see [`feed_with`](Self::feed_with)) told too.
    pub fn finish_with(&mut self, also: &mut dyn TraceSink, out: &mut dyn FnMut(CounterEvent)) {
        if self.sink.stats().stream_error.is_none() {
            // The sink notes how the stream ended and releases what it holds.
            let _ = self.dispatcher.finish(&mut (&mut self.sink, also));
        } else {
            self.sink.finish();
        }
        self.hand_out(out);
    }

    fn hand_out(&mut self, out: &mut dyn FnMut(CounterEvent)) {
        for ev in self.sink.drain() {
            out(ev.to_counter_event());
        }
    }
}
