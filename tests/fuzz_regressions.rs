//! Regressions found by the fuzzers (`fuzz/`), as plain tests: each one is the minimal input
//! of a finding, so the bug stays covered without libFuzzer. The raw fuzzer inputs are in
//! `fuzz/regressions/<target>/` and are replayed by `cargo test` in `fuzz/`.

use dsipc::payload::{ProcessEnvironment, Reply};
use dsipc::wire::{Text, Utf16Str};
use dsipc::{ClientConnection, ClientEvent, Status};

/// An environment entry longer than 32K UTF-16 units (legal on Linux: one variable may hold
/// up to 128 KiB) needs more than one message's 65,539 bytes, which the docs of
/// `Status::Partial` used to promise. Found by the `client` target
/// (`fuzz/regressions/client/env-entry-over-64k`). Fixed by documenting the real bound: the
/// count plus the whole entry, never more than the size the reply announced (adapters grow
/// their buffer up to a limit of their own and report `BufferTooSmall` past it).
#[test]
fn environment_entry_needed_stays_within_documented_bound() {
    let mut conn = ClientConnection::new();
    let mut tx = [0u8; 64];
    let _ = conn.send_request(&ProcessEnvironment, &mut tx).unwrap();

    // Reply: incoming_bytes = 4 + 4 + 2 * 40_000 (one entry of 39_999 units + NUL), future 0.
    let units: u32 = 40_000;
    let announced = 4 + 4 + 2 * units;
    let mut input = Vec::new();
    input.extend_from_slice(b"DOTNET_IPC_V1\0");
    input.extend_from_slice(&26u16.to_le_bytes());
    input.extend_from_slice(&[0xFF, 0x00, 0, 0]);
    input.extend_from_slice(&announced.to_le_bytes());
    input.extend_from_slice(&0u16.to_le_bytes());
    // Continuation: count 1, then the entry's unit count; the units themselves not yet here.
    input.extend_from_slice(&1u32.to_le_bytes());
    input.extend_from_slice(&units.to_le_bytes());

    let h = conn.handle_input(&input).unwrap();
    assert!(matches!(
        h.status,
        Status::Event(ClientEvent::Reply(Reply::ProcessEnvironment(_)))
    ));
    let rest = &input[h.consumed..];
    let h = conn.handle_input(rest).unwrap();
    match h.status {
        Status::Partial { needed } => {
            assert_eq!(needed, 4 + 4 + 2 * units as usize);
            assert!(needed <= announced as usize);
        }
        other => panic!("expected Partial, got {:?}", other),
    }
    // With the whole entry present, it is delivered, and the block ends.
    let mut full = rest.to_vec();
    full.extend(
        std::iter::repeat(b'x')
            .take(2 * (units as usize - 1))
            .flat_map(|b| [b, 0])
            .take(2 * (units as usize - 1)),
    );
    full.extend_from_slice(&[0, 0]);
    let h = conn.handle_input(&full).unwrap();
    assert_eq!(h.consumed, full.len());
    match h.status {
        Status::Event(ClientEvent::EnvironmentVariable(t)) => assert_eq!(t.len_utf16(), 39_999),
        other => panic!("{:?}", other),
    }
    assert_eq!(
        conn.handle_input(&[]).unwrap().status,
        Status::Event(ClientEvent::EndOfStream)
    );
}

/// Equal texts print differently: `Text::Str` uses `str`'s Debug (a `'` is not escaped)
/// while `Text::Utf16` escapes each char with `char::escape_debug` (`\'`). A request built
/// from `&str` and its decoded form compare equal but their Debug output differs. Found by
/// the `roundtrip_response` target (`fuzz/regressions/roundtrip_response/text-debug-quote`).
#[test]
fn text_debug_is_the_same_for_equal_texts() {
    let utf16: Vec<u8> = "it's"
        .encode_utf16()
        .flat_map(|u| u.to_le_bytes())
        .collect();
    let a = Text::Str("it's");
    let b = Text::Utf16(Utf16Str::from_le_bytes_unchecked(&utf16));
    assert_eq!(a, b);
    assert_eq!(format!("{:?}", a), format!("{:?}", b));
}

/// A client that half-closes after its request (`shutdown(SHUT_WR)`, as `socat` or a
/// one-shot script does) still reads the reply: the runtime answers a complete request
/// whether or not the client's side is closed. If the adapter sees that EOF before it has
/// answered, `handle_eof` moves the server machine to Done and `send_response` then fails
/// with `AlreadyReplied`, although nothing was replied. Found while writing the `server`
/// fuzz harness.
#[test]
fn server_answers_a_request_after_the_client_half_closes() {
    use dsipc::conn::ServerConnection;
    use dsipc::payload::Request;
    use dsipc::{Command, ServerEvent, ServerStatus};

    let mut req = [0u8; 64];
    let n = dsipc::payload::ProcessInfo.encode(&mut req).unwrap();
    let mut server = ServerConnection::new();
    let h = server.handle_input(&req[..n]);
    assert!(matches!(
        h.status,
        ServerStatus::Event(ServerEvent::Request { .. })
    ));
    assert_eq!(server.handle_eof(), Some(ServerEvent::PeerClosed));
    let info = dsipc::fixtures::response_for(Command::ProcessInfo).unwrap();
    let mut out = [0u8; 256];
    assert!(
        server.send_response(&info, &mut out).is_ok(),
        "the reply to a complete request cannot be sent after the client's EOF"
    );
}

/// Same for a rejected request: EOF after a bad message must not lose the error reply
/// the runtime still sends (it travels in the event, whatever the EOF does after).
#[test]
fn server_sends_a_pending_rejection_after_the_client_half_closes() {
    use dsipc::conn::ServerConnection;
    use dsipc::{ServerEvent, ServerStatus};

    let mut bad = *b"DOTNET_IPC_V2\0\x14\0\x04\0\0\0";
    bad[12] = b'2';
    let mut server = ServerConnection::new();
    let h = server.handle_input(&bad);
    let r = match h.status {
        ServerStatus::Event(ServerEvent::Rejected(r)) => r,
        other => panic!("{:?}", other),
    };
    assert_eq!(server.handle_eof(), None);
    assert!(server.should_close());
    assert_eq!(
        r.reply().len(),
        24,
        "the error reply is the runtime's 24 bytes"
    );
}
