//! speedscope's JSON file format (<https://www.speedscope.app/file-format-schema.json>): one
//! sampled profile per thread, stacks root first, weights in milliseconds: each thread starts
//! where its first sample was taken and spans to its last (the events' timestamps), its
//! samples weighing that span over their number.

use std::io::{self, Write};

use serde::{Serialize, Serializer};

use crate::Profile;

use super::{write_json, Selection, Timeline};

/// speedscope's `SerializedFile` (the fields dsipc fills, in the order it writes them).
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct File<'a> {
    #[serde(rename = "$schema")]
    schema: &'static str,
    shared: Shared<'a>,
    profiles: Vec<Sampled<'a>>,
    name: &'a str,
    active_profile_index: u32,
    exporter: String,
}

/// `shared`: the frames every profile indexes.
#[derive(Serialize)]
struct Shared<'a> {
    frames: Vec<Frame<'a>>,
}

/// A `Frame`.
#[derive(Serialize)]
struct Frame<'a> {
    name: &'a str,
}

/// A `SampledProfile`: one thread.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Sampled<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    name: String,
    unit: &'static str,
    start_value: f64,
    end_value: f64,
    samples: Vec<RootFirst<'a>>,
    weights: Vec<f64>,
}

/// A stack (leaf first in the profile) written root first.
struct RootFirst<'a>(&'a [u32]);

impl Serialize for RootFirst<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_seq(self.0.iter().rev())
    }
}

/// Writes `profile` as a speedscope file named `name`, placed in time by `timeline`.
pub fn write(
    profile: &Profile,
    sel: Selection,
    name: &str,
    timeline: &Timeline,
    out: &mut dyn Write,
) -> io::Result<()> {
    let mut profiles = Vec::new();
    for (t, time) in profile.threads.iter().zip(&timeline.threads) {
        let interval_ms = time.weight_ns / 1e6;
        let start_ms = time.start_ns / 1e6;
        let samples: Vec<_> = t.samples.iter().filter(|s| sel.keeps(s.kind)).collect();
        if samples.is_empty() {
            continue;
        }
        let total: u64 = samples.iter().map(|s| s.count).sum();
        profiles.push(Sampled {
            kind: "sampled",
            name: format!("Thread ({})", t.thread_id),
            unit: "milliseconds",
            start_value: start_ms,
            end_value: start_ms + total as f64 * interval_ms,
            samples: samples
                .iter()
                .map(|s| RootFirst(&profile.stacks[s.stack as usize]))
                .collect(),
            weights: samples
                .iter()
                .map(|s| s.count as f64 * interval_ms)
                .collect(),
        });
    }
    let file = File {
        schema: "https://www.speedscope.app/file-format-schema.json",
        shared: Shared {
            frames: profile.frames.iter().map(|f| Frame { name: f }).collect(),
        },
        profiles,
        name,
        active_profile_index: 0,
        exporter: format!("dsipc {}", env!("CARGO_PKG_VERSION")),
    };
    write_json(&mut *out, &file)?;
    out.write_all(b"\n")
}
