//! The CPU profile's outputs, written to a `Write` the caller owns: folded stacks,
//! speedscope, pprof (feature `pprof`), flame graphs (feature `flamegraph`), and the
//! top-methods report. One writer per format,
//! shared by `dsipc convert`, `dsipc trace --format` and any embedder.

#[cfg(feature = "flamegraph")]
mod flamegraph;
mod folded;
mod json;
pub mod jsonl;
#[cfg(feature = "pprof")]
mod pprof;
pub mod report;
mod speedscope;
mod time;

use std::borrow::Cow;
use std::fmt::Write as _;
use std::io::{self, Write};

use crate::{Profile, SampleKind, TraceInfo};

pub use folded::write as write_folded;
use json::write_json;
pub use json::{json_string, push_json, push_json_string, to_json};
pub use time::{civil, stamp};

/// Which samples a profile output keeps.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Selection {
    /// Drop samples taken in native code or while blocked.
    pub managed_only: bool,
}

impl Selection {
    /// True if samples of `kind` are kept.
    pub fn keeps(&self, kind: SampleKind) -> bool {
        !self.managed_only || kind == SampleKind::Managed
    }
}

/// A CPU profile file format.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ProfileFormat {
    /// Brendan Gregg's folded stacks (`.folded`).
    Folded,
    /// speedscope's JSON (`.speedscope.json`).
    Speedscope,
    /// gzipped profile.proto (`.pb.gz`).
    Pprof,
    /// A flame graph (`.svg`), drawn by inferno.
    Flamegraph,
}

/// One thread's place in a [`Timeline`].
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ThreadTime {
    /// Its first sample, in ns after the profile's first sample.
    pub start_ns: f64,
    /// What one of its samples weighs: its time span over its samples less one (the
    /// header's interval for a thread sampled once).
    pub weight_ns: f64,
}

/// Where a profile's samples fall in time (from [`ProfileMeta::timeline`]).
#[derive(Debug, Clone, PartialEq)]
pub struct Timeline {
    /// Per thread, in `Profile::threads` order.
    pub threads: Vec<ThreadTime>,
    /// The first sample, in ns after the trace's clock sync (its wall-clock start).
    pub start_offset_ns: i64,
    /// From the first sample to the last one, plus one interval, in ns.
    pub duration_ns: f64,
    /// The sampling interval measured on the most sampled thread, in ns.
    pub interval_ns: f64,
}

/// What a profile file says besides the profile itself.
#[derive(Debug, Clone, Default)]
pub struct ProfileMeta {
    /// The profile's name (speedscope shows it; usually the trace's file name).
    pub name: String,
    /// The traced process's name, when the caller knows it (a flame graph's title).
    pub process: Option<String>,
    /// The trace header (sampling interval, clock), if the stream had one.
    pub info: Option<TraceInfo>,
}

impl ProfileMeta {
    /// The sampling interval in ns: the trace's, or 1 ms when it does not say.
    pub fn interval_ns(&self) -> u64 {
        match self.info {
            Some(i) if i.sampling_interval_ns > 0 => u64::from(i.sampling_interval_ns),
            _ => 1_000_000,
        }
    }

    /// Where `profile`'s samples fall in time, from the sample events' timestamps (the
    /// header's interval when the trace has no clock).
    pub fn timeline(&self, profile: &Profile) -> Timeline {
        let interval_ns = self.interval_ns() as f64;
        let freq = self.info.map_or(0, |i| i.qpc_frequency);
        let sampled = profile.threads.iter().filter(|t| t.total() > 0);
        let origin = sampled.clone().map(|t| t.first_timestamp).min();
        let end = sampled.map(|t| t.last_timestamp).max();
        let (origin, end) = match (origin, end) {
            (Some(o), Some(e)) if freq > 0 && e >= o => (o, e),
            _ => {
                // No clock: every sample weighs the header's interval, from time 0.
                let threads = profile
                    .threads
                    .iter()
                    .map(|_| ThreadTime {
                        start_ns: 0.0,
                        weight_ns: interval_ns,
                    })
                    .collect();
                let longest = profile.threads.iter().map(|t| t.total()).max().unwrap_or(0);
                return Timeline {
                    threads,
                    start_offset_ns: 0,
                    duration_ns: longest as f64 * interval_ns,
                    interval_ns,
                };
            }
        };
        let to_ns = |ticks: i64| ticks as f64 * 1e9 / freq as f64;
        let mut busiest = (0u64, interval_ns);
        let threads = profile
            .threads
            .iter()
            .map(|t| {
                let n = t.total();
                let span = to_ns(t.last_timestamp.saturating_sub(t.first_timestamp));
                // A thread is sampled once per round: its samples share its time span.
                let weight_ns = if n > 1 && span > 0.0 {
                    span / (n - 1) as f64
                } else {
                    interval_ns
                };
                if n > busiest.0 {
                    busiest = (n, weight_ns);
                }
                ThreadTime {
                    start_ns: if n > 0 {
                        to_ns(t.first_timestamp.saturating_sub(origin))
                    } else {
                        0.0
                    },
                    weight_ns,
                }
            })
            .collect();
        let sync_qpc = self.info.map_or(0, |i| i.sync_time_qpc);
        Timeline {
            threads,
            start_offset_ns: to_ns(origin.saturating_sub(sync_qpc)) as i64,
            duration_ns: to_ns(end.saturating_sub(origin)) + busiest.1,
            interval_ns: busiest.1,
        }
    }

    /// The trace's wall-clock start in ns since the Unix epoch (0 when unknown).
    pub fn start_unix_nanos(&self) -> i64 {
        self.info.as_ref().map_or(0, |i| {
            crate::sync_time_utc(i)
                .duration_since(std::time::UNIX_EPOCH)
                .ok()
                .and_then(|d| i64::try_from(d.as_nanos()).ok())
                .unwrap_or(0)
        })
    }
}

impl ProfileFormat {
    /// `folded`, `speedscope`, `pprof` or `flamegraph` (an error naming the choices
    /// otherwise, and saying so when this build has no pprof or no flamegraph).
    pub fn parse(s: &str) -> Result<ProfileFormat, String> {
        match s {
            "folded" => Ok(ProfileFormat::Folded),
            "speedscope" => Ok(ProfileFormat::Speedscope),
            "pprof" if cfg!(feature = "pprof") => Ok(ProfileFormat::Pprof),
            "pprof" => Err("this build has no pprof output (feature pprof)".into()),
            "flamegraph" if cfg!(feature = "flamegraph") => Ok(ProfileFormat::Flamegraph),
            "flamegraph" => Err("this build has no flame graph output (feature flamegraph)".into()),
            other => Err(format!(
                "wants speedscope, folded, pprof or flamegraph, not {:?}",
                other
            )),
        }
    }

    /// The file name extension (`.folded`, `.speedscope.json`, `.pb.gz`, `.svg`).
    pub fn extension(self) -> &'static str {
        match self {
            ProfileFormat::Folded => ".folded",
            ProfileFormat::Speedscope => ".speedscope.json",
            ProfileFormat::Pprof => ".pb.gz",
            ProfileFormat::Flamegraph => ".svg",
        }
    }

    /// Writes `profile` (the samples `sel` keeps) in this format to `out`.
    pub fn write(
        self,
        profile: &Profile,
        sel: Selection,
        meta: &ProfileMeta,
        out: &mut dyn Write,
    ) -> io::Result<()> {
        match self {
            ProfileFormat::Folded => folded::write(profile, sel, out).map(|_| ()),
            ProfileFormat::Speedscope => {
                speedscope::write(profile, sel, &meta.name, &meta.timeline(profile), out)
            }
            #[cfg(feature = "pprof")]
            ProfileFormat::Pprof => {
                let timeline = meta.timeline(profile);
                let start = meta
                    .start_unix_nanos()
                    .saturating_add(timeline.start_offset_ns);
                pprof::write(profile, sel, &timeline, start, out)
            }
            #[cfg(not(feature = "pprof"))]
            ProfileFormat::Pprof => Err(io::Error::new(
                io::ErrorKind::Unsupported,
                "this build has no pprof output (feature pprof)",
            )),
            #[cfg(feature = "flamegraph")]
            ProfileFormat::Flamegraph => flamegraph::write(profile, sel, meta, out),
            #[cfg(not(feature = "flamegraph"))]
            ProfileFormat::Flamegraph => Err(io::Error::new(
                io::ErrorKind::Unsupported,
                "this build has no flame graph output (feature flamegraph)",
            )),
        }
    }
}

/// `digits` (an unsigned integer's decimal digits) with a `,` between each group of three,
/// as dotnet-gcdump's report and dotnet-counters' console show numbers: `1234567` →
/// `1,234,567`.
pub fn group_thousands(digits: &str) -> String {
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// True for characters that move a terminal's cursor, start an escape sequence or reorder
/// text: C0 and C1 controls, DEL, line and paragraph separators, bidirectional overrides.
pub fn unsafe_char(c: char) -> bool {
    c.is_control()
        || matches!(c, '\u{2028}' | '\u{2029}' | '\u{202A}'..='\u{202E}' | '\u{2066}'..='\u{2069}')
}

/// `s` with control characters escaped (`\n`, `\r`, `\t`, `\0`, `\x1b`, `\u{202e}`), so
/// that text a runtime or a file name supplies can neither drive the terminal nor fake
/// extra lines. Borrowed when there is nothing to escape.
pub fn clean(s: &str) -> Cow<'_, str> {
    if !s.chars().any(unsafe_char) {
        return Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(s.len() + 8);
    for c in s.chars() {
        match c {
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\0' => out.push_str("\\0"),
            c if unsafe_char(c) && (c as u32) < 0x100 => {
                let _ = write!(out, "\\x{:02x}", c as u32);
            }
            c if unsafe_char(c) => {
                let _ = write!(out, "\\u{{{:x}}}", c as u32);
            }
            c => out.push(c),
        }
    }
    Cow::Owned(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clean_escapes_controls_only() {
        assert!(matches!(clean("PATH=/usr/bin"), Cow::Borrowed(_)));
        assert_eq!(clean("A=1\nB=2"), "A=1\\nB=2");
        assert_eq!(clean("\x1b[2J\r\0x\t"), "\\x1b[2J\\r\\0x\\t");
        assert_eq!(clean("\u{9b}31m \u{7f}"), "\\x9b31m \\x7f");
        assert_eq!(clean("a\u{202e}b"), "a\\u{202e}b");
        assert_eq!(clean("C:\\Users é"), "C:\\Users é");
    }
}
