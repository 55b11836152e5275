//! `dsipc trace --format speedscope|folded|pprof|flamegraph` (issue 10 §3, issue 25): the profile built while
//! the stream arrives, against the real .NET 8.0.4 and Core 3.1.23 hosts busy in Regex
//! backtracking (it must equal `dsipc convert` of the written trace), a runtime killed
//! mid-trace (truncated: the profile of what arrived), the fake runtime's garbage stream (a
//! clear error, the trace kept), and the progress line on a terminal only.
#![cfg(target_os = "linux")]

mod common;

use std::collections::BTreeMap;
use std::fs;
use std::path::Path;
use std::time::Duration;

use common::{
    dsipc_limit, fake, flame, me, names_in, regex_host, repo_root, run, s, temp_dir, trace_in,
    Live, Run,
};
use dsipc::Command as Cmd;
use dsipc_testkit::{Answer, Config, StreamSpec, TempDir};

/// `dsipc ARGS`, with room for a debug build's conversions.
fn dsipc(args: &[&str]) -> Run {
    dsipc_limit(args, Duration::from_secs(120))
}

/// Folded lines as a multiset (ordering aside); panics on a malformed line.
fn folded_lines(text: &str) -> BTreeMap<String, u64> {
    let mut m = BTreeMap::new();
    for line in text.lines() {
        let (stack, n) = line
            .rsplit_once(' ')
            .unwrap_or_else(|| panic!("folded line without a count: {:?}", line));
        let n: u64 = n.parse().unwrap_or_else(|_| panic!("bad count {:?}", line));
        *m.entry(stack.to_string()).or_insert(0) += n;
    }
    m
}

/// The leaf frame with the most samples in folded text.
fn hottest_leaf(text: &str) -> String {
    let mut leaves: BTreeMap<String, u64> = BTreeMap::new();
    for (stack, n) in folded_lines(text) {
        let leaf = stack.rsplit(';').next().unwrap().to_string();
        *leaves.entry(leaf).or_insert(0) += n;
    }
    leaves
        .into_iter()
        .max_by_key(|(_, n)| *n)
        .map(|(l, _)| l)
        .unwrap_or_default()
}

/// `dsipc convert TRACE --format F -o OUT`, which must succeed.
fn convert(trace: &Path, format: &str, out: &Path) {
    let r = dsipc(&["convert", s(trace), "--format", format, "-o", s(out)]);
    assert_eq!(r.code, Some(0), "convert --format {}: {}", format, r.stderr);
}

fn trace_every_format(runtime: &str) {
    let (mut host, pid) = regex_host(runtime, 180);
    let dir = temp_dir(runtime);
    let pid = pid.to_string();
    for (format, ext) in [
        ("folded", "folded"),
        ("speedscope", "speedscope.json"),
        ("pprof", "pb.gz"),
    ] {
        let trace = dir.join(format!("{}.nettrace", format));
        let profile = dir.join(format!("{}.{}", format, ext));
        let r = dsipc(&[
            "trace",
            &pid,
            "--duration",
            "3",
            "--format",
            format,
            "-o",
            s(&trace),
        ]);
        assert_eq!(r.code, Some(0), "{} {}: {}", runtime, format, r.stderr);
        assert!(
            r.stderr
                .contains(&format!("dsipc: wrote {}: ", profile.display())),
            "{}",
            r.stderr
        );
        // Plain final line off a terminal, with the parsed counts; no progress line.
        let last = r
            .stderr
            .lines()
            .find(|l| l.starts_with("dsipc: received "))
            .unwrap_or_else(|| panic!("no final line: {}", r.stderr));
        assert!(
            last.contains(" events, ") && last.contains(" samples, "),
            "{}",
            last
        );
        assert!(!last.contains(" 0 samples"), "{}", last);
        assert!(!r.stderr.contains('\r') && !r.stderr.contains('\x1b'));
        // The live profile equals `dsipc convert` of the written trace.
        let converted = dir.join(format!("converted.{}", ext));
        convert(&trace, format, &converted);
        match format {
            "folded" => {
                let live = fs::read_to_string(&profile).unwrap();
                let conv = fs::read_to_string(&converted).unwrap();
                assert!(!live.is_empty());
                assert_eq!(folded_lines(&live), folded_lines(&conv));
                let leaf = hottest_leaf(&live);
                assert!(leaf.contains("RegexInterpreter"), "{}: {}", runtime, leaf);
            }
            _ => {
                let live = fs::read(&profile).unwrap();
                assert!(!live.is_empty());
                assert!(
                    live == fs::read(&converted).unwrap(),
                    "{} {}: the live profile differs from convert's",
                    runtime,
                    format
                );
            }
        }
        if format == "speedscope" {
            let text = fs::read_to_string(&profile).unwrap();
            assert!(text.contains("RegexInterpreter"));
            let script = repo_root().join("tests/tools/check_speedscope.py");
            let schema = repo_root().join("tests/data/speedscope/file-format-schema.json");
            let r = run(
                "python3",
                &[s(&script), s(&schema), s(&profile)],
                Duration::from_secs(120),
            );
            assert_eq!(r.code, Some(0), "{}{}", r.stdout, r.stderr);
        }
        if format == "pprof" {
            let r = run(
                "go",
                &["tool", "pprof", "-top", "-nodecount=5", s(&profile)],
                Duration::from_secs(120),
            );
            assert_eq!(r.code, Some(0), "go tool pprof: {}", r.stderr);
            assert!(r.stdout.contains("RegexInterpreter"), "{}", r.stdout);
        }
    }
    host.kill();
    let _ = fs::remove_dir_all(&dir);
}

#[test]
fn net8_trace_format_writes_the_profile_live_equal_to_convert() {
    trace_every_format("net8");
}

#[test]
fn netcore31_trace_format_writes_the_profile_live_equal_to_convert() {
    trace_every_format("netcore31");
}

/// `dsipc trace --format flamegraph` of the .NET 8 host busy in Regex backtracking: the
/// SVG beside the trace (same stem, `.svg`), titled with the process's name and pid, the
/// Regex interpreter's frame the widest of its row, and the same frames as `dsipc convert`
/// of the written trace. `DSIPC_KEEP_FLAMEGRAPH=DIR` keeps the SVG (the README's picture).
#[test]
fn net8_trace_format_flamegraph_shows_the_regex_interpreter_widest() {
    let (mut host, pid) = regex_host("net8", 120);
    let comm = fs::read_to_string(format!("/proc/{}/comm", pid)).unwrap();
    let dir = temp_dir("flamegraph");
    let trace = dir.join("regex.nettrace");
    let r = dsipc(&[
        "trace",
        &pid.to_string(),
        "--duration",
        "3",
        "--format",
        "flamegraph",
        "-o",
        s(&trace),
    ]);
    host.kill();
    assert_eq!(r.code, Some(0), "{}", r.stderr);
    let svg_path = dir.join("regex.svg");
    assert!(
        r.stderr
            .contains(&format!("dsipc: wrote {}: ", svg_path.display())),
        "{}",
        r.stderr
    );
    let svg = fs::read_to_string(&svg_path).unwrap();
    let title = flame::title(&svg);
    assert!(
        title.starts_with(&format!("dsipc: {} (pid {}), ", comm.trim_end(), pid)),
        "{}",
        title
    );
    let frames = flame::frames(&svg);
    let (regex, widest) = flame::widest_in_the_row_of(&frames, "RegexInterpreter");
    assert_eq!(regex, widest);
    assert!(
        regex.name.starts_with(
            "System.Text.RegularExpressions!System.Text.RegularExpressions.RegexInterpreter."
        ),
        "{:?}",
        regex
    );
    let converted = dir.join("converted.svg");
    convert(&trace, "flamegraph", &converted);
    assert_eq!(
        flame::frames(&fs::read_to_string(&converted).unwrap()),
        frames
    );
    if let Some(keep) = std::env::var_os("DSIPC_KEEP_FLAMEGRAPH") {
        fs::copy(&svg_path, Path::new(&keep).join("flamegraph-regex.svg")).unwrap();
    }
    let _ = fs::remove_dir_all(&dir);
}

/// The runtime dies mid-trace: the profile of what arrived is written, equal to
/// `dsipc convert` of the kept trace, and the command says it is truncated.
#[test]
fn net8_killed_mid_trace_writes_the_profile_of_what_arrived() {
    let (mut host, pid) = regex_host("net8", 180);
    let dir = temp_dir("killed");
    let trace = dir.join("t.nettrace");
    let profile = dir.join("t.folded");
    let pid = pid.to_string();
    let mut t = Live::dsipc(&["trace", &pid, "--format", "folded", "-o", s(&trace)]);
    t.stderr_line("stop with Ctrl-C", Duration::from_secs(60));
    // The runtime is killed once samples have reached the file, not merely once the
    // session began (a kill before the first flush leaves nothing to profile).
    wait_for_len(&trace, 64 * 1024, Duration::from_secs(60));
    host.kill();
    let r = t.wait(Duration::from_secs(120));
    r.assert_exit(1, &["truncated", "the profile covers what the trace holds"]);
    assert!(trace.is_file() && profile.is_file(), "{:?}", names_in(&dir));
    let converted = dir.join("converted.folded");
    // convert of a truncated file writes what it holds and fails.
    let r = dsipc(&[
        "convert",
        s(&trace),
        "--format",
        "folded",
        "-o",
        s(&converted),
    ]);
    assert_eq!(r.code, Some(1), "{}", r.stderr);
    assert_eq!(
        folded_lines(&fs::read_to_string(&profile).unwrap()),
        folded_lines(&fs::read_to_string(&converted).unwrap())
    );
    let _ = fs::remove_dir_all(&dir);
}

/// Waits until the file at `path` holds at least `min` bytes; fails the test past `limit`.
fn wait_for_len(path: &Path, min: u64, limit: Duration) {
    let start = std::time::Instant::now();
    loop {
        let len = fs::metadata(path).map(|m| m.len()).unwrap_or(0);
        if len >= min {
            return;
        }
        assert!(
            start.elapsed() < limit,
            "{} held {} bytes after {:?}, wanted {}",
            path.display(),
            len,
            limit,
            min
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A stream of bytes that are no nettrace: the trace keeps every byte, no profile is
/// written (nor any temporary file left), the error names the offset, exit 1.
#[test]
fn garbage_stream_keeps_the_trace_and_fails_the_profile_clearly() {
    let sock = TempDir::new("dsipc-tf-g").unwrap();
    let _rt = fake(
        &sock,
        Config::new().stream(StreamSpec::bytes(300_000).with_end_marker()),
    );
    let files = TempDir::new("dsipc-tf-gf").unwrap();
    let out = files.path().join("t.nettrace");
    let r = trace_in(sock.path(), &out, &["--format", "speedscope"]);
    assert_eq!(r.code, Some(1), "{}", r.stderr);
    assert!(
        r.stderr
            .contains("dsipc: no profile written: the stream did not parse: "),
        "{}",
        r.stderr
    );
    assert!(r.stderr.contains("offset 0"), "{}", r.stderr);
    assert_eq!(fs::metadata(&out).unwrap().len(), 300_002);
    assert_eq!(names_in(files.path()), ["t.nettrace"]);
    // Without --format the same stream is kept too; it ended before any stop and did not
    // parse, so the command cannot vouch for it (exit 1), and says why.
    let r = trace_in(sock.path(), &out, &["--force"]);
    assert_eq!(r.code, Some(1), "{}", r.stderr);
    assert!(
        r.stderr
            .contains("dsipc: warning: the stream did not parse: "),
        "{}",
        r.stderr
    );
    assert!(r.stderr.contains("cannot be vouched for"), "{}", r.stderr);
    assert_eq!(fs::metadata(&out).unwrap().len(), 300_002);
    assert_eq!(names_in(files.path()), ["t.nettrace"]);
}

/// A session the runtime refuses changes nothing: neither the trace nor an existing
/// profile; and a profile that would overwrite the trace is a usage error.
#[test]
fn refused_session_leaves_an_existing_profile_alone() {
    let sock = TempDir::new("dsipc-tf-r").unwrap();
    let _rt = fake(
        &sock,
        Config::new().answer(
            Cmd::CollectTracing2,
            Answer::Error(dsipc::wire::Hresult::E_FAIL),
        ),
    );
    let files = TempDir::new("dsipc-tf-rf").unwrap();
    let out = files.path().join("t.nettrace");
    let profile = files.path().join("t.speedscope.json");
    fs::write(&profile, b"keep").unwrap();
    let r = trace_in(sock.path(), &out, &["--format", "speedscope"]);
    assert_ne!(r.code, Some(0), "{}", r.stderr);
    assert_eq!(fs::read(&profile).unwrap(), b"keep");
    assert_eq!(names_in(files.path()), ["t.speedscope.json"]);
    let same = files.path().join("x.folded");
    let r = trace_in(sock.path(), &same, &["--format", "folded"]);
    r.assert_exit(2, &["would overwrite the trace"]);
    // A directory where the profile would go: refused before the session starts.
    let blocked = files.path().join("b.pb.gz");
    fs::create_dir(&blocked).unwrap();
    let r = trace_in(
        sock.path(),
        &files.path().join("b.nettrace"),
        &["--format", "pprof"],
    );
    r.assert_exit(1, &["it is a directory"]);
    assert_eq!(names_in(files.path()), ["b.pb.gz", "t.speedscope.json"]);
    let r = dsipc(&["trace", &me(), "--format", "jsonl", "-o", s(&out)]);
    assert_eq!(r.code, Some(2), "{}", r.stderr);
}

/// On a terminal (`script` gives dsipc a pty) the progress line is redrawn in place
/// (`\r`, cleared with `ESC [K`); off a terminal there is only the plain final line.
#[test]
fn progress_line_on_a_terminal_only() {
    let sock = TempDir::new("dsipc-tf-p").unwrap();
    let _rt = fake(&sock, Config::new());
    let files = TempDir::new("dsipc-tf-pf").unwrap();
    let out = files.path().join("t.nettrace");
    let cmd = format!(
        "{} trace {} --duration 1 -o {} --tmpdir {}",
        env!("CARGO_BIN_EXE_dsipc"),
        me(),
        s(&out),
        s(sock.path())
    );
    // --duration 1: the stop comes after 1 s, so the 250 ms rate limit lets at least one
    // progress line through before it, whatever the scheduling.
    let r = run(
        "script",
        &["-qefc", &cmd, "/dev/null"],
        Duration::from_secs(60),
    );
    assert_eq!(r.code, Some(0), "{}", r.stdout);
    assert!(r.stdout.contains(" MiB received"), "{:?}", r.stdout);
    assert!(r.stdout.contains("\x1b[K"), "{:?}", r.stdout);
    assert!(
        r.stdout.contains("\rdsipc: received "),
        "the final line replaces the progress line: {:?}",
        r.stdout
    );
    let r = trace_in(sock.path(), &out, &["--duration", "1", "--force"]);
    r.assert_exit(0, &["dsipc: received "]);
    assert!(!r.stderr.contains(" MiB received"), "{}", r.stderr);
    assert!(!r.stderr.contains('\r') && !r.stderr.contains('\x1b'));
}
