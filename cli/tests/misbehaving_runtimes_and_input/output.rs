//! A failing stdout, and runtime strings with control characters escaped in text output.

use std::fs;
use std::os::unix::io::FromRawFd;
use std::process::Stdio;

use dsipc_testkit::{Config, StreamSpec, TempDir};

use super::BUSY;
use crate::common::{bin, dsipc, fake, me, os, run_program, s, LIMIT};

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
