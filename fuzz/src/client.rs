//! The client machine: sample requests, the fragmenting driver and the `client` target.

use dsipc::payload::*;
use dsipc::recv::{Poll, RecvBuffer, RecvError};
use dsipc::wire::ADVERTISE_LEN;
use dsipc::{ClientConnection, ClientError, ClientEvent, Command};

use crate::fragment::*;
use crate::util::*;
use crate::*;

/// One valid request per request command (and both CollectTracing5/6 session kinds): the
/// crate's fixtures. The `client` target picks one with its first byte (`& 0x1F`, modulo the
/// length).
pub use dsipc::fixtures::REQUESTS as CLIENT_REQUESTS;

/// The index in [`CLIENT_REQUESTS`] of the sample for `command` (for seeds).
pub fn client_selector(command: Command) -> u8 {
    CLIENT_REQUESTS
        .iter()
        .position(|r| r.command() == command)
        .unwrap_or_else(|| panic!("no client sample for {}", command)) as u8
}

/// The sample request for `command`.
pub fn sample_request_for(command: Command) -> AnyRequest<'static> {
    dsipc::fixtures::request_for(command)
        .unwrap_or_else(|| panic!("no client sample for {}", command))
}

/// What a client machine reported, owned and independent of how the input was chunked:
/// stream bytes concatenated, other events as their Debug text.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Log {
    /// Non-stream events, in order.
    pub events: Vec<String>,
    /// All `StreamData` bytes, concatenated.
    pub stream: Vec<u8>,
    /// The error that ended the exchange.
    pub error: Option<ClientError>,
}

impl Log {
    /// The log with the one chunking-dependent value normalized: `UnexpectedData { len }`
    /// counts the bytes of the call that found them, which depends on the chunk size.
    pub fn normalized(mut self) -> Log {
        if let Some(ClientError::UnexpectedData { .. }) = self.error {
            self.error = Some(ClientError::UnexpectedData { len: 0 });
        }
        self
    }
}

fn record(log: &mut Log, ev: ClientEvent<'_>) {
    match ev {
        ClientEvent::StreamData(d) => {
            assert!(!d.is_empty(), "empty StreamData event");
            log.stream.extend_from_slice(d)
        }
        ClientEvent::EnvironmentVariable(t) => {
            check_text(&t);
            log.events.push(format!("{:?}", ev))
        }
        other => log.events.push(format!("{:?}", other)),
    }
}

/// Sends `request` on a fresh machine and feeds it `input` in chunks of `chunk(remaining)`
/// bytes (clamped to 1..=remaining), as an adapter would: append, drain events, keep what was
/// not consumed. Checks the `Partial` contract and that a failed machine repeats its error.
///
/// With `advertise`, the machine is a reverse-port one
/// ([`ClientConnection::expecting_advertise`]): the request is sent when the Advertise
/// event arrives.
pub fn drive(
    request: &AnyRequest<'_>,
    input: &[u8],
    chunk: &mut dyn FnMut(usize) -> usize,
    eof: bool,
    advertise: bool,
) -> Log {
    let mut tx = vec![0u8; request.encoded_len()];
    let mut log = Log::default();
    let mut conn = if advertise {
        let mut conn = ClientConnection::expecting_advertise();
        assert_eq!(
            conn.send_request(request, &mut tx),
            Err(ClientError::Misuse(dsipc::UsageError::AdvertiseNotReceived))
        );
        conn
    } else {
        let mut conn = ClientConnection::new();
        conn.send_request(request, &mut tx)
            .expect("sample requests encode");
        let user_events = matches!(
            request,
            AnyRequest::CollectTracing5(CollectTracing5::UserEvents(_))
                | AnyRequest::CollectTracing6(CollectTracing6::UserEvents(_))
        );
        assert_eq!(request.requires_fd_passing(), user_events);
        assert_eq!(conn.requires_fd_passing(), user_events);
        conn
    };
    // The core's receive buffer: it applies `consumed` and checks the machine's `Partial`
    // contract (consumes nothing, asks for more than is there) with debug assertions.
    let mut rx = RecvBuffer::with_limit(Vec::new(), usize::MAX);
    let mut fed = 0;
    let mut env_announced: Option<u32> = None;
    let fail = |conn: &mut ClientConnection, log: &mut Log, e: ClientError| {
        show(&e);
        // A failed machine stays failed and repeats the error.
        assert_eq!(conn.handle_input(&[]), Err(e));
        assert_eq!(conn.handle_input(b"more"), Err(e));
        assert_eq!(conn.handle_eof(), Err(e));
        assert!(conn.is_finished());
        log.error = Some(e);
    };
    loop {
        let at_eof = rx.is_eof();
        match rx.poll_client(&mut conn) {
            Ok(Poll::Event(ev)) => {
                if at_eof {
                    // Only the machine's handle_eof speaks after EOF.
                    assert_eq!(ev, ClientEvent::EndOfStream);
                }
                if let ClientEvent::Reply(Reply::ProcessEnvironment(e)) = ev {
                    env_announced = Some(e.incoming_bytes);
                }
                record(&mut log, ev);
                if let ClientEvent::Advertise(a) = ev {
                    let mut b = [0u8; ADVERTISE_LEN];
                    assert_eq!(a.emit(&mut b), Ok(ADVERTISE_LEN));
                    assert_eq!(&b[..], &input[..ADVERTISE_LEN]);
                    conn.send_request(request, &mut tx)
                        .expect("sample requests encode");
                }
            }
            // After the end, more bytes are the machine's to judge.
            Ok(Poll::NeedInput) | Ok(Poll::End) if fed < input.len() => {
                let n = chunk(input.len() - fed).clamp(1, input.len() - fed);
                fed += rx.push(&input[fed..fed + n]).expect("unbounded");
            }
            Ok(Poll::NeedInput) => {
                // One message, or one environment entry (bounded by the announced block
                // size, which may exceed 64 KiB).
                let bound = env_announced.map_or(MAX_NEEDED, |a| MAX_NEEDED.max(a as usize));
                assert!(
                    rx.needed() <= bound,
                    "Partial needs {} bytes, over the bound {}",
                    rx.needed(),
                    bound
                );
                if !eof {
                    break;
                }
                assert!(!rx.is_eof(), "NeedInput after EOF");
                rx.eof();
            }
            Ok(Poll::End) => {
                assert!(conn.is_finished());
                if eof && !rx.is_eof() {
                    // Ended by the machine: EOF changes nothing then.
                    assert_eq!(conn.handle_eof(), Ok(None));
                }
                break;
            }
            Err(RecvError::Machine(e)) => {
                fail(&mut conn, &mut log, e);
                return log;
            }
            Err(e) => panic!("{}", e),
        }
    }
    log
}

/// The client machine with fuzzer-chosen fragmentation.
///
/// Input: `[selector, n, c_1 .. c_n, peer bytes ...]`. `selector & 0x1F` picks the request
/// from [`CLIENT_REQUESTS`] (modulo its length), bit 5 makes the machine a reverse-port one
/// (the peer bytes start with an Advertise), bit 7 delivers EOF at the end; `n & 0x0F`
/// chunk sizes follow (chunk `i` is `c_(i mod n) + 1` bytes; none means one byte at a time).
/// The log of that delivery must equal the log of delivering everything at once.
pub fn client(data: &[u8]) {
    let f = match Fragmented::split(data) {
        Some(f) => f,
        None => return,
    };
    let request = &CLIENT_REQUESTS[(f.flags & 0x1F) as usize % CLIENT_REQUESTS.len()];
    let advertise = f.flags & 0x20 != 0;
    let eof = f.flags & 0x80 != 0;
    let all = drive(request, f.input, &mut whole, eof, advertise).normalized();
    let split = drive(request, f.input, &mut f.chunker(), eof, advertise).normalized();
    assert_eq!(all, split, "chunked delivery differs from whole delivery");
}

/// Builds a `client` input (for seeds and tests); with `advertise`, `peer` must start with
/// the Advertise.
pub fn client_input(
    command: Command,
    eof: bool,
    advertise: bool,
    chunks: &[u8],
    peer: &[u8],
) -> Vec<u8> {
    let flags =
        client_selector(command) | if eof { 0x80 } else { 0 } | if advertise { 0x20 } else { 0 };
    fragmented_input(flags, chunks, peer)
}

/// Builds a `reply`/`request` input: the command's two bytes, then the payload.
pub fn command_input(command: Command, payload: &[u8]) -> Vec<u8> {
    let (s, i) = command.code();
    let mut v = vec![s, i];
    v.extend_from_slice(payload);
    v
}
