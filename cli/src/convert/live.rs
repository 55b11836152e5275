//! `dsipc trace --format ...`: the profile built while the stream arrives (no second pass
//! over the file), written beside the `.nettrace` when the session ends.

use std::io::{self, Write};
use std::path::{Path, PathBuf};

use dsipc::nettrace::{NettraceError, NettraceParser, Status};
use dsipc_std::nettrace::TraceAnalyzer;

use super::analyze::{unix_nanos, Analysis, Summary, MAX_BLOCK};
use super::output::Output;
use super::{write_profile, Format, Selection};

/// A `Write` that passes every byte to `inner` (the `.nettrace` file) and also parses the
/// stream into a [`TraceAnalyzer`]. A stream the parser rejects is still written whole; the
/// profile then covers what precedes the bad bytes. Memory: one block plus the analyzer's
/// tables.
pub struct LiveProfile<W: Write> {
    inner: W,
    parser: NettraceParser,
    analyzer: TraceAnalyzer,
    buf: Vec<u8>,
    failed: Option<NettraceError>,
    done: bool,
}

impl<W: Write> LiveProfile<W> {
    /// Wraps `inner`.
    pub fn new(inner: W) -> Self {
        LiveProfile {
            inner,
            parser: NettraceParser::with_max_block_size(MAX_BLOCK),
            analyzer: TraceAnalyzer::new(),
            buf: Vec::new(),
            failed: None,
            done: false,
        }
    }

    fn feed(&mut self, data: &[u8]) {
        if self.failed.is_some() || self.done {
            return;
        }
        self.buf.extend_from_slice(data);
        let mut start = 0;
        loop {
            match self.parser.handle_input(&self.buf[start..]) {
                Ok(h) => match h.status {
                    Status::Item(item) => {
                        self.analyzer.on_item(&item);
                        start += h.consumed;
                    }
                    Status::Partial { .. } => break,
                    Status::Done => {
                        self.done = true;
                        break;
                    }
                },
                Err(e) => {
                    self.failed = Some(e);
                    break;
                }
            }
        }
        self.buf.drain(..start);
        if self.failed.is_some() || self.done {
            self.buf = Vec::new();
        }
    }

    /// Events parsed so far.
    pub fn events(&self) -> u64 {
        self.analyzer.events()
    }

    /// Samples parsed so far.
    pub fn samples(&self) -> u64 {
        self.analyzer.samples()
    }

    /// Events lost so far (sequence gaps).
    pub fn lost(&self) -> u64 {
        self.analyzer.lost_events()
    }

    /// The inner writer and the analysis of what arrived.
    pub fn finish(mut self) -> (W, Analysis) {
        let mut problem = self.failed.map(|e| e.to_string());
        if problem.is_none() && !self.done {
            if let Err(e) = self.parser.handle_eof() {
                problem = Some(format!("{} (the stream ended early)", e));
            }
        }
        let info = self.analyzer.info().copied();
        let summary = Summary {
            events: self.analyzer.events(),
            lost: self.analyzer.lost_events(),
            methods: self.analyzer.methods(),
            info,
            start_unix_nanos: info.as_ref().map_or(0, unix_nanos),
        };
        let profile = self.analyzer.finish_profile(false);
        (
            self.inner,
            Analysis {
                profile,
                summary,
                problem,
            },
        )
    }
}

impl<W: Write> Write for LiveProfile<W> {
    fn write(&mut self, data: &[u8]) -> io::Result<usize> {
        let n = self.inner.write(data)?;
        self.feed(&data[..n]);
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
}

/// The profile format named by `dsipc trace --format` (jsonl is not a profile).
pub fn trace_format(s: &str) -> Result<&'static str, String> {
    match s {
        "speedscope" => Ok("speedscope"),
        "folded" => Ok("folded"),
        "pprof" => Ok("pprof"),
        other => Err(format!(
            "--format wants speedscope, folded or pprof, not {:?}",
            other
        )),
    }
}

/// Writes the profile of `a` beside `nettrace` (same stem, the format's extension); returns
/// the path.
pub fn write_beside(nettrace: &Path, format: &str, a: &Analysis) -> Result<PathBuf, String> {
    let format = match format {
        "folded" => Format::Folded,
        "pprof" => Format::Pprof,
        _ => Format::Speedscope,
    };
    let dest = super::output::default_name(nettrace, format.extension());
    let dest_s = dest.to_string_lossy().into_owned();
    let mut out = Output::create(&dest_s).map_err(|e| format!("{}: {}", dest_s, e))?;
    let name = nettrace
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let sel = Selection {
        managed_only: false,
    };
    if let Err(e) = write_profile(format, a, sel, &name, out.writer()) {
        out.abandon();
        return Err(e);
    }
    out.commit().map_err(|e| format!("{}: {}", dest_s, e))?;
    Ok(dest)
}

/// A `Write` over a [`LiveProfile`] that publishes its counts after each write (for the
/// progress line, which the copy loop's callback draws while the writer is borrowed).
pub struct Counting<'a, W: Write> {
    /// The live profile.
    pub inner: &'a mut LiveProfile<W>,
    /// Events parsed.
    pub events: &'a std::cell::Cell<u64>,
    /// Samples parsed.
    pub samples: &'a std::cell::Cell<u64>,
    /// Events lost.
    pub lost: &'a std::cell::Cell<u64>,
}

impl<'a, W: Write> Write for Counting<'a, W> {
    fn write(&mut self, data: &[u8]) -> io::Result<usize> {
        let n = self.inner.write(data)?;
        self.events.set(self.inner.events());
        self.samples.set(self.inner.samples());
        self.lost.set(self.inner.lost());
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
}
