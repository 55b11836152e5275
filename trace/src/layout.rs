//! [`EventLayout`]: a self-describing event's payload layout, decoded once per metadata
//! record (names transcoded, nested objects flattened), so that an event's fields are read
//! without parsing its metadata record again (TraceEvent's parsed template of a
//! `DynamicTraceEventData`).

use dsipc::nettrace::{FieldDescriptions, FieldError, TypeCode, Value};

/// One field of a flattened layout: a scalar read in payload order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LayoutField {
    /// The field's name (lossy UTF-8), decoded once.
    pub name: Box<str>,
    /// Its type (a scalar: see [`Value::read_scalar`]).
    pub code: TypeCode,
    /// Objects it is nested in (0: a top-level field).
    pub depth: u32,
}

/// A payload layout decoded once: the fields of a metadata record, nested objects flattened
/// into the list in payload order (an Object's value is its fields, concatenated).
///
/// Layouts with an array (or a RelLoc/DataLoc) field are not flattened
/// ([`is_flat`](Self::is_flat) is false): their values need the core's walker over the
/// record. Memory: the names and one entry per scalar field of one record.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EventLayout {
    fields: Vec<LayoutField>,
    flat: bool,
    depth: u32,
}

impl EventLayout {
    /// The layout `fields` describes.
    pub fn new(fields: &FieldDescriptions<'_>) -> EventLayout {
        let mut layout = EventLayout {
            fields: Vec::new(),
            flat: true,
            depth: 0,
        };
        layout.flatten(fields, 0);
        if !layout.flat {
            layout.fields.clear();
        }
        layout
    }

    fn flatten(&mut self, fields: &FieldDescriptions<'_>, depth: u32) {
        self.depth = self.depth.max(depth);
        for f in fields.iter() {
            match f.ty.code {
                // The core bounds the nesting (MAX_FIELD_DEPTH): the recursion is bounded.
                TypeCode::Object => self.flatten(&f.ty.fields, depth + 1),
                TypeCode::Array
                | TypeCode::FixedLengthArray
                | TypeCode::RelLoc
                | TypeCode::DataLoc => self.flat = false,
                code => self.fields.push(LayoutField {
                    name: crate::metadata::lossy(f.name).into_boxed_str(),
                    code,
                    depth,
                }),
            }
        }
    }

    /// True if every field is a scalar or an object of scalars: [`read`](Self::read) reads
    /// it. False: read it with the core's walker.
    pub fn is_flat(&self) -> bool {
        self.flat
    }

    /// The deepest nesting of objects (0: no object field).
    pub fn depth(&self) -> u32 {
        self.depth
    }

    /// The flattened fields, in payload order (empty unless [`is_flat`](Self::is_flat)).
    pub fn fields(&self) -> &[LayoutField] {
        &self.fields
    }

    /// Reads `payload` field by field, handing each to `each` with its layout entry; stops at
    /// the first value that does not fit (returned). Bytes after the last field are ignored,
    /// as by the core's walker.
    #[inline]
    pub fn read<'p, F: FnMut(&LayoutField, Value<'p>)>(
        &self,
        payload: &'p [u8],
        mut each: F,
    ) -> Result<(), FieldError> {
        let mut pos = 0;
        for f in &self.fields {
            let (value, next) = match Value::read_scalar(f.code, payload, pos) {
                Some(r) => r?,
                // Flat layouts hold scalars only.
                None => {
                    return Err(FieldError::UnknownType {
                        offset: pos,
                        code: f.code.code(),
                    })
                }
            };
            each(f, value);
            pos = next;
        }
        Ok(())
    }
}
