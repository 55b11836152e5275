//! Nettrace core benchmarks (issue target in parentheses):
//! - framing + event header decode of real traces, every item yielded, payloads untouched
//!   (>= 1 GB/s): the 30 MB 32-bit HeartRateMonitor sample (rundown-heavy, ~107,000 method
//!   events) and the 4.8 MB .NET Core 3.0 sample (~105,000 events, SampleProfiler + runtime)
//! - the same plus CLR decoding of every runtime/rundown/SampleProfiler event
//!
//! The samples come from the shared folder (see tests/common/nettrace.rs); criterion prints
//! the throughput in GiB/s (1 GiB/s = 1.074 GB/s).

use criterion::{black_box, criterion_group, criterion_main, Criterion, Throughput};
use dsipc::nettrace::clr::{self, ClrProvider};
use dsipc::nettrace::{Item, NettraceParser, Status};

#[allow(dead_code)]
#[path = "../tests/common/nettrace.rs"]
mod support;

/// Parses a whole trace held in memory; returns (items, events).
fn parse(data: &[u8]) -> (u64, u64) {
    let mut p = NettraceParser::new();
    let mut at = 0;
    let (mut items, mut events) = (0u64, 0u64);
    loop {
        match p.handle_input(&data[at..]) {
            Ok(h) => {
                at += h.consumed;
                match h.status {
                    Status::Event(Item::Event(e)) => {
                        events += 1;
                        black_box(&e);
                    }
                    Status::Event(i) => {
                        items += 1;
                        black_box(&i);
                    }
                    _ => return (items, events),
                }
            }
            Err(_) => return (items, u64::MAX),
        }
    }
}

/// Parses and decodes every CLR event (metadata kept in a flat table of borrowed records).
fn parse_and_decode(data: &[u8]) -> u64 {
    let mut p = NettraceParser::new();
    let mut at = 0;
    let mut table: Vec<Option<(ClrProvider, u32, u32)>> = vec![None; 1024];
    let mut ptr = 8;
    let mut decoded = 0;
    while let Ok(h) = p.handle_input(&data[at..]) {
        at += h.consumed;
        match h.status {
            Status::Event(Item::Trace(t)) => ptr = t.pointer_size,
            Status::Event(Item::Metadata(m)) => {
                let m = m.record().unwrap();
                let id = m.metadata_id as usize;
                if id >= table.len() {
                    table.resize(id + 1, None);
                }
                table[id] =
                    ClrProvider::from_name(&m.provider_name).map(|p| (p, m.event_id, m.version));
            }
            Status::Event(Item::Event(e)) => {
                if let Some(Some((prov, id, v))) = table.get(e.metadata_id as usize) {
                    if let Ok(ev) = clr::decode(*prov, *id, *v, ptr, e.payload) {
                        black_box(&ev);
                        decoded += 1;
                    }
                }
            }
            Status::Event(_) => {}
            _ => break,
        }
    }
    decoded
}

fn framing(c: &mut Criterion) {
    // The project's own .NET 8 capture always; the PerfView samples where shared/ is (a
    // visible SKIPPED line otherwise).
    let own = support::repo().join("tests/data/nettrace/net8.0.4-busy.nettrace");
    let mut traces = vec![(
        "net8.0.4-busy.nettrace",
        "net8_busy_216KB",
        Some(std::fs::read(own).unwrap()),
    )];
    for (name, short) in [
        ("HeartRateMonitor.10068.nettrace", "heartrate_30MB"),
        (
            "eventpipe-dotnetcore3.0-win-x64-objver4.nettrace",
            "netcore3.0_4.8MB",
        ),
    ] {
        traces.push((name, short, support::sample(name)));
    }
    for (name, short, data) in traces {
        let data = match data {
            Some(d) => d,
            None => continue,
        };
        let (items, events) = parse(&data);
        assert!(
            items > 0 && events > 0 && events != u64::MAX,
            "{} does not parse",
            name
        );
        let mut group = c.benchmark_group("nettrace");
        group.throughput(Throughput::Bytes(data.len() as u64));
        group.sample_size(20);
        group.bench_function(format!("framing_and_headers/{}", short), |b| {
            b.iter(|| parse(black_box(&data)))
        });
        group.bench_function(format!("with_clr_decode/{}", short), |b| {
            b.iter(|| parse_and_decode(black_box(&data)))
        });
        group.finish();
    }
}

criterion_group!(benches, framing);
criterion_main!(benches);
