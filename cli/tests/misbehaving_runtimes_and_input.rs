//! The `dsipc` binary against misbehaving runtimes and hostile input: the fake
//! runtime of dsipc-testkit in its hostile modes (refusing, stale, silent, slow, streams
//! that end too early or never end, stops that fail or are ignored, environments that
//! announce gigabytes, strings with control characters), planted sockets, non-UTF-8 and
//! empty arguments, and a failing stdout.
//!
//! Every run is bounded by a generous limit that only catches hangs; tests synchronise on
//! the lines dsipc prints, never on sleeps.
#![cfg(target_os = "linux")]

mod common;

use std::ffi::{OsStr, OsString};
use std::fs;
use std::io::Read;
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
use std::os::unix::io::FromRawFd;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::{
    bin, dsipc, dsipc_in, fake, me, names_in, os, run_program, s, trace_in, vm_hwm_kib,
    wait_bounded, Live, LIMIT,
};
use dsipc::wire::{Hresult, Text};
use dsipc::Command as Cmd;
use dsipc_testkit::{
    check_pattern, stale_socket, Answer, Config, FakeRuntime, StreamSpec, TempDir,
};

/// The N of "kept the N bytes" in dsipc's message.
/// A real trace (the committed .NET 8 CPU capture): the parser decides where a stream ends,
/// so the streams that must end cleanly are real ones.
const BUSY: &[u8] = include_bytes!("../../tests/data/nettrace/net8.0.4-busy.nettrace");

fn kept_bytes(stderr: &str) -> u64 {
    let at = stderr
        .find("kept the ")
        .unwrap_or_else(|| panic!("no 'kept the N bytes' in {}", stderr));
    stderr[at + 9..]
        .split_whitespace()
        .next()
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no byte count in {}", stderr))
}

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

fn start_key(pid: u32) -> u64 {
    dsipc_std::unix::start_key(pid).expect("start key")
}

// ---- trace -o FILE changes nothing unless the session started ----

fn refusing(dir: &TempDir) -> FakeRuntime {
    fake(
        dir,
        Config::new().answer(Cmd::CollectTracing2, Answer::Error(Hresult::E_FAIL)),
    )
}

#[test]
fn trace_refused_leaves_an_existing_file_a_symlink_and_a_fifo_alone() {
    let dir = TempDir::new("dsipc-h1").unwrap();
    let _rt = refusing(&dir);
    let files = TempDir::new("dsipc-h1f").unwrap();
    // An existing file.
    let f = files.path().join("f");
    fs::write(&f, b"keep").unwrap();
    let r = trace_in(dir.path(), &f, &[]);
    r.assert_exit(1, &["exists; not replacing it (--force replaces it)"]);
    let r = trace_in(dir.path(), &f, &["--force"]);
    r.assert_exit(1, &["0x80004005"]);
    assert_eq!(fs::read(&f).unwrap(), b"keep");
    // A symlink to a file: the link stays, its target is not emptied.
    let target = files.path().join("target");
    fs::write(&target, b"keep too").unwrap();
    let link = files.path().join("link");
    std::os::unix::fs::symlink(&target, &link).unwrap();
    let r = trace_in(dir.path(), &link, &["--force"]);
    assert_eq!(r.code, Some(1), "{}", r.stderr);
    assert!(fs::symlink_metadata(&link)
        .unwrap()
        .file_type()
        .is_symlink());
    assert_eq!(fs::read(&target).unwrap(), b"keep too");
    // A FIFO (a special file, as a device would be) with a reader: still there.
    let fifo = files.path().join("fifo");
    let c = std::ffi::CString::new(fifo.as_os_str().as_bytes()).unwrap();
    // SAFETY: mkfifo with a valid C string.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
    let _reader = fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(&fifo)
        .unwrap();
    let r = trace_in(dir.path(), &fifo, &[]);
    assert_eq!(r.code, Some(1), "{}", r.stderr);
    assert!(fs::symlink_metadata(&fifo).unwrap().file_type().is_fifo());
    // A new file: not created, and nothing left beside it.
    let new = files.path().join("new.nettrace");
    let before = names_in(files.path());
    let r = trace_in(dir.path(), &new, &[]);
    assert_eq!(r.code, Some(1), "{}", r.stderr);
    assert!(!new.exists());
    assert_eq!(names_in(files.path()), before);
}

#[test]
fn trace_against_a_stale_or_silent_socket_leaves_the_file_alone() {
    let files = TempDir::new("dsipc-h1s").unwrap();
    let f = files.path().join("f");
    fs::write(&f, b"keep").unwrap();
    let new = files.path().join("new");
    // Stale: a socket file nobody listens on.
    let stale = TempDir::new("dsipc-h1st").unwrap();
    let pid = std::process::id();
    stale_socket(stale.path(), u64::from(pid), start_key(pid)).unwrap();
    for out in [&f, &new] {
        let r = trace_in(stale.path(), out, &["--force"]);
        r.assert_exit(1, &["cannot connect"]);
    }
    assert_eq!(fs::read(&f).unwrap(), b"keep");
    assert!(!new.exists());
    // Silent: accepts, never answers CollectTracing.
    let dir = TempDir::new("dsipc-h1si").unwrap();
    let _rt = fake(&dir, hanging(Cmd::CollectTracing2));
    let r = trace_in(dir.path(), &f, &["--timeout", "0.5", "--force"]);
    r.assert_exit(1, &["timed out"]);
    assert_eq!(fs::read(&f).unwrap(), b"keep");
    assert_eq!(names_in(files.path()), vec!["f".to_string()]);
}

#[test]
fn trace_replaces_an_existing_file_only_with_force_and_creates_a_new_one_once_the_session_runs() {
    let dir = TempDir::new("dsipc-h1o").unwrap();
    let _rt = fake(&dir, Config::new().stream(StreamSpec::content(BUSY)));
    let files = TempDir::new("dsipc-h1of").unwrap();
    let f = files.path().join("old.nettrace");
    fs::write(&f, vec![b'x'; 10_000]).unwrap();
    let r = trace_in(dir.path(), &f, &[]);
    r.assert_exit(1, &["exists"]);
    assert_eq!(fs::read(&f).unwrap().len(), 10_000);
    // Through a symbolic link, --force replaces the link's target and keeps the link.
    let link = files.path().join("link.nettrace");
    std::os::unix::fs::symlink(&f, &link).unwrap();
    let new = files.path().join("new.nettrace");
    for (out, force) in [(&link, true), (&new, false)] {
        let extra: &[&str] = if force { &["--force"] } else { &[] };
        let r = trace_in(dir.path(), out, extra);
        assert_eq!(r.code, Some(0), "{}", r.stderr);
        assert!(fs::read(out).unwrap() == BUSY, "the trace is the stream");
    }
    assert!(fs::symlink_metadata(&link)
        .unwrap()
        .file_type()
        .is_symlink());
    assert_eq!(fs::read(&f).unwrap().len(), BUSY.len());
    assert_eq!(
        names_in(files.path()),
        vec![
            "link.nettrace".to_string(),
            "new.nettrace".to_string(),
            "old.nettrace".to_string()
        ]
    );
}

// ---- a stream that ends before any stop, short of its end, is truncated ----

#[test]
fn trace_stream_ending_before_any_stop_short_of_its_end_object_is_truncated() {
    // The parser decides: a real trace cut 1000 bytes short of its end.
    let cut = &BUSY[..BUSY.len() - 1000];
    let dir = TempDir::new("dsipc-h2").unwrap();
    let _rt = fake(&dir, Config::new().stream(StreamSpec::content(cut)));
    let files = TempDir::new("dsipc-h2f").unwrap();
    let out = files.path().join("t.nettrace");
    let r = trace_in(dir.path(), &out, &[]);
    r.assert_exit(1, &["truncated"]);
    assert!(!r.stderr.contains("wrote"), "{}", r.stderr);
    assert_eq!(kept_bytes(&r.stderr), cut.len() as u64);
    assert!(fs::read(&out).unwrap() == cut);
    // A stream that is not nettrace at all cannot be vouched for either.
    let dir3 = TempDir::new("dsipc-h2g").unwrap();
    let _rt3 = fake(
        &dir3,
        Config::new().stream(StreamSpec::bytes(300_000).with_end_marker()),
    );
    let r = trace_in(dir3.path(), &out, &["--force"]);
    r.assert_exit(1, &["did not parse"]);
    assert_eq!(kept_bytes(&r.stderr), 300_002);
    // The whole trace (a runtime that exited cleanly) is complete.
    let dir2 = TempDir::new("dsipc-h2b").unwrap();
    let _rt2 = fake(&dir2, Config::new().stream(StreamSpec::content(BUSY)));
    let r = trace_in(dir2.path(), &out, &["--force"]);
    assert_eq!(r.code, Some(0), "{}", r.stderr);
    assert!(
        r.stderr
            .contains(&format!("dsipc: wrote {} bytes", BUSY.len())),
        "{}",
        r.stdout
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

/// A fake runtime whose answer to `cmd` never comes.
fn hanging(cmd: Cmd) -> Config {
    Config::new().answer(cmd, Answer::Hang)
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

// ---- env is bounded and streamed ----

#[test]
fn env_refuses_a_runtime_announcing_gigabytes_with_the_typed_error() {
    let dir = TempDir::new("dsipc-h6").unwrap();
    let _rt = fake(
        &dir,
        Config::new().answer(
            Cmd::ProcessEnvironment,
            Answer::EnvironmentAnnouncing(u32::MAX),
        ),
    );
    let r = dsipc_in(dir.path(), &["env", &me()]);
    r.assert_exit(
        1,
        &["announced an environment of 4294967295 bytes, more than the limit of 16777216"],
    );
    // 64 MiB: below what the old code would take, above the default bound.
    let dir2 = TempDir::new("dsipc-h6b").unwrap();
    let _rt2 = fake(
        &dir2,
        Config::new().answer(
            Cmd::ProcessEnvironment,
            Answer::EnvironmentAnnouncing(64 << 20),
        ),
    );
    let r = dsipc_in(dir2.path(), &["env", &me()]);
    r.assert_exit(1, &["limit of 16777216"]);
    // The bound is configurable.
    let r = dsipc_in(dir.path(), &["env", &me(), "--max-bytes", "100"]);
    r.assert_exit(1, &["limit of 100 bytes"]);
}

#[test]
fn env_streams_entries_as_they_arrive_in_bounded_memory() {
    // 15 MiB of environment (under the default bound; 22 MB as UTF-8): collected, it would
    // need that much.
    let value: String = "環境".repeat(2000);
    let entry = format!("BIG={}", value);
    let unit = dsipc::conn::environment_block_len([Text::Str(&entry)]) - 4;
    let reps = (15usize << 20) / unit;
    let announced = (4 + reps * unit) as u32;
    let dir = TempDir::new("dsipc-h6s").unwrap();
    let _rt = fake(
        &dir,
        Config::new().environment(&[&entry]).answer(
            Cmd::ProcessEnvironment,
            Answer::EnvironmentAnnouncing(announced),
        ),
    );
    let mut child = Command::new(bin())
        .args(["env", &me(), "--timeout", "300", "--tmpdir", s(dir.path())])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let t = Instant::now();
    let mut out = child.stdout.take().unwrap();
    // Read 6 MB, then look at the child while it is blocked writing the rest.
    let mut buf = vec![0u8; 1 << 20];
    let mut got = 0usize;
    while got < 6_000_000 {
        let n = out.read(&mut buf).unwrap();
        assert!(n > 0, "env ended after {} bytes", got);
        got += n;
    }
    let hwm = vm_hwm_kib(child.id());
    eprintln!("dsipc env VmHWM after 6 MB of output: {} KiB", hwm);
    assert!(
        hwm > 0,
        "dsipc env is blocked writing: its VmHWM must be readable"
    );
    let mut rest = Vec::new();
    out.read_to_end(&mut rest).unwrap();
    let status = wait_bounded(&mut child, "dsipc env", LIMIT).0;
    eprintln!("dsipc env: {} bytes in {:?}", got + rest.len(), t.elapsed());
    let mut err = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut err)
        .unwrap();
    assert!(status.success(), "{}", err);
    let total = got + rest.len();
    assert_eq!(total, reps * (entry.len() + 1), "one line per entry");
    assert!(
        hwm < 12 * 1024,
        "VmHWM {} KiB: entries are not streamed",
        hwm
    );
}

// ---- ps: one deadline, parallel probes, owner check ----

/// `n` child processes that live until dropped.
struct Sleepers(Vec<Child>);

impl Sleepers {
    fn spawn(n: usize) -> Sleepers {
        Sleepers(
            (0..n)
                .map(|_| {
                    Command::new("sleep")
                        .arg("300")
                        .stdin(Stdio::null())
                        .spawn()
                        .unwrap()
                })
                .collect(),
        )
    }
}

impl Drop for Sleepers {
    fn drop(&mut self) {
        for c in &mut self.0 {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

#[test]
fn ps_probes_silent_sockets_in_parallel_under_one_deadline() {
    let sleepers = Sleepers::spawn(60);
    let dir = TempDir::new("dsipc-h7").unwrap();
    let _fakes: Vec<FakeRuntime> = sleepers
        .0
        .iter()
        .map(|c| {
            fake(
                &dir,
                Config::new()
                    .pid(u64::from(c.id()))
                    .key(start_key(c.id()))
                    .default_answer(Answer::Hang),
            )
        })
        .collect();
    let r = dsipc_in(dir.path(), &["ps", "--timeout", "0.5"]);
    assert_eq!(r.code, Some(0), "{}", r.stderr);
    let out = r.stdout;
    for c in &sleepers.0 {
        let pid = c.id().to_string();
        assert!(
            out.lines()
                .any(|l| l.split_whitespace().next() == Some(pid.as_str())),
            "{} not listed:\n{}",
            pid,
            out
        );
    }
    // The bound is the point: one after another, 60 probes take 30 s.
    assert!(r.took < Duration::from_secs(10), "ps took {:?}", r.took);
}

#[test]
fn ps_and_info_ignore_a_socket_not_owned_by_the_process_uid() {
    let sleepers = Sleepers::spawn(1);
    let dir = TempDir::new("dsipc-h7o").unwrap();
    let my_uid = unsafe { libc::geteuid() };
    // A legitimate socket: the process's own uid.
    let good = &sleepers.0[0];
    let _good = fake(
        &dir,
        Config::new()
            .pid(u64::from(good.id()))
            .key(start_key(good.id())),
    );
    // A planted one: named after a process of another uid (as root, the file is given away).
    let (victim, _victims) = if my_uid == 0 {
        let s = Sleepers::spawn(1);
        (s.0[0].id(), Some(s))
    } else {
        let other = fs::read_dir("/proc")
            .unwrap()
            .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
            .find(|pid| {
                fs::read_to_string(format!("/proc/{}/status", pid))
                    .ok()
                    .and_then(|s| {
                        s.lines().find(|l| l.starts_with("Uid:")).map(|l| {
                            !l.split_whitespace()
                                .skip(1)
                                .any(|u| u == my_uid.to_string())
                        })
                    })
                    .unwrap_or(false)
            })
            .expect("a process of another uid");
        (other, None)
    };
    let planted = fake(
        &dir,
        Config::new()
            .pid(u64::from(victim))
            .key(start_key(victim))
            .command_line("planted"),
    );
    if my_uid == 0 {
        let c =
            std::ffi::CString::new(planted.socket_path().unwrap().as_os_str().as_bytes()).unwrap();
        // SAFETY: chown with a valid C string.
        assert_eq!(unsafe { libc::chown(c.as_ptr(), 65534, 65534) }, 0);
    }
    let r = dsipc_in(dir.path(), &["ps"]);
    assert_eq!(r.code, Some(0), "{}", r.stderr);
    let out = r.stdout;
    let listed = |pid: u32| {
        out.lines()
            .any(|l| l.split_whitespace().next() == Some(pid.to_string().as_str()))
    };
    assert!(listed(good.id()), "{}", out);
    assert!(!listed(victim), "planted socket listed:\n{}", out);
    assert!(!out.contains("planted"), "{}", out);
    let r = dsipc_in(dir.path(), &["info", &victim.to_string()]);
    assert_eq!(r.code, Some(1), "{}", r.stderr);
    assert!(!r.stdout.contains("planted"), "{}", r.stdout);
}

// ---- --timeout is the whole command's budget ----

#[test]
fn info_and_dump_timeout_bounds_all_fallbacks_together() {
    let dir = TempDir::new("dsipc-h8").unwrap();
    // A slow 3.1-style runtime: every ProcessInfo version is unknown, each answer late.
    let rt = fake(
        &dir,
        Config::new()
            .like_netcore31()
            .reply_delay(Duration::from_millis(600)),
    );
    let r = dsipc_in(dir.path(), &["info", &me(), "--timeout", "1"]);
    assert_eq!(r.code, Some(1), "{}", r.stderr);
    // Per attempt, all three would fit (0.6 s < 1 s) and end with "does not support".
    assert!(r.stderr.contains("timed out after 1.0 s"), "{}", r.stderr);
    assert!(rt.received().len() <= 2, "{:?}", rt.received());
    // The same for dump's fallbacks (GenerateCoreDump3, 2, then 1).
    let dir = TempDir::new("dsipc-h8d").unwrap();
    let rt = fake(
        &dir,
        Config::new()
            .answer(Cmd::GenerateCoreDump3, Answer::unknown_command())
            .answer(Cmd::GenerateCoreDump2, Answer::unknown_command())
            .reply_delay(Duration::from_millis(600)),
    );
    let r = dsipc_in(
        dir.path(),
        &["dump", &me(), "-o", "/tmp/never.dmp", "--timeout", "1"],
    );
    r.assert_exit(1, &["timed out after 1.0 s"]);
    assert!(rt.received().len() <= 2, "{:?}", rt.received());
}

// ---- arguments that are not UTF-8 ----

#[test]
fn non_utf8_arguments_never_panic() {
    let dir = TempDir::new("dsipc-h9").unwrap();
    let _rt = fake(&dir, Config::new().stream(StreamSpec::content(BUSY)));
    let bad = OsString::from_vec(b"/tmp/\xff".to_vec());
    let ff = OsString::from_vec(b"\xff".to_vec());
    let tmp = OsString::from(dir.path());
    // <bad>: a non-UTF-8 path, <ff>: a non-UTF-8 value, <tmp>: the fake's directory.
    let arg = |a: &&str| match *a {
        "<bad>" => bad.clone(),
        "<ff>" => ff.clone(),
        "<tmp>" => tmp.clone(),
        "<pid>" => me().into(),
        a => a.into(),
    };
    let cases: [(&[&str], i32); 11] = [
        (&["ps", "--tmpdir", "<bad>"], 1),
        (&["info", "<pid>", "--tmpdir", "<bad>"], 1),
        (&["info", "<ff>"], 2),
        (&["<ff>"], 2),
        (&["--timeout", "<ff>", "ps"], 2),
        (&["setenv", "<pid>", "<ff>", "v", "--tmpdir", "<tmp>"], 2),
        (&["setenv", "<pid>", "N", "<ff>", "--tmpdir", "<tmp>"], 2),
        (&["dump", "<pid>", "-o", "<bad>", "--tmpdir", "<tmp>"], 2),
        (&["startup-hook", "<pid>", "<bad>", "--tmpdir", "<tmp>"], 2),
        (&["monitor", "--listen", "<bad>"], 2),
        (&["trace", "<pid>", "--providers", "<ff>", "-o", "x"], 2),
    ];
    for (args, code) in cases {
        let args: Vec<OsString> = args.iter().map(arg).collect();
        let r = run_program(&bin(), &args, None, LIMIT);
        r.assert_no_panic();
        assert_eq!(r.code, Some(code), "{:?}: {}", args, r.stderr);
    }
    // A trace file with a non-UTF-8 name is just a file name.
    let files = TempDir::new("dsipc-h9f").unwrap();
    let out = files.path().join(OsStr::from_bytes(b"t\xff.nettrace"));
    let mut args: Vec<OsString> = ["trace", "<pid>", "-o"].iter().map(arg).collect();
    args.extend([out.clone().into_os_string(), "--tmpdir".into(), tmp.clone()]);
    let r = run_program(&bin(), &args, None, LIMIT);
    assert_eq!(r.code, Some(0), "{}", r.stderr);
    assert_eq!(fs::read(&out).unwrap().len(), BUSY.len());
}

// ---- a failing stdout ----

fn dev_full() -> Stdio {
    Stdio::from(
        fs::OpenOptions::new()
            .write(true)
            .open("/dev/full")
            .unwrap(),
    )
}

/// A pipe whose reading end is already closed.
fn closed_pipe() -> Stdio {
    let mut fds = [0; 2];
    // SAFETY: pipe(2) into a valid array; both descriptors are ours.
    assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
    // SAFETY: closing the reading end we own.
    unsafe { libc::close(fds[0]) };
    // SAFETY: the writing end is ours and handed over once.
    Stdio::from(unsafe { fs::File::from_raw_fd(fds[1]) })
}

#[test]
fn a_full_stdout_is_one_line_and_exit_1_and_a_closed_pipe_is_quiet() {
    let dir = TempDir::new("dsipc-h10").unwrap();
    let _rt = fake(&dir, Config::new().stream(StreamSpec::content(BUSY)));
    let files = TempDir::new("dsipc-h10f").unwrap();
    let trace_out = files.path().join("t.nettrace");
    let t = s(dir.path());
    let pid = me();
    let busy = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/data/nettrace/net8.0.4-busy.nettrace");
    let busy = s(&busy);
    // (dump and trace write their result line on stderr: nothing of theirs goes to stdout.)
    let commands: [&[&str]; 9] = [
        &["--help"],
        &["trace", "--help"],
        &["convert", busy, "--format", "jsonl", "-o", "-"],
        &["convert", busy, "--format", "folded", "-o", "-"],
        &["report", busy],
        &["info", &pid, "--tmpdir", t],
        &["info", &pid, "--json", "--tmpdir", t],
        &["env", &pid, "--tmpdir", t],
        &["ps", "--tmpdir", t],
    ];
    for c in &commands {
        let args = os(c);
        let r = run_program(&bin(), &args, Some(dev_full()), LIMIT);
        r.assert_no_panic();
        assert_eq!(r.code, Some(1), "{:?}: {}", c, r.stderr);
        assert_eq!(
            r.stderr
                .lines()
                .filter(|l| l.contains("cannot write the output"))
                .count(),
            1,
            "{:?}: {}",
            c,
            r.stderr
        );
        let r = run_program(&bin(), &args, Some(closed_pipe()), LIMIT);
        r.assert_no_panic();
        assert_eq!(r.code, Some(141), "{:?}: {}", c, r.stderr);
        assert!(!r.stderr.contains("output"), "{:?}: {}", c, r.stderr);
    }
    // Commands that write files say so on stderr: a full stdout is nothing to them.
    let files_written: [&[&str]; 2] = [
        &["dump", &pid, "-o", "/tmp/x.dmp", "--tmpdir", t, "--force"],
        &["trace", &pid, "-o", s(&trace_out), "--tmpdir", t, "--force"],
    ];
    for c in &files_written {
        let r = run_program(&bin(), &os(c), Some(dev_full()), LIMIT);
        r.assert_exit(0, &["dsipc: wrote "]);
    }
}

// ---- runtime strings with control characters are escaped in text output ----

#[test]
fn env_info_and_ps_escape_control_characters() {
    // A directory whose name holds an escape sequence too.
    let base = TempDir::new("dsipc-h11").unwrap();
    let dir = base.path().join("d\x1b[31m");
    fs::create_dir(&dir).unwrap();
    let _rt = Config::new()
        .command_line("dotnet \x1b]0;pwned\x07app\r\nFAKE LINE\0end")
        .environment(&["EVIL=a\nFAKE=1", "ESC=\x1b[2J\rX", "NUL=a\0b", "OK=plain"])
        .listen_in(&dir)
        .start()
        .unwrap();
    let d = dir.to_str().unwrap();
    for args in [
        vec!["env", &me(), "--tmpdir", d],
        vec!["info", &me(), "--tmpdir", d],
        vec!["ps", "--tmpdir", d],
    ] {
        let r = dsipc(&args);
        assert_eq!(r.code, Some(0), "{:?}: {}", args, r.stderr);
        let bad: Vec<u8> = r
            .stdout_bytes
            .iter()
            .copied()
            .filter(|&b| (b < 0x20 && b != b'\n') || b == 0x7f)
            .collect();
        assert!(bad.is_empty(), "{:?}: raw control bytes {:?}", args, bad);
        let out = r.stdout;
        assert!(!out.lines().any(|l| l.starts_with("FAKE")), "{}", out);
    }
    let r = dsipc(&["env", &me(), "--tmpdir", d]);
    let out = r.stdout;
    assert!(out.lines().any(|l| l == "EVIL=a\\nFAKE=1"), "{}", out);
    assert!(out.lines().any(|l| l == "ESC=\\x1b[2J\\rX"), "{}", out);
    assert!(out.lines().any(|l| l == "OK=plain"), "{}", out);
    assert_eq!(out.lines().count(), 4, "{}", out);
    // JSON escapes them its own way.
    let r = dsipc(&["info", &me(), "--json", "--tmpdir", d]);
    assert!(
        r.stdout.contains("\\u001b]0;pwned\\u0007app\\r\\n"),
        "{}",
        r.stdout
    );
}

// ---- empty paths are refused ----

#[test]
fn empty_paths_are_usage_errors_and_nothing_is_sent() {
    let dir = TempDir::new("dsipc-h12").unwrap();
    let rt = fake(&dir, Config::new());
    let t = s(dir.path());
    let pid = me();
    let clsid = "12345678-1234-5678-9abc-def012345678";
    for args in [
        &["dump", &pid, "-o", "", "--tmpdir", t][..],
        &["startup-hook", &pid, "", "--tmpdir", t],
        &[
            "attach-profiler",
            &pid,
            "--clsid",
            clsid,
            "--path",
            "",
            "--tmpdir",
            t,
        ],
        &["trace", &pid, "-o", "", "--tmpdir", t],
        &["info", &pid, "--tmpdir", ""],
        &["ps", "--tmpdir", ""],
    ] {
        dsipc(args).assert_exit(2, &["must not be empty"]);
    }
    assert!(rt.received().is_empty(), "{:?}", rt.received());
}

// ---- an unreadable or missing --tmpdir is named with the OS error ----

#[test]
fn missing_or_unreadable_tmpdir_is_named_with_the_os_error() {
    let pid = me();
    for args in [&["ps"][..], &["info", &pid]] {
        let r = dsipc_in(Path::new("/nonexistent-dsipc-dir"), args);
        r.assert_exit(1, &["/nonexistent-dsipc-dir", "No such file or directory"]);
        assert!(r.stdout.is_empty(), "{}", r.stdout);
    }
    // Not a directory.
    let files = TempDir::new("dsipc-h13").unwrap();
    let f = files.path().join("file");
    fs::write(&f, b"").unwrap();
    let r = dsipc_in(&f, &["ps"]);
    r.assert_exit(1, &["Not a directory"]);
}

// ---- clear usage errors ----

#[test]
fn unbalanced_quote_and_missing_values_are_clear_usage_errors() {
    let r = dsipc(&["trace", "1", "--providers", "A:::x=\"1,B", "-o", "/tmp/x"]);
    r.assert_exit(2, &["unbalanced double quote"]);
    for args in [
        &["--timeout"][..],
        &["--tmpdir"],
        &["info", "1", "--timeout"],
    ] {
        dsipc(args).assert_exit(2, &["needs a value"]);
    }
    // A flag before the command does not eat the command.
    let r = dsipc(&["--json", "info", "1", "--tmpdir", "/nonexistent-dsipc-dir"]);
    r.assert_exit(1, &["cannot read directory"]);
}
