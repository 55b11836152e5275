//! The one JSON writer of the trace layer and the CLI: serde_json over `#[derive(Serialize)]`
//! types, compact, with strings escaped so that JSON read on a terminal cannot drive it and
//! numbers written as Rust prints them (`1`, not `1.0`; dotnet-monitor's and the dotnet
//! tools' JSON has no `.0` either).

use std::io;

use serde::Serialize;
use serde_json::ser::{CharEscape, Formatter};

use super::unsafe_char;

/// `value` as compact JSON (see [`push_json`]).
pub fn to_json<T: Serialize + ?Sized>(value: &T) -> String {
    let mut out = String::new();
    push_json(&mut out, value);
    out
}

/// Appends `value` as compact JSON. Every control character (C0, DEL, C1), the line
/// separators and the bidirectional overrides in a string are escaped as `\uXXXX` (valid
/// JSON either way); floating-point numbers are written as Rust's `{}` prints them, `null`
/// when not finite. A value whose `Serialize` fails (a map with keys that are not strings:
/// none of the tree's types) appends `null` instead of part of it.
pub fn push_json<T: Serialize + ?Sized>(out: &mut String, value: &T) {
    let len = out.len();
    let mut ser = serde_json::Serializer::with_formatter(StringWriter(out), Terminal);
    if value.serialize(&mut ser).is_err() {
        out.truncate(len);
        out.push_str("null");
    }
}

/// Writes `value` to `out` as [`push_json`] appends it (a file too large to build in memory).
pub(crate) fn write_json<W: io::Write, T: Serialize + ?Sized>(out: W, value: &T) -> io::Result<()> {
    let mut ser = serde_json::Serializer::with_formatter(out, Terminal);
    value.serialize(&mut ser).map_err(io::Error::from)
}

/// Appends `s` as a JSON string literal (quotes included), escaped as [`push_json`] does.
pub fn push_json_string(out: &mut String, s: &str) {
    // Most strings (names, messages) need no escape: copied as they are, which keeps
    // `convert --format jsonl` as fast as its hand-written escaping was (the serializer
    // for every string cost it 12-15% CPU on the PerfView samples).
    if !s.chars().any(|c| c == '"' || c == '\\' || unsafe_char(c)) {
        out.reserve(s.len() + 2);
        out.push('"');
        out.push_str(s);
        out.push('"');
        return;
    }
    push_json(out, s)
}

/// `s` as a JSON string literal (see [`push_json_string`]).
pub fn json_string(s: &str) -> String {
    let mut out = String::new();
    push_json_string(&mut out, s);
    out
}

/// serde_json's output appended to a `String`: it writes whole UTF-8 pieces (string
/// fragments split at characters, escapes, punctuation), each checked here.
struct StringWriter<'a>(&'a mut String);

impl io::Write for StringWriter<'_> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let s =
            std::str::from_utf8(buf).map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
        self.0.push_str(s);
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// serde_json's compact formatter with the terminal-safe string escapes and Rust's float
/// formatting.
struct Terminal;

impl Formatter for Terminal {
    fn write_string_fragment<W: ?Sized + io::Write>(
        &mut self,
        w: &mut W,
        fragment: &str,
    ) -> io::Result<()> {
        // serde_json has escaped `"`, `\` and C0 already; DEL, C1 and the rest are here.
        let mut start = 0;
        for (i, c) in fragment.char_indices() {
            if unsafe_char(c) {
                w.write_all(&fragment.as_bytes()[start..i])?;
                write!(w, "\\u{:04x}", c as u32)?;
                start = i + c.len_utf8();
            }
        }
        w.write_all(&fragment.as_bytes()[start..])
    }

    fn write_char_escape<W: ?Sized + io::Write>(
        &mut self,
        w: &mut W,
        escape: CharEscape,
    ) -> io::Result<()> {
        let short: &[u8] = match escape {
            CharEscape::Quote => b"\\\"",
            CharEscape::ReverseSolidus => b"\\\\",
            CharEscape::Solidus => b"\\/",
            CharEscape::LineFeed => b"\\n",
            CharEscape::CarriageReturn => b"\\r",
            CharEscape::Tab => b"\\t",
            CharEscape::Backspace => return w.write_all(b"\\u0008"),
            CharEscape::FormFeed => return w.write_all(b"\\u000c"),
            CharEscape::AsciiControl(b) => return write!(w, "\\u{:04x}", b),
        };
        w.write_all(short)
    }

    fn write_f64<W: ?Sized + io::Write>(&mut self, w: &mut W, value: f64) -> io::Result<()> {
        write!(w, "{}", value)
    }

    fn write_f32<W: ?Sized + io::Write>(&mut self, w: &mut W, value: f32) -> io::Result<()> {
        write!(w, "{}", value)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_strings_escape_everything_that_could_drive_a_terminal() {
        assert_eq!(json_string("a\"b\\c/"), r#""a\"b\\c/""#);
        assert_eq!(json_string("\n\r\t\u{8}\u{c}"), r#""\n\r\t\u0008\u000c""#);
        assert_eq!(json_string("\u{1b}[2J"), r#""\u001b[2J""#);
        assert_eq!(
            json_string("x\u{7f}\u{9b}\u{2028}\u{202e}y"),
            r#""x\u007f\u009b\u2028\u202ey""#
        );
        assert_eq!(json_string("Regex.Match(é😀)"), "\"Regex.Match(é😀)\"");
        // Inside derived types too (the serializer's path, not json_string's copy).
        assert_eq!(
            to_json(&["a\u{1b}\u{7f}\u{2028}\"", "b"]),
            r#"["a\u001b\u007f\u2028\"","b"]"#
        );
    }

    #[test]
    fn json_numbers_as_rust_prints_them() {
        assert_eq!(
            to_json(&[1.0, 0.5, 1e21, f64::NAN, f64::INFINITY]),
            "[1,0.5,1000000000000000000000,null,null]"
        );
        assert_eq!(
            to_json(&(u64::MAX, -3i64, true, ())),
            "[18446744073709551615,-3,true,null]"
        );
    }
}
