//! A trace parsed while it arrives (what `dsipc trace` does as it writes the stream): a
//! `LiveProfile` and a `LiveCounter` fed in slices of any size agree on the counts, the end
//! of the stream and the errors with their offsets.

use dsipc_trace::format::{ProfileFormat, Selection};
use dsipc_trace::{LiveCounter, LiveCounts, LiveProfile};

mod common_captures;

/// The repository's .NET 8 capture.
fn busy_capture() -> Vec<u8> {
    common_captures::plain("net8.0.4-busy.nettrace")
}

#[test]
fn garbage_is_a_problem_naming_an_offset_and_later_bytes_are_only_counted() {
    let mut p = LiveProfile::new();
    let _ = p.feed(b"this is not a nettrace stream at all");
    let problem = p.error().expect("a problem").to_string();
    assert!(problem.contains("offset"), "{}", problem);
    let _ = p.feed(&[0u8; 1000]);
    assert_eq!(p.error().map(|e| e.to_string()), Some(problem));
    assert_eq!(p.counts(), LiveCounts::default());
    assert!(p.analyzer().info().is_none());
}

#[test]
fn bytes_after_the_end_are_an_error_and_a_cut_stream_is_truncated() {
    let bytes = busy_capture();
    // Bytes after the end-of-stream object are the parser's error, naming their offset,
    // in the same feed or a later one; a stream cut short is truncated.
    for split in [bytes.len(), bytes.len() - 1] {
        let mut p = LiveProfile::new();
        let _ = p.feed(&bytes[..split]);
        let _ = p.feed(&[bytes[bytes.len() - 1], 0xAA, 0xBB][split + 1 - bytes.len()..]);
        let _ = p.finish();
        let problem = p.error().expect("trailing bytes are a problem").to_string();
        assert!(
            problem.contains(&format!("offset {}", bytes.len())),
            "{}",
            problem
        );
        assert!(!p.error().unwrap().is_truncation());
    }
    let mut p = LiveProfile::new();
    p.feed(&bytes[..bytes.len() - 1]).unwrap();
    let e = p.finish().unwrap_err();
    assert!(e.is_truncation(), "{:?}", e);
}

/// `dsipc trace` without `--format` counts with a [`LiveCounter`]: the same counts, end
/// of stream and errors (with their offsets) as a [`LiveProfile`], however the stream is
/// cut (the parser reads in place and keeps only a cut object).
#[test]
fn the_counter_counts_as_the_profile_does() {
    let bytes = busy_capture();
    let mut spoiled = bytes.clone();
    spoiled[bytes.len() / 2] ^= 0x5A;
    let mut trailing = bytes.clone();
    trailing.extend_from_slice(&[0xAA, 0xBB]);
    let cut = &bytes[..bytes.len() * 2 / 3];
    for stream in [&bytes[..], &spoiled[..], &trailing[..], cut] {
        for slice in [1usize, 7, 4096, 65536, 100_003, stream.len()] {
            let (mut p, mut c) = (LiveProfile::new(), LiveCounter::new());
            for chunk in stream.chunks(slice) {
                assert_eq!(p.feed(chunk), c.feed(chunk));
                assert_eq!(p.counts(), c.counts());
            }
            assert_eq!(p.finish(), c.finish());
            assert_eq!(p.counts(), c.counts());
            assert_eq!(p.error(), c.error());
        }
    }
    let mut c = LiveCounter::new();
    c.feed(&bytes).unwrap();
    c.finish().unwrap();
    assert!(c.counts().samples > 0 && c.counts().events > c.counts().samples);
}

#[test]
fn an_empty_stream_is_truncated() {
    let mut p = LiveProfile::new();
    let e = p.finish().unwrap_err();
    assert!(e.to_string().contains("truncated"), "{:?}", e);
}

/// The committed .NET 8 capture fed in slices of every size gives the same counts and the
/// same folded profile (`dsipc trace --format folded`); the receive buffer holds at most a
/// partial block.
#[test]
fn slicing_does_not_change_the_profile_and_the_buffer_stays_small() {
    let bytes = busy_capture();
    let mut outputs = Vec::new();
    for slice in [1usize, 13, 4096, bytes.len()] {
        let mut p = LiveProfile::new();
        for chunk in bytes.chunks(slice) {
            p.feed(chunk).unwrap();
        }
        p.finish().unwrap();
        let counts = p.counts();
        assert!(counts.samples > 0 && counts.events > counts.samples);
        if slice < 4096 {
            let peak = p.stream().peak_buffer();
            assert!(peak <= 256 << 10, "{}", peak);
        }
        let (profile, meta) = p.into_profile("t");
        let sel = Selection {
            managed_only: false,
        };
        let mut folded = Vec::new();
        ProfileFormat::Folded
            .write(&profile, sel, &meta, &mut folded)
            .unwrap();
        outputs.push((counts, profile.summary(), folded));
    }
    assert!(!outputs[0].2.is_empty());
    for o in &outputs[1..] {
        assert_eq!(o, &outputs[0]);
    }
}
