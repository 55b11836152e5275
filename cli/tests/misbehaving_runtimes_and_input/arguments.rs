//! Arguments that are not UTF-8, empty paths, a missing `--tmpdir`, unbalanced quotes:
//! clear usage errors, never a panic.

use std::ffi::{OsStr, OsString};
use std::fs;
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::Path;

use dsipc_testkit::{Config, StreamSpec, TempDir};

use super::BUSY;
use crate::common::{bin, dsipc, dsipc_in, fake, me, run_program, s, LIMIT};

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
