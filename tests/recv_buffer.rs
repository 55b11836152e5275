//! The receive buffer (`dsipc::recv`): the same events whether the bytes arrive one at a
//! time or all at once, for every kind of exchange (client replies, streams, environment
//! blocks, server requests, nettrace), compared with the machine driven directly on the
//! whole input; the bound error; EOF inside a message; a stream that cannot be re-emitted.

mod common;

use common::{capture, each_request, exchange_inputs, Growing, Rng};
use dsipc::conn::{RejectReason, ServerConnection, ServerEvent};
use dsipc::nettrace::{NettraceError, NettraceParser};
use dsipc::payload::*;
use dsipc::recv::{BufferTooSmall, Poll, RecvBuffer, RecvError, RecvStorage};
use dsipc::{ClientConnection, ClientError, ClientEvent, Command};

/// Everything a poll loop reported, owned.
#[derive(Debug, PartialEq, Eq)]
struct Outcome {
    events: Vec<String>,
    stream: Vec<u8>,
    error: Option<String>,
}

/// Reads `input` into `rx` `chunk` bytes at a time (then EOF) and polls with `poll` until
/// the end; `poll` returns an event's text, `None` on NeedInput, or the end.
fn run<S: RecvStorage, E: std::fmt::Debug>(
    rx: &mut RecvBuffer<S>,
    input: &[u8],
    mut chunk: impl FnMut(usize) -> usize,
    mut poll: impl FnMut(&mut RecvBuffer<S>, &mut Outcome) -> Result<Poll<()>, E>,
) -> Outcome {
    let mut out = Outcome {
        events: Vec::new(),
        stream: Vec::new(),
        error: None,
    };
    let mut fed = 0;
    loop {
        match poll(rx, &mut out) {
            Ok(Poll::Event(())) => {}
            Ok(Poll::End) => {
                // The end repeats.
                assert!(matches!(poll(rx, &mut out), Ok(Poll::End)));
                return out;
            }
            Ok(Poll::NeedInput) if fed == input.len() => {
                assert!(!rx.is_eof(), "NeedInput after EOF");
                rx.eof();
            }
            Ok(Poll::NeedInput) => {
                let spare = rx.read_buf().expect("room for the next read");
                let n = chunk(input.len() - fed).clamp(1, input.len() - fed);
                let n = n.min(spare.len());
                spare[..n].copy_from_slice(&input[fed..fed + n]);
                rx.filled(n);
                fed += n;
            }
            Err(e) => {
                out.error = Some(format!("{:?}", e));
                return out;
            }
        }
    }
}

fn client_poll<S: RecvStorage>(
    conn: &mut ClientConnection,
) -> impl FnMut(&mut RecvBuffer<S>, &mut Outcome) -> Result<Poll<()>, RecvError<ClientError>> + '_ {
    move |rx, out| {
        Ok(match rx.poll_client(conn)? {
            Poll::Event(ClientEvent::StreamData(d)) => {
                out.stream.extend_from_slice(d);
                Poll::Event(())
            }
            Poll::Event(ev) => {
                out.events.push(format!("{:?}", ev));
                Poll::Event(())
            }
            Poll::NeedInput => Poll::NeedInput,
            Poll::End => Poll::End,
        })
    }
}

fn sent(command: Command) -> ClientConnection {
    let mut conn = ClientConnection::new();
    let mut tx = [0u8; 64];
    let _ = conn
        .send_request(&common::AnyRequestOwned(command), &mut tx)
        .unwrap();
    conn
}

/// The client machine on the whole input, without the helper.
fn client_direct(command: Command, input: &[u8]) -> Outcome {
    let mut conn = sent(command);
    let mut out = Outcome {
        events: Vec::new(),
        stream: Vec::new(),
        error: None,
    };
    let mut at = 0;
    loop {
        match conn.handle_input(&input[at..]) {
            Ok(h) => {
                at += h.consumed;
                match h.status {
                    dsipc::Status::Event(ClientEvent::StreamData(d)) => {
                        out.stream.extend_from_slice(d)
                    }
                    dsipc::Status::Event(ev) => out.events.push(format!("{:?}", ev)),
                    _ => break,
                }
            }
            Err(e) => {
                out.error = Some(format!("{:?}", RecvError::Machine(e)));
                return out;
            }
        }
    }
    match conn.handle_eof() {
        Ok(Some(ev)) => out.events.push(format!("{:?}", ev)),
        Ok(None) => {}
        Err(e) => out.error = Some(format!("{:?}", RecvError::Machine(e))),
    }
    out
}

fn client_through(command: Command, input: &[u8], chunk: impl FnMut(usize) -> usize) -> Outcome {
    let mut conn = sent(command);
    // Starts tiny, so that growth is exercised.
    let mut rx = RecvBuffer::with_limit(Growing(vec![0; 16]), 1 << 20);
    run(&mut rx, input, chunk, client_poll(&mut conn))
}

/// A ProcessEnvironment reply and block with `vars`.
fn environment(vars: &[String]) -> Vec<u8> {
    let texts: Vec<dsipc::Text<'_>> = vars.iter().map(|v| dsipc::Text::Str(v)).collect();
    let len = dsipc::conn::environment_block_len(texts.iter().copied());
    let reply = Response::Ok(Reply::ProcessEnvironment(ProcessEnvironmentReply {
        incoming_bytes: len as u32,
        future: 0,
    }));
    let mut out = vec![0u8; reply.encoded_len() + len];
    let n = reply.encode(&mut out).unwrap();
    let m = dsipc::conn::encode_environment_block(texts.iter().copied(), &mut out[n..]).unwrap();
    assert_eq!(n + m, out.len());
    out
}

#[test]
fn client_chunk_split_invariance() {
    let mut inputs = exchange_inputs();
    // An environment entry of 100,000 UTF-16 units: bigger than any message.
    let big = format!("BIG={}", "x".repeat(100_000));
    let vars = vec!["A=1".to_string(), big, "PATH=/usr/bin".to_string()];
    inputs.push((
        common::AnyRequestOwned(Command::ProcessEnvironment),
        environment(&vars),
    ));
    let mut rng = Rng(0x5eed_0000_1234_5678);
    let mut kinds = [false; 3];
    for (req, input) in inputs {
        let direct = client_direct(req.0, &input);
        assert_eq!(direct.error, None, "{:?}", req.0);
        kinds[0] |= !direct.stream.is_empty();
        kinds[1] |= direct
            .events
            .iter()
            .any(|e| e.contains("EnvironmentVariable"));
        kinds[2] |= direct.events.iter().any(|e| e.contains("Reply("));
        let whole = client_through(req.0, &input, |n| n);
        assert_eq!(whole, direct, "all at once, {:?}", req.0);
        let bytewise = client_through(req.0, &input, |_| 1);
        assert_eq!(bytewise, direct, "1 byte at a time, {:?}", req.0);
        let random = client_through(req.0, &input, |left| rng.below(left.min(300)) + 1);
        assert_eq!(random, direct, "random reads, {:?}", req.0);
    }
    assert_eq!(
        kinds, [true; 3],
        "streams, environments and replies were all covered"
    );
}

#[test]
fn a_stream_is_reported_once() {
    // Today's trap with the bare machine: a caller that forgets `consumed` gets the same
    // StreamData again. Through the buffer the bytes are gone once reported.
    let mut input = capture("net8.0.4", "collect-tracing2.reply.bin");
    let reply_len = input.len();
    input.extend_from_slice(b"Nettrace stream bytes");
    let mut conn = sent(Command::CollectTracing2);
    let mut storage = [0u8; 256];
    let mut rx = RecvBuffer::new(&mut storage[..]);
    assert_eq!(rx.poll_client(&mut conn), Ok(Poll::NeedInput));
    assert_eq!(rx.push(&input), Ok(input.len()));
    assert!(matches!(
        rx.poll_client(&mut conn),
        Ok(Poll::Event(ClientEvent::Reply(Reply::SessionId(_))))
    ));
    assert_eq!(
        rx.poll_client(&mut conn),
        Ok(Poll::Event(ClientEvent::StreamData(&input[reply_len..])))
    );
    assert!(rx.pending().is_empty());
    assert_eq!(rx.poll_client(&mut conn), Ok(Poll::NeedInput));
    rx.eof();
    assert_eq!(
        rx.poll_client(&mut conn),
        Ok(Poll::Event(ClientEvent::EndOfStream))
    );
    assert_eq!(rx.poll_client(&mut conn), Ok(Poll::End));
    assert_eq!(rx.poll_client(&mut conn), Ok(Poll::End));
}

fn server_poll<S: RecvStorage>(
    conn: &mut ServerConnection,
) -> impl FnMut(&mut RecvBuffer<S>, &mut Outcome) -> Result<Poll<()>, BufferTooSmall> + '_ {
    move |rx, out| {
        Ok(match rx.poll_server(conn)? {
            Poll::Event(ev) => {
                out.events.push(format!("{:?}", ev));
                Poll::Event(())
            }
            Poll::NeedInput => Poll::NeedInput,
            Poll::End => Poll::End,
        })
    }
}

fn server_direct(input: &[u8]) -> Vec<String> {
    let mut server = ServerConnection::new();
    let mut events = Vec::new();
    let mut at = 0;
    loop {
        let h = server.handle_input(&input[at..]);
        at += h.consumed;
        match h.status {
            dsipc::ServerStatus::Event(ev) => events.push(format!("{:?}", ev)),
            _ => break,
        }
    }
    if let Some(ev) = server.handle_eof() {
        events.push(format!("{:?}", ev));
    }
    events
}

#[test]
fn server_chunk_split_invariance() {
    let mut inputs = Vec::new();
    each_request(|req| {
        let mut buf = vec![0u8; req.encoded_len()];
        req.encode(&mut buf).unwrap();
        // What a client may send after its request (the fd-passing byte).
        let mut with_data = buf.clone();
        with_data.push(0);
        inputs.push(buf);
        inputs.push(with_data);
    });
    // A request cut short, and one with a bad magic.
    let mut bad = inputs[0].clone();
    bad[0] = b'X';
    inputs.push(bad);
    inputs.push(inputs[0][..inputs[0].len() - 1].to_vec());
    for input in inputs {
        let direct = server_direct(&input);
        for chunk in [usize::MAX, 1, 7] {
            let mut server = ServerConnection::new();
            let mut storage = [0u8; 65_536];
            let mut rx = RecvBuffer::new(&mut storage[..]);
            let got = run(&mut rx, &input, |_| chunk, server_poll(&mut server));
            assert_eq!(got.error, None);
            assert_eq!(got.events, direct, "reads of {} bytes", chunk);
        }
    }
}

fn nettrace_poll<S: RecvStorage>(
    p: &mut NettraceParser,
) -> impl FnMut(&mut RecvBuffer<S>, &mut Outcome) -> Result<Poll<()>, RecvError<NettraceError>> + '_
{
    move |rx, out| {
        Ok(match rx.poll_nettrace(p)? {
            Poll::Event(item) => {
                out.events.push(format!("{:?}", item));
                Poll::Event(())
            }
            Poll::NeedInput => Poll::NeedInput,
            Poll::End => Poll::End,
        })
    }
}

fn nettrace_seed() -> Vec<u8> {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/fuzz/corpus-seeds/nettrace/net8.0.4-first-blocks"
    );
    // The fuzz seed starts with 2 bytes of chunking prefix.
    std::fs::read(path).unwrap()[2..].to_vec()
}

#[test]
fn nettrace_chunk_split_invariance() {
    let data = nettrace_seed();
    let mut direct = NettraceParser::new();
    let mut items = Vec::new();
    let mut at = 0;
    loop {
        let h = direct.handle_input(&data[at..]).unwrap();
        at += h.consumed;
        match h.status {
            dsipc::nettrace::Status::Event(item) => items.push(format!("{:?}", item)),
            _ => break,
        }
    }
    assert!(direct.is_done() && items.len() > 10);
    for chunk in [usize::MAX, 1, 1000] {
        let mut p = NettraceParser::new();
        let mut rx = RecvBuffer::with_limit(Growing(Vec::new()), 1 << 21);
        let got = run(&mut rx, &data, |_| chunk, nettrace_poll(&mut p));
        assert_eq!(got.error, None);
        assert_eq!(got.events, items, "reads of {} bytes", chunk);
    }
}

#[test]
fn bound_is_a_typed_error() {
    let input = capture("net8.0.4", "process-info3.reply.bin");
    // A bound below the message: the error says how much and what the bound was.
    let mut conn = sent(Command::ProcessInfo3);
    let mut rx = RecvBuffer::with_limit(Growing(Vec::new()), 100);
    let got = run(&mut rx, &input, |n| n, client_poll(&mut conn));
    let want: RecvError<ClientError> = RecvError::BufferTooSmall(BufferTooSmall {
        needed: input.len(),
        limit: 100,
    });
    assert_eq!(got.error, Some(format!("{:?}", want)));
    assert!(rx.capacity() <= 100, "grew past the bound");

    // Fixed storage under a larger bound: the storage is the limit.
    let mut conn = sent(Command::ProcessInfo3);
    let mut storage = [0u8; 50];
    let mut rx = RecvBuffer::with_limit(&mut storage[..], 1000);
    assert_eq!(rx.poll_client(&mut conn), Ok(Poll::NeedInput));
    assert_eq!(rx.push(&input), Ok(50));
    assert_eq!(rx.poll_client(&mut conn), Ok(Poll::NeedInput));
    assert_eq!(
        rx.read_buf(),
        Err(BufferTooSmall {
            needed: input.len(),
            limit: 50
        })
    );

    // A nettrace block over the parser's bound is the parser's error; the buffer's bound
    // under the block size is the buffer's.
    let data = nettrace_seed();
    let mut p = NettraceParser::new();
    let mut rx = RecvBuffer::with_limit(Growing(Vec::new()), 4096);
    let got = run(&mut rx, &data, |n| n, nettrace_poll(&mut p));
    assert!(
        got.error.as_deref().unwrap().starts_with("BufferTooSmall"),
        "{:?}",
        got.error
    );
}

#[test]
fn eof_inside_a_message() {
    let input = capture("net8.0.4", "process-info3.reply.bin");
    let cut = &input[..input.len() - 3];
    let mut conn = sent(Command::ProcessInfo3);
    let mut storage = [0u8; 4096];
    let mut rx = RecvBuffer::new(&mut storage[..]);
    let got = run(&mut rx, cut, |_| 5, client_poll(&mut conn));
    let want: RecvError<ClientError> = RecvError::Machine(ClientError::UnexpectedEof {
        needed: input.len(),
        available: cut.len(),
    });
    assert_eq!(got.error, Some(format!("{:?}", want)));

    // Nothing at all: closed before the reply.
    let mut conn = sent(Command::ProcessInfo3);
    let mut rx = RecvBuffer::new(&mut storage[..]);
    rx.eof();
    assert_eq!(
        rx.poll_client(&mut conn),
        Err(RecvError::Machine(ClientError::ClosedBeforeReply))
    );

    // A server: the request cut short is a rejection event, then the end.
    let mut req = vec![0u8; ProcessInfo.encoded_len()];
    ProcessInfo.encode(&mut req).unwrap();
    let mut server = ServerConnection::new();
    let mut rx = RecvBuffer::new(&mut storage[..]);
    assert_eq!(rx.push(&req[..req.len() - 1]), Ok(req.len() - 1));
    assert_eq!(rx.poll_server(&mut server), Ok(Poll::NeedInput));
    rx.eof();
    match rx.poll_server(&mut server) {
        Ok(Poll::Event(ServerEvent::Rejected(r))) => {
            assert!(matches!(r.reason, RejectReason::Eof { .. }), "{:?}", r)
        }
        other => panic!("{:?}", other),
    }
    assert_eq!(rx.poll_server(&mut server), Ok(Poll::End));

    // A trace cut inside a block: the parser's Truncated.
    let data = nettrace_seed();
    let mut p = NettraceParser::new();
    let mut rx = RecvBuffer::with_limit(Growing(Vec::new()), 1 << 21);
    let got = run(
        &mut rx,
        &data[..data.len() / 2],
        |_| 999,
        nettrace_poll(&mut p),
    );
    assert!(
        got.error
            .as_deref()
            .unwrap()
            .starts_with("Machine(Truncated"),
        "{:?}",
        got.error
    );
}

/// The core's own growable storage (feature `alloc`): grows to the message, never past the
/// bound.
#[cfg(feature = "alloc")]
#[test]
fn vec_storage_grows_within_the_bound() {
    let input = capture("net8.0.4", "process-info3.reply.bin");
    let mut conn = sent(Command::ProcessInfo3);
    let mut rx = RecvBuffer::with_limit(Vec::new(), 1 << 16);
    let got = run(&mut rx, &input, |_| 3, client_poll(&mut conn));
    assert_eq!(got, client_direct(Command::ProcessInfo3, &input));
    assert!(rx.capacity() >= input.len() && rx.capacity() <= 1 << 16);
    rx.reserve(1 << 20);
    assert_eq!(rx.capacity(), 1 << 16);
}

/// Memory follows the bytes received: an environment entry announced at 200 KB of which 10
/// bytes arrived keeps the storage small, and the bound is checked against the announced
/// size at once.
#[test]
fn growth_follows_the_bytes_not_the_announcement() {
    let reply = Response::Ok(Reply::ProcessEnvironment(ProcessEnvironmentReply {
        incoming_bytes: 200_008,
        future: 0,
    }));
    let mut input = vec![0u8; reply.encoded_len()];
    let _ = reply.encode(&mut input).unwrap();
    input.extend_from_slice(&1u32.to_le_bytes()); // one variable
    input.extend_from_slice(&100_000u32.to_le_bytes()); // of 100,000 units
    input.extend_from_slice(b"A\0=\0");
    let mut conn = sent(Command::ProcessEnvironment);
    let mut rx = RecvBuffer::with_limit(Growing(Vec::new()), 1 << 20);
    let got = run(&mut rx, &input, |_| 3, client_poll(&mut conn));
    assert!(got.error.unwrap().contains("UnexpectedEof"));
    assert!(rx.capacity() <= 256, "grew to {}", rx.capacity());

    let mut conn = sent(Command::ProcessEnvironment);
    let mut rx = RecvBuffer::with_limit(Growing(Vec::new()), 100_000);
    let got = run(&mut rx, &input, |n| n, client_poll(&mut conn));
    let want: RecvError<ClientError> = RecvError::BufferTooSmall(BufferTooSmall {
        needed: 4 + 4 + 200_000,
        limit: 100_000,
    });
    assert_eq!(got.error, Some(format!("{:?}", want)));
}

/// `discard` drops what no machine will read and keeps the storage, the bound and EOF: a
/// full buffer takes reads again.
#[test]
fn discard_drops_pending_bytes_only() {
    let mut storage = [0u8; 32];
    let mut rx = RecvBuffer::new(&mut storage[..]);
    assert_eq!(rx.push(&[0xAB; 40]), Ok(32));
    assert_eq!(rx.pending(), &[0xAB; 32][..]);
    assert!(rx.read_buf().is_err(), "a full fixed buffer has no room");
    rx.eof();
    rx.discard();
    assert!(rx.pending().is_empty());
    assert_eq!((rx.capacity(), rx.limit(), rx.is_eof()), (32, 32, true));
    assert_eq!(rx.read_buf().map(|b| b.len()), Ok(32));
}
