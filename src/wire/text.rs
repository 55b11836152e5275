//! Protocol strings: UTF-16LE on the wire, borrowed views in memory.
//!
//! A decoded string is a [`Utf16Str`], a view over the received bytes. It is never copied by
//! the core; the caller turns it into UTF-8 in a buffer it owns, strictly
//! ([`Utf16Str::to_utf8`]: a lone surrogate is an error) or lossily
//! ([`Utf16Str::to_utf8_lossy`]: a lone surrogate becomes U+FFFD), or iterates its chars.
//! A string to encode is usually a `&str` ([`Text::Str`]), transcoded while it is written.

use core::char::{decode_utf16, DecodeUtf16, REPLACEMENT_CHARACTER};
use core::fmt;

/// A UTF-16LE string borrowed from a payload, without its terminating NUL. May hold lone
/// surrogates (real argv and environments do); decoding it never panics.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Utf16Str<'a> {
    bytes: &'a [u8],
}

/// Why a [`Utf16Str`] could not be turned into UTF-8.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[non_exhaustive]
pub enum TranscodeError {
    /// The output buffer is too small: `needed` bytes would hold the whole string.
    BufferTooSmall {
        /// UTF-8 bytes the string needs (lossy size: each lone surrogate counted as U+FFFD).
        needed: usize,
    },
    /// Strict conversion met an unpaired surrogate.
    LoneSurrogate {
        /// Index of the offending unit.
        index: usize,
        /// The unit itself.
        unit: u16,
    },
}

impl fmt::Display for TranscodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            TranscodeError::BufferTooSmall { needed } => {
                write!(f, "buffer too small: {} bytes needed", needed)
            }
            TranscodeError::LoneSurrogate { index, unit } => {
                write!(f, "lone surrogate 0x{:04X} at unit {}", unit, index)
            }
        }
    }
}

/// Iterator over the UTF-16 units of a [`Utf16Str`].
#[derive(Clone, Debug)]
pub struct Units<'a> {
    chunks: core::slice::ChunksExact<'a, u8>,
}

impl<'a> Iterator for Units<'a> {
    type Item = u16;
    #[inline]
    fn next(&mut self) -> Option<u16> {
        self.chunks.next().map(|c| u16::from_le_bytes([c[0], c[1]]))
    }
    fn size_hint(&self) -> (usize, Option<usize>) {
        self.chunks.size_hint()
    }
}

impl<'a> ExactSizeIterator for Units<'a> {}

impl<'a> Utf16Str<'a> {
    /// A view over little-endian UTF-16 bytes (no terminator). An odd trailing byte is ignored.
    pub fn from_le_bytes_unchecked(bytes: &'a [u8]) -> Self {
        Utf16Str {
            bytes: &bytes[..bytes.len() & !1],
        }
    }

    /// The raw little-endian bytes, without the terminator.
    pub fn as_bytes(&self) -> &'a [u8] {
        self.bytes
    }

    /// Number of UTF-16 units.
    pub fn len(&self) -> usize {
        self.bytes.len() / 2
    }

    /// True for the empty string.
    pub fn is_empty(&self) -> bool {
        self.bytes.is_empty()
    }

    /// The UTF-16 units.
    pub fn units(&self) -> Units<'a> {
        Units {
            chunks: self.bytes.chunks_exact(2),
        }
    }

    /// The chars, with an error item for each lone surrogate.
    pub fn chars(&self) -> DecodeUtf16<Units<'a>> {
        decode_utf16(self.units())
    }

    /// The chars, with U+FFFD for each lone surrogate.
    pub fn chars_lossy(&self) -> impl Iterator<Item = char> + 'a {
        decode_utf16(self.units()).map(|r| r.unwrap_or(REPLACEMENT_CHARACTER))
    }

    /// True if every unit is ASCII (then the UTF-8 form is the low bytes, one per unit).
    pub fn is_ascii(&self) -> bool {
        // Little-endian units: ASCII iff every high byte is 0 and every low byte < 0x80.
        // Four units at a time.
        const MASK: u64 = 0xFF80_FF80_FF80_FF80;
        let words = self.bytes.chunks_exact(8);
        let tail = words.remainder();
        let mut acc = 0u64;
        for w in words {
            acc |= u64::from_le_bytes([w[0], w[1], w[2], w[3], w[4], w[5], w[6], w[7]]);
        }
        acc & MASK == 0 && tail.chunks_exact(2).all(|c| c[0] < 0x80 && c[1] == 0)
    }

    /// UTF-8 length of the lossy conversion.
    pub fn utf8_len_lossy(&self) -> usize {
        if self.is_ascii() {
            return self.len();
        }
        self.chars_lossy().map(char::len_utf8).sum()
    }

    /// True if the string has no lone surrogate.
    pub fn is_valid(&self) -> bool {
        self.chars().all(|c| c.is_ok())
    }

    /// Strict conversion into `out`: fails on a lone surrogate or a too small buffer.
    pub fn to_utf8<'b>(&self, out: &'b mut [u8]) -> Result<&'b str, TranscodeError> {
        let mut index = 0;
        for c in self.chars() {
            match c {
                Ok(c) => index += c.len_utf16(),
                Err(e) => {
                    return Err(TranscodeError::LoneSurrogate {
                        index,
                        unit: e.unpaired_surrogate(),
                    })
                }
            }
        }
        self.to_utf8_lossy(out)
    }

    /// Lossy conversion into `out` (lone surrogates become U+FFFD): fails only if `out` is
    /// smaller than [`Utf16Str::utf8_len_lossy`].
    pub fn to_utf8_lossy<'b>(&self, out: &'b mut [u8]) -> Result<&'b str, TranscodeError> {
        let ascii = self.is_ascii();
        let needed = if ascii {
            self.len()
        } else {
            self.chars_lossy().map(char::len_utf8).sum()
        };
        if out.len() < needed {
            return Err(TranscodeError::BufferTooSmall { needed });
        }
        let mut pos = 0;
        if ascii {
            for (o, c) in out.iter_mut().zip(self.bytes.chunks_exact(2)) {
                *o = c[0];
            }
            pos = needed;
        } else {
            for c in self.chars_lossy() {
                pos += c.encode_utf8(&mut out[pos..]).len();
            }
        }
        // Every byte written came from `char::encode_utf8`, so this cannot fail; the fallback
        // keeps the function panic-free regardless.
        core::str::from_utf8(&out[..pos]).map_err(|_| TranscodeError::BufferTooSmall { needed })
    }
}

/// Debug-formats chars exactly as `str`'s Debug does (double quotes escaped, single quotes
/// not), with lone surrogates as `\u{d800}`: equal texts print the same whatever they hold.
fn debug_chars<I: Iterator<Item = Result<char, core::char::DecodeUtf16Error>>>(
    chars: I,
    f: &mut fmt::Formatter<'_>,
) -> fmt::Result {
    use fmt::Write;
    f.write_char('"')?;
    for c in chars {
        match c {
            Ok('\'') => f.write_char('\'')?,
            Ok(c) => {
                for e in c.escape_debug() {
                    f.write_char(e)?;
                }
            }
            Err(e) => write!(f, "\\u{{{:x}}}", e.unpaired_surrogate())?,
        }
    }
    f.write_char('"')
}

impl fmt::Debug for Utf16Str<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        debug_chars(self.chars(), f)
    }
}

impl fmt::Display for Utf16Str<'_> {
    /// Lossy: lone surrogates print as U+FFFD.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        use fmt::Write;
        for c in self.chars_lossy() {
            f.write_char(c)?;
        }
        Ok(())
    }
}

#[cfg(feature = "defmt")]
impl defmt::Format for Utf16Str<'_> {
    fn format(&self, f: defmt::Formatter<'_>) {
        defmt::write!(f, "utf16[{=usize} units]", self.len())
    }
}

/// Number of UTF-16 units needed for `s`, computed from the UTF-8 bytes in one pass: one
/// unit per char (non-continuation byte), two for chars outside the BMP (4-byte leads).
#[inline]
pub(crate) fn utf16_len(s: &str) -> usize {
    if s.is_ascii() {
        return s.len();
    }
    s.bytes()
        .map(|b| usize::from((b & 0xC0) != 0x80) + usize::from(b >= 0xF0))
        .sum()
}

/// A protocol `string` field: null, a `&str` to encode, or a decoded UTF-16 view.
///
/// Equality compares the UTF-16 units, so `Text::Str("x") == Text::Utf16(..."x"...)` and a
/// request encoded from `&str` equals its decoded form. Null differs from the empty string.
#[derive(Clone, Copy)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum Text<'a> {
    /// The null string (count 0 on the wire).
    Null,
    /// A string held as UTF-8 (typically written by a client).
    Str(&'a str),
    /// A string held as UTF-16 bytes (typically decoded from the wire).
    Utf16(Utf16Str<'a>),
}

/// Iterator over the UTF-16 units of a [`Text`].
#[derive(Clone, Debug)]
pub enum TextUnits<'a> {
    /// Units of a `&str`.
    Str(core::str::EncodeUtf16<'a>),
    /// Units of a UTF-16 view.
    Utf16(Units<'a>),
    /// No units (null).
    Null,
}

impl<'a> Iterator for TextUnits<'a> {
    type Item = u16;
    #[inline]
    fn next(&mut self) -> Option<u16> {
        match self {
            TextUnits::Str(i) => i.next(),
            TextUnits::Utf16(i) => i.next(),
            TextUnits::Null => None,
        }
    }
}

impl<'a> Text<'a> {
    /// True for the null string.
    pub fn is_null(&self) -> bool {
        matches!(self, Text::Null)
    }

    /// True for the null and the empty string.
    pub fn is_empty(&self) -> bool {
        match self {
            Text::Null => true,
            Text::Str(s) => s.is_empty(),
            Text::Utf16(u) => u.is_empty(),
        }
    }

    /// Number of UTF-16 units, without the terminator.
    pub fn len_utf16(&self) -> usize {
        match self {
            Text::Null => 0,
            Text::Str(s) => utf16_len(s),
            Text::Utf16(u) => u.len(),
        }
    }

    /// The UTF-16 units.
    pub fn units(&self) -> TextUnits<'a> {
        match *self {
            Text::Null => TextUnits::Null,
            Text::Str(s) => TextUnits::Str(s.encode_utf16()),
            Text::Utf16(u) => TextUnits::Utf16(u.units()),
        }
    }

    /// The chars, with an error item for each lone surrogate.
    pub fn chars(&self) -> DecodeUtf16<TextUnits<'a>> {
        decode_utf16(self.units())
    }

    /// The chars, with U+FFFD for each lone surrogate.
    pub fn chars_lossy(&self) -> impl Iterator<Item = char> + 'a {
        decode_utf16(self.units()).map(|r| r.unwrap_or(REPLACEMENT_CHARACTER))
    }

    /// Strict UTF-8 conversion into `out` (null gives `""`). A `Str` is returned as it is.
    pub fn to_utf8<'b>(&self, out: &'b mut [u8]) -> Result<&'b str, TranscodeError>
    where
        'a: 'b,
    {
        match *self {
            Text::Null => Ok(""),
            Text::Str(s) => Ok(s),
            Text::Utf16(u) => u.to_utf8(out),
        }
    }

    /// Lossy UTF-8 conversion into `out` (null gives `""`).
    pub fn to_utf8_lossy<'b>(&self, out: &'b mut [u8]) -> Result<&'b str, TranscodeError>
    where
        'a: 'b,
    {
        match *self {
            Text::Null => Ok(""),
            Text::Str(s) => Ok(s),
            Text::Utf16(u) => u.to_utf8_lossy(out),
        }
    }

    /// UTF-8 length of the lossy conversion.
    pub fn utf8_len_lossy(&self) -> usize {
        match self {
            Text::Null => 0,
            Text::Str(s) => s.len(),
            Text::Utf16(u) => u.utf8_len_lossy(),
        }
    }

    /// Compares with a `&str` unit by unit (false for null).
    pub fn eq_str(&self, s: &str) -> bool {
        !self.is_null() && self.units().eq(s.encode_utf16())
    }
}

impl<'a> From<&'a str> for Text<'a> {
    fn from(s: &'a str) -> Self {
        Text::Str(s)
    }
}

impl<'a> From<Option<&'a str>> for Text<'a> {
    fn from(s: Option<&'a str>) -> Self {
        s.map_or(Text::Null, Text::Str)
    }
}

impl<'a> From<Utf16Str<'a>> for Text<'a> {
    fn from(s: Utf16Str<'a>) -> Self {
        Text::Utf16(s)
    }
}

impl PartialEq for Text<'_> {
    fn eq(&self, other: &Self) -> bool {
        match (self.is_null(), other.is_null()) {
            (true, true) => true,
            (false, false) => self.units().eq(other.units()),
            _ => false,
        }
    }
}

impl Eq for Text<'_> {}

impl PartialEq<str> for Text<'_> {
    fn eq(&self, other: &str) -> bool {
        self.eq_str(other)
    }
}

impl PartialEq<&str> for Text<'_> {
    fn eq(&self, other: &&str) -> bool {
        self.eq_str(other)
    }
}

impl fmt::Debug for Text<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Text::Null => f.write_str("null"),
            _ => debug_chars(self.chars(), f),
        }
    }
}

impl fmt::Display for Text<'_> {
    /// Lossy; null prints nothing.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Text::Null => Ok(()),
            Text::Str(s) => f.write_str(s),
            Text::Utf16(u) => fmt::Display::fmt(u, f),
        }
    }
}

#[cfg(feature = "arbitrary")]
impl<'a> arbitrary::Arbitrary<'a> for Text<'a> {
    fn arbitrary(u: &mut arbitrary::Unstructured<'a>) -> arbitrary::Result<Self> {
        Ok(match u.int_in_range(0u8..=2)? {
            0 => Text::Null,
            1 => Text::Str(<&'a str>::arbitrary(u)?),
            _ => {
                let n = u.arbitrary_len::<u16>()?;
                Text::Utf16(Utf16Str::from_le_bytes_unchecked(u.bytes(n * 2)?))
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn utf16(s: &[u16]) -> ([u8; 64], usize) {
        let mut b = [0u8; 64];
        for (i, u) in s.iter().enumerate() {
            b[2 * i..2 * i + 2].copy_from_slice(&u.to_le_bytes());
        }
        (b, s.len() * 2)
    }

    #[test]
    fn strict_and_lossy() {
        let (b, n) = utf16(&[0x68, 0xD800, 0x69]);
        let s = Utf16Str::from_le_bytes_unchecked(&b[..n]);
        let mut out = [0u8; 16];
        assert_eq!(
            s.to_utf8(&mut out),
            Err(TranscodeError::LoneSurrogate {
                index: 1,
                unit: 0xD800
            })
        );
        assert_eq!(s.to_utf8_lossy(&mut out).unwrap(), "h\u{FFFD}i");
        let mut small = [0u8; 4];
        assert_eq!(
            s.to_utf8_lossy(&mut small),
            Err(TranscodeError::BufferTooSmall { needed: 5 })
        );
        let (b, n) = utf16(&[0xD83D, 0xDE00]);
        let s = Utf16Str::from_le_bytes_unchecked(&b[..n]);
        assert_eq!(s.to_utf8(&mut out).unwrap(), "\u{1F600}");
        assert_eq!(Text::Utf16(s), Text::Str("\u{1F600}"));
    }

    #[test]
    fn null_vs_empty() {
        assert_ne!(Text::Null, Text::Str(""));
        assert_eq!(Text::Null, Text::Null);
        assert!(!Text::Null.eq_str(""));
    }
}
