//! Runtimes that die while their trace streams: the body is cut, never ended as if whole.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use dsipc_testkit::{Config, StreamSpec, TempDir};

use super::host;
use crate::common;
use crate::common::serve::{fake, Serve};

/// A runtime whose stream ends without its end-of-stream object (it died): the chunked
/// body is cut (curl: the transfer closed with outstanding data, exit 18), never ended as
/// if whole; the same trace whole is a whole body; bytes that do not parse are passed on
/// whole.
#[test]
fn serve_trace_of_a_runtime_dying_mid_stream_is_a_cut_body() {
    let trace: &'static [u8] = Box::leak(
        std::fs::read(common::repo_root().join("tests/data/nettrace/net8.0.4-busy.nettrace"))
            .unwrap()
            .into_boxed_slice(),
    );
    let cut = StreamSpec {
        len: Some(trace.len() as u64 / 2),
        ..StreamSpec::content(trace)
    };
    for (spec, whole) in [
        (StreamSpec::content(trace), true),
        (cut, false),
        (StreamSpec::bytes(300 * 1024), true),
    ] {
        let dir = TempDir::new("dsipc-sv").unwrap();
        let _rt = fake(&dir, Config::new().like_net8_0_4().stream(spec));
        let serve = Serve::with_key(dir.path());
        let t = serve.get("/trace?durationSeconds=30");
        assert_eq!(t.status, 200);
        assert_eq!(
            t.body.len() as u64,
            spec.len
                .unwrap()
                .min(spec.content.map_or(u64::MAX, |c| c.len() as u64)),
            "every byte the runtime sent"
        );
        assert_eq!(t.curl, if whole { 0 } else { 18 }, "whole: {}", whole);
    }
}

/// A real runtime that exits while its trace streams: the body is cut (curl exit 18),
/// never a clean end of a trace that is not whole; serve goes on answering.
#[test]
fn serve_trace_of_a_real_runtime_that_exits_mid_stream_is_a_cut_body() {
    let (mut h, _pid, dir) = host("net8", &["--busy"]);
    let serve = Serve::with_key(dir.path());
    let key = serve.key.clone().unwrap();
    let mut s = TcpStream::connect(&serve.api).unwrap();
    write!(
        s,
        "GET /trace?profile=Cpu&durationSeconds=-1 HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {}\r\n\r\n",
        key
    )
    .unwrap();
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let mut got = Vec::new();
    let mut buf = [0u8; 65536];
    // The head and the first bytes of the stream: the session runs.
    while !String::from_utf8_lossy(&got).contains("Nettrace") {
        let n = s.read(&mut buf).unwrap();
        assert!(n > 0, "closed early: {}", String::from_utf8_lossy(&got));
        got.extend_from_slice(&buf[..n]);
    }
    assert!(String::from_utf8_lossy(&got).starts_with("HTTP/1.1 200"));
    h.kill();
    // Read to the end: the connection closes without the chunked terminator.
    loop {
        match s.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => got.extend_from_slice(&buf[..n]),
            Err(e) => panic!("no end within 30 s: {}", e),
        }
    }
    assert!(
        !got.ends_with(b"0\r\n\r\n"),
        "a cut trace must not end as a whole chunked body"
    );
    assert_eq!(serve.get("/info").status, 200);
}
