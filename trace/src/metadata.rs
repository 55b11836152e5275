//! The metadata registry: metadata id -> what the events under that id are.

use dsipc::nettrace::{Format, MetadataRecord, NettraceError, TraceStr};

use super::hash::FxHashMap;

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
    /// Top-level fields the record describes (0 for events without self-description:
    /// the runtime's own). [`record`](Self::record) walks them over a payload.
    pub field_count: usize,
    /// The metadata record's raw bytes, kept so the core's zero-copy field walker can decode
    /// payloads later (parse them again with `dsipc::nettrace`).
    pub raw: Vec<u8>,
    /// The stream format the record came in (decides how `raw` parses).
    pub format: Format,
}

impl EventMetadata {
    /// An owned copy of a metadata record the core parsed.
    pub fn from_record(m: &MetadataRecord<'_>) -> EventMetadata {
        Self::with_provider(m, lossy(m.provider_name))
    }

    /// [`from_record`](Self::from_record) with the provider's name decoded already.
    pub(crate) fn with_provider(m: &MetadataRecord<'_>, provider: String) -> EventMetadata {
        EventMetadata {
            provider,
            event_id: m.event_id,
            name: lossy(m.event_name),
            keywords: m.keywords,
            version: m.version,
            level: m.level,
            opcode: m.opcode,
            field_count: m.fields.len(),
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

/// Appends `s` to `text`: UTF-8 as it is, ASCII UTF-16 (provider, event, counter and field
/// names, units, tags, numbers: what the runtimes write) unit by unit, anything else lossily
/// through the core's decoder.
#[inline]
pub(crate) fn push_lossy(s: TraceStr<'_>, text: &mut String) {
    if let Some(u) = s.as_utf8() {
        text.push_str(u);
        return;
    }
    let bytes = s.as_bytes();
    let ascii = bytes.len() % 2 == 0 && bytes.chunks_exact(2).all(|u| u[1] == 0 && u[0] < 0x80);
    if ascii {
        text.reserve(bytes.len() / 2);
        for u in bytes.chunks_exact(2) {
            text.push(char::from(u[0]));
        }
    } else {
        text.extend(s.chars_lossy());
    }
}

/// `s` as a `String` (see [`push_lossy`]).
pub(crate) fn lossy(s: TraceStr<'_>) -> String {
    let mut out = String::new();
    push_lossy(s, &mut out);
    out
}

/// Metadata ids below this are looked up in a flat index (runtimes number records from 1).
const DIRECT_IDS: u32 = 4096;

/// The trace layer's one metadata table: metadata id -> what the caller keeps for the
/// records under that id (`V`: the analyzer keeps an [`EventMetadata`] and counts, the
/// counters decoder what it needs of counter events). A flat index for small ids (one
/// lookup per event is the hot path), a hash map for the rest; ids may be redefined (V6
/// reuses them after a metadata flush). Memory: one entry per distinct record held.
#[derive(Debug, Clone)]
pub struct MetadataTable<V> {
    entries: Vec<V>,
    /// Small id -> index into `entries` + 1 (0: undefined).
    direct: Vec<u32>,
    far: FxHashMap<u32, u32>,
}

impl<V> Default for MetadataTable<V> {
    fn default() -> Self {
        MetadataTable {
            entries: Vec::new(),
            direct: Vec::new(),
            far: FxHashMap::default(),
        }
    }
}

impl<V> MetadataTable<V> {
    /// An empty table.
    pub fn new() -> Self {
        Self::default()
    }

    /// The slot of `id`, if defined: an index for [`at`](Self::at) and
    /// [`at_mut`](Self::at_mut).
    #[inline]
    pub fn slot(&self, id: u32) -> Option<usize> {
        let i = if id < DIRECT_IDS {
            *self.direct.get(id as usize)?
        } else {
            *self.far.get(&id)?
        };
        i.checked_sub(1).map(|i| i as usize)
    }

    /// What is kept for `id`, if defined.
    #[inline]
    pub fn get(&self, id: u32) -> Option<&V> {
        self.slot(id).map(|i| &self.entries[i])
    }

    /// The entry in slot `i` (from [`slot`](Self::slot)).
    #[inline]
    pub fn at(&self, i: usize) -> &V {
        &self.entries[i]
    }

    /// The entry in slot `i`, mutably.
    #[inline]
    pub fn at_mut(&mut self, i: usize) -> &mut V {
        &mut self.entries[i]
    }

    /// True if `id` is defined.
    pub fn contains(&self, id: u32) -> bool {
        self.slot(id).is_some()
    }

    /// True if `id` may be defined in a table bounded to `max` records: it is defined
    /// already (a redefinition), or there is room for one more.
    pub fn has_room_for(&self, id: u32, max: usize) -> bool {
        self.contains(id) || self.len() < max
    }

    /// Defines (or redefines) `id`.
    pub fn insert(&mut self, id: u32, value: V) {
        if let Some(i) = self.slot(id) {
            self.entries[i] = value;
            return;
        }
        self.entries.push(value);
        let i = self.entries.len() as u32;
        if id < DIRECT_IDS {
            if self.direct.len() <= id as usize {
                self.direct.resize(id as usize + 1, 0);
            }
            self.direct[id as usize] = i;
        } else {
            self.far.insert(id, i);
        }
    }

    /// Forgets every record (a V6 metadata flush).
    pub fn clear(&mut self) {
        self.entries.clear();
        self.direct.clear();
        self.far.clear();
    }

    /// Records held.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// True when no record is held.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Every entry held, in definition order.
    pub fn values(&self) -> impl Iterator<Item = &V> {
        self.entries.iter()
    }
}
