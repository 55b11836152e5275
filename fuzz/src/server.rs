//! The server machine: sample responses, the fragmenting driver and the `server` target.

use dsipc::conn::{RejectReason, ServerError};
use dsipc::payload::*;
use dsipc::recv::{Poll, RecvBuffer};
use dsipc::wire::{Advertise, Header, Hresult, ADVERTISE_LEN, HEADER_LEN, MAX_MESSAGE_LEN};
use dsipc::{ClientEvent, Command, EncodeError, ServerConnection, ServerEvent};

use crate::fragment::*;
use crate::util::*;
use crate::*;

/// The environment the `server` target sends for ProcessEnvironment, and the Advertise an
/// advertising `server` sends first: the crate's fixtures.
pub use dsipc::fixtures::{ADVERTISE, ENVIRONMENT};

/// The OK response the `server` target gives to `command`, by reply shape.
pub fn sample_response(command: Command) -> Response<'static> {
    dsipc::fixtures::response_for(command).expect("a request command has a reply shape")
}

/// What a server machine reported and sent, owned and independent of chunking.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ServerLog {
    /// Request, Rejected and PeerClosed events (Debug text), in order.
    pub events: Vec<String>,
    /// All `ClientData` bytes, concatenated.
    pub client_data: Vec<u8>,
    /// Everything the server wrote: Advertise, replies, continuations.
    pub transmitted: Vec<u8>,
}

fn expected_hresult(reason: &RejectReason) -> Hresult {
    match reason {
        RejectReason::BadMagic { .. } => Hresult::CORDIAGIPC_E_UNKNOWN_MAGIC,
        RejectReason::UnknownCommand { .. } => Hresult::CORDIAGIPC_E_UNKNOWN_COMMAND,
        _ => Hresult::CORDIAGIPC_E_BAD_ENCODING,
    }
}

/// Acts on one server event the way a runtime would, checking the machine's contract, and
/// checks that a client machine accepts what the server sent for a served request.
///
/// With `half_close`, the client shuts down its sending side right after its request (or
/// its rejected message): the server still answers. Returns true when that happened (the
/// driver then feeds nothing more).
fn on_server_event(
    conn: &mut ServerConnection,
    ev: ServerEvent<'_>,
    log: &mut ServerLog,
    half_close: bool,
) -> bool {
    let mut out = vec![0u8; 4096];
    match ev {
        ServerEvent::Request { request, .. } => {
            log.events.push(format!("{:?}", ev));
            let command = request.command();
            check_request_texts(&request);
            assert_eq!(conn.command(), Some(command));
            assert!(conn.wants_read() && !conn.should_close() && !conn.wants_write());
            if half_close {
                assert_eq!(conn.handle_eof(), Some(ServerEvent::PeerClosed));
                log.events.push(format!("{:?}", ServerEvent::PeerClosed));
                assert!(!conn.wants_read() && !conn.should_close());
                assert_eq!(conn.handle_eof(), None, "PeerClosed is reported once");
                assert_eq!(conn.command(), Some(command));
            }
            // A served request is one this crate would send: it encodes and decodes equal.
            let mut msg = vec![0u8; request.encoded_len()];
            let n = request
                .encode(&mut msg)
                .unwrap_or_else(|e| panic!("served request does not encode: {:?}", e));
            assert_eq!(
                AnyRequest::decode(command, &msg[HEADER_LEN..n]),
                Ok(Some(request))
            );

            // The wrong reply shape and a short buffer are refused without changing state.
            let resp = sample_response(command);
            let wrong = match ReplyKind::of(command) {
                Some(ReplyKind::SessionId) => Response::Ok(Reply::Ok(Hresult::S_OK)),
                _ => Response::Ok(Reply::SessionId(1)),
            };
            assert_eq!(
                conn.send_response(&wrong, &mut out),
                Err(ServerError::WrongReply { request: command })
            );
            let need = resp.encoded_len();
            assert_eq!(
                conn.send_response(&resp, &mut out[..need - 1]),
                Err(ServerError::Encode(EncodeError::BufferTooSmall {
                    needed: need
                }))
            );
            let n = conn.send_response(&resp, &mut out).unwrap();
            assert_eq!(n, need);
            let mut sent = out[..n].to_vec();
            assert_eq!(
                conn.send_response(&resp, &mut out),
                Err(ServerError::AlreadyReplied)
            );

            // The continuation.
            match resp {
                Response::Ok(Reply::ProcessEnvironment(e)) => {
                    let len = dsipc::conn::encode_environment_block(
                        ENVIRONMENT.iter().copied(),
                        &mut out,
                    )
                    .unwrap();
                    assert_eq!(len, e.incoming_bytes as usize);
                    assert!(!conn.should_close());
                    assert_eq!(conn.check_continuation(len), Ok(()));
                    assert!(conn.check_continuation(len + 1).is_err());
                    assert_eq!(
                        conn.continuation_sent(len + 1),
                        Err(ServerError::ContinuationTooLong {
                            announced: e.incoming_bytes,
                            attempted: len as u64 + 1,
                        })
                    );
                    conn.continuation_sent(len - 1).unwrap();
                    conn.continuation_sent(1).unwrap();
                    sent.extend_from_slice(&out[..len]);
                }
                Response::Ok(Reply::SessionId(_)) if command.is_collect_tracing() => {
                    conn.continuation_sent(8).unwrap();
                    sent.extend_from_slice(b"Nettrace");
                    assert!(!conn.should_close());
                    conn.finish_stream().unwrap();
                }
                _ => {}
            }
            assert!(conn.should_close());
            assert_eq!(conn.continuation_sent(1), Err(ServerError::NotStreaming));
            assert_eq!(conn.finish_stream(), Err(ServerError::NotStreaming));

            // A client that sent this request reads exactly that reply and continuation.
            let client = drive(&request, &sent, &mut |rest| rest, true, false);
            let expected = match resp {
                Response::Ok(r) => format!("{:?}", ClientEvent::Reply(r)),
                Response::Error(e) => format!("{:?}", ClientEvent::Error(e)),
            };
            assert_eq!(client.error, None, "client rejects the server's reply");
            assert_eq!(client.events.first(), Some(&expected));
            if command.is_collect_tracing() {
                assert_eq!(client.stream, b"Nettrace");
            }
            if command == Command::ProcessEnvironment {
                assert_eq!(client.events.len(), 1 + ENVIRONMENT.len() + 1);
            }
            log.transmitted.extend_from_slice(&sent);
            half_close
        }
        ServerEvent::Rejected(r) => {
            log.events.push(format!("{:?}", ev));
            debug(&r);
            assert_eq!(r.hresult, expected_hresult(&r.reason));
            // The error reply travels in the event: nothing is pending in the machine.
            assert!(!conn.wants_write() && conn.should_close());
            if half_close {
                assert_eq!(conn.handle_eof(), None);
            }
            let reply = r.reply();
            let h = Header::parse(&reply).unwrap();
            assert_eq!(h.command(), Command::ServerError);
            assert_eq!(
                ErrorReply::decode(Command::ProcessInfo, &reply[HEADER_LEN..]),
                Ok(ErrorReply::new(r.hresult))
            );
            log.transmitted.extend_from_slice(&reply);
            assert_eq!(conn.poll_transmit(&mut out), Ok(0));
            assert_eq!(
                conn.send_response(&Response::Ok(Reply::Ok(Hresult::S_OK)), &mut out),
                Err(ServerError::AlreadyReplied)
            );
            half_close
        }
        ServerEvent::ClientData(d) => {
            assert!(!d.is_empty(), "empty ClientData event");
            log.client_data.extend_from_slice(d);
            false
        }
        ServerEvent::PeerClosed => {
            log.events.push(format!("{:?}", ev));
            false
        }
        other => {
            log.events.push(format!("{:?}", other));
            false
        }
    }
}

/// Feeds `input` (what a client sent) to a server machine in chunks, answering as a runtime
/// would; ends with EOF when `eof` is set. With `advertise` the machine first sends an
/// Advertise; with `half_close` the client closes its side right after its first message
/// (nothing after it is fed) and must still be answered.
pub fn drive_server(
    input: &[u8],
    chunk: &mut dyn FnMut(usize) -> usize,
    eof: bool,
    advertise: bool,
    half_close: bool,
) -> ServerLog {
    let mut log = ServerLog::default();
    let mut out = [0u8; 64];
    let mut conn = if advertise {
        let mut conn = ServerConnection::advertising(ADVERTISE);
        assert!(conn.wants_write());
        assert_eq!(
            conn.poll_transmit(&mut out[..ADVERTISE_LEN - 1]),
            Err(ServerError::Encode(EncodeError::BufferTooSmall {
                needed: ADVERTISE_LEN
            }))
        );
        let n = conn.poll_transmit(&mut out).unwrap();
        assert_eq!(Advertise::parse(&out[..n]), Ok(ADVERTISE));
        log.transmitted.extend_from_slice(&out[..n]);
        conn
    } else {
        ServerConnection::new()
    };
    assert!(!conn.wants_write() && conn.wants_read() && !conn.should_close());
    assert_eq!(conn.poll_transmit(&mut out), Ok(0));
    assert_eq!(conn.command(), None);
    assert_eq!(
        conn.send_response(&Response::Ok(Reply::Ok(Hresult::S_OK)), &mut out),
        Err(ServerError::NoRequest)
    );

    // The core's receive buffer (see `drive`); nothing past one message is ever needed.
    let mut rx = RecvBuffer::with_limit(Vec::new(), MAX_MESSAGE_LEN);
    let mut fed = 0;
    loop {
        let at_eof = rx.is_eof();
        match rx.poll_server(&mut conn) {
            Ok(Poll::Event(ev)) => {
                if at_eof {
                    assert!(!matches!(ev, ServerEvent::ClientData(_)));
                    on_server_event(&mut conn, ev, &mut log, false);
                    continue;
                }
                if on_server_event(&mut conn, ev, &mut log, half_close) {
                    assert!(conn.should_close());
                    break;
                }
            }
            Ok(Poll::NeedInput) | Ok(Poll::End) if fed < input.len() => {
                let n = chunk(input.len() - fed).clamp(1, input.len() - fed);
                fed += rx.push(&input[fed..fed + n]).expect("one message fits");
            }
            Ok(Poll::NeedInput) if eof && !at_eof => rx.eof(),
            Ok(Poll::NeedInput) => break,
            Ok(Poll::End) => {
                if !at_eof {
                    assert!(conn.should_close());
                }
                break;
            }
            Err(e) => panic!("a request needs more than one message: {}", e),
        }
    }
    if eof {
        if !rx.is_eof() {
            // The exchange ended before the input did: the EOF comes now.
            if let Some(ev) = conn.handle_eof() {
                assert!(!matches!(ev, ServerEvent::ClientData(_)));
                on_server_event(&mut conn, ev, &mut log, false);
            }
        }
        assert!(!conn.wants_read());
        // A second EOF changes nothing.
        assert_eq!(conn.handle_eof(), None);
    }
    log
}

/// The server machine with fuzzer-chosen fragmentation.
///
/// Input: `[flags, n, c_1 .. c_n, client bytes ...]`. `flags` bit 0 makes the machine an
/// advertising (reverse-port) one, bit 1 half-closes the client right after its first
/// message (it must still be answered), bit 7 delivers EOF at the end; chunk sizes as in
/// [`client`]. Events, client data and everything transmitted must equal those of whole
/// delivery; every served request is answered and the reply read back by a client machine.
pub fn server(data: &[u8]) {
    let f = match Fragmented::split(data) {
        Some(f) => f,
        None => return,
    };
    let advertise = f.flags & 0x01 != 0;
    let half_close = f.flags & 0x02 != 0;
    let eof = f.flags & 0x80 != 0;
    let all = drive_server(f.input, &mut whole, eof, advertise, half_close);
    let split = drive_server(f.input, &mut f.chunker(), eof, advertise, half_close);
    assert_eq!(all, split, "chunked delivery differs from whole delivery");
}

/// Builds a `server` input (for seeds and tests).
pub fn server_input(
    eof: bool,
    advertise: bool,
    half_close: bool,
    chunks: &[u8],
    client: &[u8],
) -> Vec<u8> {
    let flags = if eof { 0x80 } else { 0 } | u8::from(advertise) | u8::from(half_close) << 1;
    fragmented_input(flags, chunks, client)
}
