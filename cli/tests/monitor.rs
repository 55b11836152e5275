//! `dsipc monitor` end to end: against a runtime side built on the core's advertising
//! server machine (resume once, hold reconnects idle, Ctrl-C removes the socket), refusals,
//! and against a REAL suspended .NET 8 runtime (`scripts/setup-runtimes.sh` first; the
//! real-runtime test fails, never skips, without it).
#![cfg(target_os = "linux")]

#[path = "../../adapters/std/tests/reverse_support/mod.rs"]
mod reverse_support;
#[path = "../../adapters/std/tests/support/mod.rs"]
mod support;

use std::fs;
use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::fs::{FileTypeExt, PermissionsExt};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc::{self, Receiver};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use dsipc::payload::{Reply, Response};
use dsipc::wire::{Advertise, Guid, Hresult, ADVERTISE_LEN};
use dsipc::{Command as Cmd, Request, ServerConnection, ServerEvent, ServerStatus};

use reverse_support::SpawnedHost;
use support::temp_path;

const WAIT: Duration = Duration::from_secs(20);

/// A running `dsipc monitor`.
struct Monitor {
    child: Child,
    lines: Receiver<String>,
    stderr: Option<JoinHandle<String>>,
}

impl Monitor {
    fn start(args: &[&str]) -> Monitor {
        let mut child = Command::new(env!("CARGO_BIN_EXE_dsipc"))
            .arg("monitor")
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn dsipc monitor");
        let stdout = child.stdout.take().unwrap();
        let mut stderr = child.stderr.take().unwrap();
        let (tx, lines) = mpsc::channel();
        thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let stderr = thread::spawn(move || {
            let mut s = String::new();
            let _ = stderr.read_to_string(&mut s);
            s
        });
        Monitor {
            child,
            lines,
            stderr: Some(stderr),
        }
    }

    /// The next stdout line (bounded wait).
    fn line(&mut self, timeout: Duration) -> String {
        match self.lines.recv_timeout(timeout) {
            Ok(l) => {
                eprintln!("monitor: {}", l);
                l
            }
            Err(e) => panic!(
                "no line from dsipc monitor within {:?} ({:?}); alive={}",
                timeout,
                e,
                matches!(self.child.try_wait(), Ok(None))
            ),
        }
    }

    /// Waits (bounded) for the process to exit by itself.
    fn wait(&mut self, limit: Duration) -> (ExitStatus, String) {
        let t = Instant::now();
        let status = loop {
            if let Some(s) = self.child.try_wait().unwrap() {
                break s;
            }
            if t.elapsed() > limit {
                let _ = self.child.kill();
                panic!("dsipc monitor still running after {:?}", limit);
            }
            thread::sleep(Duration::from_millis(10));
        };
        let err = self.stderr.take().unwrap().join().unwrap();
        eprintln!("monitor stderr:\n{}", err);
        (status, err)
    }

    /// Ctrl-C, then waits (bounded) for the exit.
    fn interrupt(&mut self) -> (ExitStatus, String) {
        // SAFETY: kill(2) on our own child's pid.
        assert_eq!(
            unsafe { libc::kill(self.child.id() as libc::pid_t, libc::SIGINT) },
            0
        );
        self.wait(Duration::from_secs(10))
    }
}

impl Drop for Monitor {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
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

fn temp_dir(tag: &str) -> PathBuf {
    let dir = temp_path(tag);
    fs::create_dir_all(&dir).unwrap();
    dir
}

/// The runtime's side of one reverse connection: Advertise, then (if `serve`) one command,
/// answered OK. Returns the command and, if not served, the still-open stream.
fn runtime_connection(port: &Path, adv: Advertise, serve: bool) -> (Option<Cmd>, UnixStream) {
    let mut s = UnixStream::connect(port).expect("connect to the monitor");
    s.set_read_timeout(Some(WAIT)).unwrap();
    let mut machine = ServerConnection::advertising(adv);
    let mut out = [0u8; 256];
    let n = machine.poll_transmit(&mut out).unwrap();
    assert_eq!(n, ADVERTISE_LEN);
    s.write_all(&out[..n]).unwrap();
    if !serve {
        return (None, s);
    }
    let mut buf = Vec::new();
    let mut chunk = [0u8; 512];
    loop {
        let h = machine.handle_input(&buf);
        match h.status {
            ServerStatus::Event(ServerEvent::Request { request, .. }) => {
                let n = machine
                    .send_response(&Response::Ok(Reply::Ok(Hresult::S_OK)), &mut out)
                    .unwrap();
                s.write_all(&out[..n]).unwrap();
                return (Some(request.command()), s);
            }
            ServerStatus::Partial { .. } => {}
            other => panic!("runtime side: {:?}", other),
        }
        let n = s.read(&mut chunk).unwrap();
        assert!(n > 0, "the monitor closed before sending a command");
        buf.extend_from_slice(&chunk[..n]);
    }
}

#[test]
fn resumes_each_runtime_once_holds_reconnects_and_ctrl_c_removes_the_socket() {
    let dir = temp_dir("mon");
    let port = dir.join("port.sock");
    let port_s = port.to_str().unwrap();
    let mut mon = Monitor::start(&["--listen", port_s, "--resume", "--json"]);
    wait_for_socket(&port);
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
    let (status, stderr) = mon.interrupt();
    assert_eq!(status.code(), Some(0), "{}", stderr);
    assert!(!port.exists(), "the socket file is removed on Ctrl-C");
    held.set_read_timeout(Some(WAIT)).unwrap();
    assert_eq!(held.read(&mut byte).unwrap(), 0, "held connection closed");
    let _ = fs::remove_dir_all(&dir);
}

#[test]
fn without_resume_text_lines_and_nothing_is_sent() {
    let dir = temp_dir("mon-text");
    let port = dir.join("p");
    let mut mon = Monitor::start(&["--listen", port.to_str().unwrap()]);
    wait_for_socket(&port);
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
    // SAFETY: kill(2) on our own child's pid.
    unsafe { libc::kill(mon.child.id() as libc::pid_t, libc::SIGTERM) };
    let (status, _) = mon.wait(Duration::from_secs(10));
    assert_eq!(status.code(), Some(0));
    assert!(!port.exists());
    let _ = fs::remove_dir_all(&dir);
}

#[test]
fn refuses_to_replace_a_file_and_needs_listen() {
    let dir = temp_dir("mon-refuse");
    let file = dir.join("precious");
    fs::write(&file, b"data").unwrap();
    let mut mon = Monitor::start(&["--listen", file.to_str().unwrap()]);
    let (status, stderr) = mon.wait(WAIT);
    assert_eq!(status.code(), Some(1));
    assert!(stderr.contains("not a socket"), "{}", stderr);
    assert_eq!(fs::read(&file).unwrap(), b"data");

    let mut mon = Monitor::start(&[]);
    let (status, stderr) = mon.wait(WAIT);
    assert_eq!(status.code(), Some(2));
    assert!(stderr.contains("--listen"), "{}", stderr);
    let _ = fs::remove_dir_all(&dir);
}

#[test]
fn resumes_a_real_suspended_net8_runtime() {
    let dir = temp_dir("mon-real");
    let port = dir.join("port.sock");
    let port_s = port.to_str().unwrap().to_string();
    let mut mon = Monitor::start(&["--listen", &port_s, "--resume", "--json"]);
    wait_for_socket(&port);
    let ports = format!("{},connect,suspend", port_s);
    let t = Instant::now();
    let mut host = SpawnedHost::start(&[("DOTNET_DiagnosticPorts", ports.as_str())]);

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

    let (status, stderr) = mon.interrupt();
    assert_eq!(status.code(), Some(0), "{}", stderr);
    assert!(!port.exists());
    drop(host);
    let _ = fs::remove_dir_all(&dir);
}
