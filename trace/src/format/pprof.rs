//! pprof: a gzipped `profile.proto` (github.com/google/pprof/proto/profile.proto), encoded
//! by prost from the hand-written messages below (only the fields dsipc fills).

use std::io::{self, Write};

use crate::Profile;
use prost::Message;

use super::Selection;

#[derive(Clone, PartialEq, Message)]
struct PProfile {
    #[prost(message, repeated, tag = "1")]
    sample_type: Vec<ValueType>,
    #[prost(message, repeated, tag = "2")]
    sample: Vec<Sample>,
    #[prost(message, repeated, tag = "4")]
    location: Vec<Location>,
    #[prost(message, repeated, tag = "5")]
    function: Vec<Function>,
    #[prost(string, repeated, tag = "6")]
    string_table: Vec<String>,
    #[prost(int64, tag = "9")]
    time_nanos: i64,
    #[prost(int64, tag = "10")]
    duration_nanos: i64,
    #[prost(message, optional, tag = "11")]
    period_type: Option<ValueType>,
    #[prost(int64, tag = "12")]
    period: i64,
    #[prost(int64, tag = "14")]
    default_sample_type: i64,
}

#[derive(Clone, PartialEq, Message)]
struct ValueType {
    #[prost(int64, tag = "1")]
    r#type: i64,
    #[prost(int64, tag = "2")]
    unit: i64,
}

#[derive(Clone, PartialEq, Message)]
struct Sample {
    #[prost(uint64, repeated, tag = "1")]
    location_id: Vec<u64>,
    #[prost(int64, repeated, tag = "2")]
    value: Vec<i64>,
    #[prost(message, repeated, tag = "3")]
    label: Vec<Label>,
}

#[derive(Clone, PartialEq, Message)]
struct Label {
    #[prost(int64, tag = "1")]
    key: i64,
    #[prost(int64, tag = "2")]
    str: i64,
    #[prost(int64, tag = "3")]
    num: i64,
}

#[derive(Clone, PartialEq, Message)]
struct Location {
    #[prost(uint64, tag = "1")]
    id: u64,
    #[prost(message, repeated, tag = "4")]
    line: Vec<Line>,
}

#[derive(Clone, PartialEq, Message)]
struct Line {
    #[prost(uint64, tag = "1")]
    function_id: u64,
}

#[derive(Clone, PartialEq, Message)]
struct Function {
    #[prost(uint64, tag = "1")]
    id: u64,
    #[prost(int64, tag = "2")]
    name: i64,
    #[prost(int64, tag = "3")]
    system_name: i64,
}

struct Strings {
    table: Vec<String>,
}

impl Strings {
    fn add(&mut self, s: &str) -> i64 {
        self.table.push(s.to_string());
        self.table.len() as i64 - 1
    }
}

/// Writes `profile` as gzipped pprof: two sample values (`samples/count`, `cpu/nanoseconds`),
/// one location and one function per frame, a `thread` label per sample.
pub fn write(
    profile: &Profile,
    sel: Selection,
    timeline: &super::Timeline,
    time_nanos: i64,
    out: &mut dyn Write,
) -> io::Result<()> {
    let mut strings = Strings {
        table: vec![String::new()],
    };
    let samples_s = strings.add("samples");
    let count_s = strings.add("count");
    let cpu_s = strings.add("cpu");
    let ns_s = strings.add("nanoseconds");
    let thread_s = strings.add("thread");
    let kind_s = strings.add("kind");
    let managed_s = strings.add("managed");
    let external_s = strings.add("external");
    let other_s = strings.add("other");
    let mut p = PProfile {
        sample_type: vec![
            ValueType {
                r#type: samples_s,
                unit: count_s,
            },
            ValueType {
                r#type: cpu_s,
                unit: ns_s,
            },
        ],
        period_type: Some(ValueType {
            r#type: cpu_s,
            unit: ns_s,
        }),
        period: timeline.interval_ns as i64,
        time_nanos,
        default_sample_type: 0,
        ..PProfile::default()
    };
    // Function and location ids: frame index + 1 (0 is not an id in pprof).
    for (i, name) in profile.frames.iter().enumerate() {
        let name = strings.add(name);
        p.function.push(Function {
            id: i as u64 + 1,
            name,
            system_name: name,
        });
        p.location.push(Location {
            id: i as u64 + 1,
            line: vec![Line {
                function_id: i as u64 + 1,
            }],
        });
    }
    for (t, time) in profile.threads.iter().zip(&timeline.threads) {
        for s in &t.samples {
            if !sel.keeps(s.kind) {
                continue;
            }
            let kind = match s.kind {
                crate::SampleKind::Managed => managed_s,
                crate::SampleKind::External => external_s,
                _ => other_s,
            };
            p.sample.push(Sample {
                location_id: profile.stacks[s.stack as usize]
                    .iter()
                    .map(|&f| u64::from(f) + 1)
                    .collect(),
                value: vec![s.count as i64, (s.count as f64 * time.weight_ns) as i64],
                label: vec![
                    Label {
                        key: thread_s,
                        str: 0,
                        num: t.thread_id as i64,
                    },
                    Label {
                        key: kind_s,
                        str: kind,
                        num: 0,
                    },
                ],
            });
        }
    }
    // The events' time span (dotnet-trace's speedscope is placed in time the same way).
    p.duration_nanos = timeline.duration_ns as i64;
    p.string_table = strings.table;
    let bytes = p.encode_to_vec();
    let mut gz = flate2::write::GzEncoder::new(out, flate2::Compression::default());
    gz.write_all(&bytes)?;
    gz.finish()?;
    Ok(())
}
