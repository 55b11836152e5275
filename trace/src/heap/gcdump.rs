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

use std::fmt;
use std::io::{self, Write};
use std::time::{SystemTime, UNIX_EPOCH};

use super::retained::{self, Csr, Dfs};
use super::{HeapGraph, RetainedStat, RootKind, TypeStat};
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

/// The MemoryGraph being built for the file.
struct GraphWriter {
    type_names: Vec<Option<String>>,
    type_sizes: Vec<i32>,
    nodes: Vec<u32>,
    blob: Vec<u8>,
    total_size: i64,
}

impl GraphWriter {
    fn new() -> Self {
        let mut g = GraphWriter {
            type_names: vec![Some("UNDEFINED".to_string())],
            type_sizes: vec![0],
            nodes: Vec::new(),
            blob: Vec::new(),
            total_size: 0,
        };
        // The undefined node PerfView's writer leaves at offset 0: type 0, no children.
        push_compressed(&mut g.blob, 0);
        push_compressed(&mut g.blob, 0);
        g
    }

    fn add_type(&mut self, name: String) -> u32 {
        self.type_names.push(Some(name));
        self.type_sizes.push(-1);
        (self.type_names.len() - 1) as u32
    }

    /// Appends node `self.nodes.len()` with `children` (node indices).
    fn add_node(&mut self, type_index: u32, size: u64, children: &[u32]) -> io::Result<()> {
        let index = self.nodes.len() as i64;
        let label = u32::try_from(self.blob.len())
            .ok()
            .filter(|&l| l <= i32::MAX as u32)
            .ok_or_else(|| too_big("the graph"))?;
        self.nodes.push(label);
        let size = i32::try_from(size).unwrap_or(i32::MAX);
        let t = type_index as usize;
        if self.type_sizes[t] < 0 {
            self.type_sizes[t] = size;
        }
        let type_and_size = (type_index as i32) << 1;
        if self.type_sizes[t] == size {
            push_compressed(&mut self.blob, type_and_size);
        } else {
            push_compressed(&mut self.blob, type_and_size | 1);
            push_compressed(&mut self.blob, size);
        }
        self.total_size += i64::from(size);
        push_compressed(&mut self.blob, children.len() as i32);
        for &c in children {
            push_compressed(&mut self.blob, (i64::from(c) - index) as i32);
        }
        Ok(())
    }
}

fn too_big(what: &str) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidData,
        format!("{} is too large for a .gcdump (offsets are 31 bits)", what),
    )
}

/// The name of the node grouping roots of `kind`.
fn root_group(kind: RootKind) -> &'static str {
    match kind {
        RootKind::Stack => "[local vars]",
        RootKind::Finalizer => "[finalizer handles]",
        RootKind::Handle => "[handles]",
        RootKind::Static => "[static vars]",
        RootKind::ConditionalWeakTable => "[ConditionalWeakTable entries]",
        RootKind::Other(_) => "[other roots]",
    }
}

/// A writer that counts what went through (stream labels are offsets).
struct Counted<W> {
    w: W,
    at: u64,
}

impl<W: Write> Counted<W> {
    fn bytes(&mut self, b: &[u8]) -> io::Result<()> {
        self.w.write_all(b)?;
        self.at += b.len() as u64;
        Ok(())
    }
    fn u8(&mut self, v: u8) -> io::Result<()> {
        self.bytes(&[v])
    }
    fn i32(&mut self, v: i32) -> io::Result<()> {
        self.bytes(&v.to_le_bytes())
    }
    fn i64(&mut self, v: i64) -> io::Result<()> {
        self.bytes(&v.to_le_bytes())
    }
    fn f32(&mut self, v: f32) -> io::Result<()> {
        self.bytes(&v.to_le_bytes())
    }
    fn label(&mut self) -> io::Result<i32> {
        u32::try_from(self.at)
            .map(|l| l as i32)
            .map_err(|_| too_big("the file"))
    }
    fn string(&mut self, s: Option<&str>) -> io::Result<()> {
        let s = match s {
            None => return self.i32(-1),
            Some(s) => s,
        };
        let units: Vec<u16> = s.encode_utf16().collect();
        let mut b = Vec::with_capacity(units.len() + 4);
        b.extend_from_slice(&(units.len() as i32).to_le_bytes());
        for c in units {
            if c <= 0x7F {
                b.push(c as u8);
            } else if c <= 0x7FF {
                b.push(0xC0 | (c >> 6) as u8);
                b.push(0x80 | (c & 0x3F) as u8);
            } else {
                b.push(0xE0 | ((c >> 12) & 0xF) as u8);
                b.push(0x80 | ((c >> 6) & 0x3F) as u8);
                b.push(0x80 | (c & 0x3F) as u8);
            }
        }
        self.bytes(&b)
    }
    /// A type object seen for the first time.
    fn type_object(&mut self, name: &str, version: i32, min_reader: i32) -> io::Result<()> {
        self.u8(BEGIN_OBJECT)?;
        self.u8(NULL_REFERENCE)?;
        self.i32(version)?;
        self.i32(min_reader)?;
        self.string(Some(name))?;
        self.u8(END_OBJECT)
    }
}

/// What [`write()`] wrote.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Written {
    /// Bytes of the file.
    pub bytes: u64,
    /// Nodes of the graph (objects, root groups and the root).
    pub nodes: usize,
    /// References to addresses the walk sent no object for, left out.
    pub dangling_references: u64,
}

/// Writes `graph` as a `.gcdump` to `out` (see the module docs for the layout).
pub fn write<W: Write>(graph: &HeapGraph, info: &GcDumpInfo, out: W) -> io::Result<Written> {
    let index = graph.address_index();
    let mut g = GraphWriter::new();
    let mut type_map: Vec<u32> = Vec::with_capacity(graph.types.len());
    for t in &graph.types {
        type_map.push(g.add_type(t.display_name()));
    }
    let objects = graph.object_count();
    let mut dangling = 0u64;
    let mut children: Vec<u32> = Vec::new();
    let mut refs = graph.references();
    for i in 0..objects {
        let o = graph.object(i);
        children.clear();
        for &target in refs.next().unwrap_or(&[]) {
            match index.get(target) {
                Some(n) => children.push(n as u32),
                None => dangling += 1,
            }
        }
        g.add_node(type_map[o.type_index as usize], o.size, &children)?;
    }
    // The roots, grouped by kind, in a fixed order.
    let mut groups: Vec<(&'static str, Vec<u32>)> = Vec::new();
    for r in &graph.roots {
        let name = root_group(r.kind);
        let n = match index.get(r.address) {
            Some(n) => n as u32,
            None => {
                dangling += 1;
                continue;
            }
        };
        match groups.iter_mut().find(|(g, _)| *g == name) {
            Some((_, v)) => v.push(n),
            None => groups.push((name, vec![n])),
        }
    }
    groups.sort_by(|a, b| a.0.cmp(b.0));
    let first_group = g.nodes.len() as u32;
    for (name, mut members) in groups.iter().cloned() {
        members.sort_unstable();
        members.dedup();
        let t = g.add_type(name.to_string());
        g.add_node(t, 0, &members)?;
    }
    let group_nodes: Vec<u32> = (first_group..g.nodes.len() as u32).collect();
    let root_type = g.add_type(ROOT_NODE.to_string());
    let root = g.nodes.len();
    g.add_node(root_type, 0, &group_nodes)?;
    if g.nodes.len() > i32::MAX as usize {
        return Err(too_big("the graph"));
    }

    let mut w = Counted {
        w: io::BufWriter::with_capacity(1 << 16, out),
        at: 0,
    };
    w.string(Some(SIGNATURE))?;
    w.u8(BEGIN_OBJECT)?;
    w.type_object(HEAP_DUMP_TYPE, HEAP_DUMP_VERSION, HEAP_DUMP_MIN_READER)?;
    // The MemoryGraph.
    w.u8(BEGIN_OBJECT)?;
    w.type_object(MEMORY_GRAPH_TYPE, 1, 0)?;
    w.i64(g.total_size)?;
    w.i32(root as i32)?;
    w.i32(g.type_names.len() as i32)?;
    for (name, size) in g.type_names.iter().zip(&g.type_sizes) {
        w.string(name.as_deref())?;
        w.i32(*size)?;
        w.string(None)?;
    }
    w.i32(g.nodes.len() as i32)?;
    let mut labels = Vec::with_capacity(g.nodes.len() * 4);
    for &l in &g.nodes {
        labels.extend_from_slice(&l.to_le_bytes());
    }
    w.bytes(&labels)?;
    drop(labels);
    let blob_len = i32::try_from(g.blob.len()).map_err(|_| too_big("the graph"))?;
    w.i32(blob_len)?;
    w.bytes(&g.blob)?;
    w.i32(g.nodes.len() as i32)?;
    let mut addresses = Vec::with_capacity(g.nodes.len() * 8);
    for i in 0..g.nodes.len() {
        let a = if i < objects {
            graph.object(i).address
        } else {
            0
        };
        addresses.extend_from_slice(&a.to_le_bytes());
    }
    w.bytes(&addresses)?;
    drop(addresses);
    let is64 = u8::from(graph.pointer_size == 8);
    w.u8(TAG_BYTE)?;
    w.u8(is64)?;
    w.u8(END_OBJECT)?;
    // The rest of the GCHeapDump.
    w.u8(is64)?;
    w.f32(1.0)?;
    w.f32(1.0)?;
    w.u8(NULL_REFERENCE)?;
    w.u8(NULL_REFERENCE)?;
    w.string(None)?;
    w.i64(info.time_ticks)?;
    w.string(info.machine_name.as_deref())?;
    w.string(info.process_name.as_deref())?;
    w.i32(info.process_id)?;
    w.i64(0)?;
    w.i64(0)?;
    w.i32(0)?;
    w.u8(TAG_SKIP_REGION)?;
    w.i32(0)?;
    w.u8(NULL_REFERENCE)?;
    let skip_end = w.label()?;
    w.u8(TAG_STRING)?;
    w.string(info.creation_tool.as_deref())?;
    w.u8(END_OBJECT)?;
    w.u8(END_OBJECT)?;
    let table = w.label()?;
    w.i32(1)?;
    w.i32(skip_end)?;
    let trailer = w.label()?;
    w.i32(table)?;
    w.i32(trailer)?;
    w.w.flush()?;
    Ok(Written {
        bytes: w.at,
        nodes: g.nodes.len(),
        dangling_references: dangling,
    })
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

/// A little-endian reader over the file that names offsets in its errors.
struct In<'a> {
    data: &'a [u8],
    at: usize,
}

impl<'a> In<'a> {
    fn err<T>(&self, what: impl Into<String>) -> Result<T, GcDumpError> {
        Err(GcDumpError {
            offset: self.at as u64,
            what: what.into(),
        })
    }
    fn take(&mut self, n: usize, what: &str) -> Result<&'a [u8], GcDumpError> {
        match self.at.checked_add(n).filter(|&e| e <= self.data.len()) {
            Some(end) => {
                let s = &self.data[self.at..end];
                self.at = end;
                Ok(s)
            }
            None => self.err(format!(
                "the file ends inside {} ({} bytes needed, {} left)",
                what,
                n,
                self.data.len() - self.at
            )),
        }
    }
    fn u8(&mut self, what: &str) -> Result<u8, GcDumpError> {
        Ok(self.take(1, what)?[0])
    }
    fn i32(&mut self, what: &str) -> Result<i32, GcDumpError> {
        let b = self.take(4, what)?;
        Ok(i32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }
    fn i64(&mut self, what: &str) -> Result<i64, GcDumpError> {
        let b = self.take(8, what)?;
        let mut a = [0u8; 8];
        a.copy_from_slice(b);
        Ok(i64::from_le_bytes(a))
    }
    /// A count that must fit what is left at `unit` bytes an entry.
    fn count(&mut self, what: &str, unit: usize) -> Result<usize, GcDumpError> {
        let start = self.at;
        let n = self.i32(what)?;
        if n < 0 || (n as usize).saturating_mul(unit) > self.data.len() - self.at {
            self.at = start;
            return self.err(format!("{} {} does not fit in the file", what, n));
        }
        Ok(n as usize)
    }
    fn tag(&mut self, want: u8, what: &str) -> Result<(), GcDumpError> {
        let start = self.at;
        let t = self.u8(what)?;
        if t != want {
            self.at = start;
            return self.err(format!("expected {} (tag {}), found tag {}", what, want, t));
        }
        Ok(())
    }
    fn string(&mut self, what: &str) -> Result<Option<String>, GcDumpError> {
        let start = self.at;
        let n = self.i32(what)?;
        if n == -1 {
            return Ok(None);
        }
        if n < 0 || n as usize > self.data.len() - self.at {
            self.at = start;
            return self.err(format!("{}: bad string length {}", what, n));
        }
        let mut units = Vec::with_capacity(n as usize);
        for _ in 0..n {
            let b = self.u8(what)? as u16;
            let c = if b < 0x80 {
                b
            } else if b < 0xE0 {
                ((b & 0x1F) << 6) | (self.u8(what)? as u16 & 0x3F)
            } else {
                let b1 = self.u8(what)? as u16 & 0x3F;
                let b2 = self.u8(what)? as u16 & 0x3F;
                ((b & 0xF) << 12) | (b1 << 6) | b2
            };
            units.push(c);
        }
        Ok(Some(String::from_utf16_lossy(&units)))
    }
    /// An object's type: a new one (BeginObject or BeginPrivateObject, NullReference,
    /// version, minimum reader version, name, EndObject) or a reference to one read before.
    fn type_object(
        &mut self,
        seen: &FxHashMap<usize, String>,
    ) -> Result<(String, i32, i32, usize), GcDumpError> {
        let start = self.at;
        match self.u8("a type")? {
            BEGIN_OBJECT | BEGIN_PRIVATE_OBJECT => {
                self.tag(NULL_REFERENCE, "the type of a type (null)")?;
                let version = self.i32("a type's version")?;
                let min_reader = self.i32("a type's minimum reader version")?;
                let name = match self.string("a type's name")? {
                    Some(n) => n,
                    None => return self.err("a type without a name"),
                };
                self.tag(END_OBJECT, "the end of a type")?;
                Ok((name, version, min_reader, start))
            }
            OBJECT_REFERENCE => {
                let label = self.i32("a type reference")? as u32 as usize;
                match seen.get(&label) {
                    Some(n) => Ok((n.clone(), 0, 0, label)),
                    None => {
                        self.at = start;
                        self.err("a reference to a type not read before")
                    }
                }
            }
            t => {
                self.at = start;
                self.err(format!("expected a type object, found tag {}", t))
            }
        }
    }
}

/// Reads a `.gcdump` (see the module docs): its graph, every node checked. What it keeps
/// is about 24 bytes a node and 4 a reference (the types, sizes, addresses and children of
/// the nodes), nothing of `data`, which the caller may free once this returns.
pub fn read(data: &[u8]) -> Result<GcDump, GcDumpError> {
    let mut r = In { data, at: 0 };
    match r.string("the signature")? {
        Some(s) if s == SIGNATURE => {}
        _ => {
            r.at = 0;
            return r.err("no !FastSerialization.1 signature");
        }
    }
    let mut seen: FxHashMap<usize, String> = FxHashMap::default();
    r.tag(BEGIN_OBJECT, "the entry object")?;
    let (name, version, _, at) = r.type_object(&seen)?;
    seen.insert(at, name.clone());
    if name != HEAP_DUMP_TYPE {
        return r.err(format!("the entry object is a {}, not a GCHeapDump", name));
    }
    if version < 9 {
        return r.err(format!(
            "GCHeapDump version {} (older than 9) is not supported",
            version
        ));
    }
    r.tag(BEGIN_OBJECT, "the MemoryGraph")?;
    let (name, _, min_reader, at) = r.type_object(&seen)?;
    seen.insert(at, name.clone());
    if name != MEMORY_GRAPH_TYPE {
        return r.err(format!("the graph is a {}, not a Graphs.MemoryGraph", name));
    }
    if min_reader >= 1 {
        return r
            .err("a graph with deferred type names (minimum reader version 1) is not supported");
    }
    let total_size = r.i64("the total size")?;
    let root = r.i32("the root index")?;
    let type_count = r.count("the type count", 12)?;
    let mut types = Vec::with_capacity(type_count);
    for _ in 0..type_count {
        let name = r.string("a type name")?;
        let size = r.i32("a type size")?;
        let module = r.string("a module name")?;
        types.push(GcDumpType { name, size, module });
    }
    let node_count = r.count("the node count", 4)?;
    let labels_at = r.at;
    let labels = r.take(node_count * 4, "the node offsets")?;
    let blob_len = r.count("the blob length", 1)?;
    let blob = r.take(blob_len, "the node blob")?;
    let address_count = r.count("the address count", 8)?;
    if address_count != node_count {
        return r.err(format!(
            "{} addresses for {} nodes",
            address_count, node_count
        ));
    }
    let mut addresses = Vec::with_capacity(node_count);
    for c in r.take(node_count * 8, "the addresses")?.chunks_exact(8) {
        let mut a = [0u8; 8];
        a.copy_from_slice(c);
        addresses.push(u64::from_le_bytes(a));
    }
    let mut is_64bit = false;
    if r.data.get(r.at) == Some(&TAG_BYTE) {
        r.at += 1;
        is_64bit = r.u8("Is64Bit")? != 0;
    }
    if root < 0 || (node_count > 0 && root as usize >= node_count) {
        return r.err(format!("root index {} out of {} nodes", root, node_count));
    }
    // Every node decoded once: its type, size and children checked, its children counted
    // (`offsets[i + 1]`, the sum of the counts after the loop); then the children decoded
    // again into exactly the room they need. At most as many children in all as bytes of
    // the blob (checked), at most 2^31 - 1: the offsets fit in `u32`.
    let mut node_types = Vec::with_capacity(node_count);
    let mut node_sizes = Vec::with_capacity(node_count);
    let mut offsets: Vec<u32> = Vec::with_capacity(node_count + 1);
    offsets.push(0);
    let mut children = 0u32;
    for (i, l) in labels.chunks_exact(4).enumerate() {
        let label = u32::from_le_bytes([l[0], l[1], l[2], l[3]]) as usize;
        let bad = |what: String| GcDumpError {
            offset: (labels_at + i * 4) as u64,
            what: format!("node {}: {}", i, what),
        };
        let blob_err = |at: usize| bad(format!("its record at blob offset {} does not decode", at));
        let mut at = label;
        let ts = read_compressed(blob, &mut at).ok_or_else(|| blob_err(label))?;
        let t = (ts >> 1) as u32;
        if ts < 0 || t as usize >= types.len() {
            return Err(bad(format!("type {} out of {}", ts >> 1, types.len())));
        }
        let size = if ts & 1 != 0 {
            read_compressed(blob, &mut at).ok_or_else(|| blob_err(label))?
        } else {
            types[t as usize].size
        };
        let n = read_compressed(blob, &mut at).ok_or_else(|| blob_err(label))?;
        if n < 0 || n as usize > blob.len() - at.min(blob.len()) {
            return Err(bad(format!("{} children", n)));
        }
        for _ in 0..n {
            let d = read_compressed(blob, &mut at).ok_or_else(|| blob_err(label))?;
            let c = i as i64 + i64::from(d);
            if c < 0 || c as usize >= node_count {
                return Err(bad(format!("child {} out of {} nodes", c, node_count)));
            }
        }
        node_types.push(t);
        node_sizes.push(size);
        // Nodes may share a record (PerfView points the nodes it never wrote at the empty
        // one at offset 0), but every child takes a byte of the blob or more: more children
        // in all than bytes would be records sharing their children, whose decoding could
        // grow as the square of the file.
        children = match children
            .checked_add(n as u32)
            .filter(|&c| c as usize <= blob.len())
        {
            Some(c) => c,
            None => {
                return Err(bad(format!(
                    "more children in all than the {} bytes of the node blob hold",
                    blob.len()
                )))
            }
        };
        offsets.push(children);
    }
    let mut targets: Vec<u32> = Vec::with_capacity(children as usize);
    for (i, l) in labels.chunks_exact(4).enumerate() {
        // Checked above: every record decodes, every child is a node.
        let mut at = u32::from_le_bytes([l[0], l[1], l[2], l[3]]) as usize;
        let ts = read_compressed(blob, &mut at).unwrap_or(0);
        if ts & 1 != 0 {
            read_compressed(blob, &mut at);
        }
        let n = read_compressed(blob, &mut at).unwrap_or(0).max(0);
        for _ in 0..n {
            let d = read_compressed(blob, &mut at).unwrap_or(0);
            targets.push((i as i64 + i64::from(d)) as u32);
        }
    }
    let graph = Csr { offsets, targets };
    // The GCHeapDump's own fields, when they are as this module writes them (a DotNetHeapInfo
    // object from another writer ends the reading of metadata: the graph is what counts).
    let info = read_info(&mut r).ok();
    Ok(GcDump {
        types,
        root: root.max(0) as usize,
        total_size,
        is_64bit,
        info,
        node_types,
        node_sizes,
        graph,
        addresses,
    })
}

fn read_info(r: &mut In<'_>) -> Result<GcDumpInfo, GcDumpError> {
    r.tag(END_OBJECT, "the end of the graph")?;
    r.u8("Is64Bit")?;
    r.take(8, "the multipliers")?;
    r.tag(NULL_REFERENCE, "no JS heap info")?;
    r.tag(NULL_REFERENCE, "no .NET heap info")?;
    r.string("the collection log")?;
    let time_ticks = r.i64("the time collected")?;
    let machine_name = r.string("the machine name")?;
    let process_name = r.string("the process name")?;
    let process_id = r.i32("the process id")?;
    r.i64("the process commit")?;
    r.i64("the working set")?;
    let n = r.count("the multiplier count", 4)?;
    r.take(n * 4, "the multipliers")?;
    let mut creation_tool = None;
    if r.data.get(r.at) == Some(&TAG_SKIP_REGION) {
        r.at += 1;
        r.i32("a forward reference")?;
        r.tag(NULL_REFERENCE, "no interop info")?;
        if r.data.get(r.at) == Some(&TAG_STRING) {
            r.at += 1;
            creation_tool = r.string("the creation tool")?;
        }
    }
    Ok(GcDumpInfo {
        process_id,
        process_name,
        machine_name,
        time_ticks,
        creation_tool,
    })
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
    /// [`HeapGraph::type_stats`] orders them.
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
