//! Names and strings in a trace: UTF-16 in V4/V5 metadata and payloads, UTF-8 in V6
//! metadata. [`TraceStr`] is a borrowed view over either.

use core::fmt;

use crate::wire::{TranscodeError, Utf16Str};

/// A string borrowed from the stream: UTF-16LE (V4/V5 names, payload strings) or UTF-8 bytes
/// (V6 names; not validated, invalid sequences print as U+FFFD). Never includes a terminator.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub enum TraceStr<'a> {
    /// UTF-16LE units.
    Utf16(Utf16Str<'a>),
    /// UTF-8 bytes (unchecked).
    Utf8(&'a [u8]),
}

impl<'a> TraceStr<'a> {
    /// The empty string.
    pub const EMPTY: TraceStr<'static> = TraceStr::Utf8(&[]);

    /// A UTF-16LE view over `bytes` (no terminator; an odd trailing byte is ignored).
    pub fn utf16(bytes: &'a [u8]) -> Self {
        TraceStr::Utf16(Utf16Str::from_le_bytes_unchecked(bytes))
    }

    /// The raw bytes (UTF-16LE or UTF-8, without terminator).
    pub fn as_bytes(&self) -> &'a [u8] {
        match *self {
            TraceStr::Utf16(s) => s.as_bytes(),
            TraceStr::Utf8(b) => b,
        }
    }

    /// True for the empty string.
    pub fn is_empty(&self) -> bool {
        self.as_bytes().is_empty()
    }

    /// The string as `&str` when it is valid UTF-8 stored as UTF-8 (V6 names); `None` for
    /// UTF-16 strings (convert those with [`TraceStr::to_utf8_lossy`]).
    pub fn as_utf8(&self) -> Option<&'a str> {
        match *self {
            TraceStr::Utf8(b) => core::str::from_utf8(b).ok(),
            TraceStr::Utf16(_) => None,
        }
    }

    /// The chars, with U+FFFD for anything undecodable.
    pub fn chars_lossy(&self) -> Chars<'a> {
        match *self {
            TraceStr::Utf16(s) => Chars::Utf16(s.units(), None),
            TraceStr::Utf8(b) => Chars::Utf8(b),
        }
    }

    /// True if the string equals `s` (compared char by char, lossily).
    pub fn eq_str(&self, s: &str) -> bool {
        match *self {
            TraceStr::Utf8(b) => b == s.as_bytes(),
            TraceStr::Utf16(u) => {
                // Fast path for ASCII: one unit per byte.
                if s.is_ascii() {
                    let b = u.as_bytes();
                    return b.len() == 2 * s.len()
                        && b.chunks_exact(2)
                            .zip(s.bytes())
                            .all(|(c, a)| c[0] == a && c[1] == 0);
                }
                self.chars_lossy().eq(s.chars())
            }
        }
    }

    /// UTF-8 length of [`TraceStr::to_utf8_lossy`].
    pub fn utf8_len_lossy(&self) -> usize {
        match *self {
            TraceStr::Utf16(s) => s.utf8_len_lossy(),
            TraceStr::Utf8(b) => match core::str::from_utf8(b) {
                Ok(s) => s.len(),
                Err(_) => self.chars_lossy().map(char::len_utf8).sum(),
            },
        }
    }

    /// Converts into `out` (U+FFFD for anything undecodable); fails only if `out` is smaller
    /// than [`TraceStr::utf8_len_lossy`].
    pub fn to_utf8_lossy<'b>(&self, out: &'b mut [u8]) -> Result<&'b str, TranscodeError> {
        match *self {
            TraceStr::Utf16(s) => s.to_utf8_lossy(out),
            TraceStr::Utf8(_) => {
                let needed = self.utf8_len_lossy();
                if out.len() < needed {
                    return Err(TranscodeError::BufferTooSmall { needed });
                }
                let mut pos = 0;
                for c in self.chars_lossy() {
                    pos += c.encode_utf8(&mut out[pos..]).len();
                }
                core::str::from_utf8(&out[..pos])
                    .map_err(|_| TranscodeError::BufferTooSmall { needed })
            }
        }
    }
}

impl Default for TraceStr<'_> {
    fn default() -> Self {
        TraceStr::EMPTY
    }
}

/// Iterator over the chars of a [`TraceStr`] (lossy).
#[derive(Clone, Debug)]
pub enum Chars<'a> {
    #[doc(hidden)]
    Utf16(crate::wire::Units<'a>, Option<u16>),
    #[doc(hidden)]
    Utf8(&'a [u8]),
}

impl<'a> Iterator for Chars<'a> {
    type Item = char;
    fn next(&mut self) -> Option<char> {
        match self {
            Chars::Utf16(units, pending) => {
                let u = match pending.take() {
                    Some(u) => u,
                    None => units.next()?,
                };
                if !(0xD800..0xE000).contains(&u) {
                    return Some(
                        char::from_u32(u32::from(u)).unwrap_or(char::REPLACEMENT_CHARACTER),
                    );
                }
                if u >= 0xDC00 {
                    return Some(char::REPLACEMENT_CHARACTER);
                }
                match units.next() {
                    Some(lo) if (0xDC00..0xE000).contains(&lo) => {
                        let c =
                            0x10000 + ((u32::from(u) - 0xD800) << 10) + (u32::from(lo) - 0xDC00);
                        Some(char::from_u32(c).unwrap_or(char::REPLACEMENT_CHARACTER))
                    }
                    Some(other) => {
                        *pending = Some(other);
                        Some(char::REPLACEMENT_CHARACTER)
                    }
                    None => Some(char::REPLACEMENT_CHARACTER),
                }
            }
            Chars::Utf8(bytes) => {
                if bytes.is_empty() {
                    return None;
                }
                // A char is at most 4 bytes: decoding a 4-byte window keeps this O(1).
                let window = &bytes[..bytes.len().min(4)];
                match core::str::from_utf8(window) {
                    Ok(s) => {
                        let c = s.chars().next()?;
                        *bytes = &bytes[c.len_utf8()..];
                        Some(c)
                    }
                    Err(e) if e.valid_up_to() > 0 => {
                        // Safe prefix: decode its first char.
                        let valid = &window[..e.valid_up_to()];
                        let c = core::str::from_utf8(valid).ok()?.chars().next()?;
                        *bytes = &bytes[c.len_utf8()..];
                        Some(c)
                    }
                    Err(e) => {
                        let skip = e.error_len().unwrap_or(1).max(1);
                        *bytes = &bytes[skip.min(bytes.len())..];
                        Some(char::REPLACEMENT_CHARACTER)
                    }
                }
            }
        }
    }
}

impl fmt::Debug for TraceStr<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        use fmt::Write;
        f.write_char('"')?;
        for c in self.chars_lossy() {
            for e in c.escape_debug() {
                f.write_char(e)?;
            }
        }
        f.write_char('"')
    }
}

impl fmt::Display for TraceStr<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        use fmt::Write;
        if let Some(s) = self.as_utf8() {
            return f.write_str(s);
        }
        for c in self.chars_lossy() {
            f.write_char(c)?;
        }
        Ok(())
    }
}

#[cfg(feature = "defmt")]
impl defmt::Format for TraceStr<'_> {
    fn format(&self, f: defmt::Formatter<'_>) {
        defmt::write!(f, "str[{=usize} bytes]", self.as_bytes().len())
    }
}
