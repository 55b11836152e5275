//! Heap snapshots from the committed heap captures (tests/data/nettrace/heap-*.nettrace.gz:
//! dotnet-gcdump's session against hosts holding 10,000 System.Version objects): the
//! per-type report counts exactly the 10,000 held objects at 32 bytes each (64-bit: header,
//! MethodTable pointer, four int32 fields), whole or fed in small slices alike; truncated and
//! corrupt streams are errors naming an offset, never a panic.

mod common_captures;
use common_captures::capture;

use dsipc_trace::heap::{HeapError, HeapGraph, HeapLimits, HeapStream, TypeStat, Walk};

const CAPTURES: [&str; 2] = [
    "heap-net8.0.4.nettrace.gz",
    "heap-netcore3.1.23.nettrace.gz",
];

fn build(data: &[u8], slice: usize) -> HeapGraph {
    let mut s = HeapStream::new();
    for chunk in data.chunks(slice) {
        s.feed(chunk).unwrap();
    }
    s.finish().unwrap();
    s.into_graph().unwrap()
}

fn version(stats: &[TypeStat]) -> &TypeStat {
    stats
        .iter()
        .find(|t| t.name == "System.Version")
        .unwrap_or_else(|| panic!("no System.Version in {:?}", &stats[..stats.len().min(20)]))
}

#[test]
fn the_held_versions_are_counted_exactly() {
    for name in CAPTURES {
        let data = capture(name);
        let g = build(&data, data.len());
        assert!(
            matches!(g.walk, Walk::Done { .. }),
            "{}: {:?}",
            name,
            g.walk
        );
        assert_eq!(g.pointer_size, 8);
        assert_eq!(g.missing_edges, 0, "{}", name);
        assert_eq!(g.lost_events, 0, "{}", name);
        assert!(!g.roots.is_empty(), "{}", name);
        let stats = g.type_stats();
        // The runtime has a few Version objects of its own besides the 10,000 held, each
        // 32 bytes.
        let v = version(&stats);
        assert!((10_000..10_010).contains(&v.count), "{}: {:?}", name, v);
        assert_eq!(v.bytes, v.count * 32, "{}", name);
        // The held ones exactly: the List<Version>'s one array (16-byte header, 8-byte length,
        // 10,000 references) references 10,000 distinct System.Version objects.
        let arrays: Vec<usize> = (0..g.object_count())
            .filter(|&i| {
                g.types[g.object(i).type_index as usize].name.as_deref() == Some("System.Version[]")
            })
            .collect();
        assert_eq!(arrays.len(), 1, "{}", name);
        let array = arrays[0];
        assert_eq!(g.object(array).size, 24 + 10_000 * 8);
        let refs = g.references().nth(array).unwrap().to_vec();
        assert_eq!(refs.len(), 10_000);
        let index = g.address_index();
        let mut targets: Vec<usize> = refs
            .iter()
            .map(|&a| index.get(a).expect("a reference to a walked object"))
            .collect();
        targets.sort_unstable();
        targets.dedup();
        assert_eq!(targets.len(), 10_000, "{}", name);
        assert!(targets.iter().all(|&t| {
            g.types[g.object(t).type_index as usize].name.as_deref() == Some("System.Version")
                && g.object(t).size == 32
        }));
        assert_eq!(
            stats
                .iter()
                .find(|t| t.name == "System.Collections.Generic.List`1[System.Version]"),
            Some(&TypeStat {
                name: "System.Collections.Generic.List`1[System.Version]".into(),
                count: 1,
                bytes: 32
            })
        );
        // Biggest first; the totals add up.
        assert!(stats.windows(2).all(|w| w[0].bytes >= w[1].bytes));
        assert_eq!(
            stats.iter().map(|t| t.count).sum::<u64>(),
            g.object_count() as u64
        );
        assert_eq!(stats.iter().map(|t| t.bytes).sum::<u64>(), g.total_bytes());
        // Every type the objects name was described.
        assert!(
            !stats.iter().any(|t| t.name.starts_with("UNKNOWN_TYPE")),
            "{}: {:?}",
            name,
            stats
                .iter()
                .filter(|t| t.name.starts_with("UNKNOWN"))
                .collect::<Vec<_>>()
        );
        eprintln!(
            "{}: {} objects, {} bytes, {} references, {} roots, {} types; top: {:?}",
            name,
            g.object_count(),
            g.total_bytes(),
            g.edge_count(),
            g.roots.len(),
            stats.len(),
            &stats[..5]
        );
    }
}

#[test]
fn slicing_changes_nothing() {
    for name in CAPTURES {
        let data = capture(name);
        let whole = build(&data, data.len()).type_stats();
        for slice in [1000, 4093, 1 << 16] {
            assert_eq!(
                build(&data, slice).type_stats(),
                whole,
                "{} / {}",
                name,
                slice
            );
        }
    }
}

#[test]
fn a_truncated_walk_is_an_error_naming_the_offset() {
    let data = capture(CAPTURES[0]);
    for cut in [data.len() / 3, data.len() / 2, data.len() - 1] {
        let mut s = HeapStream::new();
        s.feed(&data[..cut]).unwrap();
        let e = s.finish().unwrap_err();
        assert!(e.is_truncation(), "{}", e);
        assert_eq!(e.offset(), Some(cut as u64));
        assert!(e.to_string().contains(&format!("offset {}", cut)), "{}", e);
    }
}

#[test]
fn corrupt_bytes_are_errors_not_panics() {
    let data = capture(CAPTURES[1]);
    // Flip bytes all over the stream: each run ends in Ok or an error, never a panic.
    let mut errors = 0;
    for i in 0..64usize {
        let at = (i * 7919 * 1031) % data.len();
        let mut bad = data.clone();
        bad[at] ^= 0xA5;
        bad[(at + 1) % data.len()] ^= 0xFF;
        let mut s = HeapStream::new();
        let r = s.feed(&bad).and_then(|_| s.finish());
        if let Err(e) = r {
            errors += 1;
            assert!(e.offset().is_some(), "{}", e);
        }
    }
    eprintln!("{} of 64 corruptions refused", errors);
}

#[test]
fn past_the_object_limit_is_a_typed_error() {
    let data = capture(CAPTURES[0]);
    let mut s = HeapStream::with_limits(HeapLimits {
        max_objects: 1000,
        ..HeapLimits::default()
    });
    let e = s.feed(&data).unwrap_err();
    assert_eq!(e, HeapError::TooManyObjects { limit: 1000 });
    assert_eq!(
        e.to_string(),
        "the heap has more than 1000 objects (the limit)"
    );
    let mut s = HeapStream::with_limits(HeapLimits {
        max_edges: 1000,
        ..HeapLimits::default()
    });
    assert_eq!(
        s.feed(&data).unwrap_err(),
        HeapError::TooManyEdges { limit: 1000 }
    );
}

/// The trace's span: its first and last event timestamps, in nanoseconds.
fn span_ns(data: &[u8]) -> u64 {
    use dsipc::nettrace::Item;
    use dsipc_trace::TraceStream;
    let (mut first, mut last, mut freq) = (i64::MAX, i64::MIN, 0i64);
    let mut each = |item: &Item<'_>| match item {
        Item::Trace(h) => freq = h.qpc_frequency,
        Item::Event(e) => {
            first = first.min(e.timestamp);
            last = last.max(e.timestamp);
        }
        _ => {}
    };
    let mut s = TraceStream::new();
    s.feed(data, &mut each).unwrap();
    s.finish(&mut each).unwrap();
    assert!(freq > 0 && last > first);
    ((i128::from(last) - i128::from(first)) * 1_000_000_000 / i128::from(freq)) as u64
}

#[test]
fn the_runtime_pause_is_placed_around_the_walked_gc() {
    for name in CAPTURES {
        let data = capture(name);
        let g = build(&data, data.len());
        let p = g
            .pause
            .unwrap_or_else(|| panic!("{}: no pause from the GC events", name));
        let span = span_ns(&data);
        assert!(p.total_ns > 0, "{}: {:?}", name, p);
        assert!(p.total_ns < span, "{}: {:?} vs span {} ns", name, p, span);
        assert!(p.gc_ns > 0 && p.gc_ns <= p.total_ns, "{}: {:?}", name, p);
        if let Some(s) = p.suspend_ns {
            assert!(s + p.gc_ns <= p.total_ns, "{}: {:?}", name, p);
        }
        assert_eq!(Walk::Done { gc: p.gc }, g.walk, "{}", name);
        eprintln!("{}: {:?} (trace span {} ns)", name, p, span);
        // Slicing changes nothing.
        for slice in [97, 1000, 4093, 1 << 16] {
            assert_eq!(build(&data, slice).pause, g.pause, "{} / {}", name, slice);
        }
    }
}

#[test]
fn a_stream_cut_before_the_restart_has_no_pause() {
    let data = capture(CAPTURES[0]);
    // Whatever the cut, the pause is the whole stream's or none (never a partial one).
    let whole = build(&data, data.len()).pause;
    for cut in [data.len() / 2, data.len() * 9 / 10, data.len() - 1] {
        let mut s = HeapStream::new();
        s.feed(&data[..cut]).unwrap();
        let _ = s.finish();
        let g = s.into_graph().unwrap();
        assert!(
            g.pause.is_none() || g.pause == whole,
            "{}: {:?}",
            cut,
            g.pause
        );
        if !matches!(g.walk, Walk::Done { .. }) {
            assert_eq!(g.pause, None, "{}", cut);
        }
    }
}
