//! # nettrace: the EventPipe trace stream, parsed sans-IO
//!
//! What a runtime streams after the CollectTracing reply (the
//! [`ClientEvent::StreamData`](crate::ClientEvent::StreamData) slices of a session) and what
//! `dotnet-trace` writes to `.nettrace` files: format V4/V5 (every runtime, .NET Core 3.0 to
//! .NET 10) and V6 (`dotnet-trace collect-linux`). NetPerf (V1-V3) is rejected with
//! [`NettraceError::NetPerf`].
//!
//! [`NettraceParser`] is driven like [`ClientConnection`](crate::ClientConnection): the caller
//! keeps a receive buffer, hands the parser everything not yet consumed, and acts on each
//! [`Status`]. It reports [`Status::Partial`] until a whole block has arrived (never more:
//! a live reader gets each block's items as soon as that block is complete), then yields the
//! block's items one call at a time, each borrowing the caller's buffer. Nothing is
//! allocated or copied; the parser's own state is a few words.
//!
//! ```
//! use dsipc::nettrace::{Item, NettraceParser, Status, Value};
//!
//! /// Counts the events of a whole trace held in memory and prints each metadata record.
//! fn count(trace: &[u8]) -> Result<u64, dsipc::nettrace::NettraceError> {
//!     let mut parser = NettraceParser::new();
//!     let mut at = 0;
//!     let mut events = 0;
//!     loop {
//!         let handled = parser.handle_input(&trace[at..])?;
//!         at += handled.consumed;
//!         match handled.status {
//!             Status::Event(Item::Metadata(m)) => {
//!                 let m = m.record()?;
//!                 println!("{} {} {} v{}", m.metadata_id, m.provider_name, m.event_name, m.version);
//!                 for f in m.fields.iter() {
//!                     println!("  field {} {:?}", f.name, f.ty.code);
//!                 }
//!             }
//!             Status::Event(Item::Event(_)) => events += 1,
//!             Status::Event(_) => {}
//!             // A file: no more bytes will come.
//!             Status::Partial { .. } => {
//!                 parser.handle_eof()?; // Err(Truncated) without the end-of-stream marker
//!                 return Ok(events);
//!             }
//!             Status::Done => return Ok(events),
//!         }
//!     }
//! }
//! # let _ = count;
//! ```
//!
//! ## Streaming
//! When reading from a socket, loop until [`Status::Partial`], then compact the buffer
//! (drop the consumed bytes), make room for at least `needed` bytes (one block at most:
//! bounded by [`NettraceParser::with_max_block_size`]), read, and call again. At EOF call
//! [`NettraceParser::handle_eof`]. Bytes are consumed only with the item they form: on
//! `Partial`, `consumed` is 0.
//!
//! ## What is not here
//! Metadata, stacks and threads are tables a consumer keeps (they need memory): the parser
//! reports each record once and forgets it. Payloads are decoded on demand by
//! [`FieldDescriptions::walk`] (self-described events) or [`clr::decode`] (runtime events
//! that carry no description).

mod blob;
mod block;
pub mod clr;
mod error;
mod fields;
mod framing;
mod header;
mod metadata;
mod parser;
mod sequence;
mod stack;
mod text;
mod v6;
mod varint;

pub use blob::Event;
pub use block::{BlockInfo, BlockKind, MAX_OBJECT_NAME};
pub use error::{FieldError, NettraceError};
pub use fields::{ArrayIter, ArrayValue, Field, ObjectValue, PayloadFields, Value};
pub use framing::Framing;
pub use header::{
    Format, KeyValueIter, KeyValues, SystemTime, TraceHeader, FAST_SERIALIZATION, MAGIC,
    MAX_MAJOR_VERSION, V4_STREAM_HEADER_LEN, V6_STREAM_HEADER_LEN,
};
pub use metadata::{
    FieldDesc, FieldDescIter, FieldDescriptions, FieldEncoding, FieldType, MetadataRecord,
    TypeCode, MAX_FIELD_DEPTH,
};
pub use parser::NettraceParser;
pub use sequence::{SequencePoint, ThreadSequence, ThreadSequences};
pub use stack::{Ips, Stack, StackBlock, Stacks};
pub use text::{Chars, TraceStr};
pub use v6::{
    Label, LabelList, LabelListBlock, LabelLists, Labels, RemoveThreadBlock, ThreadBlock,
    ThreadKeyValues, ThreadRow, ThreadRows,
};
pub use varint::{read_varuint, zigzag};

/// Bytes of framing a [`Status::Partial`] may ask for beyond one block's content (the
/// object header with the longest accepted name, the size, padding and end tag; or the
/// stream header and trace object).
pub const MAX_FRAMING: usize = 512;

/// Default maximum block size: 1 MiB. The runtime writes blocks of at most about 100 KB.
pub const DEFAULT_MAX_BLOCK_SIZE: usize = 1 << 20;

/// Something the stream said, borrowing the input given to
/// [`NettraceParser::handle_input`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[non_exhaustive]
pub enum Item<'a> {
    /// The stream header and trace object: always the first item.
    Trace(TraceHeader<'a>),
    /// A block starts (its whole content has arrived); its items follow.
    Block(BlockInfo<'a>),
    /// A metadata record (from a metadata block), validated; [`Metadata::record`] decodes it.
    Metadata(Metadata<'a>),
    /// An event (from an event block).
    Event(Event<'a>),
    /// A stack block, whole.
    Stacks(StackBlock<'a>),
    /// A sequence point: stack (and V6 label list) ids restart after it.
    SequencePoint(SequencePoint<'a>),
    /// A V6 Thread block, whole.
    Threads(ThreadBlock<'a>),
    /// A V6 RemoveThread block, whole.
    RemoveThreads(RemoveThreadBlock<'a>),
    /// A V6 LabelList block, whole.
    LabelLists(LabelListBlock<'a>),
    /// The content of a block of an unknown kind (see the preceding [`Item::Block`]).
    UnknownBlock(&'a [u8]),
    /// The end-of-stream marker: the stream is complete. [`Status::Done`] follows.
    EndOfStream,
}

/// A metadata record as an [`Item`] carries it: its bytes, validated by the parser and
/// decoded again (without copying) by [`Metadata::record`]. Kept this small because every
/// item is moved a few times on its way to the caller, once per event.
#[derive(Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct Metadata<'a> {
    /// The id events use to refer to this record.
    pub metadata_id: u32,
    /// The stream's format (decides how `raw` is read).
    pub format: Format,
    /// The record's bytes (see [`MetadataRecord::raw`]).
    pub raw: &'a [u8],
    /// Stream offset of `raw[0]`.
    pub offset: u64,
}

impl<'a> Metadata<'a> {
    /// The decoded record, borrowing the same bytes. Never fails for an item the parser
    /// reported (it parsed the record before reporting it).
    pub fn record(&self) -> Result<MetadataRecord<'a>, NettraceError> {
        MetadataRecord::parse(self.raw, self.format, self.offset)
    }

    /// Validates a record and keeps its bytes.
    #[inline(never)]
    fn parse(raw: &'a [u8], format: Format, offset: u64) -> Result<Self, NettraceError> {
        let m = MetadataRecord::parse(raw, format, offset)?;
        Ok(Metadata {
            metadata_id: m.metadata_id,
            format,
            raw,
            offset,
        })
    }
}

/// Shows the decoded record.
impl core::fmt::Debug for Metadata<'_> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self.record() {
            Ok(r) => r.fmt(f),
            Err(e) => f
                .debug_struct("Metadata")
                .field("metadata_id", &self.metadata_id)
                .field("error", &e)
                .finish(),
        }
    }
}

/// Outcome of [`NettraceParser::handle_input`]: the machines' one status type
/// ([`crate::conn::Status`]) over [`Item`]. `Event` is an item (call again with the
/// unconsumed rest of the input); `Partial { needed }` never asks for more than one block
/// plus its framing (at most the maximum block size + [`MAX_FRAMING`]); `Done` follows the
/// end-of-stream marker: nothing more will come.
pub type Status<'a> = crate::conn::Status<Item<'a>>;

/// What [`NettraceParser::handle_input`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[must_use = "consumed bytes must be dropped from the input and the status acted on"]
// The status first, at offset 0 (as in `Status`, `Item` and the adapters' `Poll`): moving an
// item out is then a copy along the same 16-byte grid, which the CPU forwards cheaply.
#[repr(C)]
pub struct Handled<'a> {
    /// What happened.
    pub status: Status<'a>,
    /// Bytes of the input that were used; drop them before the next call.
    pub consumed: usize,
}
