//! The `.gcdump` writer and reader on the committed heap captures: a graph written and read
//! back gives the same per-type report, the held array's references lead to the held
//! objects, the file starts as FastSerialization files do, and every truncation or corruption
//! of it is an error (naming an offset) or a file that still reads, never a panic.

mod common_captures;
use common_captures::capture;

use dsipc_trace::heap::gcdump::{self, GcDumpInfo};
use dsipc_trace::heap::report;
use dsipc_trace::heap::{HeapGraph, HeapStream};

fn graph(name: &str) -> HeapGraph {
    let mut s = HeapStream::new();
    s.feed(&capture(name)).unwrap();
    s.finish().unwrap();
    s.into_graph().unwrap()
}

fn info() -> GcDumpInfo {
    GcDumpInfo {
        process_id: 4242,
        process_name: Some("host".into()),
        machine_name: Some("m\u{e9}".into()),
        time_ticks: 638_000_000_000_000_000,
        creation_tool: Some("dsipc".into()),
    }
}

#[test]
fn written_and_read_back_the_report_is_the_same() {
    for name in [
        "heap-net8.0.4.nettrace.gz",
        "heap-netcore3.1.23.nettrace.gz",
    ] {
        let g = graph(name);
        let mut file = Vec::new();
        let w = gcdump::write(&g, &info(), &mut file).unwrap();
        assert_eq!(w.bytes, file.len() as u64);
        assert_eq!(&file[..4], &20i32.to_le_bytes());
        assert_eq!(&file[4..24], b"!FastSerialization.1");
        let d = gcdump::read(&file).unwrap();
        assert_eq!(d.type_stats(), g.type_stats(), "{}", name);
        // Retained bytes: the same from the file as from the walk, and the held objects'
        // exactly. Each Version (no references) retains itself. The host's Python wrappers
        // (Python.Runtime.CLRObject, 10,001 of them) reference the held Versions too, so the
        // array dominates none of them: it retains itself, and the List retains its array.
        let retained = g.retained_stats();
        assert_eq!(d.retained_stats(), retained, "{}", name);
        let of = |n: &str| retained.iter().find(|r| r.name == n).unwrap().clone();
        let v = of("System.Version");
        assert_eq!(v.retained, v.bytes, "{}", name);
        assert_eq!(of("System.Version[]").retained, 80_024, "{}", name);
        assert_eq!(
            of("System.Collections.Generic.List`1[System.Version]").retained,
            32 + 80_024,
            "{}",
            name
        );
        assert!(retained.windows(2).all(|w| w[0].retained >= w[1].retained));
        // dotnet-gcdump report's rows: the same from the file as from the walk, with the
        // retained column only when asked.
        for with_retained in [false, true] {
            let rows = report::graph_rows(&g, with_retained);
            assert_eq!(report::dump_rows(&d, with_retained), rows, "{}", name);
            assert_eq!(rows.len(), retained.len(), "{}", name);
            assert!(rows.iter().all(|r| r.retained.is_some() == with_retained));
        }
        assert_eq!(
            retained
                .iter()
                .map(|r| (r.count, r.bytes))
                .fold((0, 0), |a, b| (a.0 + b.0, a.1 + b.1)),
            (g.object_count() as u64, g.total_bytes())
        );
        assert_eq!(
            d.object_totals(),
            (g.object_count() as u64, g.total_bytes()),
            "{}",
            name
        );
        assert!(d.is_64bit);
        assert_eq!(d.info, Some(info()));
        assert_eq!(d.node_count(), w.nodes);
        assert_eq!(d.type_name(d.root), "[.NET Roots]");
        // The root's groups hold every root that resolved.
        let groups = d.children(d.root);
        assert!(!groups.is_empty());
        assert!(groups.iter().any(|&n| d.type_name(n) == "[static vars]"));
        // The held array: 10,000 children, all System.Version.
        let array = (0..d.node_count())
            .find(|&i| d.type_name(i) == "System.Version[]")
            .unwrap();
        let kids = d.children(array);
        assert_eq!(kids.len(), 10_000);
        assert!(kids
            .iter()
            .all(|&k| d.type_name(k) == "System.Version" && d.node(k).1 == 32));
        eprintln!(
            "{}: {} bytes of .gcdump for {} objects, {} dangling references",
            name,
            file.len(),
            g.object_count(),
            w.dangling_references
        );
    }
}

#[test]
fn truncated_or_corrupt_files_are_errors_never_panics() {
    let g = graph("heap-netcore3.1.23.nettrace.gz");
    let mut file = Vec::new();
    gcdump::write(&g, &info(), &mut file).unwrap();
    // Cut anywhere inside the graph: an error naming an offset within the file.
    let step = (file.len() / 500).max(1);
    let mut cut = 0;
    while cut < file.len() - 40 {
        match gcdump::read(&file[..cut]) {
            Ok(d) => panic!("a file cut at {} read as {} nodes", cut, d.node_count()),
            Err(e) => {
                assert!(e.offset <= cut as u64, "{} at cut {}", e, cut);
                assert!(e.to_string().contains("offset"), "{}", e);
            }
        }
        cut += step;
    }
    // Flipped bytes: read or refused, never a panic; what reads, reports.
    for i in 0..400usize {
        let at = (i * 7919 * 104_729) % file.len();
        let mut bad = file.clone();
        bad[at] ^= 0x5A;
        if let Ok(d) = gcdump::read(&bad) {
            let _ = d.type_stats();
            for n in 0..d.node_count().min(50) {
                let _ = d.children(n);
            }
        }
    }
    assert!(gcdump::read(b"").is_err());
    assert!(gcdump::read(b"\x14\0\0\0!FastSerialization.2").is_err());
}
