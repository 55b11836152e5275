//! The client machine: round trips for every type, chunk-split invariance, one typed error
//! per protocol violation, misuse errors, and its size.

mod common;

use common::{capture, drive, each_request, each_response, exchange_inputs, Rng};
use dsipc::payload::*;
use dsipc::wire::{Hresult, Text, HEADER_LEN};
use dsipc::{ClientConnection, ClientError, ClientEvent, Command, DecodeError, Status, UsageError};

#[test]
fn every_request_round_trips() {
    let mut n = 0;
    each_request(|req| {
        let mut buf = vec![0u8; req.encoded_len()];
        let len = req.encode(&mut buf).unwrap();
        assert_eq!(len, buf.len());
        let header = dsipc::wire::Header::parse(&buf).unwrap();
        assert_eq!(header.command(), req.command());
        let back = AnyRequest::decode(header.command(), &buf[HEADER_LEN..])
            .unwrap()
            .unwrap();
        assert_eq!(back, req);
        // Re-encoding the decoded (wire-borrowing) form gives the same bytes.
        let mut again = vec![0u8; len];
        back.encode(&mut again).unwrap();
        assert_eq!(again, buf);
        // Too small a buffer says exactly what it needs; nothing is written past it.
        let mut small = vec![0u8; len - 1];
        assert_eq!(
            req.encode(&mut small),
            Err(dsipc::EncodeError::BufferTooSmall { needed: len })
        );
        n += 1;
    });
    assert_eq!(n, 27);
    // Every named request command is covered.
    let mut seen = std::collections::HashSet::new();
    each_request(|r| {
        seen.insert(r.command());
    });
    for c in Command::ALL.iter().filter(|c| !c.is_reply()) {
        assert!(seen.contains(c), "no sample for {}", c);
    }
}

#[test]
fn every_response_round_trips() {
    each_response(|command, resp| {
        let mut buf = vec![0u8; resp.encoded_len()];
        let n = resp.encode(&mut buf).unwrap();
        assert_eq!(n, buf.len());
        let header = dsipc::wire::Header::parse(&buf).unwrap();
        let payload = &buf[HEADER_LEN..];
        let back = match header.command() {
            Command::ServerOk => Response::Ok(Reply::decode(command, payload).unwrap().unwrap()),
            Command::ServerError => Response::Error(ErrorReply::decode(command, payload).unwrap()),
            other => panic!("{}", other),
        };
        assert_eq!(back, resp);
    });
}

#[test]
fn oversized_request_is_an_error_not_a_truncation() {
    let long: String = "x".repeat(40_000);
    let req = SetEnvironmentVariable {
        name: "BIG".into(),
        value: Text::Str(&long),
    };
    let mut buf = vec![0u8; 100_000];
    assert_eq!(
        req.encode(&mut buf),
        Err(dsipc::EncodeError::MessageTooLarge {
            size: 20 + 4 + 8 + 4 + 80_002
        })
    );
    // One byte under the limit works.
    let fits: String = "x".repeat((65_535 - 20 - 12 - 4 - 2) / 2);
    let req = SetEnvironmentVariable {
        name: "BIG".into(),
        value: Text::Str(&fits),
    };
    assert_eq!(req.encode(&mut buf), Ok(65_534));
}

#[test]
fn chunk_split_invariance() {
    let mut rng = Rng(0x1234_5678_9abc_def1);
    for (req, input) in exchange_inputs() {
        let whole = drive(&req, &input, |n| n, true);
        assert_eq!(whole.error, None, "{:?}", req.0);
        let bytewise = drive(&req, &input, |_| 1, true);
        assert_eq!(bytewise, whole, "1-byte chunks, {:?}", req.0);
        for _ in 0..20 {
            let random = drive(&req, &input, |left| rng.below(left.min(97)), true);
            assert_eq!(random, whole, "random chunks, {:?}", req.0);
        }
    }
}

/// Feeds `input` after `request` in one piece and returns the error.
fn error_for<R: Request + ?Sized>(request: &R, input: &[u8], eof: bool) -> ClientError {
    let log = drive(request, input, |n| n, eof);
    let e = log.error.unwrap_or_else(|| panic!("no error: {:?}", log));
    // The same error whatever the chunking (UnexpectedData counts the bytes offered in the
    // call that found them, so only its kind is compared).
    let bytewise = drive(request, input, |_| 1, eof).error.unwrap();
    match (e, bytewise) {
        (ClientError::UnexpectedData { .. }, ClientError::UnexpectedData { len }) => {
            assert!(len > 0)
        }
        _ => assert_eq!(bytewise, e),
    }
    e
}

fn message(command: Command, payload: &[u8]) -> Vec<u8> {
    let mut m = b"DOTNET_IPC_V1\0".to_vec();
    m.extend_from_slice(&((20 + payload.len()) as u16).to_le_bytes());
    let (s, i) = command.code();
    m.extend_from_slice(&[s, i, 0, 0]);
    m.extend_from_slice(payload);
    m
}

#[test]
fn each_violation_has_its_own_error() {
    // Bad magic.
    let mut bad = message(Command::ServerOk, &[0; 4]);
    bad[12] = b'2';
    assert!(matches!(
        error_for(&ResumeRuntime, &bad, false),
        ClientError::BadMagic { found } if &found == b"DOTNET_IPC_V2\0"
    ));
    // size < 20.
    let mut small = message(Command::ServerOk, &[]);
    small[14] = 19;
    assert_eq!(
        error_for(&ResumeRuntime, &small, false),
        ClientError::SizeTooSmall { size: 19 }
    );
    // A reply from the wrong command set or id.
    assert_eq!(
        error_for(
            &ResumeRuntime,
            &message(Command::ProcessInfo, &[0; 4]),
            false
        ),
        ClientError::UnexpectedReplyCommand {
            request: Command::ResumeRuntime,
            command_set: 4,
            command_id: 0
        }
    );
    assert!(matches!(
        error_for(
            &ResumeRuntime,
            &message(Command::from_code(0xFF, 0x01), &[]),
            false
        ),
        ClientError::UnexpectedReplyCommand {
            command_set: 0xFF,
            command_id: 1,
            ..
        }
    ));
    // Payload too short: ProcessInfo reply cut inside its strings.
    let full = capture("net8.0.4", "process-info.reply.bin");
    let cut = message(Command::ServerOk, &full[20..100]);
    assert!(matches!(
        error_for(&ProcessInfo, &cut, false),
        ClientError::PayloadTooShort {
            request: Command::ProcessInfo,
            detail: DecodeError::Truncated { .. }
        }
    ));
    // Payload too long: a session id with an extra byte.
    assert_eq!(
        error_for(
            &StopTracing { session_id: 1 },
            &message(Command::ServerOk, &[0; 9]),
            false
        ),
        ClientError::PayloadTooLong {
            request: Command::StopTracing,
            len: 9,
            extra: 1
        }
    );
    // Error reply with trailing garbage (only GenerateCoreDump3 carries a message).
    assert!(matches!(
        error_for(
            &ProcessInfo,
            &message(Command::ServerError, &[5, 0x40, 0, 0x80, 1]),
            false
        ),
        ClientError::PayloadTooLong { extra: 1, .. }
    ));
    // Invalid string: count 2 without the NUL.
    let mut p = vec![0u8; 24];
    p.extend_from_slice(&2u32.to_le_bytes());
    p.extend_from_slice(&[b'A', 0, b'B', 0]);
    p.extend_from_slice(&[0; 8]);
    assert!(matches!(
        error_for(&ProcessInfo, &message(Command::ServerOk, &p), false),
        ClientError::InvalidPayload {
            detail: DecodeError::UnterminatedString {
                field: "command_line",
                offset: 24
            },
            ..
        }
    ));
    // EOF in the middle of a message (header, then payload).
    assert_eq!(
        error_for(&ProcessInfo, &full[..7], true),
        ClientError::UnexpectedEof {
            needed: 20,
            available: 7
        }
    );
    assert_eq!(
        error_for(&ProcessInfo, &full[..100], true),
        ClientError::UnexpectedEof {
            needed: 164,
            available: 100
        }
    );
    // Closed before any reply.
    assert_eq!(
        drive(&ProcessInfo, &[], |n| n, true).error,
        Some(ClientError::ClosedBeforeReply)
    );
    // Bytes after a reply that has no continuation.
    let mut extra = message(Command::ServerOk, &[0; 4]);
    extra.push(0);
    assert_eq!(
        error_for(&ResumeRuntime, &extra, false),
        ClientError::UnexpectedData { len: 1 }
    );
    // Environment block shorter or longer than announced.
    let mut env = message(Command::ServerOk, &[14, 0, 0, 0, 0, 0]);
    env.extend_from_slice(&1u32.to_le_bytes());
    env.extend_from_slice(&2u32.to_le_bytes());
    env.extend_from_slice(&[b'A', 0, 0, 0]);
    env.extend_from_slice(&[0, 0]); // 2 announced bytes no entry uses
    assert_eq!(
        error_for(&ProcessEnvironment, &env, false),
        ClientError::EnvironmentSizeMismatch {
            announced: 14,
            actual: 12
        }
    );
    let mut env = message(Command::ServerOk, &[8, 0, 0, 0, 0, 0]);
    env.extend_from_slice(&1u32.to_le_bytes());
    env.extend_from_slice(&2u32.to_le_bytes());
    env.extend_from_slice(&[b'A', 0, 0, 0]); // entry needs 8 bytes, 4 are left
    assert_eq!(
        error_for(&ProcessEnvironment, &env, false),
        ClientError::EnvironmentSizeMismatch {
            announced: 8,
            actual: 12
        }
    );
    // Environment cut short by EOF.
    let mut env = message(Command::ServerOk, &[12, 0, 0, 0, 0, 0]);
    env.extend_from_slice(&1u32.to_le_bytes());
    env.extend_from_slice(&2u32.to_le_bytes());
    assert!(matches!(
        error_for(&ProcessEnvironment, &env, true),
        ClientError::UnexpectedEof { needed: 12, .. }
    ));
    // Bytes after the end of the environment block.
    let mut env = message(Command::ServerOk, &[4, 0, 0, 0, 0, 0]);
    env.extend_from_slice(&0u32.to_le_bytes());
    env.push(9);
    assert_eq!(
        error_for(&ProcessEnvironment, &env, false),
        ClientError::UnexpectedData { len: 1 }
    );
}

#[test]
fn misuse_and_final_states() {
    let mut conn = ClientConnection::new();
    assert_eq!(
        conn.handle_input(&[1, 2, 3]).unwrap_err(),
        ClientError::Misuse(UsageError::NotSent)
    );
    assert_eq!(
        conn.handle_eof().unwrap_err(),
        ClientError::Misuse(UsageError::NotSent)
    );
    let mut tx = [0u8; 8];
    // Too small: the machine stays unsent and says what it needs.
    assert_eq!(
        conn.send_request(&ProcessInfo, &mut tx),
        Err(ClientError::Encode(dsipc::EncodeError::BufferTooSmall {
            needed: 20
        }))
    );
    let mut tx = [0u8; 64];
    assert_eq!(conn.send_request(&ProcessInfo, &mut tx), Ok(20));
    assert_eq!(
        conn.send_request(&ProcessInfo, &mut tx),
        Err(ClientError::Misuse(UsageError::AlreadySent))
    );
    // A failed machine repeats its error.
    let bad = [0u8; 20];
    let e = conn.handle_input(&bad).unwrap_err();
    assert!(matches!(e, ClientError::BadMagic { .. }));
    assert_eq!(conn.handle_input(&[]).unwrap_err(), e);
    assert_eq!(conn.handle_eof().unwrap_err(), e);
    assert!(conn.is_finished());
}

#[test]
fn invalid_requests_are_refused_before_sending() {
    let mut conn = ClientConnection::new();
    let mut tx = [0u8; 256];
    let e = conn
        .send_request(
            &GenerateCoreDump {
                dump_name: Text::Null,
                dump_type: DumpType::Normal,
                diagnostics: 0,
            },
            &mut tx,
        )
        .unwrap_err();
    assert!(matches!(
        e,
        ClientError::Encode(dsipc::EncodeError::InvalidField {
            field: "dump_name",
            ..
        })
    ));
    // Still unsent: a valid request can follow.
    assert!(conn.send_request(&ProcessInfo, &mut tx).is_ok());
}

#[test]
fn user_events_session_asks_for_fd_passing() {
    let mut conn = ClientConnection::new();
    let mut tx = [0u8; 256];
    let req = CollectTracing5::UserEvents(dsipc::fixtures::USER_EVENTS_SESSION);
    conn.send_request(&req, &mut tx).unwrap();
    assert!(req.requires_fd_passing());
    // Through AnyRequest too (what generic drivers hold).
    assert!(AnyRequest::from(req).requires_fd_passing());
    assert!(conn.requires_fd_passing());
    let mut conn = ClientConnection::new();
    conn.send_request(&ProcessInfo, &mut tx).unwrap();
    assert!(!conn.requires_fd_passing());
}

#[test]
fn stream_passes_through_without_copy() {
    let mut conn = ClientConnection::new();
    let mut tx = [0u8; 1024];
    conn.send_request(&dsipc::fixtures::COLLECT_TRACING2, &mut tx)
        .unwrap();
    let mut input = message(Command::ServerOk, &7u64.to_le_bytes());
    input.extend_from_slice(b"Nettrace-and-more");
    let h = conn.handle_input(&input).unwrap();
    assert_eq!(
        h.status,
        Status::Event(ClientEvent::Reply(Reply::SessionId(7)))
    );
    let rest = &input[h.consumed..];
    let h = conn.handle_input(rest).unwrap();
    match h.status {
        // The very same bytes: a pointer into the input, not a copy.
        Status::Event(ClientEvent::StreamData(d)) => assert_eq!(d.as_ptr(), rest.as_ptr()),
        other => panic!("{:?}", other),
    }
    assert!(conn.is_streaming());
    assert_eq!(conn.handle_eof(), Ok(Some(ClientEvent::EndOfStream)));
    assert!(conn.is_finished());
}

#[test]
fn hresult_display_names_the_code() {
    assert_eq!(
        Hresult::CORDIAGIPC_E_UNKNOWN_COMMAND.to_string(),
        "0x80131385 (CORDIAGIPC_E_UNKNOWN_COMMAND: the runtime does not know this command)"
    );
    assert_eq!(Hresult(0x1234).to_string(), "0x00001234");
}

#[test]
fn machine_state_fits_in_256_bytes() {
    let size = core::mem::size_of::<ClientConnection>();
    println!("size_of::<ClientConnection>() = {}", size);
    assert!(size <= 256, "{}", size);
}

/// A request of the caller's own, for a command this crate does not know (a newer
/// runtime's): its OK reply is surfaced raw, its error reply decoded, never a failure.
#[test]
fn replies_to_unknown_commands_are_surfaced_raw() {
    struct Future;
    impl Request for Future {
        fn command(&self) -> Command {
            Command::Unknown {
                command_set: 0x02,
                command_id: 0x42,
            }
        }
        fn payload_len(&self) -> usize {
            1
        }
        fn write_payload(&self, w: &mut dsipc::wire::Writer<'_>) {
            w.bytes(&[7]);
        }
    }
    let mut conn = ClientConnection::new();
    let mut out = [0u8; 64];
    let n = conn.send_request(&Future, &mut out).unwrap();
    assert_eq!(&out[16..n], &[0x02, 0x42, 0, 0, 7]);
    let reply = message(Command::ServerOk, &[1, 2, 3]);
    let h = conn.handle_input(&reply).unwrap();
    assert_eq!(h.consumed, reply.len());
    match h.status {
        Status::Event(ClientEvent::Reply(Reply::Raw(p))) => assert_eq!(p, &[1, 2, 3]),
        other => panic!("{:?}", other),
    }
    assert_eq!(conn.handle_eof().unwrap(), None);
    assert!(conn.is_finished());
    // The same reply, one byte at a time, gives the same event.
    let log = drive(&Future, &reply, |_| 1, true);
    assert!(log.error.is_none(), "{:?}", log);
    // An error reply to it is the usual typed error reply.
    let mut conn = ClientConnection::new();
    conn.send_request(&Future, &mut out).unwrap();
    let err = message(Command::ServerError, &0x8013_1384u32.to_le_bytes());
    match conn.handle_input(&err).unwrap().status {
        Status::Event(ClientEvent::Error(e)) => {
            assert_eq!(e.hresult, Hresult(0x8013_1384u32 as i32))
        }
        other => panic!("{:?}", other),
    }
}
