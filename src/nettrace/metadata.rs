//! Metadata records: what an event is (provider, id, name, version, ...) and the layout of
//! its payload ([`FieldDescriptions`], walked with [`FieldDescriptions::walk`]).

use super::error::NettraceError;
use super::header::Format;
use super::text::TraceStr;
use super::varint::Cur;
use crate::wire::Guid;

/// Deepest nesting of objects and arrays accepted in field descriptions.
pub const MAX_FIELD_DEPTH: u32 = 16;

/// A metadata record: the description of one kind of event, referenced by
/// [`Event::metadata_id`](super::Event::metadata_id).
///
/// Runtime, rundown and SampleProfiler events come with an empty name and no fields: use
/// [`clr`](super::clr) for their layouts and names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct MetadataRecord<'a> {
    /// The id events use to refer to this record (unique within the trace; V6 allows reuse
    /// after a sequence point that flushes metadata).
    pub metadata_id: u32,
    /// Provider name, e.g. `Microsoft-Windows-DotNETRuntime`.
    pub provider_name: TraceStr<'a>,
    /// Provider GUID (V6 only, when given).
    pub provider_id: Option<Guid>,
    /// Event id within the provider (0 when the provider has none).
    pub event_id: u32,
    /// Event name (often empty for runtime events).
    pub event_name: TraceStr<'a>,
    /// Keywords.
    pub keywords: u64,
    /// Event version: layouts of one event id differ between versions.
    pub version: u32,
    /// Level (1 critical .. 5 verbose).
    pub level: u32,
    /// Opcode (V5 OpCode tag, V6 optional metadata), if given.
    pub opcode: Option<u8>,
    /// The payload layout (V5 V2Params fields when present, else the V4 fields; V6 fields).
    pub fields: FieldDescriptions<'a>,
    /// The field descriptions (or the tags after them) could not be parsed: `fields` is
    /// empty and the payload can only be used raw. The trace itself stays readable
    /// (TraceEvent does the same).
    pub fields_malformed: bool,
    /// V6 message template, if given.
    pub message_template: Option<TraceStr<'a>>,
    /// V6 description, if given.
    pub description: Option<TraceStr<'a>>,
    /// The record's bytes (V4/V5: the metadata blob's payload; V6: the row after its size),
    /// for [`MetadataRecord::parse`] on a copy the caller keeps.
    pub raw: &'a [u8],
    /// The stream's format (decides how `raw` is read).
    pub format: Format,
}

impl<'a> MetadataRecord<'a> {
    /// Parses a record from its bytes (as found in [`MetadataRecord::raw`]); `offset` is the
    /// stream offset of `raw[0]`, used in errors.
    pub fn parse(raw: &'a [u8], format: Format, offset: u64) -> Result<Self, NettraceError> {
        if format.is_v6() {
            parse_v6(raw, offset, format)
        } else {
            parse_v4(raw, offset)
        }
    }

    /// A record of the event `event_id` (`event_name`) of `provider_name`, everything else empty.
    fn new(
        raw: &'a [u8],
        format: Format,
        metadata_id: u32,
        provider_name: TraceStr<'a>,
        event_id: u32,
        event_name: TraceStr<'a>,
    ) -> Self {
        MetadataRecord {
            metadata_id,
            provider_name,
            provider_id: None,
            event_id,
            event_name,
            keywords: 0,
            version: 0,
            level: 0,
            opcode: None,
            fields: FieldDescriptions::EMPTY,
            fields_malformed: false,
            message_template: None,
            description: None,
            raw,
            format,
        }
    }

    /// The record once its field descriptions and tags were read: when that failed, no
    /// fields and `fields_malformed` (the trace itself stays readable).
    fn with_tail(mut self, tail: Result<(), NettraceError>) -> Self {
        if tail.is_err() {
            self.fields = FieldDescriptions::EMPTY;
            self.fields_malformed = true;
        }
        self
    }
}

fn parse_v4(raw: &[u8], offset: u64) -> Result<MetadataRecord<'_>, NettraceError> {
    let mut c = Cur::new(raw, offset);
    let metadata_id = c.u32("metadata MetadataId")?;
    let provider_name = TraceStr::utf16(c.utf16z("metadata ProviderName")?);
    let event_id = c.u32("metadata EventId")?;
    let event_name = TraceStr::utf16(c.utf16z("metadata EventName")?);
    let mut rec = MetadataRecord::new(
        raw,
        Format::V4,
        metadata_id,
        provider_name,
        event_id,
        event_name,
    );
    rec.keywords = c.u64("metadata Keywords")?;
    rec.version = c.u32("metadata Version")?;
    rec.level = c.u32("metadata Level")?;
    if c.is_empty() {
        return Ok(rec);
    }
    let tail = (|| -> Result<(), NettraceError> {
        let count = c.u32("metadata FieldCount")?;
        rec.fields = parse_fields(&mut c, count, FieldEncoding::V1, 0)?;
        while !c.is_empty() {
            let len = c.u32("metadata tag length")? as usize;
            let kind = c.u8("metadata tag kind")?;
            let tag_base = c.offset();
            let body = c.take(len, "metadata tag")?;
            let mut t = Cur::new(body, tag_base);
            match kind {
                1 => rec.opcode = Some(t.u8("OpCode tag")?),
                2 => {
                    let count = t.u32("V2Params FieldCount")?;
                    rec.fields = parse_fields(&mut t, count, FieldEncoding::V2, 0)?;
                }
                _ => {}
            }
        }
        Ok(())
    })();
    Ok(rec.with_tail(tail))
}

fn parse_v6(raw: &[u8], offset: u64, format: Format) -> Result<MetadataRecord<'_>, NettraceError> {
    let mut c = Cur::new(raw, offset);
    let metadata_id = c.varu32()?;
    let provider_name = TraceStr::Utf8(c.str8("metadata ProviderName")?);
    let event_id = c.varu32()?;
    let event_name = TraceStr::Utf8(c.str8("metadata EventName")?);
    let mut rec = MetadataRecord::new(
        raw,
        format,
        metadata_id,
        provider_name,
        event_id,
        event_name,
    );
    let tail = (|| -> Result<(), NettraceError> {
        let count = c.u16("metadata field count")?;
        rec.fields = parse_fields(&mut c, u32::from(count), FieldEncoding::V6, 0)?;
        if c.is_empty() {
            return Ok(());
        }
        let size = c.u16("optional metadata size")? as usize;
        let base = c.offset();
        let mut o = Cur::new(c.take(size, "optional metadata")?, base);
        while !o.is_empty() {
            match o.u8("optional metadata kind")? {
                1 => rec.opcode = Some(o.u8("OpCode")?),
                3 => rec.keywords = o.u64("Keywords")?,
                4 => rec.message_template = Some(TraceStr::Utf8(o.str8("MessageTemplate")?)),
                5 => rec.description = Some(TraceStr::Utf8(o.str8("Description")?)),
                6 => {
                    o.str8("metadata key")?;
                    o.str8("metadata value")?;
                }
                7 => rec.provider_id = Some(o.guid("ProviderGuid")?),
                8 => rec.level = u32::from(o.u8("Level")?),
                9 => rec.version = u32::from(o.u8("Version")?),
                // Unknown kinds cannot be sized: stop reading optional metadata.
                _ => break,
            }
        }
        Ok(())
    })();
    Ok(rec.with_tail(tail))
}

/// A payload field's type code.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum TypeCode {
    /// 1: nested fields, concatenated.
    Object,
    /// 3: 4-byte boolean.
    Boolean,
    /// 4: one UTF-16 code unit.
    Char,
    /// 5.
    SByte,
    /// 6.
    Byte,
    /// 7.
    Int16,
    /// 8.
    UInt16,
    /// 9.
    Int32,
    /// 10.
    UInt32,
    /// 11.
    Int64,
    /// 12.
    UInt64,
    /// 13.
    Single,
    /// 14.
    Double,
    /// 16: 8 bytes, a FILETIME (100 ns since 1601-01-01 UTC).
    DateTime,
    /// 17.
    Guid,
    /// 18: NUL-terminated UTF-16.
    String,
    /// 19: `u16` count, then elements (V2Params and V6).
    Array,
    /// 20 (V6): zigzag varint64.
    VarInt,
    /// 21 (V6): varuint64.
    VarUInt,
    /// 22 (V6): a count fixed by the metadata, then elements.
    FixedLengthArray,
    /// 23 (V6): one UTF-8 code unit.
    Utf8CodeUnit,
    /// 24 (V6): `u32` (size << 16 | position after the field) of fixed-size elements.
    RelLoc,
    /// 25 (V6): `u32` (size << 16 | position from the payload start) of fixed-size elements.
    DataLoc,
    /// Any other code: its values cannot be sized.
    Unknown(u32),
}

impl TypeCode {
    /// The type for a wire code.
    pub fn from_code(code: u32) -> TypeCode {
        match code {
            1 => TypeCode::Object,
            3 => TypeCode::Boolean,
            4 => TypeCode::Char,
            5 => TypeCode::SByte,
            6 => TypeCode::Byte,
            7 => TypeCode::Int16,
            8 => TypeCode::UInt16,
            9 => TypeCode::Int32,
            10 => TypeCode::UInt32,
            11 => TypeCode::Int64,
            12 => TypeCode::UInt64,
            13 => TypeCode::Single,
            14 => TypeCode::Double,
            16 => TypeCode::DateTime,
            17 => TypeCode::Guid,
            18 => TypeCode::String,
            19 => TypeCode::Array,
            20 => TypeCode::VarInt,
            21 => TypeCode::VarUInt,
            22 => TypeCode::FixedLengthArray,
            23 => TypeCode::Utf8CodeUnit,
            24 => TypeCode::RelLoc,
            25 => TypeCode::DataLoc,
            c => TypeCode::Unknown(c),
        }
    }

    /// The wire code.
    pub fn code(&self) -> u32 {
        match *self {
            TypeCode::Object => 1,
            TypeCode::Boolean => 3,
            TypeCode::Char => 4,
            TypeCode::SByte => 5,
            TypeCode::Byte => 6,
            TypeCode::Int16 => 7,
            TypeCode::UInt16 => 8,
            TypeCode::Int32 => 9,
            TypeCode::UInt32 => 10,
            TypeCode::Int64 => 11,
            TypeCode::UInt64 => 12,
            TypeCode::Single => 13,
            TypeCode::Double => 14,
            TypeCode::DateTime => 16,
            TypeCode::Guid => 17,
            TypeCode::String => 18,
            TypeCode::Array => 19,
            TypeCode::VarInt => 20,
            TypeCode::VarUInt => 21,
            TypeCode::FixedLengthArray => 22,
            TypeCode::Utf8CodeUnit => 23,
            TypeCode::RelLoc => 24,
            TypeCode::DataLoc => 25,
            TypeCode::Unknown(c) => c,
        }
    }

    /// Size in bytes of a value of a primitive fixed-size type (None for Object, arrays,
    /// strings, varints and unknown codes).
    pub fn primitive_size(&self) -> Option<usize> {
        Some(match *self {
            TypeCode::Byte | TypeCode::SByte | TypeCode::Utf8CodeUnit => 1,
            TypeCode::Char | TypeCode::Int16 | TypeCode::UInt16 => 2,
            TypeCode::Boolean | TypeCode::Int32 | TypeCode::UInt32 | TypeCode::Single => 4,
            TypeCode::RelLoc | TypeCode::DataLoc => 4,
            TypeCode::Int64 | TypeCode::UInt64 | TypeCode::Double | TypeCode::DateTime => 8,
            TypeCode::Guid => 16,
            _ => return None,
        })
    }
}

/// How a list of field descriptions is encoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum FieldEncoding {
    /// V4 fields: `u32 TypeCode` (+ nested for objects), then the UTF-16 name.
    V1,
    /// V5 V2Params: `u32 size`, UTF-16 name, `u32 TypeCode` (+ element / nested), padding.
    V2,
    /// V6: `u16 size`, UTF-8 name, `u8 TypeCode` (+ element / count / nested).
    V6,
}

/// A validated list of field descriptions (a view over the metadata bytes).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct FieldDescriptions<'a> {
    bytes: &'a [u8],
    count: u32,
    encoding: FieldEncoding,
    depth: u32,
}

impl<'a> FieldDescriptions<'a> {
    /// No fields.
    pub const EMPTY: FieldDescriptions<'static> = FieldDescriptions {
        bytes: &[],
        count: 0,
        encoding: FieldEncoding::V1,
        depth: 0,
    };

    /// Number of fields.
    pub fn len(&self) -> usize {
        self.count as usize
    }

    /// True when there are no fields.
    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// The encoding of the descriptions.
    pub fn encoding(&self) -> FieldEncoding {
        self.encoding
    }

    /// The field descriptions, in payload order.
    pub fn iter(&self) -> FieldDescIter<'a> {
        FieldDescIter {
            cur: Cur::new(self.bytes, 0),
            left: self.count,
            encoding: self.encoding,
            depth: self.depth,
        }
    }

    /// The first field named `name`.
    pub fn find(&self, name: &str) -> Option<FieldDesc<'a>> {
        self.iter().find(|f| f.name.eq_str(name))
    }
}

impl<'a> IntoIterator for FieldDescriptions<'a> {
    type Item = FieldDesc<'a>;
    type IntoIter = FieldDescIter<'a>;
    fn into_iter(self) -> FieldDescIter<'a> {
        self.iter()
    }
}

/// One field description: a name and a type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct FieldDesc<'a> {
    /// The field's name.
    pub name: TraceStr<'a>,
    /// The field's type.
    pub ty: FieldType<'a>,
}

/// A field's type: a code, plus nested fields (Object) or an element type (arrays).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct FieldType<'a> {
    /// The type code.
    pub code: TypeCode,
    /// The element count of a [`TypeCode::FixedLengthArray`] (0 otherwise).
    pub fixed_count: u16,
    /// The nested fields of an [`TypeCode::Object`] (empty otherwise).
    pub fields: FieldDescriptions<'a>,
    element: &'a [u8],
    encoding: FieldEncoding,
    depth: u32,
}

impl<'a> FieldType<'a> {
    /// The element type of an array type (Array, FixedLengthArray, RelLoc, DataLoc).
    pub fn element(&self) -> Option<FieldType<'a>> {
        if self.element.is_empty() {
            return None;
        }
        let mut c = Cur::new(self.element, 0);
        parse_type(&mut c, self.encoding, self.depth + 1).ok()
    }

    /// Size of every value of this type when it is fixed (primitives, objects of fixed-size
    /// fields, fixed-length arrays of fixed-size elements); None otherwise.
    pub fn fixed_size(&self) -> Option<usize> {
        match self.code {
            TypeCode::Object => {
                let mut total = 0usize;
                for f in self.fields.iter() {
                    total = total.checked_add(f.ty.fixed_size()?)?;
                }
                Some(total)
            }
            TypeCode::FixedLengthArray => {
                usize::from(self.fixed_count).checked_mul(self.element()?.fixed_size()?)
            }
            c => c.primitive_size(),
        }
    }
}

/// Iterator over [`FieldDescriptions`].
#[derive(Debug, Clone)]
pub struct FieldDescIter<'a> {
    cur: Cur<'a>,
    left: u32,
    encoding: FieldEncoding,
    depth: u32,
}

impl<'a> Iterator for FieldDescIter<'a> {
    type Item = FieldDesc<'a>;
    fn next(&mut self) -> Option<FieldDesc<'a>> {
        if self.left == 0 {
            return None;
        }
        self.left -= 1;
        match parse_field(&mut self.cur, self.encoding, self.depth) {
            Ok(f) => Some(f),
            Err(_) => {
                self.left = 0;
                None
            }
        }
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        (0, Some(self.left as usize))
    }
}

/// Parses and validates `count` fields; returns the view over them.
pub(crate) fn parse_fields<'a>(
    c: &mut Cur<'a>,
    count: u32,
    encoding: FieldEncoding,
    depth: u32,
) -> Result<FieldDescriptions<'a>, NettraceError> {
    if depth > MAX_FIELD_DEPTH {
        return Err(c.malformed("field descriptions (nested too deep)"));
    }
    let start = c.pos;
    for _ in 0..count {
        parse_field(c, encoding, depth)?;
    }
    Ok(FieldDescriptions {
        bytes: &c.bytes[start..c.pos],
        count,
        encoding,
        depth,
    })
}

fn parse_field<'a>(
    c: &mut Cur<'a>,
    encoding: FieldEncoding,
    depth: u32,
) -> Result<FieldDesc<'a>, NettraceError> {
    match encoding {
        FieldEncoding::V1 => {
            let ty = parse_type(c, encoding, depth)?;
            let name = TraceStr::utf16(c.utf16z("field name")?);
            Ok(FieldDesc { name, ty })
        }
        FieldEncoding::V2 => {
            let at = c.offset();
            let size = c.u32("V2Params field size")? as usize;
            if size < 4 {
                return Err(NettraceError::Malformed {
                    offset: at,
                    what: "V2Params field size",
                });
            }
            let base = c.offset();
            let mut f = Cur::new(c.take(size - 4, "V2Params field")?, base);
            let name = TraceStr::utf16(f.utf16z("field name")?);
            let ty = parse_type(&mut f, encoding, depth)?;
            Ok(FieldDesc { name, ty })
        }
        FieldEncoding::V6 => {
            let size = c.u16("field size")? as usize;
            let base = c.offset();
            let mut f = Cur::new(c.take(size, "field")?, base);
            let name = TraceStr::Utf8(f.str8("field name")?);
            let ty = parse_type(&mut f, encoding, depth)?;
            Ok(FieldDesc { name, ty })
        }
    }
}

fn parse_type<'a>(
    c: &mut Cur<'a>,
    encoding: FieldEncoding,
    depth: u32,
) -> Result<FieldType<'a>, NettraceError> {
    if depth > MAX_FIELD_DEPTH {
        return Err(c.malformed("field type (nested too deep)"));
    }
    let at = c.offset();
    let code = match encoding {
        FieldEncoding::V6 => u32::from(c.u8("type code")?),
        _ => c.u32("type code")?,
    };
    let code = TypeCode::from_code(code);
    let mut ty = FieldType {
        code,
        fixed_count: 0,
        fields: FieldDescriptions::EMPTY,
        element: &[],
        encoding,
        depth,
    };
    match code {
        TypeCode::Object => {
            let count = match encoding {
                FieldEncoding::V6 => u32::from(c.u16("object field count")?),
                _ => c.u32("object field count")?,
            };
            ty.fields = parse_fields(c, count, encoding, depth + 1)?;
        }
        TypeCode::Array | TypeCode::FixedLengthArray | TypeCode::RelLoc | TypeCode::DataLoc => {
            if encoding == FieldEncoding::V1 {
                return Err(NettraceError::Malformed {
                    offset: at,
                    what: "field type (arrays need V2Params)",
                });
            }
            if encoding == FieldEncoding::V2 && code != TypeCode::Array {
                return Err(NettraceError::Malformed {
                    offset: at,
                    what: "field type (V6 array kinds in V5 metadata)",
                });
            }
            let start = c.pos;
            parse_type(c, encoding, depth + 1)?;
            ty.element = &c.bytes[start..c.pos];
            if code == TypeCode::FixedLengthArray {
                ty.fixed_count = c.u16("fixed array length")?;
            }
            if matches!(code, TypeCode::RelLoc | TypeCode::DataLoc)
                && ty.element().and_then(|e| e.fixed_size()).is_none()
            {
                return Err(NettraceError::Malformed {
                    offset: at,
                    what: "RelLoc/DataLoc element type (must be fixed-size)",
                });
            }
        }
        _ => {}
    }
    Ok(ty)
}
