//! One parse, many consumers: [`TraceDispatcher`] drives one [`TraceStream`] and hands each
//! item to any number of [`TraceSink`]s (counters, logs, heap, profile, lost events...), which
//! share one metadata table (each record decoded once, its payload layout with it) and one
//! clock. As TraceEvent's `TraceEventDispatcher`: one source, parsers subscribed to it.
//!
//! ```
//! use dsipc::nettrace::Event;
//! use dsipc_trace::{EventInfo, LostEvents, TraceAnalyzer, TraceContext, TraceDispatcher, TraceSink};
//!
//! /// A sink of its own: events per provider name length, say.
//! #[derive(Default)]
//! struct Count(u64);
//! impl TraceSink for Count {
//!     fn event(&mut self, _: &Event<'_>, info: Option<&EventInfo>, _: &TraceContext<'_>) {
//!         self.0 += info.map_or(0, |i| i.meta.provider.len() as u64);
//!     }
//! }
//!
//! # fn chunks() -> Vec<Vec<u8>> { Vec::new() }
//! let mut dispatcher = TraceDispatcher::new();
//! let (mut profile, mut lost, mut mine) = (TraceAnalyzer::new(), LostEvents::new(), Count(0));
//! for chunk in chunks() {
//!     // Every sink sees every item once, borrowed; the stream is parsed once.
//!     if dispatcher.feed(&chunk, &mut (&mut profile, &mut lost, &mut mine)).is_err() {
//!         break;
//!     }
//! }
//! let whole = dispatcher.finish(&mut (&mut profile, &mut lost, &mut mine)).is_ok();
//! # let _ = whole;
//! ```

use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use dsipc::nettrace::clr::ClrProvider;
use dsipc::nettrace::{Event, Item, KeyValues, MetadataRecord, NettraceParser};

use crate::layout::EventLayout;
use crate::{EventMetadata, MetadataTable, StreamError, TraceClock, TraceInfo, TraceStream};

/// A metadata record as every sink sees it, decoded once when it arrives: the owned record,
/// its payload layout and the runtime provider it belongs to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EventInfo {
    /// The record.
    pub meta: EventMetadata,
    /// Its payload layout; `None` when its field descriptions could not be parsed (the
    /// payload can only be used raw).
    pub layout: Option<EventLayout>,
    /// The runtime provider (runtime, rundown, SampleProfiler) the record belongs to, if any.
    pub clr: Option<ClrProvider>,
}

impl EventInfo {
    /// Decodes `m` once, for every consumer of the stream.
    pub fn from_record(m: &MetadataRecord<'_>) -> EventInfo {
        let provider = crate::metadata::lossy(m.provider_name);
        Self::with_provider(m, provider, ClrProvider::from_name(&m.provider_name))
    }

    fn with_provider(m: &MetadataRecord<'_>, provider: String, clr: Option<ClrProvider>) -> Self {
        EventInfo {
            meta: EventMetadata::with_provider(m, provider),
            layout: if m.fields_malformed {
                None
            } else {
                Some(EventLayout::new(&m.fields))
            },
            clr,
        }
    }
}

/// The last provider a record named, decoded: records come in runs of one provider (the
/// runtime's), so most take their provider's name and kind from here.
#[derive(Debug, Default)]
struct LastProvider {
    raw: Vec<u8>,
    name: String,
    clr: Option<ClrProvider>,
}

impl LastProvider {
    /// The name and runtime provider of `m`'s provider.
    fn of(&mut self, m: &MetadataRecord<'_>) -> (String, Option<ClrProvider>) {
        let raw = m.provider_name.as_bytes();
        if self.raw != raw {
            // Names are bounded by the record (itself within one block).
            self.raw.clear();
            self.raw.extend_from_slice(raw);
            self.name.clear();
            crate::metadata::push_lossy(m.provider_name, &mut self.name);
            self.clr = ClrProvider::from_name(&m.provider_name);
        }
        (self.name.clone(), self.clr)
    }
}

/// What every sink sees beside an item: the shared metadata table, the clock, the parser.
/// Two references: it is built for every event.
pub struct TraceContext<'a> {
    shared: &'a Shared,
    parser: &'a NettraceParser,
}

impl<'a> TraceContext<'a> {
    /// Metadata id -> the record (already holding a record that just arrived).
    #[inline]
    pub fn metadata(&self) -> &'a MetadataTable<Arc<EventInfo>> {
        &self.shared.metadata
    }

    /// The trace's clock, once its header came.
    #[inline]
    pub fn clock(&self) -> Option<&'a TraceClock> {
        self.shared.clock.as_ref()
    }

    /// The trace header, once seen.
    pub fn info(&self) -> Option<&'a TraceInfo> {
        self.shared.info.as_ref()
    }

    /// The parser (offset, format, V4/V5 activity ids of the current event).
    #[inline]
    pub fn parser(&self) -> &'a NettraceParser {
        self.parser
    }

    /// The most records the table holds (a record past it is dropped: not in
    /// [`metadata`](Self::metadata)).
    pub fn max_metadata(&self) -> usize {
        self.shared.max_metadata
    }

    /// The wall time of the event timestamp `ts` on the trace's clock (the Unix epoch before
    /// the header).
    #[inline]
    pub fn time(&self, ts: i64) -> SystemTime {
        match &self.shared.clock {
            Some(c) => c.time(ts),
            None => UNIX_EPOCH,
        }
    }
}

/// A consumer of a parsed trace: sees each item once, borrowed, in stream order.
pub trait TraceSink {
    /// An event, with its metadata record (`None`: its id was never defined).
    fn event(&mut self, event: &Event<'_>, info: Option<&EventInfo>, cx: &TraceContext<'_>);

    /// Any other item: the header, a metadata record (in `cx.metadata` already, unless the
    /// table is full), stacks, a sequence point (the table is flushed after it when it says
    /// so), V6 tables, the end-of-stream object.
    fn item(&mut self, item: &Item<'_>, cx: &TraceContext<'_>) {
        let _ = (item, cx);
    }

    /// The stream is over: `Ok` if it ended with its end-of-stream object, else why not
    /// (cut short, or not parseable past an offset).
    fn end(&mut self, end: &Result<(), StreamError>, cx: &TraceContext<'_>) {
        let _ = (end, cx);
    }
}

impl<S: TraceSink + ?Sized> TraceSink for &mut S {
    #[inline]
    fn event(&mut self, e: &Event<'_>, info: Option<&EventInfo>, cx: &TraceContext<'_>) {
        (**self).event(e, info, cx)
    }
    fn item(&mut self, item: &Item<'_>, cx: &TraceContext<'_>) {
        (**self).item(item, cx)
    }
    fn end(&mut self, end: &Result<(), StreamError>, cx: &TraceContext<'_>) {
        (**self).end(end, cx)
    }
}

impl<S: TraceSink> TraceSink for [S] {
    #[inline]
    fn event(&mut self, e: &Event<'_>, info: Option<&EventInfo>, cx: &TraceContext<'_>) {
        for s in self {
            s.event(e, info, cx);
        }
    }
    fn item(&mut self, item: &Item<'_>, cx: &TraceContext<'_>) {
        for s in self {
            s.item(item, cx);
        }
    }
    fn end(&mut self, end: &Result<(), StreamError>, cx: &TraceContext<'_>) {
        for s in self {
            s.end(end, cx);
        }
    }
}

/// No consumer: the stream is parsed for its end alone (whole, cut short, or malformed at an
/// offset: what [`TraceDispatcher::finish`] returns).
impl TraceSink for () {
    #[inline]
    fn event(&mut self, _: &Event<'_>, _: Option<&EventInfo>, _: &TraceContext<'_>) {}
}

macro_rules! tuple_sink {
    ($($s:ident . $i:tt),+) => {
        /// Each member in turn.
        impl<$($s: TraceSink),+> TraceSink for ($($s,)+) {
            #[inline]
            fn event(&mut self, e: &Event<'_>, info: Option<&EventInfo>, cx: &TraceContext<'_>) {
                $(self.$i.event(e, info, cx);)+
            }
            fn item(&mut self, item: &Item<'_>, cx: &TraceContext<'_>) {
                $(self.$i.item(item, cx);)+
            }
            fn end(&mut self, end: &Result<(), StreamError>, cx: &TraceContext<'_>) {
                $(self.$i.end(end, cx);)+
            }
        }
    };
}
tuple_sink!(A.0, B.1);
tuple_sink!(A.0, B.1, C.2);
tuple_sink!(A.0, B.1, C.2, D.3);
tuple_sink!(A.0, B.1, C.2, D.3, E.4);
tuple_sink!(A.0, B.1, C.2, D.3, E.4, F.5);

/// Distinct metadata records held by default (runtimes write a few thousand; the
/// analyzer's default, [`AnalyzerLimits`](crate::AnalyzerLimits)).
pub const DEFAULT_MAX_METADATA: usize = 100_000;

/// The state items update, apart from the stream so that the stream can hand items to it.
#[derive(Debug)]
struct Shared {
    metadata: MetadataTable<Arc<EventInfo>>,
    max_metadata: usize,
    metadata_dropped: u64,
    clock: Option<TraceClock>,
    info: Option<TraceInfo>,
    last_provider: LastProvider,
}

impl Shared {
    /// Events are nearly every item: their path is inlined into the stream's parse loop, the
    /// rest is not.
    #[inline(always)]
    fn item<S: TraceSink + ?Sized>(
        &mut self,
        item: &Item<'_>,
        parser: &NettraceParser,
        sink: &mut S,
    ) {
        if let Item::Event(e) = item {
            let info = self.metadata.get(e.metadata_id).map(|i| &**i);
            let cx = TraceContext {
                shared: self,
                parser,
            };
            sink.event(e, info, &cx);
            return;
        }
        self.other(item, parser, sink);
    }

    #[inline(never)]
    fn other<S: TraceSink + ?Sized>(
        &mut self,
        item: &Item<'_>,
        parser: &NettraceParser,
        sink: &mut S,
    ) {
        let mut flush = false;
        match item {
            Item::Trace(h) => {
                self.clock = Some(TraceClock::new(h));
                self.info = Some(TraceInfo {
                    key_values: KeyValues::EMPTY,
                    ..*h
                });
            }
            Item::Metadata(m) => {
                // The parser validated the record: it decodes.
                if let Ok(m) = m.record() {
                    if self.metadata.has_room_for(m.metadata_id, self.max_metadata) {
                        let (provider, clr) = self.last_provider.of(&m);
                        let info = EventInfo::with_provider(&m, provider, clr);
                        self.metadata.insert(m.metadata_id, Arc::new(info));
                    } else {
                        self.metadata_dropped += 1;
                    }
                }
            }
            Item::SequencePoint(sp) => flush = sp.flushes_metadata(),
            _ => {}
        }
        let cx = TraceContext {
            shared: self,
            parser,
        };
        sink.item(item, &cx);
        if flush {
            self.metadata.clear();
        }
    }
}

/// One [`TraceStream`] feeding any number of [`TraceSink`]s (a tuple of them, a slice, or
/// one): the stream is parsed once, each metadata record decoded once into the shared table.
/// Memory: one block of the stream and the distinct metadata records (at most
/// [`max_metadata`](Self::with_max_metadata)), never the stream's length.
#[derive(Debug)]
pub struct TraceDispatcher {
    stream: TraceStream,
    shared: Shared,
}

impl Default for TraceDispatcher {
    fn default() -> Self {
        Self::new()
    }
}

impl TraceDispatcher {
    /// Waiting for the stream's first byte, holding up to [`DEFAULT_MAX_METADATA`] records.
    pub fn new() -> Self {
        Self::with_max_metadata(DEFAULT_MAX_METADATA)
    }

    /// Holding up to `max` distinct metadata records (later ones are dropped and counted:
    /// [`metadata_dropped`](Self::metadata_dropped)).
    pub fn with_max_metadata(max: usize) -> Self {
        TraceDispatcher {
            stream: TraceStream::new(),
            shared: Shared {
                metadata: MetadataTable::new(),
                max_metadata: max,
                metadata_dropped: 0,
                clock: None,
                info: None,
                last_provider: LastProvider::default(),
            },
        }
    }

    /// Parses `data`, the next bytes of the stream, handing every complete item to `sink`
    /// (see [`TraceStream::feed`]: the same items however the stream is cut).
    pub fn feed<S: TraceSink + ?Sized>(
        &mut self,
        data: &[u8],
        sink: &mut S,
    ) -> Result<(), StreamError> {
        let shared = &mut self.shared;
        self.stream
            .feed_with_parser(data, |item, parser| shared.item(item, parser, sink))
    }

    /// Room to read the stream's next bytes into (see [`TraceStream::read_buf`]).
    pub fn read_buf(&mut self) -> Result<&mut [u8], StreamError> {
        self.stream.read_buf()
    }

    /// `n` bytes were read into [`read_buf`](Self::read_buf): parses them.
    pub fn filled<S: TraceSink + ?Sized>(
        &mut self,
        n: usize,
        sink: &mut S,
    ) -> Result<(), StreamError> {
        let shared = &mut self.shared;
        self.stream
            .filled_with_parser(n, |item, parser| shared.item(item, parser, sink))
    }

    /// The stream is over: delivers what is left, then tells every sink how it ended
    /// ([`TraceSink::end`]) and returns it (see [`TraceStream::finish`]).
    pub fn finish<S: TraceSink + ?Sized>(&mut self, sink: &mut S) -> Result<(), StreamError> {
        let shared = &mut self.shared;
        let end = self
            .stream
            .finish_with_parser(|item, parser| shared.item(item, parser, &mut *sink));
        let cx = TraceContext {
            shared: &self.shared,
            parser: self.stream.parser(),
        };
        sink.end(&end, &cx);
        end
    }

    /// The stream driver (bytes fed, buffer peak, end of stream seen, the error).
    pub fn stream(&self) -> &TraceStream {
        &self.stream
    }

    /// The shared metadata table.
    pub fn metadata(&self) -> &MetadataTable<Arc<EventInfo>> {
        &self.shared.metadata
    }

    /// Metadata records dropped because the table was full.
    pub fn metadata_dropped(&self) -> u64 {
        self.shared.metadata_dropped
    }

    /// The trace's clock, once its header came.
    pub fn clock(&self) -> Option<TraceClock> {
        self.shared.clock
    }

    /// The trace header, once seen.
    pub fn info(&self) -> Option<&TraceInfo> {
        self.shared.info.as_ref()
    }
}

/// Lost events as a sink: sequence-number gaps of every event and sequence point.
impl TraceSink for crate::LostEvents {
    #[inline]
    fn event(&mut self, e: &Event<'_>, _: Option<&EventInfo>, _: &TraceContext<'_>) {
        self.on_event(e.capture_thread_id, e.sequence_number);
    }
    fn item(&mut self, item: &Item<'_>, _: &TraceContext<'_>) {
        if let Item::SequencePoint(sp) = item {
            for t in sp.threads() {
                self.on_sequence_point(t.thread_id, t.sequence_number);
            }
        }
    }
}
