//! The metadata registry: metadata id -> what the events under that id are.

use dsipc::nettrace::{self as core, Format, MetadataRecord, NettraceError};

use super::hash::FxHashMap;

/// One field description of a metadata record (owned).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldDesc {
    /// Field name.
    pub name: String,
    /// The nettrace type code (1 Object, 9 Int32, 18 String, 19 Array, ...).
    pub type_code: u32,
    /// For arrays (19): the element type code.
    pub element_type: Option<u32>,
    /// For objects (1) and arrays of objects: the nested fields.
    pub fields: Vec<FieldDesc>,
}

/// What one metadata record defines (owned copy).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EventMetadata {
    /// Provider name, e.g. `Microsoft-Windows-DotNETRuntime`.
    pub provider: String,
    /// Event id within the provider.
    pub event_id: u32,
    /// Event name; empty for the runtime's events (they carry no self-description).
    pub name: String,
    /// Keywords.
    pub keywords: u64,
    /// Event version.
    pub version: u32,
    /// Level.
    pub level: u32,
    /// Opcode (V5 tag), if present.
    pub opcode: Option<u8>,
    /// Field descriptions (empty for events without self-description).
    pub fields: Vec<FieldDesc>,
    /// The metadata record's raw bytes, kept so the core's zero-copy field walker can decode
    /// payloads later (parse them again with `dsipc::nettrace`).
    pub raw: Vec<u8>,
    /// The stream format the record came in (decides how `raw` parses).
    pub format: Format,
}

impl FieldDesc {
    fn from_core(d: &core::FieldDesc<'_>, depth: u32) -> FieldDesc {
        let fields = if depth < 32 {
            d.ty.fields
                .iter()
                .map(|f| FieldDesc::from_core(&f, depth + 1))
                .collect()
        } else {
            Vec::new()
        };
        let element = d.ty.element();
        let mut fields = fields;
        if let Some(e) = &element {
            if fields.is_empty() && depth < 32 {
                fields = e
                    .fields
                    .iter()
                    .map(|f| FieldDesc::from_core(&f, depth + 1))
                    .collect();
            }
        }
        FieldDesc {
            name: d.name.to_string(),
            type_code: d.ty.code.code(),
            element_type: element.map(|e| e.code.code()),
            fields,
        }
    }
}

impl EventMetadata {
    /// An owned copy of a metadata record the core parsed.
    pub fn from_record(m: &MetadataRecord<'_>) -> EventMetadata {
        EventMetadata {
            provider: m.provider_name.to_string(),
            event_id: m.event_id,
            name: m.event_name.to_string(),
            keywords: m.keywords,
            version: m.version,
            level: m.level,
            opcode: m.opcode,
            fields: m
                .fields
                .iter()
                .map(|f| FieldDesc::from_core(&f, 0))
                .collect(),
            raw: m.raw.to_vec(),
            format: m.format,
        }
    }

    /// The core's view of this record again (zero-copy over [`raw`](Self::raw)), for its
    /// payload field walker.
    pub fn record(&self) -> Result<MetadataRecord<'_>, NettraceError> {
        MetadataRecord::parse(&self.raw, self.format, 0)
    }
}

/// Metadata id -> [`EventMetadata`]. Memory: one entry per distinct metadata record.
#[derive(Debug, Default, Clone)]
pub struct MetadataRegistry {
    map: FxHashMap<u32, EventMetadata>,
}

impl MetadataRegistry {
    /// An empty registry.
    pub fn new() -> Self {
        Self::default()
    }

    /// Registers (or replaces: V6 may redefine ids after a cache flush) a metadata record.
    pub fn insert(&mut self, id: u32, metadata: EventMetadata) {
        self.map.insert(id, metadata);
    }

    /// The metadata record `id`, if defined.
    pub fn get(&self, id: u32) -> Option<&EventMetadata> {
        self.map.get(&id)
    }

    /// Forgets every record (V6 metadata cache flush).
    pub fn clear(&mut self) {
        self.map.clear();
    }

    /// Records held.
    pub fn len(&self) -> usize {
        self.map.len()
    }

    /// True when no record is held.
    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }
}
