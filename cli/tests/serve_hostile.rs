//! `dsipc serve` against hostile clients and peers, over raw TCP where curl would be too
//! polite: request bodies that trickle, requests without a Host header, a flood of reverse
//! connections, runtime text with terminal controls. Through each, serve keeps answering
//! `/info` and stays small. Tests synchronise on answers and on serve's printed lines.
#![cfg(target_os = "linux")]

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::os::unix::net::UnixStream;
use std::time::{Duration, Instant};

use common::counters_capture_renaming_cpu_usage;
use common::serve::{Serve, START};
use dsipc::wire::{Advertise, Guid, ADVERTISE_LEN};
use dsipc_testkit::{Config, StreamSpec, TempDir};

/// The most serve may hold resident through a hostile case.
const MAX_RSS_KIB: u64 = 64 * 1024;

/// A raw request head on `serve`'s API (with its key), without `Host` unless `head` has one.
fn raw(serve: &Serve, head: &str) -> TcpStream {
    let mut s = TcpStream::connect(&serve.api).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
    let key = serve.key.as_deref().expect("a key");
    write!(s, "{}Authorization: Bearer {}\r\n\r\n", head, key).unwrap();
    s
}

/// A request head with `Expect: 100-continue` on `serve`'s API, returned once serve has
/// said `100 Continue`: its handler is then waiting for the body (the event the eviction
/// cases synchronise on, where a head still in flight could be closed unanswered).
fn awaiting_body(serve: &Serve, head: &str) -> TcpStream {
    let mut s = raw(serve, &format!("{}Expect: 100-continue\r\n", head));
    let mut got = Vec::new();
    let mut byte = [0u8; 1];
    while !got.ends_with(b"\r\n\r\n") {
        assert_eq!(s.read(&mut byte).unwrap(), 1, "serve closed: {:?}", got);
        got.push(byte[0]);
    }
    let got = String::from_utf8_lossy(&got);
    assert!(got.starts_with("HTTP/1.1 100 Continue\r\n"), "{}", got);
    s
}

/// What came back until the server closed: status and the whole text.
fn answer(mut s: TcpStream) -> (u16, String) {
    let mut raw = Vec::new();
    let _ = s.read_to_end(&mut raw);
    let text = String::from_utf8_lossy(&raw).into_owned();
    let status = text
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    (status, text)
}

fn assert_small(serve: &Serve) {
    let kib = common::vm_hwm_kib(serve.live.child.id());
    assert!(kib < MAX_RSS_KIB, "serve's peak RSS is {} KiB", kib);
}

/// Request bodies that trickle (a byte, then silence) cannot lock the API out: at the
/// connection limit a new client evicts the oldest one still waiting for its body, which is
/// answered 408; one alone is answered 408 once it falls under Kestrel's 240 bytes/s after
/// 5 s. stderr says each once.
#[test]
fn serve_slow_request_bodies_are_answered_408_and_never_lock_the_api_out() {
    let dir = TempDir::new("dsipc-sv").unwrap();
    let mut serve = Serve::with_key(dir.path());
    let post = format!(
        "POST /trace?pid=1 HTTP/1.1\r\nHost: {}\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n",
        serve.api
    );
    // Alone: the minimum data rate.
    let mut one = awaiting_body(&serve, &post);
    one.write_all(b"{").unwrap();
    let (status, text) = answer(one);
    assert_eq!(status, 408, "{}", text);
    assert!(text.contains("slower than 240 bytes/s"), "{}", text);
    serve
        .live
        .stderr_line("slower than 240 bytes/s after 5 s: answered 408", START);

    // A flood holding every connection: /info still answers, the oldest is told 408.
    let mut held = Vec::new();
    for _ in 0..64 {
        let mut s = awaiting_body(&serve, &post);
        s.write_all(b"{").unwrap();
        held.push(s);
    }
    for _ in 0..3 {
        assert_eq!(serve.get("/info").status, 200);
    }
    let (status, text) = answer(held.remove(0));
    assert_eq!(status, 408, "{}", text);
    assert!(text.contains("every connection was needed"), "{}", text);
    for s in held {
        assert_eq!(answer(s).0, 408);
    }
    assert_eq!(serve.get("/info").status, 200);
    assert_small(&serve);
    let run = serve.live.interrupt(Duration::from_secs(20));
    for needle in ["bytes/s after 5 s", "to make room"] {
        assert_eq!(
            run.stderr.matches(needle).count(),
            1,
            "{:?} once in {}",
            needle,
            run.stderr
        );
    }
}

/// RFC 9112 §3.2: an HTTP/1.1 request without Host, or any with two, is 400 (as Kestrel);
/// HTTP/1.0 may leave Host out.
#[test]
fn serve_requests_without_one_host_header_are_400() {
    let dir = TempDir::new("dsipc-sv").unwrap();
    let serve = Serve::with_key(dir.path());
    let host = format!("Host: {}\r\n", serve.api);
    for (head, want) in [
        (
            "GET /info HTTP/1.1\r\nConnection: close\r\n".to_string(),
            400,
        ),
        (
            format!(
                "GET /info HTTP/1.1\r\n{}{}Connection: close\r\n",
                host, host
            ),
            400,
        ),
        (
            format!("GET /info HTTP/1.0\r\n{}Host: other\r\n", host),
            400,
        ),
        ("GET /info HTTP/1.0\r\n".to_string(), 200),
        (
            format!("GET /info HTTP/1.1\r\n{}Connection: close\r\n", host),
            200,
        ),
    ] {
        let (status, text) = answer(raw(&serve, &head));
        assert_eq!(status, want, "{:?}: {}", head, text);
    }
    assert_eq!(serve.get("/info").status, 200);
}

/// Counter names come from the runtime: `/metrics` escapes their controls and bidi
/// overrides in HELP (`\\x1b` text, the format's own escape for the backslash), so a
/// terminal running curl sees text, and Prometheus still parses it.
#[test]
fn serve_metrics_escape_control_characters_from_the_runtime() {
    let dir = TempDir::new("dsipc-sv").unwrap();
    let _rt = common::serve::fake(
        &dir,
        Config::new().like_net8_0_4().stream(StreamSpec {
            // Slowly, so the series are there (they go when the session ends) while the
            // test scrapes.
            chunk: 1024,
            pause: Duration::from_millis(100),
            ..StreamSpec::content(counters_capture_renaming_cpu_usage(
                "\u{1b}]0;\u{9b}\u{202e}\u{7}!!",
            ))
        }),
    );
    let serve = Serve::with_key(dir.path());
    let deadline = Instant::now() + Duration::from_secs(60);
    let text = loop {
        let m = serve.scrape();
        assert_eq!(m.status, 200);
        let t = m.text();
        if t.contains("systemruntime_cpu_usage") {
            break t;
        }
        assert!(Instant::now() < deadline, "no counters: {}", t);
        std::thread::sleep(Duration::from_millis(200));
    };
    for bad in ['\u{1b}', '\u{7}', '\u{9b}', '\u{202e}'] {
        assert!(
            !text.contains(bad),
            "{:?} reached /metrics:\n{:?}",
            bad,
            text
        );
    }
    assert!(
        text.contains("\\\\x1b]0;\\\\x9b\\\\u{202e}\\\\x07!!"),
        "the escaped name is missing:\n{}",
        text
    );
    common::promtool_check(&text);
    assert_eq!(serve.get("/info").status, 200);
}

/// dotnet-monitor's MetricsController asks for no key: `/metrics` answers on the API
/// address without one (the rest still wants it). Its OperationsController binds any int32
/// pid and filters: a pid no process has lists nothing, a pid that is not an int32 is 400.
#[test]
fn serve_matches_dotnet_monitor_on_open_metrics_and_operations_pid_filters() {
    let dir = TempDir::new("dsipc-sv").unwrap();
    let serve = Serve::with_key(dir.path());
    let open = serve.get_with("/metrics", &["-H", "Authorization: none"]);
    assert_eq!(open.status, 200, "{}", open.text());
    assert!(
        open.header("content-type")
            .map_or(false, |t| t.starts_with("text/plain; version=0.0.4")),
        "{}",
        open.headers
    );
    assert_eq!(
        serve
            .get_with("/processes", &["-H", "Authorization: none"])
            .status,
        401
    );
    for pid in ["-5", "0", "-2147483648"] {
        let a = serve.get(&format!("/operations?pid={}", pid));
        assert_eq!(a.status, 200, "pid {}: {}", pid, a.text());
        assert_eq!(a.json(), serde_json::json!([]));
    }
    serve
        .get("/operations?pid=2147483648")
        .assert_problem(400, "\"pid\"");
    serve
        .get("/operations?pid=-1&uid=nope")
        .assert_problem(400, "\"uid\"");
}

/// The descriptor limit serve runs under in the flood test: low enough for a test to reach
/// (the machine's may be 20,000), high enough for the API's reserve (about 350 with two
/// listeners).
const FLOOD_NOFILE: u64 = 512;

/// Runs the child under a descriptor limit of `soft` (hard: `hard`), as a service manager
/// or a login shell would start it.
fn with_nofile(cmd: &mut std::process::Command, soft: u64, hard: u64) {
    use std::os::unix::process::CommandExt;
    // SAFETY: setrlimit is async-signal-safe; nothing else runs between fork and exec.
    unsafe {
        cmd.pre_exec(move || {
            let lim = libc::rlimit {
                rlim_cur: soft as libc::rlim_t,
                rlim_max: hard as libc::rlim_t,
            };
            if libc::setrlimit(libc::RLIMIT_NOFILE, &lim) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
}

/// A peer on the diagnostic port that advertises itself as runtime `n` and then waits.
fn advertise(port: &std::path::Path, n: u64) -> std::io::Result<UnixStream> {
    let mut s = UnixStream::connect(port)?;
    let mut cookie = [0u8; 16];
    cookie[..8].copy_from_slice(&n.to_le_bytes());
    cookie[8] = 0xd5;
    let mut bytes = [0u8; ADVERTISE_LEN];
    let len = Advertise {
        runtime_cookie: Guid(cookie),
        process_id: 100_000 + n,
        future: 0,
    }
    .emit(&mut bytes)
    .unwrap();
    s.write_all(&bytes[..len])?;
    Ok(s)
}

/// More peers on the diagnostic port than serve has descriptors: serve raises its soft
/// limit to the hard one, the pool keeps what its bound (well under the limit) allows, closes each further one at once after its
/// Advertise, says so once, and `/info` keeps answering throughout.
#[test]
fn serve_listen_mode_keeps_descriptors_for_the_api_under_a_flood_of_runtimes() {
    let dir = TempDir::new("dsipc-sv").unwrap();
    let port = dir.path().join("monitor.sock");
    let mut serve = Serve::start_with(
        dir.path(),
        &["--temp-apikey", "--diagnostic-port", port.to_str().unwrap()],
        |cmd| with_nofile(cmd, FLOOD_NOFILE / 2, FLOOD_NOFILE),
    );
    // serve raised its soft limit to the hard one.
    let limits =
        std::fs::read_to_string(format!("/proc/{}/limits", serve.live.child.id())).unwrap();
    let open_files = limits
        .lines()
        .find(|l| l.starts_with("Max open files"))
        .unwrap();
    assert_eq!(
        open_files.split_whitespace().nth(3),
        Some(FLOOD_NOFILE.to_string().as_str()),
        "{}",
        open_files
    );
    let flood = {
        let port = port.clone();
        std::thread::spawn(move || {
            // More than serve's limit, well under this test's (usually 1,024 or more).
            (0..FLOOD_NOFILE + 100)
                .map(|n| advertise(&port, n).expect("serve accepts every peer"))
                .collect::<Vec<_>>()
        })
    };
    let full = serve
        .live
        .stderr_line("the diagnostic port keeps at most", START);
    assert!(full.contains("(reported once)"), "{}", full);
    assert_eq!(serve.get("/info").status, 200);
    let mut peers = flood.join().unwrap();
    for _ in 0..3 {
        assert_eq!(serve.get("/info").status, 200);
    }
    // The last peer was turned away: closed at once, nothing written to it.
    let mut last = peers.pop().unwrap();
    last.set_read_timeout(Some(Duration::from_secs(60)))
        .unwrap();
    let mut rest = Vec::new();
    last.read_to_end(&mut rest).expect("closed");
    assert!(rest.is_empty());
    assert_small(&serve);
    drop(peers);
    assert_eq!(serve.get("/info").status, 200);
    let run = serve.live.interrupt(Duration::from_secs(20));
    assert_eq!(
        run.stderr.matches("keeps at most").count(),
        1,
        "{}",
        run.stderr
    );
    assert!(
        !run.stderr.contains("Too many open files"),
        "{}",
        run.stderr
    );
}
