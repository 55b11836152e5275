//! The fake runtime over a real socket: one request, one answer, one record.

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::Duration;

use dsipc::payload::Request;
use dsipc::{AnyRequest, Command};

use super::*;
use crate::socket::TempDir;
use dsipc::payload::ProcessInfo;
use dsipc::recv::{Poll, RecvBuffer};
use dsipc::{ClientConnection, ClientEvent};

fn roundtrip<R: Request>(path: &Path, req: &R) -> Vec<String> {
    let mut s = UnixStream::connect(path).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut c = ClientConnection::new();
    let mut tx = vec![0u8; 4096];
    let n = c.send_request(req, &mut tx).unwrap();
    s.write_all(&tx[..n]).unwrap();
    let mut all = Vec::new();
    s.read_to_end(&mut all).unwrap();
    // Through the core's receive loop, EOF included, as every adapter feeds its machine.
    let len = all.len();
    let mut rx = RecvBuffer::new(all);
    rx.filled(len);
    rx.eof();
    let mut out = Vec::new();
    while let Poll::Event(e) = rx.poll_client(&mut c).unwrap() {
        out.push(format!("{:?}", e));
    }
    out
}

#[test]
fn answers_process_info_and_records() {
    let dir = TempDir::new("dsipc-tk").unwrap();
    let rt = Config::new()
        .pid(4242)
        .listen_in(dir.path())
        .start()
        .unwrap();
    let path = rt.socket_path().unwrap().to_path_buf();
    assert!(path
        .file_name()
        .unwrap()
        .to_str()
        .unwrap()
        .starts_with("dotnet-diagnostic-4242-"));
    let events = roundtrip(&path, &ProcessInfo);
    assert!(events[0].contains("process_id: 4242"), "{:?}", events);
    let got = rt.wait_received(1, Duration::from_secs(5));
    assert_eq!(got[0].command, Some(Command::ProcessInfo));
    assert!(matches!(got[0].request(), Some(AnyRequest::ProcessInfo(_))));
    let _ = ClientEvent::EndOfStream;
    drop(rt);
    assert!(!path.exists());
}
