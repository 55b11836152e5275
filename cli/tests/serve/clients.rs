//! Clients that go away, hold half requests or read nothing: serve stops their sessions and
//! goes on answering.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use dsipc::Command as Cmd;
use dsipc_testkit::{Config, StreamSpec, TempDir};

use crate::common::serve::{fake, Serve};

/// A long trace streams until the client goes away; then serve stops the session (the
/// runtime sees StopTracing); a kind of operation past its limit is 429.
#[test]
fn serve_trace_stops_when_the_client_disconnects_and_limits_operations() {
    let dir = TempDir::new("dsipc-sv").unwrap();
    let rt = fake(
        &dir,
        Config::new().like_net8_0_4().stream(StreamSpec {
            len: None,
            chunk: 16 * 1024,
            pause: Duration::from_millis(5),
            end_marker: true,
            content: None,
        }),
    );
    let serve = Serve::with_key(dir.path());
    let key = serve.key.clone().unwrap();
    let open = |n: usize| -> Vec<TcpStream> {
        (0..n)
            .map(|_| {
                let mut s = TcpStream::connect(&serve.api).unwrap();
                write!(
                    s,
                    "GET /trace?durationSeconds=-1 HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {}\r\n\r\n",
                    key
                )
                .unwrap();
                s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
                let mut first = [0u8; 4096];
                let n = s.read(&mut first).unwrap();
                assert!(String::from_utf8_lossy(&first[..n]).starts_with("HTTP/1.1 200"));
                s
            })
            .collect()
    };
    let three = open(3);
    rt.wait_streams(0, Duration::from_secs(1));
    serve
        .get("/trace?durationSeconds=-1")
        .assert_problem(429, "trace");
    drop(three);
    // Each stream ends: serve stopped it (StopTracing) or the runtime saw the close.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let ended = rt.streams();
        if ended.len() >= 3 {
            break;
        }
        assert!(Instant::now() < deadline, "streams still open: {:?}", ended);
        std::thread::sleep(Duration::from_millis(50));
    }
    let stops = rt
        .received()
        .iter()
        .filter(|r| r.command == Some(Cmd::StopTracing))
        .count();
    assert_eq!(stops, 3, "{:?}", rt.received());
    // The permits came back.
    drop(open(3));
}

/// Hundreds of idle and half-sent requests do not lock a scrape out: the oldest idle
/// connection makes room.
#[test]
fn serve_answers_while_hundreds_of_clients_hold_half_requests() {
    let dir = TempDir::new("dsipc-sv").unwrap();
    let serve = Serve::with_key(dir.path());
    let mut idle = Vec::new();
    for i in 0..400 {
        let mut s = TcpStream::connect(&serve.metrics).unwrap();
        if i % 2 == 0 {
            s.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n")
                .unwrap();
        }
        idle.push(s);
        if i % 80 == 79 {
            assert_eq!(serve.scrape().status, 200, "after {} idle clients", i + 1);
            assert_eq!(serve.get("/info").status, 200);
        }
    }
}

/// A client that asks for a trace and reads nothing holds its session only for
/// `--send-timeout`: then the session is stopped and its permit returns (three stalled
/// clients do not lock /trace out).
#[test]
fn serve_trace_of_a_client_that_reads_nothing_is_stopped_after_the_send_timeout() {
    let dir = TempDir::new("dsipc-sv").unwrap();
    let rt = fake(
        &dir,
        Config::new().like_net8_0_4().stream(StreamSpec {
            len: None,
            chunk: 64 * 1024,
            pause: Duration::ZERO,
            end_marker: true,
            content: None,
        }),
    );
    let mut serve = Serve::start(dir.path(), &["--temp-apikey", "--send-timeout", "1"]);
    let key = serve.key.clone().unwrap();
    let stalled: Vec<TcpStream> = (0..3)
        .map(|_| {
            let mut s = TcpStream::connect(&serve.api).unwrap();
            write!(
                s,
                "GET /trace?durationSeconds=-1 HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {}\r\n\r\n",
                key
            )
            .unwrap();
            s
        })
        .collect();
    // Each is stopped once the socket buffers are full and a second passed.
    for _ in 0..3 {
        serve
            .live
            .stderr_line("took nothing for", Duration::from_secs(60));
    }
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let stops = rt
            .received()
            .iter()
            .filter(|r| r.command == Some(Cmd::StopTracing))
            .count();
        if stops == 3 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "{} stops: {:?}",
            stops,
            rt.received()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    // The permits came back: a fourth trace runs.
    let t = serve.get("/trace?durationSeconds=1");
    assert_eq!(t.status, 200, "{}", t.text());
    drop(stalled);
}
