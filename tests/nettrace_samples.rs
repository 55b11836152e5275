//! The six public sample traces (perfview's TraceEvent test inputs, from the shared folder)
//! parse to their end marker with no error, and what they hold is self-consistent: metadata
//! defined before use, sequence numbers per capture thread, stack ids defined in their
//! sequence-point window, SampleProfiler and method/module layouts decoding on every such
//! event, paired runtime events in equal numbers.

mod common;

use std::collections::{BTreeMap, HashMap, HashSet};

use common::nettrace::{samples, Rng};
use dsipc::nettrace::clr::{self, ClrEvent, ClrProvider, SampleKind};
use dsipc::nettrace::{
    Format, Item, MetadataRecord, NettraceParser, Status, TraceHeader, DEFAULT_MAX_BLOCK_SIZE,
};

#[derive(Default, Debug)]
struct Stats {
    events: u64,
    blocks: u64,
    per_event: BTreeMap<(String, u32, u32), u64>,
    lost: u64,
    samples_by_kind: [u64; 4],
    methods: u64,
    modules: u64,
    stacks_defined: u64,
    sequence_points: u64,
    clr_decoded: u64,
}

/// Size of a NUL-terminated UTF-16 string of `units` units.
fn z(units: usize) -> usize {
    2 * (units + 1)
}

fn check(name: &str, data: &[u8]) -> Stats {
    let mut p = NettraceParser::new();
    let mut at = 0usize;
    let mut st = Stats::default();
    let mut header: Option<TraceHeader<'_>> = None;
    let mut metas: HashMap<u32, MetadataRecord<'_>> = HashMap::new();
    // Per capture thread: last sequence number.
    let mut seq: HashMap<u64, u32> = HashMap::new();
    // Stack ids defined in the current window; the next id a block may start at.
    let mut window: HashSet<u32> = HashSet::new();
    let mut next_stack_id: Option<u32> = None;
    let mut last_sp_ts = i64::MIN;
    loop {
        let h = p
            .handle_input(&data[at..])
            .unwrap_or_else(|e| panic!("{}: {}", name, e));
        at += h.consumed;
        assert_eq!(p.offset(), at as u64);
        let item = match h.status {
            Status::Event(i) => i,
            Status::Done => break,
            Status::Partial { needed } => {
                panic!(
                    "{}: Partial {{ needed: {} }} at {} of {}",
                    name,
                    needed,
                    at,
                    data.len()
                )
            }
        };
        match item {
            Item::Trace(t) => {
                assert!(header.is_none());
                assert_eq!(t.format, Format::V4);
                assert!(t.pointer_size == 4 || t.pointer_size == 8);
                assert!(t.qpc_frequency > 0 && t.process_id > 0 && t.number_of_processors > 0);
                assert!((2019..=2021).contains(&t.sync_time_utc.year));
                assert_eq!(t.sampling_interval_ns, 1_000_000);
                header = Some(t);
            }
            Item::Block(b) => {
                st.blocks += 1;
                assert!(b.size as usize <= DEFAULT_MAX_BLOCK_SIZE);
                assert!(b.content_offset % 4 == 0, "{}: content not 4-aligned", name);
                if b.min_timestamp != 0 || b.max_timestamp != 0 {
                    assert!(b.min_timestamp <= b.max_timestamp);
                }
            }
            Item::Metadata(m) => {
                let m = m.record().unwrap();
                assert!(
                    !m.fields_malformed,
                    "{}: metadata {} malformed",
                    name, m.metadata_id
                );
                assert!(m.metadata_id > 0);
                let prev = metas.insert(m.metadata_id, m);
                assert!(
                    prev.is_none(),
                    "{}: metadata id {} defined twice",
                    name,
                    m.metadata_id
                );
            }
            Item::Event(e) => {
                st.events += 1;
                let m = metas
                    .get(&e.metadata_id)
                    .unwrap_or_else(|| panic!("{}: undefined metadata id {}", name, e.metadata_id));
                *st.per_event
                    .entry((m.provider_name.to_string(), m.event_id, m.version))
                    .or_default() += 1;
                // Sequence numbers: +1 per event of a capture thread; gaps are lost events.
                if let Some(last) = seq.insert(e.capture_thread_id, e.sequence_number) {
                    let gap = e.sequence_number.wrapping_sub(last);
                    assert!(
                        (1..1 << 20).contains(&gap),
                        "{}: sequence went from {} to {} on thread {:#x}",
                        name,
                        last,
                        e.sequence_number,
                        e.capture_thread_id
                    );
                    st.lost += u64::from(gap - 1);
                }
                if e.stack_id != 0 {
                    assert!(
                        window.contains(&e.stack_id),
                        "{}: stack id {} not defined in its window (event at {})",
                        name,
                        e.stack_id,
                        e.offset
                    );
                }
                assert!(
                    e.timestamp >= last_sp_ts,
                    "{}: event before its sequence point",
                    name
                );
                let ptr = header.unwrap().pointer_size;
                // Self-described events walk to the end of their payload.
                if !m.fields.is_empty() {
                    let mut walk = m.fields.walk(e.payload);
                    for f in &mut walk {
                        f.unwrap_or_else(|err| panic!("{}: field walk: {}", name, err));
                    }
                    assert_eq!(
                        walk.position(),
                        e.payload.len(),
                        "{}: fields do not cover the payload",
                        name
                    );
                }
                if let Some(provider) = ClrProvider::from_name(&m.provider_name) {
                    let ev = clr::decode(provider, m.event_id, m.version, ptr, e.payload)
                        .unwrap_or_else(|err| {
                            panic!(
                                "{}: {:?} {} v{}: {}",
                                name, provider, m.event_id, m.version, err
                            )
                        });
                    if !matches!(ev, ClrEvent::Unknown(_)) {
                        st.clr_decoded += 1;
                        assert_eq!(ev.name(), clr::event_name(provider, m.event_id));
                    }
                    check_clr(name, &ev, m.version, e.payload.len(), ptr, &mut st);
                }
            }
            Item::Stacks(s) => {
                if let Some(n) = next_stack_id {
                    assert_eq!(
                        s.first_id, n,
                        "{}: stack ids not contiguous in a window",
                        name
                    );
                }
                next_stack_id = Some(s.end_id());
                let mut count = 0;
                for stack in s.iter() {
                    assert!(s.contains(stack.id));
                    assert_eq!(stack.ips().count(), stack.len());
                    if !stack.is_empty() {
                        assert!(stack.ips().all(|ip| ip != 0), "{}: zero IP", name);
                    }
                    window.insert(stack.id);
                    count += 1;
                }
                assert_eq!(count, s.count);
                st.stacks_defined += u64::from(s.count);
            }
            Item::SequencePoint(sp) => {
                st.sequence_points += 1;
                assert!(sp.timestamp >= last_sp_ts);
                last_sp_ts = sp.timestamp;
                let mut n = 0;
                for t in sp.threads() {
                    n += 1;
                    // The point's number is a lower bound of what the thread attempted.
                    if let Some(&last) = seq.get(&t.thread_id) {
                        let ahead = t.sequence_number.wrapping_sub(last);
                        assert!(ahead < 1 << 20, "{}: sequence point behind thread", name);
                        st.lost += u64::from(ahead);
                    }
                    seq.insert(t.thread_id, t.sequence_number);
                }
                assert_eq!(n, sp.thread_count);
                // Stack ids restart after a sequence point.
                window.clear();
                next_stack_id = None;
            }
            Item::EndOfStream => {}
            other => panic!("{}: unexpected item {:?}", name, other),
        }
    }
    assert_eq!(at, data.len(), "{}: bytes after the end marker", name);
    assert!(p.is_done());
    p.handle_eof().unwrap();
    st
}

fn check_clr(name: &str, ev: &ClrEvent<'_>, version: u32, len: usize, ptr: u8, st: &mut Stats) {
    if let ClrEvent::ThreadSample(s) = ev {
        st.samples_by_kind[match s.kind {
            SampleKind::Error => 0,
            SampleKind::External => 1,
            SampleKind::Managed => 2,
            SampleKind::Unknown(_) => 3,
        }] += 1;
        assert_eq!(len, 4);
    }
    if let Some(m) = ev.as_method() {
        st.methods += 1;
        assert!(m.method_start_address != 0, "{}: method at 0", name);
        assert!(
            m.method_size > 0 && m.method_size < 16 << 20,
            "{}: method size {}",
            name,
            m.method_size
        );
        assert!(m
            .method_start_address
            .checked_add(u64::from(m.method_size))
            .is_some());
        assert!(m.method_id != 0 && m.module_id != 0);
        assert!(!m.method_name.is_empty(), "{}: method without a name", name);
        assert_eq!(m.clr_instance_id.is_some(), version >= 1);
        assert_eq!(m.rejit_id.is_some(), version >= 2);
        if ptr == 4 {
            assert!(m.method_start_address <= u64::from(u32::MAX));
        }
        // The layout covers the payload exactly.
        let expect = 8 * 3
            + 4 * 3
            + z(m.method_namespace.as_bytes().len() / 2)
            + z(m.method_name.as_bytes().len() / 2)
            + z(m.method_signature.as_bytes().len() / 2)
            + if version >= 1 { 2 } else { 0 }
            + if version >= 2 { 8 } else { 0 };
        assert_eq!(
            expect, len,
            "{}: method layout v{} does not cover the payload",
            name, version
        );
    }
    if let Some((id, path)) = ev.as_module() {
        st.modules += 1;
        assert!(id != 0);
        assert!(!path.is_empty(), "{}: module without an IL path", name);
    }
}

#[test]
fn every_sample_parses_to_its_end_consistently() {
    let all = samples();
    if all.is_empty() {
        return; // skipped, visibly (no shared/ beside this clone)
    }
    let mut all_samples = [0u64; 4];
    for (name, data) in all {
        let st = check(&name, &data);
        eprintln!(
            "{}: {} bytes, {} blocks, {} events ({} CLR-decoded), {} lost, {} stacks, {} sequence points, samples error/external/managed {:?}, {} method records, {} module records",
            name, data.len(), st.blocks, st.events, st.clr_decoded, st.lost, st.stacks_defined,
            st.sequence_points, &st.samples_by_kind[..3], st.methods, st.modules
        );
        for ((provider, id, version), n) in &st.per_event {
            eprintln!("    {:8} {} {} v{}", n, provider, id, version);
        }
        assert!(st.events > 0 && st.blocks > 0);
        assert_eq!(st.samples_by_kind[3], 0, "{}: unknown sample types", name);
        assert_eq!(st.samples_by_kind[0], 0, "{}: error samples", name);
        for (total, n) in all_samples.iter_mut().zip(st.samples_by_kind) {
            *total += n;
        }
        let count = |p: &str, id: u32| -> u64 {
            st.per_event
                .iter()
                .filter(|((pp, i, _), _)| pp == p && *i == id)
                .map(|(_, n)| *n)
                .sum()
        };
        const RT: &str = "Microsoft-Windows-DotNETRuntime";
        // Every EE suspension ends, and every restart ends; the runtime restarts at least as
        // often as it suspends (.NET Core 3.0 restarts a few times without a suspend event).
        let suspend = count(RT, clr::GC_SUSPEND_EE_START);
        let restart = count(RT, clr::GC_RESTART_EE_START);
        assert_eq!(suspend, count(RT, clr::GC_SUSPEND_EE_STOP), "{}", name);
        assert_eq!(restart, count(RT, clr::GC_RESTART_EE_STOP), "{}", name);
        assert!(restart >= suspend, "{}", name);
        // GCs started and ended (a trace may cut one in half).
        let (gs, ge) = (count(RT, clr::GC_START), count(RT, clr::GC_STOP));
        assert!(
            gs.abs_diff(ge) <= 1,
            "{}: {} GC starts, {} ends",
            name,
            gs,
            ge
        );
        match name.as_str() {
            "only_managed_samples.nettrace" => {
                assert!(
                    st.samples_by_kind[2] > 0 && st.samples_by_kind[1] == 0,
                    "{}",
                    name
                )
            }
            "mixed_managed_external_samples.nettrace" => {
                assert!(
                    st.samples_by_kind[1] > 0 && st.samples_by_kind[2] > 0,
                    "{}",
                    name
                )
            }
            _ => {}
        }
        // Rundown or live method records wherever samples need symbols.
        if st.samples_by_kind[2] > 0 {
            assert!(
                st.methods > 0 && st.modules > 0,
                "{}: samples without symbols",
                name
            );
        }
    }
    assert!(all_samples[1] > 0 && all_samples[2] > 0);
}

/// Feeding the stream in any chunking gives the same items: one byte at a time, the whole
/// file, and random chunk sizes (the 30 MB sample is fed in random chunks only: one byte at
/// a time it takes minutes in a debug build).
#[test]
fn chunking_does_not_change_the_items() {
    use common::nettrace::{drive, Chunking};
    for (name, data) in samples() {
        let whole = drive(&data, Chunking::Whole, DEFAULT_MAX_BLOCK_SIZE);
        assert!(whole.done && whole.error.is_none(), "{}", name);
        let mut cases = vec![
            Chunking::Random(0x9E37_79B9_7F4A_7C15 ^ data.len() as u64, 4096),
            Chunking::Random(7, 200_000),
        ];
        if data.len() < 5_000_000 {
            cases.push(Chunking::Fixed(1));
            cases.push(Chunking::Random(3, 64));
        }
        for c in cases {
            let d = drive(&data, c, DEFAULT_MAX_BLOCK_SIZE);
            assert!(
                d.done && d.error.is_none(),
                "{} {:?}: {:?}",
                name,
                c,
                d.error
            );
            assert_eq!(d.items.len(), whole.items.len(), "{} {:?}", name, c);
            assert!(d.items == whole.items, "{} {:?}: items differ", name, c);
            // `needed` stays within one block and its framing.
            assert!(
                d.max_needed <= 102_419 + 64,
                "{} {:?}: needed {}",
                name,
                c,
                d.max_needed
            );
        }
    }
}

/// A live reader gets each block's items as soon as the block's last byte has arrived: the
/// parser never waits for a byte past the current block.
#[test]
fn items_arrive_as_soon_as_their_block_is_complete() {
    for (name, data) in samples() {
        if data.len() > 5_000_000 {
            continue;
        }
        // Pass 1: where each block ends.
        let mut ends = Vec::new();
        let mut p = NettraceParser::new();
        let mut at = 0;
        let mut pending_end = None;
        loop {
            let h = p.handle_input(&data[at..]).unwrap();
            at += h.consumed;
            match h.status {
                Status::Event(Item::Block(b)) => {
                    if let Some(e) = pending_end.take() {
                        ends.push(e);
                    }
                    // V4: content, then the end tag.
                    pending_end = Some(b.content_offset as usize + b.size as usize + 1);
                }
                Status::Event(_) => {}
                Status::Done => break,
                Status::Partial { .. } => panic!("{}", name),
            }
        }
        ends.extend(pending_end);
        // Pass 2: feed exactly up to each block end; the block's items must all come out.
        let mut rng = Rng(ends.len() as u64);
        let mut p = NettraceParser::new();
        let mut at = 0;
        let mut blocks_done = 0;
        for (i, &end) in ends.iter().enumerate() {
            // Sample a few dozen blocks per file, always from a fresh state of this pass.
            let _ = rng.next();
            loop {
                let h = p.handle_input(&data[at..end]).unwrap();
                at += h.consumed;
                match h.status {
                    Status::Event(Item::Block(_)) => blocks_done += 1,
                    Status::Event(_) => {}
                    Status::Partial { needed } => {
                        // Everything of block i has been yielded; at most its end tag
                        // (1 byte) is left, and the parser asks for the next block only.
                        assert!(
                            end - at <= 1,
                            "{}: {} bytes of block {} not consumed",
                            name,
                            end - at,
                            i
                        );
                        assert!(needed > end - at);
                        break;
                    }
                    Status::Done => break,
                }
            }
            assert_eq!(blocks_done, i + 1, "{}: block {} not reported", name, i);
        }
    }
}
