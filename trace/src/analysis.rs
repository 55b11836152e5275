//! One streaming pass over a nettrace file: the trace layer's [`TraceStream`] feeding its
//! [`TraceAnalyzer`], with an optional JSON-lines sink for every event (`dsipc convert` and
//! `dsipc report`). The bytes come from a [`Read`] the caller owns (a file, a pipe); the
//! JSON lines go to a [`Write`] it owns.

use std::fmt;
use std::io::{self, Read, Write};

use dsipc::nettrace::{Item, NettraceParser};

use crate::format::{jsonl, ProfileMeta};
use crate::{AnalyzerLimits, LimitExceeded, Profile, StreamError, TraceAnalyzer, TraceStream};

/// Figures of one pass.
#[derive(Debug, Clone, Default)]
pub struct Summary {
    /// Events.
    pub events: u64,
    /// Events lost (sequence gaps).
    pub lost: u64,
    /// Methods known.
    pub methods: usize,
}

/// The result of a pass.
#[derive(Debug)]
pub struct Analysis {
    /// The CPU profile.
    pub profile: Profile,
    /// What the profile's files say besides it (interval, start time; the name is the
    /// caller's).
    pub meta: ProfileMeta,
    /// Counts.
    pub summary: Summary,
    /// Why the pass stopped before the end of the stream (truncated or bad bytes), naming
    /// the offset; what precedes it was used.
    pub problem: Option<StreamError>,
    /// A limit the trace went past (what came after it was not all used).
    pub limit: Option<LimitExceeded>,
}

/// Why a pass gave nothing usable.
#[derive(Debug)]
#[non_exhaustive]
pub enum AnalysisError {
    /// Reading the input failed.
    Read(io::Error),
    /// Writing the JSON lines failed.
    Write(io::Error),
    /// The input is not a nettrace stream: no trace header came before its end or the
    /// stream's error (when there was one).
    NotNettrace(Option<StreamError>),
}

impl fmt::Display for AnalysisError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AnalysisError::Read(e) => write!(f, "reading the trace: {}", e),
            AnalysisError::Write(e) => write!(f, "writing the events: {}", e),
            AnalysisError::NotNettrace(None) => f.write_str("not a nettrace file: no trace header"),
            AnalysisError::NotNettrace(Some(e)) => write!(f, "not a nettrace file: {}", e),
        }
    }
}

impl std::error::Error for AnalysisError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            AnalysisError::Read(e) | AnalysisError::Write(e) => Some(e),
            AnalysisError::NotNettrace(e) => e.as_ref().map(|e| e as _),
        }
    }
}

/// Reads `input` to its end through the trace layer, every event to `jsonl_out` as a JSON
/// line if given. `Err` only when nothing usable was read (not a nettrace stream, or an
/// I/O error); a stream that breaks off later is `Ok` with [`Analysis::problem`].
pub fn analyze<R: Read>(
    mut input: R,
    mut jsonl_out: Option<&mut dyn Write>,
    limits: AnalyzerLimits,
) -> Result<Analysis, AnalysisError> {
    let mut stream = TraceStream::new();
    let mut analyzer = TraceAnalyzer::with_limits(limits);
    let mut line = String::new();
    let write_error: std::cell::RefCell<Option<io::Error>> = Default::default();
    // Every item goes to the analyzer, every event to the jsonl sink if there is one.
    let mut each = |item: &Item<'_>, parser: &NettraceParser| {
        // The header precedes every event: a copy taken before the item is current.
        let info = match jsonl_out {
            Some(_) => analyzer.info().copied(),
            None => None,
        };
        let meta = analyzer.on_item(item);
        if let (Some(out), Item::Event(e)) = (jsonl_out.as_mut(), item) {
            if write_error.borrow().is_some() {
                return;
            }
            line.clear();
            jsonl::event_line(&mut line, e, parser.activity_ids(), meta, info.as_ref());
            if let Err(e) = out.write_all(line.as_bytes()) {
                *write_error.borrow_mut() = Some(e);
            }
        }
    };
    let mut problem = None;
    loop {
        // Reads straight into the stream's buffer (no copy).
        let spare = match stream.read_buf() {
            Ok(spare) => spare,
            Err(e) => {
                problem = Some(e);
                break;
            }
        };
        let n = match input.read(spare) {
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(AnalysisError::Read(e)),
        };
        let r = if n == 0 {
            stream.finish_with_parser(&mut each)
        } else {
            stream.filled_with_parser(n, &mut each)
        };
        if let Err(e) = r {
            problem = Some(e);
            break;
        }
        if n == 0 || write_error.borrow().is_some() {
            break;
        }
    }
    if let Some(e) = write_error.into_inner() {
        return Err(AnalysisError::Write(e));
    }
    let info = match analyzer.info().copied() {
        Some(info) => info,
        None => return Err(AnalysisError::NotNettrace(problem)),
    };
    let limit = analyzer.limit_error();
    let summary = Summary {
        events: analyzer.events(),
        lost: analyzer.lost_events(),
        methods: analyzer.methods(),
    };
    let profile = analyzer.finish_profile(false);
    Ok(Analysis {
        profile,
        meta: ProfileMeta {
            name: String::new(),
            process: None,
            info: Some(info),
        },
        summary,
        problem,
        limit,
    })
}
