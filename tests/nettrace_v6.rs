//! V6 streams (`dotnet-trace collect-linux`; no public sample exists) built by the test writer
//! to perfview's NetTraceFormat.md: every block kind, V6 metadata with every payload type,
//! compressed and uncompressed event rows with label lists and thread indexes.

mod common;

use common::nettrace::{
    drive, str8, utf16z, varint, varuint, Chunking, Compressor, Header, V6Writer,
};
use dsipc::nettrace::{
    BlockKind, FieldEncoding, Format, Item, Label, NettraceError, NettraceParser, Status, TypeCode,
    Value, DEFAULT_MAX_BLOCK_SIZE,
};
use dsipc::wire::Guid;

const GUID_A: [u8; 16] = [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16];
const PROVIDER_GUID: [u8; 16] = [0xAA; 16];

/// One V6 field description: `u16 size`, name, type bytes.
fn field(name: &str, ty: &[u8]) -> Vec<u8> {
    let mut body = Vec::new();
    str8(&mut body, name);
    body.extend_from_slice(ty);
    let mut f = (body.len() as u16).to_le_bytes().to_vec();
    f.extend_from_slice(&body);
    f
}

/// A field list: `u16 count` + fields.
fn fields(list: &[Vec<u8>]) -> Vec<u8> {
    let mut out = (list.len() as u16).to_le_bytes().to_vec();
    for f in list {
        out.extend_from_slice(f);
    }
    out
}

fn object_type(list: &[Vec<u8>]) -> Vec<u8> {
    let mut t = vec![1u8];
    t.extend_from_slice(&fields(list));
    t
}

/// A metadata row: `u16 size`, id, provider, event id, name, fields, optional metadata.
fn metadata_row(
    id: u32,
    provider: &str,
    event_id: u32,
    name: &str,
    field_list: &[u8],
    optional: Option<&[u8]>,
) -> Vec<u8> {
    let mut body = Vec::new();
    varuint(&mut body, u64::from(id));
    str8(&mut body, provider);
    varuint(&mut body, u64::from(event_id));
    str8(&mut body, name);
    body.extend_from_slice(field_list);
    if let Some(o) = optional {
        body.extend_from_slice(&(o.len() as u16).to_le_bytes());
        body.extend_from_slice(o);
    }
    let mut row = (body.len() as u16).to_le_bytes().to_vec();
    row.extend_from_slice(&body);
    row
}

struct Built {
    bytes: Vec<u8>,
    payload1: Vec<u8>,
}

fn build() -> Built {
    let mut w = V6Writer::new(
        3,
        8,
        &[
            ("ProcessId", "4242"),
            ("HardwareThreadCount", "16"),
            ("ExpectedCPUSamplingRate", "1000000"),
            ("MachineName", "box"),
        ],
    );
    // Thread block: two rows.
    let mut t = Vec::new();
    for (index, info) in [
        (1u64, {
            let mut i = vec![1u8];
            str8(&mut i, "main");
            i.push(2);
            varuint(&mut i, 4242);
            i.push(3);
            varuint(&mut i, 100);
            i.push(4);
            str8(&mut i, "role");
            str8(&mut i, "ui");
            i
        }),
        (2u64, {
            let mut i = vec![3u8];
            varuint(&mut i, 101);
            i
        }),
    ] {
        let mut row = Vec::new();
        varuint(&mut row, index);
        row.extend_from_slice(&info);
        t.extend_from_slice(&(row.len() as u16).to_le_bytes());
        t.extend_from_slice(&row);
    }
    w.block(6, &t);

    // Metadata block: header of 3 bytes, two rows.
    let fl = fields(&[
        field("a", &[9]),
        field("s", &[18]),
        field("v", &[20]),
        field("u", &[21]),
        field("fa", &[22, 8, 3, 0]),
        field("c", &[23]),
        field(
            "arr",
            &[
                &[19u8][..],
                &object_type(&[field("x", &[5]), field("name", &[18])]),
            ]
            .concat(),
        ),
        field("rl", &[24, 10]),
        field("dl", &[25, 6]),
        field(
            "obj",
            &object_type(&[field("d", &[14]), field("g", &[17]), field("t", &[16])]),
        ),
        field("b", &[3]),
    ]);
    let mut opt = vec![1u8, 11]; // opcode 11
    opt.push(3);
    opt.extend_from_slice(&0x1234u64.to_le_bytes());
    opt.extend_from_slice(&[8, 5, 9, 2]); // level 5, version 2
    opt.push(7);
    opt.extend_from_slice(&PROVIDER_GUID);
    opt.push(4);
    str8(&mut opt, "a={a}");
    opt.push(5);
    str8(&mut opt, "An event");
    opt.push(6);
    str8(&mut opt, "k");
    str8(&mut opt, "v");
    let mut m = Vec::new();
    m.extend_from_slice(&3u16.to_le_bytes());
    m.extend_from_slice(&[0xEE; 3]);
    m.extend_from_slice(&metadata_row(1, "MyProvider", 7, "Evt", &fl, Some(&opt)));
    m.extend_from_slice(&metadata_row(
        2,
        "Microsoft-DotNETCore-SampleProfiler",
        0,
        "",
        &fields(&[]),
        None,
    ));
    w.block(3, &m);

    // Label lists 1 and 2.
    let mut l = Vec::new();
    l.extend_from_slice(&1u32.to_le_bytes());
    l.extend_from_slice(&2u32.to_le_bytes());
    l.push(1);
    l.extend_from_slice(&GUID_A);
    l.push(5 | 0x80);
    str8(&mut l, "k");
    str8(&mut l, "v");
    l.push(4);
    l.extend_from_slice(&77u64.to_le_bytes());
    l.push(6);
    str8(&mut l, "n");
    varint(&mut l, -5);
    l.push(9 | 0x80);
    l.push(3);
    w.block(8, &l);

    // Stacks 1 (two IPs) and 2 (empty).
    let mut s = Vec::new();
    s.extend_from_slice(&1u32.to_le_bytes());
    s.extend_from_slice(&2u32.to_le_bytes());
    s.extend_from_slice(&16u32.to_le_bytes());
    s.extend_from_slice(&0x7f00_0000_1000u64.to_le_bytes());
    s.extend_from_slice(&0x7f00_0000_2000u64.to_le_bytes());
    s.extend_from_slice(&0u32.to_le_bytes());
    w.block(5, &s);

    // Payload of metadata 1.
    let mut p = Vec::new();
    p.extend_from_slice(&(-7i32).to_le_bytes());
    utf16z(&mut p, "héllo𝄞");
    varint(&mut p, -300);
    varuint(&mut p, 300);
    for v in [1u16, 2, 3] {
        p.extend_from_slice(&v.to_le_bytes());
    }
    p.push(b'x');
    p.extend_from_slice(&2u16.to_le_bytes());
    p.push(1);
    utf16z(&mut p, "a");
    p.push((-2i8) as u8);
    utf16z(&mut p, "bc");
    let rl_at = p.len();
    p.extend_from_slice(&[0; 4]); // patched below
    let dl_at = p.len();
    p.extend_from_slice(&[0; 4]);
    p.extend_from_slice(&1.5f64.to_le_bytes());
    p.extend_from_slice(&GUID_A);
    p.extend_from_slice(&132_000_000_000_000_000u64.to_le_bytes());
    p.extend_from_slice(&1u32.to_le_bytes());
    // Out-of-line data for RelLoc (two u32) and DataLoc (three bytes).
    let rl_data = p.len();
    p.extend_from_slice(&10u32.to_le_bytes());
    p.extend_from_slice(&20u32.to_le_bytes());
    let dl_data = p.len();
    p.extend_from_slice(&[7, 8, 9]);
    let rel = (rl_data - (rl_at + 4)) as u32 | 8 << 16;
    p[rl_at..rl_at + 4].copy_from_slice(&rel.to_le_bytes());
    let abs = dl_data as u32 | 3 << 16;
    p[dl_at..dl_at + 4].copy_from_slice(&abs.to_le_bytes());

    // Compressed event block.
    let mut blobs = Vec::new();
    let mut c = Compressor::default();
    let e1 = Header {
        metadata_id: 1,
        sequence_number: 1,
        capture_thread: 1,
        thread: 1,
        processor: 3,
        stack_id: 1,
        timestamp: 10_000,
        label_list_id: 1,
        ..Header::default()
    };
    let e2 = Header {
        metadata_id: 2,
        sequence_number: 2,
        stack_id: 2,
        timestamp: 10_050,
        label_list_id: 2,
        is_sorted: true,
        ..e1
    };
    let e3 = Header {
        metadata_id: 1,
        sequence_number: 1,
        capture_thread: 2,
        thread: 2,
        processor: 0,
        stack_id: 0,
        timestamp: 10_060,
        label_list_id: 0,
        is_sorted: false,
        ..e1
    };
    c.blob(&mut blobs, &e1, &p, true);
    c.blob(&mut blobs, &e2, &2u32.to_le_bytes(), true);
    c.blob(&mut blobs, &e3, &p, true);
    w.block(
        2,
        &common::nettrace::event_block_content(1, 10_000, 10_060, &blobs),
    );

    // Uncompressed event block: one row.
    let mut u = Vec::new();
    let payload = 1u32.to_le_bytes();
    // EventSize counts what follows it: 9 header fields (48 bytes) and the payload.
    let size = 4 + 4 + 8 + 8 + 4 + 4 + 8 + 4 + 4 + payload.len();
    u.extend_from_slice(&(size as u32).to_le_bytes());
    u.extend_from_slice(&(2u32 | 0x8000_0000).to_le_bytes()); // sorted
    u.extend_from_slice(&3u32.to_le_bytes()); // seq
    u.extend_from_slice(&1u64.to_le_bytes()); // thread
    u.extend_from_slice(&1u64.to_le_bytes()); // capture thread
    u.extend_from_slice(&5u32.to_le_bytes()); // processor
    u.extend_from_slice(&1u32.to_le_bytes()); // stack
    u.extend_from_slice(&10_070i64.to_le_bytes());
    u.extend_from_slice(&2u32.to_le_bytes()); // label list
    u.extend_from_slice(&(payload.len() as u32).to_le_bytes());
    u.extend_from_slice(&payload);
    w.block(
        2,
        &common::nettrace::event_block_content(0, 10_070, 10_070, &u),
    );

    // A block of a kind from a later minor version: skipped.
    w.block(42, &[1, 2, 3]);

    // Sequence point flushing threads and metadata, then remove thread 2.
    let mut sp = Vec::new();
    sp.extend_from_slice(&20_000i64.to_le_bytes());
    sp.extend_from_slice(&3u32.to_le_bytes());
    sp.extend_from_slice(&2u32.to_le_bytes());
    varuint(&mut sp, 1);
    varuint(&mut sp, 3);
    varuint(&mut sp, 2);
    varuint(&mut sp, 1);
    w.block(4, &sp);
    let mut rt = Vec::new();
    varuint(&mut rt, 2);
    varuint(&mut rt, 1);
    w.block(7, &rt);
    Built {
        bytes: w.end(),
        payload1: p,
    }
}

#[test]
fn a_v6_stream_parses_field_by_field() {
    let b = build();
    let data = &b.bytes;
    let mut p = NettraceParser::new();
    let mut at = 0;
    let mut items = Vec::new();
    loop {
        let h = p.handle_input(&data[at..]).unwrap();
        at += h.consumed;
        match h.status {
            Status::Event(i) => {
                if let Item::Event(_) = i {
                    // V6 events carry no activity ids (label lists do).
                    assert_eq!(p.activity_ids(), (Guid::NIL, Guid::NIL));
                }
                items.push(i)
            }
            Status::Done => break,
            Status::Partial { needed } => panic!("partial {} at {}", needed, at),
        }
    }
    p.handle_eof().unwrap();
    assert_eq!(at, data.len());
    let mut it = items.into_iter();

    let t = match it.next().unwrap() {
        Item::Trace(t) => t,
        other => panic!("{:?}", other),
    };
    assert_eq!(t.format, Format::V6 { minor: 3 });
    assert_eq!(p.format(), Some(Format::V6 { minor: 3 }));
    assert_eq!(
        (t.process_id, t.number_of_processors, t.sampling_interval_ns),
        (4242, 16, 1_000_000)
    );
    assert_eq!(
        (t.sync_time_qpc, t.qpc_frequency, t.pointer_size),
        (5_000, 1_000_000_000, 8)
    );
    assert_eq!(t.sync_time_utc.year, 2025);
    assert_eq!(t.sync_time_utc.millisecond, 250);
    assert_eq!(t.key_values.len(), 4);
    assert!(t.key_values.get("MachineName").unwrap().eq_str("box"));
    assert_eq!(t.nanos_since_start(6_000), 1_000);

    fn next_block<'a>(
        it: &mut impl Iterator<Item = Item<'a>>,
        kind: BlockKind,
    ) -> dsipc::nettrace::BlockInfo<'a> {
        match it.next().unwrap() {
            Item::Block(b) => {
                assert_eq!(b.kind, kind);
                b
            }
            other => panic!("expected a {:?} block, got {:?}", kind, other),
        }
    }

    next_block(&mut it, BlockKind::Thread);
    let rows: Vec<_> = match it.next().unwrap() {
        Item::Threads(t) => t.iter().collect(),
        other => panic!("{:?}", other),
    };
    assert_eq!(rows.len(), 2);
    assert_eq!(rows[0].index, 1);
    assert!(rows[0].name.unwrap().eq_str("main"));
    assert_eq!(
        (rows[0].process_id, rows[0].thread_id),
        (Some(4242), Some(100))
    );
    let kv: Vec<_> = rows[0].key_values().collect();
    assert_eq!(kv.len(), 1);
    assert!(kv[0].0.eq_str("role") && kv[0].1.eq_str("ui"));
    assert_eq!(
        (rows[1].index, rows[1].name, rows[1].thread_id),
        (2, None, Some(101))
    );

    let mb = next_block(&mut it, BlockKind::Metadata);
    assert_eq!(mb.code, 3);
    let m1 = match it.next().unwrap() {
        Item::Metadata(m) => m.record().unwrap(),
        other => panic!("{:?}", other),
    };
    assert_eq!(
        (m1.metadata_id, m1.event_id, m1.version, m1.level),
        (1, 7, 2, 5)
    );
    assert!(m1.provider_name.eq_str("MyProvider") && m1.event_name.eq_str("Evt"));
    assert_eq!(m1.provider_id, Some(Guid(PROVIDER_GUID)));
    assert_eq!((m1.opcode, m1.keywords), (Some(11), 0x1234));
    assert!(m1.message_template.unwrap().eq_str("a={a}"));
    assert!(m1.description.unwrap().eq_str("An event"));
    assert!(!m1.fields_malformed);
    assert_eq!(m1.fields.encoding(), FieldEncoding::V6);
    let names: Vec<String> = m1.fields.iter().map(|f| f.name.to_string()).collect();
    assert_eq!(
        names,
        ["a", "s", "v", "u", "fa", "c", "arr", "rl", "dl", "obj", "b"]
    );
    let fa = m1.fields.find("fa").unwrap().ty;
    assert_eq!((fa.code, fa.fixed_count), (TypeCode::FixedLengthArray, 3));
    assert_eq!(fa.element().unwrap().code, TypeCode::UInt16);
    assert_eq!(fa.fixed_size(), Some(6));
    assert_eq!(m1.fields.find("obj").unwrap().ty.fixed_size(), Some(32));
    assert_eq!(m1.fields.find("arr").unwrap().ty.fixed_size(), None);
    // The record re-parses from its raw bytes (a registry keeps a copy).
    let again = dsipc::nettrace::MetadataRecord::parse(m1.raw, m1.format, 0).unwrap();
    assert_eq!(again.fields.len(), 11);
    let m2 = match it.next().unwrap() {
        Item::Metadata(m) => m.record().unwrap(),
        other => panic!("{:?}", other),
    };
    assert_eq!((m2.metadata_id, m2.fields.len(), m2.opcode), (2, 0, None));

    next_block(&mut it, BlockKind::LabelList);
    let lists: Vec<_> = match it.next().unwrap() {
        Item::LabelLists(l) => l.iter().collect(),
        other => panic!("{:?}", other),
    };
    assert_eq!(lists.len(), 2);
    assert_eq!(lists[0].id, 1);
    assert_eq!(lists[0].activity_id(), Some(Guid(GUID_A)));
    let l0: Vec<_> = lists[0].labels().collect();
    assert_eq!(l0.len(), 2);
    assert!(matches!(l0[1], Label::KeyValueString(k, v) if k.eq_str("k") && v.eq_str("v")));
    let l1: Vec<_> = lists[1].labels().collect();
    assert_eq!(lists[1].id, 2);
    assert!(matches!(l1[0], Label::SpanId(77)));
    assert!(matches!(l1[1], Label::KeyValueInt(k, -5) if k.eq_str("n")));
    assert!(matches!(l1[2], Label::Level(3)));

    next_block(&mut it, BlockKind::Stack);
    let stacks = match it.next().unwrap() {
        Item::Stacks(s) => s,
        other => panic!("{:?}", other),
    };
    assert_eq!(
        (stacks.first_id, stacks.count, stacks.pointer_size),
        (1, 2, 8)
    );
    let s: Vec<_> = stacks.iter().collect();
    assert_eq!(
        s[0].ips().collect::<Vec<_>>(),
        [0x7f00_0000_1000, 0x7f00_0000_2000]
    );
    assert!(s[1].is_empty() && s[1].id == 2);

    let eb = next_block(&mut it, BlockKind::Event);
    assert_eq!(
        (eb.flags, eb.min_timestamp, eb.max_timestamp),
        (1, 10_000, 10_060)
    );
    let ev: Vec<_> = (0..3)
        .map(|_| match it.next().unwrap() {
            Item::Event(e) => e,
            other => panic!("{:?}", other),
        })
        .collect();
    assert_eq!(
        (
            ev[0].metadata_id,
            ev[0].sequence_number,
            ev[0].capture_thread_id,
            ev[0].thread_id
        ),
        (1, 1, 1, 1)
    );
    assert_eq!(
        (
            ev[0].processor_number,
            ev[0].stack_id,
            ev[0].timestamp,
            ev[0].label_list_id
        ),
        (3, 1, 10_000, 1)
    );
    assert!(!ev[0].is_sorted);
    assert_eq!(ev[0].payload, &b.payload1[..]);
    assert_eq!(
        (
            ev[1].metadata_id,
            ev[1].sequence_number,
            ev[1].stack_id,
            ev[1].label_list_id
        ),
        (2, 2, 2, 2)
    );
    assert!(ev[1].is_sorted);
    assert_eq!(ev[1].payload, 2u32.to_le_bytes());
    assert_eq!(
        (
            ev[2].capture_thread_id,
            ev[2].sequence_number,
            ev[2].thread_id,
            ev[2].stack_id
        ),
        (2, 1, 2, 0)
    );
    assert_eq!(
        (ev[2].timestamp, ev[2].label_list_id, ev[2].processor_number),
        (10_060, 0, 0)
    );

    // Walk the payload of metadata 1 by field name.
    let mut w = m1.fields.walk(ev[0].payload);
    let f: Vec<_> = (&mut w).map(|f| f.unwrap()).collect();
    assert_eq!(f.len(), 11);
    assert_eq!(f[0].value, Value::I32(-7));
    assert_eq!(f[1].value.as_str().unwrap().to_string(), "héllo𝄞");
    assert_eq!(f[2].value, Value::VarInt(-300));
    assert_eq!(f[3].value, Value::VarUInt(300));
    match f[4].value {
        Value::Array(a) => {
            assert_eq!(a.count, 3);
            let v: Vec<_> = a.iter().map(|v| v.unwrap().as_u64().unwrap()).collect();
            assert_eq!(v, [1, 2, 3]);
        }
        ref other => panic!("{:?}", other),
    }
    assert_eq!(f[5].value, Value::Utf8CodeUnit(b'x'));
    match f[6].value {
        Value::Array(a) => {
            assert_eq!(a.count, 2);
            let objs: Vec<_> = a.iter().map(|v| v.unwrap()).collect();
            let second = match objs[1] {
                Value::Object(o) => o,
                ref other => panic!("{:?}", other),
            };
            assert_eq!(second.get("x").unwrap(), Some(Value::I8(-2)));
            assert!(second
                .get("name")
                .unwrap()
                .unwrap()
                .as_str()
                .unwrap()
                .eq_str("bc"));
            assert_eq!(second.get("missing").unwrap(), None);
        }
        ref other => panic!("{:?}", other),
    }
    match f[7].value {
        Value::Array(a) => {
            let v: Vec<_> = a.iter().map(|v| v.unwrap()).collect();
            assert_eq!(v, [Value::U32(10), Value::U32(20)]);
        }
        ref other => panic!("{:?}", other),
    }
    match f[8].value {
        Value::Array(a) => assert_eq!(a.as_bytes(), [7, 8, 9]),
        ref other => panic!("{:?}", other),
    }
    match f[9].value {
        Value::Object(o) => {
            assert_eq!(o.get("d").unwrap().unwrap().as_f64(), Some(1.5));
            assert_eq!(o.get("g").unwrap(), Some(Value::Guid(Guid(GUID_A))));
            assert_eq!(
                o.get("t").unwrap(),
                Some(Value::DateTime(132_000_000_000_000_000))
            );
        }
        ref other => panic!("{:?}", other),
    }
    assert_eq!(f[10].value, Value::Boolean(true));
    assert_eq!(
        m1.fields.walk(ev[0].payload).get("b").unwrap(),
        Some(Value::Boolean(true))
    );

    next_block(&mut it, BlockKind::Event);
    match it.next().unwrap() {
        Item::Event(e) => {
            assert_eq!(
                (
                    e.metadata_id,
                    e.sequence_number,
                    e.thread_id,
                    e.capture_thread_id
                ),
                (2, 3, 1, 1)
            );
            assert_eq!(
                (e.processor_number, e.stack_id, e.timestamp, e.label_list_id),
                (5, 1, 10_070, 2)
            );
            assert!(e.is_sorted);
            assert_eq!(e.payload, 1u32.to_le_bytes());
        }
        other => panic!("{:?}", other),
    }

    let ub = next_block(&mut it, BlockKind::Unknown);
    assert_eq!((ub.code, ub.size), (42, 3));
    assert_eq!(it.next().unwrap(), Item::UnknownBlock(&[1, 2, 3]));

    next_block(&mut it, BlockKind::SequencePoint);
    match it.next().unwrap() {
        Item::SequencePoint(sp) => {
            assert_eq!((sp.timestamp, sp.thread_count), (20_000, 2));
            assert!(sp.flushes_threads() && sp.flushes_metadata());
            let t: Vec<_> = sp
                .threads()
                .map(|t| (t.thread_id, t.sequence_number))
                .collect();
            assert_eq!(t, [(1, 3), (2, 1)]);
        }
        other => panic!("{:?}", other),
    }
    next_block(&mut it, BlockKind::RemoveThread);
    match it.next().unwrap() {
        Item::RemoveThreads(r) => {
            let t: Vec<_> = r.iter().map(|t| (t.thread_id, t.sequence_number)).collect();
            assert_eq!(t, [(2, 1)]);
        }
        other => panic!("{:?}", other),
    }
    assert_eq!(it.next().unwrap(), Item::EndOfStream);
    assert!(it.next().is_none());
}

#[test]
fn a_v6_stream_gives_the_same_items_in_any_chunking() {
    let b = build();
    let whole = drive(&b.bytes, Chunking::Whole, DEFAULT_MAX_BLOCK_SIZE);
    assert!(whole.done && whole.error.is_none());
    for c in [
        Chunking::Fixed(1),
        Chunking::Fixed(3),
        Chunking::Random(11, 17),
    ] {
        let d = drive(&b.bytes, c, DEFAULT_MAX_BLOCK_SIZE);
        assert!(d.done && d.error.is_none(), "{:?}", c);
        assert_eq!(d.items, whole.items, "{:?}", c);
    }
}

#[test]
fn v6_errors_are_typed() {
    let b = build();
    // A major version above 6 is refused.
    let mut v7 = b.bytes.clone();
    v7[12] = 7;
    assert_eq!(
        NettraceParser::new().handle_input(&v7).unwrap_err(),
        NettraceError::UnsupportedVersion {
            offset: 12,
            version: 7
        }
    );
    // A block announcing more than the maximum is refused from its 4-byte header alone.
    let mut p = NettraceParser::with_max_block_size(1000);
    let first = p.handle_input(&b.bytes).unwrap();
    assert!(matches!(first.status, Status::Event(Item::Trace(_))));
    let at = first.consumed;
    let header = 0x00FF_FFFFu32 | 2 << 24;
    let e = p.handle_input(&header.to_le_bytes()).unwrap_err();
    assert_eq!(
        e,
        NettraceError::BlockTooLarge {
            offset: at as u64,
            size: 0xFF_FFFF,
            max: 1000
        }
    );
    // Truncated at every length: an error from handle_eof naming where the data stops, and
    // the items before it are a prefix of the whole stream's.
    let whole = drive(&b.bytes, Chunking::Whole, DEFAULT_MAX_BLOCK_SIZE);
    for len in 0..b.bytes.len() {
        let d = drive(&b.bytes[..len], Chunking::Whole, DEFAULT_MAX_BLOCK_SIZE);
        match d.error {
            Some(NettraceError::Truncated {
                offset,
                needed,
                available,
            }) => {
                assert!(offset as usize <= len && needed > available, "len {}", len);
                assert_eq!(offset as usize + available, len, "len {}", len);
            }
            other => panic!("len {}: {:?}", len, other),
        }
        assert!(whole.items.starts_with(&d.items), "len {}", len);
    }
}
