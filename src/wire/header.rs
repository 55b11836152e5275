//! The 20-byte IPC header: a zerocopy view over received bytes, and the validated [`Header`].

use zerocopy::byteorder::little_endian::U16;
use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout, Unaligned};

use crate::error::{EncodeError, HeaderError};
use crate::wire::Command;

/// `"DOTNET_IPC_V1\0"`, the first 14 bytes of every message.
pub const MAGIC: [u8; 14] = *b"DOTNET_IPC_V1\0";
/// Size of the header.
pub const HEADER_LEN: usize = 20;
/// Largest message the `u16` size field allows.
pub const MAX_MESSAGE_LEN: usize = u16::MAX as usize;
/// Largest payload: [`MAX_MESSAGE_LEN`] minus the header.
pub const MAX_PAYLOAD_LEN: usize = MAX_MESSAGE_LEN - HEADER_LEN;

/// The header's bytes exactly as on the wire, viewed in place without copying.
#[derive(FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned, Debug, Clone, Copy)]
#[repr(C)]
pub struct HeaderView {
    /// `DOTNET_IPC_V1\0` in a valid header.
    pub magic: [u8; 14],
    /// Size of header plus payload, little-endian.
    pub size: U16,
    /// Command set byte.
    pub command_set: u8,
    /// Command id byte.
    pub command_id: u8,
    /// Reserved, 0 by the spec; never checked by the runtime.
    pub reserved: U16,
}

impl HeaderView {
    /// Views the first 20 bytes of `bytes`, or `None` if fewer are given.
    pub fn ref_from(bytes: &[u8]) -> Option<&HeaderView> {
        HeaderView::ref_from_prefix(bytes).ok().map(|(v, _)| v)
    }

    /// True if the magic is `DOTNET_IPC_V1\0`.
    pub fn magic_ok(&self) -> bool {
        self.magic == MAGIC
    }

    /// The size field.
    pub fn size(&self) -> u16 {
        self.size.get()
    }

    /// The command.
    pub fn command(&self) -> Command {
        Command::from_code(self.command_set, self.command_id)
    }
}

/// A validated header: the magic was right and `size >= 20`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct Header {
    size: u16,
    command: Command,
    reserved: u16,
}

impl Header {
    /// Size of the whole message (header included): at least 20, always.
    pub fn size(&self) -> u16 {
        self.size
    }

    /// The command (request) or the reply kind (ServerOk / ServerError).
    pub fn command(&self) -> Command {
        self.command
    }

    /// The reserved field as received (0 when emitted by this crate).
    pub fn reserved(&self) -> u16 {
        self.reserved
    }

    /// A header for `command` with a payload of `payload_len` bytes.
    pub fn for_payload(command: Command, payload_len: usize) -> Result<Header, EncodeError> {
        let size = HEADER_LEN + payload_len;
        if size > MAX_MESSAGE_LEN {
            return Err(EncodeError::MessageTooLarge { size });
        }
        Ok(Header {
            size: size as u16,
            command,
            reserved: 0,
        })
    }

    /// Parses and validates the first 20 bytes of `bytes`: magic first, then size.
    pub fn parse(bytes: &[u8]) -> Result<Header, HeaderError> {
        let view = HeaderView::ref_from(bytes).ok_or(HeaderError::Truncated {
            available: bytes.len(),
        })?;
        if !view.magic_ok() {
            return Err(HeaderError::BadMagic { found: view.magic });
        }
        Header::from_view_unchecked_magic(view)
    }

    /// Validates the size of a view whose magic the caller checks (or checks later, as the
    /// runtime's server does).
    pub fn from_view_unchecked_magic(view: &HeaderView) -> Result<Header, HeaderError> {
        let size = view.size();
        if (size as usize) < HEADER_LEN {
            return Err(HeaderError::SizeTooSmall { size });
        }
        Ok(Header {
            size,
            command: view.command(),
            reserved: view.reserved.get(),
        })
    }

    /// Payload length (`size - 20`). A `Header` cannot be built with a size below 20 (its
    /// fields are private: [`Header::parse`], [`Header::from_view_unchecked_magic`] and
    /// [`Header::for_payload`] validate), so this never underflows.
    pub fn payload_len(&self) -> usize {
        (self.size as usize).saturating_sub(HEADER_LEN)
    }

    /// The header as a wire view.
    pub fn to_view(&self) -> HeaderView {
        let (command_set, command_id) = self.command.code();
        HeaderView {
            magic: MAGIC,
            size: U16::new(self.size),
            command_set,
            command_id,
            reserved: U16::new(self.reserved),
        }
    }

    /// Writes the 20 header bytes to the start of `out`.
    pub fn emit(&self, out: &mut [u8]) -> Result<(), EncodeError> {
        match out.get_mut(..HEADER_LEN) {
            Some(dst) => {
                dst.copy_from_slice(self.to_view().as_bytes());
                Ok(())
            }
            None => Err(EncodeError::BufferTooSmall { needed: HEADER_LEN }),
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_header_is_valid_by_construction() {
        let h = super::Header::for_payload(super::Command::ProcessInfo, 3).unwrap();
        assert_eq!((h.size(), h.payload_len()), (23, 3));
        // The only other ways in validate the size.
        let mut bytes = [0u8; 20];
        h.emit(&mut bytes).unwrap();
        bytes[14] = 5;
        assert!(super::Header::parse(&bytes).is_err());
        assert!(super::Header::for_payload(super::Command::ProcessInfo, 65_516).is_err());
    }

    use super::*;

    /// The spec's generic OK message.
    const SPEC_OK: [u8; 20] = [
        b'D', b'O', b'T', b'N', b'E', b'T', b'_', b'I', b'P', b'C', b'_', b'V', b'1', 0, 20, 0,
        0xFF, 0x00, 0, 0,
    ];

    #[test]
    fn spec_ok_message() {
        let h = Header::parse(&SPEC_OK).unwrap();
        assert_eq!(h.size, 20);
        assert_eq!(h.command, Command::ServerOk);
        let mut out = [0u8; 20];
        h.emit(&mut out).unwrap();
        assert_eq!(out, SPEC_OK);
    }

    #[test]
    fn rejections() {
        assert_eq!(
            Header::parse(&SPEC_OK[..19]),
            Err(HeaderError::Truncated { available: 19 })
        );
        let mut bad = SPEC_OK;
        bad[0] = b'X';
        assert!(matches!(
            Header::parse(&bad),
            Err(HeaderError::BadMagic { .. })
        ));
        let mut small = SPEC_OK;
        small[14] = 19;
        assert_eq!(
            Header::parse(&small),
            Err(HeaderError::SizeTooSmall { size: 19 })
        );
        assert_eq!(
            Header::for_payload(Command::ProcessInfo, MAX_PAYLOAD_LEN + 1),
            Err(EncodeError::MessageTooLarge { size: 65536 })
        );
    }
}
