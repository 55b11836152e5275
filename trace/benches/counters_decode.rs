//! Counter samples decoded per second on one core, through the counters `Decoder` (owned
//! `CounterEvent`s, the API the CLI calls), from the recorded streams of
//! `tests/data/counters`; and, for the parse underneath every analysis, `LiveCounter`'s
//! events per second over `tests/data/nettrace/net8.0.4-busy.nettrace` (what `dsipc trace`
//! runs on every byte). Uses only what every tree since the decoder's has, so that
//! `scripts/bench-counters-decode.sh` runs this same file in an older tree beside this one.
//! Prints figures; asserts nothing.
//!
//!     cargo bench -p dsipc-trace --bench counters_decode [-- SECONDS]

use std::path::PathBuf;
use std::time::{Duration, Instant};

use dsipc_trace::counters::{CounterEvent, CounterSet, CountersConfig, Decoder, MetricsSession};
use dsipc_trace::LiveCounter;

/// Bytes handed to the decoder at a time (a socket read of a live session).
const CHUNK: usize = 16 << 10;

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
    let mut config = CountersConfig::new(
        CounterSet::parse("System.Runtime,MyMeter").unwrap(),
        1.0,
        Some(8),
    );
    config.metrics = Some(MetricsSession::Shared {
        client_id: "abc".into(),
    });
    // One pass decodes every stream once (each with a new decoder, as a session does).
    let pass = || {
        let mut samples = 0u64;
        let mut bytes = 0u64;
        for s in &streams {
            let mut d = Decoder::new(&config);
            let mut count = |e: CounterEvent| {
                if let CounterEvent::Sample(s) = e {
                    samples += 1;
                    drop(s);
                }
            };
            for c in s.chunks(CHUNK) {
                d.feed(c, &mut count);
            }
            d.finish(&mut count);
            bytes += s.len() as u64;
        }
        (samples, bytes)
    };
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
        "counters Decoder (owned CounterEvents), {} streams of tests/data/counters x {} passes, {:.2} s on one thread: {:.0} samples/s per core ({:.2} us per sample, {:.1} MB/s)",
        streams.len(),
        passes,
        t,
        samples as f64 / t,
        t * 1e6 / samples as f64,
        bytes as f64 / t / 1e6
    );

    let busy =
        std::fs::read(dir.join("../nettrace/net8.0.4-busy.nettrace")).expect("the busy capture");
    let start = Instant::now();
    let (mut events, mut passes) = (0u64, 0u64);
    while start.elapsed() < budget {
        let mut live = LiveCounter::new();
        for c in busy.chunks(CHUNK) {
            let _ = live.feed(c);
        }
        let _ = live.finish();
        events += live.counts().events;
        passes += 1;
    }
    let t = start.elapsed().as_secs_f64();
    println!(
        "LiveCounter over net8.0.4-busy x {} passes, {:.2} s on one thread: {:.1} ns per event ({:.0} MB/s)",
        passes,
        t,
        t * 1e9 / events as f64,
        (busy.len() as u64 * passes) as f64 / t / 1e6
    );
}
