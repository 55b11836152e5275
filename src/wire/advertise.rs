//! The 34-byte Advertise message a runtime sends first on a reverse (connect) diagnostic port.

use zerocopy::byteorder::little_endian::{U16, U64};
use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout, Unaligned};

use crate::error::EncodeError;
use crate::wire::Guid;

/// `"ADVR_V1\0"`.
pub const ADVERTISE_MAGIC: [u8; 8] = *b"ADVR_V1\0";
/// Size of an Advertise message.
pub const ADVERTISE_LEN: usize = 34;

/// The Advertise bytes as on the wire, viewed in place.
#[derive(FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned, Debug, Clone, Copy)]
#[repr(C)]
pub struct AdvertiseView {
    /// `ADVR_V1\0` in a valid message.
    pub magic: [u8; 8],
    /// The runtime cookie (the same GUID ProcessInfo reports).
    pub runtime_cookie: [u8; 16],
    /// The process id, little-endian.
    pub process_id: U64,
    /// Unused, 0.
    pub future: U16,
}

/// A validated Advertise: which runtime connected.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[cfg_attr(feature = "arbitrary", derive(arbitrary::Arbitrary))]
pub struct Advertise {
    /// The runtime instance cookie.
    pub runtime_cookie: Guid,
    /// The process id in the runtime's pid namespace.
    pub process_id: u64,
    /// The trailing reserved field (0 from real runtimes).
    pub future: u16,
}

/// Why bytes are not an Advertise message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[non_exhaustive]
pub enum AdvertiseError {
    /// Fewer than 34 bytes (for example, the peer closed early).
    Truncated {
        /// Bytes available.
        available: usize,
    },
    /// The first 8 bytes are not `ADVR_V1\0`.
    BadMagic {
        /// The bytes found.
        found: [u8; 8],
    },
}

impl core::fmt::Display for AdvertiseError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            AdvertiseError::Truncated { available } => write!(
                f,
                "advertise truncated: 34 bytes needed, {} available",
                available
            ),
            AdvertiseError::BadMagic { found } => {
                f.write_str("advertise has bad magic ")?;
                crate::fmt::write_escaped(f, found)
            }
        }
    }
}

impl Advertise {
    /// Parses the first 34 bytes of `bytes`.
    pub fn parse(bytes: &[u8]) -> Result<Advertise, AdvertiseError> {
        let (view, _) =
            AdvertiseView::ref_from_prefix(bytes).map_err(|_| AdvertiseError::Truncated {
                available: bytes.len(),
            })?;
        if view.magic != ADVERTISE_MAGIC {
            return Err(AdvertiseError::BadMagic { found: view.magic });
        }
        Ok(Advertise {
            runtime_cookie: Guid(view.runtime_cookie),
            process_id: view.process_id.get(),
            future: view.future.get(),
        })
    }

    /// Writes the 34 bytes to the start of `out`; returns 34.
    pub fn emit(&self, out: &mut [u8]) -> Result<usize, EncodeError> {
        let view = AdvertiseView {
            magic: ADVERTISE_MAGIC,
            runtime_cookie: self.runtime_cookie.0,
            process_id: U64::new(self.process_id),
            future: U16::new(self.future),
        };
        match out.get_mut(..ADVERTISE_LEN) {
            Some(dst) => {
                dst.copy_from_slice(view.as_bytes());
                Ok(ADVERTISE_LEN)
            }
            None => Err(EncodeError::BufferTooSmall {
                needed: ADVERTISE_LEN,
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spec_example() {
        // The spec's table: cookie 123e4567-e89b-12d3-a456-426614174000, pid 12345.
        let adv = Advertise {
            runtime_cookie: Guid::parse("123e4567-e89b-12d3-a456-426614174000").unwrap(),
            process_id: 12345,
            future: 0,
        };
        let mut out = [0u8; 34];
        assert_eq!(adv.emit(&mut out), Ok(34));
        assert_eq!(&out[..8], b"ADVR_V1\0");
        assert_eq!(&out[24..32], &12345u64.to_le_bytes());
        assert_eq!(Advertise::parse(&out), Ok(adv));
        assert_eq!(
            Advertise::parse(&out[..33]),
            Err(AdvertiseError::Truncated { available: 33 })
        );
        out[0] = b'a';
        assert!(matches!(
            Advertise::parse(&out),
            Err(AdvertiseError::BadMagic { .. })
        ));
    }

    #[test]
    fn real_runtime_bytes() {
        // From observed-runtime-behavior.md: pid 28988 (0x713c).
        let hex = "414456525f563100d1ccbefdb5c3774999a792a9f7e91da83c710000000000000000";
        let mut b = [0u8; 34];
        for i in 0..34 {
            b[i] = u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).unwrap();
        }
        let adv = Advertise::parse(&b).unwrap();
        assert_eq!(adv.process_id, 28988);
        assert_eq!(adv.future, 0);
    }
}
