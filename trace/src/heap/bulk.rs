//! The payloads of the runtime's heap-walk events (`Microsoft-Windows-DotNETRuntime`, keyword
//! GCHeapDump 0x100000 and Type 0x80000), which carry no self-description in EventPipe.
//! Layouts as the runtime writes them (`EventStruct*` in the runtime's eventtracepriv.h,
//! packed, little-endian, pointers of the trace's pointer size):
//!
//! - GCBulkType (15): `Count u32, ClrInstanceID u16`, then `Count` values of
//!   `TypeID u64, ModuleID u64, TypeNameID u32, Flags u32, CorElementType u8,
//!   Name (UTF-16, NUL-terminated), TypeParameterCount u32, TypeParameters u64[count]`;
//! - GCBulkRootEdge (16): `Index u32, Count u32, ClrInstanceID u16`, then values of
//!   `RootedNodeAddress ptr, GCRootKind u8, GCRootFlag u32, GCRootID ptr`;
//! - GCBulkRootConditionalWeakTableElementEdge (17): the same header, values of
//!   `GCKeyNodeID ptr, GCValueNodeID ptr, GCRootID ptr`;
//! - GCBulkNode (18): the same header, values of `Address ptr, Size u64, TypeID u64,
//!   EdgeCount u64`;
//! - GCBulkEdge (19): the same header, values of `Value ptr, ReferencingFieldID u32`
//!   (the edges of the nodes, in node order: node i's are the next EdgeCount(i));
//! - GCBulkRootStaticVar (38): `Count u32, AppDomainID u64, ClrInstanceID u16`, then values
//!   of `GCRootID u64, ObjectID u64, TypeID u64, Flags u32, FieldName (UTF-16, NUL)`.
//!
//! Each decoder checks the whole payload before anything is taken from it, so a bad event
//! changes nothing.

/// Runtime event ids.
pub(crate) const BULK_TYPE: u32 = 15;
pub(crate) const BULK_ROOT_EDGE: u32 = 16;
pub(crate) const BULK_ROOT_CWT: u32 = 17;
pub(crate) const BULK_NODE: u32 = 18;
pub(crate) const BULK_EDGE: u32 = 19;
pub(crate) const BULK_ROOT_STATIC: u32 = 38;

/// Why a payload did not decode.
pub(crate) type Why = &'static str;

/// A little-endian reader over a payload.
pub(crate) struct Reader<'a> {
    data: &'a [u8],
    pos: usize,
    pointer_size: u8,
}

impl<'a> Reader<'a> {
    pub(crate) fn new(data: &'a [u8], pointer_size: u8) -> Self {
        Reader {
            data,
            pos: 0,
            pointer_size,
        }
    }

    fn take(&mut self, n: usize) -> Result<&'a [u8], Why> {
        let end = self
            .pos
            .checked_add(n)
            .filter(|&e| e <= self.data.len())
            .ok_or("payload too short for its count")?;
        let s = &self.data[self.pos..end];
        self.pos = end;
        Ok(s)
    }

    pub(crate) fn u8(&mut self) -> Result<u8, Why> {
        Ok(self.take(1)?[0])
    }

    pub(crate) fn u16(&mut self) -> Result<u16, Why> {
        let b = self.take(2)?;
        Ok(u16::from_le_bytes([b[0], b[1]]))
    }

    pub(crate) fn u32(&mut self) -> Result<u32, Why> {
        let b = self.take(4)?;
        Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }

    pub(crate) fn u64(&mut self) -> Result<u64, Why> {
        let b = self.take(8)?;
        let mut a = [0u8; 8];
        a.copy_from_slice(b);
        Ok(u64::from_le_bytes(a))
    }

    pub(crate) fn ptr(&mut self) -> Result<u64, Why> {
        if self.pointer_size == 4 {
            self.u32().map(u64::from)
        } else {
            self.u64()
        }
    }

    /// A NUL-terminated UTF-16 string's code units (without the NUL).
    pub(crate) fn utf16z(&mut self) -> Result<&'a [u8], Why> {
        let rest = &self.data[self.pos..];
        let mut i = 0;
        while i + 1 < rest.len() {
            if rest[i] == 0 && rest[i + 1] == 0 {
                self.pos += i + 2;
                return Ok(&rest[..i]);
            }
            i += 2;
        }
        Err("string without its NUL terminator")
    }

    pub(crate) fn remaining(&self) -> usize {
        self.data.len() - self.pos
    }
}

/// UTF-16LE bytes as text (unpaired surrogates replaced).
pub(crate) fn utf16_string(b: &[u8]) -> String {
    let units: Vec<u16> = b
        .chunks_exact(2)
        .map(|c| u16::from_le_bytes([c[0], c[1]]))
        .collect();
    String::from_utf16_lossy(&units)
}

/// One GCBulkType value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct BulkType<'a> {
    pub id: u64,
    pub module_id: u64,
    pub flags: u32,
    pub cor_element_type: u8,
    /// UTF-16LE.
    pub name: &'a [u8],
    /// The type arguments' type ids.
    pub type_parameters: Vec<u64>,
}

/// GCBulkType's values; the payload checked whole first.
pub(crate) fn bulk_types(payload: &[u8]) -> Result<Vec<BulkType<'_>>, Why> {
    let mut r = Reader::new(payload, 8);
    let count = r.u32()?;
    r.u16()?;
    // At least 31 bytes a value: no count beyond what the payload can hold is believed.
    if count as usize > r.remaining() / 31 {
        return Err("Count larger than the payload holds");
    }
    let mut out = Vec::with_capacity(count as usize);
    for _ in 0..count {
        let id = r.u64()?;
        let module_id = r.u64()?;
        let _name_id = r.u32()?;
        let flags = r.u32()?;
        let cor_element_type = r.u8()?;
        let name = r.utf16z()?;
        let n = r.u32()?;
        if n as usize > r.remaining() / 8 {
            return Err("TypeParameterCount larger than the payload holds");
        }
        let mut type_parameters = Vec::with_capacity(n as usize);
        for _ in 0..n {
            type_parameters.push(r.u64()?);
        }
        out.push(BulkType {
            id,
            module_id,
            flags,
            cor_element_type,
            name,
            type_parameters,
        });
    }
    Ok(out)
}

/// The header of the Index/Count/ClrInstanceID events, and a reader at their values, checked
/// to hold exactly `Count` values of `value_size` bytes (pointers counted at the trace's
/// size).
fn indexed(payload: &[u8], pointer_size: u8, value_size: usize) -> Result<(u32, Reader<'_>), Why> {
    let mut r = Reader::new(payload, pointer_size);
    let _index = r.u32()?;
    let count = r.u32()?;
    r.u16()?;
    let need = (count as usize)
        .checked_mul(value_size)
        .ok_or("Count overflows")?;
    if need > r.remaining() {
        return Err("payload too short for its count");
    }
    Ok((count, r))
}

/// One GCBulkNode value: an object.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct BulkNode {
    pub address: u64,
    pub size: u64,
    pub type_id: u64,
    pub edge_count: u64,
}

/// GCBulkNode's values, each handed to `each` once the whole payload checked out.
pub(crate) fn bulk_nodes(
    payload: &[u8],
    pointer_size: u8,
    mut each: impl FnMut(BulkNode),
) -> Result<u32, Why> {
    let ps = pointer_size as usize;
    let (count, mut r) = indexed(payload, pointer_size, ps + 24)?;
    for _ in 0..count {
        let node = BulkNode {
            address: r.ptr()?,
            size: r.u64()?,
            type_id: r.u64()?,
            edge_count: r.u64()?,
        };
        each(node);
    }
    Ok(count)
}

/// GCBulkEdge's values: (target address, referencing field id).
pub(crate) fn bulk_edges(
    payload: &[u8],
    pointer_size: u8,
    mut each: impl FnMut(u64, u32),
) -> Result<u32, Why> {
    let ps = pointer_size as usize;
    let (count, mut r) = indexed(payload, pointer_size, ps + 4)?;
    for _ in 0..count {
        let target = r.ptr()?;
        let field = r.u32()?;
        each(target, field);
    }
    Ok(count)
}

/// One root: what it keeps alive and what kind of root it is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct BulkRoot {
    pub address: u64,
    pub kind: u8,
    pub flags: u32,
    pub root_id: u64,
}

/// GCBulkRootEdge's values.
pub(crate) fn bulk_root_edges(
    payload: &[u8],
    pointer_size: u8,
    mut each: impl FnMut(BulkRoot),
) -> Result<u32, Why> {
    let ps = pointer_size as usize;
    let (count, mut r) = indexed(payload, pointer_size, 2 * ps + 5)?;
    for _ in 0..count {
        let address = r.ptr()?;
        let kind = r.u8()?;
        let flags = r.u32()?;
        let root_id = r.ptr()?;
        each(BulkRoot {
            address,
            kind,
            flags,
            root_id,
        });
    }
    Ok(count)
}

/// GCBulkRootConditionalWeakTableElementEdge's values: (key, value) pairs (the value is
/// kept alive while the key is).
pub(crate) fn bulk_root_cwt(
    payload: &[u8],
    pointer_size: u8,
    mut each: impl FnMut(u64, u64),
) -> Result<u32, Why> {
    let ps = pointer_size as usize;
    let (count, mut r) = indexed(payload, pointer_size, 3 * ps)?;
    for _ in 0..count {
        let key = r.ptr()?;
        let value = r.ptr()?;
        let _root = r.ptr()?;
        each(key, value);
    }
    Ok(count)
}

/// One GCBulkRootStaticVar value: a static field holding an object.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct StaticRoot<'a> {
    pub object: u64,
    pub type_id: u64,
    /// UTF-16LE.
    pub field: &'a [u8],
}

/// GCBulkRootStaticVar's values; the payload checked whole first.
pub(crate) fn bulk_root_statics(payload: &[u8]) -> Result<Vec<StaticRoot<'_>>, Why> {
    let mut r = Reader::new(payload, 8);
    let count = r.u32()?;
    let _domain = r.u64()?;
    r.u16()?;
    if count as usize > r.remaining() / 30 {
        return Err("Count larger than the payload holds");
    }
    let mut out = Vec::with_capacity(count as usize);
    for _ in 0..count {
        let _root_id = r.u64()?;
        let object = r.u64()?;
        let type_id = r.u64()?;
        let _flags = r.u32()?;
        let field = r.utf16z()?;
        out.push(StaticRoot {
            object,
            type_id,
            field,
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn utf16z(s: &str) -> Vec<u8> {
        let mut v: Vec<u8> = s.encode_utf16().flat_map(|u| u.to_le_bytes()).collect();
        v.extend_from_slice(&[0, 0]);
        v
    }

    #[test]
    fn bulk_type_values_with_names_and_parameters() {
        let mut p = Vec::new();
        p.extend_from_slice(&2u32.to_le_bytes());
        p.extend_from_slice(&7u16.to_le_bytes());
        for (id, name, params) in [
            (0x10u64, "System.Version", vec![]),
            (0x20, "L`1", vec![0x10u64]),
        ] {
            p.extend_from_slice(&id.to_le_bytes());
            p.extend_from_slice(&0x99u64.to_le_bytes());
            p.extend_from_slice(&0u32.to_le_bytes());
            p.extend_from_slice(&0u32.to_le_bytes());
            p.push(0x12);
            p.extend_from_slice(&utf16z(name));
            p.extend_from_slice(&(params.len() as u32).to_le_bytes());
            for t in &params {
                p.extend_from_slice(&t.to_le_bytes());
            }
        }
        let t = bulk_types(&p).unwrap();
        assert_eq!(t.len(), 2);
        assert_eq!(utf16_string(t[0].name), "System.Version");
        assert_eq!(t[1].type_parameters, vec![0x10]);
        // Every prefix is refused, never a panic.
        for n in 0..p.len() {
            assert!(bulk_types(&p[..n]).is_err(), "{}", n);
        }
    }

    #[test]
    fn nodes_and_edges_at_both_pointer_sizes() {
        for ps in [4u8, 8] {
            let mut p = Vec::new();
            p.extend_from_slice(&0u32.to_le_bytes());
            p.extend_from_slice(&1u32.to_le_bytes());
            p.extend_from_slice(&0u16.to_le_bytes());
            p.extend_from_slice(&0x1000u64.to_le_bytes()[..ps as usize]);
            p.extend_from_slice(&32u64.to_le_bytes());
            p.extend_from_slice(&0x10u64.to_le_bytes());
            p.extend_from_slice(&2u64.to_le_bytes());
            let mut got = Vec::new();
            assert_eq!(bulk_nodes(&p, ps, |n| got.push(n)), Ok(1));
            assert_eq!(
                got,
                vec![BulkNode {
                    address: 0x1000,
                    size: 32,
                    type_id: 0x10,
                    edge_count: 2
                }]
            );
            for n in 0..p.len() {
                assert!(
                    bulk_nodes(&p[..n], ps, |_| panic!("a value from a short payload")).is_err()
                );
            }
        }
        let mut e = Vec::new();
        e.extend_from_slice(&0u32.to_le_bytes());
        e.extend_from_slice(&u32::MAX.to_le_bytes());
        e.extend_from_slice(&0u16.to_le_bytes());
        assert!(bulk_edges(&e, 8, |_, _| panic!()).is_err());
    }
}
