//! The server machine: an in-memory client/server pair for every command (1 byte, random
//! chunks and whole), the runtime's rejections checked against real captured replies, the
//! reverse-port (Advertise) flow, continuations, and misuse.

mod common;

use common::{capture, each_request, Rng, RUNTIMES};
use dsipc::conn::{
    encode_environment_block, RejectReason, ServerConnection, ServerError, ServerEvent,
    ServerStatus,
};
use dsipc::fixtures;
use dsipc::payload::*;
use dsipc::recv::{Poll, RecvBuffer};
use dsipc::wire::{Advertise, Guid, Hresult};
use dsipc::{ClientConnection, ClientError, ClientEvent, Command, Status, UsageError};

/// Moves bytes from one side to the other in chunks, like a socket would.
struct Pipe {
    data: Vec<u8>,
    read: usize,
}

impl Pipe {
    fn new() -> Self {
        Pipe {
            data: Vec::new(),
            read: 0,
        }
    }
}

/// Feeds the server machine `bytes` in chunks through the core's receive buffer (no EOF);
/// returns its events as owned Debug text.
fn server_events(
    server: &mut ServerConnection,
    bytes: &[u8],
    mut chunk: impl FnMut(usize) -> usize,
) -> Vec<String> {
    let mut events = Vec::new();
    let mut rx = RecvBuffer::with_limit(common::Growing(Vec::new()), 1 << 17);
    let mut fed = 0;
    loop {
        match rx.poll_server(server).unwrap() {
            Poll::Event(e) => events.push(format!("{:?}", e)),
            // After the end too: more bytes are the machine's to judge.
            Poll::NeedInput | Poll::End if fed < bytes.len() => {
                let n = chunk(bytes.len() - fed).clamp(1, bytes.len() - fed);
                fed += rx.push(&bytes[fed..fed + n]).unwrap();
            }
            _ => return events,
        }
    }
}

/// A response of the right shape for `command`: the crate's fixture (ProcessInfo 1 to 3
/// describe `fixtures::PROCESS_INFO2`, ProcessEnvironment announces `fixtures::ENVIRONMENT`).
fn response_for(command: Command) -> Response<'static> {
    fixtures::response_for(command).unwrap()
}

/// One whole exchange between the two machines, with both directions chunked by `rng`
/// (or whole when `rng` is None). Returns the client's owned log.
fn exchange(req: &AnyRequest<'_>, mut rng: Option<&mut Rng>) -> common::Log {
    let mut chunker = move |left: usize| match rng.as_deref_mut() {
        Some(r) => r.below(left.min(37)),
        None => left,
    };
    // Client -> server.
    let mut client = ClientConnection::new();
    let mut tx = vec![0u8; 70_000];
    let n = client.send_request(req, &mut tx).unwrap();
    let mut server = ServerConnection::new();
    let mut c2s = Pipe::new();
    c2s.data.extend_from_slice(&tx[..n]);
    let mut buf = Vec::new();
    let got = loop {
        let h = server.handle_input(&buf);
        match h.status {
            ServerStatus::Event(ServerEvent::Request { request, reserved }) => {
                assert_eq!(reserved, 0);
                assert_eq!(&request, req);
                assert_eq!(h.consumed, n);
                break request.command();
            }
            ServerStatus::Partial { .. } => {
                let left = c2s.data.len() - c2s.read;
                assert!(left > 0, "server starved");
                let k = chunker(left).clamp(1, left);
                buf.extend_from_slice(&c2s.data[c2s.read..c2s.read + k]);
                c2s.read += k;
            }
            other => panic!("{:?}", other),
        }
    };
    // Server -> client: reply, then the continuation.
    let response = response_for(got);
    let mut s2c = vec![0u8; 4096];
    let len = server.send_response(&response, &mut s2c).unwrap();
    s2c.truncate(len);
    if got.is_collect_tracing() {
        let stream: Vec<u8> = (0..10_000u32).map(|i| (i * 7) as u8).collect();
        for part in stream.chunks(3000) {
            server.continuation_sent(part.len()).unwrap();
            s2c.extend_from_slice(part);
        }
        server.finish_stream().unwrap();
    } else if got == Command::ProcessEnvironment {
        let mut block = vec![0u8; 256];
        let n =
            encode_environment_block(fixtures::ENVIRONMENT.iter().copied(), &mut block).unwrap();
        server.continuation_sent(n).unwrap();
        s2c.extend_from_slice(&block[..n]);
    }
    assert!(server.should_close());
    // Drive the client on those bytes (its request is the same; the machine was already
    // sent, so use the common driver with a fresh client for the same request).
    let _ = client;
    common::drive(req, &s2c, chunker, true)
}

#[test]
fn in_memory_pair_every_command() {
    let mut rng = Rng(42);
    let mut count = 0;
    each_request(|req| {
        let whole = exchange(&req, None);
        assert_eq!(whole.error, None, "{:?}", req.command());
        assert!(!whole.events.is_empty());
        if req.command().is_collect_tracing() {
            assert_eq!(whole.stream.len(), 10_000);
            assert_eq!(whole.events.last().unwrap(), "EndOfStream");
        }
        if req.command() == Command::ProcessEnvironment {
            assert_eq!(whole.events.len(), 5, "{:?}", whole.events);
            assert!(whole.events[1].contains("PATH=/usr/bin:/bin"));
        }
        for _ in 0..5 {
            assert_eq!(exchange(&req, Some(&mut rng)), whole, "{:?}", req.command());
        }
        count += 1;
    });
    assert_eq!(count, 27);
}

/// The server machine answers the runtimes' captured bad requests with the very bytes the
/// real runtimes sent, and accepts every captured good request.
#[test]
fn rejections_match_real_runtimes() {
    for rt in RUNTIMES {
        for (case, reason_kind) in [
            ("bad-magic", "BadMagic"),
            ("unknown-command", "UnknownCommand"),
            ("bad-encoding-size19", "SizeTooSmall"),
        ] {
            let req = capture(rt, &format!("{}.request.bin", case));
            let expected = capture(rt, &format!("{}.reply.bin", case));
            let mut server = ServerConnection::new();
            let rejection = match server.handle_input(&req).status {
                ServerStatus::Event(ServerEvent::Rejected(r)) => r,
                other => panic!("{} {}: {:?}", rt, case, other),
            };
            assert!(format!("{:?}", rejection).contains(reason_kind));
            // The reply travels in the event; the machine holds nothing and closes.
            assert_eq!(&rejection.reply()[..], &expected[..], "{} {}", rt, case);
            assert!(server.should_close() && !server.wants_write() && !server.wants_read());
            let mut out = [0u8; 64];
            assert_eq!(server.poll_transmit(&mut out), Ok(0));
            assert_eq!(
                server_events(&mut ServerConnection::new(), &req, |n| n).len(),
                1
            );
        }
    }
    let mut accepted = 0;
    for rt in RUNTIMES {
        for entry in std::fs::read_dir(format!(
            "{}/tests/data/captures/{}",
            env!("CARGO_MANIFEST_DIR"),
            rt
        ))
        .unwrap()
        {
            let name = entry.unwrap().file_name().to_string_lossy().into_owned();
            if !name.ends_with(".request.bin")
                || name.starts_with("bad-")
                || name.starts_with("unknown-")
            {
                continue;
            }
            let req = capture(rt, &name);
            let mut server = ServerConnection::new();
            // One byte at a time, as .NET 8 tolerates.
            let events = server_events(&mut server, &req, |_| 1);
            assert_eq!(events.len(), 1);
            assert!(events[0].starts_with("Request"), "{}: {}", name, events[0]);
            accepted += 1;
        }
    }
    assert!(accepted >= 25);
}

fn raw(command: Command, payload: &[u8]) -> Vec<u8> {
    let mut m = b"DOTNET_IPC_V1\0".to_vec();
    m.extend_from_slice(&((20 + payload.len()) as u16).to_le_bytes());
    let (s, i) = command.code();
    m.extend_from_slice(&[s, i, 0xAB, 0xCD]); // reserved is ignored
    m.extend_from_slice(payload);
    m
}

fn rejection(bytes: &[u8], eof: bool) -> (Hresult, RejectReason) {
    let mut server = ServerConnection::new();
    let r = match server.handle_input(bytes).status {
        ServerStatus::Event(ServerEvent::Rejected(r)) => r,
        ServerStatus::Event(other) => panic!("{:?}", other),
        _ => {
            assert!(eof, "no rejection");
            match server.handle_eof() {
                Some(ServerEvent::Rejected(r)) => r,
                other => panic!("{:?}", other),
            }
        }
    };
    // The event carries the whole error reply; the machine only waits to be closed.
    let reply = r.reply();
    let header = dsipc::wire::Header::parse(&reply).unwrap();
    assert_eq!(header.command(), Command::ServerError);
    assert_eq!(
        ErrorReply::decode(Command::ProcessInfo, &reply[20..]),
        Ok(ErrorReply::new(r.hresult))
    );
    assert!(server.should_close() && !server.wants_write());
    assert_eq!(server.handle_eof(), None, "no second rejection");
    (r.hresult, r.reason)
}

#[test]
fn runtime_rules() {
    // EOF inside the header or the payload: BAD_ENCODING.
    let pi = raw(Command::ProcessInfo, &[]);
    assert_eq!(
        rejection(&pi[..10], true),
        (
            Hresult::CORDIAGIPC_E_BAD_ENCODING,
            RejectReason::Eof {
                needed: 20,
                available: 10
            }
        )
    );
    let stop = raw(Command::StopTracing, &[1, 2, 3, 4, 5, 6, 7, 8]);
    assert_eq!(
        rejection(&stop[..24], true).1,
        RejectReason::Eof {
            needed: 28,
            available: 24
        }
    );
    // A payload too short for its fields: BAD_ENCODING.
    let (hr, reason) = rejection(&raw(Command::StopTracing, &[1, 2, 3, 4]), false);
    assert_eq!(hr, Hresult::CORDIAGIPC_E_BAD_ENCODING);
    assert!(matches!(reason, RejectReason::InvalidPayload { .. }));
    // Values the runtime refuses: BAD_ENCODING.
    let mut bad = fixtures::COLLECT_TRACING2;
    let mut buf = vec![0u8; 1024];
    let n = bad.encode(&mut buf).unwrap();
    buf[20..24].copy_from_slice(&0u32.to_le_bytes()); // buffer size 0
    let (hr, reason) = rejection(&buf[..n], false);
    assert_eq!(hr, Hresult::CORDIAGIPC_E_BAD_ENCODING);
    assert!(matches!(
        reason,
        RejectReason::InvalidField {
            detail: dsipc::EncodeError::InvalidField {
                field: "circular_buffer_mb",
                ..
            },
            ..
        }
    ));
    bad.circular_buffer_mb = 2;
    // Trailing bytes after the parsed fields are tolerated, reserved is ignored.
    let n = bad.encode(&mut buf).unwrap();
    let mut with_tail = buf[..n].to_vec();
    with_tail.extend_from_slice(&[9, 9, 9]);
    let size = with_tail.len() as u16;
    with_tail[14..16].copy_from_slice(&size.to_le_bytes());
    with_tail[18] = 0xFF;
    let mut server = ServerConnection::new();
    let events = server_events(&mut server, &with_tail, |n| n);
    assert!(events[0].starts_with("Request"), "{:?}", events);
    assert!(events[0].contains("reserved: 255"));
    // Unknown command.
    assert_eq!(
        rejection(&raw(Command::from_code(0x04, 0x09), &[]), false),
        (
            Hresult::CORDIAGIPC_E_UNKNOWN_COMMAND,
            RejectReason::UnknownCommand {
                command: Command::Unknown {
                    command_set: 4,
                    command_id: 9
                }
            }
        )
    );
    // A connection that closes before sending anything is not an error.
    let mut server = ServerConnection::new();
    assert_eq!(server.handle_eof(), None);
    // The size is checked before the payload is awaited (as the runtime does).
    let mut small = raw(Command::ProcessInfo, &[]);
    small[14] = 3;
    assert_eq!(
        rejection(&small, false).1,
        RejectReason::SizeTooSmall { size: 3 }
    );
}

#[test]
fn reverse_port_flow() {
    let adv = Advertise {
        runtime_cookie: Guid::parse("d1ccbefd-b5c3-7749-99a7-92a9f7e91da8").unwrap(),
        process_id: 28988,
        future: 0,
    };
    for chunked in [false, true] {
        let mut runtime = ServerConnection::advertising(adv);
        assert!(runtime.wants_write());
        let mut wire = vec![0u8; 64];
        let n = runtime.poll_transmit(&mut wire).unwrap();
        assert_eq!(n, 34);
        wire.truncate(n);

        let mut monitor = ClientConnection::expecting_advertise();
        let mut tx = [0u8; 64];
        assert_eq!(
            monitor.send_request(&ResumeRuntime, &mut tx),
            Err(ClientError::Misuse(UsageError::AdvertiseNotReceived))
        );
        let mut got = None;
        let mut buf = Vec::new();
        for (i, b) in wire.iter().enumerate() {
            if chunked || i == wire.len() - 1 {
                buf.extend_from_slice(if chunked {
                    std::slice::from_ref(b)
                } else {
                    &wire[..]
                });
                let h = monitor.handle_input(&buf).unwrap();
                if let Status::Event(ClientEvent::Advertise(a)) = h.status {
                    assert_eq!(h.consumed, 34);
                    got = Some(a);
                }
            }
        }
        assert_eq!(got, Some(adv));
        let n = monitor.send_request(&ResumeRuntime, &mut tx).unwrap();
        let events = server_events(&mut runtime, &tx[..n], |n| n);
        assert_eq!(
            events,
            vec!["Request { request: ResumeRuntime(ResumeRuntime), reserved: 0 }"]
        );
        let mut out = [0u8; 64];
        let n = runtime
            .send_response(&Response::Ok(Reply::Ok(Hresult::S_OK)), &mut out)
            .unwrap();
        let h = monitor.handle_input(&out[..n]).unwrap();
        assert_eq!(
            h.status,
            Status::Event(ClientEvent::Reply(Reply::Ok(Hresult::S_OK)))
        );
        assert!(runtime.should_close());
    }
    // A short or malformed Advertise is a typed error.
    let mut monitor = ClientConnection::expecting_advertise();
    assert!(matches!(
        monitor.handle_input(&[0u8; 10]).unwrap().status,
        Status::Partial { needed: 34 }
    ));
    assert_eq!(
        monitor.handle_eof(),
        Err(ClientError::BadAdvertise(
            dsipc::wire::AdvertiseError::Truncated { available: 10 }
        ))
    );
    let mut monitor = ClientConnection::expecting_advertise();
    let mut bad = [0u8; 34];
    bad[..8].copy_from_slice(b"ADVR_V2\0");
    assert!(matches!(
        monitor.handle_input(&bad),
        Err(ClientError::BadAdvertise(
            dsipc::wire::AdvertiseError::BadMagic { .. }
        ))
    ));
}

#[test]
fn misuse() {
    let mut server = ServerConnection::new();
    let mut out = [0u8; 64];
    let ok = Response::Ok(Reply::Ok(Hresult::S_OK));
    assert_eq!(
        server.send_response(&ok, &mut out),
        Err(ServerError::NoRequest)
    );
    assert_eq!(server.continuation_sent(1), Err(ServerError::NotStreaming));
    let _ = server_events(&mut server, &raw(Command::ProcessInfo, &[]), |n| n);
    assert_eq!(server.command(), Some(Command::ProcessInfo));
    assert_eq!(
        server.send_response(&Response::Ok(Reply::SessionId(1)), &mut out),
        Err(ServerError::WrongReply {
            request: Command::ProcessInfo
        })
    );
    // Too small a buffer: nothing changes, the size needed is reported.
    let mut tiny = [0u8; 4];
    assert!(matches!(
        server.send_response(&response_for(Command::ProcessInfo), &mut tiny),
        Err(ServerError::Encode(
            dsipc::EncodeError::BufferTooSmall { .. }
        ))
    ));
    let mut big = [0u8; 512];
    server
        .send_response(&Response::Error(ErrorReply::new(Hresult::E_FAIL)), &mut big)
        .unwrap();
    assert_eq!(
        server.send_response(&ok, &mut out),
        Err(ServerError::AlreadyReplied)
    );
    assert!(server.should_close());

    // ProcessEnvironment: no more continuation than announced.
    let mut server = ServerConnection::new();
    let _ = server_events(&mut server, &raw(Command::ProcessEnvironment, &[]), |n| n);
    let reply = Response::Ok(Reply::ProcessEnvironment(ProcessEnvironmentReply {
        incoming_bytes: 8,
        future: 0,
    }));
    server.send_response(&reply, &mut big).unwrap();
    server.continuation_sent(6).unwrap();
    assert_eq!(
        server.continuation_sent(3),
        Err(ServerError::ContinuationTooLong {
            announced: 8,
            attempted: 9
        })
    );
    server.continuation_sent(2).unwrap();
    assert!(server.should_close());

    // A client that closes during a stream is reported.
    let mut server = ServerConnection::new();
    let mut buf = [0u8; 256];
    let n = fixtures::request_for(Command::CollectTracing)
        .unwrap()
        .encode(&mut buf)
        .unwrap();
    let _ = server_events(&mut server, &buf[..n], |n| n);
    server
        .send_response(&Response::Ok(Reply::SessionId(5)), &mut big)
        .unwrap();
    let h = server.handle_input(&[1]);
    assert_eq!(h.status, ServerStatus::Event(ServerEvent::ClientData(&[1])));
    assert_eq!(server.handle_eof(), Some(ServerEvent::PeerClosed));
}

#[test]
fn server_state_fits_in_256_bytes() {
    let size = core::mem::size_of::<ServerConnection>();
    println!("size_of::<ServerConnection>() = {}", size);
    assert!(size <= 256, "{}", size);
}

#[test]
fn half_closed_clients_and_idle_reverse_connections() {
    // The client half-closes after its request: it is reported once and can still be
    // answered, as the runtime answers it.
    let mut server = ServerConnection::new();
    let _ = server_events(&mut server, &raw(Command::ProcessInfo, &[]), |n| n);
    assert_eq!(server.handle_eof(), Some(ServerEvent::PeerClosed));
    assert_eq!(server.handle_eof(), None);
    assert!(!server.wants_read());
    let mut out = [0u8; 512];
    assert!(server
        .send_response(&response_for(Command::ProcessInfo), &mut out)
        .is_ok());
    assert!(server.should_close());

    // Checking a continuation records nothing.
    let mut server = ServerConnection::new();
    let _ = server_events(&mut server, &raw(Command::ProcessEnvironment, &[]), |n| n);
    assert_eq!(server.check_continuation(1), Err(ServerError::NotStreaming));
    let reply = Response::Ok(Reply::ProcessEnvironment(ProcessEnvironmentReply {
        incoming_bytes: 4,
        future: 0,
    }));
    server.send_response(&reply, &mut out).unwrap();
    assert_eq!(server.check_continuation(4), Ok(()));
    assert!(server.check_continuation(5).is_err());
    assert_eq!(server.check_continuation(4), Ok(()));
    server.continuation_sent(4).unwrap();
    assert!(server.should_close());

    // A runtime that closes its idle reverse connection after advertising is not an error.
    let adv = Advertise {
        runtime_cookie: Guid::NIL,
        process_id: 9,
        future: 0,
    };
    let mut runtime = ServerConnection::advertising(adv);
    let n = runtime.poll_transmit(&mut out).unwrap();
    let mut monitor = ClientConnection::expecting_advertise();
    assert!(matches!(
        monitor.handle_input(&out[..n]).unwrap().status,
        Status::Event(ClientEvent::Advertise(_))
    ));
    assert_eq!(monitor.handle_eof(), Ok(None));
    // But bytes after an Advertise, before any command, are.
    let mut monitor = ClientConnection::expecting_advertise();
    let mut two = out[..n].to_vec();
    two.push(0);
    let h = monitor.handle_input(&two).unwrap();
    assert_eq!(
        monitor.handle_input(&two[h.consumed..]),
        Err(ClientError::UnexpectedData { len: 1 })
    );
}
