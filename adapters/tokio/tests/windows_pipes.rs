//! dsipc-tokio over real Windows named pipes (`tokio::net::windows::named_pipe`) against the
//! fake runtime serving a pipe (dsipc-testkit over dsipc-std's pipes): commands, error
//! replies, a timeout, a session stopped from a second connection, and the reverse port.
//! Built for x86_64-pc-windows-gnu and run under wine (Windows only).
#![cfg(windows)]

use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use dsipc::payload::{PerfMapType, Provider};
use dsipc::wire::{Command, Hresult};
use dsipc_testkit::{check_pattern, Answer, Config, FakeRuntime, StreamEnd, StreamSpec};
use dsipc_tokio::reverse::ReverseListener;
use dsipc_tokio::{DiagnosticsClient, Endpoint, Error};

const TIMEOUT: Duration = Duration::from_secs(10);

/// `\\.\pipe\NAME` unique to this process and `tag`.
fn pipe(tag: &str) -> PathBuf {
    static SEQ: AtomicUsize = AtomicUsize::new(0);
    PathBuf::from(format!(
        r"\\.\pipe\dsipc-tokio-{}-{}-{}",
        std::process::id(),
        SEQ.fetch_add(1, Ordering::SeqCst),
        tag
    ))
}

fn start(tag: &str, config: Config) -> (FakeRuntime, DiagnosticsClient) {
    let path = pipe(tag);
    let fake = config.listen_at(&path).start().expect("create the pipe");
    let client = DiagnosticsClient::new(Endpoint::new(&path)).with_timeout(TIMEOUT);
    (fake, client)
}

fn block_on<F: std::future::Future>(fut: F) -> F::Output {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
        .block_on(fut)
}

#[test]
fn commands_over_named_pipes() {
    let (fake, client) = start("commands", Config::new().pid(4242));
    block_on(async {
        let info = client.process_info().await.unwrap();
        assert_eq!(info.command, Command::ProcessInfo3);
        assert_eq!(info.pid, 4242);
        assert_eq!(info.cookie, fake.identity().cookie);
        let env = client.process_environment().await.unwrap();
        assert_eq!(env, fake.environment());
        client.resume_runtime().await.unwrap();
        client.enable_perf_map(PerfMapType::All).await.unwrap();
        client.disable_perf_map().await.unwrap();
    });
    let got: Vec<_> = fake.received().iter().map(|r| r.command).collect();
    assert_eq!(
        got,
        vec![
            Some(Command::ProcessInfo3),
            Some(Command::ProcessEnvironment),
            Some(Command::ResumeRuntime),
            Some(Command::EnablePerfMap),
            Some(Command::DisablePerfMap),
        ]
    );
}

#[test]
fn error_replies_and_a_silent_pipe() {
    let (_fake, client) = start(
        "errors",
        Config::new()
            .answer(
                Command::ResumeRuntime,
                Answer::Error(Hresult::E_ACCESSDENIED),
            )
            .answer(Command::ProcessInfo3, Answer::unknown_command())
            .answer(Command::DisablePerfMap, Answer::Hang),
    );
    block_on(async {
        let e = client.resume_runtime().await.unwrap_err();
        assert_eq!(e.hresult(), Some(Hresult::E_ACCESSDENIED));
        let info = client.process_info().await.unwrap();
        assert_eq!(info.command, Command::ProcessInfo2);
        let client = client.with_timeout(Duration::from_millis(300));
        match client.disable_perf_map().await {
            Err(Error::Timeout { command, .. }) => assert_eq!(command, Command::DisablePerfMap),
            other => panic!("{:?}", other),
        }
    });
}

#[test]
fn a_session_stopped_from_a_second_pipe_connection() {
    let (fake, client) = start(
        "session",
        Config::new().stream(StreamSpec::until_stopped(4096, Duration::from_millis(2))),
    );
    let providers = [Provider::new("Microsoft-Windows-DotNETRuntime", 0x1, 4)];
    let (received, session_id) = block_on(async {
        let mut session = client.collect_tracing(&providers, 16, false).await.unwrap();
        let first = session.next_chunk().await.unwrap().unwrap();
        let stop = session.stop_handle();
        let stopper = tokio::spawn(async move { stop.stop().await });
        let mut offset = 0u64;
        assert_eq!(check_pattern(0, &first), None);
        offset += first.len() as u64;
        while let Some(chunk) = session.next_chunk().await {
            let chunk = chunk.unwrap();
            assert_eq!(check_pattern(offset, &chunk), None);
            offset += chunk.len() as u64;
        }
        stopper.await.unwrap().unwrap();
        (offset, session.session_id())
    });
    let streams = fake.wait_streams(1, TIMEOUT);
    assert_eq!(streams[0].end, StreamEnd::Stopped);
    assert_eq!(streams[0].bytes, received);
    assert_eq!(streams[0].session_id, session_id);
}

#[test]
fn reverse_port_over_a_named_pipe() {
    let path = pipe("reverse");
    block_on(async {
        let mut listener = ReverseListener::bind(&path).unwrap();
        assert_eq!(listener.address(), path);
        let fake = Config::new()
            .pid(99)
            .reverse_port(&path, true)
            .start()
            .unwrap();
        let first = listener.accept().await.unwrap();
        assert_eq!(first.advertise(), fake.advertise());
        let info = first.into_client().process_info_basic().await.unwrap();
        assert_eq!(info.pid, 99);
        let second = listener.accept().await.unwrap();
        second.into_client().resume_runtime().await.unwrap();
        assert!(fake.wait_resumed(TIMEOUT));
        // The name is taken while the listener lives.
        match ReverseListener::bind(&path) {
            Err(Error::Io(e)) => assert_eq!(e.kind(), std::io::ErrorKind::AddrInUse),
            other => panic!("{:?}", other),
        }
    });
}
