//! Golden traces from the real runtimes (tests/data/nettrace, recorded by
//! tests/runtime/capture_nettrace.py from host.py --busy: .NET 8.0.4 and .NET Core 3.1.23,
//! SampleProfiler + runtime GC/loader/JIT/contention/exception events, no rundown) parse to
//! their end marker, and their CLR events decode to what the busy loop does: GCs that start
//! and stop, FormatExceptions thrown, allocation ticks, jitted methods whose code ranges hold
//! the managed samples' leaf IPs.

mod common;

use std::collections::HashMap;

use common::nettrace::{drive, repo, Chunking};
use dsipc::nettrace::clr::{self, ClrEvent, ClrProvider, SampleKind};
use dsipc::nettrace::{
    Format, Item, MetadataRecord, NettraceParser, Status, DEFAULT_MAX_BLOCK_SIZE,
};

#[derive(Default, Debug)]
struct Seen {
    samples: [u64; 3],
    gc_start: u64,
    gc_stop: u64,
    heap_stats: u64,
    exceptions: u64,
    format_exceptions: u64,
    alloc_ticks: u64,
    methods: u64,
    resolved_samples: u64,
    lost: u64,
}

fn check(rt: &str) -> Seen {
    let data =
        std::fs::read(repo().join(format!("tests/data/nettrace/{}-busy.nettrace", rt))).unwrap();
    let mut p = NettraceParser::new();
    let mut at = 0;
    let mut seen = Seen::default();
    let mut metas: HashMap<u32, MetadataRecord<'_>> = HashMap::new();
    let mut ptr = 0;
    let mut stacks: HashMap<u32, Vec<u64>> = HashMap::new();
    let mut ranges: Vec<(u64, u64)> = Vec::new();
    let mut leaves: Vec<u64> = Vec::new();
    let mut seq: HashMap<u64, u32> = HashMap::new();
    loop {
        let h = p
            .handle_input(&data[at..])
            .unwrap_or_else(|e| panic!("{}: {}", rt, e));
        at += h.consumed;
        match h.status {
            Status::Event(Item::Trace(t)) => {
                assert_eq!(t.format, Format::V4);
                assert_eq!(t.pointer_size, 8);
                assert!(t.process_id > 0 && t.number_of_processors > 0);
                assert_eq!(t.sampling_interval_ns, 1_000_000);
                assert_eq!(t.qpc_frequency, 1_000_000_000, "{}: Linux QPC is in ns", rt);
                ptr = t.pointer_size;
            }
            Status::Event(Item::Metadata(m)) => {
                metas.insert(m.metadata_id, m.record().unwrap());
            }
            Status::Event(Item::Stacks(s)) => {
                for st in s.iter() {
                    stacks.insert(st.id, st.ips().collect());
                }
            }
            Status::Event(Item::SequencePoint(_)) => stacks.clear(),
            Status::Event(Item::Event(e)) => {
                if let Some(last) = seq.insert(e.capture_thread_id, e.sequence_number) {
                    seen.lost += u64::from(e.sequence_number.wrapping_sub(last).wrapping_sub(1));
                }
                let m = &metas[&e.metadata_id];
                let prov = match ClrProvider::from_name(&m.provider_name) {
                    Some(p) => p,
                    None => continue,
                };
                let ev = clr::decode(prov, m.event_id, m.version, ptr, e.payload)
                    .unwrap_or_else(|err| panic!("{}: {} v{}: {}", rt, m.event_id, m.version, err));
                match ev {
                    ClrEvent::ThreadSample(s) => {
                        let k = match s.kind {
                            SampleKind::External => 1,
                            SampleKind::Managed => 2,
                            _ => 0,
                        };
                        seen.samples[k] += 1;
                        let st = stacks
                            .get(&e.stack_id)
                            .unwrap_or_else(|| panic!("{}: stack {}", rt, e.stack_id));
                        if k == 2 {
                            leaves.extend(st.first().copied());
                        }
                    }
                    ClrEvent::GcStart(g) => {
                        seen.gc_start += 1;
                        assert!(g.depth.unwrap() <= 2 && g.gc_type.is_some());
                        // GC.Collect() is an induced GC (reason 1).
                        assert!(g.reason < 20);
                    }
                    ClrEvent::GcStop(g) => {
                        seen.gc_stop += 1;
                        assert!(g.depth <= 2);
                    }
                    ClrEvent::GcHeapStats(h) => {
                        seen.heap_stats += 1;
                        assert!(h.generation_size.iter().sum::<u64>() > 0);
                        assert!(h.generation_size_4.is_some() == (m.version >= 2));
                    }
                    ClrEvent::ExceptionThrown(x) => {
                        seen.exceptions += 1;
                        if x.exception_type.eq_str("System.FormatException") {
                            seen.format_exceptions += 1;
                        }
                        assert!(x.exception_hresult.is_some());
                    }
                    ClrEvent::GcAllocationTick(a) => {
                        seen.alloc_ticks += 1;
                        assert!(a.allocation_amount > 0);
                        assert!(a.type_name.map_or(false, |t| !t.is_empty()));
                    }
                    ClrEvent::MethodLoadVerbose(mv) => {
                        seen.methods += 1;
                        assert!(mv.method_size > 0 && !mv.method_name.is_empty());
                        ranges.push((
                            mv.method_start_address,
                            mv.method_start_address + u64::from(mv.method_size),
                        ));
                    }
                    _ => {}
                }
            }
            Status::Event(_) => {}
            Status::Done => break,
            Status::Partial { needed } => panic!("{}: truncated: needs {} at {}", rt, needed, at),
        }
    }
    p.handle_eof().unwrap();
    for ip in leaves {
        if ranges.iter().any(|&(s, e)| ip >= s && ip < e) {
            seen.resolved_samples += 1;
        }
    }
    // The same items in any chunking.
    let whole = drive(&data, Chunking::Whole, DEFAULT_MAX_BLOCK_SIZE);
    let bytes = drive(&data, Chunking::Fixed(1), DEFAULT_MAX_BLOCK_SIZE);
    assert!(whole.done && bytes.done && whole.items == bytes.items);
    seen
}

#[test]
fn real_runtime_captures_decode() {
    for rt in ["net8.0.4", "netcore3.1.23"] {
        let s = check(rt);
        eprintln!("{}: {:?}", rt, s);
        assert!(s.samples[1] + s.samples[2] > 0, "{}: no samples", rt);
        assert_eq!(s.samples[0], 0);
        assert!(
            s.gc_start > 0 && s.gc_start.abs_diff(s.gc_stop) <= 1,
            "{}",
            rt
        );
        assert!(s.heap_stats > 0, "{}", rt);
        assert!(
            s.format_exceptions > 0,
            "{}: the busy loop's FormatException",
            rt
        );
        assert!(s.methods > 0 && s.alloc_ticks > 0, "{}", rt);
        // Some managed samples stop in jitted code that a Method/LoadVerbose range covers
        // (the rest are in ReadyToRun code, which only rundown describes).
        assert!(s.resolved_samples > 0, "{}", rt);
        assert_eq!(s.lost, 0, "{}", rt);
    }
}
