//! `StackSnapshot` (the latest sample of every thread, as `dsipc stack` prints it) on the
//! committed CPU captures (tests/data/nettrace/regex-*.nettrace.gz: hosts spinning in Regex
//! backtracking, sampled with rundown): one entry per sampled thread, each the thread's
//! latest sample, its frames those of one of the profile's stacks of that thread (same
//! resolver), the Regex thread inside System.Text.RegularExpressions with MethodDef tokens.

mod common_captures;
use common_captures::capture;

use dsipc_trace::{
    Profile, StackFrame, StackSnapshot, TraceAnalyzer, TraceStream, NATIVE_FRAMES, UNRESOLVED_FRAME,
};

/// The stream fed in 4 KiB slices to one analyzer.
fn analyze(bytes: &[u8]) -> TraceAnalyzer {
    let mut stream = TraceStream::new();
    let mut analyzer = TraceAnalyzer::new();
    for chunk in bytes.chunks(4096) {
        stream
            .feed(chunk, |item| {
                analyzer.on_item(item);
            })
            .expect("parses");
    }
    stream
        .finish(|item| {
            analyzer.on_item(item);
        })
        .expect("ends with its end-of-stream object");
    analyzer
}

/// A profile stack's frame names with every run of unresolved frames as one
/// `[Native Frames]`, as the snapshot shows them.
fn collapsed(profile: &Profile, stack: u32) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for &f in &profile.stacks[stack as usize] {
        let name = &profile.frames[f as usize];
        if name == UNRESOLVED_FRAME {
            if out.last().map(String::as_str) != Some(NATIVE_FRAMES) {
                out.push(NATIVE_FRAMES.to_string());
            }
        } else {
            out.push(name.clone());
        }
    }
    out
}

fn check(name: &str) -> StackSnapshot {
    let bytes = capture(name);
    let snapshot = analyze(&bytes).finish_stacks();
    let profile = analyze(&bytes).finish_profile(false);
    assert!(!snapshot.threads.is_empty(), "{}: no thread", name);
    assert_eq!(snapshot.threads.len(), profile.threads.len(), "{}", name);
    for (s, p) in snapshot.threads.iter().zip(&profile.threads) {
        assert_eq!(s.thread_id, p.thread_id, "{}: thread order", name);
        assert_eq!(s.timestamp, p.last_timestamp, "{}: not the latest", name);
        assert_eq!(s.samples, p.total(), "{}", name);
        let frames: Vec<String> = s.frames.iter().map(StackFrame::display_name).collect();
        assert!(
            p.samples
                .iter()
                .any(|t| t.kind == s.kind && collapsed(&profile, t.stack) == frames),
            "{}: thread {:#x}'s latest stack is none of its profile's: {:#?}",
            name,
            s.thread_id,
            frames
        );
    }
    // The Regex thread: its latest sample is inside the interpreter, every managed frame
    // of a named module, with a MethodDef (0x06) token.
    let regex = snapshot
        .threads
        .iter()
        .find(|t| {
            t.frames.iter().take(3).any(|f| {
                f.method().map_or(false, |m| {
                    m.type_name.starts_with("System.Text.RegularExpressions.")
                })
            })
        })
        .unwrap_or_else(|| panic!("{}: no thread in Regex: {:#?}", name, snapshot.threads));
    for f in &regex.frames {
        if let Some(m) = f.method() {
            assert!(m.module.is_some(), "{}: {:?}", name, m);
            // Dynamic methods (reflection's invoke stubs) have no token.
            let kind = if m.type_name == "dynamicClass" {
                0
            } else {
                0x06
            };
            assert_eq!(m.token >> 24, kind, "{}: {:?}", name, m);
            assert!(!m.method.is_empty(), "{}: {:?}", name, m);
        }
    }
    snapshot
}

#[test]
fn net8_regex_capture_latest_stacks() {
    let s = check("regex-net8.0.4.nettrace.gz");
    assert!(s.distinct_ips > 0 && s.unresolved_ips < s.distinct_ips);
}

#[test]
fn netcore31_regex_capture_latest_stacks() {
    let s = check("regex-netcore3.1.23.nettrace.gz");
    assert!(s.distinct_ips > 0 && s.unresolved_ips < s.distinct_ips);
}
