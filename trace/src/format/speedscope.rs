//! speedscope's JSON file format (<https://www.speedscope.app/file-format-schema.json>): one
//! sampled profile per thread, stacks root first, weights in milliseconds: each thread starts
//! where its first sample was taken and spans to its last (the events' timestamps), its
//! samples weighing that span over their number.

use std::io::{self, Write};

use crate::Profile;

use super::{json_string, Selection, Timeline};

/// Writes `profile` as a speedscope file named `name`, placed in time by `timeline`.
pub fn write(
    profile: &Profile,
    sel: Selection,
    name: &str,
    timeline: &Timeline,
    out: &mut dyn Write,
) -> io::Result<()> {
    write!(
        out,
        "{{\"$schema\":\"https://www.speedscope.app/file-format-schema.json\",\"shared\":{{\"frames\":["
    )?;
    for (i, f) in profile.frames.iter().enumerate() {
        if i > 0 {
            out.write_all(b",")?;
        }
        write!(out, "{{\"name\":{}}}", json_string(f))?;
    }
    out.write_all(b"]},\"profiles\":[")?;
    let mut first_profile = true;
    for (t, time) in profile.threads.iter().zip(&timeline.threads) {
        let interval_ms = time.weight_ns / 1e6;
        let start_ms = time.start_ns / 1e6;
        let samples: Vec<_> = t.samples.iter().filter(|s| sel.keeps(s.kind)).collect();
        if samples.is_empty() {
            continue;
        }
        if !first_profile {
            out.write_all(b",")?;
        }
        first_profile = false;
        let total: u64 = samples.iter().map(|s| s.count).sum();
        write!(
            out,
            "{{\"type\":\"sampled\",\"name\":{},\"unit\":\"milliseconds\",\"startValue\":{},\"endValue\":{},\"samples\":[",
            json_string(&format!("Thread ({})", t.thread_id)),
            start_ms,
            start_ms + total as f64 * interval_ms
        )?;
        for (i, s) in samples.iter().enumerate() {
            if i > 0 {
                out.write_all(b",")?;
            }
            out.write_all(b"[")?;
            for (j, f) in profile.stacks[s.stack as usize].iter().rev().enumerate() {
                if j > 0 {
                    out.write_all(b",")?;
                }
                write!(out, "{}", f)?;
            }
            out.write_all(b"]")?;
        }
        out.write_all(b"],\"weights\":[")?;
        for (i, s) in samples.iter().enumerate() {
            if i > 0 {
                out.write_all(b",")?;
            }
            write!(out, "{}", s.count as f64 * interval_ms)?;
        }
        out.write_all(b"]}")?;
    }
    write!(
        out,
        "],\"name\":{},\"activeProfileIndex\":0,\"exporter\":\"dsipc {}\"}}",
        json_string(name),
        env!("CARGO_PKG_VERSION")
    )?;
    out.write_all(b"\n")
}
