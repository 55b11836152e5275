//! Heap snapshots (dsipc-trace's `heap`): the `heap_stream` target (the heap walk rebuilt
//! from any trace bytes, whole and fragmented) and the `gcdump` target (the `.gcdump`
//! reader over any bytes). Properties besides "no panic": fragmented delivery gives the
//! same graph and error as whole delivery; a graph written as a `.gcdump` reads back to the
//! same per-type report and retained bytes; the heap never grows past 64 MiB plus a bounded
//! multiple of the input (the counting allocator of `trace_layer`).

use std::sync::atomic::Ordering;

use crate::fragment::*;
use crate::trace_layer::{CURRENT, PEAK};
use dsipc_trace::heap::gcdump::{self, GcDumpInfo};
use dsipc_trace::heap::{HeapGraph, HeapStream, TypeStat};

/// What one pass found, independent of the chunking.
#[derive(Debug, PartialEq, Eq)]
struct Pass {
    objects: usize,
    /// The error's offset and whether it is a truncation (its text may quote more or fewer
    /// of the bytes found, as delivery allowed).
    error: Option<(Option<u64>, bool)>,
    stats: Option<Vec<TypeStat>>,
}

fn pass(input: &[u8], chunker: &mut dyn FnMut(usize) -> usize) -> (Pass, Option<HeapGraph>) {
    let mut s = HeapStream::new();
    let mut at = 0;
    let mut error = None;
    while at < input.len() {
        let n = chunker(input.len() - at).max(1).min(input.len() - at);
        if let Err(e) = s.feed(&input[at..at + n]) {
            error = Some((e.offset(), e.is_truncation()));
            break;
        }
        at += n;
    }
    if error.is_none() {
        if let Err(e) = s.finish() {
            error = Some((e.offset(), e.is_truncation()));
        }
    }
    let objects = s.builder().objects();
    let graph = s.into_graph().ok();
    let stats = graph.as_ref().map(|g| g.type_stats());
    (
        Pass {
            objects,
            error,
            stats,
        },
        graph,
    )
}

/// Runs `f`, asserting its peak heap stays within 64 MiB plus `per_byte` times `len`.
fn bounded<T>(len: usize, per_byte: usize, f: impl FnOnce() -> T) -> T {
    let base = CURRENT.load(Ordering::Relaxed);
    PEAK.store(base, Ordering::Relaxed);
    let out = f();
    let peak = PEAK.load(Ordering::Relaxed).saturating_sub(base);
    let bound = (64 << 20) + per_byte * len;
    assert!(
        peak <= bound,
        "peak heap {} bytes for {} bytes of input (bound {})",
        peak,
        len,
        bound
    );
    out
}

/// The `heap_stream` target: a [`Fragmented`] input (see [`crate::nettrace_input`]).
pub fn heap_stream(data: &[u8]) {
    let f = match Fragmented::split(data) {
        Some(f) => f,
        None => return,
    };
    let (all, graph) = bounded(data.len(), 16, || pass(f.input, &mut whole));
    let (split, _) = pass(f.input, &mut f.chunker());
    assert_eq!(all, split, "chunked delivery differs from whole delivery");
    if let Some(g) = graph {
        // Written as a .gcdump, it reads back to the same report.
        let mut file = Vec::new();
        gcdump::write(&g, &GcDumpInfo::default(), &mut file).expect("writing to a Vec");
        let back = gcdump::read(&file).expect("our own .gcdump reads back");
        assert_eq!(
            back.type_stats(),
            g.type_stats(),
            "the .gcdump reads back to another report"
        );
        assert_eq!(back.retained_stats(), g.retained_stats());
    }
}

/// The `gcdump` target: the `.gcdump` reader over any bytes.
pub fn gcdump(data: &[u8]) {
    let read = bounded(data.len(), 64, || gcdump::read(data));
    if let Ok(d) = read {
        let stats = d.type_stats();
        let (objects, bytes) = d.object_totals();
        assert_eq!(stats.iter().map(|s| s.count).sum::<u64>(), objects);
        assert_eq!(stats.iter().map(|s| s.bytes).sum::<u64>(), bytes);
        let _ = d.retained_stats();
    }
}
