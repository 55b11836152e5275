//! `dsipc trace` of a 1 GiB stream (the real binary, release build): what parsing the stream
//! live costs over not parsing it.
//!
//!     cargo bench -p dsipc-cli --bench trace_live
//!
//! The fake runtime (dsipc-testkit) streams, as fast as the socket takes it:
//! - a valid nettrace stream of about 1 GiB: the committed .NET 8 capture's blocks
//!   (`tests/data/nettrace/net8.0.4-busy.nettrace`: metadata once, then its event, stack and
//!   sequence-point blocks again and again, re-framed with the right padding), so `trace`
//!   parses every event (counts, samples, lost events) as it writes them;
//! - the same bytes with the magic at its start spoiled: the parser refuses the first bytes
//!   and `trace` only writes (parsing stops at the first error). Both are served from memory
//!   the same way, so only the parsing differs.
//!
//! `-o /dev/null` leaves the disk out, which makes the parsing's share look as large as it
//! can. The two cases alternate, 5 runs each (this VM's speed drifts); the median wall time
//! of each (whole process) is printed.
//!
//! Then the parser alone: `trace`'s `LiveCounter` over the same bytes held in memory, fed in
//! 1 MiB slices on this thread (no socket, no other thread): its CPU time per GiB and per
//! event, beside what a 5% share of the unparsed run's wall time leaves it.
#![cfg(target_os = "linux")]

#[path = "../tests/common/mod.rs"]
mod common;

use std::time::Duration;

use dsipc_testkit::{Config, StreamSpec, TempDir};

const TARGET: usize = 1 << 30;
const RUNS: usize = 5;

fn main() {
    let valid = common::nettrace_stream(TARGET);
    let mut spoiled = valid.clone();
    spoiled[..8].copy_from_slice(b"Notrace!");
    let stream: &'static [u8] = Box::leak(valid.into_boxed_slice());
    let spoiled: &'static [u8] = Box::leak(spoiled.into_boxed_slice());
    println!(
        "trace_live: {} bytes of nettrace ({:.2} GiB)",
        stream.len(),
        stream.len() as f64 / (1u64 << 30) as f64
    );
    let (mut parsed, mut unparsed) = (Vec::new(), Vec::new());
    for _ in 0..RUNS {
        parsed.push(run(StreamSpec::content(stream), true, parsed.is_empty()));
        unparsed.push(run(StreamSpec::content(spoiled), false, false));
    }
    let (parsed, unparsed) = (median(parsed), median(unparsed));
    let gbs = |secs: f64| stream.len() as f64 / secs / 1e9;
    println!(
        "trace_live: parsed live   {:.3} s  {:.2} GB/s  (median of {})",
        parsed,
        gbs(parsed),
        RUNS
    );
    println!(
        "trace_live: not parsed    {:.3} s  {:.2} GB/s  (median of {})",
        unparsed,
        gbs(unparsed),
        RUNS
    );
    println!(
        "trace_live: parsing costs {:+.1}% (target: at most 5%)",
        (parsed / unparsed - 1.0) * 100.0
    );
    parser_alone(stream, unparsed);
}

/// `LiveCounter` over `stream` in memory, on this thread: the parsing's own cost.
fn parser_alone(stream: &[u8], unparsed: f64) {
    let mut best = f64::MAX;
    let mut events = 0;
    for _ in 0..RUNS {
        let t = std::time::Instant::now();
        let mut counter = dsipc_trace::LiveCounter::new();
        for slice in stream.chunks(1 << 20) {
            counter.feed(slice).expect("the stream parses");
        }
        counter.finish().expect("the stream ends whole");
        best = best.min(t.elapsed().as_secs_f64());
        events = counter.counts().events;
    }
    println!(
        "trace_live: the parser alone (LiveCounter, in memory, one thread, best of {}): {:.3} s \
         for {} events, {:.1} ns per event, {:.2} GB/s; 5% of the unparsed run's {:.3} s is \
         {:.3} s, {:.1} ns per event",
        RUNS,
        best,
        events,
        best * 1e9 / events as f64,
        stream.len() as f64 / best / 1e9,
        unparsed,
        unparsed * 0.05,
        unparsed * 0.05 * 1e9 / events as f64
    );
}

fn median(mut times: Vec<f64>) -> f64 {
    times.sort_by(|a, b| a.partial_cmp(b).unwrap());
    times[times.len() / 2]
}

/// Wall time in seconds of `dsipc trace` against a fake runtime streaming `spec`.
fn run(spec: StreamSpec, valid: bool, show: bool) -> f64 {
    {
        let dir = TempDir::new("dsipc-bench-trace-live").unwrap();
        let _rt = common::fake(&dir, Config::new().like_net8_0_4().stream(spec));
        let pid = common::me();
        let r = common::dsipc_limit(
            &[
                "trace",
                &pid,
                "-o",
                "/dev/null",
                "--duration",
                "600",
                "--tmpdir",
                common::s(dir.path()),
            ],
            Duration::from_secs(600),
        );
        let line = r
            .stderr
            .lines()
            .find(|l| l.starts_with("dsipc: received"))
            .unwrap_or("")
            .to_string();
        assert!(
            line.contains("received"),
            "trace failed ({:?}): {}",
            r.code,
            r.stderr
        );
        // The valid stream parses to its end (its events counted, no warning); the
        // pattern's does not.
        assert_eq!(!line.contains(": 0 events"), valid, "{}", line);
        assert_eq!(r.stderr.contains("did not parse"), !valid, "{}", r.stderr);
        if show {
            println!("trace_live: {}", line);
        }
        r.took.as_secs_f64()
    }
}
