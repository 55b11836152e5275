//! Nettrace test support: the shared sample traces, a chunked driver that records every item
//! in an owned, chunking-independent form, and writers that build V4/V5 and V6 streams to the
//! spec (perfview's NetTraceFormat.md / NetTraceFormat_v5.md).

use std::path::PathBuf;

use dsipc::nettrace::{Item, NettraceError, NettraceParser};
use dsipc::recv::{Poll, RecvBuffer, RecvError, RecvStorage};

/// The repository root (this crate's manifest directory).
pub fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

#[path = "../testkit/src/samples.rs"]
mod kit;

/// The six sample traces, unzipped into `target/nettrace-samples/` (once), as (name, bytes);
/// none (after a visible skip line) in a clone without `shared/`.
pub fn samples() -> Vec<(String, Vec<u8>)> {
    let dir = match kit::shared() {
        Some(s) => s.join("data/nettrace"),
        None => {
            kit::skipped("the six PerfView sample traces");
            return Vec::new();
        }
    };
    let mut names: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension() == Some(std::ffi::OsStr::new("zip")))
        .map(|z| z.file_stem().unwrap().to_string_lossy().into_owned()) // x.nettrace
        .collect();
    names.sort();
    assert_eq!(
        names.len(),
        6,
        "expected six sample zips in {}",
        dir.display()
    );
    names
        .into_iter()
        .filter_map(|name| {
            let bytes = sample(&name)?;
            Some((name, bytes))
        })
        .collect()
}

/// One sample by file name (e.g. `only_managed_samples.nettrace`); `None` (after a visible
/// skip line) in a clone without `shared/`.
pub fn sample(name: &str) -> Option<Vec<u8>> {
    let path = kit::sample(name)?;
    Some(std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {}", path.display(), e)))
}

/// Growable receive storage (the core implements it for `Vec<u8>` only with its `alloc`
/// feature, which `cargo test -p dsipc` does not turn on).
pub struct Growing(pub Vec<u8>);

impl RecvStorage for Growing {
    fn bytes(&self) -> &[u8] {
        &self.0
    }
    fn bytes_mut(&mut self) -> &mut [u8] {
        &mut self.0
    }
    fn grow_to(&mut self, len: usize) {
        if len > self.0.len() {
            self.0.resize(len, 0);
        }
    }
}

/// How a driver cuts the input.
#[derive(Clone, Copy, Debug)]
pub enum Chunking {
    /// Everything at once.
    Whole,
    /// Fixed-size chunks.
    Fixed(usize),
    /// Pseudo-random chunk sizes in 1..=max from a seed.
    Random(u64, usize),
}

/// Small deterministic PRNG (xorshift64*).
pub struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        let mut x = self.0 | 1;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    pub fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

/// What a whole drive produced.
pub struct Drive {
    /// Every item, Debug-formatted (owned, so it can be compared across chunkings).
    pub items: Vec<String>,
    /// The first error, if any (from handle_input or handle_eof).
    pub error: Option<NettraceError>,
    /// True if the stream ended with the end-of-stream marker.
    pub done: bool,
    /// Largest `needed` reported.
    pub max_needed: usize,
}

/// Feeds `data` to a fresh parser in chunks, keeping a receive buffer as a live reader would
/// (compacting consumed bytes), and records every item. At the end, calls `handle_eof`.
pub fn drive(data: &[u8], chunking: Chunking, max_block: usize) -> Drive {
    drive_with(data, chunking, max_block, |_, _| {})
}

/// [`drive`], calling `on_item` with each item and the stream offset after it.
pub fn drive_with(
    data: &[u8],
    chunking: Chunking,
    max_block: usize,
    mut on_item: impl FnMut(&Item<'_>, u64),
) -> Drive {
    let mut p = NettraceParser::with_max_block_size(max_block);
    let mut rx = RecvBuffer::with_limit(Growing(Vec::new()), usize::MAX);
    let mut fed = 0usize;
    let mut rng = match chunking {
        Chunking::Random(seed, _) => Rng(seed),
        _ => Rng(1),
    };
    let mut out = Drive {
        items: Vec::new(),
        error: None,
        done: false,
        max_needed: 0,
    };
    loop {
        match rx.poll_nettrace(&mut p) {
            Ok(Poll::Event(item)) => {
                on_item(&item, p.offset());
                out.items.push(format!("{:?}", item));
            }
            Ok(Poll::End) if fed == data.len() => {
                out.done = p.is_done();
                return out;
            }
            // After the end marker, more bytes are the parser's TrailingData.
            Ok(Poll::End) | Ok(Poll::NeedInput) => {
                out.max_needed = out.max_needed.max(rx.needed());
                if fed == data.len() {
                    rx.eof();
                    continue;
                }
                let n = match chunking {
                    Chunking::Whole => data.len(),
                    Chunking::Fixed(n) => n,
                    Chunking::Random(_, max) => 1 + rng.below(max),
                };
                let n = n.min(data.len() - fed);
                fed += rx.push(&data[fed..fed + n]).unwrap();
            }
            Err(RecvError::Machine(e)) => {
                // The error repeats.
                assert_eq!(p.handle_input(rx.pending()).unwrap_err(), e);
                out.error = Some(e);
                return out;
            }
            Err(e) => panic!("{}", e),
        }
    }
}

// ---------------------------------------------------------------------------------------
// Encoders.

/// Appends an unsigned LEB128 integer.
pub fn varuint(out: &mut Vec<u8>, mut v: u64) {
    loop {
        let b = (v & 0x7F) as u8;
        v >>= 7;
        if v == 0 {
            out.push(b);
            return;
        }
        out.push(b | 0x80);
    }
}

/// Appends a zigzag varint.
pub fn varint(out: &mut Vec<u8>, v: i64) {
    varuint(out, ((v << 1) ^ (v >> 63)) as u64);
}

/// Appends a V6 string (varuint length + UTF-8).
pub fn str8(out: &mut Vec<u8>, s: &str) {
    varuint(out, s.len() as u64);
    out.extend_from_slice(s.as_bytes());
}

/// Appends a NUL-terminated UTF-16LE string.
pub fn utf16z(out: &mut Vec<u8>, s: &str) {
    for u in s.encode_utf16() {
        out.extend_from_slice(&u.to_le_bytes());
    }
    out.extend_from_slice(&[0, 0]);
}

/// An event header to encode (all fields explicit; compression is the encoder's job).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Header {
    pub metadata_id: u32,
    pub sequence_number: u32,
    pub capture_thread: u64,
    pub thread: u64,
    pub processor: u32,
    pub stack_id: u32,
    pub timestamp: i64,
    pub activity_id: [u8; 16],
    pub related_activity_id: [u8; 16],
    pub label_list_id: u32,
    pub is_sorted: bool,
}

/// Header compression state of one block (zeroed at each block start).
#[derive(Default)]
pub struct Compressor {
    prev: Header,
    prev_payload_len: u32,
}

impl Compressor {
    /// Appends a compressed event blob (header + payload), like the runtime's writer.
    pub fn blob(&mut self, out: &mut Vec<u8>, h: &Header, payload: &[u8], v6: bool) {
        let p = self.prev;
        let mut flags = 0u8;
        let mut body = Vec::new();
        if h.metadata_id != p.metadata_id {
            flags |= 0x01;
            varuint(&mut body, u64::from(h.metadata_id));
        }
        let implied_seq = if h.metadata_id != 0 {
            p.sequence_number.wrapping_add(1)
        } else {
            p.sequence_number
        };
        if h.sequence_number != implied_seq
            || h.capture_thread != p.capture_thread
            || h.processor != p.processor
        {
            flags |= 0x02;
            varuint(
                &mut body,
                u64::from(
                    h.sequence_number
                        .wrapping_sub(p.sequence_number)
                        .wrapping_sub(1),
                ),
            );
            varuint(&mut body, h.capture_thread);
            varuint(&mut body, u64::from(h.processor));
        }
        if h.thread != p.thread {
            flags |= 0x04;
            varuint(&mut body, h.thread);
        }
        if h.stack_id != p.stack_id {
            flags |= 0x08;
            varuint(&mut body, u64::from(h.stack_id));
        }
        varuint(&mut body, h.timestamp.wrapping_sub(p.timestamp) as u64);
        if v6 {
            if h.label_list_id != p.label_list_id {
                flags |= 0x10;
                varuint(&mut body, u64::from(h.label_list_id));
            }
        } else {
            if h.activity_id != p.activity_id {
                flags |= 0x10;
                body.extend_from_slice(&h.activity_id);
            }
            if h.related_activity_id != p.related_activity_id {
                flags |= 0x20;
                body.extend_from_slice(&h.related_activity_id);
            }
        }
        if h.is_sorted {
            flags |= 0x40;
        }
        if payload.len() as u32 != self.prev_payload_len {
            flags |= 0x80;
            varuint(&mut body, payload.len() as u64);
        }
        out.push(flags);
        out.extend_from_slice(&body);
        out.extend_from_slice(payload);
        self.prev = *h;
        self.prev_payload_len = payload.len() as u32;
    }
}

/// Event/metadata block content: the 20-byte header then `blobs`.
pub fn event_block_content(flags: u16, min_ts: i64, max_ts: i64, blobs: &[u8]) -> Vec<u8> {
    let mut c = Vec::new();
    c.extend_from_slice(&20u16.to_le_bytes());
    c.extend_from_slice(&flags.to_le_bytes());
    c.extend_from_slice(&min_ts.to_le_bytes());
    c.extend_from_slice(&max_ts.to_le_bytes());
    c.extend_from_slice(blobs);
    c
}

/// Builds a V4/V5 stream (FastSerialization framing).
pub struct V4Writer {
    pub buf: Vec<u8>,
}

impl V4Writer {
    /// Stream header + Trace object.
    pub fn new(pointer_size: u32, pid: u32) -> V4Writer {
        let mut w = V4Writer { buf: Vec::new() };
        w.buf.extend_from_slice(b"Nettrace");
        w.buf.extend_from_slice(&20u32.to_le_bytes());
        w.buf.extend_from_slice(b"!FastSerialization.1");
        w.object_header("Trace", 4, 4);
        for v in [2024u16, 5, 3, 22, 10, 11, 12, 500] {
            w.buf.extend_from_slice(&v.to_le_bytes());
        }
        w.buf.extend_from_slice(&1_000_000i64.to_le_bytes()); // sync QPC
        w.buf.extend_from_slice(&10_000_000i64.to_le_bytes()); // frequency
        w.buf.extend_from_slice(&pointer_size.to_le_bytes());
        w.buf.extend_from_slice(&pid.to_le_bytes());
        w.buf.extend_from_slice(&4u32.to_le_bytes());
        w.buf.extend_from_slice(&1_000_000u32.to_le_bytes());
        w.buf.push(0x06);
        w
    }

    fn object_header(&mut self, name: &str, version: i32, min_version: i32) {
        self.buf.extend_from_slice(&[0x05, 0x05, 0x01]);
        self.buf.extend_from_slice(&version.to_le_bytes());
        self.buf.extend_from_slice(&min_version.to_le_bytes());
        self.buf
            .extend_from_slice(&(name.len() as i32).to_le_bytes());
        self.buf.extend_from_slice(name.as_bytes());
        self.buf.push(0x06);
    }

    /// A block object: header, size, padding to 4 (from stream offset 0), content, end tag.
    pub fn block(&mut self, name: &str, content: &[u8]) {
        self.object_header(name, 2, 2);
        self.buf
            .extend_from_slice(&(content.len() as i32).to_le_bytes());
        while self.buf.len() & 3 != 0 {
            self.buf.push(0);
        }
        self.buf.extend_from_slice(content);
        self.buf.push(0x06);
    }

    /// The end-of-stream marker.
    pub fn end(mut self) -> Vec<u8> {
        self.buf.push(0x01);
        self.buf
    }
}

/// A V4/V5 metadata payload (the blob payload of a metadata record).
pub fn v4_metadata(
    id: u32,
    provider: &str,
    event_id: u32,
    name: &str,
    version: u32,
    v1_fields: Option<&[u8]>,
    tags: &[(u8, Vec<u8>)],
) -> Vec<u8> {
    let mut m = Vec::new();
    m.extend_from_slice(&id.to_le_bytes());
    utf16z(&mut m, provider);
    m.extend_from_slice(&event_id.to_le_bytes());
    utf16z(&mut m, name);
    m.extend_from_slice(&0x8000u64.to_le_bytes());
    m.extend_from_slice(&version.to_le_bytes());
    m.extend_from_slice(&4u32.to_le_bytes());
    if let Some(f) = v1_fields {
        m.extend_from_slice(f);
    }
    for (kind, body) in tags {
        m.extend_from_slice(&(body.len() as u32).to_le_bytes());
        m.push(*kind);
        m.extend_from_slice(body);
    }
    m
}

/// Builds a V6 stream.
pub struct V6Writer {
    pub buf: Vec<u8>,
}

impl V6Writer {
    /// Stream header (major 6) + Trace block with `kv` pairs.
    pub fn new(minor: u32, pointer_size: u32, kv: &[(&str, &str)]) -> V6Writer {
        let mut w = V6Writer { buf: Vec::new() };
        w.buf.extend_from_slice(b"Nettrace");
        w.buf.extend_from_slice(&0u32.to_le_bytes());
        w.buf.extend_from_slice(&6u32.to_le_bytes());
        w.buf.extend_from_slice(&minor.to_le_bytes());
        let mut t = Vec::new();
        for v in [2025u16, 1, 3, 15, 8, 30, 0, 250] {
            t.extend_from_slice(&v.to_le_bytes());
        }
        t.extend_from_slice(&5_000i64.to_le_bytes());
        t.extend_from_slice(&1_000_000_000i64.to_le_bytes());
        t.extend_from_slice(&pointer_size.to_le_bytes());
        t.extend_from_slice(&(kv.len() as u32).to_le_bytes());
        for (k, v) in kv {
            str8(&mut t, k);
            str8(&mut t, v);
        }
        w.block(1, &t);
        w
    }

    /// A block: `u32` header (size | kind << 24), then the content.
    pub fn block(&mut self, kind: u8, content: &[u8]) {
        assert!(content.len() < 1 << 24);
        let x = content.len() as u32 | u32::from(kind) << 24;
        self.buf.extend_from_slice(&x.to_le_bytes());
        self.buf.extend_from_slice(content);
    }

    /// The EndOfStream block.
    pub fn end(mut self) -> Vec<u8> {
        self.block(0, &[]);
        self.buf
    }
}

/// A V5 `V2Params` field description: `u32` size, UTF-16 name, then its type (`ty`: the
/// `u32` type code and what follows it).
pub fn v2_field(name: &str, ty: &[u8]) -> Vec<u8> {
    let mut body = Vec::new();
    utf16z(&mut body, name);
    body.extend_from_slice(ty);
    let mut f = ((body.len() + 4) as u32).to_le_bytes().to_vec();
    f.extend_from_slice(&body);
    f
}

/// The V5 metadata payload of a DiagnosticSource bridge event (`Microsoft-Diagnostics-
/// DiagnosticSource`'s `Activity1Start` = 4 / `Activity1Stop` = 5, `Event` = 2...) as a .NET
/// runtime writes it: no V1 fields, the opcode tag, and V2Params `SourceName`, `EventName`
/// (strings) and `Arguments` (an array of `{Key, Value}` strings).
pub fn diagnostic_source_metadata(id: u32, event_id: u32, name: &str, opcode: u8) -> Vec<u8> {
    let string = 18u32.to_le_bytes();
    let mut pair = Vec::new();
    pair.extend_from_slice(&19u32.to_le_bytes()); // Array of
    pair.extend_from_slice(&1u32.to_le_bytes()); // Object with two fields
    pair.extend_from_slice(&2u32.to_le_bytes());
    pair.extend_from_slice(&v2_field("Key", &string));
    pair.extend_from_slice(&v2_field("Value", &string));
    let mut params = 3u32.to_le_bytes().to_vec();
    params.extend_from_slice(&v2_field("SourceName", &string));
    params.extend_from_slice(&v2_field("EventName", &string));
    params.extend_from_slice(&v2_field("Arguments", &pair));
    v4_metadata(
        id,
        "Microsoft-Diagnostics-DiagnosticSource",
        event_id,
        name,
        0,
        Some(&0u32.to_le_bytes()),
        &[(1, vec![opcode]), (2, params)],
    )
}

/// A DiagnosticSource bridge event's payload: `SourceName`, `EventName`, and the `Arguments`
/// pairs.
pub fn diagnostic_source_payload(source: &str, event: &str, args: &[(&str, &str)]) -> Vec<u8> {
    let mut p = Vec::new();
    utf16z(&mut p, source);
    utf16z(&mut p, event);
    p.extend_from_slice(&(args.len() as u16).to_le_bytes());
    for (k, v) in args {
        utf16z(&mut p, k);
        utf16z(&mut p, v);
    }
    p
}

/// A V5 stream with the DiagnosticSource bridge's `Activity1Start` (metadata id 1),
/// `Activity1Stop` (2) and `Event` (3) records, then `events` as (metadata id, payload) in
/// one block, then the end of the stream.
pub fn diagnostic_source_stream(events: &[(u32, Vec<u8>)]) -> Vec<u8> {
    let mut w = V4Writer::new(8, 42);
    let mut blobs = Vec::new();
    let mut c = Compressor::default();
    for (id, event_id, name, opcode) in [
        (1, 4, "Activity1Start", 1),
        (2, 5, "Activity1Stop", 2),
        (3, 2, "Event", 0),
    ] {
        let m = diagnostic_source_metadata(id, event_id, name, opcode);
        c.blob(&mut blobs, &Header::default(), &m, false);
    }
    w.block("MetadataBlock", &event_block_content(1, 0, 0, &blobs));
    let mut blobs = Vec::new();
    let mut c = Compressor::default();
    for (n, (id, payload)) in events.iter().enumerate() {
        let h = Header {
            metadata_id: *id,
            sequence_number: n as u32 + 1,
            capture_thread: 1,
            thread: 1,
            timestamp: 2_000_000 + n as i64,
            ..Header::default()
        };
        c.blob(&mut blobs, &h, payload, false);
    }
    w.block("EventBlock", &event_block_content(1, 0, 0, &blobs));
    w.end()
}
