//! Block framing: V4/V5 FastSerialization objects and V6 block headers.

use super::error::NettraceError;

/// What a block holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum BlockKind {
    /// Events (`EventBlock`, V6 kind 2).
    Event,
    /// Metadata records (`MetadataBlock`, V6 kind 3).
    Metadata,
    /// Stacks (`StackBlock`, V6 kind 5).
    Stack,
    /// A sequence point (`SPBlock`, V6 kind 4).
    SequencePoint,
    /// V6 thread descriptions (kind 6).
    Thread,
    /// V6 removed threads (kind 7).
    RemoveThread,
    /// V6 label lists (kind 8).
    LabelList,
    /// Anything else: skipped by its size (see [`BlockInfo::name`] / [`BlockInfo::code`]).
    Unknown,
}

impl BlockKind {
    /// The kind of a V4/V5 object name.
    pub fn from_v4_name(name: &[u8]) -> BlockKind {
        match name {
            b"EventBlock" => BlockKind::Event,
            b"MetadataBlock" => BlockKind::Metadata,
            b"StackBlock" => BlockKind::Stack,
            b"SPBlock" => BlockKind::SequencePoint,
            _ => BlockKind::Unknown,
        }
    }

    /// The kind of a V6 block kind byte (0 = end of stream and 1 = trace are not blocks in
    /// this sense and map to `Unknown`).
    pub fn from_v6_code(code: u8) -> BlockKind {
        match code {
            2 => BlockKind::Event,
            3 => BlockKind::Metadata,
            4 => BlockKind::SequencePoint,
            5 => BlockKind::Stack,
            6 => BlockKind::Thread,
            7 => BlockKind::RemoveThread,
            8 => BlockKind::LabelList,
            _ => BlockKind::Unknown,
        }
    }
}

/// The start of a block: reported before the block's items, once the whole block has
/// arrived.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct BlockInfo<'a> {
    /// What the block holds.
    pub kind: BlockKind,
    /// Stream offset of the block's framing (V4: the object's first tag; V6: its header).
    pub offset: u64,
    /// Stream offset of the block's content.
    pub content_offset: u64,
    /// Size of the content in bytes (V4: BlockSize; V6: the header's size).
    pub size: u32,
    /// V4/V5 object name (ASCII, e.g. `EventBlock`); empty in V6.
    pub name: &'a [u8],
    /// V4/V5 object version; 0 in V6.
    pub version: i32,
    /// V6 block kind byte; 0 in V4/V5.
    pub code: u8,
    /// Event and V4 metadata blocks: the header flags (bit 0: compressed headers); else 0.
    pub flags: u16,
    /// Event and V4 metadata blocks: the minimum timestamp the header announces; else 0.
    pub min_timestamp: i64,
    /// Event and V4 metadata blocks: the maximum timestamp the header announces; else 0.
    pub max_timestamp: i64,
}

/// Longest V4/V5 object name accepted (real names are at most 13 bytes).
pub const MAX_OBJECT_NAME: usize = 256;

/// A parsed V4/V5 object header (`05 05 01 version minVersion nameLen name 06`).
pub(crate) struct ObjectHeader<'a> {
    pub(crate) version: i32,
    pub(crate) name: &'a [u8],
    /// Bytes the header takes.
    pub(crate) len: usize,
}

/// Outcome of a framing step: done, or more bytes needed.
pub(crate) enum Step<T> {
    Ready(T),
    Need(usize),
}

/// Checks the `06` end tag of a V4/V5 object at `input[at]` (stream offset `base + at`).
pub(crate) fn end_tag(input: &[u8], at: usize, base: u64) -> Result<(), NettraceError> {
    match input[at] {
        0x06 => Ok(()),
        found => Err(NettraceError::BadTag {
            offset: base + at as u64,
            expected: 0x06,
            found,
        }),
    }
}

/// Parses a V4/V5 object header at `input[0]` (stream offset `base`).
pub(crate) fn object_header(
    input: &[u8],
    base: u64,
) -> Result<Step<ObjectHeader<'_>>, NettraceError> {
    const TAGS: [u8; 3] = [0x05, 0x05, 0x01];
    for (i, &t) in TAGS.iter().enumerate() {
        match input.get(i) {
            None => return Ok(Step::Need(15)),
            Some(&b) if b != t => {
                return Err(NettraceError::BadTag {
                    offset: base + i as u64,
                    expected: t,
                    found: b,
                })
            }
            Some(_) => {}
        }
    }
    if input.len() < 15 {
        return Ok(Step::Need(15));
    }
    let i32_at =
        |i: usize| i32::from_le_bytes([input[i], input[i + 1], input[i + 2], input[i + 3]]);
    let version = i32_at(3);
    let name_len = i32_at(11);
    if name_len < 0 || name_len as usize > MAX_OBJECT_NAME {
        return Err(NettraceError::Malformed {
            offset: base + 11,
            what: "object name length",
        });
    }
    let name_len = name_len as usize;
    let len = 15 + name_len + 1;
    if input.len() < len {
        return Ok(Step::Need(len));
    }
    end_tag(input, len - 1, base)?;
    Ok(Step::Ready(ObjectHeader {
        version,
        name: &input[15..15 + name_len],
        len,
    }))
}
