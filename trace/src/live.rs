//! A CPU profile built while a trace arrives: a [`TraceDispatcher`] feeding a [`TraceAnalyzer`],
//! for `dsipc trace --format`, the tokio `top` example, or an agent of your own. Memory:
//! one block of the stream plus distinct metadata, methods and stacks, never its length.

use dsipc::nettrace::{Event, Item};

use crate::analyzer::Role;
use crate::format::ProfileMeta;
use crate::hash::FxHashMap;
use crate::{
    AnalyzerLimits, EventInfo, LostEvents, Profile, StackSnapshot, StreamError, TraceAnalyzer,
    TraceContext, TraceDispatcher, TraceSink, TraceStream,
};

/// Counters of what was parsed so far.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LiveCounts {
    /// Events parsed.
    pub events: u64,
    /// CPU samples among them.
    pub samples: u64,
    /// Events lost (sequence-number gaps).
    pub lost: u64,
}

/// An incremental analysis of a nettrace stream fed in slices of any size: a
/// [`TraceDispatcher`] feeding a [`TraceAnalyzer`].
#[derive(Default)]
pub struct LiveProfile {
    dispatcher: TraceDispatcher,
    analyzer: TraceAnalyzer,
}

impl LiveProfile {
    /// Waiting for the stream's first byte.
    pub fn new() -> Self {
        Self::default()
    }

    /// Parses `data`, the next bytes of the stream. After an error (returned, and kept for
    /// [`error`](Self::error)) bytes are only counted.
    pub fn feed(&mut self, data: &[u8]) -> Result<(), StreamError> {
        self.dispatcher.feed(data, &mut self.analyzer)
    }

    /// The stream is over: `Ok` only if it ended with its end-of-stream object (the profile
    /// covers what was parsed either way).
    pub fn finish(&mut self) -> Result<(), StreamError> {
        self.dispatcher.finish(&mut self.analyzer)
    }

    /// What was parsed so far.
    pub fn counts(&self) -> LiveCounts {
        LiveCounts {
            events: self.analyzer.events(),
            samples: self.analyzer.samples(),
            lost: self.analyzer.lost_events(),
        }
    }

    /// The error that stopped parsing (naming its offset), if any.
    pub fn error(&self) -> Option<StreamError> {
        self.dispatcher.stream().error()
    }

    /// The stream driver (bytes fed, buffer peak, end of stream seen).
    pub fn stream(&self) -> &TraceStream {
        self.dispatcher.stream()
    }

    /// The analyzer (header, counts per provider, methods).
    pub fn analyzer(&self) -> &TraceAnalyzer {
        &self.analyzer
    }

    /// The profile of what was parsed (every sample: the writers select), and what its files
    /// say besides it (`name` titles it).
    pub fn into_profile(self, name: &str) -> (Profile, ProfileMeta) {
        let meta = ProfileMeta {
            name: name.to_string(),
            process: None,
            info: self.analyzer.info().copied(),
        };
        (self.analyzer.finish_profile(false), meta)
    }

    /// Every thread's latest sample, resolved (see [`StackSnapshot`]).
    pub fn into_stacks(self) -> StackSnapshot {
        self.analyzer.finish_stacks()
    }
}

/// What [`LiveCounter`] keeps: the counts of a [`TraceAnalyzer`] with default limits, without
/// what only a profile needs (symbols, stacks, per-provider tables); the records come from
/// the dispatcher's table (its limit is the analyzer's default).
#[derive(Default)]
struct Counter {
    limits: AnalyzerLimits,
    lost: LostEvents,
    events: u64,
    samples: u64,
    /// Sampled threads (the analyzer's thread limit).
    threads: FxHashMap<u64, ()>,
    /// A profile limit was passed: the analyzer stops counting samples there.
    limited: bool,
}

impl TraceSink for Counter {
    #[inline(always)]
    fn event(&mut self, e: &Event<'_>, info: Option<&EventInfo>, _: &TraceContext<'_>) {
        self.events += 1;
        self.lost.on_event(e.capture_thread_id, e.sequence_number);
        if info.map_or(false, |i| Role::of(i) == Role::Sample) {
            self.on_sample(e.thread_id);
        }
    }

    /// As [`TraceAnalyzer::on_item`] does for everything but events and metadata.
    #[inline(never)]
    fn item(&mut self, item: &Item<'_>, _: &TraceContext<'_>) {
        match item {
            // The analyzer's stack-frame limit.
            Item::Stacks(b)
                if !self.limited
                    && b.iter()
                        .any(|s| s.len() > self.limits.profile.max_stack_frames) =>
            {
                self.limited = true;
            }
            Item::SequencePoint(sp) => {
                for t in sp.threads() {
                    self.lost.on_sequence_point(t.thread_id, t.sequence_number);
                }
            }
            _ => {}
        }
    }
}

impl Counter {
    #[inline(never)]
    fn on_sample(&mut self, thread: u64) {
        if self.limited {
            return;
        }
        if !self.threads.contains_key(&thread) {
            if self.threads.len() >= self.limits.profile.max_threads {
                self.limited = true;
                return;
            }
            self.threads.insert(thread, ());
        }
        self.samples += 1;
    }
}

/// The counts of a nettrace stream fed in slices of any size (what `dsipc trace` shows
/// without `--format`): the same [`LiveCounts`] as a [`LiveProfile`] of the same bytes, the
/// same end-of-stream decision and the same errors, without building a profile. Memory: one
/// block of the stream, the metadata ids, capture and sampled threads.
#[derive(Default)]
pub struct LiveCounter {
    dispatcher: TraceDispatcher,
    counter: Counter,
}

impl LiveCounter {
    /// Waiting for the stream's first byte.
    pub fn new() -> Self {
        Self::default()
    }

    /// Parses `data`, the next bytes of the stream. After an error (returned, and kept for
    /// [`error`](Self::error)) bytes are only counted.
    pub fn feed(&mut self, data: &[u8]) -> Result<(), StreamError> {
        self.dispatcher.feed(data, &mut self.counter)
    }

    /// The stream is over: `Ok` only if it ended with its end-of-stream object.
    pub fn finish(&mut self) -> Result<(), StreamError> {
        self.dispatcher.finish(&mut self.counter)
    }

    /// What was parsed so far.
    pub fn counts(&self) -> LiveCounts {
        LiveCounts {
            events: self.counter.events,
            samples: self.counter.samples,
            lost: self.counter.lost.lost(),
        }
    }

    /// The error that stopped parsing (naming its offset), if any.
    pub fn error(&self) -> Option<StreamError> {
        self.dispatcher.stream().error()
    }

    /// The stream driver (bytes fed, buffer peak, end of stream seen).
    pub fn stream(&self) -> &TraceStream {
        self.dispatcher.stream()
    }
}
