//! The `.gcdump` writer: a [`HeapGraph`] as PerfView's MemoryGraph, in FastSerialization.

use std::io::{self, Write};

use super::{
    push_compressed, GcDumpInfo, BEGIN_OBJECT, END_OBJECT, HEAP_DUMP_MIN_READER, HEAP_DUMP_TYPE,
    HEAP_DUMP_VERSION, MEMORY_GRAPH_TYPE, NULL_REFERENCE, ROOT_NODE, SIGNATURE, TAG_BYTE,
    TAG_SKIP_REGION, TAG_STRING,
};
use crate::heap::{HeapGraph, RootKind};

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
pub(super) struct Counted<W> {
    pub(super) w: W,
    pub(super) at: u64,
}

impl<W: Write> Counted<W> {
    pub(super) fn bytes(&mut self, b: &[u8]) -> io::Result<()> {
        self.w.write_all(b)?;
        self.at += b.len() as u64;
        Ok(())
    }
    pub(super) fn u8(&mut self, v: u8) -> io::Result<()> {
        self.bytes(&[v])
    }
    pub(super) fn i32(&mut self, v: i32) -> io::Result<()> {
        self.bytes(&v.to_le_bytes())
    }
    pub(super) fn i64(&mut self, v: i64) -> io::Result<()> {
        self.bytes(&v.to_le_bytes())
    }
    pub(super) fn f32(&mut self, v: f32) -> io::Result<()> {
        self.bytes(&v.to_le_bytes())
    }
    pub(super) fn label(&mut self) -> io::Result<i32> {
        u32::try_from(self.at)
            .map(|l| l as i32)
            .map_err(|_| too_big("the file"))
    }
    pub(super) fn string(&mut self, s: Option<&str>) -> io::Result<()> {
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
    pub(super) fn type_object(
        &mut self,
        name: &str,
        version: i32,
        min_reader: i32,
    ) -> io::Result<()> {
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
