//! Heap snapshots (`dsipc gcdump`, as dotnet-gcdump): the object graph the runtime writes
//! when a session enables `Microsoft-Windows-DotNETRuntime`'s GCHeapDump keyword (it runs a
//! blocking gen-2 GC and walks the heap, sending every live object as GCBulkNode, its
//! references as GCBulkEdge, the roots as GCBulkRootEdge / GCBulkRootStaticVar /
//! GCBulkRootConditionalWeakTableElementEdge, and the types as GCBulkType), rebuilt from the
//! stream's items with no I/O.
//!
//! - [`HeapBuilder`]: fed the core parser's items ([`HeapBuilder::on_item`]); keeps the
//!   graph (per object: address, size, type, edge count; per edge its target), never the
//!   events, so memory grows with the heap, not the trace; bounded by [`HeapLimits`];
//! - [`HeapStream`]: a [`TraceStream`] feeding a [`HeapBuilder`], fed bytes in slices of
//!   any size;
//! - [`HeapGraph`]: the result, with its per-type report ([`HeapGraph::type_stats`]).
//!
//! Which GC: as dotnet-gcdump, the first blocking gen-2 GC of the stream (GCStart with
//! Depth 2 and a Type other than background); its objects, edges and roots are the events
//! between its GCStart and its GCEnd. GCBulkType events are taken whenever they come (types
//! a node names may be described before or after it).
//!
//! The runtime's pause for the walk ([`HeapGraph::pause`]): the GC keyword the session
//! enables brings the suspension's events too (GCSuspendEEBegin, GCSuspendEEEnd,
//! GCRestartEEEnd); their timestamps around the walked GC's GCStart and GCEnd give how long
//! the runtime's threads were stopped (see [`GcPause`]).

mod builder;
pub(crate) mod bulk;
pub mod gcdump;
mod graph;
mod pause;
pub mod report;
mod retained;

pub use builder::HeapBuilder;
pub(crate) use graph::sorted_stats;
pub use graph::{AddressIndex, HeapGraph, HeapObject};
pub use pause::GcPause;
pub use retained::RetainedStat;

use std::fmt;

use crate::{StreamError, TraceDispatcher, TraceStream};

/// Bounds on what a [`HeapBuilder`] keeps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HeapLimits {
    /// Objects (GCBulkNode values); 24 bytes each. At most 2^32 - 3 whatever this says
    /// (the graph's node indices are `u32`, with one for the roots and one for none).
    pub max_objects: usize,
    /// References (GCBulkEdge values) and roots; 8 bytes each. At most 2^32 - 1 whatever
    /// this says (the graph's edges are counted in `u32`).
    pub max_edges: usize,
    /// Distinct types.
    pub max_types: usize,
}

/// The most objects a graph can hold, whatever [`HeapLimits::max_objects`] says: node
/// indices are `u32`, `u32::MAX` meaning none and `u32::MAX - 1` the virtual root of
/// [`HeapGraph::retained_stats`].
const MAX_OBJECTS: usize = (u32::MAX - 2) as usize;
/// The most references and roots a graph can hold, whatever [`HeapLimits::max_edges`]
/// says: the adjacency's offsets are `u32`.
const MAX_EDGES: usize = u32::MAX as usize;

impl HeapLimits {
    /// The limits the builder applies: these, within what the graph's `u32` indices hold.
    fn effective(self) -> HeapLimits {
        HeapLimits {
            max_objects: self.max_objects.min(MAX_OBJECTS),
            max_edges: self.max_edges.min(MAX_EDGES),
            max_types: self.max_types,
        }
    }
}

impl Default for HeapLimits {
    /// 20 million objects (about 480 MB of graph), 100 million references (800 MB), a
    /// million types.
    fn default() -> Self {
        HeapLimits {
            max_objects: 20_000_000,
            max_edges: 100_000_000,
            max_types: 1_000_000,
        }
    }
}

/// Why a heap snapshot could not be built.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum HeapError {
    /// The stream itself did not parse (or ended early); names its offset.
    Stream(StreamError),
    /// A heap event's payload did not decode.
    BadPayload {
        /// The event (`GCBulkNode`...).
        event: &'static str,
        /// Stream offset of the event.
        offset: u64,
        /// What was wrong.
        why: &'static str,
    },
    /// More objects than [`HeapLimits::max_objects`].
    TooManyObjects {
        /// The limit.
        limit: usize,
    },
    /// More references and roots than [`HeapLimits::max_edges`].
    TooManyEdges {
        /// The limit.
        limit: usize,
    },
    /// More distinct types than [`HeapLimits::max_types`].
    TooManyTypes {
        /// The limit.
        limit: usize,
    },
}

impl HeapError {
    /// The stream offset the error concerns, if it concerns one.
    pub fn offset(&self) -> Option<u64> {
        match self {
            HeapError::Stream(e) => Some(e.offset()),
            HeapError::BadPayload { offset, .. } => Some(*offset),
            _ => None,
        }
    }

    /// True if the stream only ended early.
    pub fn is_truncation(&self) -> bool {
        matches!(self, HeapError::Stream(e) if e.is_truncation())
    }
}

impl fmt::Display for HeapError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            HeapError::Stream(e) => e.fmt(f),
            HeapError::BadPayload { event, offset, why } => {
                write!(f, "{} event at offset {}: {}", event, offset, why)
            }
            HeapError::TooManyObjects { limit } => {
                write!(f, "the heap has more than {} objects (the limit)", limit)
            }
            HeapError::TooManyEdges { limit } => write!(
                f,
                "the heap has more than {} references and roots (the limit)",
                limit
            ),
            HeapError::TooManyTypes { limit } => {
                write!(f, "the heap has more than {} types (the limit)", limit)
            }
        }
    }
}

impl std::error::Error for HeapError {}

impl From<StreamError> for HeapError {
    fn from(e: StreamError) -> Self {
        HeapError::Stream(e)
    }
}

/// Where the heap walk is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Walk {
    /// No blocking gen-2 GC has started yet.
    NotStarted,
    /// The GC numbered `gc` started; its walk is arriving.
    Running {
        /// The GC's number.
        gc: u32,
    },
    /// The GC numbered `gc` ended: its walk is whole (the session may stop).
    Done {
        /// The GC's number.
        gc: u32,
    },
}

/// A type of the heap.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeapType {
    /// The runtime's type id (its MethodTable address).
    pub id: u64,
    /// Its name as the runtime gives it, with its type arguments (`List<System.String>`);
    /// `None` if no GCBulkType described it.
    pub name: Option<String>,
    /// Module id (0 for none).
    pub module_id: u64,
}

impl HeapType {
    /// The name, or `UNKNOWN_TYPE 0x{id}` for a type never described.
    pub fn display_name(&self) -> String {
        match &self.name {
            Some(n) => n.clone(),
            None => format!("UNKNOWN_TYPE 0x{:x}", self.id),
        }
    }
}

/// What a root is, as the runtime's GCRootKind says (and statics, which have their own
/// event).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum RootKind {
    /// A local on a thread's stack.
    Stack,
    /// The finalization queue.
    Finalizer,
    /// A GC handle (strong, pinned, ...).
    Handle,
    /// A static field.
    Static,
    /// A ConditionalWeakTable entry's value (kept by its key).
    ConditionalWeakTable,
    /// Another GCRootKind (older generation, sized ref, overflow...).
    Other(u8),
}

impl RootKind {
    fn from_gc_root_kind(k: u8) -> RootKind {
        match k {
            0 => RootKind::Stack,
            1 => RootKind::Finalizer,
            2 => RootKind::Handle,
            k => RootKind::Other(k),
        }
    }
}

/// A root: the object it keeps alive.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HeapRoot {
    /// The object's address.
    pub address: u64,
    /// The root's kind.
    pub kind: RootKind,
}

/// Objects and bytes of one type.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TypeStat {
    /// The type's name (types of one name are counted together).
    pub name: String,
    /// Objects.
    pub count: u64,
    /// Their shallow size: the objects' own bytes, header included.
    pub bytes: u64,
}

/// A heap-dump stream fed in slices of any size: a [`TraceDispatcher`] feeding a
/// [`HeapBuilder`].
#[derive(Debug, Default)]
pub struct HeapStream {
    dispatcher: TraceDispatcher,
    builder: HeapBuilder,
}

impl HeapStream {
    /// Waiting for the stream's first byte, with the default limits.
    pub fn new() -> Self {
        Self::default()
    }

    /// With `limits`.
    pub fn with_limits(limits: HeapLimits) -> Self {
        HeapStream {
            dispatcher: TraceDispatcher::new(),
            builder: HeapBuilder::with_limits(limits),
        }
    }

    /// Parses `data`, the next bytes of the stream.
    pub fn feed(&mut self, data: &[u8]) -> Result<(), HeapError> {
        self.dispatcher.feed(data, &mut self.builder)?;
        match self.builder.error() {
            Some(e) => Err(e.clone()),
            None => Ok(()),
        }
    }

    /// The stream is over: `Ok` if it ended with its end-of-stream object and every heap
    /// event decoded.
    pub fn finish(&mut self) -> Result<(), HeapError> {
        self.dispatcher.finish(&mut self.builder)?;
        match self.builder.error() {
            Some(e) => Err(e.clone()),
            None => Ok(()),
        }
    }

    /// The builder (where the walk is, objects so far).
    pub fn builder(&self) -> &HeapBuilder {
        &self.builder
    }

    /// The stream driver.
    pub fn stream(&self) -> &TraceStream {
        self.dispatcher.stream()
    }

    /// The graph, whatever the stream's end (see [`HeapBuilder::finish`]).
    pub fn into_graph(self) -> Result<HeapGraph, HeapError> {
        self.builder.finish()
    }
}
