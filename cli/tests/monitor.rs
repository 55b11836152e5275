//! `dsipc monitor` end to end: against a runtime side built on the core's advertising
//! server machine (resume once, hold reconnects idle, Ctrl-C removes the socket), refusals,
//! and against a REAL suspended .NET 8 runtime (`scripts/setup-runtimes.sh` first; the
//! real-runtime test fails, never skips, without it).
#![cfg(target_os = "linux")]

mod common;
#[path = "../../adapters/std/tests/reverse_support/mod.rs"]
mod reverse_support;
#[path = "../../adapters/std/tests/reverse_support/runtime_side.rs"]
mod runtime_side;
#[path = "../../adapters/std/tests/support/mod.rs"]
mod support;

use std::fs;
use std::io::Read;
use std::os::unix::fs::{FileTypeExt, PermissionsExt};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::thread;
use std::time::{Duration, Instant};

use dsipc::wire::{Advertise, Guid};
use dsipc::Command as Cmd;

use common::{bin, s, temp_dir, Live};
use dsipc_testkit::{Answer, Config, FakeRuntime};
use reverse_support::SpawnedHost;
use runtime_side::runtime_connection;

const WAIT: Duration = Duration::from_secs(20);

/// `dsipc monitor ARGS`, adjusted by `adjust` before it starts.
fn monitor_with(args: &[&str], adjust: impl FnOnce(&mut Command)) -> Live {
    let mut cmd = Command::new(bin());
    cmd.arg("monitor").args(args);
    adjust(&mut cmd);
    Live::spawn(cmd)
}

/// `dsipc monitor --listen DIR/p.sock ARGS` in a fresh directory named after `tag`, once its
/// socket is there: (directory, socket path, monitor).
fn listening(tag: &str, args: &[&str]) -> (PathBuf, PathBuf, Live) {
    let dir = temp_dir(tag);
    let port = dir.join("p.sock");
    let mut a = vec!["--listen", port.to_str().unwrap()];
    a.extend_from_slice(args);
    let mon = monitor_with(&a, |_| {});
    wait_for_socket(&port);
    (dir, port, mon)
}

/// Ctrl-C: the monitor exits 0 (bounded wait) and removes its socket `port`; then `dir` goes.
fn stop_cleanly(mut mon: Live, dir: &Path, port: &Path) {
    let r = mon.interrupt(Duration::from_secs(10));
    assert_eq!(r.code, Some(0), "{}", r.stderr);
    assert!(!port.exists(), "the socket file is removed on Ctrl-C");
    let _ = fs::remove_dir_all(dir);
}

/// A real .NET 8 runtime started suspended, connecting to the monitor's `port`.
fn suspended_host(port: &Path) -> SpawnedHost {
    let ports = format!("{},connect,suspend", port.display());
    SpawnedHost::start(&[("DOTNET_DiagnosticPorts", ports.as_str())])
}

/// A fake runtime `pid` on the reverse `port` that never answers ResumeRuntime.
fn never_resumed(port: &Path, pid: u64) -> FakeRuntime {
    Config::new()
        .pid(pid)
        .reverse_port(port, true)
        .answer(Cmd::ResumeRuntime, Answer::Hang)
        .start()
        .unwrap()
}

fn wait_for_socket(path: &Path) {
    let deadline = Instant::now() + WAIT;
    while !fs::symlink_metadata(path).map_or(false, |m| m.file_type().is_socket()) {
        assert!(
            Instant::now() < deadline,
            "{} never appeared",
            path.display()
        );
        thread::sleep(Duration::from_millis(10));
    }
}

#[test]
fn resumes_each_runtime_once_holds_reconnects_and_ctrl_c_removes_the_socket() {
    let (dir, port, mut mon) = listening("mon", &["--resume", "--json"]);
    assert_eq!(
        fs::metadata(&port).unwrap().permissions().mode() & 0o777,
        0o600
    );

    let adv = Advertise {
        runtime_cookie: Guid::from_fields(0x1234_5678, 0x9abc, 0xdef0, [1, 2, 3, 4, 5, 6, 7, 8]),
        process_id: 4242,
        future: 0,
    };
    // First connection: resumed.
    let (cmd, _) = runtime_connection(&port, adv, true);
    assert_eq!(cmd, Some(Cmd::ResumeRuntime));
    let first = mon.line(WAIT);
    assert_eq!(
        first,
        "{\"event\":\"advertise\",\"pid\":4242,\"cookie\":\"12345678-9abc-def0-0102-030405060708\",\
         \"reconnect\":false,\"resumed\":true,\"resume_error\":null}"
    );
    // The reconnect is reported and held idle: no second resume.
    let (_, mut held) = runtime_connection(&port, adv, false);
    let second = mon.line(WAIT);
    assert!(second.contains("\"pid\":4242"), "{}", second);
    assert!(second.contains("\"reconnect\":true"), "{}", second);
    assert!(second.contains("\"resumed\":false"), "{}", second);
    held.set_read_timeout(Some(Duration::from_millis(500)))
        .unwrap();
    let mut byte = [0u8; 1];
    match held.read(&mut byte) {
        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
        other => panic!("the held connection got {:?}", other),
    }
    // A second runtime gets its own resume.
    let other = Advertise {
        process_id: 4343,
        runtime_cookie: Guid::from_fields(7, 7, 7, [7; 8]),
        future: 0,
    };
    let (cmd, _) = runtime_connection(&port, other, true);
    assert_eq!(cmd, Some(Cmd::ResumeRuntime));
    let third = mon.line(WAIT);
    assert!(third.contains("\"pid\":4343"), "{}", third);
    assert!(third.contains("\"resumed\":true"), "{}", third);

    // Ctrl-C: a clean exit, the socket file is gone, held connections are closed.
    stop_cleanly(mon, &dir, &port);
    held.set_read_timeout(Some(WAIT)).unwrap();
    assert_eq!(held.read(&mut byte).unwrap(), 0, "held connection closed");
}

#[test]
fn without_resume_text_lines_and_nothing_is_sent() {
    let (dir, port, mut mon) = listening("mon-text", &[]);
    let adv = Advertise {
        runtime_cookie: Guid::from_fields(1, 2, 3, [4; 8]),
        process_id: 99,
        future: 0,
    };
    let (_, mut held) = runtime_connection(&port, adv, false);
    let line = mon.line(WAIT);
    assert_eq!(
        line,
        "pid=99 cookie=00000001-0002-0003-0404-040404040404 new"
    );
    held.set_read_timeout(Some(Duration::from_millis(300)))
        .unwrap();
    let mut byte = [0u8; 1];
    assert!(
        held.read(&mut byte).is_err(),
        "nothing is sent without --resume"
    );
    // SIGTERM works like Ctrl-C.
    mon.signal(libc::SIGTERM);
    assert_eq!(mon.wait(Duration::from_secs(10)).code, Some(0));
    assert!(!port.exists());
    let _ = fs::remove_dir_all(&dir);
}

#[test]
fn refuses_to_replace_a_file_and_needs_listen() {
    let dir = temp_dir("mon-refuse");
    let file = dir.join("precious");
    fs::write(&file, b"data").unwrap();
    let r = monitor_with(&["--listen", file.to_str().unwrap()], |_| {}).wait(WAIT);
    assert_eq!(r.code, Some(1));
    assert!(r.stderr.contains("not a socket"), "{}", r.stderr);
    assert_eq!(fs::read(&file).unwrap(), b"data");

    let r = monitor_with(&[], |_| {}).wait(WAIT);
    assert_eq!(r.code, Some(2));
    assert!(r.stderr.contains("--listen"), "{}", r.stderr);
    let _ = fs::remove_dir_all(&dir);
}

#[test]
fn resumes_a_real_suspended_net8_runtime() {
    let (dir, port, mut mon) = listening("mon-real", &["--resume", "--json"]);
    let t = Instant::now();
    let mut host = suspended_host(&port);

    let first = mon.line(Duration::from_secs(90));
    assert!(
        first.contains(&format!("\"pid\":{},", host.pid)),
        "{} (host pid {})",
        first,
        host.pid
    );
    assert!(first.contains("\"resumed\":true"), "{}", first);
    let ready = host
        .ready_within(Duration::from_secs(60))
        .unwrap_or_else(|| panic!("host not resumed; log:\n{}", host.log_text()));
    assert_eq!(ready, host.pid);
    eprintln!(
        "host READY {:.2} s after it was started",
        t.elapsed().as_secs_f64()
    );
    // The runtime reconnected after the resume; the monitor reports it and holds it.
    let second = mon.line(WAIT);
    assert!(second.contains("\"reconnect\":true"), "{}", second);
    let cookie = |l: &str| l.split("\"cookie\":").nth(1).map(|c| c[..38].to_string());
    assert_eq!(cookie(&first), cookie(&second));

    // The cookie is the one ProcessInfo reports on the default socket.
    let info = dsipc_std::DiagnosticsClient::for_pid(host.pid)
        .unwrap()
        .process_info()
        .unwrap();
    assert_eq!(
        cookie(&first).unwrap(),
        format!("\"{}\"", info.cookie),
        "{}",
        first
    );

    stop_cleanly(mon, &dir, &port);
    drop(host);
}

// ---- hostile peers (issue 9, item 5) ------------------------------------------------------

/// Connections that connect and send nothing.
fn silent_peers(port: &Path, n: usize) -> Vec<UnixStream> {
    (0..n)
        .map(|i| UnixStream::connect(port).unwrap_or_else(|e| panic!("silent peer {}: {}", i, e)))
        .collect()
}

/// True while the monitor has not closed `s` (no EOF, no error, nothing to read).
fn still_open(s: &UnixStream) -> bool {
    s.set_nonblocking(true).unwrap();
    let mut byte = [0u8; 1];
    let open = matches!(
        (&*s).read(&mut byte),
        Err(ref e) if e.kind() == std::io::ErrorKind::WouldBlock
    );
    s.set_nonblocking(false).unwrap();
    open
}

/// Waits (bounded) until the monitor closed `s`.
fn closed_by_monitor(s: &UnixStream) -> bool {
    s.set_read_timeout(Some(WAIT)).unwrap();
    let mut byte = [0u8; 1];
    matches!((&*s).read(&mut byte), Ok(0))
}

fn advertise(pid: u64, n: u8) -> Advertise {
    Advertise {
        runtime_cookie: Guid::from_fields(u32::from(n), 0x5115, 0x0001, [n; 8]),
        process_id: pid,
        future: 0,
    }
}

/// `n` peers connect first and stay silent; a runtime that connects after them is printed
/// while they are all still connected (their deadline, `--timeout 60`, is far away): no peer
/// waits for another.
fn silent_peers_do_not_delay_an_advertise(n: usize) {
    let (dir, port, mut mon) = listening("mon-silent", &["--timeout", "60"]);
    let silent = silent_peers(&port, n);
    let (_, runtime) = runtime_connection(&port, advertise(777, 1), false);
    let line = mon.line(WAIT);
    assert!(line.starts_with("pid=777 "), "{}", line);
    for (i, s) in silent.iter().enumerate() {
        assert!(
            still_open(s),
            "silent peer {} was closed before the Advertise line",
            i
        );
    }
    assert!(still_open(&runtime), "the runtime's connection is held");
    stop_cleanly(mon, &dir, &port);
}

#[test]
fn three_silent_peers_do_not_delay_an_advertise() {
    silent_peers_do_not_delay_an_advertise(3);
}

#[test]
fn two_hundred_silent_peers_do_not_delay_an_advertise() {
    silent_peers_do_not_delay_an_advertise(200);
}

#[test]
fn ctrl_c_with_silent_peers_connected_exits_promptly() {
    let (dir, port, mut mon) = listening("mon-silent-int", &["--timeout", "600"]);
    let silent = silent_peers(&port, 200);
    // The monitor is past the silent peers once it reports a runtime that came after them.
    let (_, _runtime) = runtime_connection(&port, advertise(778, 2), false);
    let line = mon.line(WAIT);
    assert!(line.starts_with("pid=778 "), "{}", line);
    // The bound is the point: silent peers have 600 s left, Ctrl-C must not wait for them.
    stop_cleanly(mon, &dir, &port);
    for s in &silent {
        assert!(
            closed_by_monitor(s),
            "the monitor closes every connection on exit"
        );
    }
}

#[test]
fn a_runtime_that_never_answers_resume_does_not_delay_another() {
    let (dir, port, mut mon) = listening("mon-hang", &["--resume", "--json", "--timeout", "600"]);
    let stuck = never_resumed(&port, 1001);
    // The monitor sent it ResumeRuntime, which it will never answer.
    let got = stuck.wait_received(1, WAIT);
    assert_eq!(got[0].command, Some(Cmd::ResumeRuntime));
    let fine = Config::new()
        .pid(1002)
        .reverse_port(&port, true)
        .start()
        .unwrap();
    assert!(
        fine.wait_resumed(WAIT),
        "the second runtime was not resumed"
    );
    let line = mon.line(WAIT);
    assert!(line.contains("\"pid\":1002,"), "{}", line);
    assert!(line.contains("\"resumed\":true"), "{}", line);
    // Its reconnect is reported too; nothing about the stuck runtime yet.
    let line = mon.line(WAIT);
    assert!(line.contains("\"pid\":1002,"), "{}", line);
    assert!(line.contains("\"reconnect\":true"), "{}", line);
    assert!(!stuck.is_resumed());
    assert_eq!(
        stuck.received().len(),
        1,
        "one resume in flight, not retried"
    );
    stop_cleanly(mon, &dir, &port);
    drop(stuck);
    drop(fine);
}

#[test]
fn a_resume_that_times_out_is_reported_and_tried_again() {
    let (dir, port, mut mon) =
        listening("mon-hang-to", &["--resume", "--json", "--timeout", "0.3"]);
    let stuck = never_resumed(&port, 1003);
    let first = mon.line(WAIT);
    assert!(first.contains("\"pid\":1003,"), "{}", first);
    assert!(first.contains("\"resumed\":false"), "{}", first);
    assert!(first.contains("timed out"), "{}", first);
    // It reconnects; the next Advertise gets another ResumeRuntime, which it answers.
    stuck.set_answer(Cmd::ResumeRuntime, Answer::Default);
    let again = loop {
        let l = mon.line(WAIT);
        if l.contains("\"resumed\":true") {
            break l;
        }
    };
    assert!(again.contains("\"reconnect\":true"), "{}", again);
    assert!(stuck.wait_resumed(WAIT));
    stop_cleanly(mon, &dir, &port);
    drop(stuck);
}

#[test]
// The thread-per-connection monitor (no dsipc-mio) cannot shed connections that have not
// advertised yet.
#[cfg_attr(not(feature = "mio"), ignore)]
fn the_cap_closes_the_oldest_idle_connections_first() {
    let (dir, port, mut mon) =
        listening("mon-cap", &["--timeout", "600", "--max-connections", "4"]);
    let silent = silent_peers(&port, 10);
    let (_, runtime) = runtime_connection(&port, advertise(901, 3), false);
    let line = mon.line(WAIT);
    assert!(line.starts_with("pid=901 "), "{}", line);
    mon.stderr_line("the cap", WAIT);
    // 11 connections, 4 held: the 7 oldest silent peers were closed, the rest stay.
    for (i, s) in silent.iter().enumerate().take(7) {
        assert!(closed_by_monitor(s), "silent peer {} was not closed", i);
    }
    for (i, s) in silent.iter().enumerate().skip(7) {
        assert!(still_open(s), "silent peer {} was closed", i);
    }
    assert!(still_open(&runtime));
    // Silent peers go before a held runtime.
    let more = silent_peers(&port, 4);
    let (_, second) = runtime_connection(&port, advertise(902, 4), false);
    let line = mon.line(WAIT);
    assert!(line.starts_with("pid=902 "), "{}", line);
    assert!(
        still_open(&runtime),
        "the held runtime outlives silent peers"
    );
    assert!(still_open(&second));
    // 4 + 5 new: the 3 older silent peers and the 2 oldest new ones were closed.
    for s in silent.iter().skip(7).chain(more.iter().take(2)) {
        assert!(closed_by_monitor(s));
    }
    assert!(still_open(&more[2]) && still_open(&more[3]));
    let r = mon.interrupt(Duration::from_secs(10));
    assert_eq!(r.code, Some(0));

    let args = ["--listen", port.to_str().unwrap(), "--max-connections", "0"];
    let r = monitor_with(&args, |_| {}).wait(WAIT);
    assert_eq!(r.code, Some(2), "{}", r.stderr);
    assert!(r.stderr.contains("--max-connections"), "{}", r.stderr);
    let _ = fs::remove_dir_all(&dir);
}

/// The monitor runs out of descriptors (RLIMIT_NOFILE 32) while silent peers keep
/// connecting: it survives, sheds the oldest idle connections, and still resumes a REAL
/// suspended .NET 8 runtime.
#[test]
// The thread-per-connection monitor (no dsipc-mio) cannot shed connections that have not
// advertised yet.
#[cfg_attr(not(feature = "mio"), ignore)]
fn survives_running_out_of_descriptors_and_still_resumes_a_real_runtime() {
    use std::os::unix::process::CommandExt;
    let dir = temp_dir("mon-emfile");
    let port = dir.join("p.sock");
    let mut mon = monitor_with(
        &[
            "--listen",
            s(&port),
            "--resume",
            "--json",
            "--timeout",
            "600",
        ],
        |cmd| {
            // SAFETY: setrlimit is async-signal-safe; it only lowers this child's limit.
            unsafe {
                cmd.pre_exec(|| {
                    let lim = libc::rlimit {
                        rlim_cur: 32,
                        rlim_max: 32,
                    };
                    if libc::setrlimit(libc::RLIMIT_NOFILE, &lim) != 0 {
                        return Err(std::io::Error::last_os_error());
                    }
                    Ok(())
                });
            }
        },
    );
    wait_for_socket(&port);
    let silent = silent_peers(&port, 60);
    let msg = mon.stderr_line("accepting a connection failed", WAIT);
    assert!(msg.contains("os error 24"), "{}", msg);
    assert!(
        matches!(mon.child.try_wait(), Ok(None)),
        "the monitor exited"
    );

    let mut host = suspended_host(&port);
    let first = mon.line(Duration::from_secs(90));
    assert!(
        first.contains(&format!("\"pid\":{},", host.pid)),
        "{}",
        first
    );
    assert!(first.contains("\"resumed\":true"), "{}", first);
    let ready = host
        .ready_within(Duration::from_secs(60))
        .unwrap_or_else(|| panic!("host not resumed; log:\n{}", host.log_text()));
    assert_eq!(ready, host.pid);
    // The oldest silent peers made room.
    assert!(closed_by_monitor(&silent[0]));
    stop_cleanly(mon, &dir, &port);
    drop(host);
}
