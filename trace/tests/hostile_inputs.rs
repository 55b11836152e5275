//! Hostile traces through the trace layer (TraceStream -> TraceAnalyzer -> finish_profile),
//! the families a black-box probe found amplifying memory or time: sparse stack ids, one
//! huge stack, a thread per sample, distinct metadata ids by the hundred thousand, metadata
//! with a million fields, sequence points listing a million capture threads, sampled
//! stacks interleaved with rundown method records, and many distinct stacks. A counting
//! allocator (per thread, so that tests running beside an analysis do not count in it)
//! checks that the peak heap stays at most 64 MiB plus twice the input; where a limit is
//! the answer, the analyzer names it.

#[path = "../../tests/common/nettrace.rs"]
#[allow(dead_code)]
mod common;

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

use common::{event_block_content, utf16z, v4_metadata, Compressor, Header, V4Writer};
use dsipc::nettrace::clr::ClrProvider;
use dsipc_trace::{LimitExceeded, TraceAnalyzer, TraceStream, MAX_CAPTURE_THREADS};

struct Counting;

// Per thread: an analysis runs on one thread, and the tests that run beside it (building
// their own inputs) must not count in its peak.
thread_local! {
    static CURRENT: Cell<isize> = const { Cell::new(0) };
    static PEAK: Cell<isize> = const { Cell::new(0) };
}

/// Adds `delta` bytes to this thread's count (nothing once the thread is being torn down).
fn count(delta: isize) {
    let _ = CURRENT.try_with(|c| {
        let now = c.get() + delta;
        c.set(now);
        let _ = PEAK.try_with(|p| p.set(p.get().max(now)));
    });
}

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let p = System.alloc(layout);
        if !p.is_null() {
            count(layout.size() as isize);
        }
        p
    }
    unsafe fn dealloc(&self, p: *mut u8, layout: Layout) {
        System.dealloc(p, layout);
        count(-(layout.size() as isize));
    }
    unsafe fn realloc(&self, p: *mut u8, layout: Layout, new: usize) -> *mut u8 {
        let q = System.realloc(p, layout, new);
        if !q.is_null() {
            count(new as isize - layout.size() as isize);
        }
        q
    }
}

#[global_allocator]
static ALLOC: Counting = Counting;

const MIB: usize = 1 << 20;

/// What an analysis of `data` did: the limit it named, samples, lost events, and the heap
/// it took beyond what was allocated before (the input itself is the caller's).
struct Outcome {
    limit: Option<LimitExceeded>,
    samples: u64,
    peak: usize,
    stream_ok: bool,
}

fn analyze(data: &[u8]) -> Outcome {
    let base = CURRENT.with(Cell::get);
    PEAK.with(|p| p.set(base));
    let (limit, samples, stream_ok) = {
        let mut stream = TraceStream::new();
        let mut a = TraceAnalyzer::new();
        let mut ok = true;
        for chunk in data.chunks(64 << 10) {
            if stream
                .feed(chunk, |item| {
                    a.on_item(item);
                })
                .is_err()
            {
                ok = false;
                break;
            }
        }
        if ok {
            ok = stream
                .finish(|item| {
                    a.on_item(item);
                })
                .is_ok();
        }
        let limit = a.limit_error();
        let samples = a.samples();
        let profile = a.finish_profile(false);
        assert!(profile.total_samples() <= samples);
        (limit, samples, ok)
    };
    Outcome {
        limit,
        samples,
        peak: (PEAK.with(Cell::get) - base).max(0) as usize,
        stream_ok,
    }
}

fn assert_bounded(name: &str, input: usize, o: &Outcome) {
    let bound = 64 * MIB + 2 * input;
    assert!(
        o.peak <= bound,
        "{}: peak heap {} bytes for {} bytes of input (bound {})",
        name,
        o.peak,
        input,
        bound
    );
    eprintln!(
        "{}: {} bytes in, peak heap {:.1} MiB",
        name,
        input,
        o.peak as f64 / MIB as f64
    );
}

/// A stream with the SampleProfiler's metadata (id 1) and a rundown MethodDCEndVerbose
/// metadata (id 2), ready for blocks.
fn writer() -> V4Writer {
    let mut w = V4Writer::new(8, 77);
    let mut blobs = Vec::new();
    let mut c = Compressor::default();
    let sample = v4_metadata(
        1,
        ClrProvider::SampleProfiler.name(),
        0,
        "",
        0,
        Some(&0u32.to_le_bytes()),
        &[],
    );
    c.blob(&mut blobs, &Header::default(), &sample, false);
    let rundown = v4_metadata(
        2,
        ClrProvider::Rundown.name(),
        144,
        "",
        1,
        Some(&0u32.to_le_bytes()),
        &[],
    );
    c.blob(&mut blobs, &Header::default(), &rundown, false);
    w.block("MetadataBlock", &event_block_content(1, 0, 0, &blobs));
    w
}

/// A stack block: `first` id, then the stacks (each a list of 8-byte IPs).
fn stack_block(w: &mut V4Writer, first: u32, stacks: &[Vec<u64>]) {
    let mut s = Vec::new();
    s.extend_from_slice(&first.to_le_bytes());
    s.extend_from_slice(&(stacks.len() as u32).to_le_bytes());
    for st in stacks {
        s.extend_from_slice(&((st.len() * 8) as u32).to_le_bytes());
        for ip in st {
            s.extend_from_slice(&ip.to_le_bytes());
        }
    }
    w.block("StackBlock", &s);
}

/// An event block of managed thread samples: (thread, stack id) each.
fn sample_block(w: &mut V4Writer, samples: &[(u64, u32)], seq: &mut u32) {
    samples_of_kind(w, samples, seq, 2);
}

/// An event block of thread samples of `kind` (the SampleProfiler payload).
fn samples_of_kind(w: &mut V4Writer, samples: &[(u64, u32)], seq: &mut u32, kind: u32) {
    let mut blobs = Vec::new();
    let mut c = Compressor::default();
    for &(thread, stack) in samples {
        *seq += 1;
        let h = Header {
            metadata_id: 1,
            sequence_number: *seq,
            capture_thread: 1,
            thread,
            stack_id: stack,
            timestamp: 1_000_000 + i64::from(*seq),
            ..Header::default()
        };
        c.blob(&mut blobs, &h, &kind.to_le_bytes(), false);
    }
    w.block("EventBlock", &event_block_content(1, 0, 0, &blobs));
}

#[test]
fn sparse_stack_ids_allocate_nothing_for_the_gaps() {
    let mut w = writer();
    let mut seq = 0;
    for i in 0..200u32 {
        let id = 1 + i * (1 << 20);
        stack_block(&mut w, id, &[vec![0x1000 + u64::from(i)]]);
        sample_block(&mut w, &[(5, id)], &mut seq);
    }
    let data = w.end();
    let o = analyze(&data);
    assert!(o.stream_ok);
    assert_eq!(o.limit, None);
    assert_eq!(o.samples, 200);
    assert_bounded("sparse stack ids", data.len(), &o);
    assert!(o.peak < 8 * MIB, "{}", o.peak);
}

#[test]
fn one_huge_stack_is_refused_by_its_limit() {
    let mut w = writer();
    let huge: Vec<u64> = (0..2_000_000u64).collect();
    stack_block(&mut w, 1, &[huge]);
    let mut seq = 0;
    sample_block(&mut w, &[(5, 1)], &mut seq);
    let data = w.end();
    let o = analyze(&data);
    assert_eq!(
        o.limit,
        Some(LimitExceeded::StackFrames {
            frames: 2_000_000,
            limit: 4096
        })
    );
    assert!(o.limit.unwrap().to_string().contains("--max-stack-frames"));
    assert_bounded("one huge stack", data.len(), &o);
}

#[test]
fn a_thread_per_sample_stops_at_the_thread_limit() {
    let mut w = writer();
    stack_block(&mut w, 1, &[vec![0x1000]]);
    let mut seq = 0;
    for chunk in 0..300u64 {
        let samples: Vec<(u64, u32)> = (0..1000).map(|i| (chunk * 1000 + i + 1, 1)).collect();
        sample_block(&mut w, &samples, &mut seq);
    }
    let data = w.end();
    let o = analyze(&data);
    assert_eq!(o.limit, Some(LimitExceeded::Threads { limit: 100_000 }));
    assert_eq!(o.samples, 100_000);
    assert_bounded("a thread per sample", data.len(), &o);
}

#[test]
fn distinct_metadata_ids_stop_at_the_metadata_limit() {
    let mut w = V4Writer::new(8, 77);
    for chunk in 0..150u32 {
        let mut blobs = Vec::new();
        let mut c = Compressor::default();
        for i in 0..1000u32 {
            let id = 10 + chunk * 1000 + i;
            let m = v4_metadata(
                id,
                "Hostile-Provider",
                id,
                "E",
                0,
                Some(&0u32.to_le_bytes()),
                &[],
            );
            c.blob(&mut blobs, &Header::default(), &m, false);
        }
        w.block("MetadataBlock", &event_block_content(1, 0, 0, &blobs));
    }
    let data = w.end();
    let o = analyze(&data);
    assert_eq!(
        o.limit,
        Some(LimitExceeded::MetadataRecords { limit: 100_000 })
    );
    assert_bounded("distinct metadata ids", data.len(), &o);
}

#[test]
fn metadata_with_a_million_fields_costs_its_bytes_only() {
    let mut w = V4Writer::new(8, 77);
    // V1 field descriptions: count, then (TypeCode u32, name UTF-16 NUL-terminated) each.
    let n = 1_000_000u32;
    let mut fields = Vec::new();
    fields.extend_from_slice(&n.to_le_bytes());
    for _ in 0..n {
        fields.extend_from_slice(&9u32.to_le_bytes()); // Int32
        utf16z(&mut fields, "f");
    }
    let m = v4_metadata(1, "Wide", 1, "E", 0, Some(&fields), &[]);
    let mut blobs = Vec::new();
    Compressor::default().blob(&mut blobs, &Header::default(), &m, false);
    w.block("MetadataBlock", &event_block_content(1, 0, 0, &blobs));
    let data = w.end();
    let o = analyze(&data);
    assert!(o.stream_ok);
    assert_eq!(o.limit, None);
    assert_bounded("a million fields", data.len(), &o);
}

#[test]
fn sequence_points_listing_millions_of_capture_threads_stay_bounded() {
    let mut w = writer();
    let threads = 1_000_000u64; // 12 MB: one block under the 16 MiB block limit
    let mut sp = Vec::new();
    sp.extend_from_slice(&1_000_600i64.to_le_bytes());
    sp.extend_from_slice(&(threads as u32).to_le_bytes());
    for t in 0..threads {
        sp.extend_from_slice(&(t + 1).to_le_bytes());
        sp.extend_from_slice(&1u32.to_le_bytes());
    }
    w.block("SPBlock", &sp);
    let data = w.end();
    let o = analyze(&data);
    assert!(o.stream_ok);
    assert_bounded("capture threads", data.len(), &o);
    // The map holds at most MAX_CAPTURE_THREADS entries.
    assert!(o.peak < 16 * MIB + MAX_CAPTURE_THREADS * 64, "{}", o.peak);
}

#[test]
fn samples_interleaved_with_rundown_records_stay_near_linear() {
    // 20,000 distinct sampled stacks, each followed by a rundown method record: the
    // rundown's "was this range sampled?" must not rebuild an index per record.
    let mut w = writer();
    let mut seq = 0;
    for i in 0..20_000u64 {
        let id = 1 + i as u32;
        stack_block(&mut w, id, &[vec![0x10_0000 + i * 0x100]]);
        sample_block(&mut w, &[(5, id)], &mut seq);
        let mut payload = Vec::new();
        payload.extend_from_slice(&(i + 1).to_le_bytes()); // MethodID
        payload.extend_from_slice(&1u64.to_le_bytes()); // ModuleID
        payload.extend_from_slice(&(0x10_0000 + i * 0x100).to_le_bytes()); // start
        payload.extend_from_slice(&0x80u32.to_le_bytes()); // size
        payload.extend_from_slice(&0u32.to_le_bytes()); // token
        payload.extend_from_slice(&0u32.to_le_bytes()); // flags
        utf16z(&mut payload, "N");
        utf16z(&mut payload, "M");
        utf16z(&mut payload, "void  ()");
        payload.extend_from_slice(&0u16.to_le_bytes()); // ClrInstanceID
        let mut blobs = Vec::new();
        seq += 1;
        let h = Header {
            metadata_id: 2,
            sequence_number: seq,
            capture_thread: 1,
            thread: 1,
            timestamp: 2_000_000,
            ..Header::default()
        };
        Compressor::default().blob(&mut blobs, &h, &payload, false);
        w.block("EventBlock", &event_block_content(1, 0, 0, &blobs));
    }
    let data = w.end();
    let t = std::time::Instant::now();
    let o = analyze(&data);
    eprintln!(
        "interleaved: {} bytes in {:.3} s",
        data.len(),
        t.elapsed().as_secs_f64()
    );
    assert!(o.stream_ok);
    assert_eq!(o.samples, 20_000);
    assert_bounded("interleaved rundown", data.len(), &o);
}

/// The families of many distinct stacks, each sampled once (those that took `dsipc report`
/// of a 41.8 MB file to 453 MiB): 12,000 stacks of 100 addresses none shares (the sampled
/// addresses are what grows), and 1.4 million stacks of two addresses out of 28,000 (the
/// per-stack tables are). One stack block and one block of samples per `per_block` stacks,
/// no sequence point. And [`thread_stack_pairs`].
fn many_distinct_stacks() -> Vec<(&'static str, Vec<u8>, u64)> {
    // (name, stacks, stacks per block, the addresses of stack n)
    type Family = (&'static str, u64, u64, fn(u64) -> Vec<u64>);
    let families: [Family; 2] = [
        ("distinct-addresses", 12_000, 100, |n| {
            (0..100).map(|f| 0x10_0000 + (n * 100 + f) * 0x10).collect()
        }),
        ("small-stacks", 1_400_000, 1000, |n| {
            vec![0x10_0000 + (n % 50) * 0x10, 0x20_0000 + (n / 50) * 0x10]
        }),
    ];
    families
        .iter()
        .map(|&(name, count, per_block, stack)| {
            let mut w = writer();
            let mut seq = 0;
            let mut id = 1u32;
            for b in 0..count / per_block {
                let stacks: Vec<Vec<u64>> =
                    (0..per_block).map(|s| stack(b * per_block + s)).collect();
                stack_block(&mut w, id, &stacks);
                let samples: Vec<(u64, u32)> = (0..per_block as u32).map(|s| (5, id + s)).collect();
                sample_block(&mut w, &samples, &mut seq);
                id += per_block as u32;
            }
            (name, w.end(), count)
        })
        .chain([
            thread_stack_pairs("thread-stack-pairs", 2),
            thread_stack_pairs("pairs-unknown-kind", 7),
        ])
        .collect()
}

/// Every one of 1,000 small stacks sampled once on each of 2,000 threads, samples of `kind`:
/// 2 million distinct (thread, stack) pairs, each a sample of a few bytes but a counter of
/// its own (the work is the product of threads and stacks).
fn thread_stack_pairs(name: &'static str, kind: u32) -> (&'static str, Vec<u8>, u64) {
    const STACKS: u32 = 1000;
    const THREADS: u64 = 2000;
    let mut w = writer();
    let stacks: Vec<Vec<u64>> = (0..u64::from(STACKS))
        .map(|n| vec![0x10_0000 + n * 0x10, 0x20_0000])
        .collect();
    stack_block(&mut w, 1, &stacks);
    let mut seq = 0;
    for t in 0..THREADS {
        let samples: Vec<(u64, u32)> = (0..STACKS).map(|s| (100 + t, 1 + s)).collect();
        samples_of_kind(&mut w, &samples, &mut seq, kind);
    }
    (name, w.end(), THREADS * u64::from(STACKS))
}

/// Many distinct stacks ([`many_distinct_stacks`]): the last window, the interned table, the
/// counters and the finished profile stay within the bound.
#[test]
fn many_distinct_stacks_stay_bounded() {
    for (name, data, count) in many_distinct_stacks() {
        let o = analyze(&data);
        assert!(o.stream_ok);
        assert_eq!(o.samples, count);
        assert_bounded(name, data.len(), &o);
    }
}

/// Writes [`many_distinct_stacks`] as `NAME.nettrace` files into `$DSIPC_HOSTILE_OUT`, for
/// scripts/bench-report-rss.sh (which measures `dsipc report`'s peak RSS on them).
#[test]
#[ignore]
fn write_many_distinct_stacks_files() {
    let dir = std::env::var_os("DSIPC_HOSTILE_OUT").expect("DSIPC_HOSTILE_OUT");
    for (name, data, _) in many_distinct_stacks() {
        let path = std::path::Path::new(&dir).join(format!("{}.nettrace", name));
        std::fs::write(&path, &data).unwrap();
    }
}
