//! user_events sessions end to end with the blocking adapter: dsipc-std passes the
//! `user_events_data` descriptor after a CollectTracing5/6 user_events request, the fake
//! runtime receives it and writes one record through it. The "descriptor" is one end of a
//! socket pair or a temporary file the test owns (the real
//! `/sys/kernel/tracing/user_events_data` is root-only, and no installed runtime knows
//! user_events sessions: .NET 10 added them). Also the error paths, and what real .NET 8 and
//! .NET Core 3.1 answer (they do not know CollectTracing5).
#![cfg(unix)]

use std::fs::File;
use std::io::{self, Read, Write};
use std::os::unix::io::BorrowedFd;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::thread;
use std::time::Duration;

use dsipc::fixtures;
use dsipc::payload::{CollectTracing5, CollectTracing6, ErrorReply, Response};
use dsipc::wire::{Command, Hresult};
use dsipc::AnyRequest;
use dsipc_std::{Connection, DiagnosticsClient, Endpoint, Error, PassFd, Transport};
use dsipc_testkit::{
    fake_user_events_record, read_to_eof, user_events_data_file, Answer, Config, FakeRuntime,
    HostOptions, HostedRuntime, StreamEnd, TempDir,
};

const TIMEOUT: Duration = Duration::from_secs(10);
fn fake(dir: &TempDir, config: Config) -> (FakeRuntime, DiagnosticsClient) {
    let rt = config
        .listen_in(dir.path())
        .start()
        .expect("start the fake runtime");
    let client =
        DiagnosticsClient::new(Endpoint::new(rt.socket_path().unwrap())).with_timeout(TIMEOUT);
    (rt, client)
}

#[test]
fn a_collect_tracing5_session_passes_the_descriptor_and_streams() {
    let dir = TempDir::new("ue-std-ct5").unwrap();
    let (rt, client) = fake(&dir, Config::new());
    let (mine, theirs) = UnixStream::pair().unwrap();
    let mut session = client
        .start_user_events_tracing(
            CollectTracing5::UserEvents(fixtures::USER_EVENTS_SESSION),
            &theirs,
        )
        .expect("the session starts");
    drop(theirs);
    // The fake wrote its record through the passed descriptor, then closed its copy.
    assert_eq!(read_to_eof(mine, TIMEOUT), fake_user_events_record());

    // The request arrived whole, and the session streams and stops like any other.
    let got = rt.wait_received(1, TIMEOUT);
    assert_eq!(got[0].command, Some(Command::CollectTracing5));
    match got[0].request() {
        Some(AnyRequest::CollectTracing5(CollectTracing5::UserEvents(u))) => {
            assert_eq!(u, fixtures::USER_EVENTS_SESSION);
        }
        other => panic!("{:?}", other),
    }
    let n = session
        .drain(|_| Ok(()), |bytes| bytes > 0)
        .expect("drain to the end after the stop")
        .bytes();
    assert!(n > 0);
    let streams = rt.wait_streams(1, TIMEOUT);
    assert_eq!(streams[0].session_id, session.session_id());
    assert_eq!(streams[0].end, StreamEnd::Stopped);
    assert_eq!(streams[0].bytes, n);
}

#[test]
fn a_collect_tracing6_session_writes_into_a_file_the_test_owns() {
    let dir = TempDir::new("ue-std-ct6").unwrap();
    let (rt, client) = fake(&dir, Config::new());
    let (path, file) = user_events_data_file(&dir);
    let session = client
        .start_user_events_tracing(
            CollectTracing6::UserEvents(fixtures::USER_EVENTS_SESSION),
            &file,
        )
        .expect("the session starts");
    assert_ne!(session.session_id(), 0);
    // The fake wrote its record at the start of the file, through its copy.
    assert_eq!(std::fs::read(&path).unwrap(), fake_user_events_record());
    assert_eq!(rt.received()[0].command, Some(Command::CollectTracing6));
    // Dropping the session closes the stream; the fake sees its peer leave.
    drop(session);
    assert_eq!(rt.wait_streams(1, TIMEOUT)[0].end, StreamEnd::PeerClosed);
}

#[test]
fn a_request_that_is_not_user_events_passes_nothing_and_sends_nothing() {
    let dir = TempDir::new("ue-std-not").unwrap();
    let (rt, client) = fake(&dir, Config::new());
    let (mine, theirs) = UnixStream::pair().unwrap();
    match client.start_user_events_tracing(fixtures::COLLECT_TRACING2, &theirs) {
        Err(Error::InvalidArgument(_)) => {}
        other => panic!("{:?}", other.map(|s| s.session_id())),
    }
    // And the other way round: start_tracing never takes a user_events request.
    match client.start_tracing(CollectTracing5::UserEvents(fixtures::USER_EVENTS_SESSION)) {
        Err(Error::InvalidArgument(m)) => assert!(m.contains("start_user_events_tracing"), "{}", m),
        other => panic!("{:?}", other.map(|s| s.session_id())),
    }
    // Nothing was sent (a later command is the first the fake sees), and no copy of the
    // descriptor exists anywhere.
    client.resume_runtime().unwrap();
    let got = rt.wait_received(1, TIMEOUT);
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].command, Some(Command::ResumeRuntime));
    drop(theirs);
    assert_eq!(read_to_eof(mine, TIMEOUT), b"");
}

#[test]
fn a_runtime_that_does_not_know_the_command_gets_no_descriptor_to_keep() {
    // Like .NET 8: UNKNOWN_COMMAND without reading the descriptor, then close.
    let dir = TempDir::new("ue-std-unknown").unwrap();
    let (_rt, client) = fake(
        &dir,
        Config::new().answer(Command::CollectTracing5, Answer::unknown_command()),
    );
    let (mine, theirs) = UnixStream::pair().unwrap();
    match client.start_user_events_tracing(
        CollectTracing5::UserEvents(fixtures::USER_EVENTS_SESSION),
        &theirs,
    ) {
        Err(Error::NotSupported { command, hresult }) => {
            assert_eq!(command, Command::CollectTracing5);
            assert_eq!(hresult, Hresult::CORDIAGIPC_E_UNKNOWN_COMMAND);
        }
        other => panic!("{:?}", other.map(|s| s.session_id())),
    }
    drop(theirs);
    // Whatever was in flight went with the fake's closed connection.
    assert_eq!(read_to_eof(mine, TIMEOUT), b"");
}

#[test]
fn a_descriptor_the_fake_cannot_write_is_e_fail() {
    let dir = TempDir::new("ue-std-ro").unwrap();
    let (_rt, client) = fake(&dir, Config::new());
    let path = dir.join("read-only");
    std::fs::write(&path, b"").unwrap();
    let read_only = File::open(&path).unwrap();
    match client.start_user_events_tracing(
        CollectTracing5::UserEvents(fixtures::USER_EVENTS_SESSION),
        &read_only,
    ) {
        Err(Error::ErrorReply { hresult, .. }) => assert_eq!(hresult, Hresult::E_FAIL),
        other => panic!("{:?}", other.map(|s| s.session_id())),
    }
    assert_eq!(std::fs::read(&path).unwrap(), b"");
}

#[test]
fn the_fake_answers_bad_encoding_when_no_descriptor_comes() {
    let dir = TempDir::new("ue-std-nofd").unwrap();
    let rt = Config::new().listen_in(dir.path()).start().unwrap();
    let encoded = {
        let req = CollectTracing5::UserEvents(fixtures::USER_EVENTS_SESSION);
        let mut conn = dsipc::ClientConnection::new();
        let mut tx = vec![0u8; dsipc::payload::Request::encoded_len(&req)];
        let n = conn.send_request(&req, &mut tx).unwrap();
        tx.truncate(n);
        tx
    };
    // A plain byte where the descriptor should be, then the same with nothing at all (the
    // client half-closes).
    for plain_byte in [true, false] {
        let mut s = UnixStream::connect(rt.socket_path().unwrap()).unwrap();
        s.set_read_timeout(Some(TIMEOUT)).unwrap();
        s.write_all(&encoded).unwrap();
        if plain_byte {
            s.write_all(&[0]).unwrap();
        } else {
            s.shutdown(std::net::Shutdown::Write).unwrap();
        }
        let mut reply = Vec::new();
        s.read_to_end(&mut reply).unwrap();
        let error = ErrorReply::new(Hresult::CORDIAGIPC_E_BAD_ENCODING);
        let mut want = vec![0u8; Response::Error(error).encoded_len()];
        let n = Response::Error(error).encode(&mut want).unwrap();
        assert_eq!(reply, &want[..n], "plain byte: {}", plain_byte);
    }
    assert!(rt.streams().is_empty());
}

// ---- a peer that closes before the descriptor goes out ----------------------------------

/// A Unix connection whose descriptor passing first waits until the server has closed:
/// the `sendmsg` then meets a closed peer for certain.
struct LateConn {
    stream: UnixStream,
    closed: mpsc::Receiver<()>,
}

impl Read for LateConn {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.stream.read(buf)
    }
}

impl Write for LateConn {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.stream.write(buf)
    }
    fn flush(&mut self) -> io::Result<()> {
        self.stream.flush()
    }
}

impl Connection for LateConn {
    fn set_read_timeout(&mut self, timeout: Option<Duration>) -> io::Result<()> {
        self.stream.set_read_timeout(timeout)
    }
    fn set_write_timeout(&mut self, timeout: Option<Duration>) -> io::Result<()> {
        self.stream.set_write_timeout(timeout)
    }
}

impl PassFd for LateConn {
    fn pass_fd(&self, fd: BorrowedFd<'_>) -> io::Result<()> {
        let _ = self.closed.recv_timeout(TIMEOUT);
        self.stream.pass_fd(fd)
    }
}

/// Connects to `path`; the connection passes descriptors only after `closed` fires.
struct LateTransport {
    path: PathBuf,
    closed: std::sync::Mutex<Option<mpsc::Receiver<()>>>,
}

impl Transport for LateTransport {
    type Conn = LateConn;
    fn connect(&self, timeout: Duration) -> Result<LateConn, Error> {
        let stream = dsipc_std::unix::connect(&self.path, timeout)?;
        let closed = self.closed.lock().unwrap().take().expect("one connection");
        Ok(LateConn { stream, closed })
    }
}

/// A server that reads one request exactly, writes `reply` (if any), closes, and says so.
fn closing_server(
    dir: &Path,
    reply: Option<Response<'static>>,
) -> (PathBuf, thread::JoinHandle<()>, mpsc::Receiver<()>) {
    let path = dir.join("closing.sock");
    let listener = UnixListener::bind(&path).unwrap();
    let (tx, rx) = mpsc::channel();
    let t = thread::spawn(move || {
        let (mut s, _) = listener.accept().unwrap();
        let mut head = [0u8; 20];
        s.read_exact(&mut head).unwrap();
        let size = u16::from_le_bytes([head[14], head[15]]) as usize;
        let mut payload = vec![0u8; size - 20];
        s.read_exact(&mut payload).unwrap();
        if let Some(r) = reply {
            let mut out = vec![0u8; r.encoded_len()];
            let n = r.encode(&mut out).unwrap();
            s.write_all(&out[..n]).unwrap();
        }
        drop(s);
        tx.send(()).unwrap();
    });
    (path, t, rx)
}

/// Starts a CollectTracing5 user_events session against [`closing_server`] (answering
/// `reply`, if any), passing the descriptor only once that server has closed; returns the
/// error the start fails with, after the server thread is done.
fn start_after_the_peer_closed(dir: &Path, reply: Option<Response<'static>>) -> Error {
    let (path, server, closed) = closing_server(dir, reply);
    let client = DiagnosticsClient::new(LateTransport {
        path,
        closed: std::sync::Mutex::new(Some(closed)),
    })
    .with_timeout(TIMEOUT);
    let (_mine, theirs) = UnixStream::pair().unwrap();
    let started = client.start_user_events_tracing(
        CollectTracing5::UserEvents(fixtures::USER_EVENTS_SESSION),
        &theirs,
    );
    server.join().unwrap();
    match started {
        Err(e) => e,
        Ok(s) => panic!("a session started: {}", s.session_id()),
    }
}

#[test]
fn a_peer_that_closes_before_the_descriptor_is_fd_not_passed() {
    let dir = TempDir::new("ue-std-closed").unwrap();
    match start_after_the_peer_closed(dir.path(), None) {
        Error::FdNotPassed { command, source } => {
            assert_eq!(command, Command::CollectTracing5);
            assert!(
                matches!(
                    source.kind(),
                    io::ErrorKind::BrokenPipe | io::ErrorKind::ConnectionReset
                ),
                "{:?}",
                source
            );
        }
        other => panic!("{:?}", other),
    }
}

#[test]
fn a_peer_that_answered_before_closing_is_its_answer() {
    let dir = TempDir::new("ue-std-answered").unwrap();
    let unknown = Response::Error(ErrorReply::new(Hresult::CORDIAGIPC_E_UNKNOWN_COMMAND));
    match start_after_the_peer_closed(dir.path(), Some(unknown)) {
        Error::NotSupported { command, .. } => assert_eq!(command, Command::CollectTracing5),
        other => panic!("{:?}", other),
    }
}

// ---- real runtimes -----------------------------------------------------------------------

/// Real .NET 8.0.4 and .NET Core 3.1.23 do not know CollectTracing5: UNKNOWN_COMMAND, at
/// once, and no copy of the descriptor stays anywhere. Needs `DSIPC_PYTHON` (fails without).
#[test]
#[cfg(target_os = "linux")]
fn real_runtimes_answer_unknown_command_and_keep_no_descriptor() {
    dsipc_testkit::python().expect("DSIPC_PYTHON");
    for runtime in ["net8", "netcore31"] {
        let options = HostOptions {
            runtime: runtime.to_string(),
            ..HostOptions::net8(120)
        };
        let mut host = HostedRuntime::spawn(&options).expect("spawn the host");
        let ready = host
            .wait_ready(Duration::from_secs(60))
            .expect("the runtime starts");
        let client = DiagnosticsClient::for_pid(ready.pid)
            .expect("find the host's socket")
            .with_timeout(TIMEOUT);
        // Several times: the runtime often answers and closes before the descriptor goes
        // out, sometimes after; either way its answer is the error.
        for _ in 0..3 {
            let (mine, theirs) = UnixStream::pair().unwrap();
            match client.start_user_events_tracing(
                CollectTracing5::UserEvents(fixtures::USER_EVENTS_SESSION),
                &theirs,
            ) {
                Err(Error::NotSupported { command, hresult }) => {
                    assert_eq!(command, Command::CollectTracing5, "{}", runtime);
                    assert_eq!(
                        hresult,
                        Hresult::CORDIAGIPC_E_UNKNOWN_COMMAND,
                        "{}",
                        runtime
                    );
                }
                other => panic!("{}: {:?}", runtime, other.map(|s| s.session_id())),
            }
            drop(theirs);
            assert_eq!(read_to_eof(mine, TIMEOUT), b"", "{}", runtime);
        }
        // The runtime's server goes on serving.
        let info = client.process_info();
        match runtime {
            "net8" => assert_eq!(
                info.expect("ProcessInfo after the refusal").pid,
                u64::from(ready.pid)
            ),
            // 3.1 knows no Process commands: the server answered, which is the point.
            _ => assert!(
                matches!(info, Err(Error::NotSupported { .. })),
                "{:?}",
                info
            ),
        }
    }
}
