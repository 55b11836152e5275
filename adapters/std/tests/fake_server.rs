//! The adapter against scripted servers on Unix sockets: the cases real runtimes do not
//! produce on demand (a server that goes silent, closes early, sends garbage, or makes the
//! stop wait until the stream is drained). The replies are encoded by the core.
#![cfg(unix)]

use std::io::{Read, Write};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::PathBuf;
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use dsipc::payload::{ErrorReply, ProcessInfo2Reply, ProcessInfo3, Provider, Reply, Response};
use dsipc::wire::{Command, Guid, Hresult, Text};
use dsipc::ClientError;
use dsipc_std::{DiagnosticsClient, Endpoint, Error};

static SEQ: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

fn socket_path() -> PathBuf {
    std::env::temp_dir().join(format!(
        "dsipc-fake-{}-{}-socket",
        std::process::id(),
        SEQ.fetch_add(1, std::sync::atomic::Ordering::SeqCst)
    ))
}

/// Reads one request: its command and payload.
fn read_request(s: &mut UnixStream) -> (Command, Vec<u8>) {
    let mut head = [0u8; 20];
    s.read_exact(&mut head).unwrap();
    assert_eq!(&head[..14], b"DOTNET_IPC_V1\0");
    let size = u16::from_le_bytes([head[14], head[15]]) as usize;
    let mut payload = vec![0u8; size - 20];
    s.read_exact(&mut payload).unwrap();
    (Command::from_code(head[16], head[17]), payload)
}

fn send(s: &mut UnixStream, r: Response<'_>) {
    let mut buf = vec![0u8; r.encoded_len()];
    let n = r.encode(&mut buf).unwrap();
    s.write_all(&buf[..n]).unwrap();
}

/// Keeps a server's connection open until the test lets go, or a minute passes (so that a
/// client that never gives up fails the test instead of hanging it: see [`Hold::let_go`]).
#[derive(Clone, Default)]
struct Hold(Arc<(Mutex<(bool, bool)>, Condvar)>); // (let go, gave up)

impl Hold {
    /// Server side: waits until [`let_go`](Self::let_go), or a minute.
    fn keep(&self) {
        let (lock, cv) = &*self.0;
        let deadline = Instant::now() + Duration::from_secs(60);
        let mut s = lock.lock().unwrap();
        while !s.0 {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                s.1 = true;
                return;
            }
            s = cv.wait_timeout(s, left).unwrap().0;
        }
    }

    /// Test side: lets the server go; true if it was still holding then (the client did
    /// not wait for it).
    fn let_go(&self) -> bool {
        let (lock, cv) = &*self.0;
        let mut s = lock.lock().unwrap();
        s.0 = true;
        cv.notify_all();
        !s.1
    }
}

/// Serves every connection on its own thread with `handler`, until the test ends.
fn serve<F>(handler: F) -> PathBuf
where
    F: Fn(UnixStream, Command, Vec<u8>) + Send + Sync + 'static,
{
    let path = socket_path();
    let _ = std::fs::remove_file(&path);
    let listener = UnixListener::bind(&path).unwrap();
    let handler = Arc::new(handler);
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let mut conn = match conn {
                Ok(c) => c,
                Err(_) => return,
            };
            let handler = Arc::clone(&handler);
            std::thread::spawn(move || {
                let (cmd, payload) = read_request(&mut conn);
                handler(conn, cmd, payload);
            });
        }
    });
    path
}

fn client(path: &PathBuf, timeout: Duration) -> DiagnosticsClient {
    DiagnosticsClient::new(Endpoint::new(path)).with_timeout(timeout)
}

#[test]
fn a_silent_server_times_out() {
    let hold = Hold::default();
    let server = hold.clone();
    let path = serve(move |conn, _, _| {
        server.keep();
        drop(conn);
    });
    let c = client(&path, Duration::from_millis(300));
    match c.process_info() {
        Err(e @ Error::Timeout { .. }) => {
            assert!(e.to_string().contains("ProcessInfo3"), "{}", e);
        }
        other => panic!("{:?}", other),
    }
    // The timeout fired by itself: the server was still holding the connection.
    assert!(hold.let_go(), "the client waited for the server to give up");
    let _ = std::fs::remove_file(path);
}

#[test]
fn process_info_falls_back_from_3_to_2() {
    let path = serve(|mut conn, cmd, payload| {
        assert!(payload.is_empty());
        match cmd {
            Command::ProcessInfo3 => send(
                &mut conn,
                Response::Error(ErrorReply::new(Hresult::CORDIAGIPC_E_UNKNOWN_COMMAND)),
            ),
            Command::ProcessInfo2 => send(
                &mut conn,
                Response::Ok(Reply::ProcessInfo2(ProcessInfo2Reply {
                    process_id: 42,
                    runtime_cookie: Guid::from_fields(1, 2, 3, [4; 8]),
                    command_line: Text::Str("/usr/bin/dotnet app.dll"),
                    os: Text::Str("Linux"),
                    arch: Text::Str("arm64"),
                    managed_entrypoint_assembly_name: Text::Str("app"),
                    clr_product_version: Text::Str("6.0.0"),
                })),
            ),
            other => panic!("unexpected {:?}", other),
        }
    });
    let info = client(&path, Duration::from_secs(5))
        .process_info()
        .unwrap();
    assert_eq!(info.command, Command::ProcessInfo2);
    assert_eq!(info.pid, 42);
    assert_eq!(info.command_line, "/usr/bin/dotnet app.dll");
    assert_eq!(info.clr_version.as_deref(), Some("6.0.0"));
    assert_eq!(info.runtime_identifier, None);
    let _ = std::fs::remove_file(path);
}

#[test]
fn early_close_and_garbage_are_protocol_errors() {
    let path = serve(|mut conn, cmd, _| match cmd {
        Command::ProcessInfo3 => drop(conn),
        Command::ResumeRuntime => conn.write_all(&[0xAB; 24]).unwrap(),
        // A reply cut short by EOF.
        _ => conn
            .write_all(&b"DOTNET_IPC_V1\0\x18\x00\xff\x00\x00\x00\x00"[..])
            .unwrap(),
    });
    let c = client(&path, Duration::from_secs(5));
    match c.process_info() {
        Err(Error::Protocol(ClientError::ClosedBeforeReply)) => {}
        other => panic!("{:?}", other),
    }
    match c.resume_runtime() {
        Err(Error::Protocol(ClientError::BadMagic { .. })) => {}
        other => panic!("{:?}", other),
    }
    match c.disable_perf_map() {
        Err(Error::Protocol(ClientError::UnexpectedEof { needed, available })) => {
            assert_eq!((needed, available), (24, 21));
        }
        other => panic!("{:?}", other),
    }
    let _ = std::fs::remove_file(path);
}

#[test]
fn a_stale_socket_is_a_connect_error() {
    let path = socket_path();
    drop(UnixListener::bind(&path).unwrap()); // the file stays, nobody listens
    let e = client(&path, Duration::from_secs(1))
        .process_info()
        .unwrap_err();
    match &e {
        Error::Connect { source, .. } => {
            assert_eq!(source.kind(), std::io::ErrorKind::ConnectionRefused)
        }
        other => panic!("{:?}", other),
    }
    assert!(e.to_string().contains("stale"), "{}", e);
    let _ = std::fs::remove_file(path);
}

#[test]
fn requests_are_routed_by_kind() {
    let c = client(&socket_path(), Duration::from_secs(1));
    // EventPipe sessions must go through start_tracing, and start_tracing only takes them.
    let providers = [Provider::new("X", 1, 4)];
    let ct2 = dsipc::payload::CollectTracing2 {
        circular_buffer_mb: 1,
        format: dsipc::payload::TraceFormat::NetTrace,
        request_rundown: false,
        providers: (&providers[..]).into(),
    };
    assert!(matches!(
        c.exchange(&ct2, |_| Ok(())),
        Err(Error::InvalidArgument(_))
    ));
    assert!(matches!(
        c.start_tracing(ProcessInfo3),
        Err(Error::InvalidArgument(_))
    ));
    // Requests the core refuses are not sent (no server exists here at all).
    assert!(matches!(
        c.collect_tracing(&[], 1, false),
        Err(Error::InvalidRequest(_))
    ));
}

/// A runtime-like EventPipe server: it streams until a stop arrives, then flushes
/// `flush_bytes` more into the trace connection (blocking until the client reads them),
/// and only then answers the stop and closes the stream.
/// A server that streams until StopTracing, then flushes `flush_bytes` and ends the stream,
/// or (with `hold`) keeps it open and silent until the test lets go.
fn eventpipe_server(flush_bytes: usize, hold: Option<Hold>) -> PathBuf {
    let state = Arc::new((Mutex::new((false, false)), Condvar::new())); // (stop requested, flushed)
    serve(move |mut conn, cmd, _| {
        let (lock, cv) = &*state;
        match cmd {
            Command::CollectTracing2 => {
                send(&mut conn, Response::Ok(Reply::SessionId(0x42)));
                conn.write_all(b"Nettrace").unwrap();
                let chunk = vec![0x5Au8; 64 * 1024];
                // Stream until the stop arrives.
                while !lock.lock().unwrap().0 {
                    if conn.write_all(&chunk[..4096]).is_err() {
                        return;
                    }
                    std::thread::sleep(Duration::from_millis(2));
                }
                // Flush: these writes only complete if the client keeps draining.
                let mut left = flush_bytes;
                while left > 0 {
                    let n = left.min(chunk.len());
                    if conn.write_all(&chunk[..n]).is_err() {
                        return;
                    }
                    left -= n;
                }
                lock.lock().unwrap().1 = true;
                cv.notify_all();
                match &hold {
                    None => conn.write_all(&[0x06, 0x01]).unwrap(),
                    // Misbehave: never close the stream.
                    Some(h) => h.keep(),
                }
            }
            Command::StopTracing => {
                lock.lock().unwrap().0 = true;
                let mut s = lock.lock().unwrap();
                while !s.1 {
                    s = cv.wait(s).unwrap();
                }
                drop(s);
                send(&mut conn, Response::Ok(Reply::SessionId(0x42)));
            }
            other => panic!("unexpected {:?}", other),
        }
    })
}

#[test]
fn stop_is_answered_only_because_the_stream_keeps_draining() {
    let flush = 8 * 1024 * 1024; // far more than the socket buffers hold
    let path = eventpipe_server(flush, None);
    let c = client(&path, Duration::from_secs(5));
    let mut session = c
        .collect_tracing(&[Provider::new("X", 1, 4)], 1, false)
        .unwrap();
    assert_eq!(session.session_id(), 0x42);
    let mut first = Vec::new();
    let n = session
        .drain(
            |d| {
                if first.len() < 8 {
                    first.extend_from_slice(d);
                }
                Ok(())
            },
            |bytes| bytes > 256 * 1024,
        )
        .expect("drained to the end")
        .bytes();
    assert!(first.starts_with(b"Nettrace"));
    assert!(n as usize > flush + 256 * 1024, "{}", n);
    assert!(session.stop_handle().is_requested());
    let _ = std::fs::remove_file(path);
}

#[test]
fn pull_api_reads_chunks_stops_and_ends_like_drain() {
    let flush = 4 * 1024 * 1024;
    let path = eventpipe_server(flush, None);
    let c = client(&path, Duration::from_secs(5));
    let mut session = c
        .collect_tracing(&[Provider::new("X", 1, 4)], 1, false)
        .unwrap();
    let mut first = Vec::new();
    let mut total = 0u64;
    let mut stopped = false;
    let ended = loop {
        match session.next_chunk(Duration::from_millis(100)).unwrap() {
            dsipc_std::Chunk::Data(d) => {
                if first.len() < 8 {
                    first.extend_from_slice(d);
                }
                total += d.len() as u64;
            }
            dsipc_std::Chunk::Quiet => {}
            dsipc_std::Chunk::End(_) => break true,
            _ => unreachable!("a variant this test does not know"),
        }
        assert_eq!(total, session.bytes_received());
        if !stopped && total > 256 * 1024 {
            stopped = true;
            session.stop().unwrap();
            // A second stop is nothing.
            session.stop().unwrap();
        }
    };
    assert!(ended && stopped);
    assert!(first.starts_with(b"Nettrace"));
    assert!(total as usize > flush + 256 * 1024, "{}", total);
    assert!(session.stop_handle().is_answered());
    let _ = std::fs::remove_file(path);
}

#[test]
fn a_stream_that_never_ends_after_stop_times_out() {
    let hold = Hold::default();
    let path = eventpipe_server(1024, Some(hold.clone()));
    let c = client(&path, Duration::from_millis(500));
    let mut session = c
        .collect_tracing(&[Provider::new("X", 1, 4)], 1, false)
        .unwrap();
    match session.drain(|_| Ok(()), |bytes| bytes > 16 * 1024) {
        Err(Error::Timeout { command, .. }) => assert_eq!(command, Command::StopTracing),
        other => panic!("{:?}", other),
    }
    // The drain gave up by itself: the server was still holding the stream open.
    assert!(hold.let_go(), "the drain waited for the server to give up");
    let _ = std::fs::remove_file(path);
}

/// An environment variable of 100,000 UTF-16 units (Linux allows 128 KiB per variable) needs
/// more than one message's worth of buffer: the adapter grows its buffer and reads it whole.
/// Found by the core's `client` fuzz target; see tests/fuzz_regressions.rs.
#[test]
fn a_huge_environment_variable_is_read_whole() {
    let big: String = std::iter::once("BIG=")
        .chain(std::iter::repeat("v").take(100_000 - 4))
        .collect();
    let expected = big.clone();
    let path = serve(move |mut s, cmd, _| {
        assert_eq!(cmd, Command::ProcessEnvironment);
        let vars = [Text::Str("A=1"), Text::Str(&big)];
        let len = dsipc::conn::environment_block_len(vars);
        send(
            &mut s,
            Response::Ok(Reply::ProcessEnvironment(
                dsipc::payload::ProcessEnvironmentReply {
                    incoming_bytes: len as u32,
                    future: 0,
                },
            )),
        );
        let mut block = vec![0u8; len];
        dsipc::conn::encode_environment_block(vars, &mut block).unwrap();
        s.write_all(&block).unwrap();
    });
    let env = client(&path, Duration::from_secs(5))
        .process_environment()
        .unwrap();
    assert_eq!(env, vec!["A=1".to_string(), expected]);
}

#[test]
fn huge_timeouts_are_errors_or_waits_never_a_panic() {
    // Duration::MAX as the timeout (or the attach timeout) must not overflow a deadline.
    let missing = socket_path();
    let client = DiagnosticsClient::new(Endpoint::new(&missing)).with_timeout(Duration::MAX);
    assert!(matches!(client.process_info(), Err(Error::Connect { .. })));
    let client = DiagnosticsClient::new(Endpoint::new(&missing));
    let r = client.attach_profiler(Duration::MAX, Guid::default(), "/x.so", &[]);
    assert!(matches!(r, Err(Error::Connect { .. })), "{:?}", r);
    assert!(dsipc_std::unix::connect(&missing, Duration::MAX).is_err());
}
