//! A server that disappears: mid-reply, before replying, mid-continuation, or entirely.
//! Every case is a typed error that names what happened (never the timeout), so no case
//! waited for the client's timeout.
#![cfg(windows)]

use std::io;
use std::path::Path;
use std::time::{Duration, Instant};

use dsipc::wire::Command;
use dsipc::ClientError;
use dsipc_std::{DiagnosticsClient, Endpoint, Error};
use dsipc_testkit::{Answer, Config, FakeRuntime, StreamSpec};
use dsipc_windows_tests::{fake_config, listen, pipe_path, unique_pipe_name};

/// Generous: no case may reach it (each expects an error other than the timeout).
const TIMEOUT: Duration = Duration::from_secs(30);

fn start(tag: &str, config: Config) -> (FakeRuntime, DiagnosticsClient, String) {
    let path = pipe_path(&unique_pipe_name(tag));
    let fake = listen(Path::new(&path), config).unwrap();
    let client = DiagnosticsClient::new(Endpoint::new(&path)).with_timeout(TIMEOUT);
    (fake, client, path)
}

#[test]
fn mid_reply_header_and_mid_payload() {
    let (fake, client, _) = start("vanish-reply", fake_config());
    for bytes in [1, 10, 19, 20, 30, 60] {
        fake.set_answer(Command::ProcessInfo, Answer::Vanish { bytes });
        match client.process_info_basic() {
            Err(Error::Protocol(ClientError::UnexpectedEof { needed, available })) => {
                assert_eq!(available, bytes, "needed {}", needed);
                assert!(needed > bytes);
            }
            other => panic!("vanish after {} bytes: {:?}", bytes, other),
        }
    }
    // Before any byte of the reply.
    fake.set_answer(Command::ProcessInfo, Answer::Vanish { bytes: 0 });
    match client.process_info_basic() {
        Err(Error::Protocol(ClientError::ClosedBeforeReply)) => {}
        other => panic!("{:?}", other),
    }
}

#[test]
fn mid_environment_block() {
    let (fake, client, _) = start("vanish-env", fake_config());
    // The reply (26 bytes) and part of the block.
    fake.set_answer(Command::ProcessEnvironment, Answer::Vanish { bytes: 40 });
    match client.process_environment() {
        Err(Error::Protocol(ClientError::UnexpectedEof { .. })) => {}
        other => panic!("{:?}", other),
    }
}

#[test]
fn a_server_that_never_answers_is_a_timeout() {
    let (_fake, client, _) = start(
        "hang",
        fake_config().answer(Command::ResumeRuntime, Answer::Hang),
    );
    let client = client.with_timeout(Duration::from_millis(500));
    let t = Instant::now();
    match client.resume_runtime() {
        Err(Error::Timeout { command, timeout }) => {
            assert_eq!(command, Command::ResumeRuntime);
            assert_eq!(timeout, Duration::from_millis(500));
        }
        other => panic!("{:?}", other),
    }
    // The typed Timeout is the point; it came no earlier than the timeout.
    let took = t.elapsed();
    assert!(took >= Duration::from_millis(450), "{:?}", took);
}

#[test]
fn a_server_that_is_gone_is_not_found() {
    let (fake, client, path) = start("gone", fake_config());
    assert_eq!(client.process_info_basic().unwrap().pid, 4242);
    drop(fake);
    match client.process_info_basic() {
        Err(Error::Connect { endpoint, source }) => {
            assert_eq!(endpoint, Path::new(&path));
            assert_eq!(source.kind(), io::ErrorKind::NotFound, "{}", source);
        }
        other => panic!("{:?}", other),
    }
}

#[test]
fn a_stream_cut_short_by_a_dying_server_ends_the_session() {
    // An EventPipe stream has no length: a server that dies mid-stream looks like the end
    // of the stream. The session ends (no hang) with the bytes that came.
    let config = fake_config().stream(StreamSpec::default());
    let (fake, client, _) = start("vanish-stream", config);
    fake.set_answer(
        Command::CollectTracing2,
        Answer::Vanish {
            bytes: 28 + 300_000,
        },
    );
    let providers = [dsipc::fixtures::RUNTIME_PROVIDER];
    let mut session = client.collect_tracing(&providers, 16, false).unwrap();
    let n = session.drain(|_| Ok(()), |_| false).unwrap().bytes();
    assert_eq!(n, 300_000);
}
