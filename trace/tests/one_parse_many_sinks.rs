//! One parse feeding many analyses: a `TraceDispatcher` hands each item of one stream to a
//! `CounterSink`, a `TraceAnalyzer` (the profile) and `LostEvents` together, and each gets
//! exactly what its own separate parse of the same bytes gives (the counters `Decoder`, a
//! `TraceStream` feeding an analyzer), however the stream is sliced.

use std::path::PathBuf;

use dsipc_trace::counters::{
    CounterEvent, CounterSet, CounterSink, CountersConfig, DecodeStats, Decoder, MetricsSession,
};
use dsipc_trace::{LostEvents, TraceAnalyzer, TraceDispatcher, TraceStream};

fn read(dir: &str, name: &str) -> Vec<u8> {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/data")
        .join(dir)
        .join(name);
    std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {}", path.display(), e))
}

fn config() -> CountersConfig {
    let mut c = CountersConfig::new(
        CounterSet::parse("System.Runtime,MyMeter").unwrap(),
        1.0,
        Some(8),
    );
    c.metrics = Some(MetricsSession::Shared {
        client_id: "abc".into(),
    });
    c
}

/// What the profile analysis found, comparable.
#[derive(Debug, PartialEq)]
struct ProfileResult {
    events: u64,
    samples: u64,
    lost: u64,
    methods: usize,
    providers: String,
    limit: String,
    profile: String,
}

fn profile_result(a: TraceAnalyzer) -> ProfileResult {
    ProfileResult {
        events: a.events(),
        samples: a.samples(),
        lost: a.lost_events(),
        methods: a.methods(),
        providers: format!("{:?}", a.provider_counts()),
        limit: format!("{:?}", a.limit_error()),
        profile: format!("{:?}", a.finish_profile(false)),
    }
}

/// Everything the analyses give for one stream.
#[derive(Debug, PartialEq)]
struct Results {
    counters: Vec<CounterEvent>,
    stats: DecodeStats,
    profile: ProfileResult,
    lost: u64,
    end: Result<(), String>,
}

/// Two separate parses of `bytes` fed in slices of `slice` bytes: the counters decoder, and
/// a stream feeding an analyzer.
fn separately(bytes: &[u8], slice: usize) -> Results {
    let mut decoder = Decoder::new(&config());
    let mut counters = Vec::new();
    for c in bytes.chunks(slice) {
        decoder.feed(c, &mut |e| counters.push(e));
    }
    decoder.finish(&mut |e| counters.push(e));
    let mut stats = decoder.stats().clone();
    stats.bytes = 0;

    let mut stream = TraceStream::new();
    let mut analyzer = TraceAnalyzer::new();
    let mut lost = LostEvents::new();
    let mut each = |item: &dsipc::nettrace::Item<'_>| {
        analyzer.on_item(item);
        match item {
            dsipc::nettrace::Item::Event(e) => {
                lost.on_event(e.capture_thread_id, e.sequence_number)
            }
            dsipc::nettrace::Item::SequencePoint(sp) => {
                for t in sp.threads() {
                    lost.on_sequence_point(t.thread_id, t.sequence_number);
                }
            }
            _ => {}
        }
    };
    for c in bytes.chunks(slice) {
        stream.feed(c, &mut each).expect("parses");
    }
    let end = stream.finish(&mut each).map_err(|e| e.to_string());
    Results {
        counters,
        stats,
        profile: profile_result(analyzer),
        lost: lost.lost(),
        end,
    }
}

/// One parse of `bytes` in slices of `slice` bytes feeding the three sinks together.
fn together(bytes: &[u8], slice: usize) -> Results {
    let mut dispatcher = TraceDispatcher::new();
    let mut counters = CounterSink::new(&config());
    let mut analyzer = TraceAnalyzer::new();
    let mut lost = LostEvents::new();
    let mut out = Vec::new();
    for c in bytes.chunks(slice) {
        dispatcher
            .feed(c, &mut (&mut counters, &mut analyzer, &mut lost))
            .expect("parses");
        counters.release_latest();
        out.extend(counters.drain().map(|e| e.to_counter_event()));
    }
    let end = dispatcher
        .finish(&mut (&mut counters, &mut analyzer, &mut lost))
        .map_err(|e| e.to_string());
    out.extend(counters.drain().map(|e| e.to_counter_event()));
    Results {
        counters: out,
        stats: counters.stats().clone(),
        profile: profile_result(analyzer),
        lost: lost.lost(),
        end,
    }
}

/// Slices of 1 to `small` bytes, a few larger ones and the whole stream.
fn slices(small: usize, len: usize) -> Vec<usize> {
    let mut v: Vec<usize> = (1..=small).collect();
    v.extend([97, 1000, 4096, 65_536, len]);
    v
}

fn check(bytes: &[u8], small: usize, what: &str) -> Results {
    let whole = separately(bytes, bytes.len());
    assert_eq!(whole.end, Ok(()), "{}", what);
    for slice in slices(small, bytes.len()) {
        let t = together(bytes, slice);
        assert_eq!(t, whole, "{}: one parse in slices of {} bytes", what, slice);
    }
    whole
}

#[test]
fn one_stream_feeds_counters_and_a_profile_as_two_parses_would_at_every_slice_size() {
    // CPU samples and counters in one stream (.NET 8, 3.5 s).
    let bytes = read("counters", "net8.0.4-counters-and-cpu-samples.nettrace");
    let r = check(&bytes, 48, "net8 counters and CPU samples");
    assert!(r.profile.samples > 5000, "{} samples", r.profile.samples);
    let cpu = r
        .counters
        .iter()
        .filter(|e| matches!(e, CounterEvent::Sample(s) if s.name == "cpu-usage"))
        .count();
    assert!(cpu >= 2, "{} cpu-usage samples", cpu);
    // On the trace's clock: wall-clock times of the capture (November 2026).
    for e in &r.counters {
        if let CounterEvent::Sample(s) = e {
            let secs = s.timestamp.duration_since(std::time::UNIX_EPOCH).unwrap();
            assert!(
                (1_790_000_000..1_810_000_000).contains(&secs.as_secs()),
                "{:?}",
                s
            );
        }
    }
    assert!(r.stats.samples > 50, "{:?}", r.stats);

    // Counters and Meter data (.NET 8), and System.Runtime's EventCounters (Core 3.1).
    let bytes = read("counters", "net8.0.4-system-runtime-and-meter.nettrace");
    let r = check(&bytes, 64, "net8 counters");
    assert!(r.counters.len() > 20, "{} counter events", r.counters.len());
    assert!(r.profile.events > 50, "{} events", r.profile.events);
    let bytes = read("counters", "netcore3.1.23-system-runtime.nettrace");
    let r = check(&bytes, 32, "core 3.1 counters");
    assert!(r.counters.len() > 20, "{} counter events", r.counters.len());

    // A CPU capture: the profile has samples, the counters sink sees no counter event.
    let bytes = read("nettrace", "net8.0.4-busy.nettrace");
    let r = check(&bytes, 8, "net8 CPU");
    assert!(r.profile.samples > 50, "{} samples", r.profile.samples);
    assert!(r.counters.is_empty());
}

/// The sinks see a cut stream's end as its separate parses do.
#[test]
fn one_stream_feeds_counters_and_a_profile_to_a_cut_end() {
    let bytes = read("counters", "net8.0.4-system-runtime-and-meter.nettrace");
    let cut = &bytes[..bytes.len() * 2 / 3];
    let whole = separately(cut, cut.len());
    assert!(whole.end.is_err());
    assert!(whole.stats.truncated);
    for slice in [1, 7, 4096, cut.len()] {
        assert_eq!(together(cut, slice), whole, "slices of {}", slice);
        // The end alone, without any analysis: the same decision.
        let mut d = TraceDispatcher::new();
        for c in cut.chunks(slice) {
            d.feed(c, &mut ()).expect("parses");
        }
        assert_eq!(d.finish(&mut ()).map_err(|e| e.to_string()), whole.end);
    }
    let mut d = TraceDispatcher::new();
    d.feed(&bytes, &mut ()).expect("parses");
    assert_eq!(d.finish(&mut ()), Ok(()));
}
