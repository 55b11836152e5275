//! Flame graphs: the folded stacks of [`super::folded`] drawn as an SVG by inferno (the Rust
//! port of Brendan Gregg's flamegraph.pl), titled with the process and the time span.

use std::borrow::Cow;
use std::io::{self, Write};
use std::time::{Duration, SystemTime};

use inferno::flamegraph::{self, Options};

use crate::Profile;

use super::{unsafe_char, ProfileMeta, Selection};

/// Writes `profile` (the samples `sel` keeps) as a flame graph SVG. A profile without any
/// sample with a frame is an `InvalidData` error before anything is written.
pub fn write(
    profile: &Profile,
    sel: Selection,
    meta: &ProfileMeta,
    out: &mut dyn Write,
) -> io::Result<()> {
    // The one stack builder: the folded writer's lines. Their size is the profile's distinct
    // stacks (bounded by the analyzer's limits), not the trace's length.
    let mut folded = Vec::new();
    super::folded::write(profile, sel, &mut folded)?;
    if folded.is_empty() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            if sel.managed_only {
                "no managed sample with a stack to draw"
            } else {
                "no sample with a stack to draw"
            },
        ));
    }
    let folded = String::from_utf8_lossy(&folded);
    let lines: Vec<String> = folded.lines().map(|l| drawable(l).into_owned()).collect();
    let mut opt = Options::default();
    opt.title = svg_text(&title(profile, meta)).into_owned();
    opt.name_type = "Method:".into();
    // Colours from the frame names, so the same profile gives the same picture.
    opt.hash = true;
    let mut sink = Sink { out, error: None };
    match flamegraph::from_lines(&mut opt, lines.iter().map(String::as_str), &mut sink) {
        Ok(()) => Ok(()),
        // The writer's own error (a full disk, a closed pipe) as it was.
        Err(_) if sink.error.is_some() => Err(sink.error.take().unwrap()),
        Err(e) => Err(io::Error::new(io::ErrorKind::InvalidData, e.to_string())),
    }
}

/// `dsipc: PROCESS (pid N), START – END (S s)`: the process (its name when the caller gave
/// one, else the profile's name), the trace header's pid, the clock sync time and the end of
/// the last sample. Only the name when the trace had no header.
fn title(profile: &Profile, meta: &ProfileMeta) -> String {
    let who = meta.process.as_deref().unwrap_or(&meta.name);
    let info = match meta.info {
        Some(i) => i,
        None => return format!("dsipc: {}", who),
    };
    let start = crate::sync_time_utc(&info);
    let t = meta.timeline(profile);
    let end_ns = (t.start_offset_ns as f64 + t.duration_ns).max(0.0);
    let end = start
        .checked_add(Duration::from_nanos(end_ns.min(u64::MAX as f64) as u64))
        .unwrap_or(start);
    let (start_text, end_text) = (stamp(start), stamp(end));
    // The end's date only when it differs from the start's.
    let end_text = match (start_text.split_once(' '), end_text.split_once(' ')) {
        (Some((d0, _)), Some((d1, time))) if d0 == d1 => time.to_string(),
        _ => end_text,
    };
    let pid = if info.process_id > 0 {
        format!(" (pid {})", info.process_id)
    } else {
        String::new()
    };
    format!(
        "dsipc: {}{}, {} \u{2013} {} ({:.1} s)",
        who,
        pid,
        start_text,
        end_text,
        end_ns / 1e9
    )
}

/// `yyyy-MM-dd HH:mm:ssZ`, UTC.
fn stamp(t: SystemTime) -> String {
    crate::logs::universal_sortable(t)
}

/// `s` with the characters XML 1.0 forbids (C0 controls, U+FFFE, U+FFFF) and those that
/// drive terminals ([`unsafe_char`]) replaced by U+FFFD: a frame name comes from the trace.
fn svg_text(s: &str) -> Cow<'_, str> {
    let bad = |c: char| unsafe_char(c) || matches!(c, '\u{FFFE}' | '\u{FFFF}');
    if s.chars().any(bad) {
        Cow::Owned(
            s.chars()
                .map(|c| if bad(c) { '\u{FFFD}' } else { c })
                .collect(),
        )
    } else {
        Cow::Borrowed(s)
    }
}

/// A folded line as inferno reads it: [`svg_text`], and a leaf frame that ends in a space
/// and digits gets a no-break space there (inferno would read `Leaf 12 3` as a differential
/// line: 12 samples before, 3 after).
fn drawable(line: &str) -> Cow<'_, str> {
    let line = svg_text(line);
    let (stack, count) = match line.rsplit_once(' ') {
        Some(parts) => parts,
        None => return line,
    };
    let tail_at = match stack.rfind(' ') {
        Some(i) => i,
        None => return line,
    };
    let tail = &stack[tail_at + 1..];
    if !tail.chars().all(|c| c.is_ascii_digit() || c == '.') {
        return line;
    }
    Cow::Owned(format!("{}\u{a0}{} {}", &stack[..tail_at], tail, count))
}

/// The caller's writer, keeping its first error (inferno returns it wrapped in its XML
/// writer's error type).
struct Sink<'a> {
    out: &'a mut dyn Write,
    error: Option<io::Error>,
}

impl Sink<'_> {
    fn keep<T>(&mut self, r: io::Result<T>) -> io::Result<T> {
        r.map_err(|e| {
            let copy = io::Error::new(e.kind(), e.to_string());
            if self.error.is_none() {
                self.error = Some(e);
            }
            copy
        })
    }
}

impl Write for Sink<'_> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let r = self.out.write(buf);
        self.keep(r)
    }

    fn flush(&mut self) -> io::Result<()> {
        let r = self.out.flush();
        self.keep(r)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn drawable_lines_have_no_control_characters_and_no_differential_column() {
        assert_eq!(drawable("a;b(int32) 3"), "a;b(int32) 3");
        assert_eq!(drawable("a;Leaf 12 3"), "a;Leaf\u{a0}12 3");
        assert_eq!(drawable("a;Leaf 1.5 3"), "a;Leaf\u{a0}1.5 3");
        assert_eq!(
            drawable("a\u{1b}[31m;b\u{0}\u{FFFF} 3"),
            "a\u{FFFD}[31m;b\u{FFFD}\u{FFFD} 3"
        );
        assert_eq!(drawable("7"), "7");
    }
}
