//! One pass over a `.nettrace` (`dsipc convert` and `dsipc report`): the profile and its
//! figures, the events as JSON lines, and typed errors for what gives nothing usable.

use std::io::{self, Read, Write};

use dsipc_trace::analysis::{analyze, AnalysisError};
use dsipc_trace::AnalyzerLimits;

mod common_captures;

/// The repository's .NET 8 capture.
fn busy_capture() -> Vec<u8> {
    common_captures::plain("net8.0.4-busy.nettrace")
}

#[test]
fn a_whole_capture_gives_its_profile_and_one_json_line_per_event() {
    let bytes = busy_capture();
    let mut lines = Vec::new();
    let a = analyze(&bytes[..], Some(&mut lines), AnalyzerLimits::default()).unwrap();
    assert!(a.problem.is_none() && a.limit.is_none());
    assert!(a.meta.info.is_some());
    assert!(a.summary.events > 0 && a.summary.methods > 0);
    assert!(a.profile.total_samples() > 0);
    let text = String::from_utf8(lines).unwrap();
    assert_eq!(text.lines().count() as u64, a.summary.events);
    assert!(text.lines().all(|l| l.starts_with('{') && l.ends_with('}')));
    // The same pass without the JSON lines.
    let b = analyze(&bytes[..], None, AnalyzerLimits::default()).unwrap();
    assert_eq!(b.summary.events, a.summary.events);
    assert_eq!(b.profile.summary(), a.profile.summary());
}

#[test]
fn a_cut_capture_is_used_up_to_where_it_broke_off() {
    let bytes = busy_capture();
    let a = analyze(&bytes[..bytes.len() / 2], None, AnalyzerLimits::default()).unwrap();
    let problem = a.problem.expect("a cut stream says so");
    assert!(problem.is_truncation(), "{:?}", problem);
    assert!(a.summary.events > 0);
}

#[test]
fn what_is_not_nettrace_is_a_typed_error_naming_the_offset() {
    let e = analyze(
        &b"this is not a nettrace stream"[..],
        None,
        AnalyzerLimits::default(),
    )
    .unwrap_err();
    match &e {
        AnalysisError::NotNettrace(Some(p)) => assert!(!p.is_truncation(), "{:?}", p),
        other => panic!("{:?}", other),
    }
    let text = e.to_string();
    assert!(
        text.starts_with("not a nettrace file: ") && text.contains("offset"),
        "{}",
        text
    );
    let e = analyze(&b""[..], None, AnalyzerLimits::default()).unwrap_err();
    assert!(matches!(e, AnalysisError::NotNettrace(_)), "{:?}", e);
}

struct Failing;

impl Read for Failing {
    fn read(&mut self, _: &mut [u8]) -> io::Result<usize> {
        Err(io::Error::new(io::ErrorKind::Other, "disk on fire"))
    }
}

impl Write for Failing {
    fn write(&mut self, _: &[u8]) -> io::Result<usize> {
        Err(io::Error::new(io::ErrorKind::BrokenPipe, "reader gone"))
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

#[test]
fn read_and_write_failures_are_told_apart() {
    let e = analyze(Failing, None, AnalyzerLimits::default()).unwrap_err();
    assert!(matches!(&e, AnalysisError::Read(e) if e.to_string() == "disk on fire"));
    let bytes = busy_capture();
    let e = analyze(&bytes[..], Some(&mut Failing), AnalyzerLimits::default()).unwrap_err();
    assert!(
        matches!(&e, AnalysisError::Write(e) if e.kind() == io::ErrorKind::BrokenPipe),
        "{:?}",
        e
    );
}
