//! One streaming pass over a nettrace file: the std layer's [`TraceAnalyzer`] fed by the
//! core parser, with an optional JSON-lines sink for every event.

use std::fs::File;
use std::io::{Read, Write};
use std::path::Path;

use dsipc::nettrace::{Item, NettraceParser};
use dsipc::recv::{Poll, RecvBuffer};
use dsipc_std::nettrace::{Profile, TraceAnalyzer, TraceInfo};

use super::jsonl;

/// Largest block accepted (runtime blocks are far smaller; a hostile size is an error).
pub const MAX_BLOCK: usize = 64 << 20;
/// Initial buffer and read size: 128 KiB holds a runtime block (at most about 100 KB) and
/// stays in the CPU's cache, where 1 MiB cost page faults and cache misses for nothing.
const CHUNK: usize = 1 << 17;

/// Figures of one pass.
#[derive(Debug, Clone, Default)]
pub struct Summary {
    /// Events.
    pub events: u64,
    /// Events lost (sequence gaps).
    pub lost: u64,
    /// Methods known.
    pub methods: usize,
    /// The trace header.
    pub info: Option<TraceInfo>,
    /// Wall-clock start of the trace, ns since the Unix epoch (0 if unknown): pprof's
    /// `time_nanos`, the only reader.
    #[cfg_attr(not(feature = "pprof"), allow(dead_code))]
    pub start_unix_nanos: i64,
}

impl Summary {
    /// Sampling interval in ns (1 ms when the trace does not say).
    pub fn interval_ns(&self) -> u64 {
        match self.info {
            Some(i) if i.sampling_interval_ns > 0 => u64::from(i.sampling_interval_ns),
            _ => 1_000_000,
        }
    }

    /// Sampling interval in ms.
    pub fn interval_ms(&self) -> f64 {
        self.interval_ns() as f64 / 1e6
    }
}

/// The result of a pass.
pub struct Analysis {
    /// The CPU profile.
    pub profile: Profile,
    /// Counts.
    pub summary: Summary,
    /// Why the pass stopped before the end of the stream (truncated or bad bytes), naming
    /// the offset; what precedes it was used.
    pub problem: Option<String>,
}

/// The trace's start as ns since the Unix epoch (0 when unknown or before 1970).
pub fn unix_nanos(i: &TraceInfo) -> i64 {
    dsipc_std::nettrace::sync_time_utc(i)
        .duration_since(std::time::UNIX_EPOCH)
        .ok()
        .and_then(|d| i64::try_from(d.as_nanos()).ok())
        .unwrap_or(0)
}

/// Reads `file` to its end through the parser. `Err` only when nothing usable was read (not
/// a nettrace file, or an I/O error); a stream that breaks off later is `Ok` with `problem`.
pub fn analyze(
    mut file: File,
    input: &Path,
    mut jsonl_out: Option<&mut dyn Write>,
) -> Result<Analysis, String> {
    let mut parser = NettraceParser::with_max_block_size(MAX_BLOCK);
    let mut analyzer = TraceAnalyzer::new();
    // The core's receive loop: reads of up to 128 KiB, growth only to one block plus its
    // framing (the parser refuses a larger block before it is read).
    let mut rx = RecvBuffer::with_limit(vec![0u8; CHUNK], parser.max_needed());
    let mut problem: Option<String> = None;
    let mut line = String::new();
    let mut write_error: Option<std::io::Error> = None;
    loop {
        // The item is handed over where the parser built it: moving it out costs a copy per
        // event.
        let polled = rx.poll_nettrace_with(&mut parser, |item| {
            // The header precedes every event: a copy taken before the item is current.
            let info = match jsonl_out {
                Some(_) => analyzer.info().copied(),
                None => None,
            };
            let meta = analyzer.on_item(item);
            match (jsonl_out.as_mut(), item) {
                (Some(out), Item::Event(e)) => {
                    line.clear();
                    jsonl::event_line(&mut line, e, meta, info.as_ref());
                    out.write_all(line.as_bytes())
                }
                _ => Ok(()),
            }
        });
        match polled {
            Ok(Poll::Event(Ok(()))) => {}
            Ok(Poll::Event(Err(err))) => {
                write_error = Some(err);
                break;
            }
            Ok(Poll::NeedInput) => {
                let spare = match rx.read_buf() {
                    Ok(spare) => spare,
                    Err(e) => {
                        problem = Some(e.to_string());
                        break;
                    }
                };
                match file.read(spare) {
                    Ok(0) => rx.eof(),
                    Ok(n) => rx.filled(n),
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                    Err(e) => return Err(format!("{}: {}", input.display(), e)),
                }
            }
            Ok(Poll::End) => break,
            // The core's messages name the offset ("stream truncated at offset N: ...").
            Err(e) => {
                problem = Some(e.to_string());
                break;
            }
        }
    }
    if let Some(e) = write_error {
        return Err(format!("writing: {}", e));
    }
    let info = analyzer.info().copied();
    if info.is_none() {
        return Err(format!(
            "{}: not a nettrace file: {}",
            input.display(),
            problem.unwrap_or_else(|| "no trace header".into())
        ));
    }
    let summary = Summary {
        events: analyzer.events(),
        lost: analyzer.lost_events(),
        methods: analyzer.methods(),
        info,
        start_unix_nanos: info.as_ref().map_or(0, unix_nanos),
    };
    let profile = analyzer.finish_profile(false);
    Ok(Analysis {
        profile,
        summary,
        problem,
    })
}
