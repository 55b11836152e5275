//! A pipe whose every instance is busy: connecting waits (`WaitNamedPipeW`), then times
//! out with a typed error, or succeeds as soon as the server offers a free instance.
#![cfg(windows)]

use std::io;
use std::path::Path;
use std::sync::mpsc::{self, RecvTimeoutError};
use std::thread;
use std::time::{Duration, Instant};

use dsipc::fixtures;
use dsipc::wire::Command;
use dsipc_std::windows::{connect, pipe_exists, PipeListener};
use dsipc_std::{DiagnosticsClient, Endpoint, Error};
use dsipc_windows_tests::{fake_config, listen};
use dsipc_windows_tests::{pipe_path, unique_pipe_name};

#[test]
fn connect_waits_while_busy_then_times_out() {
    let path = pipe_path(&unique_pipe_name("busy-timeout"));
    // One instance, taken by a first client: the listener does not accept, so it never
    // creates a second instance.
    let _listener = PipeListener::bind(Path::new(&path)).unwrap();
    let _first = connect(Path::new(&path), Duration::from_secs(5)).expect("first client");
    assert!(pipe_exists(Path::new(&path)), "a busy pipe still exists");

    let t = Instant::now();
    let err = connect(Path::new(&path), Duration::from_millis(400)).unwrap_err();
    let took = t.elapsed();
    assert_eq!(err.kind(), io::ErrorKind::TimedOut, "{}", err);
    assert!(err.to_string().contains("busy"), "{}", err);
    // It waited for its timeout rather than failing at once; the upper bound only says
    // that it returned (the typed TimedOut above is the point).
    assert!(
        took >= Duration::from_millis(380) && took < Duration::from_secs(60),
        "waited {:?}",
        took
    );

    // Through the client: a typed connect error naming the pipe.
    let client =
        DiagnosticsClient::new(Endpoint::new(&path)).with_timeout(Duration::from_millis(300));
    match client.process_info_basic() {
        Err(Error::Connect { endpoint, source }) => {
            assert_eq!(endpoint, Path::new(&path));
            assert_eq!(source.kind(), io::ErrorKind::TimedOut);
        }
        other => panic!("{:?}", other),
    }
}

#[test]
fn connect_succeeds_when_an_instance_is_freed() {
    let path = pipe_path(&unique_pipe_name("busy-freed"));
    let mut listener = PipeListener::bind(Path::new(&path)).unwrap();
    let first = connect(Path::new(&path), Duration::from_secs(5)).expect("first client");
    let p = path.clone();
    let (started_tx, started) = mpsc::channel();
    let (done_tx, done) = mpsc::channel();
    let waiter = thread::spawn(move || {
        started_tx.send(()).unwrap();
        let r = connect(Path::new(&p), Duration::from_secs(60));
        let _ = done_tx.send(());
        r.map(|_| ())
    });
    started.recv().unwrap();
    // While the only instance is taken the second client neither connects nor fails.
    assert!(
        matches!(
            done.recv_timeout(Duration::from_millis(300)),
            Err(RecvTimeoutError::Timeout)
        ),
        "the second client got through (or gave up) while the pipe was busy"
    );
    // Accepting the first client makes the listener create the next instance.
    let served = listener.accept().unwrap();
    waiter
        .join()
        .unwrap()
        .expect("the second client gets the new instance");
    drop((first, served));
}

#[test]
fn a_client_waits_behind_an_idle_one_and_is_served_after_it() {
    // A client that connected and sent nothing holds the only instance; the next client
    // waits until the server accepts the first one (and so creates another instance).
    let path = pipe_path(&unique_pipe_name("busy-fake"));
    let mut listener = PipeListener::bind(Path::new(&path)).unwrap();
    let idle = connect(Path::new(&path), Duration::from_secs(5)).unwrap();
    let p = path.clone();
    let (started_tx, started) = mpsc::channel();
    let (done_tx, done) = mpsc::channel();
    let client_thread = thread::spawn(move || {
        started_tx.send(()).unwrap();
        let r = DiagnosticsClient::new(Endpoint::new(&p))
            .with_timeout(Duration::from_secs(60))
            .process_info_basic();
        let _ = done_tx.send(());
        r
    });
    started.recv().unwrap();
    // Behind the idle client it waits (neither served nor failed).
    assert!(
        matches!(
            done.recv_timeout(Duration::from_millis(200)),
            Err(RecvTimeoutError::Timeout)
        ),
        "the client did not wait behind the idle one"
    );
    // Accepting the idle client creates the next instance, which the waiting client gets.
    let taken = listener.accept().unwrap();
    drop(idle);
    drop(taken);
    let served = listener.accept().unwrap();
    let fake_thread = thread::spawn(move || {
        use dsipc::conn::ServerConnection;
        use std::io::{Read, Write};
        let mut s = served;
        let mut m = ServerConnection::new();
        let mut req = [0u8; 20];
        s.read_exact(&mut req).unwrap();
        let _ = m.handle_input(&req);
        let mut out = [0u8; 256];
        let n = m
            .send_response(
                &fixtures::response_for(Command::ProcessInfo).unwrap(),
                &mut out,
            )
            .unwrap();
        s.write_all(&out[..n]).unwrap();
        s.wait_until_read().unwrap();
    });
    let info = client_thread.join().unwrap().unwrap();
    assert_eq!(info.pid, fixtures::PROCESS_INFO2.process_id);
    fake_thread.join().unwrap();

    // And the fake runtime, which keeps a free instance at all times, is never busy for
    // long: twenty clients in parallel all get through.
    let fpath = pipe_path(&unique_pipe_name("busy-many"));
    let _fake = listen(Path::new(&fpath), fake_config()).unwrap();
    let threads: Vec<_> = (0..20)
        .map(|_| {
            let p = fpath.clone();
            thread::spawn(move || {
                DiagnosticsClient::new(Endpoint::new(&p))
                    .with_timeout(Duration::from_secs(20))
                    .process_info_basic()
                    .map(|i| i.pid)
            })
        })
        .collect();
    for t in threads {
        assert_eq!(t.join().unwrap().unwrap(), 4242);
    }
}
