//! The trace layer (dsipc-trace) over any bytes: `TraceStream` feeding a `TraceAnalyzer`,
//! the profile finished and written in every format. Properties: delivery in fragments gives
//! the same counts and the same folded profile as whole delivery, and the heap never grows
//! past 64 MiB plus twice the input (the bound `dsipc convert` promises).

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};

use crate::fragment::*;
use dsipc_trace::format::{ProfileFormat, ProfileMeta, Selection};
use dsipc_trace::{TraceAnalyzer, TraceStream};

/// Counts live heap bytes and their peak (for the allocation bound; the fuzz binaries and
/// the corpus test use it as their global allocator).
pub struct CountingAlloc;

pub(crate) static CURRENT: AtomicUsize = AtomicUsize::new(0);
pub(crate) static PEAK: AtomicUsize = AtomicUsize::new(0);

fn grew(by: usize) {
    let now = CURRENT.fetch_add(by, Ordering::Relaxed) + by;
    PEAK.fetch_max(now, Ordering::Relaxed);
}

// SAFETY: every call is forwarded to the system allocator unchanged; only counters change.
unsafe impl GlobalAlloc for CountingAlloc {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let p = System.alloc(layout);
        if !p.is_null() {
            grew(layout.size());
        }
        p
    }
    unsafe fn dealloc(&self, p: *mut u8, layout: Layout) {
        System.dealloc(p, layout);
        CURRENT.fetch_sub(layout.size(), Ordering::Relaxed);
    }
    unsafe fn realloc(&self, p: *mut u8, layout: Layout, new: usize) -> *mut u8 {
        let q = System.realloc(p, layout, new);
        if !q.is_null() {
            if new >= layout.size() {
                grew(new - layout.size());
            } else {
                CURRENT.fetch_sub(layout.size() - new, Ordering::Relaxed);
            }
        }
        q
    }
}

#[global_allocator]
static ALLOC: CountingAlloc = CountingAlloc;

/// What one pass found, independent of the chunking.
#[derive(Debug, PartialEq, Eq)]
struct Pass {
    events: u64,
    samples: u64,
    lost: u64,
    error: Option<String>,
    folded: Vec<u8>,
}

fn pass(stream_bytes: &[u8], chunker: &mut dyn FnMut(usize) -> usize) -> Pass {
    let mut stream = TraceStream::new();
    let mut a = TraceAnalyzer::new();
    let mut at = 0;
    let mut error = None;
    while at < stream_bytes.len() {
        let n = chunker(stream_bytes.len() - at).max(1);
        let n = n.min(stream_bytes.len() - at);
        if let Err(e) = stream.feed(&stream_bytes[at..at + n], |item| {
            a.on_item(item);
        }) {
            error = Some(e.to_string());
            break;
        }
        at += n;
    }
    if error.is_none() {
        if let Err(e) = stream.finish(|item| {
            a.on_item(item);
        }) {
            error = Some(e.to_string());
        }
    }
    let (events, samples, lost) = (a.events(), a.samples(), a.lost_events());
    let meta = ProfileMeta {
        name: "fuzz".into(),
        process: None,
        info: a.info().copied(),
    };
    let profile = a.finish_profile(false);
    let sel = Selection::default();
    for f in [
        ProfileFormat::Speedscope,
        ProfileFormat::Pprof,
        ProfileFormat::Folded,
    ] {
        f.write(&profile, sel, &meta, &mut std::io::sink())
            .expect("writing to a sink");
    }
    // A flame graph of a profile without a framed sample is an error, never a panic.
    let _ = ProfileFormat::Flamegraph.write(&profile, sel, &meta, &mut std::io::sink());
    let mut folded = Vec::new();
    ProfileFormat::Folded
        .write(&profile, sel, &meta, &mut folded)
        .expect("writing to a Vec");
    // Error offsets may differ with the chunking only in how much was available; the
    // message kind and offset do not.
    Pass {
        events,
        samples,
        lost,
        error,
        folded,
    }
}

/// The `trace_layer` target: a [`Fragmented`] input (see [`crate::nettrace_input`]).
pub fn trace_layer(data: &[u8]) {
    let f = match Fragmented::split(data) {
        Some(f) => f,
        None => return,
    };
    let base = CURRENT.load(Ordering::Relaxed);
    PEAK.store(base, Ordering::Relaxed);
    let all = pass(f.input, &mut whole);
    let peak = PEAK.load(Ordering::Relaxed).saturating_sub(base);
    let bound = (64 << 20) + 2 * data.len();
    assert!(
        peak <= bound,
        "peak heap {} bytes for {} bytes of input (bound {})",
        peak,
        data.len(),
        bound
    );
    let split = pass(f.input, &mut f.chunker());
    assert_eq!(
        (all.events, all.samples, all.lost, &all.folded),
        (split.events, split.samples, split.lost, &split.folded),
        "chunked delivery differs from whole delivery"
    );
    assert_eq!(all.error.is_some(), split.error.is_some());
}
