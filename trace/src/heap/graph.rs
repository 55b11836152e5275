//! [`HeapGraph`]: the heap snapshot a [`HeapBuilder`](super::HeapBuilder) makes, its
//! objects, references and per-type reports.

use super::retained::{self, RetainedStat};
use super::{GcPause, HeapRoot, HeapType, TypeStat, Walk};
use crate::hash::FxHashMap;

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
    pub(super) addresses: Vec<u64>,
    pub(super) sizes: Vec<u64>,
    pub(super) node_types: Vec<u32>,
    pub(super) edge_counts: Vec<u32>,
    pub(super) edges: Vec<u64>,
    /// The roots.
    pub roots: Vec<HeapRoot>,
    /// References the objects announced but no GCBulkEdge brought (0 for a whole walk).
    pub missing_edges: u64,
    /// Heap events outside the walked GC, ignored.
    pub ignored_events: u64,
    /// Events of the stream the runtime dropped (see
    /// [`HeapBuilder::lost_events`](super::HeapBuilder::lost_events)).
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
    pub(super) fn adjacency(&self) -> (retained::Csr, usize) {
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
