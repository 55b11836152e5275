//! A profile built while a trace arrives: `dsipc trace --format F` feeds every slice of the
//! stream it writes to the `.nettrace` file into a [`LiveProfile`], which parses it
//! incrementally (a receive buffer bounded by the parser's maximum block size, compacted;
//! memory bounded by distinct metadata, methods and stacks, never by trace length) and, at
//! the end, writes the profile with the same writers as `dsipc convert`.

use std::path::{Path, PathBuf};

use dsipc::nettrace::NettraceParser;
use dsipc::recv::{Poll, RecvBuffer};
use dsipc_std::nettrace::TraceAnalyzer;

use super::analyze::MAX_BLOCK;
use super::output::{self, Output};
use super::Selection;

/// An empty receive buffer for `parser`'s stream, growing as bytes arrive up to one block
/// plus its framing.
fn new_rx(parser: &NettraceParser) -> RecvBuffer<Vec<u8>> {
    RecvBuffer::with_limit(Vec::new(), parser.max_needed())
}

/// The profile formats `dsipc trace --format` writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProfileFormat {
    /// Brendan Gregg's folded stacks (`.folded`).
    Folded,
    /// speedscope's JSON (`.speedscope.json`).
    Speedscope,
    /// gzipped profile.proto (`.pb.gz`).
    Pprof,
}

impl ProfileFormat {
    /// `speedscope`, `folded` or `pprof`.
    pub fn parse(s: &str) -> Result<ProfileFormat, String> {
        match s {
            "folded" => Ok(ProfileFormat::Folded),
            "speedscope" => Ok(ProfileFormat::Speedscope),
            "pprof" if cfg!(feature = "pprof") => Ok(ProfileFormat::Pprof),
            "pprof" => Err(
                "this dsipc was built without pprof output (the Windows build leaves it out)"
                    .into(),
            ),
            other => Err(format!(
                "--format wants speedscope, folded or pprof, not {:?}",
                other
            )),
        }
    }

    /// The file name extension, as `dsipc convert` names its outputs.
    pub fn extension(self) -> &'static str {
        match self {
            ProfileFormat::Folded => ".folded",
            ProfileFormat::Speedscope => ".speedscope.json",
            ProfileFormat::Pprof => ".pb.gz",
        }
    }

    /// Where the profile of the trace at `trace` goes: the same stem, this extension.
    pub fn destination(self, trace: &Path) -> PathBuf {
        output::default_name(trace, self.extension())
    }
}

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

/// An incremental parse of a live nettrace stream.
pub struct LiveProfile {
    parser: NettraceParser,
    analyzer: TraceAnalyzer,
    /// Received bytes not yet consumed (the core's receive loop, bounded by one block).
    rx: RecvBuffer<Vec<u8>>,
    /// Bytes fed so far.
    fed: u64,
    /// Why parsing stopped (the stream offset is in the text).
    problem: Option<String>,
    /// The problem is that the stream ended early (not bad bytes).
    truncated: bool,
    /// Largest the receive buffer ever held (bytes), for the memory figures.
    peak_buffer: usize,
}

impl Default for LiveProfile {
    fn default() -> Self {
        Self::new()
    }
}

impl LiveProfile {
    /// A parser waiting for the stream's first byte.
    pub fn new() -> Self {
        let parser = NettraceParser::with_max_block_size(MAX_BLOCK);
        LiveProfile {
            rx: new_rx(&parser),
            parser,
            analyzer: TraceAnalyzer::new(),
            fed: 0,
            problem: None,
            truncated: false,
            peak_buffer: 0,
        }
    }

    /// Parses `data`, the next bytes of the stream. After a parse error it only counts bytes:
    /// the error is kept for [`LiveProfile::problem`]. Bytes after the end-of-stream object
    /// are the parser's error (`TrailingData`), like any other bad byte.
    pub fn feed(&mut self, data: &[u8]) {
        self.fed += data.len() as u64;
        if self.problem.is_some() || data.is_empty() {
            return;
        }
        let mut rest = data;
        while !rest.is_empty() {
            match self.rx.push(rest) {
                Ok(n) => rest = &rest[n..],
                Err(e) => {
                    self.problem = Some(e.to_string());
                    return;
                }
            }
            self.peak_buffer = self.peak_buffer.max(self.rx.capacity());
            if let Err(e) = self.parse() {
                self.problem = Some(e);
                return;
            }
        }
        // A long stream of small partial blocks must not keep a large allocation around.
        if self.rx.pending().is_empty() && self.rx.capacity() > (1 << 20) {
            self.rx = new_rx(&self.parser);
        }
    }

    /// Parses every complete item buffered, until more input is needed or the parser is done
    /// (it is asked again when more bytes come: they are its to judge).
    fn parse(&mut self) -> Result<(), String> {
        let analyzer = &mut self.analyzer;
        loop {
            // Handed over where the parser built it: no copy of the item.
            match self
                .rx
                .poll_nettrace_with(&mut self.parser, |item| analyzer.on_item(item))
            {
                Ok(Poll::Event(_)) => {}
                Ok(Poll::NeedInput) | Ok(Poll::End) => return Ok(()),
                Err(e) => return Err(e.to_string()),
            }
        }
    }

    /// What was parsed so far.
    pub fn counts(&self) -> LiveCounts {
        LiveCounts {
            events: self.analyzer.events(),
            samples: self.analyzer.samples(),
            lost: self.analyzer.lost_events(),
        }
    }

    /// Why parsing stopped early, naming the stream offset (None while all is well).
    pub fn problem(&self) -> Option<&str> {
        self.problem.as_deref()
    }

    /// True if the stream ended before its end-of-stream object (and parsed until then).
    pub fn truncated(&self) -> bool {
        self.truncated
    }

    /// The largest capacity the receive buffer reached, in bytes.
    pub fn peak_buffer(&self) -> usize {
        self.peak_buffer
    }

    /// The stream ended: notes a missing end of stream as the problem (the profile still
    /// covers what was parsed) and returns the final counts.
    pub fn end(&mut self) -> LiveCounts {
        if self.problem.is_none() && !self.parser.is_done() {
            self.truncated = true;
            let unparsed = self.rx.pending().len();
            self.rx.eof();
            let ended = match self.rx.poll_nettrace_with(&mut self.parser, |_| ()) {
                Err(e) => Err(e.to_string()),
                Ok(_) => Ok(()),
            };
            self.problem = Some(match ended {
                Err(e) => format!("{} (the trace is truncated)", e),
                Ok(()) => format!(
                    "the stream ended at offset {} without its end-of-stream object (the trace is truncated; {} bytes of a partial block unparsed)",
                    self.fed, unparsed
                ),
            });
        }
        self.counts()
    }

    /// True if the trace header was parsed (there is something to profile).
    pub fn has_header(&self) -> bool {
        self.analyzer.info().is_some()
    }

    /// Writes the profile of what was parsed to `dest` (a temporary file beside it, renamed
    /// into place), as `dsipc convert` would; `name` titles a speedscope profile. Returns a
    /// one-line summary of what was written.
    pub fn write(
        self,
        format: ProfileFormat,
        sel: Selection,
        dest: &Path,
        name: &str,
    ) -> Result<String, String> {
        let info = self.analyzer.info().copied();
        let interval_ns = match info {
            Some(i) if i.sampling_interval_ns > 0 => u64::from(i.sampling_interval_ns),
            _ => 1_000_000,
        };
        let profile = self.analyzer.finish_profile(false);
        let what = format!(
            "{} samples, {} stacks, {} frames ({} of {} addresses unresolved)",
            profile.total_samples(),
            profile.stacks.len(),
            profile.frames.len(),
            profile.unresolved_ips,
            profile.distinct_ips
        );
        let shown = dest.display().to_string();
        let mut out = Output::create(&dest.to_string_lossy())
            .map_err(|e| format!("cannot write {}: {}", shown, e))?;
        let written = {
            let w = out.writer();
            match format {
                ProfileFormat::Folded => super::folded::write(&profile, sel, w).map(|_| ()),
                ProfileFormat::Speedscope => {
                    super::speedscope::write(&profile, sel, name, interval_ns as f64 / 1e6, w)
                }
                #[cfg(feature = "pprof")]
                ProfileFormat::Pprof => {
                    let start = info.as_ref().map_or(0, super::analyze::unix_nanos);
                    super::pprof::write(&profile, sel, interval_ns, start, w)
                }
                #[cfg(not(feature = "pprof"))]
                ProfileFormat::Pprof => Err(std::io::Error::new(
                    std::io::ErrorKind::Other,
                    "built without pprof output",
                )),
            }
        };
        if let Err(e) = written {
            out.abandon();
            return Err(format!("cannot write {}: {}", shown, e));
        }
        out.commit()
            .map_err(|e| format!("cannot write {}: {}", shown, e))?;
        Ok(what)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_and_destinations() {
        assert_eq!(
            ProfileFormat::parse("speedscope")
                .unwrap()
                .destination(Path::new("d/x.nettrace")),
            Path::new("d/x.speedscope.json")
        );
        assert_eq!(
            ProfileFormat::parse("folded")
                .unwrap()
                .destination(Path::new("x.nettrace")),
            Path::new("x.folded")
        );
        assert!(ProfileFormat::parse("jsonl").is_err());
    }

    #[test]
    fn garbage_is_a_problem_naming_an_offset_and_later_bytes_are_only_counted() {
        let mut p = LiveProfile::new();
        p.feed(b"this is not a nettrace stream at all");
        let problem = p.problem().expect("a problem").to_string();
        assert!(problem.contains("offset"), "{}", problem);
        p.feed(&[0u8; 1000]);
        assert_eq!(p.problem(), Some(problem.as_str()));
        assert_eq!(p.counts(), LiveCounts::default());
        assert!(!p.has_header());
    }

    /// The committed .NET 8 capture fed in slices of every size gives the same counts and
    /// the same folded profile; the receive buffer holds at most a partial block.
    #[test]
    fn slicing_does_not_change_the_profile_and_the_buffer_stays_small() {
        // The repository's capture, found above the building crate (cli/, or the Windows
        // workspace's windows/pipe-tests/, which compiles this file too).
        let trace = Path::new(env!("CARGO_MANIFEST_DIR"))
            .ancestors()
            .map(|d| d.join("tests/data/nettrace/net8.0.4-busy.nettrace"))
            .find(|p| p.is_file())
            .expect("tests/data/nettrace/net8.0.4-busy.nettrace above the crate");
        let bytes = std::fs::read(&trace).unwrap();
        let dir = std::env::temp_dir().join(format!("dsipc-live-unit-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let mut outputs = Vec::new();
        for slice in [1usize, 13, 4096, bytes.len()] {
            let mut p = LiveProfile::new();
            for chunk in bytes.chunks(slice) {
                p.feed(chunk);
            }
            let counts = p.end();
            assert_eq!(p.problem(), None, "slice {}", slice);
            assert!(counts.samples > 0 && counts.events > counts.samples);
            if slice < 4096 {
                assert!(p.peak_buffer() <= 256 << 10, "{}", p.peak_buffer());
            }
            let dest = dir.join(format!("{}.folded", slice));
            let sel = Selection {
                managed_only: false,
            };
            p.write(ProfileFormat::Folded, sel, &dest, "t").unwrap();
            outputs.push((counts, std::fs::read(&dest).unwrap()));
        }
        assert!(!outputs[0].1.is_empty());
        for o in &outputs[1..] {
            assert_eq!(o, &outputs[0]);
        }
        std::fs::remove_dir_all(&dir).unwrap();

        // Bytes after the end-of-stream object are the parser's error, naming their offset,
        // in the same feed or a later one; a stream cut short is truncated.
        for split in [bytes.len(), bytes.len() - 1] {
            let mut p = LiveProfile::new();
            p.feed(&bytes[..split]);
            p.feed(&[bytes[bytes.len() - 1], 0xAA, 0xBB][split + 1 - bytes.len()..]);
            p.end();
            let problem = p.problem().expect("trailing bytes are a problem");
            assert!(
                problem.contains(&format!("offset {}", bytes.len())),
                "{}",
                problem
            );
            assert!(!p.truncated());
        }
        let mut p = LiveProfile::new();
        p.feed(&bytes[..bytes.len() - 1]);
        p.end();
        assert!(p.truncated(), "{:?}", p.problem());
    }

    #[test]
    fn an_empty_stream_is_truncated() {
        let mut p = LiveProfile::new();
        p.end();
        assert!(
            p.problem().unwrap().contains("truncated"),
            "{:?}",
            p.problem()
        );
    }
}
