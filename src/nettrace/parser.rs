//! The nettrace stream parser: the state machine that frames the stream header, the blocks
//! and their items.

use super::blob::{event, read_blob, read_header, HeaderState};
use super::block::{end_tag, object_header, Step};
use super::varint::Cur;
use super::{
    BlockInfo, BlockKind, Format, Handled, Item, LabelListBlock, Metadata, NettraceError,
    RemoveThreadBlock, SequencePoint, StackBlock, Status, ThreadBlock, TraceHeader,
    DEFAULT_MAX_BLOCK_SIZE, FAST_SERIALIZATION, MAGIC, MAX_FRAMING, MAX_MAJOR_VERSION,
    V4_STREAM_HEADER_LEN, V6_STREAM_HEADER_LEN,
};
use crate::wire::Guid;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Expecting the stream header and the trace object.
    Start,
    /// Between blocks: expecting a block or the end marker.
    Between,
    /// Inside a block whose whole content (and trailer) has been seen.
    InBlock,
    /// The end marker was reported.
    Done,
    /// An error was reported; it is repeated.
    Failed(NettraceError),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct BlockState {
    kind: BlockKind,
    /// Content bytes not yet consumed.
    left: usize,
    /// Bytes after the content (V4: the `06` end tag; V6: none).
    trailer: usize,
    compressed: bool,
    header: HeaderState,
}

/// The nettrace stream parser: a state machine fed received bytes. See the
/// [module docs](super) for the loop.
#[derive(Debug, Clone)]
pub struct NettraceParser {
    state: State,
    /// Stream offset of the first byte the next call receives.
    offset: u64,
    max_block: usize,
    format: Option<Format>,
    pointer_size: u8,
    block: BlockState,
    /// Input length and `needed` of the last `Partial` (for `handle_eof`).
    pending: usize,
    needed: usize,
}

impl Default for NettraceParser {
    fn default() -> Self {
        Self::new()
    }
}

impl NettraceParser {
    /// A parser expecting the start of a stream, with [`DEFAULT_MAX_BLOCK_SIZE`].
    pub const fn new() -> Self {
        Self::with_max_block_size(DEFAULT_MAX_BLOCK_SIZE)
    }

    /// A parser refusing blocks larger than `max_block_size` bytes with
    /// [`NettraceError::BlockTooLarge`] (so a caller's buffer never needs more than that plus
    /// a few hundred bytes of framing).
    pub const fn with_max_block_size(max_block_size: usize) -> Self {
        NettraceParser {
            state: State::Start,
            offset: 0,
            max_block: max_block_size,
            format: None,
            pointer_size: 8,
            block: BlockState {
                kind: BlockKind::Unknown,
                left: 0,
                trailer: 0,
                compressed: false,
                header: HeaderState {
                    metadata_id: 0,
                    sequence_number: 0,
                    capture_thread_id: 0,
                    thread_id: 0,
                    processor_number: 0,
                    stack_id: 0,
                    timestamp: 0,
                    activity_id: crate::wire::Guid::NIL,
                    related_activity_id: crate::wire::Guid::NIL,
                    label_list_id: 0,
                    payload_size: 0,
                },
            },
            pending: 0,
            needed: 0,
        }
    }

    /// The maximum block size.
    pub fn max_block_size(&self) -> usize {
        self.max_block
    }

    /// The most contiguous bytes a [`Status::Partial`] can ask for: one block of the maximum
    /// size plus its framing. The bound to give this parser's receive buffer
    /// ([`RecvBuffer::with_limit`](crate::recv::RecvBuffer::with_limit)).
    pub fn max_needed(&self) -> usize {
        self.max_block.saturating_add(MAX_FRAMING)
    }

    /// Stream offset of the next byte to be consumed (bytes consumed so far).
    pub fn offset(&self) -> u64 {
        self.offset
    }

    /// The stream's format, once the header has been read.
    pub fn format(&self) -> Option<Format> {
        self.format
    }

    /// The trace's pointer size (8 until the header has been read).
    pub fn pointer_size(&self) -> u8 {
        self.pointer_size
    }

    /// The activity id and related activity id of the last event (or V4/V5 metadata record)
    /// reported: from its header, or carried over from the previous one of its block. Nil
    /// in V6, where label lists carry them, and before the first event of a block.
    pub fn activity_ids(&self) -> (Guid, Guid) {
        let h = &self.block.header;
        (h.activity_id, h.related_activity_id)
    }

    /// True once the end-of-stream marker has been reported.
    pub fn is_done(&self) -> bool {
        self.state == State::Done
    }

    /// Hands the parser received bytes, starting at the first byte not yet consumed. It
    /// consumes at most one item's bytes and reports it; call again with the rest until it
    /// returns [`Status::Partial`] or [`Status::Done`].
    ///
    /// Errors are typed and carry the stream offset; after one, the parser is failed and
    /// repeats it.
    #[inline]
    pub fn handle_input<'a>(&mut self, input: &'a [u8]) -> Result<Handled<'a>, NettraceError> {
        let r = match self.state {
            State::Failed(e) => return Err(e),
            State::Done => {
                if input.is_empty() {
                    return Ok(Handled {
                        consumed: 0,
                        status: Status::Done,
                    });
                }
                Err(NettraceError::TrailingData {
                    offset: self.offset,
                    len: input.len(),
                })
            }
            State::Start => self.start(input),
            State::Between => self.between(input, 0),
            State::InBlock => self.in_block(input),
        };
        // Inspected in place and returned as is: an item is not small, and every move of
        // it is a copy.
        match &r {
            Ok(h) => match h.status {
                Status::Partial { needed } => {
                    self.pending = input.len();
                    self.needed = needed;
                }
                _ => {
                    self.offset += h.consumed as u64;
                    self.pending = 0;
                    self.needed = 0;
                }
            },
            Err(e) => self.state = State::Failed(*e),
        }
        r
    }

    /// Tells the parser the stream ended (EOF). Ok after the end-of-stream marker;
    /// [`NettraceError::Truncated`] otherwise (everything reported before stays valid).
    pub fn handle_eof(&mut self) -> Result<(), NettraceError> {
        match self.state {
            State::Done => Ok(()),
            State::Failed(e) => Err(e),
            _ => {
                let e = NettraceError::Truncated {
                    offset: self.offset,
                    needed: self.needed.max(1),
                    available: self.pending,
                };
                self.state = State::Failed(e);
                Err(e)
            }
        }
    }

    fn partial<'a>(needed: usize) -> Result<Handled<'a>, NettraceError> {
        Ok(Handled {
            consumed: 0,
            status: Status::Partial { needed },
        })
    }

    fn too_large(&self, offset: u64, size: u64) -> NettraceError {
        NettraceError::BlockTooLarge {
            offset,
            size,
            max: self.max_block,
        }
    }

    /// The stream header and the trace object.
    fn start<'a>(&mut self, input: &'a [u8]) -> Result<Handled<'a>, NettraceError> {
        let base = self.offset;
        // Reject garbage as soon as its first bytes differ.
        let n = input.len().min(8);
        if input[..n] != MAGIC[..n] {
            let m = input.len().min(FAST_SERIALIZATION.len());
            if input[..m] == FAST_SERIALIZATION[..m] {
                if m == FAST_SERIALIZATION.len() {
                    return Err(NettraceError::NetPerf { offset: base });
                }
                return Self::partial(FAST_SERIALIZATION.len());
            }
            let mut found = [0u8; 8];
            found[..n].copy_from_slice(&input[..n]);
            return Err(NettraceError::BadMagic {
                offset: base,
                found,
            });
        }
        if input.len() < 12 {
            return Self::partial(12);
        }
        if input[8..12] == [0, 0, 0, 0] {
            return self.start_v6(input, base);
        }
        if input.len() < V4_STREAM_HEADER_LEN {
            return Self::partial(V4_STREAM_HEADER_LEN);
        }
        if input[8..32] != FAST_SERIALIZATION {
            return Err(NettraceError::Malformed {
                offset: base + 8,
                what: "stream header (expected the FastSerialization signature or a V6 header)",
            });
        }
        let obj_at = V4_STREAM_HEADER_LEN;
        let hdr = match object_header(&input[obj_at..], base + obj_at as u64)? {
            Step::Ready(h) => h,
            Step::Need(n) => return Self::partial(obj_at + n),
        };
        if hdr.name != b"Trace" {
            return Err(NettraceError::Malformed {
                offset: base + obj_at as u64 + 15,
                what: "first object (expected `Trace`)",
            });
        }
        if !(4..=5).contains(&hdr.version) {
            return Err(NettraceError::UnsupportedVersion {
                offset: base + obj_at as u64 + 3,
                version: hdr.version as u32,
            });
        }
        const BODY: usize = 48;
        let body_at = obj_at + hdr.len;
        let total = body_at + BODY + 1;
        if input.len() < total {
            return Self::partial(total);
        }
        end_tag(input, total - 1, base)?;
        let header = TraceHeader::parse_v4(&input[body_at..body_at + BODY], base + body_at as u64)?;
        self.format = Some(Format::V4);
        self.pointer_size = header.pointer_size;
        self.state = State::Between;
        Ok(Handled {
            consumed: total,
            status: Status::Event(Item::Trace(header)),
        })
    }

    fn start_v6<'a>(&mut self, input: &'a [u8], base: u64) -> Result<Handled<'a>, NettraceError> {
        if input.len() < V6_STREAM_HEADER_LEN + 4 {
            return Self::partial(V6_STREAM_HEADER_LEN + 4);
        }
        let u32_at =
            |i: usize| u32::from_le_bytes([input[i], input[i + 1], input[i + 2], input[i + 3]]);
        let major = u32_at(12);
        let minor = u32_at(16);
        if major > MAX_MAJOR_VERSION {
            return Err(NettraceError::UnsupportedVersion {
                offset: base + 12,
                version: major,
            });
        }
        if major < 6 {
            return Err(NettraceError::Malformed {
                offset: base + 12,
                what: "V6 stream header major version (below 6)",
            });
        }
        let x = u32_at(20);
        let (size, kind) = ((x & 0xFF_FFFF) as usize, (x >> 24) as u8);
        if kind != 1 {
            return Err(NettraceError::Malformed {
                offset: base + 20,
                what: "first block (expected a Trace block)",
            });
        }
        if size > self.max_block {
            return Err(self.too_large(base + 20, size as u64));
        }
        let total = V6_STREAM_HEADER_LEN + 4 + size;
        if input.len() < total {
            return Self::partial(total);
        }
        let at = V6_STREAM_HEADER_LEN + 4;
        let header = TraceHeader::parse_v6(&input[at..total], base + at as u64, minor)?;
        self.format = Some(Format::V6 { minor });
        self.pointer_size = header.pointer_size;
        self.state = State::Between;
        Ok(Handled {
            consumed: total,
            status: Status::Event(Item::Trace(header)),
        })
    }

    /// The next block (or the end marker) at `input[skip..]`; `skip` bytes (a trailer) before
    /// it are consumed along with it.
    fn between<'a>(&mut self, input: &'a [u8], skip: usize) -> Result<Handled<'a>, NettraceError> {
        let base = self.offset + skip as u64;
        let rest = &input[skip..];
        let v6 = matches!(self.format, Some(Format::V6 { .. }));
        let partial = |n: usize| Self::partial(skip.saturating_add(n));
        let (info, content_at, size, trailer) = if v6 {
            if rest.len() < 4 {
                return partial(4);
            }
            let x = u32::from_le_bytes([rest[0], rest[1], rest[2], rest[3]]);
            let (size, code) = ((x & 0xFF_FFFF) as usize, (x >> 24) as u8);
            if size > self.max_block {
                return Err(self.too_large(base, size as u64));
            }
            if rest.len() < 4 + size {
                return partial(4 + size);
            }
            if code == 0 {
                self.state = State::Done;
                return Ok(Handled {
                    consumed: skip + 4 + size,
                    status: Status::Event(Item::EndOfStream),
                });
            }
            if code == 1 {
                return Err(NettraceError::Malformed {
                    offset: base,
                    what: "second Trace block",
                });
            }
            let info = BlockInfo {
                kind: BlockKind::from_v6_code(code),
                offset: base,
                content_offset: base + 4,
                size: size as u32,
                name: &[],
                version: 0,
                code,
                flags: 0,
                min_timestamp: 0,
                max_timestamp: 0,
            };
            (info, 4, size, 0)
        } else {
            let first = match rest.first() {
                None => return partial(1),
                Some(&b) => b,
            };
            if first == 0x01 {
                self.state = State::Done;
                return Ok(Handled {
                    consumed: skip + 1,
                    status: Status::Event(Item::EndOfStream),
                });
            }
            if first != 0x05 {
                return Err(NettraceError::BadTag {
                    offset: base,
                    expected: 0x05,
                    found: first,
                });
            }
            let hdr = match object_header(rest, base)? {
                Step::Ready(h) => h,
                Step::Need(n) => return partial(n),
            };
            let size_at = hdr.len;
            if rest.len() < size_at + 4 {
                return partial(size_at + 4);
            }
            let raw = i32::from_le_bytes([
                rest[size_at],
                rest[size_at + 1],
                rest[size_at + 2],
                rest[size_at + 3],
            ]);
            let size_u = raw as u32 as u64;
            if raw < 0 || size_u > self.max_block as u64 {
                return Err(self.too_large(base, size_u));
            }
            let size = raw as usize;
            // Content starts 4-aligned, counted from the stream's first byte.
            let after_size = base + (size_at + 4) as u64;
            let pad = ((4 - after_size % 4) % 4) as usize;
            let content_at = size_at + 4 + pad;
            let total = content_at.saturating_add(size).saturating_add(1);
            if rest.len() < total {
                return partial(total);
            }
            end_tag(rest, total - 1, base)?;
            if hdr.name == b"Trace" {
                return Err(NettraceError::Malformed {
                    offset: base,
                    what: "second Trace object",
                });
            }
            let info = BlockInfo {
                kind: BlockKind::from_v4_name(hdr.name),
                offset: base,
                content_offset: base + content_at as u64,
                size: size as u32,
                name: hdr.name,
                version: hdr.version,
                code: 0,
                flags: 0,
                min_timestamp: 0,
                max_timestamp: 0,
            };
            (info, content_at, size, 1)
        };
        let mut info = info;
        let content = &rest[content_at..content_at + size];
        let mut header_len = 0;
        let mut compressed = false;
        let has_event_header =
            info.kind == BlockKind::Event || (info.kind == BlockKind::Metadata && !v6);
        if has_event_header {
            let mut c = Cur::new(content, info.content_offset);
            let header_size = c.u16("block HeaderSize")? as usize;
            if header_size < 20 || header_size > size {
                return Err(NettraceError::Malformed {
                    offset: info.content_offset,
                    what: "block HeaderSize",
                });
            }
            info.flags = c.u16("block Flags")?;
            info.min_timestamp = c.i64("block MinTimestamp")?;
            info.max_timestamp = c.i64("block MaxTimestamp")?;
            compressed = info.flags & 1 != 0;
            header_len = header_size;
        } else if info.kind == BlockKind::Metadata {
            // V6: u16 HeaderSize (not counting itself), then that many header bytes.
            let mut c = Cur::new(content, info.content_offset);
            let header_size = c.u16("metadata block HeaderSize")? as usize;
            if 2 + header_size > size {
                return Err(NettraceError::Malformed {
                    offset: info.content_offset,
                    what: "metadata block HeaderSize",
                });
            }
            header_len = 2 + header_size;
        }
        self.block = BlockState {
            kind: info.kind,
            left: size - header_len,
            trailer,
            compressed,
            header: HeaderState::default(),
        };
        self.state = State::InBlock;
        Ok(Handled {
            consumed: skip + content_at + header_len,
            status: Status::Event(Item::Block(info)),
        })
    }

    /// `used` content bytes of the current block were reported.
    #[inline]
    fn consumed_in_block(&mut self, used: usize) {
        self.block.left -= used;
        if self.block.left == 0 && self.block.trailer == 0 {
            self.state = State::Between;
        }
    }

    #[inline]
    fn in_block<'a>(&mut self, input: &'a [u8]) -> Result<Handled<'a>, NettraceError> {
        let left = self.block.left;
        let trailer = self.block.trailer;
        if input.len() < left + trailer {
            return Self::partial(left + trailer);
        }
        let base = self.offset;
        if left == 0 {
            if trailer == 1 {
                end_tag(input, 0, base)?;
            }
            return self.between(input, trailer);
        }
        let content = &input[..left];
        let v6 = matches!(self.format, Some(Format::V6 { .. }));
        if self.block.kind == BlockKind::Event {
            // The hot path: the event is built where the caller finds it, without moves.
            let mut c = Cur::new(content, base);
            let (payload, sorted) =
                read_header(&mut c, &mut self.block.header, self.block.compressed, v6)?;
            self.consumed_in_block(c.pos);
            return Ok(Handled {
                status: Status::Event(Item::Event(event(
                    &self.block.header,
                    sorted,
                    payload,
                    base,
                ))),
                consumed: c.pos,
            });
        }
        let (item, used) = match self.block.kind {
            BlockKind::Metadata if !v6 => {
                let mut c = Cur::new(content, base);
                let e = read_blob(&mut c, &mut self.block.header, self.block.compressed, false)?;
                let payload_at = base + (c.pos - e.payload.len()) as u64;
                let m = Metadata::parse(e.payload, Format::V4, payload_at)?;
                (Item::Metadata(m), c.pos)
            }
            BlockKind::Metadata => {
                let mut c = Cur::new(content, base);
                let size = c.u16("metadata row size")? as usize;
                let row_at = c.offset();
                let row = c.take(size, "metadata row")?;
                let format = self.format.unwrap_or(Format::V6 { minor: 0 });
                (Item::Metadata(Metadata::parse(row, format, row_at)?), c.pos)
            }
            BlockKind::Stack => (
                Item::Stacks(StackBlock::parse(content, base, self.pointer_size)?),
                left,
            ),
            BlockKind::SequencePoint => (
                Item::SequencePoint(SequencePoint::parse(content, base, v6)?),
                left,
            ),
            BlockKind::Thread => (Item::Threads(ThreadBlock::parse(content, base)?), left),
            BlockKind::RemoveThread => (
                Item::RemoveThreads(RemoveThreadBlock::parse(content, base)?),
                left,
            ),
            BlockKind::LabelList => (
                Item::LabelLists(LabelListBlock::parse(content, base)?),
                left,
            ),
            BlockKind::Unknown | BlockKind::Event => (Item::UnknownBlock(content), left),
        };
        self.consumed_in_block(used);
        Ok(Handled {
            consumed: used,
            status: Status::Event(item),
        })
    }
}
