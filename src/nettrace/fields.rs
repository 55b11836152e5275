//! The payload field walker: decodes an event payload with its metadata's
//! [`FieldDescriptions`], without allocating. Values are borrowed views.
//!
//! ```
//! # use dsipc::nettrace::{FieldDescriptions, Value};
//! fn mean(fields: FieldDescriptions<'_>, payload: &[u8]) -> Option<f64> {
//!     // EventCounters: one Object field `Payload` whose nested fields hold `Mean`.
//!     let obj = match fields.walk(payload).get("Payload").ok()?? {
//!         Value::Object(o) => o,
//!         _ => return None,
//!     };
//!     obj.get("Mean").ok()??.as_f64()
//! }
//! # let _ = mean;
//! ```

use super::error::FieldError;
use super::metadata::{FieldDescIter, FieldDescriptions, FieldType, TypeCode};
use super::text::TraceStr;
use super::varint::{read_varuint, zigzag};
use crate::wire::Guid;

/// A decoded payload value.
#[derive(Debug, Clone, Copy, PartialEq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum Value<'a> {
    /// Boolean (4 bytes on the wire; any non-zero is true).
    Boolean(bool),
    /// A UTF-16 code unit.
    Char(u16),
    /// Int8.
    I8(i8),
    /// UInt8.
    U8(u8),
    /// Int16.
    I16(i16),
    /// UInt16.
    U16(u16),
    /// Int32.
    I32(i32),
    /// UInt32.
    U32(u32),
    /// Int64.
    I64(i64),
    /// UInt64.
    U64(u64),
    /// Single.
    F32(f32),
    /// Double.
    F64(f64),
    /// A FILETIME: 100 ns intervals since 1601-01-01 UTC.
    DateTime(u64),
    /// Guid.
    Guid(Guid),
    /// A NUL-terminated UTF-16 string (without the NUL).
    String(TraceStr<'a>),
    /// A nested object.
    Object(ObjectValue<'a>),
    /// An array (Array, FixedLengthArray, RelLoc, DataLoc).
    Array(ArrayValue<'a>),
    /// V6 VarInt.
    VarInt(i64),
    /// V6 VarUInt.
    VarUInt(u64),
    /// V6 UTF-8 code unit.
    Utf8CodeUnit(u8),
}

impl<'a> Value<'a> {
    /// Integers (and booleans, chars) as `u64` when non-negative.
    pub fn as_u64(&self) -> Option<u64> {
        match *self {
            Value::Boolean(b) => Some(u64::from(b)),
            Value::Char(v) => Some(u64::from(v)),
            Value::U8(v) | Value::Utf8CodeUnit(v) => Some(u64::from(v)),
            Value::U16(v) => Some(u64::from(v)),
            Value::U32(v) => Some(u64::from(v)),
            Value::U64(v) | Value::VarUInt(v) | Value::DateTime(v) => Some(v),
            Value::I8(v) => u64::try_from(v).ok(),
            Value::I16(v) => u64::try_from(v).ok(),
            Value::I32(v) => u64::try_from(v).ok(),
            Value::I64(v) | Value::VarInt(v) => u64::try_from(v).ok(),
            _ => None,
        }
    }

    /// Integers as `i64` when they fit.
    pub fn as_i64(&self) -> Option<i64> {
        match *self {
            Value::I8(v) => Some(i64::from(v)),
            Value::I16(v) => Some(i64::from(v)),
            Value::I32(v) => Some(i64::from(v)),
            Value::I64(v) | Value::VarInt(v) => Some(v),
            _ => self.as_u64().and_then(|v| i64::try_from(v).ok()),
        }
    }

    /// Numbers as `f64`.
    pub fn as_f64(&self) -> Option<f64> {
        match *self {
            Value::F32(v) => Some(f64::from(v)),
            Value::F64(v) => Some(v),
            _ => self.as_i64().map(|v| v as f64),
        }
    }

    /// Strings.
    pub fn as_str(&self) -> Option<TraceStr<'a>> {
        match *self {
            Value::String(s) => Some(s),
            _ => None,
        }
    }

    /// Reads a value of type `code` at `pos` of `payload` and returns it with the position
    /// after it, as the field walker does; `None` for the types whose values need their
    /// field description (objects and the array kinds). For a caller that keeps a payload
    /// layout of its own, decoded once from the metadata.
    pub fn read_scalar(
        code: TypeCode,
        payload: &'a [u8],
        pos: usize,
    ) -> Option<Result<(Value<'a>, usize), FieldError>> {
        read_scalar(code, payload, pos, payload.len())
    }
}

/// A field: its name and value.
#[derive(Debug, Clone, Copy, PartialEq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct Field<'a> {
    /// The field's name.
    pub name: TraceStr<'a>,
    /// Its type.
    pub ty: FieldType<'a>,
    /// Its value.
    pub value: Value<'a>,
    /// Offset of the value in the (outermost) payload.
    pub offset: usize,
}

/// A nested object's value: walk it with [`ObjectValue::fields`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct ObjectValue<'a> {
    fields: FieldDescriptions<'a>,
    payload: &'a [u8],
    start: usize,
    end: usize,
}

impl<'a> ObjectValue<'a> {
    /// The object's fields.
    pub fn fields(&self) -> PayloadFields<'a> {
        PayloadFields {
            descs: self.fields.iter(),
            values: ValueCursor::new(self.payload, self.start, self.end),
            failed: false,
        }
    }

    /// The first field named `name` (Ok(None) if there is none).
    pub fn get(&self, name: &str) -> Result<Option<Value<'a>>, FieldError> {
        self.fields().get(name)
    }

    /// The object's bytes.
    pub fn as_bytes(&self) -> &'a [u8] {
        &self.payload[self.start..self.end]
    }
}

/// An array value: iterate its elements with [`ArrayValue::iter`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct ArrayValue<'a> {
    /// The element type.
    pub element: FieldType<'a>,
    /// Number of elements.
    pub count: usize,
    payload: &'a [u8],
    start: usize,
    end: usize,
}

impl<'a> ArrayValue<'a> {
    /// The elements.
    pub fn iter(&self) -> ArrayIter<'a> {
        ArrayIter {
            element: self.element,
            values: ValueCursor::new(self.payload, self.start, self.end),
            left: self.count,
        }
    }

    /// The bytes of the elements.
    pub fn as_bytes(&self) -> &'a [u8] {
        &self.payload[self.start..self.end]
    }
}

/// Iterator over the elements of an [`ArrayValue`].
#[derive(Debug, Clone)]
pub struct ArrayIter<'a> {
    element: FieldType<'a>,
    values: ValueCursor<'a>,
    left: usize,
}

impl<'a> Iterator for ArrayIter<'a> {
    type Item = Result<Value<'a>, FieldError>;
    fn next(&mut self) -> Option<Self::Item> {
        if self.left == 0 {
            return None;
        }
        self.left -= 1;
        let r = self.values.read(&self.element).map(|(v, _)| v);
        if r.is_err() {
            self.left = 0;
        }
        Some(r)
    }
}

/// Where the next value of a payload (or of a nested object or array) starts, and where the
/// payload's part ends: what [`ArrayIter`] and [`PayloadFields`] read from.
#[derive(Debug, Clone)]
struct ValueCursor<'a> {
    payload: &'a [u8],
    pos: usize,
    end: usize,
}

impl<'a> ValueCursor<'a> {
    fn new(payload: &'a [u8], pos: usize, end: usize) -> Self {
        ValueCursor { payload, pos, end }
    }

    /// Reads a value of type `ty` and moves past it; returns it with its offset.
    #[inline]
    fn read(&mut self, ty: &FieldType<'a>) -> Result<(Value<'a>, usize), FieldError> {
        let (value, next) = read_value(ty, self.payload, self.pos, self.end)?;
        let offset = self.pos;
        self.pos = next;
        Ok((value, offset))
    }
}

/// Walks a payload field by field (see [`FieldDescriptions::walk`]). Stops after the first
/// error.
#[derive(Debug, Clone)]
pub struct PayloadFields<'a> {
    descs: FieldDescIter<'a>,
    values: ValueCursor<'a>,
    failed: bool,
}

impl<'a> PayloadFields<'a> {
    /// Offset in the payload of the next field (after the walk: of the first byte no field
    /// covered).
    pub fn position(&self) -> usize {
        self.values.pos
    }

    /// The bytes not covered by the fields walked so far.
    pub fn rest(&self) -> &'a [u8] {
        let v = &self.values;
        &v.payload[v.pos.min(v.end)..v.end]
    }

    /// The value of the first field named `name` (walking from the current position);
    /// Ok(None) if no field has that name.
    pub fn get(mut self, name: &str) -> Result<Option<Value<'a>>, FieldError> {
        for f in &mut self {
            let f = f?;
            if f.name.eq_str(name) {
                return Ok(Some(f.value));
            }
        }
        Ok(None)
    }
}

impl<'a> Iterator for PayloadFields<'a> {
    type Item = Result<Field<'a>, FieldError>;
    fn next(&mut self) -> Option<Self::Item> {
        if self.failed {
            return None;
        }
        let d = self.descs.next()?;
        let r = self.values.read(&d.ty).map(|(value, offset)| Field {
            name: d.name,
            ty: d.ty,
            value,
            offset,
        });
        self.failed = r.is_err();
        Some(r)
    }
}

impl<'a> FieldDescriptions<'a> {
    /// Walks `payload` with these descriptions: each item is a field's name and value.
    pub fn walk(&self, payload: &'a [u8]) -> PayloadFields<'a> {
        PayloadFields {
            descs: self.iter(),
            values: ValueCursor::new(payload, 0, payload.len()),
            failed: false,
        }
    }
}

#[inline]
fn need(pos: usize, n: usize, end: usize) -> Result<usize, FieldError> {
    match pos.checked_add(n) {
        Some(e) if e <= end => Ok(e),
        _ => Err(FieldError::Truncated {
            offset: pos,
            needed: n,
            available: end.saturating_sub(pos),
        }),
    }
}

/// Reads a value of type `ty` at `pos` of `payload` (not past `end`); returns it and the
/// position after it.
pub(crate) fn read_value<'a>(
    ty: &FieldType<'a>,
    payload: &'a [u8],
    pos: usize,
    end: usize,
) -> Result<(Value<'a>, usize), FieldError> {
    if let Some(r) = read_scalar(ty.code, payload, pos, end) {
        return r;
    }
    match ty.code {
        TypeCode::Object => {
            let mut p = pos;
            for f in ty.fields.iter() {
                let (_, next) = read_value(&f.ty, payload, p, end)?;
                p = next;
            }
            Ok((
                Value::Object(ObjectValue {
                    fields: ty.fields,
                    payload,
                    start: pos,
                    end: p,
                }),
                p,
            ))
        }
        TypeCode::Array | TypeCode::FixedLengthArray => {
            let element = ty.element().ok_or(FieldError::UnknownType {
                offset: pos,
                code: ty.code.code(),
            })?;
            let (count, start) = if ty.code == TypeCode::Array {
                let e = need(pos, 2, end)?;
                (
                    usize::from(u16::from_le_bytes([payload[pos], payload[pos + 1]])),
                    e,
                )
            } else {
                (usize::from(ty.fixed_count), pos)
            };
            let mut p = start;
            if let Some(size) = element.fixed_size() {
                p = need(start, count.saturating_mul(size), end)?;
            } else {
                for _ in 0..count {
                    let (_, next) = read_value(&element, payload, p, end)?;
                    p = next;
                }
            }
            Ok((
                Value::Array(ArrayValue {
                    element,
                    count,
                    payload,
                    start,
                    end: p,
                }),
                p,
            ))
        }
        TypeCode::RelLoc | TypeCode::DataLoc => {
            let after = need(pos, 4, end)?;
            let loc = u32::from_le_bytes([
                payload[pos],
                payload[pos + 1],
                payload[pos + 2],
                payload[pos + 3],
            ]);
            let size = (loc >> 16) as usize;
            let at = (loc & 0xFFFF) as usize;
            let start = if ty.code == TypeCode::RelLoc {
                after + at
            } else {
                at
            };
            let element = ty.element().ok_or(FieldError::UnknownType {
                offset: pos,
                code: ty.code.code(),
            })?;
            let esize = element.fixed_size().filter(|&s| s > 0);
            let stop = start.checked_add(size);
            match (esize, stop) {
                (Some(es), Some(stop)) if stop <= payload.len() && size % es == 0 => Ok((
                    Value::Array(ArrayValue {
                        element,
                        count: size / es,
                        payload,
                        start,
                        end: stop,
                    }),
                    after,
                )),
                _ => Err(FieldError::BadLocation { offset: pos }),
            }
        }
        // Scalars were read above.
        c => Err(FieldError::UnknownType {
            offset: pos,
            code: c.code(),
        }),
    }
}

/// Reads a value of the scalar type `code` at `pos` of `payload` (not past `end`); returns it
/// and the position after it. `None` for the types whose values need their description
/// (objects, arrays, RelLoc, DataLoc).
#[inline]
fn read_scalar(
    code: TypeCode,
    payload: &[u8],
    pos: usize,
    end: usize,
) -> Option<Result<(Value<'_>, usize), FieldError>> {
    match code {
        TypeCode::Object
        | TypeCode::Array
        | TypeCode::FixedLengthArray
        | TypeCode::RelLoc
        | TypeCode::DataLoc => None,
        _ => Some(scalar(code, payload, pos, end)),
    }
}

/// [`read_scalar`] of a scalar type.
#[inline]
fn scalar(
    code: TypeCode,
    payload: &[u8],
    pos: usize,
    end: usize,
) -> Result<(Value<'_>, usize), FieldError> {
    macro_rules! fixed {
        ($n:expr, $f:expr) => {{
            let e = need(pos, $n, end)?;
            let mut a = [0u8; $n];
            a.copy_from_slice(&payload[pos..e]);
            #[allow(clippy::redundant_closure_call)]
            Ok(($f(a), e))
        }};
    }
    match code {
        TypeCode::Boolean => fixed!(4, |a| Value::Boolean(u32::from_le_bytes(a) != 0)),
        TypeCode::Char => fixed!(2, |a| Value::Char(u16::from_le_bytes(a))),
        TypeCode::SByte => fixed!(1, |a: [u8; 1]| Value::I8(a[0] as i8)),
        TypeCode::Byte => fixed!(1, |a: [u8; 1]| Value::U8(a[0])),
        TypeCode::Utf8CodeUnit => fixed!(1, |a: [u8; 1]| Value::Utf8CodeUnit(a[0])),
        TypeCode::Int16 => fixed!(2, |a| Value::I16(i16::from_le_bytes(a))),
        TypeCode::UInt16 => fixed!(2, |a| Value::U16(u16::from_le_bytes(a))),
        TypeCode::Int32 => fixed!(4, |a| Value::I32(i32::from_le_bytes(a))),
        TypeCode::UInt32 => fixed!(4, |a| Value::U32(u32::from_le_bytes(a))),
        TypeCode::Int64 => fixed!(8, |a| Value::I64(i64::from_le_bytes(a))),
        TypeCode::UInt64 => fixed!(8, |a| Value::U64(u64::from_le_bytes(a))),
        TypeCode::Single => fixed!(4, |a| Value::F32(f32::from_le_bytes(a))),
        TypeCode::Double => fixed!(8, |a| Value::F64(f64::from_le_bytes(a))),
        TypeCode::DateTime => fixed!(8, |a| Value::DateTime(u64::from_le_bytes(a))),
        TypeCode::Guid => fixed!(16, |a| Value::Guid(Guid(a))),
        TypeCode::String => {
            let mut i = pos;
            while i + 1 < end {
                if payload[i] == 0 && payload[i + 1] == 0 {
                    return Ok((Value::String(TraceStr::utf16(&payload[pos..i])), i + 2));
                }
                i += 2;
            }
            Err(FieldError::UnterminatedString { offset: pos })
        }
        TypeCode::VarInt | TypeCode::VarUInt => {
            let (v, n) = read_varuint(&payload[pos.min(end)..end], 64)
                .ok_or(FieldError::BadVarint { offset: pos })?;
            let value = if code == TypeCode::VarInt {
                Value::VarInt(zigzag(v))
            } else {
                Value::VarUInt(v)
            };
            Ok((value, pos + n))
        }
        TypeCode::Unknown(code) => Err(FieldError::UnknownType { offset: pos, code }),
        // Types that need their description: see `read_scalar`.
        c => Err(FieldError::UnknownType {
            offset: pos,
            code: c.code(),
        }),
    }
}
