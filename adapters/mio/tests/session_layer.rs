//! The reactor driving the session layer against the testkit's fake runtime:
//! [`Control::call`] with its fallbacks, typed errors and deadline (the reactor waking by
//! itself), and [`Control::trace`] sessions stopped from a second connection or cut by
//! the runtime.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use dsipc::payload::Provider;
use dsipc::session::{Ask, Outcome, ProcessInfo, SessionError, TraceConfig};
use dsipc::{ClientEvent, Command, Hresult, Reply};
use dsipc_mio::{CallId, Control, Error, Event, Handler, Reactor, TraceId};
use dsipc_testkit::{Answer, Config, FakeRuntime, StreamEnd, StreamSpec, TempDir};

/// Bound of every wait of these tests (none is reached when they pass).
const T: Duration = Duration::from_secs(30);

/// Everything the session layer handed out, owned.
#[derive(Default)]
struct Seen {
    /// (command, Debug text) of each [`Event::Call`].
    calls: HashMap<CallId, Vec<(Command, String)>>,
    infos: HashMap<CallId, ProcessInfo>,
    call_done: HashMap<CallId, Result<(), Error>>,
    started: HashMap<TraceId, u64>,
    data: HashMap<TraceId, Vec<u8>>,
    trace_done: HashMap<TraceId, Result<Outcome, Error>>,
    /// Stop every session once this many bytes arrived (from its own handler call).
    stop_after: Option<usize>,
}

impl Handler for Seen {
    fn on_event(&mut self, ctl: &mut Control, event: Event<'_>) {
        match event {
            Event::Call { id, command, event } => {
                if let ClientEvent::Reply(
                    r @ (Reply::ProcessInfo(_) | Reply::ProcessInfo2(_) | Reply::ProcessInfo3(_)),
                ) = &event
                {
                    let info = ProcessInfo::from_reply(command, r).unwrap();
                    self.infos.insert(id, info);
                }
                let text = format!("{:?}", event);
                self.calls.entry(id).or_default().push((command, text));
            }
            Event::CallDone { id, result } => {
                assert!(self.call_done.insert(id, result).is_none(), "two ends");
            }
            Event::TraceStarted { id, session_id } => {
                self.started.insert(id, session_id);
            }
            Event::TraceData { id, data } => {
                let all = self.data.entry(id).or_default();
                let before = all.len();
                all.extend_from_slice(data);
                if let Some(n) = self.stop_after {
                    if before < n && all.len() >= n {
                        ctl.stop_trace(id).unwrap();
                    }
                }
            }
            Event::TraceDone { id, result } => {
                assert!(self.trace_done.insert(id, result).is_none(), "two ends");
            }
            _ => {}
        }
    }
}

fn fake(dir: &TempDir, config: Config) -> FakeRuntime {
    config.listen_in(dir.path()).start().unwrap()
}

/// Polls until `done`; returns the number of polls it took.
fn run_until(reactor: &mut Reactor, seen: &mut Seen, done: impl Fn(&Seen) -> bool) -> usize {
    let deadline = Instant::now() + T;
    let mut polls = 0;
    while !done(seen) {
        let now = Instant::now();
        assert!(now < deadline, "nothing happened within {:?}", T);
        reactor.poll(Some(deadline - now), seen).unwrap();
        polls += 1;
    }
    polls
}

/// The commands the fake runtime received, in order.
fn commands(rt: &FakeRuntime) -> Vec<Command> {
    rt.received().iter().filter_map(|r| r.command).collect()
}

/// A recorded .NET 8 trace (a whole nettrace stream, ending `06 01`), for the fake to send.
fn nettrace() -> &'static [u8] {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../tests/data/nettrace/activities-net8.0.4.nettrace"
    );
    let bytes = std::fs::read(path).unwrap();
    assert!(bytes.ends_with(&[0x06, 0x01]));
    Box::leak(bytes.into_boxed_slice())
}

fn providers() -> [Provider<'static>; 1] {
    [Provider::new("Microsoft-Windows-DotNETRuntime", 0x8001, 4)]
}

#[test]
fn call_process_info_falls_back_3_2_1_on_unknown_command() {
    let dir = TempDir::new("dsipc-mio").unwrap();
    let rt = fake(
        &dir,
        Config::new()
            .pid(4711)
            .answer(Command::ProcessInfo3, Answer::unknown_command())
            .answer(Command::ProcessInfo2, Answer::unknown_command()),
    );
    let mut reactor = Reactor::new().unwrap();
    let path = rt.socket_path().unwrap();
    let id = reactor
        .control()
        .call(path, Ask::ProcessInfo, Duration::from_secs(10))
        .unwrap();
    assert_eq!(reactor.control().session_count(), 1);
    let mut seen = Seen::default();
    run_until(&mut reactor, &mut seen, |s| s.call_done.contains_key(&id));
    assert!(seen.call_done[&id].is_ok(), "{:?}", seen.call_done[&id]);
    // Three connections, one per version; only the answer is passed up.
    assert_eq!(
        commands(&rt),
        [
            Command::ProcessInfo3,
            Command::ProcessInfo2,
            Command::ProcessInfo
        ]
    );
    assert_eq!(seen.calls[&id].len(), 1, "{:?}", seen.calls[&id]);
    let info = &seen.infos[&id];
    assert_eq!((info.command, info.pid), (Command::ProcessInfo, 4711));
    assert_eq!(info.clr_version, None);
    // Nothing left behind.
    assert_eq!(reactor.control().session_count(), 0);
    assert_eq!(reactor.control().connection_count(), 0);
}

#[test]
fn call_on_a_runtime_without_process_info_is_not_supported() {
    let dir = TempDir::new("dsipc-mio").unwrap();
    let rt = fake(&dir, Config::new().like_netcore31());
    let mut reactor = Reactor::new().unwrap();
    let path = rt.socket_path().unwrap();
    let info = reactor
        .control()
        .call(path, Ask::ProcessInfo, Duration::from_secs(10))
        .unwrap();
    let env = reactor
        .control()
        .call(
            path,
            Ask::Environment { max_bytes: 1 << 20 },
            Duration::from_secs(10),
        )
        .unwrap();
    let mut seen = Seen::default();
    run_until(&mut reactor, &mut seen, |s| s.call_done.len() == 2);
    for id in [info, env] {
        match &seen.call_done[&id] {
            Err(Error::Session(e @ SessionError::NotSupported { .. })) => {
                assert!(e.is_not_supported())
            }
            other => panic!("{:?}", other),
        }
        assert!(!seen.calls.contains_key(&id), "{:?}", seen.calls.get(&id));
    }
    assert_eq!(reactor.control().connection_count(), 0);
}

#[test]
fn call_to_a_silent_runtime_times_out_at_its_deadline() {
    let dir = TempDir::new("dsipc-mio").unwrap();
    let rt = fake(&dir, Config::new().default_answer(Answer::Hang));
    let mut reactor = Reactor::new().unwrap();
    let timeout = Duration::from_millis(300);
    let t = Instant::now();
    let id = reactor
        .control()
        .call(rt.socket_path().unwrap(), Ask::ProcessInfo, timeout)
        .unwrap();
    let mut seen = Seen::default();
    // Each poll may wait 30 s: only the call's own deadline wakes the reactor earlier.
    let polls = run_until(&mut reactor, &mut seen, |s| s.call_done.contains_key(&id));
    let took = t.elapsed();
    match &seen.call_done[&id] {
        Err(Error::Session(SessionError::Timeout {
            command: Command::ProcessInfo3,
            timeout_ms: 300,
        })) => {}
        other => panic!("{:?}", other),
    }
    assert!(took >= timeout, "{:?}", took);
    assert!(took < Duration::from_secs(10), "{:?}", took);
    // Connect and send, wait for the deadline: no busy loop.
    assert!(polls <= 5, "{} polls", polls);
    assert_eq!(reactor.control().connection_count(), 0);
}

#[test]
fn trace_stopped_from_a_second_connection_ends_stopped() {
    let dir = TempDir::new("dsipc-mio").unwrap();
    let whole = nettrace();
    // The trace without its end in one write, then (once stopped, or after a second)
    // its end.
    let body = &whole[..whole.len() - 2];
    let spec = StreamSpec {
        chunk: body.len(),
        pause: Duration::from_secs(1),
        ..StreamSpec::content(body).with_end_marker()
    };
    let rt = fake(&dir, Config::new().like_net8_0_4().stream(spec));
    let mut reactor = Reactor::new().unwrap();
    let config = TraceConfig::new(&providers());
    let id = reactor
        .control()
        .trace(rt.socket_path().unwrap(), config, Duration::from_secs(10))
        .unwrap();
    let mut seen = Seen {
        stop_after: Some(body.len()),
        ..Seen::default()
    };
    run_until(&mut reactor, &mut seen, |s| s.trace_done.contains_key(&id));
    let session_id = seen.started[&id];
    assert_eq!(seen.data[&id], whole);
    match &seen.trace_done[&id] {
        Ok(Outcome::Stopped { bytes }) => assert_eq!(*bytes, whole.len() as u64),
        other => panic!("{:?}", other),
    }
    // The stop went on a connection of its own, for this session.
    let stops: Vec<_> = rt
        .received()
        .iter()
        .filter(|r| r.command == Some(Command::StopTracing))
        .map(|r| format!("{:?}", r.request()))
        .collect();
    assert_eq!(stops.len(), 1);
    assert_eq!(rt.wait_streams(1, T)[0].end, StreamEnd::Stopped);
    assert!(stops[0].contains(&session_id.to_string()), "{:?}", stops);
    assert_eq!(reactor.control().connection_count(), 0);
    assert!(matches!(
        reactor.control().stop_trace(id),
        Err(Error::UnknownTrace(t)) if t == id
    ));
}

#[test]
fn trace_cut_by_the_runtime_ends_cut() {
    let dir = TempDir::new("dsipc-mio").unwrap();
    // The runtime closes mid-stream: 1,500 bytes of a trace, no end.
    let cut = &nettrace()[..1_500];
    let rt = fake(&dir, Config::new().stream(StreamSpec::content(cut)));
    let mut reactor = Reactor::new().unwrap();
    let config = TraceConfig::new(&providers());
    let id = reactor
        .control()
        .trace(rt.socket_path().unwrap(), config, Duration::from_secs(10))
        .unwrap();
    let mut seen = Seen::default();
    run_until(&mut reactor, &mut seen, |s| s.trace_done.contains_key(&id));
    assert!(seen.started.contains_key(&id));
    assert_eq!(seen.data[&id], cut);
    match &seen.trace_done[&id] {
        Ok(Outcome::Cut {
            bytes: 1_500,
            offset,
            stop_requested: false,
            ..
        }) => assert!(*offset > 0 && *offset <= 1_500, "{}", offset),
        other => panic!("{:?}", other),
    }
    assert_eq!(reactor.control().connection_count(), 0);
}

#[test]
fn call_and_trace_to_a_missing_socket_end_with_the_connect_error() {
    let dir = TempDir::new("dsipc-mio").unwrap();
    let missing = dir.path().join("dotnet-diagnostic-1-1-socket");
    let mut reactor = Reactor::new().unwrap();
    let t = Duration::from_secs(10);
    let call = reactor
        .control()
        .call(&missing, Ask::ProcessInfo, t)
        .unwrap();
    let config = TraceConfig::new(&providers());
    let trace = reactor.control().trace(&missing, config, t).unwrap();
    let mut seen = Seen::default();
    run_until(&mut reactor, &mut seen, |s| {
        s.call_done.contains_key(&call) && s.trace_done.contains_key(&trace)
    });
    assert!(
        matches!(seen.call_done[&call], Err(Error::Io { op: "connect", .. })),
        "{:?}",
        seen.call_done[&call]
    );
    assert!(
        matches!(
            seen.trace_done[&trace],
            Err(Error::Io { op: "connect", .. })
        ),
        "{:?}",
        seen.trace_done[&trace]
    );
    assert_eq!(reactor.control().session_count(), 0);
}

#[test]
fn trace_whose_stop_is_refused_ends_with_the_stop_error() {
    let dir = TempDir::new("dsipc-mio").unwrap();
    let rt = fake(
        &dir,
        Config::new()
            .stream(StreamSpec::until_stopped(4096, Duration::from_millis(5)))
            .answer(Command::StopTracing, Answer::Error(Hresult::E_FAIL)),
    );
    let mut reactor = Reactor::new().unwrap();
    let config = TraceConfig::new(&providers());
    let id = reactor
        .control()
        .trace(rt.socket_path().unwrap(), config, Duration::from_secs(10))
        .unwrap();
    let mut seen = Seen {
        stop_after: Some(1),
        ..Seen::default()
    };
    run_until(&mut reactor, &mut seen, |s| s.trace_done.contains_key(&id));
    match &seen.trace_done[&id] {
        Err(Error::Session(SessionError::ErrorReply {
            command: Command::StopTracing,
            hresult,
            ..
        })) => assert_eq!(*hresult, Hresult::E_FAIL),
        other => panic!("{:?}", other),
    }
    assert_eq!(reactor.control().connection_count(), 0);
}

#[test]
fn trace_whose_stream_goes_on_after_the_stop_was_answered_is_bounded() {
    let dir = TempDir::new("dsipc-mio").unwrap();
    // The runtime answers the stop but streams on.
    let rt = fake(
        &dir,
        Config::new()
            .stream(StreamSpec::until_stopped(4096, Duration::from_millis(5)))
            .answer(Command::StopTracing, Answer::IgnoreStop),
    );
    let mut reactor = Reactor::new().unwrap();
    let config = TraceConfig::new(&providers());
    let timeout = Duration::from_millis(300);
    let id = reactor
        .control()
        .trace(rt.socket_path().unwrap(), config, timeout)
        .unwrap();
    let mut seen = Seen {
        stop_after: Some(1),
        ..Seen::default()
    };
    run_until(&mut reactor, &mut seen, |s| s.trace_done.contains_key(&id));
    match &seen.trace_done[&id] {
        Err(Error::Session(SessionError::StreamNotEnded {
            session_id,
            timeout_ms: 300,
        })) => assert_eq!(Some(session_id), seen.started.get(&id)),
        other => panic!("{:?}", other),
    }
    assert_eq!(reactor.control().connection_count(), 0);
}

#[test]
fn stop_trace_before_the_start_is_sent_once_the_session_started() {
    let dir = TempDir::new("dsipc-mio").unwrap();
    let rt = fake(
        &dir,
        Config::new().stream(StreamSpec::until_stopped(4096, Duration::from_millis(5))),
    );
    let mut reactor = Reactor::new().unwrap();
    let config = TraceConfig::new(&providers());
    let id = reactor
        .control()
        .trace(rt.socket_path().unwrap(), config, Duration::from_secs(10))
        .unwrap();
    reactor.control().stop_trace(id).unwrap();
    let mut seen = Seen::default();
    run_until(&mut reactor, &mut seen, |s| s.trace_done.contains_key(&id));
    // A byte pattern is no trace: cut at its first byte, after our stop.
    match &seen.trace_done[&id] {
        Ok(Outcome::Cut {
            stop_requested: true,
            ..
        }) => {}
        other => panic!("{:?}", other),
    }
    assert!(seen.started.contains_key(&id));
    assert!(commands(&rt).contains(&Command::StopTracing));
    assert_eq!(rt.wait_streams(1, T)[0].end, StreamEnd::Stopped);
}
