//! The counters decoder over real captures (tests/data/counters, recorded from .NET 8.0.4
//! and .NET Core 3.1.23 hosts; see its README), and over damaged copies of them.

use std::path::PathBuf;

use dsipc_trace::counters::{
    CounterEvent, CounterKind, CounterSet, CountersConfig, Decoder, MetricsSession, Sample, Source,
};

fn capture(name: &str) -> Vec<u8> {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/data/counters")
        .join(name);
    std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {}", path.display(), e))
}

fn config(list: &str, metrics: Option<MetricsSession>) -> CountersConfig {
    let mut c = CountersConfig::new(CounterSet::parse(list).unwrap(), 1.0, Some(8));
    c.metrics = metrics;
    c
}

fn shared() -> Option<MetricsSession> {
    Some(MetricsSession::Shared {
        client_id: "abc".into(),
    })
}

/// Decodes `bytes` fed in chunks of `chunk` bytes.
fn decode(bytes: &[u8], config: &CountersConfig, chunk: usize) -> (Vec<CounterEvent>, Decoder) {
    let mut d = Decoder::new(config);
    let mut out = Vec::new();
    for c in bytes.chunks(chunk) {
        d.feed(c, &mut |e| out.push(e));
    }
    d.finish(&mut |e| out.push(e));
    (out, d)
}

fn samples(events: &[CounterEvent]) -> Vec<&Sample> {
    events
        .iter()
        .filter_map(|e| match e {
            CounterEvent::Sample(s) => Some(s),
            _ => None,
        })
        .collect()
}

#[test]
fn net8_system_runtime_event_counters_and_meter_rate() {
    let bytes = capture("net8.0.4-system-runtime-and-meter.nettrace");
    let cfg = config("System.Runtime,MyMeter", shared());
    let (events, d) = decode(&bytes, &cfg, bytes.len());
    let st = d.stats();
    assert_eq!(st.stream_error, None);
    assert_eq!(st.malformed, 0);
    assert_eq!(st.bytes, bytes.len() as u64);
    let all = samples(&events);
    let cpu: Vec<_> = all
        .iter()
        .filter(|s| s.provider == "System.Runtime" && s.name == "cpu-usage")
        .collect();
    assert!(cpu.len() >= 2, "{} cpu-usage samples", cpu.len());
    assert_eq!(cpu[0].kind, CounterKind::Mean);
    assert_eq!(cpu[0].display_name, "CPU Usage");
    assert_eq!(cpu[0].unit, "%");
    assert_eq!(cpu[0].source, Source::EventCounter);
    let gen0 = all
        .iter()
        .find(|s| s.name == "gen-0-gc-count")
        .expect("gen-0-gc-count");
    assert_eq!(gen0.kind, CounterKind::Sum);
    let ws = all.iter().find(|s| s.name == "working-set").unwrap();
    assert!(
        ws.value > 1.0 && ws.value < 100_000.0,
        "working set {} MB",
        ws.value
    );
    // The Meter counter is incremented 50 times a second: full 1 s intervals carry ~50.
    let rates: Vec<f64> = all
        .iter()
        .filter(|s| s.provider == "MyMeter" && s.name == "requests")
        .map(|s| {
            assert_eq!(s.kind, CounterKind::Rate);
            assert_eq!(s.source, Source::Meter);
            assert_eq!(s.unit, "requests");
            s.value
        })
        .collect();
    assert!(rates.len() >= 2, "rates {:?}", rates);
    assert!(
        rates.iter().any(|r| (45.0..=55.0).contains(r)),
        "rates {:?}",
        rates
    );
    // Timestamps are wall-clock times of the capture (November 2026), in order.
    let t0 = cpu[0].timestamp;
    assert!(cpu[1].timestamp > t0);
    let secs = t0.duration_since(std::time::UNIX_EPOCH).unwrap().as_secs();
    assert!((1_700_000_000..2_000_000_000).contains(&secs), "{}", secs);

    // Byte-by-byte feeding gives the same samples.
    let (events1, _) = decode(&bytes, &cfg, 1);
    assert_eq!(events1, events);
    let (events7, _) = decode(&bytes, &cfg, 7);
    assert_eq!(events7, events);
}

/// A provider's first EventCounter samples are held a second for Meter data of the same
/// name (dotnet-counters' BufferDelaySecs); a driver gets them out when that second passed
/// by the clock, without waiting for the runtime's next publication.
#[test]
fn held_event_counter_samples_are_released_by_the_clock_without_more_data() {
    let bytes = capture("net8.0.4-system-runtime-and-meter.nettrace");
    let cfg = config("System.Runtime", shared());
    let mut d = Decoder::new(&cfg);
    let mut out = Vec::new();
    // Up to the first publication: its samples are held.
    let mut fed = 0;
    while d.held_until().is_none() {
        assert!(fed < bytes.len(), "nothing was ever held");
        let end = (fed + 64).min(bytes.len());
        d.feed(&bytes[fed..end], &mut |e| out.push(e));
        fed = end;
    }
    let due = d.held_until().unwrap();
    assert!(samples(&out).is_empty(), "{:?}", out);
    d.release_due(due - std::time::Duration::from_millis(1), &mut |e| {
        out.push(e)
    });
    assert!(samples(&out).is_empty(), "released early: {:?}", out);
    d.release_due(due + std::time::Duration::from_millis(1), &mut |e| {
        out.push(e)
    });
    assert!(
        samples(&out).iter().any(|s| s.name == "cpu-usage"),
        "{:?}",
        out
    );
    assert_eq!(d.held_until(), None);
}

#[test]
fn only_the_counters_asked_for() {
    let bytes = capture("net8.0.4-system-runtime-and-meter.nettrace");
    let cfg = config("System.Runtime[cpu-usage,gc-heap-size]", shared());
    let (events, d) = decode(&bytes, &cfg, 4096);
    let names: std::collections::BTreeSet<_> =
        samples(&events).iter().map(|s| s.name.clone()).collect();
    let want: std::collections::BTreeSet<_> = ["cpu-usage", "gc-heap-size"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    assert_eq!(names, want);
    assert!(d.stats().ignored > 0);
}

#[test]
fn other_sessions_are_ignored() {
    let bytes = capture("net8.0.4-meter-guid-session.nettrace");
    // Our session is SHARED: the capture's events belong to another session id.
    let (events, d) = decode(&bytes, &config("MyMeter", shared()), 1024);
    assert!(samples(&events).is_empty(), "{:?}", events);
    assert!(d.stats().ignored > 0);
    // With the capture's own session id they are ours.
    let own = Some(MetricsSession::Private {
        session_id: "5e0e2bd6-4a7f-4c0e-9d52-3d6a1e2f9b10".into(),
    });
    let (events, _) = decode(&bytes, &config("MyMeter", own), 1024);
    let got = samples(&events);
    assert!(!got.is_empty());
    assert!(got
        .iter()
        .all(|s| s.name == "requests" && s.kind == CounterKind::Rate));
}

#[test]
fn netcore31_system_runtime() {
    let bytes = capture("netcore3.1.23-system-runtime.nettrace");
    let (events, d) = decode(&bytes, &config("System.Runtime", None), 333);
    assert_eq!(d.stats().stream_error, None);
    assert_eq!(d.stats().malformed, 0);
    let all = samples(&events);
    assert!(all
        .iter()
        .any(|s| s.name == "cpu-usage" && s.kind == CounterKind::Mean));
    assert!(all
        .iter()
        .any(|s| s.name == "exception-count" && s.kind == CounterKind::Sum));
    assert!(all.iter().any(|s| s.name == "gc-heap-size"));
}

#[test]
fn damaged_streams_never_panic_and_are_reported() {
    let bytes = capture("net8.0.4-system-runtime-and-meter.nettrace");
    let cfg = config("System.Runtime,MyMeter", shared());
    // Cut anywhere: what precedes is decoded, nothing panics, and the end of input (through
    // the receive buffer's EOF) reports the stream as truncated, not as an error.
    for cut in (0..bytes.len()).step_by(97) {
        let (_, d) = decode(&bytes[..cut], &cfg, 512);
        assert!(d.stats().truncated, "cut at {}", cut);
        assert_eq!(d.stats().stream_error, None, "cut at {}", cut);
    }
    let (_, d) = decode(&bytes, &cfg, 512);
    assert!(!d.stats().truncated);
    // Flip bytes all over: errors are counted or reported, never a panic.
    let mut reported = 0;
    for (i, pos) in (40..bytes.len()).step_by(53).enumerate() {
        let mut b = bytes.clone();
        b[pos] ^= 0x5a ^ (i as u8);
        let (_, d) = decode(&b, &cfg, 4096);
        if d.stats().stream_error.is_some() || d.stats().malformed > 0 {
            reported += 1;
        }
    }
    assert!(reported > 0);
    // Garbage from the start is a stream error.
    let (events, d) = decode(b"not a nettrace stream at all, no", &cfg, 8);
    assert!(events.is_empty());
    assert!(d.stats().stream_error.is_some());
}

#[test]
fn random_mutations_and_chunkings_never_panic() {
    // A fixed-seed LCG: the same 1,500 damaged streams every run.
    let mut seed: u64 = 0x5eed_c0de_2026_1123;
    let mut next = move || {
        seed = seed
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        (seed >> 33) as usize
    };
    let captures = [
        capture("net8.0.4-system-runtime-and-meter.nettrace"),
        capture("netcore3.1.23-system-runtime.nettrace"),
        capture("net8.0.4-meter-guid-session.nettrace"),
    ];
    let cfg = config("System.Runtime,MyMeter", shared());
    for i in 0..1500 {
        let mut b = captures[i % 3].clone();
        for _ in 0..1 + next() % 8 {
            let at = next() % b.len();
            match next() % 3 {
                0 => b[at] = next() as u8,
                1 => {
                    let n = (next() % 16).min(b.len() - at);
                    b.drain(at..at + n);
                }
                _ => b.insert(at, next() as u8),
            }
            if b.is_empty() {
                break;
            }
        }
        let chunk = 1 + next() % 5000;
        let (events, d) = decode(&b, &cfg, chunk);
        // Whatever came out is well-formed.
        for s in samples(&events) {
            assert!(s.value.is_finite());
            assert!(!s.provider.is_empty());
        }
        assert_eq!(d.stats().bytes, b.len() as u64);
    }
}
