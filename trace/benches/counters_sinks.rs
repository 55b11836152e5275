//! Counter samples decoded per second on one core through a `TraceDispatcher` feeding a
//! `CounterSink` (samples sharing their series), from the recorded streams of
//! `tests/data/counters`; and one parse feeding counters and a profile together against two
//! separate parses of the same stream. `counters_decode` is the `Decoder` beside it;
//! `scripts/bench-counters-decode.sh` runs both, and the `Decoder` of an older tree.
//! Prints figures; asserts nothing.
//!
//!     cargo bench -p dsipc-trace --bench counters_sinks [-- SECONDS] [-- WORD]
//!
//! (WORD: only the measurements whose label holds it.)

use std::path::PathBuf;
use std::time::{Duration, Instant};

use dsipc_trace::counters::{
    CounterEvent, CounterSet, CounterSink, CountersConfig, Decoder, MetricsSession, SeriesEvent,
};
use dsipc_trace::{TraceAnalyzer, TraceDispatcher, TraceStream};

/// Bytes handed over at a time (a socket read of a live session).
const CHUNK: usize = 16 << 10;

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

/// Runs `pass` (returning samples and bytes) for `secs`; prints the rate. Skipped unless
/// `what` holds the word given on the command line, if any.
fn measure(what: &str, secs: f64, mut pass: impl FnMut() -> (u64, u64)) {
    let only = std::env::args()
        .skip(1)
        .find(|a| a.parse::<f64>().is_err() && !a.starts_with('-'));
    if only.map_or(false, |w| !what.contains(&w)) {
        return;
    }
    pass();
    let budget = Duration::from_secs_f64(secs);
    let start = Instant::now();
    let (mut samples, mut bytes, mut passes) = (0u64, 0u64, 0u64);
    while start.elapsed() < budget {
        let (s, b) = pass();
        samples += s;
        bytes += b;
        passes += 1;
    }
    let t = start.elapsed().as_secs_f64();
    println!(
        "{}, x {} passes, {:.2} s on one thread: {:.0} samples/s per core ({:.2} us per sample, {:.1} MB/s)",
        what,
        passes,
        t,
        samples as f64 / t,
        t * 1e6 / samples as f64,
        bytes as f64 / t / 1e6
    );
}

fn main() {
    let secs: f64 = std::env::args()
        .skip(1)
        .find_map(|a| a.parse().ok())
        .unwrap_or(2.0);
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../tests/data/counters");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .expect("tests/data/counters")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().map_or(false, |e| e == "nettrace"))
        // Counters sessions' streams (not the one with CPU samples beside its counters).
        .filter(|p| !p.to_string_lossy().contains("cpu-samples"))
        .collect();
    files.sort();
    let streams: Vec<Vec<u8>> = files.iter().map(|p| std::fs::read(p).unwrap()).collect();
    let config = config();

    measure(
        &format!(
            "TraceDispatcher + CounterSink (SeriesSamples), {} streams of tests/data/counters",
            streams.len()
        ),
        secs,
        || {
            let mut samples = 0u64;
            let mut bytes = 0u64;
            for s in &streams {
                let mut d = TraceDispatcher::new();
                let mut sink = CounterSink::new(&config);
                for c in s.chunks(CHUNK) {
                    let _ = d.feed(c, &mut sink);
                    sink.release_latest();
                    for e in sink.drain() {
                        if let SeriesEvent::Sample(s) = e {
                            samples += 1;
                            drop(s);
                        }
                    }
                }
                let _ = d.finish(&mut sink);
                samples += sink
                    .drain()
                    .filter(|e| matches!(e, SeriesEvent::Sample(_)))
                    .count() as u64;
                bytes += s.len() as u64;
            }
            (samples, bytes)
        },
    );

    // Counters and a profile of one stream: one parse, or two.
    let mut cpu = 0;
    let both = std::fs::read(dir.join("net8.0.4-counters-and-cpu-samples.nettrace"))
        .expect("the counters-and-CPU capture");
    measure(
        "counters and a profile of net8.0.4-counters-and-cpu-samples, two parses (Decoder; TraceStream + TraceAnalyzer)",
        secs,
        || {
            let mut samples = 0u64;
            let mut d = Decoder::new(&config);
            for c in both.chunks(CHUNK) {
                d.feed(c, &mut |e| {
                    if let CounterEvent::Sample(_) = e {
                        samples += 1
                    }
                });
            }
            d.finish(&mut |_| {});
            let mut stream = TraceStream::new();
            let mut analyzer = TraceAnalyzer::new();
            for c in both.chunks(CHUNK) {
                let _ = stream.feed(c, |item| {
                    analyzer.on_item(item);
                });
            }
            let _ = stream.finish(|item| {
                analyzer.on_item(item);
            });
            cpu = analyzer.finish_profile(false).total_samples();
            (samples, both.len() as u64)
        },
    );
    measure(
        "counters and a profile of net8.0.4-counters-and-cpu-samples, one parse (TraceDispatcher: CounterSink + TraceAnalyzer)",
        secs,
        || {
            let mut samples = 0u64;
            let mut d = TraceDispatcher::new();
            let mut sink = CounterSink::new(&config);
            let mut analyzer = TraceAnalyzer::new();
            for c in both.chunks(CHUNK) {
                let _ = d.feed(c, &mut (&mut sink, &mut analyzer));
                sink.release_latest();
                samples += sink.drain().count() as u64;
            }
            let _ = d.finish(&mut (&mut sink, &mut analyzer));
            samples += sink.drain().count() as u64;
            cpu = analyzer.finish_profile(false).total_samples();
            (samples, both.len() as u64)
        },
    );
    println!(
        "(each pass: {} CPU samples in the profile besides the counters)",
        cpu
    );
}
