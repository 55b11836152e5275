//! Hostile and broken streams get typed errors that name the stream offset, never a panic,
//! a wait for more than one block, or an allocation: huge block sizes, truncation at every
//! offset, bad magic, NetPerf, bad tags, unknown object names, bad varints, bytes after the
//! end. Also V4/V5 details the samples do not cover: uncompressed blobs, V5 tags.

mod common;

use common::nettrace::{
    drive, event_block_content, sample, utf16z, v4_metadata, Chunking, Compressor, Header, V4Writer,
};
use dsipc::nettrace::{
    BlockKind, Item, NettraceError, NettraceParser, Status, TypeCode, Value,
    DEFAULT_MAX_BLOCK_SIZE, FAST_SERIALIZATION,
};

fn parse_all(data: &[u8]) -> (Vec<String>, Result<(), NettraceError>) {
    let d = drive(data, Chunking::Whole, DEFAULT_MAX_BLOCK_SIZE);
    (d.items, d.error.map_or(Ok(()), Err))
}

/// A small V4 stream: one metadata record, one event, a stack block, a sequence point.
fn small_v4() -> Vec<u8> {
    let mut w = V4Writer::new(8, 77);
    let meta = v4_metadata(1, "P", 5, "E", 0, Some(&0u32.to_le_bytes()), &[]);
    let mut blobs = Vec::new();
    Compressor::default().blob(&mut blobs, &Header::default(), &meta, false);
    w.block("MetadataBlock", &event_block_content(1, 0, 0, &blobs));
    let mut stacks = Vec::new();
    stacks.extend_from_slice(&1u32.to_le_bytes());
    stacks.extend_from_slice(&1u32.to_le_bytes());
    stacks.extend_from_slice(&8u32.to_le_bytes());
    stacks.extend_from_slice(&0x1234u64.to_le_bytes());
    w.block("StackBlock", &stacks);
    let mut blobs = Vec::new();
    let h = Header {
        metadata_id: 1,
        sequence_number: 1,
        capture_thread: 9,
        thread: 9,
        stack_id: 1,
        timestamp: 1_000_500,
        is_sorted: true,
        ..Header::default()
    };
    Compressor::default().blob(&mut blobs, &h, &[1, 2, 3], false);
    w.block(
        "EventBlock",
        &event_block_content(1, 1_000_500, 1_000_500, &blobs),
    );
    let mut sp = Vec::new();
    sp.extend_from_slice(&1_000_600i64.to_le_bytes());
    sp.extend_from_slice(&1u32.to_le_bytes());
    sp.extend_from_slice(&9u64.to_le_bytes());
    sp.extend_from_slice(&1u32.to_le_bytes());
    w.block("SPBlock", &sp);
    w.end()
}

#[test]
fn the_small_stream_parses() {
    let (items, r) = parse_all(&small_v4());
    r.unwrap();
    // Trace, 4 x (Block + content), EndOfStream.
    assert_eq!(items.len(), 10, "{:#?}", items);
}

#[test]
fn bad_magic_netperf_and_bad_headers() {
    let e = NettraceParser::new()
        .handle_input(b"NotTrace\0\0\0\0")
        .unwrap_err();
    assert_eq!(
        e,
        NettraceError::BadMagic {
            offset: 0,
            found: *b"NotTrace"
        }
    );
    assert!(e.to_string().contains("not a nettrace stream"));
    // Rejected on the first differing byte, without waiting for more.
    let e = NettraceParser::new().handle_input(b"X").unwrap_err();
    assert!(matches!(e, NettraceError::BadMagic { offset: 0, .. }));
    // NetPerf: the FastSerialization signature without the Nettrace magic.
    let mut netperf = FAST_SERIALIZATION.to_vec();
    netperf.extend_from_slice(&[0x05; 40]);
    let e = NettraceParser::new().handle_input(&netperf).unwrap_err();
    assert_eq!(e, NettraceError::NetPerf { offset: 0 });
    assert!(e.to_string().contains("NetPerf"));
    // Its prefix waits for the whole signature (no false BadMagic).
    let h = NettraceParser::new().handle_input(&netperf[..10]).unwrap();
    assert_eq!(h.status, Status::Partial { needed: 24 });
    // Nettrace + neither FastSerialization nor a V6 header.
    let mut bad = b"Nettrace".to_vec();
    bad.extend_from_slice(&[0x14, 0, 0, 0]);
    bad.extend_from_slice(b"!FastSerialization.2");
    assert!(matches!(
        NettraceParser::new().handle_input(&bad).unwrap_err(),
        NettraceError::Malformed { offset: 8, .. }
    ));
    // A Trace object of version 3 (NetPerf era) is refused.
    let mut v3 = small_v4();
    v3[32 + 3] = 3;
    assert_eq!(
        NettraceParser::new().handle_input(&v3).unwrap_err(),
        NettraceError::UnsupportedVersion {
            offset: 35,
            version: 3
        }
    );
    // A pointer size of 16.
    let mut ps = small_v4();
    let at = 32 + 21 + 16 + 16;
    ps[at] = 16;
    assert!(matches!(
        NettraceParser::new().handle_input(&ps).unwrap_err(),
        NettraceError::Malformed { offset, what } if offset == at as u64 && what.contains("PointerSize")
    ));
}

#[test]
fn huge_blocks_are_refused_before_any_wait() {
    let data = small_v4();
    let mut p = NettraceParser::with_max_block_size(4096);
    let trace = p.handle_input(&data).unwrap();
    let at = trace.consumed;
    // The next object announces 2 GiB - 1: refused as soon as its size field arrives.
    let mut hostile = data[at..at + 3 + 12 + 13 + 1].to_vec(); // "MetadataBlock" header
    hostile.extend_from_slice(&0x7FFF_FFFFi32.to_le_bytes());
    for cut in 0..hostile.len() {
        match p.clone().handle_input(&hostile[..cut]).unwrap().status {
            Status::Partial { needed } => assert!(needed <= hostile.len(), "needed {}", needed),
            other => panic!("{:?}", other),
        }
    }
    assert_eq!(
        p.handle_input(&hostile).unwrap_err(),
        NettraceError::BlockTooLarge {
            offset: at as u64,
            size: 0x7FFF_FFFF,
            max: 4096
        }
    );
    // A negative size is refused the same way.
    let mut neg = hostile.clone();
    let n = neg.len();
    neg[n - 4..].copy_from_slice(&(-4i32).to_le_bytes());
    let mut p = NettraceParser::with_max_block_size(4096);
    let _ = p.handle_input(&data).unwrap();
    assert!(matches!(
        p.handle_input(&neg).unwrap_err(),
        NettraceError::BlockTooLarge { .. }
    ));
    // An object name longer than any real one.
    let mut long = data[at..at + 11].to_vec();
    long.extend_from_slice(&100_000i32.to_le_bytes());
    let mut p = NettraceParser::new();
    let _ = p.handle_input(&data).unwrap();
    assert!(matches!(
        p.handle_input(&long).unwrap_err(),
        NettraceError::Malformed {
            what: "object name length",
            ..
        }
    ));
}

#[test]
fn truncation_anywhere_is_reported_with_its_offset() {
    for data in [
        Some(small_v4()),
        sample("eventpipe-dotnetcore6.0-win-x64-executioncheckpoints.nettrace"),
    ]
    .into_iter()
    .flatten()
    {
        let (whole, r) = parse_all(&data);
        r.unwrap();
        for len in 0..data.len() {
            let (items, r) = parse_all(&data[..len]);
            match r {
                Err(NettraceError::Truncated {
                    offset,
                    needed,
                    available,
                }) => {
                    assert_eq!(offset as usize + available, len, "len {}", len);
                    assert!(needed > available, "len {}", len);
                }
                other => panic!("len {}: {:?}", len, other),
            }
            assert!(whole.starts_with(&items), "len {}", len);
        }
    }
}

/// Parsing `t` fails on the tag at `offset`: `found` where `expected` belongs.
fn assert_bad_tag(t: &[u8], offset: usize, expected: u8, found: u8) {
    assert_eq!(
        parse_all(t).1.unwrap_err(),
        NettraceError::BadTag {
            offset: offset as u64,
            expected,
            found
        }
    );
}

#[test]
fn corrupted_tags_and_trailing_bytes() {
    let data = small_v4();
    // The end tag after the Trace object.
    let mut t = data.clone();
    let end = 32 + 21 + 48;
    t[end] = 0x07;
    assert_bad_tag(&t, end, 0x06, 0x07);
    // Something other than an object or the end marker between blocks.
    let mut t = data.clone();
    t[end + 1] = 0x02;
    assert_bad_tag(&t, end + 1, 0x05, 0x02);
    // The end tag of the last block, checked when the block is complete.
    let mut t = data.clone();
    let last_tag = t.len() - 2;
    t[last_tag] = 0;
    assert_bad_tag(&t, last_tag, 0x06, 0);
    // Bytes after the end marker.
    let mut t = data.clone();
    t.extend_from_slice(b"junk");
    assert_eq!(
        parse_all(&t).1.unwrap_err(),
        NettraceError::TrailingData {
            offset: data.len() as u64,
            len: 4
        }
    );
    // Every single-byte corruption of a real trace: an error or a parse, never a panic.
    let real = match sample("eventpipe-dotnetcore6.0-win-x64-executioncheckpoints.nettrace") {
        Some(s) => s,
        None => return,
    };
    for i in 0..real.len() {
        for x in [0x00u8, 0xFF, 0x80, 0x01] {
            let mut t = real.clone();
            t[i] ^= x.max(1);
            let (_, r) = parse_all(&t);
            if let Err(e) = r {
                assert!(e.offset() <= t.len() as u64, "{:?}", e);
                let _ = e.to_string();
            }
        }
    }
}

#[test]
fn unknown_objects_are_skipped_by_their_size() {
    let mut w = V4Writer::new(8, 1);
    w.block("FutureBlock", &[9, 9, 9, 9, 9]);
    let data = w.end();
    let d = drive(&data, Chunking::Fixed(1), DEFAULT_MAX_BLOCK_SIZE);
    assert!(d.done && d.error.is_none());
    assert_eq!(d.items.len(), 4, "{:#?}", d.items);
    assert!(d.items[1].contains("kind: Unknown") && d.items[1].contains("size: 5"));
    assert_eq!(d.items[2], "UnknownBlock([9, 9, 9, 9, 9])");
}

#[test]
fn bad_varints_and_payload_sizes_in_blobs() {
    let mut w = V4Writer::new(8, 1);
    // Flags 0x01 then an 11-byte varint for the metadata id.
    let mut blob = vec![0x01];
    blob.extend_from_slice(&[0xFF; 10]);
    blob.push(0x01);
    w.block("EventBlock", &event_block_content(1, 0, 0, &blob));
    let data = w.end();
    let content = data.len() - 2 - blob.len();
    assert_eq!(
        parse_all(&data).1.unwrap_err(),
        NettraceError::BadVarint {
            offset: content as u64 + 1
        }
    );

    // A payload size past the block's end.
    let mut w = V4Writer::new(8, 1);
    let blob = [0x80u8, 0x00, 0x7F]; // flags: size; timestamp delta 0; size 127
    w.block("EventBlock", &event_block_content(1, 0, 0, &blob));
    let data = w.end();
    assert!(matches!(
        parse_all(&data).1.unwrap_err(),
        NettraceError::Malformed {
            what: "event payload (PayloadSize)",
            ..
        }
    ));
    // A header size below 20.
    let mut w = V4Writer::new(8, 1);
    let mut c = event_block_content(1, 0, 0, &[]);
    c[0] = 4;
    w.block("EventBlock", &c);
    assert!(matches!(
        parse_all(&w.end()).1.unwrap_err(),
        NettraceError::Malformed {
            what: "block HeaderSize",
            ..
        }
    ));
    // Stack sizes that are not a multiple of the pointer size.
    let mut w = V4Writer::new(8, 1);
    let mut s = Vec::new();
    s.extend_from_slice(&1u32.to_le_bytes());
    s.extend_from_slice(&1u32.to_le_bytes());
    s.extend_from_slice(&3u32.to_le_bytes());
    s.extend_from_slice(&[1, 2, 3]);
    w.block("StackBlock", &s);
    assert!(matches!(
        parse_all(&w.end()).1.unwrap_err(),
        NettraceError::Malformed { .. }
    ));
}

#[test]
fn uncompressed_blobs_and_v5_tags() {
    let mut w = V4Writer::new(4, 1);
    // V1 fields: Int32 "a"; then an OpCode tag and a V2Params tag with an array of strings.
    let mut v1 = Vec::new();
    v1.extend_from_slice(&1u32.to_le_bytes());
    v1.extend_from_slice(&9u32.to_le_bytes());
    utf16z(&mut v1, "a");
    let mut v2 = Vec::new();
    v2.extend_from_slice(&2u32.to_le_bytes());
    let mut f = Vec::new();
    utf16z(&mut f, "a");
    f.extend_from_slice(&9u32.to_le_bytes());
    v2.extend_from_slice(&(f.len() as u32 + 4).to_le_bytes());
    v2.extend_from_slice(&f);
    let mut f = Vec::new();
    utf16z(&mut f, "names");
    f.extend_from_slice(&19u32.to_le_bytes());
    f.extend_from_slice(&18u32.to_le_bytes());
    f.extend_from_slice(&[0, 0]); // padding inside the field's size
    v2.extend_from_slice(&(f.len() as u32 + 4).to_le_bytes());
    v2.extend_from_slice(&f);
    let meta = v4_metadata(
        3,
        "Custom",
        1,
        "Arr",
        1,
        Some(&v1),
        &[(1, vec![10]), (9, vec![1, 2]), (2, v2)],
    );
    // Uncompressed metadata blob: 80-byte header, payload, padding to 4.
    let mut blob = Vec::new();
    let pad = (4 - meta.len() % 4) % 4;
    let event_size = 76 + meta.len() + pad;
    blob.extend_from_slice(&(event_size as u32).to_le_bytes());
    blob.extend_from_slice(&0x8000_0000u32.to_le_bytes()); // id 0, not sorted
                                                           // Sequence, thread, capture thread, processor, stack, timestamp, two activity ids.
    blob.extend_from_slice(&[0; 4 + 8 + 8 + 4 + 4 + 8 + 32]);
    blob.extend_from_slice(&(meta.len() as u32).to_le_bytes());
    blob.extend_from_slice(&meta);
    blob.extend_from_slice(&vec![0; pad]);
    w.block("MetadataBlock", &event_block_content(0, 0, 0, &blob));
    // An uncompressed event: sorted, with activity ids.
    let mut payload = 5i32.to_le_bytes().to_vec();
    payload.extend_from_slice(&2u16.to_le_bytes());
    utf16z(&mut payload, "x");
    utf16z(&mut payload, "yz");
    let pad = (4 - payload.len() % 4) % 4;
    let mut e = Vec::new();
    e.extend_from_slice(&((76 + payload.len() + pad) as u32).to_le_bytes());
    e.extend_from_slice(&3u32.to_le_bytes());
    e.extend_from_slice(&7u32.to_le_bytes()); // seq
    e.extend_from_slice(&11u64.to_le_bytes()); // thread
    e.extend_from_slice(&12u64.to_le_bytes()); // capture thread
    e.extend_from_slice(&2u32.to_le_bytes()); // processor
    e.extend_from_slice(&4u32.to_le_bytes()); // stack
    e.extend_from_slice(&99i64.to_le_bytes());
    e.extend_from_slice(&[0xA1; 16]);
    e.extend_from_slice(&[0xB2; 16]);
    e.extend_from_slice(&(payload.len() as u32).to_le_bytes());
    e.extend_from_slice(&payload);
    e.extend_from_slice(&vec![0; pad]);
    w.block("EventBlock", &event_block_content(0, 99, 99, &e));
    let data = w.end();

    let mut p = NettraceParser::new();
    let mut at = 0;
    let mut meta = None;
    let mut event = None;
    loop {
        let h = p.handle_input(&data[at..]).unwrap();
        at += h.consumed;
        match h.status {
            Status::Event(Item::Metadata(m)) => meta = Some(m.record().unwrap()),
            Status::Event(Item::Event(e)) => event = Some((e, p.activity_ids())),
            Status::Event(Item::Block(b)) => assert_ne!(b.kind, BlockKind::Unknown),
            Status::Event(_) => {}
            Status::Done => break,
            Status::Partial { .. } => panic!(),
        }
    }
    let m = meta.unwrap();
    assert_eq!((m.metadata_id, m.opcode, m.version), (3, Some(10), 1));
    assert!(!m.fields_malformed);
    // The V2Params fields replace the V1 ones.
    assert_eq!(m.fields.len(), 2);
    let arr = m.fields.find("names").unwrap().ty;
    assert_eq!(arr.code, TypeCode::Array);
    assert_eq!(arr.element().unwrap().code, TypeCode::String);
    let (e, (activity_id, related_activity_id)) = event.unwrap();
    assert_eq!(
        (
            e.metadata_id,
            e.sequence_number,
            e.thread_id,
            e.capture_thread_id
        ),
        (3, 7, 11, 12)
    );
    assert_eq!((e.processor_number, e.stack_id, e.timestamp), (2, 4, 99));
    assert_eq!(
        (activity_id.0, related_activity_id.0),
        ([0xA1; 16], [0xB2; 16])
    );
    assert!(e.is_sorted);
    let mut walk = m.fields.walk(e.payload);
    assert_eq!(walk.next().unwrap().unwrap().value, Value::I32(5));
    match walk.next().unwrap().unwrap().value {
        Value::Array(a) => {
            let v: Vec<String> = a
                .iter()
                .map(|v| v.unwrap().as_str().unwrap().to_string())
                .collect();
            assert_eq!(v, ["x", "yz"]);
        }
        other => panic!("{:?}", other),
    }
    assert!(walk.next().is_none());
    assert_eq!(walk.rest(), &[] as &[u8]);
}

#[test]
fn malformed_field_descriptions_leave_the_trace_readable() {
    let mut w = V4Writer::new(8, 1);
    // FieldCount 1, then a field whose name has no terminator.
    let mut v1 = 1u32.to_le_bytes().to_vec();
    v1.extend_from_slice(&9u32.to_le_bytes());
    v1.extend_from_slice(&[b'a', 0]);
    let meta = v4_metadata(1, "P", 1, "E", 0, Some(&v1), &[]);
    let mut blobs = Vec::new();
    Compressor::default().blob(&mut blobs, &Header::default(), &meta, false);
    w.block("MetadataBlock", &event_block_content(1, 0, 0, &blobs));
    let d = drive(&w.end(), Chunking::Whole, DEFAULT_MAX_BLOCK_SIZE);
    assert!(d.done && d.error.is_none());
    assert!(
        d.items[2].contains("fields_malformed: true"),
        "{}",
        d.items[2]
    );
}
