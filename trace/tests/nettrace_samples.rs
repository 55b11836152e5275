//! dsipc_trace over the public sample traces (`../shared/data/nettrace`, unzipped
//! into target/ at test time; never committed): every trace parses to its end through the
//! core parser and the TraceAnalyzer, counts add up, frames resolve, and time-ordered
//! delivery orders events.

use std::fs;

use dsipc::nettrace::{Item, NettraceParser, Status};
use dsipc_trace::{TimeOrder, TraceAnalyzer, UNRESOLVED_FRAME};

#[path = "../../tests/testkit/src/samples.rs"]
mod samples;

fn sample(name: &str) -> Option<Vec<u8>> {
    Some(fs::read(samples::sample(name)?).unwrap())
}

/// Feeds `data` through the parser in `chunk`-byte pieces (as a live stream arrives).
fn analyze(data: &[u8], chunk: usize, mut each: impl FnMut(&Item<'_>)) -> TraceAnalyzer {
    let mut p = NettraceParser::new();
    let mut a = TraceAnalyzer::new();
    let mut buf: Vec<u8> = Vec::new();
    let mut fed = 0;
    let mut start = 0;
    loop {
        let h = p.handle_input(&buf[start..]).unwrap();
        match h.status {
            Status::Event(item) => {
                a.on_item(&item);
                each(&item);
                start += h.consumed;
            }
            Status::Partial { .. } => {
                assert!(fed < data.len(), "stream ended early at {}", p.offset());
                buf.drain(..start);
                start = 0;
                let n = chunk.min(data.len() - fed);
                buf.extend_from_slice(&data[fed..fed + n]);
                fed += n;
            }
            Status::Done => break,
        }
    }
    assert_eq!(fed, data.len());
    a
}

#[test]
fn samples_parse_to_the_end_with_consistent_counts_and_resolved_frames() {
    // (file, has CPU samples)
    let cases = [
        ("eventpipe-dotnetcore3.0-win-x64-objver4.nettrace", true),
        ("eventpipe-dotnetcore5.0-win-x64-arraytypes.nettrace", false),
        (
            "eventpipe-dotnetcore6.0-win-x64-executioncheckpoints.nettrace",
            false,
        ),
        ("mixed_managed_external_samples.nettrace", true),
        ("only_managed_samples.nettrace", true),
        ("HeartRateMonitor.10068.nettrace", true),
    ];
    for (name, has_samples) in cases {
        let data = match sample(name) {
            Some(s) => s,
            None => return,
        };
        let mut events = 0u64;
        let a = analyze(&data, 1 << 20, |item| {
            if let Item::Event(_) = item {
                events += 1;
            }
        });
        assert_eq!(a.events(), events, "{}", name);
        assert_eq!(a.unknown_metadata_events(), 0, "{}", name);
        assert_eq!(a.bad_payloads(), 0, "{}", name);
        let per_provider: u64 = a.provider_counts().iter().map(|p| p.events).sum();
        assert_eq!(per_provider, events, "{}: {:?}", name, a.provider_counts());
        assert!(a.info().is_some());
        let samples = a.samples();
        let profile = a.finish_profile(false);
        assert_eq!(profile.total_samples(), samples, "{}", name);
        if has_samples {
            assert!(samples > 0, "{}", name);
            let resolved = profile
                .frames
                .iter()
                .filter(|f| f.as_str() != UNRESOLVED_FRAME && f.contains('!'))
                .count();
            assert!(resolved > 0, "{}: no resolved frame", name);
            assert!(profile.distinct_ips > profile.unresolved_ips, "{}", name);
        }
    }
}

#[test]
fn mixed_sample_kinds_and_managed_only() {
    let data = match sample("mixed_managed_external_samples.nettrace") {
        Some(s) => s,
        None => return,
    };
    let all = analyze(&data, 1 << 20, |_| {}).finish_profile(false);
    let managed = analyze(&data, 1 << 20, |_| {}).finish_profile(true);
    assert!(managed.total_samples() > 0);
    assert!(managed.total_samples() < all.total_samples());
    let only = match sample("only_managed_samples.nettrace") {
        Some(s) => s,
        None => return,
    };
    let a = analyze(&only, 1 << 20, |_| {}).finish_profile(false);
    let m = analyze(&only, 1 << 20, |_| {}).finish_profile(true);
    assert_eq!(a.total_samples(), m.total_samples());
}

#[test]
fn small_chunks_give_the_same_profile() {
    let data = match sample("only_managed_samples.nettrace") {
        Some(s) => s,
        None => return,
    };
    let whole = analyze(&data, data.len(), |_| {});
    let small = analyze(&data, 4093, |_| {});
    assert_eq!(whole.events(), small.events());
    assert_eq!(whole.provider_counts(), small.provider_counts());
    let (pw, ps) = (whole.finish_profile(false), small.finish_profile(false));
    assert_eq!(pw.frames, ps.frames);
    assert_eq!(pw.stacks, ps.stacks);
    assert_eq!(pw.total_samples(), ps.total_samples());
}

#[test]
fn time_order_releases_at_sorted_events_and_sequence_points() {
    for name in [
        "eventpipe-dotnetcore3.0-win-x64-objver4.nettrace",
        "mixed_managed_external_samples.nettrace",
    ] {
        let data = match sample(name) {
            Some(s) => s,
            None => return,
        };
        let mut order: TimeOrder<u64> = TimeOrder::new();
        let mut released: Vec<i64> = Vec::new();
        let mut pushed = 0u64;
        let mut max_held = 0usize;
        let mut raw_inversions = 0u64;
        let mut last_raw = i64::MIN;
        analyze(&data, 1 << 20, |item| match item {
            Item::Event(e) => {
                if e.timestamp < last_raw {
                    raw_inversions += 1;
                }
                last_raw = e.timestamp;
                order.push(e.timestamp, pushed);
                pushed += 1;
                max_held = max_held.max(order.len());
                if e.is_sorted {
                    order.release_until(e.timestamp, |t, _| released.push(t));
                }
            }
            Item::SequencePoint(_) => order.release_all(|t, _| released.push(t)),
            _ => {}
        });
        order.release_all(|t, _| released.push(t));
        assert_eq!(released.len() as u64, pushed, "{}", name);
        assert!(
            released.windows(2).all(|w| w[0] <= w[1]),
            "{}: released out of order",
            name
        );
        // The raw stream interleaves threads (so ordering did something), and the buffer
        // held far fewer events than the trace has.
        assert!(raw_inversions > 0, "{}", name);
        assert!((max_held as u64) < pushed, "{}", name);
    }
}
