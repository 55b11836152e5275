//! A ProcessInfo round trip over a real Windows named pipe: the server side (this thread)
//! plays the runtime with a pipe made by `CreateNamedPipeW`; the client side (a second
//! thread) opens `\\.\pipe\NAME` with `std::fs::OpenOptions` and drives
//! `dsipc::ClientConnection`, as the std adapter will.
#![cfg(windows)]

use std::io::{Read, Write};
use std::thread;

use dsipc::conn::{ClientConnection, ClientEvent, Status};
use dsipc::payload::{AnyRequest, ProcessInfo, ProcessInfoReply, Reply, Request, Response};
use dsipc::wire::{Command, Guid, Header, Text, HEADER_LEN};
use dsipc_windows_tests::{pipe_path, unique_pipe_name, PipeServer};

const PID: u64 = 4242;
const COOKIE: Guid = Guid::from_fields(
    0x0123_4567,
    0x89ab,
    0xcdef,
    [0x01, 0x23, 0x45, 0x67, 0x89, 0xab, 0xcd, 0xef],
);
const COMMAND_LINE: &str = r"C:\app\App.exe --flag";
const OS: &str = "Windows";
const ARCH: &str = "x64";

/// What the client saw, copied out of the borrowed reply.
#[derive(Debug, PartialEq, Eq)]
struct Seen {
    process_id: u64,
    runtime_cookie: Guid,
    command_line: String,
    os: String,
    arch: String,
}

fn text(t: Text<'_>) -> String {
    let mut buf = [0u8; 1024];
    t.to_utf8(&mut buf)
        .expect("valid UTF-16 that fits")
        .to_owned()
}

/// The client: send ProcessInfo, read until the reply decodes, then read to EOF.
fn client(path: String) -> Seen {
    let mut pipe = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(&path)
        .unwrap_or_else(|e| panic!("open {}: {}", path, e));

    let mut conn = ClientConnection::new();
    let mut out = [0u8; 64];
    let n = conn.send_request(&ProcessInfo, &mut out).expect("encode");
    assert_eq!(n, HEADER_LEN, "ProcessInfo has no payload");
    pipe.write_all(&out[..n]).expect("write request");

    let mut buf = vec![0u8; 4096];
    let mut filled = 0usize;
    let mut seen = None;
    while seen.is_none() {
        let r = pipe.read(&mut buf[filled..]).expect("read reply");
        assert!(r > 0, "server closed before the reply was complete");
        filled += r;
        let handled = conn.handle_input(&buf[..filled]).expect("decode reply");
        let consumed = handled.consumed;
        match handled.status {
            Status::Event(ClientEvent::Reply(Reply::ProcessInfo(p))) => {
                seen = Some(Seen {
                    process_id: p.process_id,
                    runtime_cookie: p.runtime_cookie,
                    command_line: text(p.command_line),
                    os: text(p.os),
                    arch: text(p.arch),
                });
            }
            Status::Partial { needed } => {
                assert_eq!(consumed, 0);
                assert!(
                    needed <= buf.len(),
                    "reply larger than the buffer: {}",
                    needed
                );
                continue;
            }
            other => panic!("unexpected status {:?}", other),
        }
        buf.copy_within(consumed..filled, 0);
        filled -= consumed;
    }
    assert_eq!(filled, 0, "bytes after the reply");
    assert!(conn.is_finished());

    // The server closes its end: std reports the broken pipe as EOF (a 0-byte read).
    let r = pipe.read(&mut buf).expect("read to EOF");
    assert_eq!(r, 0, "data after the reply");
    assert_eq!(conn.handle_eof(), Ok(None));

    seen.unwrap()
}

#[test]
fn process_info_round_trip_over_named_pipe() {
    let name = unique_pipe_name("process-info");
    let server = PipeServer::create(&name).expect("CreateNamedPipeW");
    let path = pipe_path(&name);
    let client = thread::spawn(move || client(path));

    let mut pipe = server.accept().expect("ConnectNamedPipe");

    // Read and decode the request, as the runtime does: header, then payload.
    let mut head = [0u8; HEADER_LEN];
    pipe.read_exact(&mut head).expect("read header");
    let header = Header::parse(&head).expect("valid header");
    assert_eq!(header.command(), Command::ProcessInfo);
    let mut payload = vec![0u8; header.payload_len()];
    pipe.read_exact(&mut payload).expect("read payload");
    let request = AnyRequest::decode(header.command(), &payload).expect("decode request");
    assert_eq!(request, Some(AnyRequest::ProcessInfo(ProcessInfo)));
    // The client's bytes are exactly what the encoder makes.
    let mut expected = [0u8; 64];
    let n = ProcessInfo.encode(&mut expected).expect("encode");
    assert_eq!(&expected[..n], &head[..]);

    // Answer.
    let reply = Response::Ok(Reply::ProcessInfo(ProcessInfoReply {
        process_id: PID,
        runtime_cookie: COOKIE,
        command_line: Text::Str(COMMAND_LINE),
        os: Text::Str(OS),
        arch: Text::Str(ARCH),
    }));
    let mut out = [0u8; 512];
    let n = reply.encode(&mut out).expect("encode reply");
    assert_eq!(n, reply.encoded_len());
    pipe.write_all(&out[..n]).expect("write reply");
    // As the runtime closes a diagnostic stream: FlushFileBuffers (waits until the client
    // has read everything), then close.
    pipe.sync_all().expect("FlushFileBuffers");
    drop(pipe);

    let seen = client.join().expect("client thread");
    assert_eq!(
        seen,
        Seen {
            process_id: PID,
            runtime_cookie: COOKIE,
            command_line: COMMAND_LINE.to_owned(),
            os: OS.to_owned(),
            arch: ARCH.to_owned(),
        }
    );
}
