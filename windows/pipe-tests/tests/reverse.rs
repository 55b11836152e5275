//! The reverse-port flow over real named pipes: dsipc-std's `ReverseListener` creates the
//! pipe (rejecting remote clients), the fake runtime connects as a runtime started with
//! `DOTNET_DiagnosticPorts=NAME,connect` does, advertises, runs one command per connection
//! and reconnects after each.
#![cfg(windows)]

use std::io::Write;
use std::path::Path;
use std::time::{Duration, Instant};

use dsipc::wire::{Command, ADVERTISE_LEN};
use dsipc::ClientError;
use dsipc_std::reverse::{AcceptError, ListenError, ReverseConnection, ReverseListener};
use dsipc_std::windows::connect;
use dsipc_std::Error;
use dsipc_windows_tests::{commands, fake_config, pipe_path, reverse, unique_pipe_name};

const WAIT: Duration = Duration::from_secs(10);

/// Accepts within `WAIT` (a test must never hang).
fn accept(listener: &mut ReverseListener) -> Result<ReverseConnection, AcceptError> {
    match listener.accept_timeout(WAIT) {
        Ok(Some(c)) => Ok(c),
        Ok(None) => panic!("nobody connected within {:?}", WAIT),
        Err(e) => Err(e),
    }
}

#[test]
fn listener_advertise_command_reconnect() {
    let name = unique_pipe_name("reverse");
    let mut listener = ReverseListener::bind(&name).unwrap();
    assert_eq!(listener.address(), Path::new(&pipe_path(&name)));
    let fake = reverse(listener.address(), fake_config());
    let expected = fake.advertise();

    let first = listener.accept_timeout(WAIT).unwrap().expect("a runtime");
    assert_eq!(first.advertise(), expected);
    let client = first.into_client().with_timeout(WAIT);
    let info = client.process_info_basic().unwrap();
    assert_eq!(
        (info.pid, info.cookie),
        (expected.process_id, expected.runtime_cookie)
    );
    // One command per connection.
    match client.resume_runtime() {
        Err(Error::Connect { source, .. }) => {
            assert_eq!(source.kind(), std::io::ErrorKind::NotConnected)
        }
        other => panic!("{:?}", other),
    }

    // It reconnects after every command: resume it there.
    let t = Instant::now();
    let second = listener.accept_timeout(WAIT).unwrap().expect("reconnect");
    eprintln!("reconnect after {:?}", t.elapsed());
    assert_eq!(second.advertise(), expected);
    assert!(!fake.is_resumed());
    second.into_client().resume_runtime().unwrap();
    assert!(fake.is_resumed());

    // Again: the whole ProcessInfo3 reply.
    let third = accept(&mut listener).unwrap();
    let info = third.into_client().process_info().unwrap();
    assert_eq!(info.command, Command::ProcessInfo3);
    assert_eq!(info.runtime_identifier.as_deref(), Some("win-x64"));

    // An idle connection is held; dropping it makes the runtime reconnect.
    let fourth = accept(&mut listener).unwrap();
    assert!(listener
        .accept_timeout(Duration::from_millis(300))
        .unwrap()
        .is_none());
    assert_eq!(fake.advertised(), 4);
    assert!(!fourth.is_closed());
    let stream = fourth.into_stream().expect("unused");
    // The pipe server knows the runtime's process (here: this very process).
    assert_eq!(stream.client_process_id().unwrap(), std::process::id());
    drop(stream);

    let commands = commands(&fake);
    assert_eq!(
        commands,
        vec![
            Command::ProcessInfo,
            Command::ResumeRuntime,
            Command::ProcessInfo3
        ]
    );
}

#[test]
fn names_in_use_and_invalid_names_are_typed_errors() {
    let name = unique_pipe_name("reverse-inuse");
    let _first = ReverseListener::bind(&name).unwrap();
    match ReverseListener::bind(pipe_path(&name)) {
        Err(ListenError::InUse { path }) => assert_eq!(path, Path::new(&pipe_path(&name))),
        other => panic!("{:?}", other),
    }
    for bad in ["", r"a\b", r"\\.\pipe\"] {
        match ReverseListener::bind(bad) {
            Err(ListenError::InvalidName { .. }) => {}
            other => panic!("{:?}: {:?}", bad, other),
        }
    }
}

#[test]
fn peers_that_do_not_advertise_are_per_connection_errors() {
    let name = unique_pipe_name("reverse-bad");
    let mut listener = ReverseListener::bind(&name).unwrap();
    listener.set_advertise_timeout(Duration::from_millis(300));
    let path = listener.address().to_path_buf();

    let mut c = connect(&path, WAIT).unwrap();
    c.write_all(&[0x55; ADVERTISE_LEN]).unwrap();
    match accept(&mut listener) {
        Err(e @ AcceptError::BadAdvertise(ClientError::BadAdvertise(_))) => assert!(!e.is_fatal()),
        other => panic!("{:?}", other),
    }
    drop(c);

    let mut c = connect(&path, WAIT).unwrap();
    c.write_all(b"ADVR_V1\0").unwrap();
    drop(c);
    match accept(&mut listener) {
        Err(AcceptError::BadAdvertise(_)) => {}
        other => panic!("{:?}", other),
    }

    // Silence: the peer stays connected (a watchdog closes it after a minute, so that an
    // accept that never times out fails the match below instead of hanging the test).
    let c = connect(&path, WAIT).unwrap();
    let (done, watchdog) = std::sync::mpsc::channel::<()>();
    let peer = std::thread::spawn(move || {
        let _ = watchdog.recv_timeout(Duration::from_secs(60));
        drop(c);
    });
    match accept(&mut listener) {
        Err(AcceptError::AdvertiseTimeout { .. }) => {}
        other => panic!("{:?}", other),
    }
    done.send(()).unwrap();
    peer.join().unwrap();

    // A runtime still gets through.
    let fake = reverse(&path, fake_config());
    listener
        .accept_timeout(WAIT)
        .unwrap()
        .expect("runtime")
        .into_client()
        .resume_runtime()
        .unwrap();
    assert!(fake.is_resumed());
}

#[test]
fn is_closed_notices_a_runtime_that_exited() {
    let name = unique_pipe_name("reverse-closed");
    let mut listener = ReverseListener::bind(&name).unwrap();
    let fake = reverse(listener.address(), fake_config());
    let conn = accept(&mut listener).unwrap();
    assert!(!conn.is_closed(), "an idle runtime is not closed");
    drop(fake); // the runtime goes away
    let deadline = Instant::now() + WAIT;
    while !conn.is_closed() {
        assert!(Instant::now() < deadline, "is_closed never saw the close");
        std::thread::sleep(Duration::from_millis(5));
    }
}
