//! Typed errors of the codec and of the connection machines.
//!
//! Every error is `Copy`, small, and says what it needed: capacity errors carry the size
//! that would have worked, truncation errors say how many bytes were missing and where.

use core::fmt;

use crate::wire::Command;

/// Why a payload (or a field of one) could not be decoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[non_exhaustive]
pub enum DecodeError {
    /// The payload ended inside `field`: `needed` bytes were required at `offset`,
    /// only `available` were left.
    Truncated {
        /// The field being read.
        field: &'static str,
        /// Offset of the field within the payload.
        offset: usize,
        /// Bytes the field needs.
        needed: usize,
        /// Bytes that were left.
        available: usize,
    },
    /// A non-null string whose last UTF-16 unit is not NUL.
    UnterminatedString {
        /// The string field.
        field: &'static str,
        /// Offset of the string's length prefix within the payload.
        offset: usize,
    },
    /// Bytes were left over after the last field of a payload that must be exact.
    TrailingBytes {
        /// How many bytes were left over.
        count: usize,
    },
    /// A field holds a value this protocol does not allow there.
    InvalidValue {
        /// The field.
        field: &'static str,
        /// The value found, widened to 64 bits.
        value: u64,
    },
}

impl fmt::Display for DecodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            DecodeError::Truncated {
                field,
                offset,
                needed,
                available,
            } => write!(
                f,
                "payload truncated in `{}` at offset {}: needed {} bytes, {} available",
                field, offset, needed, available
            ),
            DecodeError::UnterminatedString { field, offset } => write!(
                f,
                "string `{}` at offset {} does not end with a NUL unit",
                field, offset
            ),
            DecodeError::TrailingBytes { count } => {
                write!(f, "{} unexpected bytes after the last field", count)
            }
            DecodeError::InvalidValue { field, value } => {
                write!(f, "invalid value {} for `{}`", value, field)
            }
        }
    }
}

/// Why a request or reply could not be encoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[non_exhaustive]
pub enum EncodeError {
    /// The output buffer is too small: `needed` bytes would fit the message.
    BufferTooSmall {
        /// Size of the whole encoded message.
        needed: usize,
    },
    /// The message would be `size` bytes, more than the protocol's 65,535-byte limit.
    MessageTooLarge {
        /// Size the message would have had.
        size: usize,
    },
    /// A field holds a value that real runtimes reject or crash on (see the field's docs).
    InvalidField {
        /// The field.
        field: &'static str,
        /// What is wrong with it.
        reason: &'static str,
    },
}

impl fmt::Display for EncodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            EncodeError::BufferTooSmall { needed } => {
                write!(f, "output buffer too small: {} bytes needed", needed)
            }
            EncodeError::MessageTooLarge { size } => write!(
                f,
                "message of {} bytes exceeds the protocol limit of 65535",
                size
            ),
            EncodeError::InvalidField { field, reason } => {
                write!(f, "invalid `{}`: {}", field, reason)
            }
        }
    }
}

/// Why a 20-byte IPC header was rejected.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[non_exhaustive]
pub enum HeaderError {
    /// Fewer than 20 bytes were given.
    Truncated {
        /// Bytes available.
        available: usize,
    },
    /// The first 14 bytes are not `DOTNET_IPC_V1\0`.
    BadMagic {
        /// The 14 bytes found.
        found: [u8; 14],
    },
    /// The size field is below the header's own 20 bytes.
    SizeTooSmall {
        /// The size found.
        size: u16,
    },
}

impl fmt::Display for HeaderError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            HeaderError::Truncated { available } => {
                write!(
                    f,
                    "header truncated: 20 bytes needed, {} available",
                    available
                )
            }
            HeaderError::BadMagic { found } => {
                write!(f, "bad magic ")?;
                crate::fmt::write_escaped(f, &found)
            }
            HeaderError::SizeTooSmall { size } => {
                write!(f, "header size field {} is below 20", size)
            }
        }
    }
}

/// A protocol violation or misuse reported by [`ClientConnection`](crate::conn::ClientConnection).
///
/// After any error other than [`ClientError::Encode`] and the misuse variants, the machine
/// is failed and returns the same error on every later call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[non_exhaustive]
pub enum ClientError {
    /// The request could not be encoded.
    Encode(EncodeError),
    /// The reply header did not start with `DOTNET_IPC_V1\0`.
    BadMagic {
        /// The 14 bytes found.
        found: [u8; 14],
    },
    /// The reply header's size field is below 20.
    SizeTooSmall {
        /// The size found.
        size: u16,
    },
    /// The reply's command is neither Server/OK (0xFF00) nor Server/Error (0xFFFF).
    UnexpectedReplyCommand {
        /// The request's command.
        request: Command,
        /// Command set found in the reply.
        command_set: u8,
        /// Command id found in the reply.
        command_id: u8,
    },
    /// The reply payload is shorter than its command's reply needs.
    PayloadTooShort {
        /// The request's command.
        request: Command,
        /// What was missing.
        detail: DecodeError,
    },
    /// The reply payload has bytes after its last field.
    PayloadTooLong {
        /// The request's command.
        request: Command,
        /// Length of the payload received.
        len: usize,
        /// How many bytes of it were not part of the reply.
        extra: usize,
    },
    /// The reply payload is malformed (unterminated string, invalid value).
    InvalidPayload {
        /// The request's command.
        request: Command,
        /// What was wrong.
        detail: DecodeError,
    },
    /// The ProcessEnvironment continuation does not match the size the reply announced.
    EnvironmentSizeMismatch {
        /// Bytes announced in the reply.
        announced: u32,
        /// Bytes the variables actually need (or the first offset found inconsistent).
        actual: u64,
    },
    /// The peer closed the connection before the reply arrived.
    ClosedBeforeReply,
    /// The peer closed the connection in the middle of a message.
    UnexpectedEof {
        /// Bytes the message needed.
        needed: usize,
        /// Bytes that had arrived.
        available: usize,
    },
    /// The peer sent bytes where the protocol allows none (after a reply without continuation,
    /// or past the end of a sized continuation).
    UnexpectedData {
        /// How many unexpected bytes were offered.
        len: usize,
    },
    /// A reverse-port connection did not start with a valid 34-byte Advertise.
    BadAdvertise(crate::wire::AdvertiseError),
    /// The caller misused the machine (a bug in the driving code, not the peer's doing);
    /// the machine is unchanged.
    Misuse(UsageError),
}

/// A [`ClientConnection`](crate::ClientConnection) used out of order by its caller: never
/// caused by the peer's bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[non_exhaustive]
pub enum UsageError {
    /// A request on a reverse-port connection before the Advertise arrived.
    AdvertiseNotReceived,
    /// Input or EOF was handed to the machine before a request was sent.
    NotSent,
    /// A second request on one connection (the protocol allows one per connection).
    AlreadySent,
}

impl fmt::Display for UsageError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            UsageError::AdvertiseNotReceived => "the runtime has not advertised itself yet",
            UsageError::NotSent => "no request has been sent on this connection",
            UsageError::AlreadySent => "a request was already sent (one command per connection)",
        })
    }
}

impl ClientError {
    /// True if the caller misused the machine ([`ClientError::Misuse`]), false for what the
    /// peer sent or did (and for encoding errors of the request itself).
    pub fn is_misuse(&self) -> bool {
        matches!(self, ClientError::Misuse(_))
    }
}

impl fmt::Display for ClientError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            ClientError::Encode(e) => write!(f, "cannot encode request: {}", e),
            ClientError::BadMagic { found } => {
                write!(f, "reply has bad magic ")?;
                crate::fmt::write_escaped(f, &found)
            }
            ClientError::SizeTooSmall { size } => {
                write!(f, "reply header size {} is below 20", size)
            }
            ClientError::UnexpectedReplyCommand {
                request,
                command_set,
                command_id,
            } => write!(
                f,
                "reply to {} has command {:02X}{:02X}, expected FF00 (OK) or FFFF (error)",
                request, command_set, command_id
            ),
            ClientError::PayloadTooShort { request, detail } => {
                write!(f, "reply to {} is too short: {}", request, detail)
            }
            ClientError::PayloadTooLong {
                request,
                len,
                extra,
            } => write!(
                f,
                "reply to {} has a {}-byte payload with {} unexpected trailing bytes",
                request, len, extra
            ),
            ClientError::InvalidPayload { request, detail } => {
                write!(f, "reply to {} is invalid: {}", request, detail)
            }
            ClientError::EnvironmentSizeMismatch { announced, actual } => write!(
                f,
                "environment block announced {} bytes but its contents need {}",
                announced, actual
            ),
            ClientError::ClosedBeforeReply => {
                write!(f, "connection closed before the reply arrived")
            }
            ClientError::UnexpectedEof { needed, available } => write!(
                f,
                "connection closed inside a message: {} bytes needed, {} received",
                needed, available
            ),
            ClientError::UnexpectedData { len } => {
                write!(f, "peer sent {} bytes where none were expected", len)
            }
            ClientError::BadAdvertise(e) => write!(f, "bad advertise: {}", e),
            ClientError::Misuse(u) => write!(f, "misuse: {}", u),
        }
    }
}

impl From<EncodeError> for ClientError {
    fn from(e: EncodeError) -> Self {
        ClientError::Encode(e)
    }
}

#[cfg(feature = "std")]
mod std_impls {
    use super::*;
    impl std::error::Error for DecodeError {}
    impl std::error::Error for EncodeError {}
    impl std::error::Error for HeaderError {}
    impl std::error::Error for ClientError {}
    impl std::error::Error for UsageError {}
    impl std::error::Error for crate::wire::TranscodeError {}
    impl std::error::Error for crate::wire::AdvertiseError {}
    impl std::error::Error for crate::wire::ParseGuidError {}
    impl std::error::Error for crate::transport::StatError {}
}
