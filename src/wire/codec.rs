//! The payload encoding rules: little-endian integers, `bool`/`byte`, GUIDs, strings and
//! `u32`-prefixed arrays, read by a bounds-checked [`Reader`] and written by a [`Writer`].

use crate::error::DecodeError;
use crate::wire::text::utf16_len;
use crate::wire::{Guid, Text, Utf16Str};

/// A bounds-checked cursor over a payload. Every read either returns a value borrowed from
/// the payload or a [`DecodeError`] naming the field; nothing is copied and nothing panics.
#[derive(Debug, Clone)]
pub struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    /// A reader at the start of `buf`.
    pub fn new(buf: &'a [u8]) -> Self {
        Reader { buf, pos: 0 }
    }

    /// Bytes not read yet.
    pub fn remaining(&self) -> usize {
        self.buf.len() - self.pos
    }

    /// Offset of the next byte to read.
    pub fn position(&self) -> usize {
        self.pos
    }

    /// The bytes not read yet, without consuming them.
    pub fn rest(&self) -> &'a [u8] {
        &self.buf[self.pos..]
    }

    /// Takes `n` raw bytes.
    pub fn bytes(&mut self, field: &'static str, n: usize) -> Result<&'a [u8], DecodeError> {
        let available = self.remaining();
        if n > available {
            return Err(DecodeError::Truncated {
                field,
                offset: self.pos,
                needed: n,
                available,
            });
        }
        let out = &self.buf[self.pos..self.pos + n];
        self.pos += n;
        Ok(out)
    }

    fn array<const N: usize>(&mut self, field: &'static str) -> Result<[u8; N], DecodeError> {
        let b = self.bytes(field, N)?;
        let mut out = [0u8; N];
        out.copy_from_slice(b);
        Ok(out)
    }

    /// A `byte`.
    pub fn u8(&mut self, field: &'static str) -> Result<u8, DecodeError> {
        Ok(self.array::<1>(field)?[0])
    }

    /// A `bool`: one byte, any non-zero value is true (as the runtime reads it).
    pub fn bool(&mut self, field: &'static str) -> Result<bool, DecodeError> {
        Ok(self.u8(field)? != 0)
    }

    /// A little-endian `u16`.
    pub fn u16(&mut self, field: &'static str) -> Result<u16, DecodeError> {
        Ok(u16::from_le_bytes(self.array(field)?))
    }

    /// A little-endian `uint`.
    pub fn u32(&mut self, field: &'static str) -> Result<u32, DecodeError> {
        Ok(u32::from_le_bytes(self.array(field)?))
    }

    /// A little-endian `int32` (HRESULTs).
    pub fn i32(&mut self, field: &'static str) -> Result<i32, DecodeError> {
        Ok(i32::from_le_bytes(self.array(field)?))
    }

    /// A little-endian `ulong`.
    pub fn u64(&mut self, field: &'static str) -> Result<u64, DecodeError> {
        Ok(u64::from_le_bytes(self.array(field)?))
    }

    /// A 16-byte GUID, kept in wire order.
    pub fn guid(&mut self, field: &'static str) -> Result<Guid, DecodeError> {
        Ok(Guid(self.array(field)?))
    }

    /// A `string`: `u32` count of UTF-16 units including the terminating NUL, then the units;
    /// count 0 is the null string. The NUL is checked and not part of the returned text.
    pub fn text(&mut self, field: &'static str) -> Result<Text<'a>, DecodeError> {
        let offset = self.pos;
        let count = self.u32(field)? as usize;
        if count == 0 {
            return Ok(Text::Null);
        }
        let byte_len = count.checked_mul(2).ok_or(DecodeError::Truncated {
            field,
            offset: self.pos,
            needed: usize::MAX,
            available: self.remaining(),
        })?;
        let units = self.bytes(field, byte_len)?;
        let (body, nul) = units.split_at(byte_len - 2);
        if nul != [0, 0] {
            return Err(DecodeError::UnterminatedString { field, offset });
        }
        Ok(Text::Utf16(Utf16Str::from_le_bytes_unchecked(body)))
    }

    /// An `array<byte>`: `u32` length, then that many bytes.
    pub fn byte_array(&mut self, field: &'static str) -> Result<&'a [u8], DecodeError> {
        let n = self.u32(field)? as usize;
        self.bytes(field, n)
    }

    /// Fails with [`DecodeError::TrailingBytes`] unless every byte was read.
    pub fn finish(&self) -> Result<(), DecodeError> {
        match self.remaining() {
            0 => Ok(()),
            count => Err(DecodeError::TrailingBytes { count }),
        }
    }
}

/// Writes payload fields into a caller-owned buffer.
///
/// Writes never panic: a write past the end is dropped and remembered, and
/// [`Writer::finish`] reports it. Encoders size the buffer exactly first, so this only
/// guards against an encoder whose computed length disagrees with what it writes.
#[derive(Debug)]
pub struct Writer<'a> {
    buf: &'a mut [u8],
    pos: usize,
    overflow: bool,
}

impl<'a> Writer<'a> {
    /// A writer at the start of `buf`.
    pub fn new(buf: &'a mut [u8]) -> Self {
        Writer {
            buf,
            pos: 0,
            overflow: false,
        }
    }

    /// Bytes written so far.
    pub fn position(&self) -> usize {
        self.pos
    }

    /// Raw bytes.
    pub fn bytes(&mut self, b: &[u8]) {
        let end = self.pos.saturating_add(b.len());
        match self.buf.get_mut(self.pos..end) {
            Some(dst) => dst.copy_from_slice(b),
            None => self.overflow = true,
        }
        self.pos = end;
    }

    /// A `byte`.
    pub fn u8(&mut self, v: u8) {
        self.bytes(&[v]);
    }

    /// A `bool` as 0 or 1.
    pub fn bool(&mut self, v: bool) {
        self.u8(v as u8);
    }

    /// A little-endian `u16`.
    pub fn u16(&mut self, v: u16) {
        self.bytes(&v.to_le_bytes());
    }

    /// A little-endian `uint`.
    pub fn u32(&mut self, v: u32) {
        self.bytes(&v.to_le_bytes());
    }

    /// A little-endian `int32`.
    pub fn i32(&mut self, v: i32) {
        self.bytes(&v.to_le_bytes());
    }

    /// A little-endian `ulong`.
    pub fn u64(&mut self, v: u64) {
        self.bytes(&v.to_le_bytes());
    }

    /// A GUID in wire order.
    pub fn guid(&mut self, g: &Guid) {
        self.bytes(&g.0);
    }

    /// A `string` (count including the NUL, units, NUL; count 0 for [`Text::Null`]).
    pub fn text(&mut self, t: &Text<'_>) {
        match t {
            Text::Null => self.u32(0),
            Text::Utf16(u) => {
                self.u32(u.len() as u32 + 1);
                self.bytes(u.as_bytes());
                self.u16(0);
            }
            Text::Str(s) => {
                let ascii = s.is_ascii();
                let units = if ascii { s.len() } else { utf16_len(s) };
                self.u32(units as u32 + 1);
                let end = self.pos.saturating_add(2 * units);
                match self.buf.get_mut(self.pos..end) {
                    Some(dst) if ascii => {
                        for (d, b) in dst.chunks_exact_mut(2).zip(s.bytes()) {
                            d[0] = b;
                            d[1] = 0;
                        }
                    }
                    Some(dst) => {
                        for (d, u) in dst.chunks_exact_mut(2).zip(s.encode_utf16()) {
                            d.copy_from_slice(&u.to_le_bytes());
                        }
                    }
                    None => self.overflow = true,
                }
                self.pos = end;
                self.u16(0);
            }
        }
    }

    /// An `array<byte>`.
    pub fn byte_array(&mut self, b: &[u8]) {
        self.u32(b.len() as u32);
        self.bytes(b);
    }

    /// Bytes written, or `None` if a write ran past the buffer.
    pub fn finish(self) -> Option<usize> {
        if self.overflow {
            None
        } else {
            Some(self.pos)
        }
    }
}

/// Encoded size of a `string` field.
pub fn text_len(t: &Text<'_>) -> usize {
    match t {
        Text::Null => 4,
        _ => 4 + 2 * (t.len_utf16() + 1),
    }
}

/// An item that can stand in a `u32`-prefixed wire array (`array<T>`).
pub trait WireItem<'a>: Sized + Copy {
    /// Encoded size of this item.
    fn encoded_len(&self) -> usize;
    /// Writes this item.
    fn encode(&self, w: &mut Writer<'_>);
    /// Reads one item.
    fn decode(r: &mut Reader<'a>) -> Result<Self, DecodeError>;
}

impl<'a> WireItem<'a> for u32 {
    fn encoded_len(&self) -> usize {
        4
    }
    fn encode(&self, w: &mut Writer<'_>) {
        w.u32(*self)
    }
    fn decode(r: &mut Reader<'a>) -> Result<Self, DecodeError> {
        r.u32("event_id")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn string_rules() {
        // "A" = count 2 (A + NUL)
        let b = [2, 0, 0, 0, b'A', 0, 0, 0];
        let mut r = Reader::new(&b);
        assert_eq!(r.text("s").unwrap(), Text::Str("A"));
        r.finish().unwrap();
        // count 0 = null
        let mut r = Reader::new(&[0, 0, 0, 0]);
        assert_eq!(r.text("s").unwrap(), Text::Null);
        // count 1 = empty string
        let mut r = Reader::new(&[1, 0, 0, 0, 0, 0]);
        let t = r.text("s").unwrap();
        assert!(!t.is_null() && t.is_empty());
        // no NUL
        let mut r = Reader::new(&[1, 0, 0, 0, b'A', 0]);
        assert_eq!(
            r.text("s"),
            Err(DecodeError::UnterminatedString {
                field: "s",
                offset: 0
            })
        );
        // count past the end, including the overflow case
        let mut r = Reader::new(&[3, 0, 0, 0, 0, 0]);
        assert!(matches!(r.text("s"), Err(DecodeError::Truncated { .. })));
        let mut r = Reader::new(&[0xff, 0xff, 0xff, 0xff]);
        assert!(matches!(r.text("s"), Err(DecodeError::Truncated { .. })));
    }

    #[test]
    fn utf16_length_from_utf8() {
        for s in ["", "abc", "é", "€uro", "𝄞 clef", "a\u{10FFFF}b", "日本語"] {
            assert_eq!(utf16_len(s), s.encode_utf16().count(), "{}", s);
            let mut buf = [0u8; 64];
            let mut w = Writer::new(&mut buf);
            w.text(&Text::Str(s));
            let n = w.finish().unwrap();
            let mut r = Reader::new(&buf[..n]);
            assert_eq!(r.text("s").unwrap(), Text::Str(s));
        }
    }

    #[test]
    fn writer_never_panics_on_overflow() {
        let mut buf = [0u8; 3];
        let mut w = Writer::new(&mut buf);
        w.u32(7);
        assert_eq!(w.finish(), None);
    }
}
