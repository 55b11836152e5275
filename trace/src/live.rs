//! A CPU profile built while a trace arrives: [`TraceStream`] feeding a [`TraceAnalyzer`],
//! for `dsipc trace --format`, the tokio `top` example, or an agent of your own. Memory:
//! one block of the stream plus distinct metadata, methods and stacks, never its length.

use crate::format::ProfileMeta;
use crate::{Profile, StackSnapshot, StreamError, TraceAnalyzer, TraceStream};

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

/// An incremental analysis of a nettrace stream fed in slices of any size.
#[derive(Default)]
pub struct LiveProfile {
    stream: TraceStream,
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
        let analyzer = &mut self.analyzer;
        self.stream.feed(data, |item| {
            analyzer.on_item(item);
        })
    }

    /// The stream is over: `Ok` only if it ended with its end-of-stream object (the profile
    /// covers what was parsed either way).
    pub fn finish(&mut self) -> Result<(), StreamError> {
        let analyzer = &mut self.analyzer;
        self.stream.finish(|item| {
            analyzer.on_item(item);
        })
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
        self.stream.error()
    }

    /// The stream driver (bytes fed, buffer peak, end of stream seen).
    pub fn stream(&self) -> &TraceStream {
        &self.stream
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
            info: self.analyzer.info().copied(),
        };
        (self.analyzer.finish_profile(false), meta)
    }

    /// Every thread's latest sample, resolved (see [`StackSnapshot`]).
    pub fn into_stacks(self) -> StackSnapshot {
        self.analyzer.finish_stacks()
    }
}
