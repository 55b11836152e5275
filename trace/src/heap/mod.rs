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

mod bulk;
pub mod gcdump;
mod pause;
mod retained;

pub use pause::GcPause;
pub use retained::RetainedStat;

use std::fmt;

use dsipc::nettrace::clr::{self, ClrProvider};
use dsipc::nettrace::{Event, Item};

use crate::hash::FxHashMap;
use crate::{LostEvents, MetadataTable, StreamError, TraceStream};

use bulk::*;

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

/// The role of a metadata record for the heap builder.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Role {
    GcStart(u32),
    GcStop(u32),
    SuspendBegin,
    SuspendEnd,
    RestartEnd,
    Type,
    Node,
    Edge,
    RootEdge,
    RootCwt,
    RootStatic,
    Other,
}

/// Builds a heap graph from the items of a heap-dump trace (see the module docs).
#[derive(Debug)]
pub struct HeapBuilder {
    limits: HeapLimits,
    pointer_size: u8,
    /// The trace header's QPC ticks a second (0 until the header came).
    qpc_frequency: i64,
    roles: MetadataTable<Role>,
    walk: Walk,
    pause: pause::PauseTracker,
    types: Vec<HeapType>,
    type_index: FxHashMap<u64, u32>,
    addresses: Vec<u64>,
    sizes: Vec<u64>,
    node_types: Vec<u32>,
    edge_counts: Vec<u32>,
    edges: Vec<u64>,
    roots: Vec<HeapRoot>,
    /// Bulk events outside the walked GC, ignored.
    ignored: u64,
    lost: LostEvents,
    error: Option<HeapError>,
}

impl Default for HeapBuilder {
    fn default() -> Self {
        Self::new()
    }
}

impl HeapBuilder {
    /// A builder with the default [`HeapLimits`].
    pub fn new() -> Self {
        Self::with_limits(HeapLimits::default())
    }

    /// A builder with `limits` (within what the graph's `u32` indices hold: see
    /// [`HeapLimits`]).
    pub fn with_limits(limits: HeapLimits) -> Self {
        HeapBuilder {
            limits: limits.effective(),
            pointer_size: 8,
            qpc_frequency: 0,
            roles: MetadataTable::new(),
            walk: Walk::NotStarted,
            pause: pause::PauseTracker::default(),
            types: Vec::new(),
            type_index: FxHashMap::default(),
            addresses: Vec::new(),
            sizes: Vec::new(),
            node_types: Vec::new(),
            edge_counts: Vec::new(),
            edges: Vec::new(),
            roots: Vec::new(),
            ignored: 0,
            lost: LostEvents::new(),
            error: None,
        }
    }

    /// Where the walk is.
    pub fn walk(&self) -> Walk {
        self.walk
    }

    /// Objects so far.
    pub fn objects(&self) -> usize {
        self.addresses.len()
    }

    /// Events the runtime dropped (sequence-number gaps): a heap walk that lost events
    /// is incomplete, its references possibly misattributed.
    pub fn lost_events(&self) -> u64 {
        self.lost.lost()
    }

    /// The error that stopped the builder, if any (later items are ignored).
    pub fn error(&self) -> Option<&HeapError> {
        self.error.as_ref()
    }

    /// Feeds one item of the stream.
    pub fn on_item(&mut self, item: &Item<'_>) {
        if self.error.is_some() {
            return;
        }
        match item {
            Item::Trace(h) => {
                self.pointer_size = h.pointer_size;
                self.qpc_frequency = h.qpc_frequency;
            }
            Item::Metadata(m) => {
                let m = match m.record() {
                    Ok(m) => m,
                    Err(_) => return,
                };
                let role = if ClrProvider::from_name(&m.provider_name) == Some(ClrProvider::Runtime)
                {
                    match m.event_id {
                        clr::GC_START => Role::GcStart(m.version),
                        clr::GC_STOP => Role::GcStop(m.version),
                        clr::GC_SUSPEND_EE_START => Role::SuspendBegin,
                        clr::GC_SUSPEND_EE_STOP => Role::SuspendEnd,
                        clr::GC_RESTART_EE_STOP => Role::RestartEnd,
                        BULK_TYPE => Role::Type,
                        BULK_NODE => Role::Node,
                        BULK_EDGE => Role::Edge,
                        BULK_ROOT_EDGE => Role::RootEdge,
                        BULK_ROOT_CWT => Role::RootCwt,
                        BULK_ROOT_STATIC => Role::RootStatic,
                        _ => Role::Other,
                    }
                } else {
                    Role::Other
                };
                self.roles.insert(m.metadata_id, role);
            }
            Item::SequencePoint(sp) => {
                for t in sp.threads() {
                    self.lost.on_sequence_point(t.thread_id, t.sequence_number);
                }
                if sp.flushes_metadata() {
                    self.roles.clear();
                }
            }
            Item::Event(e) => {
                self.lost.on_event(e.capture_thread_id, e.sequence_number);
                if let Some(&role) = self.roles.get(e.metadata_id) {
                    if role != Role::Other {
                        if let Err(err) = self.on_event(role, e) {
                            self.error = Some(err);
                        }
                    }
                }
            }
            _ => {}
        }
    }

    fn on_event(&mut self, role: Role, e: &Event<'_>) -> Result<(), HeapError> {
        let ps = self.pointer_size;
        let bad = |event: &'static str| {
            move |why: Why| HeapError::BadPayload {
                event,
                offset: e.offset,
                why,
            }
        };
        let in_walk = matches!(self.walk, Walk::Running { .. });
        match role {
            Role::GcStart(v) => {
                let s = match clr::decode(ClrProvider::Runtime, clr::GC_START, v, ps, e.payload) {
                    Ok(clr::ClrEvent::GcStart(s)) => s,
                    _ => return Err(bad("GCStart")("does not decode")),
                };
                if self.walk == Walk::NotStarted && s.depth == Some(2) && s.gc_type != Some(1) {
                    self.walk = Walk::Running { gc: s.count };
                    self.pause.on_gc_start(s.count, e.timestamp);
                }
            }
            Role::GcStop(v) => {
                let s = match clr::decode(ClrProvider::Runtime, clr::GC_STOP, v, ps, e.payload) {
                    Ok(clr::ClrEvent::GcStop(s)) => s,
                    _ => return Err(bad("GCEnd")("does not decode")),
                };
                if self.walk == (Walk::Running { gc: s.count }) {
                    self.walk = Walk::Done { gc: s.count };
                    self.pause.on_gc_end(e.timestamp);
                }
            }
            // Only their timestamps matter (their payloads are not read).
            Role::SuspendBegin => self.pause.on_suspend_begin(e.timestamp),
            Role::SuspendEnd => self.pause.on_suspend_end(e.timestamp),
            Role::RestartEnd => self.pause.on_restart_end(e.timestamp),
            Role::Type => {
                let values = bulk_types(e.payload).map_err(bad("GCBulkType"))?;
                for t in values {
                    let name = type_name(&t, &self.types, &self.type_index);
                    let i = self.type_slot(t.id)?;
                    let entry = &mut self.types[i as usize];
                    entry.name = Some(name);
                    entry.module_id = t.module_id;
                }
            }
            _ if !in_walk => self.ignored += 1,
            Role::Node => {
                let mut fail = None;
                let limits = self.limits;
                // Check the payload whole before taking anything from it.
                bulk_nodes(e.payload, ps, |_| {}).map_err(bad("GCBulkNode"))?;
                bulk_nodes(e.payload, ps, |n| {
                    if fail.is_some() {
                        return;
                    }
                    if self.addresses.len() >= limits.max_objects {
                        fail = Some(HeapError::TooManyObjects {
                            limit: limits.max_objects,
                        });
                        return;
                    }
                    let t = match self.type_slot(n.type_id) {
                        Ok(t) => t,
                        Err(err) => {
                            fail = Some(err);
                            return;
                        }
                    };
                    self.addresses.push(n.address);
                    self.sizes.push(n.size);
                    self.node_types.push(t);
                    self.edge_counts
                        .push(u32::try_from(n.edge_count).unwrap_or(u32::MAX));
                })
                .map_err(bad("GCBulkNode"))?;
                if let Some(f) = fail {
                    return Err(f);
                }
            }
            Role::Edge => {
                let count = indexed_count(e.payload);
                self.room(count as usize)?;
                let edges = &mut self.edges;
                bulk_edges(e.payload, ps, |target, _field| edges.push(target))
                    .map_err(bad("GCBulkEdge"))?;
            }
            Role::RootEdge => {
                let count = indexed_count(e.payload);
                self.room(count as usize)?;
                let roots = &mut self.roots;
                bulk_root_edges(e.payload, ps, |r| {
                    roots.push(HeapRoot {
                        address: r.address,
                        kind: RootKind::from_gc_root_kind(r.kind),
                    })
                })
                .map_err(bad("GCBulkRootEdge"))?;
            }
            Role::RootCwt => {
                let count = indexed_count(e.payload);
                self.room(count as usize)?;
                let roots = &mut self.roots;
                bulk_root_cwt(e.payload, ps, |_key, value| {
                    roots.push(HeapRoot {
                        address: value,
                        kind: RootKind::ConditionalWeakTable,
                    })
                })
                .map_err(bad("GCBulkRootConditionalWeakTableElementEdge"))?;
            }
            Role::RootStatic => {
                let values = bulk_root_statics(e.payload).map_err(bad("GCBulkRootStaticVar"))?;
                self.room(values.len())?;
                for s in values {
                    self.roots.push(HeapRoot {
                        address: s.object,
                        kind: RootKind::Static,
                    });
                }
            }
            Role::Other => {}
        }
        Ok(())
    }

    /// Checks there is room for `n` more references or roots.
    fn room(&self, n: usize) -> Result<(), HeapError> {
        if self.edges.len() + self.roots.len() + n > self.limits.max_edges {
            return Err(HeapError::TooManyEdges {
                limit: self.limits.max_edges,
            });
        }
        Ok(())
    }

    /// The index of type `id`, created undescribed if new.
    fn type_slot(&mut self, id: u64) -> Result<u32, HeapError> {
        if let Some(&i) = self.type_index.get(&id) {
            return Ok(i);
        }
        if self.types.len() >= self.limits.max_types {
            return Err(HeapError::TooManyTypes {
                limit: self.limits.max_types,
            });
        }
        let i = self.types.len() as u32;
        self.types.push(HeapType {
            id,
            name: None,
            module_id: 0,
        });
        self.type_index.insert(id, i);
        Ok(i)
    }

    /// The graph built (whatever the walk reached: see [`HeapGraph::walk`]), or the error
    /// that stopped the builder.
    pub fn finish(self) -> Result<HeapGraph, HeapError> {
        if let Some(e) = self.error {
            return Err(e);
        }
        let declared: u64 = self.edge_counts.iter().map(|&c| u64::from(c)).sum();
        Ok(HeapGraph {
            pause: self.pause.result(self.qpc_frequency),
            pointer_size: self.pointer_size,
            walk: self.walk,
            types: self.types,
            addresses: self.addresses,
            sizes: self.sizes,
            node_types: self.node_types,
            edge_counts: self.edge_counts,
            missing_edges: declared.saturating_sub(self.edges.len() as u64),
            edges: self.edges,
            roots: self.roots,
            ignored_events: self.ignored,
            lost_events: self.lost.lost(),
        })
    }
}

/// The Count of an Index/Count event (0 if too short: the decoder then says why).
fn indexed_count(payload: &[u8]) -> u32 {
    match payload.get(4..8) {
        Some(b) => u32::from_le_bytes([b[0], b[1], b[2], b[3]]),
        None => 0,
    }
}

/// A type's name with its type arguments, as PerfView's reader shows generic
/// instantiations: the runtime names `List`1` and lists the arguments' type ids; those
/// described already are named (`System.Collections.Generic.List<System.String>`), the rest
/// left out.
fn type_name(t: &BulkType<'_>, types: &[HeapType], index: &FxHashMap<u64, u32>) -> String {
    let name = utf16_string(t.name);
    if t.type_parameters.is_empty() || name.contains('[') || name.contains('<') {
        return name;
    }
    let args: Vec<String> = t
        .type_parameters
        .iter()
        .map(|p| {
            index
                .get(p)
                .and_then(|&i| types[i as usize].name.clone())
                .unwrap_or_else(|| "?".to_string())
        })
        .collect();
    // `List`1` -> `List`.
    let base = match name.rfind('`') {
        Some(i) if name[i + 1..].chars().all(|c| c.is_ascii_digit()) => &name[..i],
        _ => &name[..],
    };
    format!("{}<{}>", base, args.join(","))
}

/// A heap snapshot: every object of the walked GC with its type, size and references, and
/// the roots.
#[derive(Debug, Clone)]
pub struct HeapGraph {
    /// The traced process's pointer size.
    pub pointer_size: u8,
    /// Where the walk had got to when the stream ended.
    pub walk: Walk,
    /// The types, indexed by the objects' type indices.
    pub types: Vec<HeapType>,
    addresses: Vec<u64>,
    sizes: Vec<u64>,
    node_types: Vec<u32>,
    edge_counts: Vec<u32>,
    edges: Vec<u64>,
    /// The roots.
    pub roots: Vec<HeapRoot>,
    /// References the objects announced but no GCBulkEdge brought (0 for a whole walk).
    pub missing_edges: u64,
    /// Heap events outside the walked GC, ignored.
    pub ignored_events: u64,
    /// Events of the stream the runtime dropped (see [`HeapBuilder::lost_events`]).
    pub lost_events: u64,
    /// How long the runtime stopped its threads for the walked GC, and the GC's own
    /// duration, from its GC events (see [`GcPause`]); `None` if those events did not all
    /// come (a stream cut before the threads were restarted, a trace without the GC
    /// keyword) or do not fit together.
    pub pause: Option<GcPause>,
}

/// One object of a [`HeapGraph`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HeapObject {
    /// Its address.
    pub address: u64,
    /// Its size in bytes.
    pub size: u64,
    /// Its type: an index into [`HeapGraph::types`].
    pub type_index: u32,
}

impl HeapGraph {
    /// Objects.
    pub fn object_count(&self) -> usize {
        self.addresses.len()
    }

    /// Object `i`.
    pub fn object(&self, i: usize) -> HeapObject {
        HeapObject {
            address: self.addresses[i],
            size: self.sizes[i],
            type_index: self.node_types[i],
        }
    }

    /// Every object, in walk order.
    pub fn objects(&self) -> impl Iterator<Item = HeapObject> + '_ {
        (0..self.addresses.len()).map(move |i| self.object(i))
    }

    /// Total bytes of the objects.
    pub fn total_bytes(&self) -> u64 {
        self.sizes.iter().sum()
    }

    /// References (as received).
    pub fn edge_count(&self) -> usize {
        self.edges.len()
    }

    /// Every object's references as target addresses, in walk order (object `i`'s are the
    /// `i`-th slice; short at the end if edges are missing).
    pub fn references(&self) -> impl Iterator<Item = &[u64]> + '_ {
        let mut at = 0usize;
        self.edge_counts.iter().map(move |&c| {
            let start = at.min(self.edges.len());
            at = at.saturating_add(c as usize);
            &self.edges[start..at.min(self.edges.len())]
        })
    }

    /// An index from addresses to objects (sorts the addresses once: 16 bytes an object).
    pub fn address_index(&self) -> AddressIndex {
        let mut by_address: Vec<(u64, u32)> = self
            .addresses
            .iter()
            .enumerate()
            .map(|(i, &a)| (a, i as u32))
            .collect();
        by_address.sort_unstable();
        AddressIndex { by_address }
    }

    /// The object graph as adjacency lists over node indices: the objects in walk order
    /// (references to addresses the walk sent no object for left out), then one virtual
    /// root whose successors are the rooted objects. Returns it and the root's index.
    /// Indices and offsets fit in `u32`: the builder holds at most 2^32 - 3 objects and
    /// 2^32 - 1 references and roots.
    fn adjacency(&self) -> (retained::Csr, usize) {
        let index = self.address_index();
        let n = self.object_count();
        let mut offsets: Vec<u32> = Vec::with_capacity(n + 2);
        // Room for every reference and root: what is left out (dangling) is never touched.
        let mut targets: Vec<u32> = Vec::with_capacity(self.edges.len() + self.roots.len());
        offsets.push(0);
        for refs in self.references() {
            targets.extend(refs.iter().filter_map(|&a| index.get(a)).map(|i| i as u32));
            offsets.push(targets.len() as u32);
        }
        targets.extend(
            self.roots
                .iter()
                .filter_map(|r| index.get(r.address))
                .map(|i| i as u32),
        );
        offsets.push(targets.len() as u32);
        (retained::Csr { offsets, targets }, n)
    }

    /// Objects, shallow and retained bytes per type name, biggest retained first: the
    /// dominator tree from the roots (see [`RetainedStat`]). Memory on top of the graph: the
    /// adjacency (with its address index while it is made: 16 bytes an object), about 4
    /// bytes an object and 4 a reference, freed once the depth-first search has read it;
    /// then at most about 32 bytes an object reached and 4 a reference among them.
    pub fn retained_stats(&self) -> Vec<RetainedStat> {
        let (g, root) = self.adjacency();
        let dfs = retained::Dfs::new(&g, root);
        drop(g);
        let n = self.object_count();
        retained::type_retained(
            dfs,
            &|i| if i < n { self.sizes[i] } else { 0 },
            &|i| i < n,
            &|i| {
                if i < n {
                    self.node_types[i] as usize
                } else {
                    0
                }
            },
            self.types.len(),
            &|t| self.types[t].display_name(),
        )
    }

    /// Objects and shallow bytes per type name, biggest first (then most objects, then by
    /// name).
    pub fn type_stats(&self) -> Vec<TypeStat> {
        let mut per_type: Vec<(u64, u64)> = vec![(0, 0); self.types.len()];
        for (t, s) in self.node_types.iter().zip(&self.sizes) {
            let e = &mut per_type[*t as usize];
            e.0 += 1;
            e.1 += s;
        }
        let mut by_name: FxHashMap<String, (u64, u64)> = FxHashMap::default();
        for (t, (count, bytes)) in self.types.iter().zip(per_type) {
            if count == 0 {
                continue;
            }
            let e = by_name.entry(t.display_name()).or_insert((0, 0));
            e.0 += count;
            e.1 += bytes;
        }
        sorted_stats(by_name)
    }
}

/// Per-name counts as [`TypeStat`]s, biggest first (then most objects, then by name).
pub(crate) fn sorted_stats(by_name: FxHashMap<String, (u64, u64)>) -> Vec<TypeStat> {
    let mut out: Vec<TypeStat> = by_name
        .into_iter()
        .map(|(name, (count, bytes))| TypeStat { name, count, bytes })
        .collect();
    out.sort_by(|a, b| {
        b.bytes
            .cmp(&a.bytes)
            .then(b.count.cmp(&a.count))
            .then_with(|| a.name.cmp(&b.name))
    });
    out
}

/// Addresses to objects of a [`HeapGraph`] (from [`HeapGraph::address_index`]).
#[derive(Debug, Clone)]
pub struct AddressIndex {
    by_address: Vec<(u64, u32)>,
}

impl AddressIndex {
    /// The object at `address`, if the walk sent one there.
    pub fn get(&self, address: u64) -> Option<usize> {
        self.by_address
            .binary_search_by(|&(a, _)| a.cmp(&address))
            .ok()
            .map(|i| self.by_address[i].1 as usize)
    }
}

/// A heap-dump stream fed in slices of any size: a [`TraceStream`] feeding a
/// [`HeapBuilder`].
#[derive(Debug, Default)]
pub struct HeapStream {
    stream: TraceStream,
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
            stream: TraceStream::new(),
            builder: HeapBuilder::with_limits(limits),
        }
    }

    /// Parses `data`, the next bytes of the stream.
    pub fn feed(&mut self, data: &[u8]) -> Result<(), HeapError> {
        let b = &mut self.builder;
        self.stream.feed(data, |item| b.on_item(item))?;
        match self.builder.error() {
            Some(e) => Err(e.clone()),
            None => Ok(()),
        }
    }

    /// The stream is over: `Ok` if it ended with its end-of-stream object and every heap
    /// event decoded.
    pub fn finish(&mut self) -> Result<(), HeapError> {
        let b = &mut self.builder;
        self.stream.finish(|item| b.on_item(item))?;
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
        &self.stream
    }

    /// The graph, whatever the stream's end (see [`HeapBuilder::finish`]).
    pub fn into_graph(self) -> Result<HeapGraph, HeapError> {
        self.builder.finish()
    }
}
