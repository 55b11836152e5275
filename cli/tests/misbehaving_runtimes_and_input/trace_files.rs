//! `trace -o FILE` changes nothing unless the session started; a stream that ends short of
//! its end object is truncated.

use std::fs;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};

use dsipc::wire::Hresult;
use dsipc::Command as Cmd;
use dsipc_testkit::{stale_socket, Answer, Config, FakeRuntime, StreamSpec, TempDir};

use super::{hanging, kept_bytes, start_key, BUSY};
use crate::common::{fake, names_in, trace_in};

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
