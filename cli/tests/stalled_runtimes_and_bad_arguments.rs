//! The `dsipc` binary, continued: every command against runtimes
//! that stall, trickle, flood or close mid-reply (each must end within `--timeout` with
//! one clear line and exit 1), hostile numeric and option arguments (usage errors, never
//! panics), and `trace -o` paths it must not damage.
//!
//! Every run is bounded by a generous limit that only catches hangs; tests synchronise on
//! dsipc's exit, never on sleeps.
#![cfg(target_os = "linux")]

mod common;

use std::ffi::OsString;
use std::fs;
use std::os::unix::ffi::OsStringExt;
use std::path::Path;
use std::time::Duration;

use common::{dsipc, dsipc_in, dsipc_os, fake, me, s, trace_in};
use dsipc::wire::Hresult;
use dsipc::Command as Cmd;
use dsipc_testkit::{Answer, Config, TempDir, Then};

/// What `--timeout 1` may take at most, with a loaded machine's slack: the bound is the
/// point of these tests (a hang or a per-read timer would take the idle timeout, 60 s).
const BOUNDED: Duration = Duration::from_secs(20);

/// A reply header: magic, total size, command set, command id, reserved.
fn header(size: u16, set: u8, id: u8) -> Vec<u8> {
    let mut h = b"DOTNET_IPC_V1\0".to_vec();
    h.extend_from_slice(&size.to_le_bytes());
    h.extend_from_slice(&[set, id, 0, 0]);
    h
}

/// Every command that talks to one runtime, with its arguments after the PID.
fn commands(dir: &Path) -> Vec<Vec<String>> {
    let pid = me();
    let trace_out = dir.join("t.nettrace");
    let v = |a: &[&str]| a.iter().map(|s| s.to_string()).collect::<Vec<String>>();
    vec![
        v(&["info", &pid]),
        v(&["info", &pid, "--json"]),
        v(&["env", &pid]),
        v(&["setenv", &pid, "A", "b"]),
        v(&["setenv", &pid, "A", "--unset"]),
        v(&["resume", &pid]),
        v(&["dump", &pid, "-o", "/tmp/dsipc-never.dmp"]),
        v(&["perfmap", &pid, "enable"]),
        v(&["perfmap", &pid, "disable"]),
        v(&["startup-hook", &pid, "/tmp/dsipc-never.dll"]),
        v(&[
            "attach-profiler",
            &pid,
            "--clsid",
            "01234567-89ab-cdef-0123-456789abcdef",
            "--path",
            "/tmp/dsipc-never.so",
        ]),
        v(&["trace", &pid, "-o", s(&trace_out), "--duration", "0.5"]),
    ]
}

/// Every command against a runtime answering every request with `answer` ends within
/// `--timeout 1` (plus slack), exits 1 with a one-line typed error, in bounded memory,
/// and leaves no trace file behind.
fn every_command_ends(label: &str, answer: Answer, expect: &[&str]) {
    let dir = TempDir::new(&format!("dsipc-hm-{}", label)).unwrap();
    let _rt = fake(&dir, Config::new().default_answer(answer));
    let mut failures = Vec::new();
    for cmd in commands(dir.path()) {
        let args: Vec<&str> = cmd.iter().map(|s| s.as_str()).collect();
        let r = dsipc_in(dir.path(), &[&args[..], &["--timeout", "1"]].concat());
        r.assert_no_panic();
        let line = r.stderr.trim_end();
        let ok = r.code == Some(1)
            && r.took < BOUNDED
            && r.hwm_kib < 200 * 1024
            && line.starts_with("dsipc: ")
            && !line.contains('\u{1b}')
            && expect.iter().any(|e| line.contains(e));
        if !ok {
            failures.push(format!(
                "{:?}: code {:?}, {:.1} s, {} KiB: {}",
                cmd,
                r.code,
                r.took.as_secs_f64(),
                r.hwm_kib,
                r.stderr
            ));
        }
        assert!(
            !dir.path().join("t.nettrace").exists(),
            "{:?} left a trace file",
            cmd
        );
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn every_command_against_a_runtime_that_never_answers() {
    every_command_ends("hang", Answer::Hang, &["timed out"]);
}

#[test]
fn every_command_against_a_partial_header_then_silence() {
    let partial = header(20, 0xFF, 0)[..9].to_vec();
    every_command_ends(
        "partial",
        Answer::RawThen(partial, Then::Stall),
        &["timed out"],
    );
}

#[test]
fn every_command_against_a_max_size_header_then_a_trickle() {
    let h = header(u16::MAX, 0xFF, 0);
    every_command_ends(
        "trickle",
        Answer::RawThen(h, Then::Trickle(Duration::from_millis(20))),
        &["timed out"],
    );
}

#[test]
fn every_command_against_a_max_size_header_then_a_flood() {
    let h = header(u16::MAX, 0xFF, 0);
    every_command_ends("flood", Answer::RawThen(h, Then::Flood), &["dsipc: "]);
}

#[test]
fn every_command_against_a_runtime_closing_mid_reply() {
    let mut h = header(u16::MAX, 0xFF, 0);
    h.extend_from_slice(&[0; 7]);
    every_command_ends("midclose", Answer::Raw(h), &["dsipc: "]);
}

#[test]
fn status_commands_end_after_the_reply_whatever_follows_it() {
    // An OK status reply, then endless bytes: the command ends at once.
    let dir = TempDir::new("dsipc-hm-after").unwrap();
    let mut ok = header(24, 0xFF, 0);
    ok.extend_from_slice(&0u32.to_le_bytes());
    let _rt = fake(
        &dir,
        Config::new().default_answer(Answer::RawThen(ok, Then::Flood)),
    );
    let pid = me();
    for cmd in [
        vec!["setenv", &pid, "A", "b"],
        vec!["resume", &pid],
        vec!["perfmap", &pid, "disable"],
        vec!["startup-hook", &pid, "/tmp/dsipc-never.dll"],
    ] {
        let r = dsipc_in(dir.path(), &[&cmd[..], &["--timeout", "1"]].concat());
        r.assert_no_panic();
        // Done with the reply (exit 0), or told at once that the runtime sent more than
        // it (when the extra bytes arrive with the reply): never reading on.
        let extra = r.code == Some(1) && r.stderr.contains("where none were expected");
        assert!(
            r.code == Some(0) || extra,
            "{:?}: {:?} {}",
            cmd,
            r.code,
            r.stderr
        );
        assert!(r.took < BOUNDED, "{:?} took {:?}", cmd, r.took);
    }
}

#[test]
fn error_messages_from_the_runtime_are_escaped() {
    let dir = TempDir::new("dsipc-hm-msg").unwrap();
    let _rt = fake(
        &dir,
        Config::new().answer(
            Cmd::GenerateCoreDump3,
            Answer::ErrorWithMessage(Hresult::E_FAIL, "bad\u{1b}[2J\r\nfake: ok\u{7}".into()),
        ),
    );
    let r = dsipc_in(dir.path(), &["dump", &me(), "-o", "/tmp/dsipc-never.dmp"]);
    r.assert_no_panic();
    assert_eq!(r.code, Some(1), "{}", r.stderr);
    assert_eq!(r.stderr.lines().count(), 1, "{}", r.stderr);
    assert!(
        !r.stderr.trim_end().contains(|c: char| c.is_control()),
        "{:?}",
        r.stderr
    );
    assert!(r.stderr.contains("bad"), "{}", r.stderr);
}

// ---- hostile arguments: one usage line, exit 2, never a panic ----

#[test]
fn hostile_numbers_and_options_are_usage_errors() {
    let pid = me();
    let p = pid.as_str();
    let trace = |extra: &[&'static str]| {
        let mut v = vec!["trace", p, "-o", "/tmp/dsipc-never.nettrace"];
        v.extend_from_slice(extra);
        v
    };
    let profiler_data = |data: &'static str| {
        let clsid = "01234567-89ab-cdef-0123-456789abcdef";
        vec![
            "attach-profiler",
            p,
            "--clsid",
            clsid,
            "--path",
            "/x",
            "--data",
            data,
        ]
    };
    let cases: Vec<(Vec<&str>, &str)> = vec![
        // --timeout / --duration: negative, zero, NaN, infinite, huge, empty, hex.
        (vec!["info", p, "--timeout", "-1"], "--timeout wants"),
        (vec!["info", p, "--timeout", "0"], "--timeout wants"),
        (vec!["info", p, "--timeout", "nan"], "--timeout wants"),
        (vec!["info", p, "--timeout", "inf"], "--timeout wants"),
        (vec!["info", p, "--timeout", "1e300"], "--timeout wants"),
        (vec!["info", p, "--timeout", ""], "--timeout wants"),
        (vec!["info", p, "--timeout=-inf"], "--timeout wants"),
        (vec!["--timeout", "nan", "ps"], "--timeout wants"),
        (trace(&["--duration", "-1"]), "--duration wants"),
        (trace(&["--duration", "0"]), "--duration wants"),
        (trace(&["--duration", "NaN"]), "--duration wants"),
        (trace(&["--duration", "inf"]), "--duration wants"),
        (trace(&["--duration", "1e300"]), "--duration wants"),
        (trace(&["--duration", ""]), "--duration wants"),
        (trace(&["--buffer-mb", "0"]), "--buffer-mb wants"),
        (trace(&["--buffer-mb", "4294967296"]), "--buffer-mb wants"),
        (trace(&["--buffer-mb", "-1"]), "--buffer-mb wants"),
        // PIDs.
        (vec!["info", "0"], "PID must be a positive integer"),
        (vec!["info", "-1"], "PID must be a positive integer"),
        (
            vec!["info", "99999999999"],
            "PID must be a positive integer",
        ),
        (vec!["info", "abc"], "PID must be a positive integer"),
        (vec!["info", ""], "PID must be a positive integer"),
        (vec!["info", "--", "-1"], "PID must be a positive integer"),
        // Enumerations, GUIDs, hex.
        (
            vec!["dump", p, "-o", "/tmp/x", "--type", "bogus"],
            "--type must be",
        ),
        (
            vec!["perfmap", p, "bogus"],
            "perfmap wants enable or disable",
        ),
        (
            vec!["perfmap", p, "enable", "--type", "bogus"],
            "--type must be",
        ),
        (
            vec!["perfmap", p, "disable", "--type", "all"],
            "--type goes with enable",
        ),
        (
            vec!["attach-profiler", p, "--clsid", "{0123", "--path", "/x"],
            "--clsid",
        ),
        (profiler_data("abc"), "even number of hex digits"),
        (profiler_data("zz"), "hex digits"),
        (vec!["env", p, "--max-bytes", "0"], "--max-bytes wants"),
        // Repeated, unknown and misplaced options.
        (
            vec!["info", p, "--timeout", "1", "--timeout", "2"],
            "given more than once",
        ),
        (
            vec!["--timeout", "1", "info", p, "--timeout=2"],
            "given more than once",
        ),
        (
            trace(&["--duration", "1", "--duration", "2"]),
            "given more than once",
        ),
        (vec!["info", p, "--bogus"], "unknown option"),
        (vec!["--bogus"], "unknown option"),
        (vec!["--bogus", "info", p], "unknown option"),
        (vec!["info", p, "--json=1"], "takes no value"),
        (vec!["info", p, "--", "--json"], "unexpected argument"),
        (
            vec!["dump", p, "-o", "/tmp/a", "--output", "/tmp/b"],
            "same option",
        ),
        (trace(&["--output", "/tmp/b"]), "same option"),
        (vec!["--timeout"], "--timeout needs a value"),
        (vec!["info", p, "--timeout"], "--timeout needs a value"),
        (vec!["bogus"], "unknown command"),
        (vec![], "no command given"),
    ];
    let mut failures = Vec::new();
    for (args, needle) in &cases {
        let r = dsipc(args);
        let ok = r.code == Some(2)
            && r.stderr.lines().count() == 1
            && r.stderr.starts_with("dsipc: ")
            && r.stderr.contains(needle);
        r.assert_no_panic();
        if !ok {
            failures.push(format!("{:?}: {:?} {}", args, r.code, r.stderr));
        }
    }
    assert!(failures.is_empty(), "\n{}", failures.join("\n"));
}

#[test]
fn long_and_non_utf8_arguments_give_short_usage_lines() {
    let long = "a".repeat(100_000);
    let r = dsipc(&["info", &long]);
    r.assert_usage("100000 bytes in all");
    assert!(r.stderr.len() < 400, "{}", r.stderr.len());
    let r = dsipc(&["info", &me(), &format!("--{}", long)]);
    r.assert_usage("unknown option");
    assert!(r.stderr.len() < 400, "{}", r.stderr.len());
    let bad = OsString::from_vec(b"\xff\xfe".to_vec());
    let mut flag = b"--".to_vec();
    flag.extend_from_slice(b"\xff");
    for args in [
        vec![OsString::from("perfmap"), OsString::from(me()), bad.clone()],
        vec![OsString::from_vec(flag)],
        vec![OsString::from("info"), bad.clone()],
        vec![bad.clone()],
    ] {
        let r = dsipc_os(&args);
        r.assert_no_panic();
        assert_eq!(r.code, Some(2), "{:?}: {}", args, r.stderr);
        assert_eq!(r.stderr.lines().count(), 1, "{}", r.stderr);
    }
}

// ---- trace -o: what cannot be written is refused before the session starts ----

/// All names in `dir` with their contents (a symlink as its target).
fn snapshot(dir: &Path) -> Vec<(String, String)> {
    let mut v: Vec<(String, String)> = fs::read_dir(dir)
        .unwrap()
        .map(|e| {
            let e = e.unwrap();
            let p = e.path();
            let what = match fs::symlink_metadata(&p) {
                Ok(m) if m.file_type().is_symlink() => {
                    format!("-> {:?}", fs::read_link(&p).unwrap())
                }
                Ok(m) if m.is_dir() => format!("dir {:?}", snapshot(&p)),
                Ok(_) => String::from_utf8_lossy(&fs::read(&p).unwrap()).into_owned(),
                Err(e) => e.to_string(),
            };
            (e.file_name().to_string_lossy().into_owned(), what)
        })
        .collect();
    v.sort();
    v
}

#[test]
fn trace_outputs_that_cannot_be_written_are_refused_before_the_session() {
    use std::os::unix::fs::symlink;
    let rt_dir = TempDir::new("dsipc-hm-o-rt").unwrap();
    let rt = fake(&rt_dir, Config::new());
    let out = TempDir::new("dsipc-hm-o").unwrap();
    let d = out.path();
    fs::write(d.join("f"), "keep").unwrap();
    fs::create_dir(d.join("sub")).unwrap();
    fs::write(d.join("sub").join("g"), "keep too").unwrap();
    symlink(d.join("missing"), d.join("dangling")).unwrap();
    symlink(d.join("sub"), d.join("to-dir")).unwrap();
    symlink(d.join("loop"), d.join("loop")).unwrap();
    let before = snapshot(d);
    let cases: Vec<(String, &str)> = vec![
        (s(d).to_string(), "it is a directory"),
        (format!("{}/sub", s(d)), "it is a directory"),
        (format!("{}/sub/", s(d)), "it is a directory"),
        (format!("{}/to-dir", s(d)), "it is a directory"),
        (format!("{}/dangling", s(d)), "symbolic link to nothing"),
        (format!("{}/loop", s(d)), "cannot write"),
        (
            format!("{}/nodir/t.nettrace", s(d)),
            "No such file or directory",
        ),
        (format!("{}/nodir/", s(d)), "no such directory"),
        (format!("{}/f/t.nettrace", s(d)), "Not a directory"),
        (format!("{}/f/", s(d)), "cannot write"),
        // Unwritable places, even for root.
        ("/proc/self/t.nettrace".to_string(), "cannot write"),
        (format!("{}/{}", s(d), "n".repeat(300)), "cannot write"),
    ];
    let mut failures = Vec::new();
    for (o, needle) in &cases {
        let r = trace_in(
            rt_dir.path(),
            Path::new(o),
            &["--duration", "0.2", "--timeout", "5"],
        );
        r.assert_no_panic();
        if r.code != Some(1) || !r.stderr.contains(needle) || r.stderr.lines().count() != 1 {
            failures.push(format!("-o {}: {:?} {}", o, r.code, r.stderr));
        }
    }
    assert_eq!(snapshot(d), before, "the output directory changed");
    assert!(
        rt.received()
            .iter()
            .all(|r| !r.command.map_or(false, |c| c.is_collect_tracing())),
        "a session was started: {:?}",
        rt.received()
    );
    assert!(failures.is_empty(), "\n{}", failures.join("\n"));
}

#[test]
fn trace_to_a_file_that_refuses_writes_ends_with_one_error_line() {
    // /proc/version exists (refused without --force); with --force nothing can be
    // created beside it: one clear line and exit 1, never a hang.
    let rt_dir = TempDir::new("dsipc-hm-o-proc").unwrap();
    let _rt = fake(&rt_dir, Config::new());
    let r = trace_in(
        rt_dir.path(),
        Path::new("/proc/version"),
        &["--timeout", "2"],
    );
    r.assert_exit(1, &["exists; not replacing it"]);
    let r = trace_in(
        rt_dir.path(),
        Path::new("/proc/version"),
        &["--timeout", "2", "--force"],
    );
    r.assert_no_panic();
    assert_eq!(r.code, Some(1), "{}", r.stderr);
    assert!(r.took < BOUNDED, "{:?}", r.took);
    let last = r.stderr.lines().last().unwrap_or("");
    assert!(last.starts_with("dsipc: cannot "), "{}", r.stderr);
    assert!(last.contains("/proc/version"), "{}", r.stderr);
}

// ---- terminal injection: JSON too ----

#[test]
fn info_json_escapes_every_control_character_and_bidi_override() {
    let nasty = "app\u{1b}[2J\u{7f}\u{9b}31m\u{85}\u{2028}\u{202e}\u{2066}\"\\\u{0}end";
    let dir = TempDir::new("dsipc-hm-json").unwrap();
    let _rt = fake(&dir, Config::new().command_line(nasty));
    let r = dsipc_in(dir.path(), &["info", &me(), "--json"]);
    r.assert_no_panic();
    assert_eq!(r.code, Some(0), "{}", r.stderr);
    let out = String::from_utf8(r.stdout_bytes.clone()).unwrap();
    assert_eq!(out.lines().count(), 1, "{}", out);
    let raw: Vec<char> = out
        .trim_end()
        .chars()
        .filter(|c| c.is_control() || matches!(c, '\u{2028}' | '\u{202e}' | '\u{2066}'))
        .collect();
    assert!(raw.is_empty(), "raw {:?} in {}", raw, out);
    for escaped in [
        "\\u001b[2J",
        "\\u007f",
        "\\u009b31m",
        "\\u0085",
        "\\u2028",
        "\\u202e",
        "\\u2066",
        "\\\"\\\\",
        "\\u0000end",
    ] {
        assert!(out.contains(escaped), "{} not in {}", escaped, out);
    }
    // The same in text mode.
    let r = dsipc_in(dir.path(), &["info", &me()]);
    assert_eq!(r.code, Some(0), "{}", r.stderr);
    let out = String::from_utf8(r.stdout_bytes.clone()).unwrap();
    assert!(
        !out.chars()
            .any(|c| (c.is_control() && c != '\n') || c == '\u{202e}'),
        "{:?}",
        out
    );
}

#[test]
fn env_whose_block_trickles_or_floods_ends_within_the_timeout() {
    // An OK ProcessEnvironment reply announcing 8 MiB, a block of a million entries, then
    // empty entries (4 zero bytes each) trickled or flooded: the whole command is bounded
    // by --timeout, and memory by the bound, however the bytes come.
    let mut reply = header(26, 0xFF, 0);
    reply.extend_from_slice(&(8u32 << 20).to_le_bytes());
    reply.extend_from_slice(&[0, 0]);
    reply.extend_from_slice(&1_000_000u32.to_le_bytes());
    for (label, then) in [
        ("trickle", Then::Trickle(Duration::from_millis(5))),
        ("flood", Then::Flood),
    ] {
        let dir = TempDir::new(&format!("dsipc-hm-env-{}", label)).unwrap();
        let _rt = fake(
            &dir,
            Config::new().answer(
                Cmd::ProcessEnvironment,
                Answer::RawThen(reply.clone(), then),
            ),
        );
        let r = dsipc_in(dir.path(), &["env", &me(), "--timeout", "1"]);
        r.assert_no_panic();
        assert!(r.took < BOUNDED, "{}: {:?}", label, r.took);
        assert!(r.hwm_kib < 200 * 1024, "{}: {} KiB", label, r.hwm_kib);
        assert_eq!(r.code, Some(1), "{}: {}", label, r.stderr);
    }
}

#[test]
fn requests_too_large_for_the_protocol_are_clear_errors_before_sending() {
    // A request's size is a u16: values that cannot fit are refused with one line, and
    // the runtime receives nothing.
    let dir = TempDir::new("dsipc-hm-big").unwrap();
    let rt = fake(&dir, Config::new());
    let long = "v".repeat(100_000);
    let long_path = format!("/{}", long);
    let hex = "00".repeat(65_500);
    let pid = me();
    let cases: Vec<Vec<&str>> = vec![
        vec!["setenv", &pid, "A", &long],
        vec!["setenv", &pid, &long, "x"],
        vec!["startup-hook", &pid, &long_path],
        vec!["dump", &pid, "-o", &long_path],
        vec![
            "attach-profiler",
            &pid,
            "--clsid",
            "01234567-89ab-cdef-0123-456789abcdef",
            "--path",
            "/x.so",
            "--data",
            &hex,
        ],
        vec![
            "trace",
            &pid,
            "-o",
            "/tmp/dsipc-never.nettrace",
            "--providers",
            &long,
        ],
    ];
    let mut failures = Vec::new();
    for args in &cases {
        let r = dsipc_in(dir.path(), &[&args[..], &["--timeout", "2"]].concat());
        r.assert_no_panic();
        let line = r.stderr.trim_end();
        if !(r.code == Some(1) || r.code == Some(2))
            || r.stderr.lines().count() != 1
            || line.len() > 600
        {
            failures.push(format!(
                "{:?}: {:?} {}",
                &args[..2],
                r.code,
                &r.stderr[..r.stderr.len().min(600)]
            ));
        }
    }
    assert!(rt.received().is_empty(), "{:?}", rt.received().len());
    assert!(failures.is_empty(), "\n{}", failures.join("\n"));
}

#[test]
fn help_after_double_dash_is_a_value() {
    // "setenv PID NAME -- --help" sets NAME to "--help" (here: no such process), it does
    // not print the usage text.
    let dir = TempDir::new("dsipc-hm-dd").unwrap();
    let rt = fake(&dir, Config::new());
    let r = dsipc(&[
        "setenv",
        &me(),
        "A",
        "--tmpdir",
        s(dir.path()),
        "--",
        "--help",
    ]);
    r.assert_no_panic();
    assert_eq!(r.code, Some(0), "{}", r.stderr);
    assert!(r.stdout.is_empty(), "{}", r.stdout);
    assert!(
        rt.environment().contains(&"A=--help".to_string()),
        "{:?}",
        rt.environment()
    );
    // Before `--`, -h is still help.
    let r = dsipc(&["setenv", &me(), "A", "-h"]);
    assert_eq!(r.code, Some(0), "{}", r.stderr);
    assert!(r.stdout.contains("usage"), "{:?}", r.stdout);
}
