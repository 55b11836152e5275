//! The committed heap captures (tests/data/nettrace/heap-*.nettrace.gz, recorded by
//! `tests/runtime/capture_nettrace.py --heap` from hosts holding 10,000 System.Version
//! objects, with dotnet-gcdump's providers): each parses to its end-of-stream object through
//! the one stream driver, fed whole or in small slices alike, and holds the heap walk's bulk
//! events with the held type's name among the type records.

mod common_captures;
use common_captures::capture;

use dsipc::nettrace::clr::ClrProvider;
use dsipc::nettrace::Item;
use dsipc_trace::{TraceAnalyzer, TraceStream};

/// GCBulkType, GCBulkNode, GCBulkEdge (Microsoft-Windows-DotNETRuntime event ids).
const BULK_TYPE: u32 = 15;
const BULK_NODE: u32 = 18;
const BULK_EDGE: u32 = 19;

#[derive(Debug, Default, PartialEq, Eq)]
struct Counts {
    events: u64,
    types: u64,
    nodes: u64,
    edges: u64,
    version_named: bool,
}

/// Feeds `data` in `slice`-byte pieces; counts the bulk events by their metadata.
fn parse(data: &[u8], slice: usize) -> Counts {
    let mut stream = TraceStream::new();
    let mut analyzer = TraceAnalyzer::new();
    let mut c = Counts::default();
    let needle: Vec<u8> = "System.Version"
        .encode_utf16()
        .flat_map(|u| u.to_le_bytes())
        .collect();
    let mut each = |item: &Item<'_>| {
        let meta = analyzer
            .on_item(item)
            .map(|m| (m.provider.clone(), m.event_id));
        if let (Item::Event(e), Some((provider, id))) = (item, meta) {
            c.events += 1;
            if provider != ClrProvider::Runtime.name() {
                return;
            }
            match id {
                BULK_TYPE => {
                    c.types += 1;
                    if e.payload.windows(needle.len()).any(|w| w == &needle[..]) {
                        c.version_named = true;
                    }
                }
                BULK_NODE => c.nodes += 1,
                BULK_EDGE => c.edges += 1,
                _ => {}
            }
        }
    };
    for chunk in data.chunks(slice) {
        stream.feed(chunk, &mut each).unwrap();
    }
    stream.finish(&mut each).unwrap();
    c
}

#[test]
fn heap_captures_parse_to_their_end_with_the_heap_walk() {
    for name in [
        "heap-net8.0.4.nettrace.gz",
        "heap-netcore3.1.23.nettrace.gz",
    ] {
        let data = capture(name);
        let whole = parse(&data, data.len());
        assert!(whole.nodes > 0, "{}: no GCBulkNode: {:?}", name, whole);
        assert!(whole.edges > 0, "{}: no GCBulkEdge: {:?}", name, whole);
        assert!(whole.types > 0, "{}: no GCBulkType: {:?}", name, whole);
        assert!(whole.version_named, "{}: System.Version not named", name);
        // Slicing changes nothing.
        assert_eq!(parse(&data, 4093), whole, "{}", name);
        assert_eq!(parse(&data, 1 << 16), whole, "{}", name);
    }
}
