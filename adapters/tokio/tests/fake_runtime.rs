//! dsipc-tokio against the fake runtime (dsipc-testkit): every command, error replies,
//! fallbacks, timeouts against a silent server, sessions stopped from a second connection,
//! and cancel safety. Waits synchronise on the fake runtime's records, never on sleeps.
#![cfg(unix)]

mod support;

use std::time::{Duration, Instant};

use dsipc::payload::{dump, DumpType, PerfMapType};
use dsipc::wire::{Command, Guid, Hresult};
use dsipc_testkit::{check_pattern, Answer, Config, StreamEnd, StreamSpec, TempDir};
use dsipc_tokio::{DiagnosticsClient, Endpoint, Error};

use support::{commands, poll_once, providers, start, wait_received, TIMEOUT};

#[tokio::test]
async fn process_info_is_process_info3() {
    let (_dir, rt, client) = start(Config::new().pid(4242).command_line("app --flag"));
    let info = client.process_info().await.unwrap();
    let id = rt.identity();
    assert_eq!(info.command, Command::ProcessInfo3);
    assert_eq!(info.pid, 4242);
    assert_eq!(info.cookie, id.cookie);
    assert_eq!(info.command_line, "app --flag");
    assert_eq!(info.os, id.os);
    assert_eq!(info.arch, id.arch);
    assert_eq!(info.clr_version.as_deref(), Some(id.clr_version.as_str()));
    assert_eq!(
        info.runtime_identifier.as_deref(),
        Some(id.runtime_identifier.as_str())
    );
    assert_eq!(commands(&rt), vec![Some(Command::ProcessInfo3)]);
}

#[tokio::test]
async fn process_info_falls_back_to_2_then_1_each_on_its_own_connection() {
    let (_dir, rt, client) =
        start(Config::new().answer(Command::ProcessInfo3, Answer::unknown_command()));
    let info = client.process_info().await.unwrap();
    assert_eq!(info.command, Command::ProcessInfo2);
    assert!(info.runtime_identifier.is_none());
    assert_eq!(info.clr_version.as_deref(), Some("8.0.4"));

    rt.set_answer(Command::ProcessInfo2, Answer::unknown_command());
    let info = client.process_info().await.unwrap();
    assert_eq!(info.command, Command::ProcessInfo);
    assert!(info.clr_version.is_none());
    let got = rt.received();
    let cmds: Vec<_> = got.iter().map(|r| r.command.unwrap()).collect();
    assert_eq!(
        cmds,
        vec![
            Command::ProcessInfo3,
            Command::ProcessInfo2,
            Command::ProcessInfo3,
            Command::ProcessInfo2,
            Command::ProcessInfo
        ]
    );
    let mut conns: Vec<u64> = got.iter().map(|r| r.connection).collect();
    conns.dedup();
    assert_eq!(conns.len(), 5, "one connection per request");

    let basic = client.process_info_basic().await.unwrap();
    assert_eq!(basic.command, Command::ProcessInfo);
}

#[tokio::test]
async fn process_info_on_netcore31_is_not_supported() {
    let (_dir, _rt, client) = start(Config::new().like_netcore31());
    match client.process_info().await {
        Err(Error::NotSupported { command, hresult }) => {
            assert_eq!(command, Command::ProcessInfo);
            assert_eq!(hresult, Hresult::CORDIAGIPC_E_UNKNOWN_COMMAND);
        }
        other => panic!("{:?}", other),
    }
}

#[tokio::test]
async fn environment_set_read_back_and_unset() {
    let (_dir, rt, client) = start(Config::new().environment(&["A=1", "B=two"]));
    assert_eq!(
        client.process_environment().await.unwrap(),
        vec!["A=1", "B=two"]
    );
    client
        .set_environment_variable("C", Some("3"))
        .await
        .unwrap();
    client.set_environment_variable("A", None).await.unwrap();
    let vars = client.process_environment().await.unwrap();
    assert!(vars.contains(&"C=3".to_string()), "{:?}", vars);
    assert!(!vars.iter().any(|v| v.starts_with("A=")), "{:?}", vars);
    assert_eq!(rt.environment(), vars);
}

#[tokio::test]
async fn an_environment_announced_too_large_is_refused() {
    let (_dir, _rt, client) = start(Config::new().answer(
        Command::ProcessEnvironment,
        Answer::EnvironmentAnnouncing(1 << 30),
    ));
    let client = client.with_max_environment(1 << 20);
    match client.process_environment().await {
        Err(Error::EnvironmentTooLarge { announced, limit }) => {
            assert_eq!(announced, 1 << 30);
            assert_eq!(limit, 1 << 20);
        }
        other => panic!("{:?}", other),
    }
}

#[tokio::test]
async fn status_commands_are_sent_and_answered() {
    let (_dir, rt, client) = start(Config::new());
    let clsid = Guid::from_fields(0x1234_5678, 1, 2, [3, 4, 5, 6, 7, 8, 9, 10]);
    client.resume_runtime().await.unwrap();
    client.enable_perf_map(PerfMapType::All).await.unwrap();
    client.disable_perf_map().await.unwrap();
    client.apply_startup_hook("/app/hook.dll").await.unwrap();
    client
        .write_dump("/tmp/core.%p", DumpType::WithHeap, 0)
        .await
        .unwrap();
    client
        .attach_profiler(Duration::from_secs(1), clsid, "/p.so", b"data")
        .await
        .unwrap();
    client.set_startup_profiler(clsid, "/p.so").await.unwrap();
    assert_eq!(
        commands(&rt),
        vec![
            Some(Command::ResumeRuntime),
            Some(Command::EnablePerfMap),
            Some(Command::DisablePerfMap),
            Some(Command::ApplyStartupHook),
            Some(Command::GenerateCoreDump3),
            Some(Command::AttachProfiler),
            Some(Command::StartupProfiler),
        ]
    );
    assert!(rt.received().iter().all(|r| r.rejection.is_none()));
}

#[tokio::test]
async fn invalid_arguments_send_nothing() {
    let (_dir, rt, client) = start(Config::new());
    assert!(matches!(
        client.enable_perf_map(PerfMapType::Disabled).await,
        Err(Error::InvalidArgument(_))
    ));
    assert!(matches!(
        client.apply_startup_hook("").await,
        Err(Error::InvalidArgument(_))
    ));
    assert!(matches!(
        client.write_dump("", DumpType::Full, 0).await,
        Err(Error::InvalidArgument(_))
    ));
    // A CollectTracing request through `exchange` is refused: sessions have their API.
    let provs = providers();
    let req = dsipc::payload::CollectTracing2 {
        circular_buffer_mb: 1,
        format: dsipc::payload::TraceFormat::NetTrace,
        request_rundown: false,
        providers: (&provs[..]).into(),
    };
    assert!(matches!(
        client.exchange(&req, |_| Ok(())).await,
        Err(Error::InvalidArgument(_))
    ));
    // Not a CollectTracing request for start_tracing.
    assert!(matches!(
        client.start_tracing(dsipc::payload::ResumeRuntime).await,
        Err(Error::InvalidArgument(_))
    ));
    assert!(rt.received().is_empty());
}

#[tokio::test]
async fn dump_falls_back_to_version_2_then_1() {
    let (_dir, rt, client) = start(
        Config::new()
            .answer(Command::GenerateCoreDump3, Answer::unknown_command())
            .answer(Command::GenerateCoreDump2, Answer::unknown_command()),
    );
    // Version 1 only knows the logging flag.
    assert!(matches!(
        client
            .write_dump("/tmp/d", DumpType::Full, dump::flags::CRASH_REPORT)
            .await,
        Err(Error::InvalidArgument(_))
    ));
    client
        .write_dump("/tmp/d", DumpType::Full, dump::flags::LOGGING)
        .await
        .unwrap();
    let cmds = commands(&rt);
    assert_eq!(
        &cmds[cmds.len() - 3..],
        &[
            Some(Command::GenerateCoreDump3),
            Some(Command::GenerateCoreDump2),
            Some(Command::GenerateCoreDump)
        ]
    );
}

#[tokio::test]
async fn error_replies_are_typed() {
    let (_dir, _rt, client) = start(
        Config::new()
            .answer(
                Command::ResumeRuntime,
                Answer::Error(Hresult::E_ACCESSDENIED),
            )
            .answer(Command::EnablePerfMap, Answer::Status(Hresult::E_FAIL))
            .answer(Command::ApplyStartupHook, Answer::unknown_command())
            .answer(
                Command::GenerateCoreDump3,
                Answer::ErrorWithMessage(Hresult::E_FAIL, "createdump failed\nno space".into()),
            )
            .answer(Command::DisablePerfMap, Answer::Close)
            .answer(
                Command::StartupProfiler,
                Answer::Raw(b"garbage garbage garbage".to_vec()),
            ),
    );
    match client.resume_runtime().await {
        Err(e @ Error::ErrorReply { .. }) => {
            assert_eq!(e.hresult(), Some(Hresult::E_ACCESSDENIED));
            assert!(e.to_string().contains("ResumeRuntime"), "{}", e);
        }
        other => panic!("{:?}", other),
    }
    match client.enable_perf_map(PerfMapType::PerfMap).await {
        Err(Error::ErrorReply {
            command, hresult, ..
        }) => {
            assert_eq!(command, Command::EnablePerfMap);
            assert_eq!(hresult, Hresult::E_FAIL);
        }
        other => panic!("{:?}", other),
    }
    assert!(client
        .apply_startup_hook("/h.dll")
        .await
        .unwrap_err()
        .is_not_supported());
    match client.write_dump("/tmp/d", DumpType::Normal, 0).await {
        Err(Error::ErrorReply { message, .. }) => {
            assert_eq!(message.as_deref(), Some("createdump failed\nno space"))
        }
        other => panic!("{:?}", other),
    }
    assert!(matches!(
        client.disable_perf_map().await,
        Err(Error::Protocol(_))
    ));
    assert!(matches!(
        client
            .set_startup_profiler(Guid::from_fields(1, 2, 3, [0; 8]), "/p.so")
            .await,
        Err(Error::Protocol(_))
    ));
}

#[tokio::test]
async fn a_silent_server_times_out_within_the_budget() {
    let (_dir, rt, client) = start(Config::new().default_answer(Answer::Hang));
    let timeout = Duration::from_millis(300);
    let client = client.with_timeout(timeout);
    let t = Instant::now();
    match client.resume_runtime().await {
        Err(Error::Timeout {
            command,
            timeout: t2,
        }) => {
            assert_eq!(command, Command::ResumeRuntime);
            assert_eq!(t2, timeout);
        }
        other => panic!("{:?}", other),
    }
    let took = t.elapsed();
    assert!(took >= timeout && took < timeout * 10, "{:?}", took);
    // The fallbacks share one budget.
    let t = Instant::now();
    let e = client.process_info().await.unwrap_err();
    assert!(e.is_timeout(), "{:?}", e);
    assert!(t.elapsed() < timeout * 10);
    // Sessions: the start is bounded too.
    let e = client
        .collect_tracing(&providers(), 1, false)
        .await
        .unwrap_err();
    assert!(e.is_timeout(), "{:?}", e);
    assert_eq!(rt.wait_received(3, TIMEOUT).len(), 3);
}

#[tokio::test]
async fn a_missing_socket_is_a_connect_error() {
    let dir = TempDir::new("tokio-missing").unwrap();
    let path = dir.join("nothing-here");
    let client = DiagnosticsClient::new(Endpoint::new(&path));
    match client.resume_runtime().await {
        Err(Error::Connect { endpoint, source }) => {
            assert_eq!(endpoint, path);
            assert_eq!(source.kind(), std::io::ErrorKind::NotFound);
        }
        other => panic!("{:?}", other),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropping_a_command_mid_request_leaves_the_client_usable() {
    let (_dir, rt, client) = start(Config::new().answer(Command::ProcessEnvironment, Answer::Hang));
    // The call is under way (the runtime has the request), then its future is dropped.
    let c = client.clone();
    let task = tokio::spawn(async move { c.process_environment().await });
    let got = wait_received(&rt, 1).await;
    assert_eq!(got[0].command, Some(Command::ProcessEnvironment));
    task.abort();
    assert!(task.await.unwrap_err().is_cancelled());
    // The same client goes on, on a fresh connection, with a well-formed request.
    let info = client.process_info().await.unwrap();
    assert_eq!(info.pid, rt.identity().pid);
    let got = rt.received();
    assert_eq!(got.len(), 2);
    assert_ne!(got[0].connection, got[1].connection);
    assert!(got[1].rejection.is_none());

    // Dropped before its first poll completes: nothing half sent either.
    {
        let fut = client.resume_runtime();
        tokio::pin!(fut);
        let _ = poll_once(fut.as_mut()).await;
    }
    client.disable_perf_map().await.unwrap();
    assert!(rt.received().iter().all(|r| r.rejection.is_none()));
}

#[tokio::test]
async fn reads_dropped_mid_stream_lose_no_bytes() {
    let (_dir, rt, client) = start(Config::new().stream(StreamSpec {
        len: Some(200_000),
        chunk: 1000,
        pause: Duration::from_millis(1),
        end_marker: false,
        content: None,
    }));
    let mut session = client
        .collect_tracing(&providers(), 16, false)
        .await
        .unwrap();
    let mut offset = 0u64;
    let mut dropped = 0;
    loop {
        // Poll a read once and drop it when it is not ready: it must have taken nothing.
        {
            let fut = session.next_chunk();
            tokio::pin!(fut);
            match poll_once(fut.as_mut()).await {
                Some(Some(chunk)) => {
                    let chunk = chunk.unwrap();
                    assert_eq!(check_pattern(offset, &chunk), None);
                    offset += chunk.len() as u64;
                    continue;
                }
                Some(None) => break,
                None => dropped += 1,
            }
        }
        match session.next_chunk().await {
            Some(chunk) => {
                let chunk = chunk.unwrap();
                assert_eq!(check_pattern(offset, &chunk), None, "at {}", offset);
                offset += chunk.len() as u64;
            }
            None => break,
        }
    }
    assert_eq!(offset, 200_000);
    assert!(dropped > 0, "no read was ever pending");
    assert_eq!(rt.wait_streams(1, TIMEOUT)[0].end, StreamEnd::Completed);
}

#[test]
fn futures_are_send() {
    fn send<T: Send>(_: &T) {}
    let client = DiagnosticsClient::new(Endpoint::new("/nonexistent"));
    assert_eq!(client.timeout(), dsipc_tokio::DEFAULT_TIMEOUT);
    assert_eq!(
        client.max_environment(),
        dsipc_tokio::DEFAULT_MAX_ENVIRONMENT
    );
    assert_eq!(
        client.clone().with_timeout(Duration::ZERO).timeout(),
        Duration::from_millis(1)
    );
    send(&client.process_info());
    send(&client.process_environment());
    send(&client.write_dump("/d", DumpType::Full, 0));
    send(&client.collect_tracing(&[], 1, false));
    send(&client.resume_runtime());
}

/// A server whose accept backlog is full refuses a non-blocking connect with `EAGAIN`
/// (tokio's own `UnixStream::connect` returns that as an error). A command retries the
/// connect within its timeout, and is answered once the server accepts again.
#[cfg(target_os = "linux")]
#[tokio::test]
async fn commands_wait_out_a_full_accept_backlog() {
    use dsipc::fixtures;
    use std::io::{Read, Write};

    let dir = TempDir::new("tokio-backlog").unwrap();
    let path = dir.path().join("dotnet-diagnostic-4242-1-socket");
    let listener = std::os::unix::net::UnixListener::bind(&path).unwrap();
    // Fill the backlog: connections nobody accepts, until the kernel refuses the next.
    let mut fillers = Vec::new();
    loop {
        match tokio::net::UnixStream::connect(&path).await {
            Ok(s) => fillers.push(s),
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
            Err(e) => panic!("filling the backlog: {}", e),
        }
        assert!(fillers.len() < 100_000, "the backlog never filled");
    }
    let client = DiagnosticsClient::new(Endpoint::new(&path)).with_timeout(TIMEOUT);
    let calls: Vec<_> = (0..3)
        .map(|_| {
            let c = client.clone();
            tokio::spawn(async move { c.process_info_basic().await })
        })
        .collect();
    // Each call runs to its first connect (refused: the backlog is full) and waits.
    for _ in 0..3 {
        tokio::task::yield_now().await;
    }
    assert!(calls.iter().all(|c| !c.is_finished()));
    // The server accepts again: the fillers (closed) read as EOF, the calls are answered.
    drop(fillers);
    let reply = fixtures::response_for(Command::ProcessInfo).unwrap();
    let mut out = vec![0u8; reply.encoded_len()];
    let n = reply.encode(&mut out).unwrap();
    let server = std::thread::spawn(move || {
        let mut answered = 0;
        while answered < 3 {
            let (mut conn, _) = listener.accept().unwrap();
            let mut head = [0u8; 20];
            if conn.read_exact(&mut head).is_ok() {
                conn.write_all(&out[..n]).unwrap();
                answered += 1;
            }
        }
    });
    for c in calls {
        let info = c
            .await
            .unwrap()
            .expect("ProcessInfo after the backlog drained");
        assert_eq!(info.pid, fixtures::PROCESS_INFO2.process_id);
    }
    server.join().unwrap();
}
