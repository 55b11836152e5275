//! dsipc-tokio's EventPipe sessions against the fake runtime (dsipc-testkit): the stream
//! as chunks and as a `Stream`, stops from a second connection (a `StopHandle`, the
//! session's own `stop`, `copy_to`'s predicate), and the bounds after a stop. Waits
//! synchronise on the fake runtime's records, never on sleeps.
#![cfg(unix)]

mod support;

use std::time::{Duration, Instant};

use dsipc::wire::Command;
use dsipc_testkit::{check_pattern, Answer, Config, FakeRuntime, StreamEnd, StreamSpec, TempDir};
use dsipc_tokio::{Error, TraceSession};

use support::{commands, providers, start, wait_received, NextItem, TIMEOUT};

/// A fake runtime configured by `config`, and a session on it, started (rundown as
/// `request_rundown` says) by a client whose timeout is `timeout`.
async fn started(
    config: Config,
    timeout: Duration,
    request_rundown: bool,
) -> (TempDir, FakeRuntime, TraceSession) {
    let (dir, rt, client) = start(config);
    let session = client
        .with_timeout(timeout)
        .collect_tracing(&providers(), 16, request_rundown)
        .await
        .unwrap();
    (dir, rt, session)
}

/// Reads a session to its end, checking the pattern.
async fn drain(session: &mut TraceSession) -> Result<u64, Error> {
    drain_from(session, 0).await
}

/// Reads a session to its end from `offset`, checking the pattern; the end offset.
async fn drain_from(session: &mut TraceSession, mut offset: u64) -> Result<u64, Error> {
    while let Some(chunk) = session.next_chunk().await {
        let chunk = chunk?;
        assert_eq!(check_pattern(offset, &chunk), None, "at offset {}", offset);
        offset += chunk.len() as u64;
    }
    Ok(offset)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_stopped_from_a_second_connection_ends_cleanly() {
    let (_dir, rt, mut session) = started(
        Config::new().stream(StreamSpec::until_stopped(4096, Duration::from_millis(2))),
        TIMEOUT,
        true,
    )
    .await;
    // Some data first, then the stop, from another task.
    let first = session.next_chunk().await.unwrap().unwrap();
    assert_eq!(check_pattern(0, &first), None);
    let stop = session.stop_handle();
    assert_eq!(stop.session_id(), session.session_id());
    let stopper = tokio::spawn(async move { stop.stop().await });
    let mut offset = first.len() as u64;
    while let Some(chunk) = session.next_chunk().await {
        let chunk = chunk.unwrap();
        assert_eq!(check_pattern(offset, &chunk), None);
        offset += chunk.len() as u64;
    }
    stopper.await.unwrap().unwrap();
    assert!(session.is_finished());
    assert_eq!(session.bytes_received(), offset);
    let streams = rt.wait_streams(1, TIMEOUT);
    assert_eq!(streams[0].end, StreamEnd::Stopped);
    assert_eq!(streams[0].bytes, offset);
    assert_eq!(streams[0].session_id, session.session_id());
    let got = wait_received(&rt, 2).await;
    assert_eq!(got[1].command, Some(Command::StopTracing));
    assert_ne!(got[0].connection, got[1].connection);
    // After the end: None again, and the handle's second stop does nothing.
    assert!(session.next_chunk().await.is_none());
}

#[tokio::test]
async fn a_session_is_a_futures_stream() {
    let (_dir, rt, mut session) = started(
        Config::new().stream(StreamSpec::bytes(300_000)),
        TIMEOUT,
        false,
    )
    .await;
    let mut offset = 0u64;
    while let Some(chunk) = NextItem(&mut session).await {
        let chunk = chunk.unwrap();
        assert_eq!(check_pattern(offset, &chunk), None);
        offset += chunk.len() as u64;
    }
    assert_eq!(offset, 300_000);
    assert_eq!(rt.wait_streams(1, TIMEOUT)[0].end, StreamEnd::Completed);
}

#[tokio::test]
async fn copy_to_writes_the_whole_stream() {
    let (_dir, _rt, mut session) = started(
        Config::new().stream(StreamSpec::bytes(100_000)),
        TIMEOUT,
        false,
    )
    .await;
    let mut out = Vec::new();
    let outcome = session.copy_to(&mut out, |_| false).await.unwrap();
    assert_eq!(outcome.bytes(), 100_000);
    // A byte pattern is no nettrace: all of it is delivered, and the end says it is cut
    // (at its first byte), never a clean end.
    assert!(
        matches!(outcome, dsipc::session::Outcome::Cut { offset: 0, .. }),
        "{:?}",
        outcome
    );
    assert_eq!(out.len(), 100_000);
    assert_eq!(check_pattern(0, &out), None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn copy_to_stops_the_session_when_its_predicate_says_so() {
    let (_dir, rt, mut session) = started(
        Config::new().stream(StreamSpec::until_stopped(4096, Duration::from_millis(2))),
        TIMEOUT,
        true,
    )
    .await;
    let mut out = Vec::new();
    let outcome = session
        .copy_to(&mut out, |bytes| bytes >= 3 * 4096)
        .await
        .unwrap();
    assert!(out.len() >= 3 * 4096);
    assert_eq!(outcome.bytes(), out.len() as u64);
    assert_eq!(check_pattern(0, &out), None);
    let streams = rt.wait_streams(1, TIMEOUT);
    assert_eq!(streams[0].end, StreamEnd::Stopped);
    assert_eq!(streams[0].bytes, out.len() as u64);
    let got = wait_received(&rt, 2).await;
    assert_eq!(got[1].command, Some(Command::StopTracing));
    assert_ne!(got[0].connection, got[1].connection);
}

#[tokio::test]
async fn copy_to_asks_its_predicate_while_the_stream_is_quiet() {
    // A chunk every 8 s: within the first 6 s only the tick can ask the predicate a third
    // and fourth time. The stop is never answered, so once asked the copy ends with the
    // timeout (2 s: room for a start on a busy machine, well inside the 6).
    let (_dir, _rt, mut session) = started(
        Config::new()
            .stream(StreamSpec::until_stopped(16, Duration::from_secs(8)))
            .answer(Command::StopTracing, Answer::Hang),
        Duration::from_secs(2),
        false,
    )
    .await;
    let mut asked = 0;
    let mut out = Vec::new();
    let copy = session.copy_to(&mut out, |_| {
        asked += 1;
        asked >= 4
    });
    let e = tokio::time::timeout(Duration::from_secs(6), copy)
        .await
        .expect("the predicate was asked while the stream was quiet")
        .unwrap_err();
    assert!(e.is_timeout(), "{:?}", e);
    assert!(session.stop_handle().is_requested());
    assert_eq!(asked, 4);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stop_from_the_reading_task_ends_the_session_cleanly() {
    let (_dir, rt, mut session) = started(
        Config::new().stream(StreamSpec::until_stopped(4096, Duration::from_millis(2))),
        TIMEOUT,
        true,
    )
    .await;
    let first = session.next_chunk().await.unwrap().unwrap();
    session.stop().unwrap();
    assert!(session.stop_handle().is_requested());
    session.stop().unwrap(); // once: a second call sends nothing
    let rest = drain_from(&mut session, first.len() as u64).await.unwrap();
    assert!(session.stop_handle().is_answered());
    let streams = rt.wait_streams(1, TIMEOUT);
    assert_eq!(streams[0].end, StreamEnd::Stopped);
    assert_eq!(streams[0].bytes, rest);
    let got = wait_received(&rt, 2).await;
    assert_eq!(
        commands(&rt),
        vec![got[0].command, Some(Command::StopTracing)]
    );
}

#[tokio::test]
async fn a_session_error_reply_is_typed() {
    let (_dir, _rt, client) = start(Config::new().like_net8_0_4());
    let provs = providers();
    let req = dsipc::payload::CollectTracing3 {
        circular_buffer_mb: 1,
        format: dsipc::payload::TraceFormat::NetTrace,
        request_rundown: false,
        request_stackwalk: true,
        providers: (&provs[..]).into(),
    };
    let e = client.start_tracing(req).await.unwrap_err();
    assert!(e.is_not_supported(), "{:?}", e);
}

#[tokio::test]
async fn a_stream_going_on_after_the_stop_is_stream_not_ended() {
    let (_dir, _rt, mut session) = started(
        Config::new()
            .stream(StreamSpec::until_stopped(1024, Duration::from_millis(5)))
            .answer(Command::StopTracing, Answer::IgnoreStop),
        Duration::from_millis(400),
        false,
    )
    .await;
    let stop = session.stop_handle();
    let (stopped, drained) = tokio::join!(stop.stop(), drain(&mut session));
    stopped.unwrap();
    assert!(stop.is_answered());
    match drained {
        Err(Error::StreamNotEnded { session_id, .. }) => {
            assert_eq!(session_id, session.session_id())
        }
        other => panic!("{:?}", other),
    }
    assert!(session.next_chunk().await.is_none());
}

#[tokio::test]
async fn a_stop_never_answered_ends_the_stream_with_a_timeout() {
    let (_dir, _rt, mut session) = started(
        Config::new()
            .stream(StreamSpec::until_stopped(1024, Duration::from_millis(5)))
            .answer(Command::StopTracing, Answer::Hang),
        Duration::from_millis(400),
        false,
    )
    .await;
    let stop = session.stop_handle();
    let t = Instant::now();
    let (stopped, drained) = tokio::join!(stop.stop(), drain(&mut session));
    assert!(stopped.unwrap_err().is_timeout());
    // The stream fails with the stop's error (or its own bound): never hangs.
    let e = drained.unwrap_err();
    assert!(
        e.is_timeout() || matches!(e, Error::StreamNotEnded { .. }),
        "{:?}",
        e
    );
    assert!(t.elapsed() < Duration::from_secs(5));
}

#[tokio::test]
async fn a_quiet_stream_after_a_stop_times_out() {
    // The stream pauses far longer than the timeout; the stop is never answered either.
    let (_dir, _rt, mut session) = started(
        Config::new()
            .stream(StreamSpec::until_stopped(16, Duration::from_secs(2)))
            .answer(Command::StopTracing, Answer::Hang),
        Duration::from_millis(300),
        false,
    )
    .await;
    assert!(session.next_chunk().await.unwrap().is_ok());
    // Stop from a task that is then cancelled: the request alone bounds the wait.
    let stop = session.stop_handle();
    let task = tokio::spawn(async move { stop.stop().await });
    let handle = session.stop_handle();
    let e = drain(&mut session).await.unwrap_err();
    assert!(e.is_timeout(), "{:?}", e);
    assert!(handle.is_requested());
    task.abort();
}
