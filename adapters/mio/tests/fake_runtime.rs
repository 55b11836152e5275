//! The reactor's client machines against the testkit's fake runtime: its .NET 8-like
//! answers for every command, CollectTracing 1-6 streams stopped from another connection
//! in the same loop, and every client-side error path (error replies, malformed replies,
//! a server that closes or hangs).

mod support;

#[path = "../../../tests/common/mod.rs"]
mod common;

use std::collections::HashMap;
use std::io::{Read, Write};
use std::time::{Duration, Instant};

use dsipc::fixtures;
use dsipc::payload::*;
use dsipc::wire::{Guid, Hresult, Seq};
use dsipc::{ClientError, ClientEvent, Command, Request, UsageError};
use dsipc_mio::{CloseReason, ConnId, Control, Error, Event, Reactor};
use dsipc_testkit::{Answer, Config, FakeRuntime, StreamEnd, StreamSpec, TempDir};
use support::{run_until, Log, Peer};

const T: Duration = Duration::from_secs(30);

fn fake(dir: &TempDir, config: Config) -> FakeRuntime {
    config.listen_in(dir.path()).start().unwrap()
}

/// Runs one request to the end; returns the client's log and close reason text.
fn exchange<R: Request + ?Sized>(
    reactor: &mut Reactor,
    rt: &FakeRuntime,
    req: &R,
    timeout: Option<Duration>,
) -> Log {
    let conn = reactor
        .control()
        .connect(rt.socket_path().unwrap(), req)
        .unwrap();
    if let Some(t) = timeout {
        reactor.control().set_timeout(conn, Some(t)).unwrap();
    }
    let mut peer = Peer::default();
    peer.track(conn);
    run_until(reactor, &mut peer, T, "exchange", |p| p.all_closed());
    peer.logs.remove(&conn).unwrap()
}

#[test]
fn default_answers_look_like_net8() {
    let dir = TempDir::new("dsipc-mio").unwrap();
    let cookie = Guid::parse("c3543ae5-872a-40f1-a361-c171847563b0").unwrap();
    let rt = fake(&dir, Config::new().pid(12814).cookie(cookie));
    let mut reactor = Reactor::new().unwrap();

    let log = exchange(&mut reactor, &rt, &ProcessInfo, None);
    assert!(log.done);
    assert!(log.events[0].contains("process_id: 12814"), "{:?}", log);
    assert!(log.events[0].contains("c3543ae5-872a-40f1-a361-c171847563b0"));
    let log = exchange(&mut reactor, &rt, &ProcessInfo2, None);
    assert!(log.events[0].contains("8.0.4"), "{:?}", log);
    let log = exchange(&mut reactor, &rt, &ProcessInfo3, None);
    assert!(log.events[0].contains("linux-x64"), "{:?}", log);
    assert!(log.events[0].contains("version: 1"));

    let set = SetEnvironmentVariable {
        name: "DIAG_PROBE_VAR".into(),
        value: "hello=world".into(),
    };
    let log = exchange(&mut reactor, &rt, &set, None);
    assert_eq!(log.events, ["Reply(Ok(Hresult(S_OK)))"]);
    let log = exchange(&mut reactor, &rt, &ProcessEnvironment, None);
    assert!(log.done);
    assert!(
        log.env.contains(&"DIAG_PROBE_VAR=hello=world".to_string()),
        "{:?}",
        log
    );
    assert!(log.env.iter().any(|v| v.starts_with("PATH=")));

    let clsid = Guid::parse("12345678-1234-5678-9abc-def012345678").unwrap();
    let ok: Vec<Box<dyn Request>> = vec![
        Box::new(ResumeRuntime),
        Box::new(EnablePerfMap {
            perf_map_type: PerfMapType::PerfMap,
        }),
        Box::new(DisablePerfMap),
        Box::new(ApplyStartupHook {
            startup_hook_path: "".into(),
        }),
        Box::new(GenerateCoreDump {
            dump_name: "/tmp/d".into(),
            dump_type: DumpType::Normal,
            diagnostics: 0,
        }),
        Box::new(GenerateCoreDump2 {
            dump_name: "/tmp/d".into(),
            dump_type: DumpType::Full,
            flags: 0,
        }),
        Box::new(GenerateCoreDump3 {
            dump_name: "/tmp/d".into(),
            dump_type: DumpType::Triage,
            flags: 4,
        }),
        Box::new(AttachProfiler {
            attach_timeout: 5,
            profiler_guid: clsid,
            profiler_path: "/opt/p.so".into(),
            client_data: b"abcd",
        }),
        // OK although the runtime is not suspended, as .NET 8.0.4 answers.
        Box::new(StartupProfiler {
            profiler_guid: clsid,
            profiler_path: "/opt/p.so".into(),
        }),
    ];
    for req in &ok {
        let log = exchange(&mut reactor, &rt, &**req, None);
        assert_eq!(
            log.events,
            ["Reply(Ok(Hresult(S_OK)))"],
            "{:?}",
            req.command()
        );
        assert!(log.done);
    }
    let received = rt.received();
    assert_eq!(received.len(), 5 + ok.len());
    assert!(received.iter().all(|r| r.rejection.is_none()));
    assert!(matches!(
        received[3].request(),
        Some(dsipc::AnyRequest::SetEnvironmentVariable(_))
    ));
}

/// Events of several connections, in the order the one reactor thread saw them.
#[derive(Default)]
struct Ordered {
    order: Vec<(ConnId, String)>,
    stream: HashMap<ConnId, u64>,
    closed: HashMap<ConnId, String>,
}

impl dsipc_mio::Handler for Ordered {
    fn on_event(&mut self, _ctl: &mut Control, event: Event<'_>) {
        match event {
            Event::Client {
                conn,
                event: ClientEvent::StreamData(d),
            } => {
                let at = self.stream.entry(conn).or_insert(0);
                assert_eq!(dsipc_testkit::check_pattern(*at, d), None);
                *at += d.len() as u64;
            }
            Event::Client { conn, event } => self.order.push((conn, format!("{:?}", event))),
            Event::Closed { conn, reason } => {
                self.order.push((conn, "Closed".into()));
                self.closed.insert(conn, format!("{:?}", reason));
            }
            _ => {}
        }
    }
}

/// CollectTracing 1 to 6 (4, 5 and 6 are newer than any runtime here): a session id, the
/// stream, and StopTracing from a second connection in the same loop. The stop reply
/// comes only after the stream ended, as with a real runtime.
#[test]
fn collect_tracing_1_to_6_stopped_from_another_connection() {
    let dir = TempDir::new("dsipc-mio").unwrap();
    let rt = fake(&dir, Config::new());
    let path = rt.socket_path().unwrap().to_path_buf();
    let mut reactor = Reactor::new().unwrap();
    // Every streaming CollectTracing request of the shared samples (CollectTracing 1 to 6).
    let mut sessions = 0;
    common::each_request(|req| {
        if !req.command().is_collect_tracing() || req.requires_fd_passing() {
            return;
        }
        let i = sessions;
        sessions += 1;
        let trace = reactor.control().connect(&path, &req).unwrap();
        let mut h = Ordered::default();
        run_until(&mut reactor, &mut h, T, "stream", |h| {
            h.stream.get(&trace).copied().unwrap_or(0) > 100_000
        });
        let session_id = match h.order.first() {
            Some((c, e)) if *c == trace => {
                let id = e
                    .trim_start_matches("Reply(SessionId(")
                    .trim_end_matches("))");
                id.parse::<u64>().expect(e)
            }
            other => panic!("{:?}", other),
        };
        let stop = reactor
            .control()
            .connect(&path, &StopTracing { session_id })
            .unwrap();
        run_until(&mut reactor, &mut h, T, "stop", |h| {
            h.closed.contains_key(&trace) && h.closed.contains_key(&stop)
        });
        let trace_end = h
            .order
            .iter()
            .position(|(c, e)| *c == trace && e == "EndOfStream")
            .unwrap();
        let stop_reply = h
            .order
            .iter()
            .position(|(c, e)| *c == stop && e.starts_with("Reply(SessionId"))
            .unwrap();
        assert!(trace_end < stop_reply, "{:?}", h.order);
        assert_eq!(h.closed[&trace], "Done");
        assert_eq!(h.closed[&stop], "Done");
        let streams = rt.wait_streams(i + 1, T);
        assert_eq!(streams[i].session_id, session_id);
        assert_eq!(streams[i].end, StreamEnd::Stopped);
        assert_eq!(streams[i].command, req.command());
        assert_eq!(streams[i].bytes, h.stream[&trace]);
    });
    assert_eq!(sessions, 6);
}

#[test]
fn stream_of_a_given_size() {
    let dir = TempDir::new("dsipc-mio").unwrap();
    let len = 5 * 1024 * 1024 + 3;
    let rt = fake(
        &dir,
        Config::new().answer(
            Command::CollectTracing2,
            Answer::Stream(StreamSpec::bytes(len)),
        ),
    );
    let mut reactor = Reactor::new().unwrap();
    let log = exchange(&mut reactor, &rt, &fixtures::COLLECT_TRACING2, None);
    assert!(log.done, "{:?}", log);
    assert_eq!(log.stream, len);
    assert_eq!(log.stream_bad, None);
    assert_eq!(log.events.last().unwrap(), "EndOfStream");
    assert_eq!(rt.wait_streams(1, T)[0].end, StreamEnd::Completed);
}

fn ok24() -> Vec<u8> {
    let mut v = b"DOTNET_IPC_V1\0".to_vec();
    v.extend_from_slice(&[24, 0, 0xFF, 0, 0, 0, 0, 0, 0, 0]);
    v
}

/// Every way a reply can go wrong ends the client connection with a typed reason.
#[test]
fn client_error_paths() {
    let dir = TempDir::new("dsipc-mio").unwrap();
    let rt = fake(&dir, Config::new().like_net8_0_4());
    let mut reactor = Reactor::new().unwrap();

    // Error replies are events, then a clean close.
    rt.set_answer(Command::GenerateCoreDump, Answer::Error(Hresult::E_FAIL));
    let dump = GenerateCoreDump {
        dump_name: "/nonexistent/d".into(),
        dump_type: DumpType::Normal,
        diagnostics: 0,
    };
    let log = exchange(&mut reactor, &rt, &dump, None);
    assert!(log.done);
    assert!(
        log.events[0].starts_with("Error(ErrorReply { hresult: Hresult(E_FAIL)"),
        "{:?}",
        log
    );

    rt.set_answer(
        Command::GenerateCoreDump3,
        Answer::ErrorWithMessage(Hresult::E_FAIL, "[createdump] Could not create".into()),
    );
    let dump3 = GenerateCoreDump3 {
        dump_name: "/nonexistent/d".into(),
        dump_type: DumpType::Full,
        flags: 0,
    };
    let log = exchange(&mut reactor, &rt, &dump3, None);
    assert!(
        log.events[0].contains("[createdump] Could not create"),
        "{:?}",
        log
    );

    // .NET 8.0.4 does not know CollectTracing3.
    let providers = [Provider::new("P", 1, 4)];
    let ct3 = CollectTracing3 {
        circular_buffer_mb: 64,
        format: TraceFormat::NetTrace,
        request_rundown: true,
        request_stackwalk: true,
        providers: Seq::Slice(&providers),
    };
    let log = exchange(&mut reactor, &rt, &ct3, None);
    assert!(log.done);
    assert!(
        log.events[0].contains("CORDIAGIPC_E_UNKNOWN_COMMAND"),
        "{:?}",
        log
    );

    rt.set_answer(
        Command::EnablePerfMap,
        Answer::Status(Hresult::E_INVALIDARG),
    );
    let perf = EnablePerfMap {
        perf_map_type: PerfMapType::JitDump,
    };
    let log = exchange(&mut reactor, &rt, &perf, None);
    assert_eq!(log.events, ["Reply(Ok(Hresult(E_INVALIDARG)))"]);

    // Malformed replies: each closes the connection with the core's typed error.
    let mut bad_magic = ok24();
    bad_magic[0] = b'x';
    let mut size19 = ok24();
    size19[14] = 19;
    let mut odd_command = ok24();
    odd_command[16] = 0x04;
    let mut junk_after = ok24();
    junk_after.extend_from_slice(b"junk");
    let mut long_error = ok24();
    long_error[14] = 28;
    long_error[17] = 0xFF;
    long_error.extend_from_slice(&[0; 4]);
    let mut env_short = b"DOTNET_IPC_V1\0".to_vec();
    env_short.extend_from_slice(&[26, 0, 0xFF, 0, 0, 0, 100, 0, 0, 0, 0, 0]);
    env_short.extend_from_slice(&[1, 0, 0, 0]);
    let cases: Vec<(Command, Vec<u8>, &str)> = vec![
        (Command::ResumeRuntime, bad_magic, "BadMagic"),
        (Command::ResumeRuntime, size19, "SizeTooSmall"),
        (
            Command::ResumeRuntime,
            odd_command,
            "UnexpectedReplyCommand",
        ),
        (Command::ResumeRuntime, junk_after, "UnexpectedData"),
        (
            Command::ResumeRuntime,
            ok24()[..10].to_vec(),
            "UnexpectedEof",
        ),
        (Command::ProcessInfo, ok24(), "PayloadTooShort"),
        (Command::DisablePerfMap, long_error, "PayloadTooLong"),
        (Command::ProcessEnvironment, env_short, "UnexpectedEof"),
    ];
    for (command, bytes, expect) in cases {
        rt.set_answer(command, Answer::Raw(bytes));
        let log = match command {
            Command::ResumeRuntime => exchange(&mut reactor, &rt, &ResumeRuntime, None),
            Command::ProcessInfo => exchange(&mut reactor, &rt, &ProcessInfo, None),
            Command::DisablePerfMap => exchange(&mut reactor, &rt, &DisablePerfMap, None),
            _ => exchange(&mut reactor, &rt, &ProcessEnvironment, None),
        };
        let closed = log.closed.clone().unwrap();
        assert!(
            closed.starts_with("Failed(Client(") && closed.contains(expect),
            "{:?} {}: {}",
            command,
            expect,
            closed
        );
        rt.set_answer(command, Answer::Default);
    }

    // A runtime that dies on the request (closes without a reply).
    rt.set_answer(Command::ProcessInfo2, Answer::Close);
    let log = exchange(&mut reactor, &rt, &ProcessInfo2, None);
    assert_eq!(
        log.closed.as_deref(),
        Some("Failed(Client(ClosedBeforeReply))")
    );

    // A runtime that never answers: the deadline closes the connection.
    rt.set_answer(Command::ProcessInfo3, Answer::Hang);
    let t0 = Instant::now();
    let log = exchange(
        &mut reactor,
        &rt,
        &ProcessInfo3,
        Some(Duration::from_millis(300)),
    );
    // Closed by the deadline (not by the fake runtime, which holds it for a minute), and
    // not before it.
    assert_eq!(log.closed.as_deref(), Some("TimedOut"));
    assert!(t0.elapsed() >= Duration::from_millis(300));

    // user_events sessions need descriptor passing: refused before connecting.
    let refused = reactor.control().connect(
        rt.socket_path().unwrap(),
        &CollectTracing5::UserEvents(fixtures::USER_EVENTS_SESSION),
    );
    assert!(matches!(refused, Err(Error::FdPassingUnsupported)));
    let _ = (ClientError::Misuse(UsageError::NotSent), CloseReason::Done);
}

/// The fake runtime records what a raw client sends, rejections included.
#[test]
fn fake_runtime_records_rejections() {
    let dir = TempDir::new("dsipc-mio").unwrap();
    let rt = fake(&dir, Config::new());
    let send = |bytes: &[u8]| {
        let mut s = std::os::unix::net::UnixStream::connect(rt.socket_path().unwrap()).unwrap();
        s.set_read_timeout(Some(T)).unwrap();
        s.write_all(bytes).unwrap();
        let mut reply = Vec::new();
        let _ = s.read_to_end(&mut reply);
        reply
    };
    let mut req = b"DOTNET_IPC_V1\0".to_vec();
    req.extend_from_slice(&[20, 0, 4, 9, 0, 0]);
    let reply = send(&req);
    assert_eq!(
        &reply[20..],
        &Hresult::CORDIAGIPC_E_UNKNOWN_COMMAND.0.to_le_bytes()
    );
    req[0] = b'Y';
    let reply = send(&req);
    assert_eq!(
        &reply[20..],
        &Hresult::CORDIAGIPC_E_UNKNOWN_MAGIC.0.to_le_bytes()
    );
    let got = rt.wait_received(2, T);
    assert_eq!(got.len(), 2);
    assert_eq!(
        got[0].command,
        Some(Command::Unknown {
            command_set: 4,
            command_id: 9
        })
    );
    assert!(got
        .iter()
        .all(|r| r.rejection.is_some() && r.request().is_none()));
}

/// An environment entry larger than READ_BUFFER_LEN (a 200,000-unit value: a 400,014-byte
/// entry, Linux allows 128 Ki characters) grows that connection's receive buffer; the
/// entries around it and other connections are unaffected. Past
/// dsipc-std's bound (512 KiB) the connection fails with a typed BufferTooSmall.
#[test]
fn environment_entries_larger_than_the_read_buffer() {
    let dir = TempDir::new("dsipc-mio").unwrap();
    let big = format!("BIG={}", "v".repeat(200_000));
    let rt = fake(
        &dir,
        Config::new().environment(&["BEFORE=1", &big, "AFTER=2"]),
    );
    let mut reactor = Reactor::new().unwrap();
    // Twice, with a second connection at the same time reading a normal reply.
    for _ in 0..2 {
        let env = reactor
            .control()
            .connect(rt.socket_path().unwrap(), &ProcessEnvironment)
            .unwrap();
        let info = reactor
            .control()
            .connect(rt.socket_path().unwrap(), &ProcessInfo)
            .unwrap();
        let mut peer = Peer::default();
        peer.track(env);
        peer.track(info);
        run_until(&mut reactor, &mut peer, T, "environment", |p| {
            p.all_closed()
        });
        let log = peer.logs.remove(&env).unwrap();
        assert!(log.done, "{:?}", log.closed);
        assert_eq!(log.env.len(), 3);
        assert_eq!(log.env[0], "BEFORE=1");
        assert_eq!(log.env[1].len(), 200_004);
        assert!(log.env[1] == big, "the large entry arrived intact");
        assert_eq!(log.env[2], "AFTER=2");
        assert!(peer.logs.remove(&info).unwrap().done);
    }

    // 300,000 units: a 600,004-byte entry, past the bound.
    let huge = format!("HUGE={}", "h".repeat(300_000));
    let rt = fake(&dir, Config::new().environment(&[&huge]));
    let log = exchange(&mut reactor, &rt, &ProcessEnvironment, None);
    assert!(!log.done);
    let closed = log.closed.unwrap();
    assert!(closed.contains("BufferTooSmall"), "{}", closed);
    assert!(closed.contains("600"), "{}", closed);
}
