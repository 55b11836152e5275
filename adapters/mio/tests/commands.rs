//! Every command between client and server machines over real Unix sockets, both sides in
//! one mio reactor: replies of every shape, streamed continuations with short writes,
//! environment blocks, rejections of malformed requests, and many connections at once.

mod support;

#[path = "../../../tests/common/mod.rs"]
mod common;

use std::io::{Read, Write};
use std::os::unix::net::UnixStream as StdStream;
use std::time::Duration;

use dsipc::fixtures;
use dsipc::payload::*;
use dsipc::wire::{Hresult, Text};
use dsipc::{AnyRequest, Command};
use dsipc_mio::{CloseReason, Control, Error, Event, Reactor};
use dsipc_testkit::TempDir;
use support::{env, response_for, run_until, Peer};

const T: Duration = Duration::from_secs(30);

fn setup() -> (TempDir, std::path::PathBuf, Reactor) {
    let dir = TempDir::new("dsipc-mio").unwrap();
    let path = dir.join("dotnet-diagnostic-77-1234-socket");
    let mut reactor = Reactor::new().unwrap();
    reactor.control().listen(&path).unwrap();
    (dir, path, reactor)
}

#[test]
fn every_request_and_reply() {
    let (_dir, path, mut reactor) = setup();
    let mut peer = Peer {
        stream_len: 3 * 1024 * 1024 + 17,
        ..Peer::default()
    };
    let mut served = 0;
    let mut refused = 0;
    common::each_request(|req| {
        let conn = match reactor.control().connect(&path, &req) {
            Ok(c) => c,
            Err(Error::FdPassingUnsupported) => {
                refused += 1;
                return;
            }
            Err(e) => panic!("{:?}: {}", req.command(), e),
        };
        peer.track(conn);
        let before = peer.server_done;
        run_until(&mut reactor, &mut peer, T, "exchange", |p| {
            p.logs[&conn].closed.is_some() && p.server_done > before
        });
        let log = &peer.logs[&conn];
        let command = req.command();
        assert!(log.done, "{:?}: {:?}", command, log);
        // The server saw exactly the request sent.
        assert_eq!(peer.requests.last().unwrap(), &format!("{:?}", req));
        // The client got the reply the server sent.
        let sent = format!("{:?}", ClientReply(response_for(command)));
        if command == Command::ProcessEnvironment {
            assert_eq!(log.env, env(), "{:?}", log);
            assert_eq!(log.events.last().unwrap(), "EndOfStream");
        } else {
            assert_eq!(log.events[0], sent, "{:?}", command);
        }
        if command.is_collect_tracing() {
            assert_eq!(log.stream, peer.stream_len, "{:?}", command);
            assert_eq!(log.stream_bad, None);
            assert_eq!(log.events.last().unwrap(), "EndOfStream");
        } else {
            assert_eq!(log.stream, 0);
        }
        served += 1;
    });
    assert_eq!((served, refused), (25, 2));
    // 3 MiB streams do not fit in a socket buffer: writes were short and resumed.
    assert!(peer.writable > 0);
    assert!(peer.rejections.is_empty());
    assert_eq!(reactor.control().connection_count(), 0);
}

/// Debug text the client logs for a reply.
struct ClientReply(Response<'static>);

impl std::fmt::Debug for ClientReply {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.0 {
            Response::Ok(r) => write!(f, "{:?}", dsipc::ClientEvent::Reply(r)),
            Response::Error(e) => write!(f, "{:?}", dsipc::ClientEvent::Error(e)),
        }
    }
}

/// Every reply shape (OK statuses, session ids, ProcessInfo 1-3, an environment block,
/// error replies, GenerateCoreDump3's error with a message) crosses the socket intact.
#[test]
fn every_response_shape() {
    let (_dir, path, mut reactor) = setup();
    let lone = common::lone_surrogate_command_line();
    let mut cases = 0;
    common::each_response_with(&lone, |command, response| {
        let request = fixtures::request_for(command).expect("a request command");
        let conn = reactor.control().connect(&path, &request).unwrap();
        let mut got = Vec::new();
        let mut closed = None;
        let mut server_closed = 0;
        let deadline = std::time::Instant::now() + T;
        while closed.is_none() || server_closed == 0 {
            assert!(std::time::Instant::now() < deadline, "{:?}", command);
            let mut handler = |ctl: &mut Control, event: Event<'_>| match event {
                Event::Request { conn: s, .. } => {
                    ctl.respond(s, &response).unwrap();
                    if let Response::Ok(Reply::ProcessEnvironment(e)) = response {
                        // A hand-made block: count 0 (the announced 4 bytes).
                        assert_eq!(e.incoming_bytes, 4);
                        assert_eq!(ctl.write_continuation(s, &[0, 0, 0, 0]).unwrap(), 4);
                    }
                    if command == Command::CollectTracing2 && matches!(response, Response::Ok(_)) {
                        assert_eq!(ctl.write_continuation(s, b"nettrace").unwrap(), 8);
                        ctl.finish_stream(s).unwrap();
                    }
                }
                Event::Client { conn: c, event } if c == conn => match event {
                    dsipc::ClientEvent::Reply(r) => got.push(Response::Ok(r) == response),
                    dsipc::ClientEvent::Error(e) => got.push(Response::Error(e) == response),
                    _ => {}
                },
                Event::Closed { conn: c, reason } if c == conn => closed = Some(reason),
                Event::Closed { reason, .. } => {
                    assert!(reason.is_done(), "{:?}", reason);
                    server_closed += 1;
                }
                _ => {}
            };
            reactor
                .poll(Some(Duration::from_millis(100)), &mut handler)
                .unwrap();
        }
        assert_eq!(got, [true], "{:?} {:?}", command, response);
        assert!(closed.unwrap().is_done());
        cases += 1;
    });
    assert_eq!(cases, 12);
}

/// 300 clients at once, mixed commands (streams, environment, ProcessInfo), one thread.
#[test]
fn many_concurrent_connections() {
    support::fdlimit::raise_fd_limit(4096);
    let (_dir, path, mut reactor) = setup();
    let mut peer = Peer {
        stream_len: 256 * 1024,
        ..Peer::default()
    };
    let trace = fixtures::COLLECT_TRACING2;
    for i in 0..300 {
        let conn = match i % 3 {
            0 => reactor.control().connect(&path, &ProcessInfo3),
            1 => reactor.control().connect(&path, &ProcessEnvironment),
            _ => reactor.control().connect(&path, &trace),
        }
        .unwrap();
        peer.track(conn);
    }
    run_until(&mut reactor, &mut peer, T, "300 exchanges", |p| {
        p.all_closed() && p.server_done == 300
    });
    for log in peer.logs.values() {
        assert!(log.done, "{:?}", log);
        assert_eq!(log.stream_bad, None);
    }
    let streams = peer.logs.values().filter(|l| l.stream > 0).count();
    assert_eq!(streams, 100);
    assert!(peer
        .logs
        .values()
        .filter(|l| l.stream > 0)
        .all(|l| l.stream == 256 * 1024));
    assert_eq!(peer.logs.values().filter(|l| l.env.len() == 3).count(), 100);
    assert_eq!(reactor.control().connection_count(), 0);
}

fn raw(set: u8, id: u8, payload: &[u8]) -> Vec<u8> {
    let mut m = b"DOTNET_IPC_V1\0".to_vec();
    m.extend_from_slice(&((20 + payload.len()) as u16).to_le_bytes());
    m.extend_from_slice(&[set, id, 0, 0]);
    m.extend_from_slice(payload);
    m
}

/// Malformed requests from a raw client: the reactor's server answers them as the runtime
/// does (a 24-byte error reply, then close) and reports the rejection. A request sent one
/// byte at a time (partial reads) is served.
#[test]
fn rejections_and_partial_requests() {
    let (_dir, path, mut reactor) = setup();
    let mut bad_magic = raw(4, 0, &[]);
    bad_magic[0] = b'X';
    let mut small = raw(4, 0, &[]);
    small[14] = 19;
    let cases: Vec<(&str, Vec<u8>, bool, Hresult)> = vec![
        (
            "bad magic",
            bad_magic,
            false,
            Hresult::CORDIAGIPC_E_UNKNOWN_MAGIC,
        ),
        (
            "unknown command",
            raw(4, 9, &[]),
            false,
            Hresult::CORDIAGIPC_E_UNKNOWN_COMMAND,
        ),
        (
            "size < 20",
            small,
            false,
            Hresult::CORDIAGIPC_E_BAD_ENCODING,
        ),
        (
            "short payload",
            raw(2, 1, &[1, 2, 3, 4]),
            false,
            Hresult::CORDIAGIPC_E_BAD_ENCODING,
        ),
        (
            "EOF in the header",
            raw(4, 0, &[])[..10].to_vec(),
            true,
            Hresult::CORDIAGIPC_E_BAD_ENCODING,
        ),
        (
            "EOF in the payload",
            raw(2, 1, &[1, 2, 3, 4, 5, 6, 7, 8])[..24].to_vec(),
            true,
            Hresult::CORDIAGIPC_E_BAD_ENCODING,
        ),
    ];
    let mut peer = Peer::default();
    for (name, bytes, half_close, hresult) in cases {
        let mut s = StdStream::connect(&path).unwrap();
        s.set_read_timeout(Some(T)).unwrap();
        s.write_all(&bytes).unwrap();
        if half_close {
            s.shutdown(std::net::Shutdown::Write).unwrap();
        }
        let before = peer.rejections.len();
        run_until(&mut reactor, &mut peer, T, name, |p| {
            p.rejections.len() > before && p.server_closed.len() > before
        });
        assert_eq!(peer.rejections.last().unwrap().hresult, hresult, "{}", name);
        let mut reply = Vec::new();
        let _ = s.read_to_end(&mut reply);
        assert_eq!(reply.len(), 24, "{}", name);
        assert_eq!(&reply[16..18], &[0xFF, 0xFF]);
        assert_eq!(&reply[20..24], &hresult.0.to_le_bytes(), "{}", name);
    }
    // One byte at a time, with pauses: the machine keeps the partial message between reads.
    let req = raw(4, 0, &[]);
    let path2 = path.clone();
    let writer = std::thread::spawn(move || {
        let mut s = StdStream::connect(&path2).unwrap();
        for b in &req {
            s.write_all(std::slice::from_ref(b)).unwrap();
            std::thread::sleep(Duration::from_millis(2));
        }
        let mut reply = Vec::new();
        s.set_read_timeout(Some(T)).unwrap();
        s.read_to_end(&mut reply).unwrap();
        reply
    });
    let before = peer.requests.len();
    run_until(&mut reactor, &mut peer, T, "byte-wise request", |p| {
        p.requests.len() > before
    });
    run_until(&mut reactor, &mut peer, T, "reply written", |p| {
        p.server_done > 0
    });
    let reply = writer.join().unwrap();
    assert_eq!(&reply[16..18], &[0xFF, 0x00]);
    assert!(peer.requests.last().unwrap().contains("ProcessInfo"));
}

/// Misuse is a typed error, never a panic: answering a client connection, requesting on a
/// server connection, a second answer, a continuation without a stream, a stale id.
#[test]
fn misuse_is_typed() {
    let (_dir, path, mut reactor) = setup();
    let client = reactor.control().connect(&path, &ProcessInfo).unwrap();
    let ok = Response::Ok(Reply::Ok(Hresult::S_OK));
    assert!(matches!(
        reactor.control().respond(client, &ok),
        Err(Error::NotAServer(_))
    ));
    assert!(matches!(
        reactor.control().send_request(client, &ProcessInfo),
        Err(Error::Client(dsipc::ClientError::Misuse(
            dsipc::UsageError::AlreadySent
        )))
    ));
    let mut server = None;
    let mut results = Vec::new();
    for _ in 0..50 {
        let mut handler = |ctl: &mut Control, event: Event<'_>| {
            if let Event::Request { conn, .. } = event {
                server = Some(conn);
                results.push(format!("{:?}", ctl.send_request(conn, &ProcessInfo)));
                results.push(format!("{:?}", ctl.write_continuation(conn, b"x")));
                results.push(format!(
                    "{:?}",
                    ctl.respond(conn, &Response::Ok(Reply::SessionId(1)))
                ));
                ctl.respond(conn, &response_for(Command::ProcessInfo))
                    .unwrap();
                results.push(format!("{:?}", ctl.respond(conn, &ok)));
            }
        };
        reactor
            .poll(Some(Duration::from_millis(20)), &mut handler)
            .unwrap();
        if server.is_some() {
            break;
        }
    }
    assert_eq!(results.len(), 4, "{:?}", results);
    assert!(results[0].contains("NotAClient"), "{}", results[0]);
    assert!(results[1].contains("NotStreaming"), "{}", results[1]);
    assert!(results[2].contains("WrongReply"), "{}", results[2]);
    // The reply was written at once and the connection closed: its id is dead.
    assert!(results[3].contains("UnknownConnection"), "{}", results[3]);
    // Ids of closed connections are refused.
    let mut peer = Peer::default();
    peer.track(client);
    run_until(&mut reactor, &mut peer, T, "close", |p| p.all_closed());
    let server = server.unwrap();
    let deadline = std::time::Instant::now() + T;
    while reactor.control().is_open(server) {
        assert!(std::time::Instant::now() < deadline);
        reactor
            .poll(Some(Duration::from_millis(50)), &mut peer)
            .unwrap();
    }
    assert!(matches!(
        reactor.control().respond(client, &ok),
        Err(Error::UnknownConnection(_))
    ));
    assert!(!reactor.control().close(client));
    // A request the core will not encode is refused before connecting.
    let bad = SetEnvironmentVariable {
        name: Text::Null,
        value: "x".into(),
    };
    assert!(matches!(
        reactor.control().connect(&path, &bad),
        Err(Error::Client(dsipc::ClientError::Encode(_)))
    ));
    // Nothing listens: connect fails with the OS error.
    assert!(matches!(
        reactor
            .control()
            .connect(path.with_file_name("nobody"), &ProcessInfo),
        Err(Error::Io { op: "connect", .. })
    ));
}

/// A client that leaves during a stream: the server sees the close (the session should
/// end), the client's own close is `Closed`.
#[test]
fn client_leaves_during_stream() {
    let (_dir, path, mut reactor) = setup();
    let mut peer = Peer {
        stream_len: u64::MAX, // until the client leaves
        ..Peer::default()
    };
    let providers = [Provider::new("P", 1, 4)];
    let trace = CollectTracing {
        circular_buffer_mb: 1,
        format: TraceFormat::NetTrace,
        providers: dsipc::wire::Seq::Slice(&providers),
    };
    let conn = reactor.control().connect(&path, &trace).unwrap();
    peer.track(conn);
    run_until(&mut reactor, &mut peer, T, "some stream", |p| {
        p.logs[&conn].stream > 1_000_000
    });
    assert!(reactor.control().close(conn));
    run_until(&mut reactor, &mut peer, T, "server notices", |p| {
        !p.server_closed.is_empty()
    });
    assert!(peer.logs[&conn].closed.as_deref() == Some("Closed"));
    assert_eq!(peer.server_closed, ["PeerClosed"]);
    assert_eq!(peer.logs[&conn].stream_bad, None);
    let _ = CloseReason::Done;
}

/// One registration per connection and no re-registration for plain exchanges; an idle
/// reactor sleeps in the kernel instead of spinning.
#[test]
fn registration_and_no_busy_loop() {
    let (_dir, path, mut reactor) = setup();
    let mut peer = Peer::default();
    let before = reactor.control().stats();
    for _ in 0..100 {
        let c = reactor.control().connect(&path, &ProcessInfo).unwrap();
        peer.track(c);
        run_until(&mut reactor, &mut peer, T, "exchange", |p| {
            p.all_closed() && p.server_done == p.logs.len()
        });
    }
    let s = reactor.control().stats();
    assert!(peer.logs.values().all(|l| l.done));
    assert_eq!(s.registers - before.registers, 200, "{:?}", s);
    assert_eq!(s.reregisters - before.reregisters, 0, "{:?}", s);
    assert_eq!(s.accepted - before.accepted, 100);
    assert_eq!(s.closed - before.closed, 200);
    // Request and reply each go out in one write.
    assert_eq!(s.writes - before.writes, 200, "{:?}", s);
    // Server: request + EOF/WouldBlock; client: reply + EOF (+ WouldBlock).
    assert!(s.reads - before.reads <= 600, "{:?}", s);

    // Idle, with connections held open: each poll waits in the kernel for its timeout.
    let held = reactor.control().connect(&path, &ProcessInfo).unwrap();
    let mut silent = Peer {
        answer: false,
        ..Peer::default()
    };
    run_until(&mut reactor, &mut silent, T, "request", |p| {
        p.requests.len() == 1
    });
    // Polls of 100 ms for half a second: a reactor that waits makes at most 5 of them (a
    // busy machine only makes each wait longer); one that spun would make thousands.
    let s0 = reactor.control().stats();
    let t0 = std::time::Instant::now();
    let mut polls = 0;
    while t0.elapsed() < Duration::from_millis(500) {
        let n = reactor
            .poll(Some(Duration::from_millis(100)), &mut silent)
            .unwrap();
        assert_eq!(n, 0);
        polls += 1;
    }
    let s1 = reactor.control().stats();
    assert!(polls <= 5, "{} polls of 100 ms in 500 ms", polls);
    assert_eq!(s1.polls - s0.polls, polls);
    assert_eq!(s1.events, s0.events);
    assert_eq!(s1.reads, s0.reads);
    assert!(reactor.control().is_open(held));
}

/// A stream that never ends does not starve the other connections of the same thread.
#[test]
fn an_endless_stream_does_not_starve_others() {
    let (_dir, path, mut reactor) = setup();
    let mut peer = Peer {
        stream_len: u64::MAX,
        ..Peer::default()
    };
    let trace = fixtures::COLLECT_TRACING2;
    let stream = reactor.control().connect(&path, &trace).unwrap();
    peer.track(stream);
    run_until(&mut reactor, &mut peer, T, "stream", |p| {
        p.logs[&stream].stream > 10_000_000
    });
    let mut others = Vec::new();
    for _ in 0..50 {
        let c = reactor.control().connect(&path, &ProcessInfo2).unwrap();
        peer.track(c);
        others.push(c);
    }
    let at = peer.logs[&stream].stream;
    run_until(
        &mut reactor,
        &mut peer,
        T,
        "50 exchanges beside the stream",
        |p| others.iter().all(|c| p.logs[c].done),
    );
    assert!(peer.logs[&stream].closed.is_none());
    assert!(peer.logs[&stream].stream > at);
    assert_eq!(peer.logs[&stream].stream_bad, None);
}

/// Replies that arrive one byte at a time (every message split across reads): ProcessInfo
/// and a ProcessEnvironment block.
#[test]
fn replies_arriving_byte_by_byte() {
    let dir = TempDir::new("dsipc-mio").unwrap();
    let path = dir.join("slow.sock");
    let listener = std::os::unix::net::UnixListener::bind(&path).unwrap();
    let server = std::thread::spawn(move || {
        for _ in 0..2 {
            let (mut s, _) = listener.accept().unwrap();
            let mut req = [0u8; 20];
            s.read_exact(&mut req).unwrap();
            let mut out = vec![0u8; 4096];
            let n = match req[17] {
                0x00 => response_for(Command::ProcessInfo).encode(&mut out).unwrap(),
                _ => {
                    let vars = fixtures::ENVIRONMENT.iter().copied();
                    let head = response_for(Command::ProcessEnvironment)
                        .encode(&mut out)
                        .unwrap();
                    head + dsipc::conn::encode_environment_block(vars, &mut out[head..]).unwrap()
                }
            };
            for b in &out[..n] {
                s.write_all(std::slice::from_ref(b)).unwrap();
                std::thread::sleep(Duration::from_micros(300));
            }
        }
    });
    let mut reactor = Reactor::new().unwrap();
    let mut peer = Peer::default();
    let a = reactor.control().connect(&path, &ProcessInfo).unwrap();
    peer.track(a);
    run_until(&mut reactor, &mut peer, T, "ProcessInfo", |p| {
        p.all_closed()
    });
    let b = reactor
        .control()
        .connect(&path, &ProcessEnvironment)
        .unwrap();
    peer.track(b);
    run_until(&mut reactor, &mut peer, T, "environment", |p| {
        p.all_closed()
    });
    server.join().unwrap();
    assert!(peer.logs[&a].done, "{:?}", peer.logs[&a]);
    assert_eq!(
        peer.logs[&a].events[0],
        format!("{:?}", ClientReply(response_for(Command::ProcessInfo)))
    );
    assert!(peer.logs[&b].done, "{:?}", peer.logs[&b]);
    assert_eq!(peer.logs[&b].env, env());
    // Far more reads than messages: the partial bytes were kept between reads.
    assert!(reactor.control().stats().reads > 150);
}

/// An environment entry larger than READ_BUFFER_LEN that arrives in small pieces, one
/// readiness event each: it stays in the connection's receive buffer between reads and
/// arrives whole.
#[test]
fn a_large_entry_arriving_in_pieces() {
    let dir = TempDir::new("dsipc-mio").unwrap();
    let path = dir.join("pieces.sock");
    let listener = std::os::unix::net::UnixListener::bind(&path).unwrap();
    let big = format!("BIG={}", "w".repeat(150_000));
    let vars_owned = ["A=1".to_string(), big.clone(), "Z=2".to_string()];
    let (go_tx, go) = std::sync::mpsc::channel::<()>();
    let (sent_tx, sent) = std::sync::mpsc::channel::<bool>();
    let server = std::thread::spawn(move || {
        let (mut s, _) = listener.accept().unwrap();
        let mut req = [0u8; 20];
        s.read_exact(&mut req).unwrap();
        let vars = vars_owned.iter().map(|v| Text::Str(v));
        let len = dsipc::conn::environment_block_len(vars.clone());
        let mut out = vec![0u8; len + 64];
        let head = Response::Ok(Reply::ProcessEnvironment(ProcessEnvironmentReply {
            incoming_bytes: len as u32,
            future: 0,
        }))
        .encode(&mut out)
        .unwrap();
        let n = head + dsipc::conn::encode_environment_block(vars, &mut out[head..]).unwrap();
        // One 4 KiB piece per go-ahead: the reactor reads each before the next is sent.
        for piece in out[..n].chunks(4096) {
            if go.recv().is_err() {
                return;
            }
            s.write_all(piece).unwrap();
            sent_tx.send(true).unwrap();
        }
        let _ = go.recv();
        sent_tx.send(false).unwrap();
    });
    let mut reactor = Reactor::new().unwrap();
    let mut peer = Peer::default();
    let conn = reactor
        .control()
        .connect(&path, &ProcessEnvironment)
        .unwrap();
    peer.track(conn);
    let mut pieces = 0;
    loop {
        go_tx.send(()).unwrap();
        if !sent.recv_timeout(T).unwrap() {
            break;
        }
        pieces += 1;
        // Poll until the reactor has read this piece.
        let before = reactor.control().stats().reads;
        let deadline = std::time::Instant::now() + T;
        while reactor.control().stats().reads == before {
            assert!(
                std::time::Instant::now() < deadline,
                "piece {} never read",
                pieces
            );
            reactor
                .poll(Some(Duration::from_millis(200)), &mut peer)
                .unwrap();
        }
    }
    run_until(&mut reactor, &mut peer, T, "the end", |p| p.all_closed());
    server.join().unwrap();
    let log = &peer.logs[&conn];
    assert!(log.done, "{:?}", log.closed);
    assert_eq!(log.env.len(), 3);
    assert!(log.env[1] == big, "the large entry arrived whole");
    assert_eq!((log.env[0].as_str(), log.env[2].as_str()), ("A=1", "Z=2"));
    assert!(pieces > 70, "{} pieces", pieces);
    assert!(reactor.control().stats().reads > pieces as u64);
}

/// `respond_process_info` answers each ProcessInfo version from one value (the core builds
/// the older replies), and refuses any other request without queueing anything.
#[test]
fn process_info_of_every_version_from_one_value() {
    let (_dir, path, mut reactor) = setup();
    let info = fixtures::process_info3();
    let mut replies = Vec::new();
    let mut refused = Vec::new();
    let mut closed = 0;
    let requests: [AnyRequest<'static>; 4] = [
        AnyRequest::ProcessInfo(ProcessInfo),
        AnyRequest::ProcessInfo2(ProcessInfo2),
        AnyRequest::ProcessInfo3(ProcessInfo3),
        AnyRequest::ResumeRuntime(ResumeRuntime),
    ];
    let mut clients = Vec::new();
    for req in &requests {
        clients.push(reactor.control().connect(&path, req).unwrap());
    }
    let deadline = std::time::Instant::now() + T;
    while closed < clients.len() && std::time::Instant::now() < deadline {
        reactor
            .poll(
                Some(Duration::from_millis(100)),
                &mut |ctl: &mut Control, event: Event<'_>| match event {
                    Event::Request { conn, request, .. } => {
                        match ctl.respond_process_info(conn, &info) {
                            Ok(()) => {}
                            Err(e) => {
                                refused.push((request.command(), e.to_string()));
                                ctl.respond(conn, &Response::Ok(Reply::Ok(Hresult::S_OK)))
                                    .unwrap();
                            }
                        }
                    }
                    Event::Client {
                        event: dsipc::ClientEvent::Reply(reply),
                        ..
                    } => replies.push(format!("{:?}", reply)),
                    Event::Closed { conn, .. } if clients.contains(&conn) => closed += 1,
                    _ => {}
                },
            )
            .unwrap();
    }
    assert_eq!(closed, clients.len());
    replies.sort();
    let v2 = dsipc::conn::process_info_reply(&info, Command::ProcessInfo2).unwrap();
    let v1 = dsipc::conn::process_info_reply(&info, Command::ProcessInfo).unwrap();
    let mut expected = vec![
        format!("{:?}", v1),
        format!("{:?}", v2),
        format!("{:?}", Reply::ProcessInfo3(info)),
        format!("{:?}", Reply::Ok(Hresult::S_OK)),
    ];
    expected.sort();
    assert_eq!(replies, expected);
    assert_eq!(refused.len(), 1, "{:?}", refused);
    assert_eq!(refused[0].0, Command::ResumeRuntime);
    assert!(refused[0].1.contains("ResumeRuntime"), "{}", refused[0].1);
}
