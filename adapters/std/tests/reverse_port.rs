//! The reverse-port listener over real Unix sockets, against a runtime side built on the
//! core's advertising `ServerConnection` (connect, Advertise, one command, reconnect): the
//! safe bind (mode 0600, stale sockets only, nothing else removed), accepting, one command
//! per connection through `DiagnosticsClient`, reconnects, and misbehaving peers.
#![cfg(unix)]

use std::fs;
use std::io::{Read, Write};
use std::os::unix::fs::{FileTypeExt, PermissionsExt};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use dsipc::conn::process_info3_from_v2;
use dsipc::payload::{ProcessInfo2Reply, ProcessInfo3Reply, Reply, Response};
use dsipc::recv::{Poll, RecvBuffer};
use dsipc::wire::{Advertise, Command, Guid, Hresult, ADVERTISE_LEN};
use dsipc::{ClientError, Request, ServerConnection, ServerEvent};
use dsipc_std::reverse::{AcceptError, ListenError, ReverseListener};
use dsipc_std::Error;

const PID: u64 = 31337;
const COOKIE: Guid = Guid::from_fields(0xdead_beef, 1, 2, [3, 4, 5, 6, 7, 8, 9, 10]);
const TIMEOUT: Duration = Duration::from_secs(5);

/// A fresh private directory, removed on drop.
struct TempDir(PathBuf);

impl TempDir {
    fn new(tag: &str) -> TempDir {
        static SEQ: AtomicUsize = AtomicUsize::new(0);
        let dir = std::env::temp_dir().join(format!(
            "dsipc-rev-{}-{}-{}",
            std::process::id(),
            SEQ.fetch_add(1, Ordering::SeqCst),
            tag
        ));
        fs::create_dir_all(&dir).unwrap();
        TempDir(dir)
    }
    fn join(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }
    fn entries(&self) -> Vec<String> {
        let mut v: Vec<String> = fs::read_dir(&self.0)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        v.sort();
        v
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}

fn advertise() -> Advertise {
    Advertise {
        runtime_cookie: COOKIE,
        process_id: PID,
        future: 0,
    }
}

/// Connects to `port`, retrying while it does not exist yet (bounded).
fn connect_retry(port: &Path) -> UnixStream {
    let deadline = Instant::now() + TIMEOUT;
    loop {
        match UnixStream::connect(port) {
            Ok(s) => return s,
            Err(e) if Instant::now() < deadline => {
                let _ = e;
                thread::sleep(Duration::from_millis(10));
            }
            Err(e) => panic!("runtime side: connect {}: {}", port.display(), e),
        }
    }
}

/// Connects to `port` as a runtime does and sends its Advertise; the rest is the caller's.
fn advertised(port: &Path) -> UnixStream {
    let mut stream = connect_retry(port);
    let mut out = [0u8; ADVERTISE_LEN];
    let n = ServerConnection::advertising(advertise())
        .poll_transmit(&mut out)
        .unwrap();
    assert_eq!(n, ADVERTISE_LEN);
    stream.write_all(&out[..n]).unwrap();
    stream
}

/// Serves one command on `stream` (its Advertise sent) as the runtime does: read the
/// request through the core's receive buffer, reply, close. Returns the command.
fn serve_one(mut stream: UnixStream) -> Option<Command> {
    stream.set_read_timeout(Some(TIMEOUT)).unwrap();
    // The Advertise is out: from here the machine is a plain server's.
    let mut machine = ServerConnection::new();
    let mut out = vec![0u8; 4096];
    let mut rx = RecvBuffer::new([0u8; 4096]);
    loop {
        match rx.poll_server(&mut machine).unwrap() {
            Poll::Event(ServerEvent::Request { request, .. }) => {
                let command = request.command();
                // Every ProcessInfo version from one value, as the runtime answers them.
                let n = match command {
                    Command::ProcessInfo | Command::ProcessInfo2 | Command::ProcessInfo3 => {
                        machine.send_process_info(&info3(), &mut out)
                    }
                    _ => machine.send_response(&Response::Ok(Reply::Ok(Hresult::S_OK)), &mut out),
                }
                .unwrap();
                stream.write_all(&out[..n]).unwrap();
                return Some(command);
            }
            Poll::Event(ServerEvent::Rejected(r)) => {
                let _ = stream.write_all(&r.reply());
                return None;
            }
            Poll::Event(other) => panic!("runtime side: {:?}", other),
            Poll::NeedInput => match stream.read(rx.read_buf().unwrap()) {
                Ok(0) => rx.eof(),
                Ok(n) => rx.filled(n),
                Err(e) => panic!("runtime side: read: {}", e),
            },
            Poll::End => return None,
        }
    }
}

/// Every field a ProcessInfo reply of any version carries.
fn info3() -> ProcessInfo3Reply<'static> {
    process_info3_from_v2(
        &ProcessInfo2Reply {
            process_id: PID,
            runtime_cookie: COOKIE,
            command_line: "fake".into(),
            os: "Linux".into(),
            arch: "x64".into(),
            managed_entrypoint_assembly_name: "".into(),
            clr_product_version: "8.0.4".into(),
        },
        "linux-x64".into(),
    )
}

/// Lets one runtime connect to `port` and resumes it through `listener`.
fn resume_one(listener: &mut ReverseListener, port: &Path) {
    let rt = runtime(port.to_path_buf(), 1);
    listener
        .accept()
        .unwrap()
        .into_client()
        .resume_runtime()
        .unwrap();
    assert_eq!(rt.join().unwrap(), vec![Some(Command::ResumeRuntime)]);
}

/// A runtime that connects `connections` times in a row (reconnecting after every command,
/// as real runtimes do); returns the commands it served.
fn runtime(port: PathBuf, connections: usize) -> JoinHandle<Vec<Option<Command>>> {
    thread::spawn(move || {
        (0..connections)
            .map(|_| serve_one(advertised(&port)))
            .collect()
    })
}

#[test]
fn advertise_then_one_command_per_connection_with_reconnects() {
    let dir = TempDir::new("flow");
    let port = dir.join("port.sock");
    let mut listener = ReverseListener::bind(&port).unwrap();
    assert_eq!(listener.address(), port.as_path());
    let rt = runtime(port.clone(), 3);

    // 1: ProcessInfo over the reverse connection; pid and cookie match the Advertise.
    let first = listener.accept().unwrap();
    assert_eq!(first.pid(), PID);
    assert_eq!(first.cookie(), COOKIE);
    assert_eq!(first.advertise(), advertise());
    assert!(first.is_unused());
    let client = first.into_client().with_timeout(TIMEOUT);
    let info = client.process_info_basic().unwrap();
    assert_eq!((info.pid, info.cookie), (PID, COOKIE));
    // One command per connection: the next one needs the runtime's next connection.
    match client.resume_runtime() {
        Err(Error::Connect { source, .. }) => {
            assert_eq!(
                source.kind(),
                std::io::ErrorKind::NotConnected,
                "{}",
                source
            )
        }
        other => panic!("second command on one reverse connection: {:?}", other),
    }

    // 2: the runtime reconnected and advertised again: resume it.
    let second = listener
        .accept_timeout(TIMEOUT)
        .unwrap()
        .expect("reconnect");
    assert_eq!(second.advertise(), advertise());
    second.into_client().resume_runtime().unwrap();

    // 3: ProcessInfo3 (the first the fallback chain tries).
    let third = listener.accept().unwrap();
    let info = third.into_client().process_info().unwrap();
    assert_eq!(info.command, Command::ProcessInfo3);
    assert_eq!(info.runtime_identifier.as_deref(), Some("linux-x64"));

    assert_eq!(
        rt.join().unwrap(),
        vec![
            Some(Command::ProcessInfo),
            Some(Command::ResumeRuntime),
            Some(Command::ProcessInfo3)
        ]
    );
    // Nobody else came.
    assert!(listener
        .accept_timeout(Duration::from_millis(100))
        .unwrap()
        .is_none());
}

#[test]
fn socket_is_0600_and_nothing_private_is_left_behind() {
    let dir = TempDir::new("mode");
    let port = dir.join("port.sock");
    let listener = ReverseListener::bind(&port).unwrap();
    let meta = fs::symlink_metadata(&port).unwrap();
    assert!(meta.file_type().is_socket());
    assert_eq!(meta.permissions().mode() & 0o777, 0o600);
    // The private directory it was bound in is gone.
    assert_eq!(dir.entries(), vec!["port.sock".to_string()]);
    drop(listener);
    assert!(!port.exists(), "the socket file is removed on drop");
    assert!(dir.entries().is_empty());
}

#[test]
fn a_path_through_dotdot_binds_where_it_points() {
    let dir = TempDir::new("rel");
    fs::create_dir(dir.join("sub")).unwrap();
    let port = dir.join("sub").join("..").join("p.sock");
    let listener = ReverseListener::bind(&port).unwrap();
    assert!(dir.join("p.sock").exists());
    drop(listener);
    assert!(!dir.join("p.sock").exists());
}

#[test]
fn a_stale_socket_is_replaced() {
    let dir = TempDir::new("stale");
    let port = dir.join("port.sock");
    drop(UnixListener::bind(&port).unwrap()); // the file stays; nobody listens
    assert!(UnixStream::connect(&port).is_err());
    let mut listener = ReverseListener::bind(&port).unwrap();
    resume_one(&mut listener, &port);
}

#[test]
fn a_live_listener_is_in_use_and_left_alone() {
    let dir = TempDir::new("live");
    let port = dir.join("port.sock");
    let live = UnixListener::bind(&port).unwrap();
    match ReverseListener::bind(&port) {
        Err(ListenError::InUse { path }) => assert_eq!(path, port),
        other => panic!("{:?}", other),
    }
    // Still the same live socket.
    assert!(UnixStream::connect(&port).is_ok());
    drop(live);
}

#[test]
fn other_kinds_of_files_are_never_removed() {
    let dir = TempDir::new("files");
    let file = dir.join("file");
    fs::write(&file, b"precious").unwrap();
    let sub = dir.join("dir");
    fs::create_dir(&sub).unwrap();
    let link = dir.join("link");
    std::os::unix::fs::symlink(&file, &link).unwrap();
    let dangling = dir.join("dangling");
    std::os::unix::fs::symlink(dir.join("nothing"), &dangling).unwrap();
    for path in [&file, &sub, &link, &dangling] {
        match ReverseListener::bind(path) {
            Err(e @ ListenError::NotASocket { .. }) => {
                assert!(e.to_string().contains("not a socket"), "{}", e)
            }
            other => panic!("{}: {:?}", path.display(), other),
        }
    }
    assert_eq!(fs::read(&file).unwrap(), b"precious");
    assert!(sub.is_dir());
    assert!(fs::symlink_metadata(&link)
        .unwrap()
        .file_type()
        .is_symlink());
    assert!(fs::symlink_metadata(&dangling)
        .unwrap()
        .file_type()
        .is_symlink());
    assert_eq!(dir.entries(), vec!["dangling", "dir", "file", "link"]);
}

#[test]
fn drop_leaves_a_file_that_replaced_the_socket() {
    let dir = TempDir::new("replaced");
    let port = dir.join("port.sock");
    let listener = ReverseListener::bind(&port).unwrap();
    fs::remove_file(&port).unwrap();
    fs::write(&port, b"someone else's").unwrap();
    drop(listener);
    assert_eq!(fs::read(&port).unwrap(), b"someone else's");
}

#[test]
fn too_long_and_missing_directories_are_typed_errors() {
    let long = PathBuf::from(format!("/tmp/{}", "x".repeat(120)));
    assert!(matches!(
        ReverseListener::bind(&long),
        Err(ListenError::PathTooLong { .. })
    ));
    match ReverseListener::bind("/nonexistent-dsipc-dir/port.sock") {
        Err(e @ ListenError::Io { .. }) => {
            assert!(e.to_string().contains("/nonexistent-dsipc-dir"), "{}", e)
        }
        other => panic!("{:?}", other),
    }
}

#[test]
fn a_long_path_that_fits_only_in_place_still_binds_0600() {
    let dir = TempDir::new("long");
    // Leave room for the file name, but not for the private directory next to it.
    let base = dir.0.as_os_str().len() + 1;
    let name = "y".repeat(dsipc::transport::MAX_SOCKET_PATH - base);
    let port = dir.join(&name);
    assert_eq!(port.as_os_str().len(), dsipc::transport::MAX_SOCKET_PATH);
    let mut listener = ReverseListener::bind(&port).unwrap();
    let meta = fs::symlink_metadata(&port).unwrap();
    assert_eq!(meta.permissions().mode() & 0o777, 0o600);
    resume_one(&mut listener, &port);
    drop(listener);
    assert!(!port.exists());
}

#[test]
fn misbehaving_peers_are_per_connection_errors() {
    let dir = TempDir::new("bad");
    let port = dir.join("port.sock");
    let mut listener = ReverseListener::bind(&port).unwrap();
    listener.set_advertise_timeout(Duration::from_millis(300));

    // Not an Advertise.
    let mut s = UnixStream::connect(&port).unwrap();
    s.write_all(&[b'X'; ADVERTISE_LEN]).unwrap();
    match listener.accept() {
        Err(e @ AcceptError::BadAdvertise(ClientError::BadAdvertise(_))) => {
            assert!(!e.is_fatal());
            assert!(e.to_string().contains("bad magic"), "{}", e);
        }
        other => panic!("{:?}", other),
    }
    drop(s);

    // Ten bytes, then close.
    let mut s = UnixStream::connect(&port).unwrap();
    s.write_all(b"ADVR_V1\0\x01\x02").unwrap();
    drop(s);
    match listener.accept() {
        Err(AcceptError::BadAdvertise(e)) => assert!(e.to_string().contains("truncated"), "{}", e),
        other => panic!("{:?}", other),
    }

    // Silence: the peer stays connected (a watchdog closes it after a minute, so that an
    // accept that never times out fails the match below instead of hanging the test).
    let s = UnixStream::connect(&port).unwrap();
    let (done, watchdog) = std::sync::mpsc::channel::<()>();
    let peer = thread::spawn(move || {
        let _ = watchdog.recv_timeout(Duration::from_secs(60));
        drop(s);
    });
    match listener.accept() {
        Err(AcceptError::AdvertiseTimeout { timeout }) => {
            assert_eq!(timeout, Duration::from_millis(300))
        }
        other => panic!("{:?}", other),
    }
    done.send(()).unwrap();
    peer.join().unwrap();

    // And a real runtime still gets through afterwards.
    resume_one(&mut listener, &port);
}

#[test]
fn accept_timeout_returns_none_in_time() {
    let dir = TempDir::new("idle");
    let mut listener = ReverseListener::bind(dir.join("p")).unwrap();
    let t = Instant::now();
    assert!(listener
        .accept_timeout(Duration::from_millis(200))
        .unwrap()
        .is_none());
    // It waited (no early return); the upper bound only says that it returned at all.
    let took = t.elapsed();
    assert!(
        took >= Duration::from_millis(190) && took < Duration::from_secs(60),
        "{:?}",
        took
    );
}

#[test]
fn a_runtime_that_leaves_mid_reply_is_a_typed_error() {
    let dir = TempDir::new("vanish");
    let port = dir.join("p");
    let mut listener = ReverseListener::bind(&port).unwrap();
    let p = port.clone();
    let rt = thread::spawn(move || {
        let mut s = advertised(&p);
        let mut req = [0u8; 20];
        s.read_exact(&mut req).unwrap();
        // Half a reply header, then gone.
        s.write_all(b"DOTNET_IPC_V1\0").unwrap();
    });
    let conn = listener.accept().unwrap();
    match conn
        .into_client()
        .with_timeout(TIMEOUT)
        .process_info_basic()
    {
        Err(Error::Protocol(ClientError::UnexpectedEof { .. })) => {}
        other => panic!("{:?}", other),
    }
    rt.join().unwrap();
}

#[test]
fn the_raw_stream_is_available() {
    let dir = TempDir::new("raw");
    let port = dir.join("p");
    let mut listener = ReverseListener::bind(&port).unwrap();
    let rt = runtime(port.clone(), 1);
    let conn = listener.accept().unwrap();
    let mut stream = conn.into_stream().expect("unused");
    // A ResumeRuntime written by hand.
    let mut req = [0u8; 64];
    let n = dsipc::payload::ResumeRuntime.encode(&mut req).unwrap();
    stream.write_all(&req[..n]).unwrap();
    let mut reply = Vec::new();
    stream.read_to_end(&mut reply).unwrap();
    assert_eq!(reply.len(), 24);
    assert_eq!(rt.join().unwrap(), vec![Some(Command::ResumeRuntime)]);
}

#[test]
fn is_closed_notices_a_runtime_that_left() {
    let dir = TempDir::new("closed");
    let port = dir.join("p");
    let mut listener = ReverseListener::bind(&port).unwrap();
    let p = port.clone();
    let (tx, rx) = std::sync::mpsc::channel::<()>();
    let (idle_tx, idle) = std::sync::mpsc::channel::<()>();
    let rt = thread::spawn(move || {
        let _runtime = advertised(&p);
        // Stay until told, then exit (closing the connection).
        idle_tx.send(()).unwrap();
        let _ = rx.recv();
    });
    let conn = listener.accept().unwrap();
    idle.recv().unwrap();
    assert!(!conn.is_closed(), "an idle runtime is not closed");
    tx.send(()).unwrap();
    rt.join().unwrap();
    // The runtime's side is closed once its thread ended: a Unix socket's close is seen at
    // once by the peer.
    assert!(conn.is_closed(), "is_closed did not see the close");
    // Handed out: closed too (it cannot run another command).
    let rt = runtime(port.clone(), 1);
    let conn = listener.accept().unwrap();
    let client = conn.into_client();
    client.resume_runtime().unwrap();
    assert!(client.transport().is_closed());
    rt.join().unwrap();
}

/// `accept_pending` hands out a peer before its Advertise is read: a silent peer accepted
/// first does not hold up a runtime accepted after it, and its own Advertise deadline
/// still applies when it is read.
#[test]
fn accept_pending_does_not_read_the_advertise() {
    let dir = TempDir::new("pending");
    let port = dir.join("p");
    let mut listener = ReverseListener::bind(&port).unwrap();
    let silent = UnixStream::connect(&port).unwrap();
    let quiet = listener
        .accept_pending(TIMEOUT)
        .unwrap()
        .expect("the silent peer");
    let rt = runtime(port.clone(), 1);
    let next = listener
        .accept_pending(TIMEOUT)
        .unwrap()
        .expect("the runtime");
    next.read_advertise(TIMEOUT)
        .unwrap()
        .into_client()
        .resume_runtime()
        .unwrap();
    assert_eq!(rt.join().unwrap(), vec![Some(Command::ResumeRuntime)]);
    // The silent peer is still connected; reading its Advertise times out.
    match quiet.read_advertise(Duration::from_millis(100)) {
        Err(AcceptError::AdvertiseTimeout { timeout }) => {
            assert_eq!(timeout, Duration::from_millis(100))
        }
        other => panic!("{:?}", other),
    }
    drop(silent);
    // Nobody else: None within the wait.
    assert!(listener
        .accept_pending(Duration::from_millis(50))
        .unwrap()
        .is_none());
}
