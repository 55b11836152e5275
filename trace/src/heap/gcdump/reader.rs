//! The `.gcdump` reader: a file's graph and metadata, every offset, count and index checked.

use super::retained::Csr;
use super::{
    read_compressed, GcDump, GcDumpError, GcDumpInfo, GcDumpType, BEGIN_OBJECT,
    BEGIN_PRIVATE_OBJECT, END_OBJECT, HEAP_DUMP_TYPE, MEMORY_GRAPH_TYPE, NULL_REFERENCE,
    OBJECT_REFERENCE, SIGNATURE, TAG_BYTE, TAG_SKIP_REGION, TAG_STRING,
};
use crate::hash::FxHashMap;

/// A little-endian reader over the file that names offsets in its errors.
pub(super) struct In<'a> {
    pub(super) data: &'a [u8],
    pub(super) at: usize,
}

impl<'a> In<'a> {
    pub(super) fn err<T>(&self, what: impl Into<String>) -> Result<T, GcDumpError> {
        Err(GcDumpError {
            offset: self.at as u64,
            what: what.into(),
        })
    }
    pub(super) fn take(&mut self, n: usize, what: &str) -> Result<&'a [u8], GcDumpError> {
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
    pub(super) fn u8(&mut self, what: &str) -> Result<u8, GcDumpError> {
        Ok(self.take(1, what)?[0])
    }
    pub(super) fn i32(&mut self, what: &str) -> Result<i32, GcDumpError> {
        let b = self.take(4, what)?;
        Ok(i32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }
    pub(super) fn i64(&mut self, what: &str) -> Result<i64, GcDumpError> {
        let b = self.take(8, what)?;
        let mut a = [0u8; 8];
        a.copy_from_slice(b);
        Ok(i64::from_le_bytes(a))
    }
    /// A count that must fit what is left at `unit` bytes an entry.
    pub(super) fn count(&mut self, what: &str, unit: usize) -> Result<usize, GcDumpError> {
        let start = self.at;
        let n = self.i32(what)?;
        if n < 0 || (n as usize).saturating_mul(unit) > self.data.len() - self.at {
            self.at = start;
            return self.err(format!("{} {} does not fit in the file", what, n));
        }
        Ok(n as usize)
    }
    pub(super) fn tag(&mut self, want: u8, what: &str) -> Result<(), GcDumpError> {
        let start = self.at;
        let t = self.u8(what)?;
        if t != want {
            self.at = start;
            return self.err(format!("expected {} (tag {}), found tag {}", what, want, t));
        }
        Ok(())
    }
    pub(super) fn string(&mut self, what: &str) -> Result<Option<String>, GcDumpError> {
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
    pub(super) fn type_object(
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
