//! `dsipc.exe serve` (cli/src/serve built for Windows with Rust 1.63) under wine: it lists a
//! fake runtime serving `\\.\pipe\dotnet-diagnostic-{pid}` under the pid of this (real, wine)
//! process on `GET /processes` and describes it on `GET /process?pid=PID`, asked over
//! loopback TCP with a plain HTTP/1.1 request.
#![cfg(windows)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::thread;
use std::time::Duration;

use dsipc_std::windows::endpoint_for_pid;
use dsipc_windows_tests::{fake_config, listen};

/// The dsipc.exe cargo built, as a Windows path (cargo names it by its Linux path).
fn dsipc_exe() -> String {
    let p = env!("CARGO_BIN_EXE_dsipc");
    if p.starts_with('/') {
        format!("Z:{}", p.replace('/', "\\"))
    } else {
        p.to_string()
    }
}

/// Kills dsipc.exe when the test ends, passed or not (serve runs until Ctrl-C).
struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// `GET path` over a new connection (`Connection: close`): the status code and the body
/// (de-chunked when chunked).
fn get(addr: &str, path: &str) -> (u16, String) {
    let mut s = TcpStream::connect(addr).unwrap_or_else(|e| panic!("connect {}: {}", addr, e));
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    write!(
        s,
        "GET {} HTTP/1.1\r\nHost: {}\r\nAccept: application/json\r\nConnection: close\r\n\r\n",
        path, addr
    )
    .unwrap();
    let mut raw = Vec::new();
    s.read_to_end(&mut raw)
        .unwrap_or_else(|e| panic!("reading the answer to GET {}: {}", path, e));
    let text = String::from_utf8_lossy(&raw).into_owned();
    eprintln!("GET {} ->\n{}", path, text);
    let (head, body) = text
        .split_once("\r\n\r\n")
        .unwrap_or_else(|| panic!("no end of head: {:?}", text));
    let status: u16 = head
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or_else(|| panic!("no status: {:?}", head));
    let chunked = head
        .lines()
        .any(|l| l.to_ascii_lowercase() == "transfer-encoding: chunked");
    let body = if chunked {
        let mut out = String::new();
        let mut rest = body;
        loop {
            let (size, after) = rest.split_once("\r\n").expect("a chunk size line");
            let size = usize::from_str_radix(size.trim(), 16).expect("a hex chunk size");
            if size == 0 {
                break;
            }
            out.push_str(&after[..size]);
            rest = &after[size + 2..];
        }
        out
    } else {
        body.to_string()
    };
    (status, body)
}

#[test]
fn serve_lists_and_describes_a_runtime_over_http() {
    let pid = std::process::id();
    let config = fake_config()
        .pid(u64::from(pid))
        .command_line(r"C:\app\Fake.exe --from-the-serve-test");
    let _fake = listen(endpoint_for_pid(pid).path(), config).expect("serve dotnet-diagnostic-PID");

    // Dumps would go to this folder (given, so serve leaves it; the kill below would
    // otherwise leave serve's own).
    let dumps = std::env::temp_dir();
    let mut child = Command::new(dsipc_exe())
        .args(["serve", "--no-auth", "--urls", "http://127.0.0.1:0"])
        .args(["--metricUrls", "http://127.0.0.1:0", "--dump-temp-folder"])
        .arg(&dumps)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn dsipc.exe serve");
    let err = child.stderr.take().unwrap();
    let _child = Killed(child);
    let (tx, rx) = mpsc::channel();
    thread::spawn(move || {
        for line in BufReader::new(err).lines().map_while(Result::ok) {
            eprintln!("serve stderr: {}", line);
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let addr = loop {
        let line = rx
            .recv_timeout(Duration::from_secs(60))
            .expect("serve's 'API on http://ADDR' line");
        if let Some(a) = line.strip_prefix("dsipc: API on http://") {
            break a.trim().to_string();
        }
    };

    let (status, body) = get(&addr, "/processes");
    assert_eq!(status, 200, "{}", body);
    assert!(body.starts_with('[') && body.ends_with(']'), "{}", body);
    assert!(body.contains(&format!("\"pid\":{},", pid)), "{}", body);
    assert!(body.contains("\"name\":\"Fake\""), "{}", body);

    let (status, body) = get(&addr, &format!("/process?pid={}", pid));
    assert_eq!(status, 200, "{}", body);
    assert!(body.contains(&format!("\"pid\":{},", pid)), "{}", body);
    assert!(
        body.contains(r#""commandLine":"C:\\app\\Fake.exe --from-the-serve-test""#),
        "{}",
        body
    );
    assert!(body.contains("\"operatingSystem\":\"windows\""), "{}", body);

    // A pid without a runtime: 400, as dotnet-monitor answers it.
    let (status, body) = get(&addr, "/process?pid=2000000000");
    assert_eq!(status, 400, "{}", body);
    assert!(
        body.contains("Unable to discover a target process."),
        "{}",
        body
    );
}
