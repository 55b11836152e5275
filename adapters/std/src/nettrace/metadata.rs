//! The metadata registry: metadata id -> what the events under that id are.

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
#[derive(Debug, Clone, Default, PartialEq, Eq)]
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
