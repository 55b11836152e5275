//! Little-endian primitives and LEB128 variable-length integers, read through a bounds-checked
//! cursor that knows its stream offset (every error says where it happened).

use super::error::NettraceError;
use crate::wire::Guid;

/// Decodes an unsigned LEB128 integer of at most `max_bits` bits from the start of `bytes`.
/// Returns the value and the number of bytes used, or `None` when the encoding is longer than
/// the type allows, does not fit, or runs past the end of `bytes`.
#[inline(always)]
pub fn read_varuint(bytes: &[u8], max_bits: u32) -> Option<(u64, usize)> {
    // At most ceil(max_bits / 7) bytes; byte i carries bits 7i.. (7i < max_bits for each).
    let max_len = ((max_bits + 6) / 7) as usize;
    if let Some(word) = bytes.get(..8) {
        // Up to 8 bytes without a branch per byte: the first byte with bit 7 clear ends it.
        let mut w = [0u8; 8];
        w.copy_from_slice(word);
        let x = u64::from_le_bytes(w);
        let stops = !x & 0x8080_8080_8080_8080;
        if stops != 0 {
            let len = (stops.trailing_zeros() / 8 + 1) as usize;
            if len > max_len {
                return None;
            }
            let x = if len == 8 {
                x
            } else {
                x & ((1u64 << (8 * len)) - 1)
            };
            // Squeeze out bit 7 of each byte: 8 x 7 bits, then 4 x 14, then 2 x 28.
            let x = x & 0x7F7F_7F7F_7F7F_7F7F;
            let x = (x & 0x007F_007F_007F_007F) | ((x & 0x7F00_7F00_7F00_7F00) >> 1);
            let x = (x & 0x0000_3FFF_0000_3FFF) | ((x & 0x3FFF_0000_3FFF_0000) >> 2);
            let value = (x & 0x0FFF_FFFF) | ((x & 0x0FFF_FFFF_0000_0000) >> 4);
            // At most 56 bits here: a narrower type must hold the value.
            if max_bits < 64 && value >> max_bits != 0 {
                return None;
            }
            return Some((value, len));
        }
    }
    read_varuint_bytewise(bytes, max_bits, max_len)
}

/// [`read_varuint`] one byte at a time (near the end of `bytes`, or past 8 bytes).
#[inline(never)]
fn read_varuint_bytewise(bytes: &[u8], max_bits: u32, max_len: usize) -> Option<(u64, usize)> {
    let mut value = 0u64;
    for (i, &b) in bytes.iter().take(max_len).enumerate() {
        let shift = 7 * i as u32;
        value |= u64::from(b & 0x7F) << shift;
        if b & 0x80 == 0 {
            // The last byte may not carry bits past max_bits.
            let room = max_bits - shift;
            if room < 7 && u64::from(b) >> room != 0 {
                return None;
            }
            return Some((value, i + 1));
        }
    }
    None
}

/// Zigzag-decodes a V6 signed varint (`(v >> 1) ^ -(v & 1)`).
#[inline]
pub fn zigzag(v: u64) -> i64 {
    ((v >> 1) as i64) ^ -((v & 1) as i64)
}

/// A bounds-checked reader over a slice that lies at stream (or payload) offset `base`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Cur<'a> {
    pub(crate) bytes: &'a [u8],
    pub(crate) pos: usize,
    pub(crate) base: u64,
}

impl<'a> Cur<'a> {
    pub(crate) fn new(bytes: &'a [u8], base: u64) -> Self {
        Cur {
            bytes,
            pos: 0,
            base,
        }
    }

    /// Stream offset of the next byte.
    #[inline]
    pub(crate) fn offset(&self) -> u64 {
        self.base + self.pos as u64
    }

    #[inline]
    pub(crate) fn left(&self) -> usize {
        self.bytes.len() - self.pos
    }

    #[inline]
    pub(crate) fn is_empty(&self) -> bool {
        self.pos >= self.bytes.len()
    }

    #[inline]
    pub(crate) fn malformed(&self, what: &'static str) -> NettraceError {
        NettraceError::Malformed {
            offset: self.offset(),
            what,
        }
    }

    #[inline]
    pub(crate) fn take(&mut self, n: usize, what: &'static str) -> Result<&'a [u8], NettraceError> {
        if self.left() < n {
            return Err(self.malformed(what));
        }
        let s = &self.bytes[self.pos..self.pos + n];
        self.pos += n;
        Ok(s)
    }

    #[inline]
    pub(crate) fn array<const N: usize>(
        &mut self,
        what: &'static str,
    ) -> Result<[u8; N], NettraceError> {
        let s = self.take(N, what)?;
        let mut a = [0u8; N];
        a.copy_from_slice(s);
        Ok(a)
    }

    #[inline]
    pub(crate) fn u8(&mut self, what: &'static str) -> Result<u8, NettraceError> {
        Ok(self.array::<1>(what)?[0])
    }

    #[inline]
    pub(crate) fn u16(&mut self, what: &'static str) -> Result<u16, NettraceError> {
        Ok(u16::from_le_bytes(self.array(what)?))
    }

    #[inline]
    pub(crate) fn u32(&mut self, what: &'static str) -> Result<u32, NettraceError> {
        Ok(u32::from_le_bytes(self.array(what)?))
    }

    #[inline]
    pub(crate) fn u64(&mut self, what: &'static str) -> Result<u64, NettraceError> {
        Ok(u64::from_le_bytes(self.array(what)?))
    }

    #[inline]
    pub(crate) fn i64(&mut self, what: &'static str) -> Result<i64, NettraceError> {
        Ok(i64::from_le_bytes(self.array(what)?))
    }

    #[inline]
    pub(crate) fn guid(&mut self, what: &'static str) -> Result<Guid, NettraceError> {
        Ok(Guid(self.array(what)?))
    }

    #[inline(always)]
    pub(crate) fn varuint(&mut self, max_bits: u32) -> Result<u64, NettraceError> {
        // One byte (a value below 128) is the common case: no loop, no limit to check.
        if let Some(&b) = self.bytes.get(self.pos) {
            if b < 0x80 {
                self.pos += 1;
                return Ok(u64::from(b));
            }
        }
        match read_varuint(&self.bytes[self.pos..], max_bits) {
            Some((v, n)) => {
                self.pos += n;
                Ok(v)
            }
            None => Err(self.bad_varint()),
        }
    }

    #[cold]
    #[inline(never)]
    fn bad_varint(&self) -> NettraceError {
        NettraceError::BadVarint {
            offset: self.offset(),
        }
    }

    #[inline]
    pub(crate) fn varu32(&mut self) -> Result<u32, NettraceError> {
        self.varuint(32).map(|v| v as u32)
    }

    #[inline]
    pub(crate) fn varu64(&mut self) -> Result<u64, NettraceError> {
        self.varuint(64)
    }

    /// A NUL-terminated UTF-16LE string; returns the bytes without the terminator.
    pub(crate) fn utf16z(&mut self, what: &'static str) -> Result<&'a [u8], NettraceError> {
        let rest = &self.bytes[self.pos..];
        let mut i = 0;
        while i + 1 < rest.len() {
            if rest[i] == 0 && rest[i + 1] == 0 {
                let s = &rest[..i];
                self.pos += i + 2;
                return Ok(s);
            }
            i += 2;
        }
        Err(self.malformed(what))
    }

    /// A V6 string: `varuint32` byte length, then UTF-8 bytes.
    pub(crate) fn str8(&mut self, what: &'static str) -> Result<&'a [u8], NettraceError> {
        let n = self.varu32()? as usize;
        self.take(n, what)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn varuint_limits() {
        assert_eq!(read_varuint(&[0x00], 32), Some((0, 1)));
        assert_eq!(read_varuint(&[0x7F], 32), Some((127, 1)));
        assert_eq!(read_varuint(&[0x80, 0x01], 32), Some((128, 2)));
        assert_eq!(
            read_varuint(&[0xFF, 0xFF, 0xFF, 0xFF, 0x0F], 32),
            Some((u64::from(u32::MAX), 5))
        );
        assert_eq!(read_varuint(&[0xFF, 0xFF, 0xFF, 0xFF, 0x1F], 32), None);
        assert_eq!(
            read_varuint(&[0xFF, 0xFF, 0xFF, 0xFF, 0x8F, 0x00], 32),
            None
        );
        assert_eq!(read_varuint(&[0x80], 32), None);
        let mut max64 = [0xFFu8; 10];
        max64[9] = 0x01;
        assert_eq!(read_varuint(&max64, 64), Some((u64::MAX, 10)));
        max64[9] = 0x02;
        assert_eq!(read_varuint(&max64, 64), None);
        assert_eq!(zigzag(0), 0);
        assert_eq!(zigzag(1), -1);
        assert_eq!(zigzag(2), 1);
        assert_eq!(zigzag(u64::MAX), i64::MIN);
    }

    #[test]
    fn word_at_a_time_matches_bytewise() {
        // Every length and limit, values at the edges, with and without bytes after.
        let mut state = 0x9E37_79B9_7F4A_7C15u64;
        let mut next = move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        for round in 0..20_000u32 {
            let mut buf = [0u8; 12];
            let len = (round % 11) as usize;
            for (i, b) in buf.iter_mut().enumerate() {
                let r = next() as u8;
                *b = if i < len { r | 0x80 } else { r };
            }
            if round % 3 == 0 {
                buf[len] &= 0x7F;
            }
            for max_bits in [7, 8, 16, 31, 32, 33, 56, 57, 63, 64] {
                let max_len = ((max_bits + 6) / 7) as usize;
                for end in [len + 1, 8, 9, 12] {
                    let bytes = &buf[..end.min(12)];
                    assert_eq!(
                        read_varuint(bytes, max_bits),
                        read_varuint_bytewise(bytes, max_bits, max_len),
                        "{:02x?} {}",
                        bytes,
                        max_bits
                    );
                }
            }
        }
    }
}
