//! The typed errors of the nettrace parser. Each carries the stream offset it concerns.

use core::fmt;

/// Why a nettrace stream could not be parsed. `offset` is the stream offset (bytes from the
/// first byte of the stream, i.e. the file offset) where the problem was found.
///
/// After an error the parser is failed and returns the same error on every later call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[non_exhaustive]
pub enum NettraceError {
    /// The stream does not start with `Nettrace` (and is not a NetPerf stream either).
    BadMagic {
        /// Where the magic was expected.
        offset: u64,
        /// The first bytes found (zero-padded when fewer arrived).
        found: [u8; 8],
    },
    /// A NetPerf stream (format V1-V3, .NET Core 2.x): obsolete and not supported.
    NetPerf {
        /// Where the NetPerf header starts.
        offset: u64,
    },
    /// A nettrace version this parser does not read (a V6-style header with a major version
    /// above 6, or a V4/V5 `Trace` object of another version).
    UnsupportedVersion {
        /// Where the version was read.
        offset: u64,
        /// The version found.
        version: u32,
    },
    /// A FastSerialization tag byte is not what the format requires there.
    BadTag {
        /// Where the tag is.
        offset: u64,
        /// The tag the format requires.
        expected: u8,
        /// The byte found.
        found: u8,
    },
    /// A block announces more content than the parser's maximum block size
    /// ([`NettraceParser::with_max_block_size`](super::NettraceParser::with_max_block_size)).
    BlockTooLarge {
        /// Where the block starts.
        offset: u64,
        /// The size it announces.
        size: u64,
        /// The maximum the parser was configured with.
        max: usize,
    },
    /// A variable-length integer is longer than its type allows or runs past its block.
    BadVarint {
        /// Where the integer starts.
        offset: u64,
    },
    /// A structure is inconsistent: `what` names the field or rule that failed.
    Malformed {
        /// Where the field is.
        offset: u64,
        /// The field or rule.
        what: &'static str,
    },
    /// The stream ended (EOF) before its end-of-stream marker, inside or between blocks.
    /// Everything reported before stays valid.
    Truncated {
        /// Offset of the first byte not consumed (where the missing data starts).
        offset: u64,
        /// Bytes the next item needed (0 between blocks: only the end marker is missing).
        needed: usize,
        /// Bytes that were available.
        available: usize,
    },
    /// Bytes arrived after the end-of-stream marker.
    TrailingData {
        /// Offset of the first extra byte.
        offset: u64,
        /// How many bytes were offered.
        len: usize,
    },
}

impl NettraceError {
    /// The stream offset the error concerns.
    pub fn offset(&self) -> u64 {
        match *self {
            NettraceError::BadMagic { offset, .. }
            | NettraceError::NetPerf { offset }
            | NettraceError::UnsupportedVersion { offset, .. }
            | NettraceError::BadTag { offset, .. }
            | NettraceError::BlockTooLarge { offset, .. }
            | NettraceError::BadVarint { offset }
            | NettraceError::Malformed { offset, .. }
            | NettraceError::Truncated { offset, .. }
            | NettraceError::TrailingData { offset, .. } => offset,
        }
    }
}

impl fmt::Display for NettraceError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            NettraceError::BadMagic { offset, found } => {
                write!(f, "not a nettrace stream at offset {}: found ", offset)?;
                crate::fmt::write_escaped(f, &found)
            }
            NettraceError::NetPerf { offset } => write!(
                f,
                "NetPerf stream (nettrace V1-V3, .NET Core 2.x) at offset {}: not supported",
                offset
            ),
            NettraceError::UnsupportedVersion { offset, version } => write!(
                f,
                "unsupported nettrace version {} at offset {}",
                version, offset
            ),
            NettraceError::BadTag {
                offset,
                expected,
                found,
            } => write!(
                f,
                "bad tag at offset {}: expected 0x{:02x}, found 0x{:02x}",
                offset, expected, found
            ),
            NettraceError::BlockTooLarge { offset, size, max } => write!(
                f,
                "block at offset {} announces {} bytes, more than the maximum of {}",
                offset, size, max
            ),
            NettraceError::BadVarint { offset } => {
                write!(f, "malformed variable-length integer at offset {}", offset)
            }
            NettraceError::Malformed { offset, what } => {
                write!(f, "malformed {} at offset {}", what, offset)
            }
            NettraceError::Truncated {
                offset,
                needed,
                available,
            } => write!(
                f,
                "stream truncated at offset {}: {} bytes needed, {} available",
                offset, needed, available
            ),
            NettraceError::TrailingData { offset, len } => write!(
                f,
                "{} bytes after the end of the stream at offset {}",
                len, offset
            ),
        }
    }
}

/// Why a payload field could not be decoded by the field walker ([`FieldDescriptions::walk`](super::FieldDescriptions::walk)).
/// Offsets are relative to the start of the payload.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[non_exhaustive]
pub enum FieldError {
    /// The payload ended inside a field.
    Truncated {
        /// Offset of the field in the payload.
        offset: usize,
        /// Bytes the field needs.
        needed: usize,
        /// Bytes that were left.
        available: usize,
    },
    /// A NUL-terminated string has no terminator before the end of the payload.
    UnterminatedString {
        /// Offset of the string in the payload.
        offset: usize,
    },
    /// A variable-length integer is malformed.
    BadVarint {
        /// Offset of the integer in the payload.
        offset: usize,
    },
    /// A field type the walker cannot size (an unknown type code): the rest of the payload is
    /// left undecoded.
    UnknownType {
        /// Offset of the field in the payload.
        offset: usize,
        /// The type code.
        code: u32,
    },
    /// A RelLoc/DataLoc location points outside the payload.
    BadLocation {
        /// Offset of the field in the payload.
        offset: usize,
    },
}

impl fmt::Display for FieldError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            FieldError::Truncated {
                offset,
                needed,
                available,
            } => write!(
                f,
                "payload truncated at offset {}: {} bytes needed, {} available",
                offset, needed, available
            ),
            FieldError::UnterminatedString { offset } => {
                write!(f, "unterminated string at payload offset {}", offset)
            }
            FieldError::BadVarint { offset } => {
                write!(f, "malformed varint at payload offset {}", offset)
            }
            FieldError::UnknownType { offset, code } => {
                write!(
                    f,
                    "unknown field type {} at payload offset {}",
                    code, offset
                )
            }
            FieldError::BadLocation { offset } => {
                write!(
                    f,
                    "location outside the payload at payload offset {}",
                    offset
                )
            }
        }
    }
}

#[cfg(feature = "std")]
impl std::error::Error for NettraceError {}
#[cfg(feature = "std")]
impl std::error::Error for FieldError {}
