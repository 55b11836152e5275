//! 16-byte GUIDs (runtime cookies, profiler CLSIDs).

use core::fmt;

/// A GUID as its 16 wire bytes (`Data1` u32 LE, `Data2` u16 LE, `Data3` u16 LE, `Data4` 8 bytes).
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[cfg_attr(feature = "arbitrary", derive(arbitrary::Arbitrary))]
pub struct Guid(pub [u8; 16]);

/// The text given to [`Guid::parse`] is not a GUID.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct ParseGuidError;

impl fmt::Display for ParseGuidError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("expected a GUID like 01234567-89ab-cdef-0123-456789abcdef")
    }
}

impl Guid {
    /// The all-zero GUID.
    pub const NIL: Guid = Guid([0; 16]);

    /// Builds a GUID from its fields, as written in the usual text form.
    pub const fn from_fields(data1: u32, data2: u16, data3: u16, data4: [u8; 8]) -> Guid {
        let a = data1.to_le_bytes();
        let b = data2.to_le_bytes();
        let c = data3.to_le_bytes();
        Guid([
            a[0], a[1], a[2], a[3], b[0], b[1], c[0], c[1], data4[0], data4[1], data4[2], data4[3],
            data4[4], data4[5], data4[6], data4[7],
        ])
    }

    /// `Data1`.
    pub fn data1(&self) -> u32 {
        u32::from_le_bytes([self.0[0], self.0[1], self.0[2], self.0[3]])
    }

    /// `Data2`.
    pub fn data2(&self) -> u16 {
        u16::from_le_bytes([self.0[4], self.0[5]])
    }

    /// `Data3`.
    pub fn data3(&self) -> u16 {
        u16::from_le_bytes([self.0[6], self.0[7]])
    }

    /// `Data4`.
    pub fn data4(&self) -> [u8; 8] {
        let mut d = [0u8; 8];
        d.copy_from_slice(&self.0[8..]);
        d
    }

    /// Parses `xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx`, optionally in braces.
    pub fn parse(s: &str) -> Result<Guid, ParseGuidError> {
        let s = s.trim();
        let s = match (s.strip_prefix('{'), s.ends_with('}')) {
            (Some(inner), true) => &inner[..inner.len() - 1],
            (None, false) => s,
            _ => return Err(ParseGuidError),
        };
        let b = s.as_bytes();
        if b.len() != 36 || b[8] != b'-' || b[13] != b'-' || b[18] != b'-' || b[23] != b'-' {
            return Err(ParseGuidError);
        }
        let mut hex = [0u8; 16];
        let mut n = 0;
        let mut i = 0;
        while i < 36 {
            if b[i] == b'-' {
                i += 1;
                continue;
            }
            let hi = hex_val(b[i]).ok_or(ParseGuidError)?;
            let lo = hex_val(*b.get(i + 1).ok_or(ParseGuidError)?).ok_or(ParseGuidError)?;
            *hex.get_mut(n).ok_or(ParseGuidError)? = hi << 4 | lo;
            n += 1;
            i += 2;
        }
        if n != 16 {
            return Err(ParseGuidError);
        }
        let mut d4 = [0u8; 8];
        d4.copy_from_slice(&hex[8..]);
        Ok(Guid::from_fields(
            u32::from_be_bytes([hex[0], hex[1], hex[2], hex[3]]),
            u16::from_be_bytes([hex[4], hex[5]]),
            u16::from_be_bytes([hex[6], hex[7]]),
            d4,
        ))
    }
}

fn hex_val(c: u8) -> Option<u8> {
    match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        b'A'..=b'F' => Some(c - b'A' + 10),
        _ => None,
    }
}

impl fmt::Display for Guid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let d4 = self.data4();
        write!(
            f,
            "{:08x}-{:04x}-{:04x}-{:02x}{:02x}-{:02x}{:02x}{:02x}{:02x}{:02x}{:02x}",
            self.data1(),
            self.data2(),
            self.data3(),
            d4[0],
            d4[1],
            d4[2],
            d4[3],
            d4[4],
            d4[5],
            d4[6],
            d4[7]
        )
    }
}

impl fmt::Debug for Guid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_round_trip() {
        // The spec's Advertise example cookie.
        let g = Guid::parse("123e4567-e89b-12d3-a456-426614174000").unwrap();
        assert_eq!(&g.0[..8], &[0x67, 0x45, 0x3e, 0x12, 0x9b, 0xe8, 0xd3, 0x12]);
        assert_eq!(&g.0[8..], &[0xa4, 0x56, 0x42, 0x66, 0x14, 0x17, 0x40, 0x00]);
        assert_eq!(Guid::parse("{123E4567-E89B-12D3-A456-426614174000}"), Ok(g));
        assert_eq!(
            Guid::parse("123e4567e89b12d3a456426614174000"),
            Err(ParseGuidError)
        );
        assert_eq!(
            Guid::parse("123e4567-e89b-12d3-a456-42661417400g"),
            Err(ParseGuidError)
        );
        assert_eq!(
            Guid::parse("{123e4567-e89b-12d3-a456-426614174000"),
            Err(ParseGuidError)
        );
        let mut out = heapless::String::<40>::new();
        core::fmt::write(&mut out, format_args!("{}", g)).unwrap();
        assert_eq!(out.as_str(), "123e4567-e89b-12d3-a456-426614174000");
    }
}
