//! user_events sessions end to end with the reactor: [`Control::connect_user_events`] (and
//! [`Control::send_user_events_request`] on a reverse connection) pass the
//! `user_events_data` descriptor after a CollectTracing5/6 user_events request; the
//! testkit's fake runtime receives it and writes one record through it. The "descriptor" is
//! one end of a socket pair or a temporary file the test owns. Also: a request that is not
//! user_events passes nothing, and a real .NET 8 runtime answers UNKNOWN_COMMAND without
//! keeping the descriptor (needs `DSIPC_PYTHON`; fails without it).

#[path = "../../../tests/common/mod.rs"]
mod common;

use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::{Duration, Instant};

use dsipc::fixtures;
use dsipc::payload::{CollectTracing5, CollectTracing6, Reply, Request};
use dsipc::wire::{Command, Hresult};
use dsipc::ClientEvent;
use dsipc_mio::{ConnId, Control, Error, Event, Reactor};
use dsipc_testkit::{
    fake_user_events_record, read_to_eof, user_events_data_file, Answer, Config, FakeRuntime,
    HostOptions, HostedRuntime, StreamEnd, TempDir,
};

const TIMEOUT: Duration = Duration::from_secs(10);

/// What the client side saw, owned.
#[derive(Debug, Clone, PartialEq)]
enum Seen {
    Advertise(ConnId),
    SessionId(ConnId, u64),
    Error(ConnId, Hresult),
    Data(ConnId),
    Other(ConnId, String),
    Closed(ConnId, String),
}

/// Polls until `done` holds for what was seen so far (or fails after [`TIMEOUT`]).
fn run_until(reactor: &mut Reactor, seen: &mut Vec<Seen>, mut done: impl FnMut(&[Seen]) -> bool) {
    let deadline = Instant::now() + TIMEOUT;
    while !done(seen) {
        assert!(Instant::now() < deadline, "timed out; saw {:?}", seen);
        reactor
            .poll(
                Some(Duration::from_millis(100)),
                &mut |_: &mut Control, event: Event<'_>| {
                    let s = match event {
                        Event::Advertise { conn, .. } => Seen::Advertise(conn),
                        Event::Client { conn, event } => match event {
                            ClientEvent::Reply(Reply::SessionId(id)) => Seen::SessionId(conn, id),
                            ClientEvent::Error(e) => Seen::Error(conn, e.hresult),
                            ClientEvent::StreamData(_) => Seen::Data(conn),
                            other => Seen::Other(conn, format!("{:?}", other)),
                        },
                        Event::Closed { conn, reason } => {
                            Seen::Closed(conn, format!("{:?}", reason))
                        }
                        _ => return,
                    };
                    if seen.last() != Some(&s) || !matches!(s, Seen::Data(_)) {
                        seen.push(s);
                    }
                },
            )
            .unwrap();
    }
}

fn fake(dir: &TempDir, config: Config) -> FakeRuntime {
    config.listen_in(dir.path()).start().unwrap()
}

/// Connects to `socket` with the sample CollectTracing5 user_events request, passing
/// `theirs`, then closes the test's copy (the connection sent its own).
fn connect_ct5(reactor: &mut Reactor, socket: &Path, theirs: UnixStream) -> ConnId {
    let conn = reactor
        .control()
        .connect_user_events(
            socket,
            &CollectTracing5::UserEvents(fixtures::USER_EVENTS_SESSION),
            &theirs,
        )
        .unwrap();
    drop(theirs);
    conn
}

/// Polls until a connection closes; the first thing seen must be `conn`'s UNKNOWN_COMMAND.
fn expect_unknown_command(reactor: &mut Reactor, conn: ConnId, what: &str) {
    let mut seen = Vec::new();
    run_until(reactor, &mut seen, |s| {
        s.iter().any(|e| matches!(e, Seen::Closed(..)))
    });
    assert_eq!(
        seen[0],
        Seen::Error(conn, Hresult::CORDIAGIPC_E_UNKNOWN_COMMAND),
        "{}: {:?}",
        what,
        seen
    );
}

#[test]
fn a_collect_tracing5_session_passes_the_descriptor_and_streams() {
    let dir = TempDir::new("ue-mio-ct5").unwrap();
    let rt = fake(&dir, Config::new());
    let mut reactor = Reactor::new().unwrap();
    let (mine, theirs) = UnixStream::pair().unwrap();
    // The caller's descriptor is its own: the connection sent a copy.
    let conn = connect_ct5(&mut reactor, rt.socket_path().unwrap(), theirs);
    let mut seen = Vec::new();
    run_until(&mut reactor, &mut seen, |s| s.contains(&Seen::Data(conn)));
    let id = match seen[0] {
        Seen::SessionId(c, id) if c == conn => id,
        ref other => panic!("{:?}", other),
    };
    assert_eq!(read_to_eof(mine, TIMEOUT), fake_user_events_record());
    assert_eq!(rt.received()[0].command, Some(Command::CollectTracing5));
    // Closing the connection ends the session in the fake.
    reactor.control().close(conn);
    let streams = rt.wait_streams(1, TIMEOUT);
    assert_eq!(streams[0].session_id, id);
    assert_eq!(streams[0].end, StreamEnd::PeerClosed);
}

#[test]
fn a_collect_tracing6_session_writes_into_a_file_the_test_owns() {
    let dir = TempDir::new("ue-mio-ct6").unwrap();
    let rt = fake(&dir, Config::new());
    let mut reactor = Reactor::new().unwrap();
    let (path, file) = user_events_data_file(&dir);
    let conn = reactor
        .control()
        .connect_user_events(
            rt.socket_path().unwrap(),
            &CollectTracing6::UserEvents(fixtures::USER_EVENTS_SESSION),
            &file,
        )
        .unwrap();
    let mut seen = Vec::new();
    run_until(&mut reactor, &mut seen, |s| !s.is_empty());
    assert!(
        matches!(seen[0], Seen::SessionId(c, _) if c == conn),
        "{:?}",
        seen
    );
    assert_eq!(std::fs::read(&path).unwrap(), fake_user_events_record());
    assert_eq!(rt.received()[0].command, Some(Command::CollectTracing6));
}

#[test]
fn a_request_that_is_not_user_events_passes_nothing() {
    let dir = TempDir::new("ue-mio-not").unwrap();
    let rt = fake(&dir, Config::new());
    let mut reactor = Reactor::new().unwrap();
    let (mine, theirs) = UnixStream::pair().unwrap();
    // Every sample request that is not a user_events session (streaming CollectTracing
    // 1 to 6 among them) is refused before anything is sent.
    let mut not_user_events = 0;
    common::each_request(|req| {
        if req.requires_fd_passing() {
            return;
        }
        match reactor
            .control()
            .connect_user_events(rt.socket_path().unwrap(), &req, &theirs)
        {
            Err(Error::NotUserEvents { command }) => assert_eq!(command, req.command()),
            other => panic!("{:?}: {:?}", req.command(), other),
        }
        not_user_events += 1;
    });
    assert!(not_user_events >= 20, "{}", not_user_events);
    // And plain connect still refuses user_events requests.
    let refused = reactor.control().connect(
        rt.socket_path().unwrap(),
        &CollectTracing5::UserEvents(fixtures::USER_EVENTS_SESSION),
    );
    assert!(
        matches!(refused, Err(Error::FdPassingUnsupported)),
        "{:?}",
        refused
    );
    assert_eq!(reactor.control().connection_count(), 0);
    drop(theirs);
    assert_eq!(read_to_eof(mine, TIMEOUT), b"");
    assert!(rt.received().is_empty());
}

#[test]
fn a_runtime_that_does_not_know_the_command_keeps_no_descriptor() {
    let dir = TempDir::new("ue-mio-unknown").unwrap();
    let rt = fake(
        &dir,
        Config::new().answer(Command::CollectTracing5, Answer::unknown_command()),
    );
    let mut reactor = Reactor::new().unwrap();
    let (mine, theirs) = UnixStream::pair().unwrap();
    let conn = connect_ct5(&mut reactor, rt.socket_path().unwrap(), theirs);
    expect_unknown_command(&mut reactor, conn, "fake");
    assert_eq!(read_to_eof(mine, TIMEOUT), b"");
}

#[test]
fn a_reverse_connection_passes_the_descriptor_too() {
    let dir = TempDir::new("ue-mio-rev").unwrap();
    let port = dir.join("port.sock");
    let mut reactor = Reactor::new().unwrap();
    reactor.control().listen_reverse(&port).unwrap();
    let rt = Config::new().reverse_port(&port, false).start().unwrap();
    let mut seen = Vec::new();
    run_until(&mut reactor, &mut seen, |s| {
        s.iter().any(|e| matches!(e, Seen::Advertise(_)))
    });
    let conn = match seen[0] {
        Seen::Advertise(c) => c,
        ref other => panic!("{:?}", other),
    };
    let (mine, theirs) = UnixStream::pair().unwrap();
    reactor
        .control()
        .send_user_events_request(
            conn,
            &CollectTracing5::UserEvents(fixtures::USER_EVENTS_SESSION),
            &theirs,
        )
        .unwrap();
    drop(theirs);
    run_until(&mut reactor, &mut seen, |s| {
        s.iter()
            .any(|e| matches!(e, Seen::SessionId(c, _) if *c == conn))
    });
    assert_eq!(read_to_eof(mine, TIMEOUT), fake_user_events_record());
    let got = rt.wait_received(1, TIMEOUT);
    assert!(got[0].reverse);
    assert_eq!(got[0].command, Some(Command::CollectTracing5));
}

/// Real .NET 8.0.4 does not know CollectTracing5: UNKNOWN_COMMAND, and no copy of the
/// descriptor stays anywhere.
#[test]
fn real_net8_answers_unknown_command_and_keeps_no_descriptor() {
    dsipc_testkit::python().expect("DSIPC_PYTHON");
    let mut host = HostedRuntime::spawn(&HostOptions::net8(120)).expect("spawn the host");
    let ready = host
        .wait_ready(Duration::from_secs(60))
        .expect("the runtime starts");
    let socket = dsipc_std::unix::find_socket(ready.pid, None).expect("find the socket");
    let mut reactor = Reactor::new().unwrap();
    // Several times: the runtime often answers and closes before the descriptor goes out,
    // sometimes after; either way its answer comes through.
    for attempt in 0..4 {
        let (mine, theirs) = UnixStream::pair().unwrap();
        let conn = connect_ct5(&mut reactor, &socket, theirs);
        expect_unknown_command(&mut reactor, conn, &format!("attempt {}", attempt));
        assert_eq!(read_to_eof(mine, TIMEOUT), b"", "attempt {}", attempt);
    }
}
