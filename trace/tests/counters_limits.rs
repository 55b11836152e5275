//! A runtime that ignores `MaxTimeSeries` and `MaxHistograms` (or announces hundreds of
//! thousands of tag sets) cannot grow a counters session without bound: the decoder hands
//! on the first series up to the caps, one notice per cap, and counts what it dropped; a
//! series whose name and tags are larger than `MAX_SERIES_TEXT` is malformed.

#[path = "../../tests/common/nettrace.rs"]
#[allow(dead_code)]
mod common;

use common::{event_block_content, utf16z, v4_metadata, Compressor, Header, V4Writer};
use dsipc_trace::counters::{
    CounterEvent, CounterSet, CountersConfig, Decoder, Notice, MAX_SERIES_TEXT,
};

const METRICS: &str = "System.Diagnostics.Metrics";
const GAUGE_FIELDS: [&str; 7] = [
    "sessionId",
    "meterName",
    "meterVersion",
    "instrumentName",
    "unit",
    "tags",
    "lastValue",
];
const HISTOGRAM_FIELDS: [&str; 7] = [
    "sessionId",
    "meterName",
    "meterVersion",
    "instrumentName",
    "unit",
    "tags",
    "quantiles",
];

/// V1 field descriptions: every field a string (TypeCode 18).
fn string_fields(names: &[&str]) -> Vec<u8> {
    let mut f = Vec::new();
    f.extend_from_slice(&(names.len() as u32).to_le_bytes());
    for n in names {
        f.extend_from_slice(&18u32.to_le_bytes());
        utf16z(&mut f, n);
    }
    f
}

/// A stream of Meter events: metadata 1 GaugeValuePublished, 2 HistogramValuePublished;
/// then one event per (metadata id, values) in blocks of 1000.
fn stream(events: &[(u32, [String; 7])]) -> Vec<u8> {
    let mut w = V4Writer::new(8, 77);
    let mut blobs = Vec::new();
    let mut c = Compressor::default();
    for (id, name, fields) in [
        (1, "GaugeValuePublished", &GAUGE_FIELDS),
        (2, "HistogramValuePublished", &HISTOGRAM_FIELDS),
    ] {
        let f = string_fields(fields);
        let m = v4_metadata(id, METRICS, id + 7, name, 0, Some(&f), &[]);
        c.blob(&mut blobs, &Header::default(), &m, false);
    }
    w.block("MetadataBlock", &event_block_content(1, 0, 0, &blobs));
    let mut seq = 0u32;
    for chunk in events.chunks(1000) {
        let mut blobs = Vec::new();
        let mut c = Compressor::default();
        for (id, values) in chunk {
            seq += 1;
            let mut payload = Vec::new();
            for v in values {
                utf16z(&mut payload, v);
            }
            let h = Header {
                metadata_id: *id,
                sequence_number: seq,
                capture_thread: 1,
                thread: 1,
                timestamp: 2_000_000 + i64::from(seq),
                ..Header::default()
            };
            c.blob(&mut blobs, &h, &payload, false);
        }
        w.block("EventBlock", &event_block_content(1, 0, 0, &blobs));
    }
    w.end()
}

fn values(instrument: &str, tags: &str, last: &str) -> [String; 7] {
    [
        "SHARED".into(),
        "M".into(),
        String::new(),
        instrument.into(),
        String::new(),
        tags.into(),
        last.into(),
    ]
}

fn decode(bytes: &[u8], series: u32, histograms: u32) -> (Vec<CounterEvent>, Decoder) {
    let mut config = CountersConfig::new(CounterSet::parse("M").unwrap(), 1.0, Some(8));
    config.max_time_series = series;
    config.max_histograms = histograms;
    let mut d = Decoder::new(&config);
    let mut out = Vec::new();
    for c in bytes.chunks(64 * 1024) {
        d.feed(c, &mut |e| out.push(e));
    }
    d.finish(&mut |e| out.push(e));
    (out, d)
}

#[test]
fn counters_series_and_histogram_caps_bound_a_hostile_runtime() {
    // 5,000 tag sets of one gauge, then the first ten again, then 50 histograms.
    let mut events: Vec<(u32, [String; 7])> = (0..5000)
        .map(|n| (1, values("g", &format!("k=v{}", n), "1")))
        .collect();
    events.extend((0..10).map(|n| (1, values("g", &format!("k=v{}", n), "2"))));
    events.extend((0..50).map(|n| (2, values(&format!("h{}", n), "", "0.5=1;0.95=2;0.99=3"))));
    let bytes = stream(&events);
    let (out, d) = decode(&bytes, 1000, 10);
    let samples = out
        .iter()
        .filter(|e| matches!(e, CounterEvent::Sample(_)))
        .count();
    let notices: Vec<&Notice> = out
        .iter()
        .filter_map(|e| match e {
            CounterEvent::Notice(n) => Some(n),
            _ => None,
        })
        .collect();
    // 1000 gauge series, their first ten again, then histograms: ten of them pass the
    // histogram cap but the series cap is full already.
    assert_eq!(samples, 1000 + 10, "{:?}", d.stats());
    assert_eq!(
        notices,
        vec![
            &Notice::TimeSeriesLimitReached,
            &Notice::HistogramLimitReached
        ]
    );
    assert_eq!(d.stats().over_limit, 4000 + 150, "{:?}", d.stats());

    // With room for series, the histogram cap alone: 10 histograms x 3 quantiles.
    let (out, d) = decode(&bytes, 100_000, 10);
    let quantiles = out
        .iter()
        .filter(|e| matches!(e, CounterEvent::Sample(s) if s.name.starts_with('h')))
        .count();
    assert_eq!(quantiles, 30);
    assert_eq!(d.stats().over_limit, 40 * 3);

    // A name past MAX_SERIES_TEXT is malformed, not a series.
    let huge = "x".repeat(MAX_SERIES_TEXT);
    let bytes = stream(&[(1, values(&huge, "", "1"))]);
    let (out, d) = decode(&bytes, 1000, 10);
    assert!(out.is_empty(), "{:?}", out.len());
    assert_eq!(d.stats().malformed, 1);
}
