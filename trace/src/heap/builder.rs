//! [`HeapBuilder`]: the heap graph rebuilt from a heap-dump trace's items (see the
//! [module docs](super)).

use dsipc::nettrace::clr::{self, ClrProvider};
use dsipc::nettrace::{Event, Item};

use super::bulk::*;
use super::pause;
use super::{HeapError, HeapGraph, HeapLimits, HeapRoot, HeapType, RootKind, Walk};
use crate::hash::FxHashMap;
use crate::{EventInfo, LostEvents, MetadataTable, TraceContext, TraceSink};

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

impl Role {
    /// The role of the event `event_id` (`version`) of `clr` (a runtime provider, or `None`).
    fn of(clr: Option<ClrProvider>, event_id: u32, version: u32) -> Role {
        if clr != Some(ClrProvider::Runtime) {
            return Role::Other;
        }
        match event_id {
            clr::GC_START => Role::GcStart(version),
            clr::GC_STOP => Role::GcStop(version),
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
    }
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
                if let Ok(m) = m.record() {
                    let clr = ClrProvider::from_name(&m.provider_name);
                    let role = Role::of(clr, m.event_id, m.version);
                    self.roles.insert(m.metadata_id, role);
                }
            }
            Item::SequencePoint(sp) => {
                for t in sp.threads() {
                    self.lost.on_sequence_point(t.thread_id, t.sequence_number);
                }
                if sp.flushes_metadata() {
                    self.roles.clear();
                }
            }
            Item::Event(e) => self.event(e),
            _ => {}
        }
    }

    #[inline]
    fn event(&mut self, e: &Event<'_>) {
        self.lost.on_event(e.capture_thread_id, e.sequence_number);
        if let Some(&role) = self.roles.get(e.metadata_id) {
            if role != Role::Other {
                if let Err(err) = self.on_event(role, e) {
                    self.error = Some(err);
                }
            }
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

/// The heap walk as one sink of a [`TraceDispatcher`](crate::TraceDispatcher): each record's
/// role comes from the shared table's decoded record.
impl TraceSink for HeapBuilder {
    #[inline]
    fn event(&mut self, e: &Event<'_>, _: Option<&EventInfo>, _: &TraceContext<'_>) {
        if self.error.is_none() {
            self.event(e);
        }
    }

    fn item(&mut self, item: &Item<'_>, cx: &TraceContext<'_>) {
        if self.error.is_some() {
            return;
        }
        match item {
            Item::Metadata(m) => {
                if let Some(info) = cx.metadata().get(m.metadata_id) {
                    let role = Role::of(info.clr, info.meta.event_id, info.meta.version);
                    self.roles.insert(m.metadata_id, role);
                }
            }
            other => self.on_item(other),
        }
    }
}
