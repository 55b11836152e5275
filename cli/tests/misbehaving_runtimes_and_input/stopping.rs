//! How a trace stops: Ctrl-C synchronised on dsipc's lines, and `--duration` against
//! runtimes that keep streaming after StopTracing.

use std::fs;
use std::path::Path;
use std::time::Duration;

use dsipc::wire::Hresult;
use dsipc::Command as Cmd;
use dsipc_testkit::{check_pattern, Answer, Config, StreamSpec, TempDir};

use super::{hanging, kept_bytes};
use crate::common::{fake, me, names_in, s, trace_in, Live, LIMIT};

/// The file holds exactly `n` bytes of the fake stream's pattern.
fn assert_pattern_file(path: &Path, n: u64) {
    let bytes = fs::read(path).unwrap();
    assert_eq!(bytes.len() as u64, n, "file size vs bytes reported");
    assert_eq!(
        check_pattern(0, &bytes),
        None,
        "file content is not the stream"
    );
}

// ---- Ctrl-C synchronised on dsipc's lines; a second one keeps the data ----

/// `dsipc trace <this pid> -o OUT ARGS --tmpdir DIR`, its stderr lines on a channel.
fn tracing(dir: &TempDir, out: &Path, args: &[&str]) -> Live {
    let pid = me();
    let mut a = vec![
        "trace",
        pid.as_str(),
        "-o",
        s(out),
        "--tmpdir",
        s(dir.path()),
    ];
    a.extend_from_slice(args);
    Live::dsipc(&a)
}

#[test]
fn second_ctrl_c_flushes_what_was_received_says_so_and_exits() {
    let dir = TempDir::new("dsipc-h3").unwrap();
    // The stop is never answered, so only the second Ctrl-C ends the drain.
    let rt = fake(&dir, hanging(Cmd::StopTracing));
    let files = TempDir::new("dsipc-h3f").unwrap();
    let out = files.path().join("t.nettrace");
    let mut t = tracing(&dir, &out, &["--timeout", "60"]);
    t.stderr_line("dsipc: tracing pid", LIMIT);
    t.signal(libc::SIGINT);
    t.stderr_line("stopping the session", LIMIT);
    // The stop reached the runtime (which keeps streaming and never answers).
    let got = rt.wait_received(2, LIMIT);
    assert_eq!(got[1].command, Some(Cmd::StopTracing));
    let r = t.interrupt(LIMIT);
    r.assert_exit(130, &["interrupted again"]);
    // Every byte received is in the file (up to 256 KiB were buffered), nothing else.
    let n = kept_bytes(&r.stderr);
    eprintln!("kept {} bytes", n);
    assert_pattern_file(&out, n);
}

#[test]
fn second_ctrl_c_before_the_runtime_answers_leaves_nothing_behind() {
    let dir = TempDir::new("dsipc-h3s").unwrap();
    let rt = fake(&dir, hanging(Cmd::CollectTracing2));
    let files = TempDir::new("dsipc-h3sf").unwrap();
    let out = files.path().join("t.nettrace");
    let mut t = tracing(&dir, &out, &["--timeout", "60"]);
    // The request arrived: dsipc waits for the answer.
    let got = rt.wait_received(1, LIMIT);
    assert_eq!(got[0].command, Some(Cmd::CollectTracing2));
    t.signal(libc::SIGINT);
    t.stderr_line("has not answered yet", LIMIT);
    let r = t.interrupt(LIMIT);
    r.assert_exit(130, &["nothing was written"]);
    assert!(
        names_in(files.path()).is_empty(),
        "{:?}",
        names_in(files.path())
    );
}

#[test]
fn first_ctrl_c_stops_and_drains_to_the_end() {
    let dir = TempDir::new("dsipc-h3b").unwrap();
    let _rt = fake(
        &dir,
        Config::new().stream(
            StreamSpec::until_stopped(16 * 1024, Duration::from_millis(5)).with_end_marker(),
        ),
    );
    let files = TempDir::new("dsipc-h3bf").unwrap();
    let out = files.path().join("t.nettrace");
    let mut t = tracing(&dir, &out, &[]);
    t.stderr_line("dsipc: tracing pid", LIMIT);
    let r = t.interrupt(LIMIT);
    assert_eq!(r.code, Some(0), "{}", r.stderr);
    let bytes = fs::read(&out).unwrap();
    assert!(bytes.ends_with(&[0x06, 0x01]), "not drained to the end");
    assert_eq!(check_pattern(0, &bytes[..bytes.len() - 2]), None);
}

// ---- --duration against runtimes that keep streaming after StopTracing ----

fn keeps_streaming(stop: Answer, label: &str, expect: &[&str]) {
    let dir = TempDir::new("dsipc-h4").unwrap();
    let _rt = fake(&dir, Config::new().answer(Cmd::StopTracing, stop));
    let files = TempDir::new("dsipc-h4f").unwrap();
    let out = files.path().join("t.nettrace");
    let r = trace_in(dir.path(), &out, &["--duration", "0.2", "--timeout", "1"]);
    assert_eq!(r.code, Some(1), "{}: {}", label, r.stderr);
    for e in expect {
        assert!(
            r.stderr.contains(e),
            "{}: {:?} not in {}",
            label,
            e,
            r.stderr
        );
    }
    let n = kept_bytes(&r.stderr);
    assert_pattern_file(&out, n);
}

#[test]
fn duration_with_a_stop_answered_by_an_error_fails_at_once_keeping_the_data() {
    keeps_streaming(
        Answer::Error(Hresult::E_FAIL),
        "error",
        &["StopTracing", "0x80004005"],
    );
}

#[test]
fn duration_with_an_unanswered_stop_ends_within_the_timeout() {
    keeps_streaming(Answer::Hang, "unanswered", &["timed out", "StopTracing"]);
}

#[test]
fn duration_with_a_stop_answered_ok_but_ignored_ends_within_the_timeout() {
    keeps_streaming(Answer::IgnoreStop, "ignored", &["did not end within"]);
}
