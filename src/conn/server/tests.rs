//! The multi-part answers against the bytes of a real .NET 8.0.4 runtime.

use super::*;
use crate::conn::{ClientConnection, ClientEvent, Status};
use crate::error::EncodeError;
use crate::payload::{ProcessEnvironment, ProcessInfo3};
use crate::payload::{ProcessInfo2Reply, Reply};
use crate::wire::{Command, Text};

const NET8: &str = "net8.0.4";

macro_rules! capture {
    ($case:literal) => {
        include_bytes!(concat!("../../../tests/data/captures/net8.0.4/", $case))
    };
}

/// A server machine that has received `request` (captured bytes).
fn requested(request: &[u8]) -> ServerConnection {
    let mut server = ServerConnection::new();
    let h = server.handle_input(request);
    assert!(matches!(
        h.status,
        ServerStatus::Event(ServerEvent::Request { .. })
    ));
    server
}

#[test]
fn process_info_of_every_version_from_one_value_matches_the_runtime() {
    // The value: the runtime's own ProcessInfo3 reply, decoded.
    let v3_bytes = capture!("process-info3.reply.bin");
    let mut client = ClientConnection::new();
    let mut tx = [0u8; 64];
    let _ = client.send_request(&ProcessInfo3, &mut tx).unwrap();
    let info = match client.handle_input(v3_bytes).unwrap().status {
        Status::Event(ClientEvent::Reply(Reply::ProcessInfo3(info))) => info,
        other => panic!("{} {:?}", NET8, other),
    };
    let cases: [(&[u8], &[u8]); 3] = [
        (
            capture!("process-info.request.bin"),
            capture!("process-info.reply.bin"),
        ),
        (
            capture!("process-info2.request.bin"),
            capture!("process-info2.reply.bin"),
        ),
        (capture!("process-info3.request.bin"), v3_bytes),
    ];
    for (request, reply) in cases {
        let mut server = requested(request);
        let mut out = [0u8; 512];
        let n = server.send_process_info(&info, &mut out).unwrap();
        assert_eq!(&out[..n], reply);
        assert!(server.should_close());
    }
    // Upward from ProcessInfo2: the same ProcessInfo3 reply.
    let v2 = match process_info_reply(&info, Command::ProcessInfo2) {
        Some(Reply::ProcessInfo2(v2)) => v2,
        other => panic!("{:?}", other),
    };
    let up = process_info3_from_v2(&v2, info.runtime_identifier);
    let mut server = requested(capture!("process-info3.request.bin"));
    let mut out = [0u8; 512];
    let n = server.send_process_info(&up, &mut out).unwrap();
    assert_eq!(&out[..n], v3_bytes);
}

#[test]
fn process_info_answers_only_process_info() {
    let mut server = requested(capture!("process-environment.request.bin"));
    let info = process_info3_from_v2(
        &ProcessInfo2Reply {
            process_id: 1,
            runtime_cookie: crate::wire::Guid::NIL,
            command_line: Text::Str("x"),
            os: Text::Str("Linux"),
            arch: Text::Str("x64"),
            managed_entrypoint_assembly_name: Text::Str("x"),
            clr_product_version: Text::Str("8.0.4"),
        },
        Text::Str("linux-x64"),
    );
    let mut out = [0u8; 512];
    assert_eq!(
        server.send_process_info(&info, &mut out),
        Err(ServerError::WrongReply {
            request: Command::ProcessEnvironment
        })
    );
    assert_eq!(server.command(), Some(Command::ProcessEnvironment));
    assert_eq!(
        ServerConnection::new().send_process_info(&info, &mut out),
        Err(ServerError::NoRequest)
    );
}

#[test]
fn environment_reply_and_block_in_one_call_match_the_runtime() {
    let reply = capture!("process-environment.reply.bin");
    // The entries, as the runtime sent them (at most 16 here).
    let mut client = ClientConnection::new();
    let mut tx = [0u8; 64];
    let _ = client.send_request(&ProcessEnvironment, &mut tx).unwrap();
    let mut vars: [Text<'_>; 16] = [Text::Null; 16];
    let mut count = 0;
    let mut at = 0;
    loop {
        let h = client.handle_input(&reply[at..]).unwrap();
        at += h.consumed;
        match h.status {
            Status::Event(ClientEvent::EnvironmentVariable(v)) => {
                vars[count] = v;
                count += 1;
            }
            Status::Event(_) => {}
            _ => break,
        }
    }
    assert!(count > 0);
    let vars = &vars[..count];
    assert_eq!(environment_answer_len(vars.iter().copied()), reply.len());

    let mut server = requested(capture!("process-environment.request.bin"));
    let mut small = [0u8; 100];
    assert_eq!(
        server.send_environment(vars.iter().copied(), &mut small),
        Err(ServerError::Encode(EncodeError::BufferTooSmall {
            needed: reply.len()
        }))
    );
    assert_eq!(server.command(), Some(Command::ProcessEnvironment));
    let mut out = [0u8; 512];
    let n = server
        .send_environment(vars.iter().copied(), &mut out)
        .unwrap();
    assert_eq!(&out[..n], &reply[..]);
    assert!(server.should_close());
    assert_eq!(
        server.send_environment(vars.iter().copied(), &mut out),
        Err(ServerError::AlreadyReplied)
    );
    let mut other = requested(capture!("process-info.request.bin"));
    assert_eq!(
        other.send_environment(vars.iter().copied(), &mut out),
        Err(ServerError::WrongReply {
            request: Command::ProcessInfo
        })
    );
}
