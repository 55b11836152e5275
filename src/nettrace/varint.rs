//! Little-endian primitives and LEB128 variable-length integers, read through a bounds-checked
//! cursor that knows its stream offset (every error says where it happened).

use super::error::NettraceError;
use crate::wire::Guid;

/// Decodes an unsigned LEB128 integer of at most `max_bits` bits from the start of `bytes`.
/// Returns the value and the number of bytes used, or `None` when the encoding is longer than
/// the type allows, does not fit, or runs past the end of `bytes`.
#[inline]
pub fn read_varuint(bytes: &[u8], max_bits: u32) -> Option<(u64, usize)> {
    // At most ceil(max_bits / 7) bytes; byte i carries bits 7i.. (7i < max_bits for each).
    let max_len = ((max_bits + 6) / 7) as usize;
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

    #[inline]
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
}
