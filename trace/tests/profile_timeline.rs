//! Profiles are placed in time by the sample events' timestamps: the committed .NET 8 and
//! .NET Core 3.1 CPU captures (0.5 s sessions, `tests/runtime/capture_nettrace.py`) give a
//! timeline about as long as the session, a sampling interval near the runtime's 1 ms, and
//! speedscope threads whose weights fill exactly their [startValue, endValue] span.

mod common_captures;
use common_captures::profile_of;

use std::path::PathBuf;

use dsipc_trace::format::{ProfileFormat, ProfileMeta, Selection};
use dsipc_trace::Profile;

fn profile(name: &str) -> (Profile, ProfileMeta) {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/data/nettrace")
        .join(name);
    let bytes = std::fs::read(&path).expect("the committed capture");
    profile_of(&bytes, name, None)
}

/// The numbers after `"key":` in `json`, in order.
fn numbers(json: &str, key: &str) -> Vec<f64> {
    json.split(&format!("\"{}\":", key))
        .skip(1)
        .map(|rest| {
            let end = rest
                .find(|c: char| !(c.is_ascii_digit() || c == '.' || c == '-' || c == 'e'))
                .unwrap_or(rest.len());
            rest[..end].parse().unwrap()
        })
        .collect()
}

#[test]
fn profile_timeline_follows_the_event_timestamps() {
    for name in ["net8.0.4-busy.nettrace", "netcore3.1.23-busy.nettrace"] {
        let (profile, meta) = profile(name);
        assert!(profile.total_samples() > 20, "{}", name);
        let t = meta.timeline(&profile);
        // A 0.5 s session (the runtime starts sampling a little after the session).
        assert!(
            (0.2e9..1.0e9).contains(&t.duration_ns),
            "{}: {} ns",
            name,
            t.duration_ns
        );
        // The interval as measured (a thread is not sampled every 1 ms while the runtime
        // is busy with GCs: the busy host's threads show about 3 to 8 ms).
        assert!(
            (0.5e6..50e6).contains(&t.interval_ns),
            "{}: {}",
            name,
            t.interval_ns
        );
        assert!(t.start_offset_ns >= 0, "{}", name);

        let mut json = Vec::new();
        ProfileFormat::Speedscope
            .write(&profile, Selection::default(), &meta, &mut json)
            .unwrap();
        let json = String::from_utf8(json).unwrap();
        let starts = numbers(&json, "startValue");
        let ends = numbers(&json, "endValue");
        assert_eq!(starts.len(), ends.len());
        for (s, e) in starts.iter().zip(&ends) {
            assert!(*s >= 0.0 && e > s, "{}: [{}, {}]", name, s, e);
            assert!(
                *e <= t.duration_ns / 1e6 + 1e-6,
                "{}: {} past the end",
                name,
                e
            );
        }
        // Threads are not all pinned to time 0: the first sample of some came later.
        assert!(starts.iter().any(|&s| s > 0.0), "{}: {:?}", name, starts);
        // Each profile's weights add up to its span.
        for profile in json.split("\"type\":\"sampled\"").skip(1) {
            let s = numbers(profile, "startValue")[0];
            let e = numbers(profile, "endValue")[0];
            let w = profile.split("\"weights\":[").nth(1).unwrap();
            let w = &w[..w.find(']').unwrap()];
            let sum: f64 = w.split(',').map(|x| x.parse::<f64>().unwrap()).sum();
            assert!(
                ((e - s) - sum).abs() < 1e-3 * (e - s).max(1.0),
                "{} {} {}",
                s,
                e,
                sum
            );
        }
    }
}
