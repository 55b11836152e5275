//! `dsipc trace`'s live parse of the stream it writes to a `.nettrace` file: with a profile
//! format asked for, every slice goes into the trace layer's [`LiveProfile`] on the caller's
//! thread; without, a [`LiveCounter`] counts it on a second thread ([`Counting`]), pipelined
//! with the write. [`Live`] is either while the session runs, [`Parsed`] once every byte
//! was fed. (Not a recipe itself: the consumer a trace recipe feeds, such as [`ToFile`]; it
//! reads a clock only to hand a slice that waits too long to its parsing thread.)
//!
//! [`ToFile`]: `dsipc trace`'s recipe, the stream into a file and this parse, and how it
//! ended ([`Traced`], [`Ending`]).

use std::io;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{mpsc, Arc};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use dsipc_trace::{LiveCounter, LiveCounts, LiveProfile};

#[path = "trace_file.rs"]
mod file;
pub use file::{start, Ending, ToFile, Traced, Watch};

/// Without `--format` the stream is counted on a second thread, pipelined with the write:
/// the bytes go there in slices of about this size (large, so that few blocks straddle two
/// slices: the parser reads the others in place)...
const SLICE: usize = 1 << 20;
/// ... at most this many at a time (memory stays bounded: a slower parser slows the reading
/// down, as parsing on this thread would).
const SLICES_QUEUED: usize = 4;
/// A slice not yet full is handed over after this long anyway (the progress line).
const SLICE_DELAY: Duration = Duration::from_millis(100);

/// The stream's counts, parsed on a second thread (in slices of about 1 MiB, at most 4 queued): the same counts, the
/// same end-of-stream decision and the same errors as parsing it here.
pub struct Counting {
    slice: Vec<u8>,
    since: Instant,
    to_parser: Option<mpsc::SyncSender<Vec<u8>>>,
    recycled: mpsc::Receiver<Vec<u8>>,
    shared: Arc<Shared>,
    parser: Option<JoinHandle<LiveCounter>>,
}

/// What the parsing thread shows the progress line.
#[derive(Default)]
struct Shared {
    events: AtomicU64,
    samples: AtomicU64,
    lost: AtomicU64,
    failed: AtomicBool,
}

impl Counting {
    /// Starts the parsing thread (`dsipc-parse`); fails only if it cannot be spawned.
    pub fn start() -> io::Result<Counting> {
        let (to_parser, slices) = mpsc::sync_channel::<Vec<u8>>(SLICES_QUEUED);
        let (recycle, recycled) = mpsc::channel::<Vec<u8>>();
        let shared = Arc::new(Shared::default());
        let seen = Arc::clone(&shared);
        let parser = std::thread::Builder::new()
            .name("dsipc-parse".into())
            .spawn(move || {
                let mut counter = LiveCounter::new();
                for mut slice in slices {
                    let failed = counter.feed(&slice).is_err();
                    let c = counter.counts();
                    seen.events.store(c.events, Ordering::Relaxed);
                    seen.samples.store(c.samples, Ordering::Relaxed);
                    seen.lost.store(c.lost, Ordering::Relaxed);
                    seen.failed.store(failed, Ordering::Relaxed);
                    slice.clear();
                    let _ = recycle.send(slice);
                }
                counter
            })?;
        Ok(Counting {
            slice: Vec::new(),
            since: Instant::now(),
            to_parser: Some(to_parser),
            recycled,
            shared,
            parser: Some(parser),
        })
    }

    /// The next bytes of the stream.
    fn feed(&mut self, data: &[u8]) {
        if self.shared.failed.load(Ordering::Relaxed) {
            // The stream did not parse: later bytes are not the parser's (it only counts
            // them), the error it met is its answer.
            return;
        }
        if self.slice.capacity() == 0 {
            self.slice = self
                .recycled
                .try_recv()
                .unwrap_or_else(|_| Vec::with_capacity(SLICE));
            self.since = Instant::now();
        }
        self.slice.extend_from_slice(data);
        if self.slice.len() + (SLICE >> 3) > SLICE || self.since.elapsed() >= SLICE_DELAY {
            self.hand_over();
        }
    }

    /// Hands a slice waiting for more bytes over once it has waited long enough.
    fn tick(&mut self) {
        if !self.slice.is_empty() && self.since.elapsed() >= SLICE_DELAY {
            self.hand_over();
        }
    }

    fn hand_over(&mut self) {
        let slice = std::mem::take(&mut self.slice);
        if slice.is_empty() {
            return;
        }
        if let Some(tx) = &self.to_parser {
            // Fails only if the parsing thread is gone (it panicked: `finish` says so).
            let _ = tx.send(slice);
        }
    }

    fn counts(&self) -> (LiveCounts, bool) {
        let s = &self.shared;
        (
            LiveCounts {
                events: s.events.load(Ordering::Relaxed),
                samples: s.samples.load(Ordering::Relaxed),
                lost: s.lost.load(Ordering::Relaxed),
            },
            !s.failed.load(Ordering::Relaxed),
        )
    }

    /// Every byte was fed: the parser, once it parsed them all.
    pub fn finish(mut self) -> LiveCounter {
        self.hand_over();
        self.to_parser = None;
        match self.parser.take().map(JoinHandle::join) {
            Some(Ok(counter)) => counter,
            Some(Err(panic)) => std::panic::resume_unwind(panic),
            None => LiveCounter::new(),
        }
    }
}

/// The stream's parser: a profile built here (`--format`), or counts on a second thread.
pub enum Live {
    /// A profile built on this thread (`--format`).
    Profile(Box<LiveProfile>),
    /// Counts made on a second thread.
    Counting(Counting),
}

impl Live {
    /// The next bytes of the stream.
    pub fn feed(&mut self, data: &[u8]) {
        match self {
            Live::Profile(p) => {
                let _ = p.feed(data);
            }
            Live::Counting(c) => c.feed(data),
        }
    }

    /// Hands a slice waiting on the parsing thread's side over once it waited long enough.
    pub fn tick(&mut self) {
        if let Live::Counting(c) = self {
            c.tick();
        }
    }

    /// The counts so far, and whether parsing goes on.
    pub fn progress(&self) -> (LiveCounts, bool) {
        match self {
            Live::Profile(p) => (p.counts(), p.error().is_none()),
            Live::Counting(c) => c.counts(),
        }
    }

    /// Every byte was fed: the parser, once it parsed them all (the parsing thread's, if
    /// it counted them).
    pub fn into_parsed(self) -> Parsed {
        match self {
            Live::Profile(p) => Parsed::Profile(p),
            Live::Counting(c) => Parsed::Counted(Box::new(c.finish())),
        }
    }
}

/// The stream's parser once every byte was fed.
pub enum Parsed {
    /// The profile built while the stream arrived.
    Profile(Box<LiveProfile>),
    /// The stream's counts.
    Counted(Box<LiveCounter>),
}

impl Parsed {
    /// The end of the stream: whether it ended whole.
    pub fn finish(&mut self) -> Result<(), dsipc_trace::StreamError> {
        match self {
            Parsed::Profile(p) => p.finish(),
            Parsed::Counted(c) => c.finish(),
        }
    }

    /// The stream's counts.
    pub fn counts(&self) -> LiveCounts {
        match self {
            Parsed::Profile(p) => p.counts(),
            Parsed::Counted(c) => c.counts(),
        }
    }

    /// The stream's error, if it did not parse or ended cut.
    pub fn error(&self) -> Option<dsipc_trace::StreamError> {
        match self {
            Parsed::Profile(p) => p.error(),
            Parsed::Counted(c) => c.error(),
        }
    }
}
