//! The reverse-port listener against the fake runtime connecting to it (Advertise, one
//! command, reconnect), misbehaving peers, and the safe bind.
#![cfg(unix)]

mod support;

use std::io::Write;
use std::os::unix::fs::{FileTypeExt, PermissionsExt};
use std::time::Duration;

use dsipc::wire::Command;
use dsipc::ClientError;
use dsipc_testkit::{Config, TempDir};
use dsipc_tokio::reverse::ReverseListener;
use dsipc_tokio::Error;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runtimes_advertise_then_run_one_command_per_connection() {
    let dir = TempDir::new("tokio-rev").unwrap();
    let port = dir.join("monitor.sock");
    let mut listener = ReverseListener::bind(&port).unwrap();
    assert_eq!(listener.address(), port);
    let meta = std::fs::metadata(&port).unwrap();
    assert!(meta.file_type().is_socket());
    assert_eq!(meta.permissions().mode() & 0o777, 0o600);

    let rt = Config::new()
        .pid(777)
        .reverse_port(&port, true)
        .start()
        .unwrap();
    let expected = rt.advertise();

    let first = listener.accept().await.unwrap();
    assert_eq!(first.advertise(), expected);
    assert_eq!(first.pid(), 777);
    assert_eq!(first.cookie(), expected.runtime_cookie);
    assert_eq!(first.address(), port);
    let client = first.into_client();
    let info = client.process_info_basic().await.unwrap();
    assert_eq!(info.pid, 777);
    assert_eq!(info.cookie, expected.runtime_cookie);
    // The connection ran its command: a second one needs the runtime's next connection.
    match client.resume_runtime().await {
        Err(Error::Connect { endpoint, source }) => {
            assert_eq!(endpoint, port);
            assert_eq!(source.kind(), std::io::ErrorKind::NotConnected);
        }
        other => panic!("{:?}", other),
    }
    assert!(!rt.is_resumed());

    // The runtime reconnected and advertised again; resume it there.
    let second = listener.accept().await.unwrap();
    assert_eq!(second.advertise(), expected);
    second.into_client().resume_runtime().await.unwrap();
    assert!(tokio::task::block_in_place(
        || rt.wait_resumed(Duration::from_secs(10))
    ));
    let got = rt.received();
    assert_eq!(got.len(), 2);
    assert!(got.iter().all(|r| r.reverse));
    assert_eq!(got[0].command, Some(Command::ProcessInfo));
    assert_eq!(got[1].command, Some(Command::ResumeRuntime));
    assert!(rt.wait_advertised(2, Duration::from_secs(10)) >= 2);
    drop(rt);
    drop(listener);
    // The listener removed its socket file.
    assert!(!port.exists());
}

#[tokio::test]
async fn peers_that_do_not_advertise_are_reported_and_the_listener_goes_on() {
    let dir = TempDir::new("tokio-rev-bad").unwrap();
    let port = dir.join("monitor.sock");
    let mut listener = ReverseListener::bind(&port).unwrap();

    // Garbage instead of an Advertise.
    let mut bad = std::os::unix::net::UnixStream::connect(&port).unwrap();
    bad.write_all(&[0x55; 40]).unwrap();
    match listener.accept().await {
        Err(Error::Protocol(_)) => {}
        other => panic!("{:?}", other),
    }
    // Closed before 34 bytes.
    let mut short = std::os::unix::net::UnixStream::connect(&port).unwrap();
    short.write_all(b"ADVR_V1\0").unwrap();
    drop(short);
    match listener.accept().await {
        Err(Error::Protocol(ClientError::BadAdvertise(_))) => {}
        other => panic!("{:?}", other),
    }
    // Silent: the advertise timeout.
    listener.set_advertise_timeout(Duration::from_millis(200));
    assert_eq!(listener.advertise_timeout(), Duration::from_millis(200));
    let _silent = std::os::unix::net::UnixStream::connect(&port).unwrap();
    match listener.accept().await {
        Err(Error::Io(e)) => assert_eq!(e.kind(), std::io::ErrorKind::TimedOut),
        other => panic!("{:?}", other),
    }
    // A runtime after all that is served.
    let rt = Config::new().reverse_port(&port, false).start().unwrap();
    let conn = listener.accept().await.unwrap();
    assert_eq!(conn.advertise(), rt.advertise());
}

#[tokio::test]
async fn bind_replaces_only_stale_sockets() {
    let dir = TempDir::new("tokio-rev-bind").unwrap();
    let port = dir.join("monitor.sock");
    let listener = ReverseListener::bind(&port).unwrap();
    // In use.
    match ReverseListener::bind(&port) {
        Err(Error::Io(e)) => assert_eq!(e.kind(), std::io::ErrorKind::AddrInUse),
        other => panic!("{:?}", other),
    }
    drop(listener);
    // A stale socket is replaced.
    let stale = std::os::unix::net::UnixListener::bind(&port).unwrap();
    drop(stale);
    assert!(port.exists());
    let listener = ReverseListener::bind(&port).unwrap();
    drop(listener);
    // Anything else is left alone.
    let file = dir.join("file");
    std::fs::write(&file, b"keep me").unwrap();
    match ReverseListener::bind(&file) {
        Err(Error::Io(e)) => {
            assert_eq!(e.kind(), std::io::ErrorKind::AlreadyExists);
            assert!(e.to_string().contains("not a socket"), "{}", e);
        }
        other => panic!("{:?}", other),
    }
    assert_eq!(std::fs::read(&file).unwrap(), b"keep me");
}

#[tokio::test]
async fn a_dropped_accept_loses_no_runtime() {
    let dir = TempDir::new("tokio-rev-cancel").unwrap();
    let port = dir.join("monitor.sock");
    let mut listener = ReverseListener::bind(&port).unwrap();
    // Nobody connected yet: the accept is pending, then dropped.
    {
        let fut = listener.accept();
        tokio::pin!(fut);
        assert!(support::poll_once(fut.as_mut()).await.is_none());
    }
    let rt = Config::new().reverse_port(&port, false).start().unwrap();
    let conn = listener.accept().await.unwrap();
    assert_eq!(conn.pid(), rt.identity().pid);
}
