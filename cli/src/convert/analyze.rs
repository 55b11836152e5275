//! One streaming pass over a nettrace file: the trace layer's [`TraceStream`] feeding its
//! [`TraceAnalyzer`], with an optional JSON-lines sink for every event.

use std::fs::File;
use std::io::{Read, Write};
use std::path::Path;

use dsipc::nettrace::{Item, NettraceParser};
use dsipc_trace::format::ProfileMeta;
use dsipc_trace::{
    AnalyzerLimits, LimitExceeded, Profile, StreamError, TraceAnalyzer, TraceStream,
};

use crate::error::CliError;
use dsipc_trace::format::jsonl;

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

/// Reads `file` to its end through the trace layer. `Err` only when nothing usable was read
/// (not a nettrace file, or an I/O error); a stream that breaks off later is `Ok` with
/// `problem`.
pub fn analyze(
    mut file: File,
    input: &Path,
    mut jsonl_out: Option<&mut dyn Write>,
    limits: AnalyzerLimits,
) -> Result<Analysis, CliError> {
    let mut stream = TraceStream::new();
    let mut analyzer = TraceAnalyzer::with_limits(limits);
    let mut line = String::new();
    let write_error: std::cell::RefCell<Option<std::io::Error>> = Default::default();
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
        let n = match file.read(spare) {
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(CliError::io(format!("reading {}", input.display()), e)),
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
        return Err(CliError::io("", e));
    }
    let info = analyzer.info().copied();
    if info.is_none() {
        return Err(CliError::Failed(format!(
            "{}: not a nettrace file: {}",
            input.display(),
            problem.map_or_else(|| "no trace header".into(), |p| p.to_string())
        )));
    }
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
            info,
        },
        summary,
        problem,
        limit,
    })
}
