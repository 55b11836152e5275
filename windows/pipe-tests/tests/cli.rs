//! `dsipc.exe` (cli/src/main.rs built for Windows with Rust 1.63) under wine: `ps` lists a
//! fake runtime serving `\\.\pipe\dotnet-diagnostic-{pid}` under the pid of this (real,
//! wine) process, `info PID` gets its reply, and `monitor` resumes a runtime that connects
//! to its pipe.
#![cfg(windows)]

use std::io::{BufRead, BufReader, Read};
use std::process::{Child, Command, Output, Stdio};
use std::sync::mpsc::{self, Receiver};
use std::thread;
use std::time::{Duration, Instant};

use dsipc_std::windows::endpoint_for_pid;
use dsipc_windows_tests::{fake_config, listen, reverse};
use dsipc_windows_tests::{pipe_path, unique_pipe_name};

/// The dsipc.exe cargo built, as a Windows path (cargo names it by its Linux path).
fn dsipc_exe() -> String {
    let p = env!("CARGO_BIN_EXE_dsipc");
    if p.starts_with('/') {
        format!("Z:{}", p.replace('/', "\\"))
    } else {
        p.to_string()
    }
}

fn wait_bounded(mut child: Child, limit: Duration) -> Output {
    let mut out = child.stdout.take().unwrap();
    let mut err = child.stderr.take().unwrap();
    let o = thread::spawn(move || {
        let mut v = Vec::new();
        let _ = out.read_to_end(&mut v);
        v
    });
    let e = thread::spawn(move || {
        let mut v = Vec::new();
        let _ = err.read_to_end(&mut v);
        v
    });
    let t = Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if t.elapsed() > limit {
            let _ = child.kill();
            panic!("dsipc.exe ran longer than {:?}", limit);
        }
        thread::sleep(Duration::from_millis(20));
    };
    Output {
        status,
        stdout: o.join().unwrap(),
        stderr: e.join().unwrap(),
    }
}

/// `dsipc.exe ARGS`, stdin null, stdout and stderr piped.
fn spawn(args: &[&str]) -> Child {
    Command::new(dsipc_exe())
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn dsipc.exe")
}

/// The lines `read` yields, on a channel, each also logged with `tag`.
fn lines<R: Read + Send + 'static>(read: R, tag: &'static str) -> Receiver<String> {
    let (tx, rx) = mpsc::channel();
    thread::spawn(move || {
        for line in BufReader::new(read).lines().map_while(Result::ok) {
            eprintln!("{}: {}", tag, line);
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    rx
}

/// `dsipc.exe monitor ARGS`: the child, its stdout lines and its stderr lines.
fn monitor(args: &[&str]) -> (Child, Receiver<String>, Receiver<String>) {
    let mut child = spawn(&[&["monitor"], args].concat());
    let out = lines(child.stdout.take().unwrap(), "monitor stdout");
    let err = lines(child.stderr.take().unwrap(), "monitor stderr");
    (child, out, err)
}

fn dsipc(args: &[&str]) -> (i32, String, String) {
    let out = wait_bounded(spawn(args), Duration::from_secs(60));
    let r = (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    );
    eprintln!("$ dsipc {} -> {}\n{}{}", args.join(" "), r.0, r.1, r.2);
    r
}

#[test]
fn ps_lists_and_info_reads_a_runtime_named_after_a_real_process() {
    let pid = std::process::id();
    let config = fake_config()
        .pid(u64::from(pid))
        .command_line(r"C:\app\Fake.exe --from-the-cli-test");
    let _fake = listen(endpoint_for_pid(pid).path(), config).expect("serve dotnet-diagnostic-PID");

    // PID, NAME (ProcessInfo's program, without .exe: Windows has no /proc) and the
    // command line; the pipe only with --verbose.
    for verbose in [false, true] {
        let args: &[&str] = if verbose {
            &["ps", "--verbose"]
        } else {
            &["ps"]
        };
        let (code, out, err) = dsipc(args);
        assert_eq!(code, 0, "{}", err);
        let line = out
            .lines()
            .find(|l| l.split_whitespace().next() == Some(pid.to_string().as_str()))
            .unwrap_or_else(|| panic!("pid {} not listed:\n{}{}", pid, out, err));
        assert_eq!(line.split_whitespace().nth(1), Some("Fake"), "{}", line);
        assert!(
            line.contains(r"C:\app\Fake.exe --from-the-cli-test"),
            "{}",
            line
        );
        assert_eq!(
            line.contains(&format!(r"\\.\pipe\dotnet-diagnostic-{}", pid)),
            verbose,
            "{}",
            line
        );
    }

    let (code, out, err) = dsipc(&["info", &pid.to_string()]);
    assert_eq!(code, 0, "{}", err);
    assert!(
        out.contains(&format!("pid:                 {}", pid)),
        "{}",
        out
    );
    assert!(out.contains("os:                  Windows"), "{}", out);
    assert!(out.contains("runtime identifier:  win-x64"), "{}", out);

    let (code, out, _) = dsipc(&["info", &pid.to_string(), "--json"]);
    assert_eq!(code, 0);
    assert!(out.contains(&format!("\"pid\":{},", pid)), "{}", out);

    let (code, out, _) = dsipc(&["env", &pid.to_string()]);
    assert_eq!(code, 0);
    assert!(out.contains("DOTNET_gcServer=1"), "{}", out);

    // A pid without a pipe: a one-line error, exit 1.
    let (code, _, err) = dsipc(&["info", "4000000000", "--timeout", "2"]);
    assert_eq!(code, 1);
    assert!(err.contains("no such pipe"), "{}", err);
}

#[test]
fn monitor_resumes_a_runtime_that_connects_to_its_pipe() {
    let name = unique_pipe_name("cli-monitor");
    let (mut child, rx, _err) = monitor(&["--listen", name.as_str(), "--resume", "--json"]);
    // The fake retries until the monitor's pipe exists.
    let fake = reverse(std::path::Path::new(&pipe_path(&name)), fake_config());
    let first = rx.recv_timeout(Duration::from_secs(30));
    let second = rx.recv_timeout(Duration::from_secs(10));
    let _ = child.kill();
    let _ = child.wait();
    let first = first.expect("a line for the first Advertise");
    assert!(first.contains("\"pid\":4242,"), "{}", first);
    assert!(first.contains("\"resumed\":true"), "{}", first);
    assert!(fake.is_resumed());
    let second = second.expect("a line for the reconnect");
    assert!(second.contains("\"reconnect\":true"), "{}", second);
    assert!(second.contains("\"resumed\":false"), "{}", second);
}

/// Ten peers connect to the monitor's pipe and send nothing (`--timeout 600`); a runtime
/// that connects after them is reported and resumed while they are all still connected:
/// each connection has its own thread and deadline (the monitor used to read each
/// Advertise in turn, 5 s per silent peer).
#[test]
fn monitor_serves_a_runtime_behind_silent_peers() {
    use dsipc_std::windows::connect;
    use std::path::Path;

    let name = unique_pipe_name("cli-monitor-silent");
    let path = pipe_path(&name);
    let args = [
        "--listen",
        name.as_str(),
        "--resume",
        "--json",
        "--timeout",
        "600",
    ];
    let (mut child, rx, erx) = monitor(&args);
    // The pipe exists once the monitor says it listens.
    loop {
        let l = erx
            .recv_timeout(Duration::from_secs(30))
            .expect("the monitor's 'listening' line");
        if l.contains("listening") {
            break;
        }
    }
    let silent: Vec<_> = (0..10)
        .map(|i| {
            connect(Path::new(&path), Duration::from_secs(30))
                .unwrap_or_else(|e| panic!("silent peer {}: {}", i, e))
        })
        .collect();
    let fake = reverse(Path::new(&path), fake_config());
    let first = rx.recv_timeout(Duration::from_secs(30));
    let still_connected = silent.iter().filter(|s| !s.peer_closed()).count();
    let _ = child.kill();
    let _ = child.wait();
    let first = first.expect("a line for the runtime behind the silent peers");
    assert!(first.contains("\"pid\":4242,"), "{}", first);
    assert!(first.contains("\"resumed\":true"), "{}", first);
    assert!(fake.is_resumed());
    assert_eq!(
        still_connected, 10,
        "silent peers were closed before the runtime's line"
    );
}
