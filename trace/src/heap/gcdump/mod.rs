//! The `.gcdump` file: what dotnet-gcdump and PerfView write and read, a `GCHeapDump`
//! holding a `Graphs.MemoryGraph`, in PerfView's FastSerialization format. Bytes in, bytes
//! out: [`write()`] to any `Write`, [`read()`] from a byte slice.
//!
//! The layout, as PerfView's sources define it (FastSerialization.cs, graph.cs,
//! MemoryGraph.cs, GCHeapDump.cs; little-endian; a string is an `i32` count of UTF-16 code
//! units, -1 for null, then each unit as 1 to 3 bytes of UTF-8; stream labels are 4-byte
//! offsets from the start of the file):
//!
//! ```text
//! i32 20, "!FastSerialization.1"
//! BeginObject(4)                                  the entry object, a GCHeapDump
//!   BeginObject NullReference(1) i32 10 i32 8 "GCHeapDump" EndObject(6)     its type
//!   BeginObject                                   the MemoryGraph
//!     BeginObject NullReference i32 1 i32 0 "Graphs.MemoryGraph" EndObject
//!     i64 total size, i32 root node index
//!     i32 type count, per type: name, i32 size (-1: varies), module name
//!     i32 node count, per node: i32 offset of its record in the blob
//!     i32 blob length, the blob: per node, compressed ints: type << 1 (| 1 when the
//!       node's size differs from its type's, then the size), the child count, and each
//!       child as its index minus the node's
//!     i32 address count, per node: i64 address (0 for nodes that are no object)
//!     Byte(8) u8 is-64-bit
//!   EndObject
//!   u8 is-64-bit, f32 1.0, f32 1.0 (count and size multipliers: not sampled)
//!   NullReference (JS heap info), NullReference (.NET heap info)
//!   collection log, i64 DateTime ticks, machine name, process name, i32 pid,
//!   i64 commit, i64 working set, i32 0 (no per-type multipliers)
//!   SkipRegion(12) i32 forward reference 0, NullReference (no interop info)
//!   String(13) creation tool
//! EndObject
//! EndObject (the unbalanced end of the objects)
//! i32 1, i32 label of forward reference 0      the forward reference table
//! i32 label of that table                      the trailer
//! i32 label of the trailer                     the suffix label
//! ```
//!
//! The graph: one node per object of the walk (its address, size and references resolved to
//! nodes), one node per kind of root (`[static vars]`, `[local vars]`...) whose children are
//! the objects those roots hold, and the root node `[.NET Roots]` over them, as PerfView's
//! reader builds it. Type 0 is `UNDEFINED`, and the blob starts with its empty node, as
//! PerfView's writer leaves them.
//!
//! [`read()`] takes the graph from any such file (the metadata after it when it is ours) and
//! checks every offset, count and index, so a corrupt or truncated file is an error naming
//! its offset, never a panic.

mod reader;
mod writer;

pub use reader::read;
pub use writer::{write, Written};

use std::fmt;
use std::time::{SystemTime, UNIX_EPOCH};

use super::retained::{self, Csr, Dfs};
use super::{RetainedStat, TypeStat};
use crate::hash::FxHashMap;

const SIGNATURE: &str = "!FastSerialization.1";
const NULL_REFERENCE: u8 = 1;
const OBJECT_REFERENCE: u8 = 2;
const BEGIN_OBJECT: u8 = 4;
const BEGIN_PRIVATE_OBJECT: u8 = 5;
const END_OBJECT: u8 = 6;
const TAG_BYTE: u8 = 8;
const TAG_SKIP_REGION: u8 = 12;
const TAG_STRING: u8 = 13;

const HEAP_DUMP_TYPE: &str = "GCHeapDump";
const HEAP_DUMP_VERSION: i32 = 10;
const HEAP_DUMP_MIN_READER: i32 = 8;
const MEMORY_GRAPH_TYPE: &str = "Graphs.MemoryGraph";

/// The root node's type name.
pub const ROOT_NODE: &str = "[.NET Roots]";

/// DateTime ticks (100 ns since 0001-01-01) of the Unix epoch.
const UNIX_EPOCH_TICKS: i64 = 621_355_968_000_000_000;

/// What a `.gcdump` says besides the graph.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct GcDumpInfo {
    /// The process's id.
    pub process_id: i32,
    /// The process's name.
    pub process_name: Option<String>,
    /// The machine's name.
    pub machine_name: Option<String>,
    /// When the heap was walked, as .NET DateTime ticks (see [`dotnet_ticks`]).
    pub time_ticks: i64,
    /// The tool that wrote the file.
    pub creation_tool: Option<String>,
}

/// `t` as .NET DateTime ticks (100 ns units since 0001-01-01 UTC).
pub fn dotnet_ticks(t: SystemTime) -> i64 {
    match t.duration_since(UNIX_EPOCH) {
        Ok(d) => UNIX_EPOCH_TICKS + (d.as_nanos() / 100) as i64,
        Err(e) => UNIX_EPOCH_TICKS - (e.duration().as_nanos() / 100) as i64,
    }
}

/// Appends `v` as a MemoryGraph compressed int: 7 bits a byte, most significant first, the
/// high bit set on all but the last byte, the first byte's 7 bits sign-extended.
fn push_compressed(out: &mut Vec<u8>, v: i32) {
    let bytes = if (v << 25) >> 25 == v {
        1
    } else if (v << 18) >> 18 == v {
        2
    } else if (v << 11) >> 11 == v {
        3
    } else if (v << 4) >> 4 == v {
        4
    } else {
        5
    };
    for i in (1..bytes).rev() {
        out.push(((v >> (7 * i)) | 0x80) as u8);
    }
    out.push((v & 0x7F) as u8);
}

/// Reads a compressed int at `*at` in `blob`.
fn read_compressed(blob: &[u8], at: &mut usize) -> Option<i32> {
    let mut b = *blob.get(*at)?;
    *at += 1;
    let mut v = ((b as i32) << 25) >> 25;
    for i in 0..4 {
        if b & 0x80 == 0 {
            return Some(v);
        }
        b = *blob.get(*at)?;
        *at += 1;
        v = v.wrapping_shl(7);
        v = v.wrapping_add(if i == 3 { b as i32 } else { (b & 0x7F) as i32 });
    }
    Some(v)
}

/// Why a `.gcdump` could not be read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GcDumpError {
    /// File offset the problem was found at.
    pub offset: u64,
    /// What was wrong.
    pub what: String,
}

impl fmt::Display for GcDumpError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "not a readable .gcdump at offset {}: {}",
            self.offset, self.what
        )
    }
}

impl std::error::Error for GcDumpError {}

/// A type of a [`GcDump`]'s graph.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GcDumpType {
    /// Its name (None for a nameless type).
    pub name: Option<String>,
    /// The size of its nodes, or -1 when they differ.
    pub size: i32,
    /// Its module's name, if known.
    pub module: Option<String>,
}

/// A `.gcdump` read back: its graph and what it says of the process.
#[derive(Debug, Clone)]
pub struct GcDump {
    /// The graph's types.
    pub types: Vec<GcDumpType>,
    /// The root node's index.
    pub root: usize,
    /// The graph's total size in bytes (as the file says).
    pub total_size: i64,
    /// Whether the process was 64-bit.
    pub is_64bit: bool,
    /// The rest of the file's metadata, when it could be read.
    pub info: Option<GcDumpInfo>,
    node_types: Vec<u32>,
    node_sizes: Vec<i32>,
    /// The nodes' children, decoded (4 bytes a node and 4 a child: node indices and child
    /// counts fit in `u32`, a file holding fewer than 2^31 of each).
    graph: Csr,
    addresses: Vec<u64>,
}

impl GcDump {
    /// Nodes of the graph (objects and the synthetic root nodes).
    pub fn node_count(&self) -> usize {
        self.node_types.len()
    }

    /// Node `i`'s type index, size and address (0 for nodes that are no object).
    pub fn node(&self, i: usize) -> (u32, i32, u64) {
        (self.node_types[i], self.node_sizes[i], self.addresses[i])
    }

    /// Node `i`'s children (node indices).
    pub fn children(&self, i: usize) -> Vec<usize> {
        self.graph
            .successors(i)
            .iter()
            .map(|&c| c as usize)
            .collect()
    }

    /// The type name of node `i`.
    pub fn type_name(&self, i: usize) -> String {
        let t = self.node_types[i] as usize;
        self.types[t]
            .name
            .clone()
            .unwrap_or_else(|| format!("UNKNOWN_TYPE {}", t))
    }

    /// Objects (nodes with an address) and their bytes per type name, biggest first, as
    /// [`HeapGraph::type_stats`](super::HeapGraph::type_stats) orders them.
    pub fn type_stats(&self) -> Vec<TypeStat> {
        let mut per_type: Vec<(u64, u64)> = vec![(0, 0); self.types.len()];
        for i in 0..self.node_count() {
            if self.addresses[i] == 0 {
                continue;
            }
            let e = &mut per_type[self.node_types[i] as usize];
            e.0 += 1;
            e.1 += self.node_sizes[i].max(0) as u64;
        }
        let mut by_name: FxHashMap<String, (u64, u64)> = FxHashMap::default();
        for (t, (count, bytes)) in per_type.into_iter().enumerate() {
            if count == 0 {
                continue;
            }
            let name = self.types[t]
                .name
                .clone()
                .unwrap_or_else(|| format!("UNKNOWN_TYPE {}", t));
            let e = by_name.entry(name).or_insert((0, 0));
            e.0 += count;
            e.1 += bytes;
        }
        super::sorted_stats(by_name)
    }

    /// Objects (nodes with an address), shallow and retained bytes per type name, biggest
    /// retained first: the dominator tree from the root node (a file without nodes, whose
    /// root index names none, retains nothing). Memory on top of the dump: at most about 32
    /// bytes a node the root reaches and 4 a reference among them.
    pub fn retained_stats(&self) -> Vec<RetainedStat> {
        let names: Vec<String> = (0..self.types.len())
            .map(|t| {
                self.types[t]
                    .name
                    .clone()
                    .unwrap_or_else(|| format!("UNKNOWN_TYPE {}", t))
            })
            .collect();
        retained::type_retained(
            Dfs::new(&self.graph, self.root),
            &|i| self.node_sizes[i].max(0) as u64,
            &|i| self.addresses[i] != 0,
            &|i| self.node_types[i] as usize,
            self.types.len(),
            &|t| names[t].clone(),
        )
    }

    /// Objects (nodes with an address) and their total bytes.
    pub fn object_totals(&self) -> (u64, u64) {
        let mut n = 0;
        let mut bytes = 0;
        for i in 0..self.node_count() {
            if self.addresses[i] != 0 {
                n += 1;
                bytes += self.node_sizes[i].max(0) as u64;
            }
        }
        (n, bytes)
    }
}

#[cfg(test)]
mod tests {
    use super::reader::In;
    use super::writer::Counted;
    use super::*;

    #[test]
    fn compressed_ints_round_trip_as_perfview_writes_them() {
        for v in [
            0,
            1,
            63,
            64,
            -1,
            -64,
            -65,
            127,
            8191,
            8192,
            -8193,
            1 << 20,
            (1 << 27) - 1,
            1 << 27,
            i32::MAX,
            i32::MIN,
            -123_456_789,
        ] {
            let mut b = Vec::new();
            push_compressed(&mut b, v);
            let mut at = 0;
            assert_eq!(read_compressed(&b, &mut at), Some(v), "{} as {:02x?}", v, b);
            assert_eq!(at, b.len());
        }
        let mut b = Vec::new();
        push_compressed(&mut b, 5);
        assert_eq!(b, [5]);
        b.clear();
        push_compressed(&mut b, 200);
        assert_eq!(b, [0x81, 0x48]);
        b.clear();
        push_compressed(&mut b, -1);
        assert_eq!(b, [0x7F]);
    }

    #[test]
    fn strings_are_counted_in_utf16_units() {
        let mut w = Counted {
            w: Vec::new(),
            at: 0,
        };
        w.string(Some("aé€")).unwrap();
        w.string(None).unwrap();
        assert_eq!(
            w.w,
            [3, 0, 0, 0, b'a', 0xC3, 0xA9, 0xE2, 0x82, 0xAC, 0xFF, 0xFF, 0xFF, 0xFF]
        );
        let mut r = In { data: &w.w, at: 0 };
        assert_eq!(r.string("s").unwrap().as_deref(), Some("aé€"));
        assert_eq!(r.string("s").unwrap(), None);
    }

    /// A file whose `nodes` nodes all point at one record: type 0 and `children` children,
    /// each the node itself.
    fn shared_record(nodes: i32, children: i32) -> Vec<u8> {
        let mut w = Counted {
            w: Vec::new(),
            at: 0,
        };
        w.string(Some(SIGNATURE)).unwrap();
        w.u8(BEGIN_OBJECT).unwrap();
        w.type_object(HEAP_DUMP_TYPE, HEAP_DUMP_VERSION, HEAP_DUMP_MIN_READER)
            .unwrap();
        w.u8(BEGIN_OBJECT).unwrap();
        w.type_object(MEMORY_GRAPH_TYPE, 1, 0).unwrap();
        w.i64(0).unwrap();
        w.i32(0).unwrap();
        w.i32(1).unwrap();
        w.string(Some("T")).unwrap();
        w.i32(8).unwrap();
        w.string(None).unwrap();
        w.i32(nodes).unwrap();
        for _ in 0..nodes {
            w.i32(0).unwrap();
        }
        let mut blob = Vec::new();
        push_compressed(&mut blob, 0);
        push_compressed(&mut blob, children);
        for _ in 0..children {
            push_compressed(&mut blob, 0);
        }
        w.i32(blob.len() as i32).unwrap();
        w.bytes(&blob).unwrap();
        w.i32(nodes).unwrap();
        for i in 0..nodes {
            w.i64(0x1000 + 8 * i64::from(i)).unwrap();
        }
        w.w
    }

    #[test]
    fn nodes_sharing_a_record_cannot_hold_more_children_than_the_blob() {
        // One node: its 3 children (itself) fit in the 5 bytes of the blob.
        let d = read(&shared_record(1, 3)).unwrap();
        assert_eq!(d.children(0), vec![0, 0, 0]);
        assert_eq!(d.node(0), (0, 8, 0x1000));
        assert_eq!(d.retained_stats()[0].retained, 8);
        // 1,000 nodes sharing a record of 1,000 children would decode to a million.
        let e = read(&shared_record(1000, 1000)).unwrap_err();
        assert!(e.what.contains("more children in all"), "{}", e);
    }

    #[test]
    fn ticks_of_the_unix_epoch() {
        assert_eq!(dotnet_ticks(UNIX_EPOCH), 621_355_968_000_000_000);
    }
}
