//! dsipc-mio's reverse-port monitor (`dsipc_mio::monitor::run`) driven directly: fake
//! runtimes (dsipc-testkit) and silent peers connect, and the reports say what happened: a
//! new runtime resumed, its reconnect held, a failed resume tried again at the next
//! Advertise, the cap reached (reported once) with the oldest idle peer closed, a peer that
//! never advertised, a peer that sent garbage, and the stop flag ending the monitor.

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, Receiver};
use std::sync::Arc;
use std::thread::{self, JoinHandle};
use std::time::Duration;

use dsipc::wire::{Guid, Hresult};
use dsipc::Command;
use dsipc_mio::monitor;
use dsipc_platform::reverse::{
    MonitorError, MonitorOptions, MonitorReport, ResumeOutcome, Shedding,
};
use dsipc_platform::Error;
use dsipc_testkit::{Answer, Config, FakeRuntime, TempDir};

const T: Duration = Duration::from_secs(30);

/// The monitor on its own thread: its reports on a channel, `stop` ends it.
struct Running {
    reports: Receiver<MonitorReport>,
    stop: Arc<AtomicBool>,
    thread: JoinHandle<Result<(), MonitorError>>,
}

impl Running {
    fn start(port: &std::path::Path, options: MonitorOptions) -> Running {
        let (tx, reports) = mpsc::channel();
        let stop = Arc::new(AtomicBool::new(false));
        let (flag, address) = (stop.clone(), port.to_path_buf());
        let thread = thread::spawn(move || {
            let stopped = || flag.load(Ordering::SeqCst);
            monitor::run(&address, &options, &stopped, &mut |r| tx.send(r).is_ok())
        });
        let running = Running {
            reports,
            stop,
            thread,
        };
        match running.next() {
            MonitorReport::Listening { address } => assert_eq!(address, port),
            other => panic!("first report: {:?}", other),
        }
        running
    }

    fn next(&self) -> MonitorReport {
        self.reports
            .recv_timeout(T)
            .expect("a report from the monitor")
    }

    /// The next report, which must be runtime `rt`'s Advertise: its resume's outcome.
    fn advertised(&self, rt: &FakeRuntime, reconnect: bool) -> ResumeOutcome {
        let want = rt.advertise();
        match self.next() {
            MonitorReport::Advertised {
                pid,
                cookie,
                reconnect: r,
                resume,
            } => {
                assert_eq!(
                    (pid, cookie, r),
                    (want.process_id, want.runtime_cookie, reconnect)
                );
                resume
            }
            other => panic!("wanted pid {}'s Advertise: {:?}", want.process_id, other),
        }
    }

    /// Sets the stop flag; the reports that came after the last one read.
    fn stop(self) -> Vec<MonitorReport> {
        self.stop.store(true, Ordering::SeqCst);
        self.thread
            .join()
            .unwrap()
            .expect("the monitor ends cleanly");
        self.reports.try_iter().collect()
    }
}

/// Waits (bounded) until the monitor closed `s`.
fn closed_by_monitor(s: &UnixStream) -> bool {
    s.set_read_timeout(Some(T)).unwrap();
    matches!((&*s).read(&mut [0u8; 1]), Ok(0))
}

fn runtime(port: &std::path::Path, pid: u64) -> Config {
    Config::new()
        .pid(pid)
        .cookie(Guid::from_fields(pid as u32, 0x4d10, 0, [7; 8]))
        .reverse_port(port, true)
}

#[test]
fn monitor_reports_resumes_reconnects_a_failed_resume_and_the_cap_once() {
    let dir = TempDir::new("dsipc-mio-monitor").unwrap();
    let port = dir.join("p.sock");
    let mut options = MonitorOptions::new(T);
    options.resume = true;
    options.max_connections = 3;
    let mon = Running::start(&port, options);

    // A new runtime is resumed; its reconnect is held, not resumed again.
    let first = runtime(&port, 4242).start().unwrap();
    assert!(matches!(
        mon.advertised(&first, false),
        ResumeOutcome::Resumed
    ));
    assert!(first.wait_resumed(T));
    assert!(matches!(
        mon.advertised(&first, true),
        ResumeOutcome::NotAsked
    ));

    // A runtime that refuses the resume: the runtime's HRESULT, typed; tried again at each
    // Advertise until it answers OK, then held.
    let refusing = runtime(&port, 4343)
        .answer(Command::ResumeRuntime, Answer::Error(Hresult::E_FAIL))
        .start()
        .unwrap();
    match mon.advertised(&refusing, false) {
        ResumeOutcome::Failed(Error::ErrorReply {
            command: Command::ResumeRuntime,
            hresult: Hresult::E_FAIL,
            ..
        }) => {}
        other => panic!("{:?}", other),
    }
    refusing.set_answer(Command::ResumeRuntime, Answer::Default);
    loop {
        match mon.advertised(&refusing, true) {
            ResumeOutcome::Failed(Error::ErrorReply { .. }) => {}
            ResumeOutcome::Resumed => break,
            other => panic!("{:?}", other),
        }
    }
    assert!(refusing.wait_resumed(T));
    assert!(matches!(
        mon.advertised(&refusing, true),
        ResumeOutcome::NotAsked
    ));

    // Two held runtimes and a cap of 3: the second silent peer reaches it, and the oldest
    // idle connection (the first silent peer, not a held runtime) is closed.
    let silent: Vec<UnixStream> = (0..2)
        .map(|_| UnixStream::connect(&port).unwrap())
        .collect();
    match mon.next() {
        MonitorReport::CapReached { cap, shedding } => {
            assert_eq!((cap, shedding), (3, Shedding::OldestIdle))
        }
        other => panic!("{:?}", other),
    }
    assert!(closed_by_monitor(&silent[0]));
    // A third one: the second goes, and the cap is not reported again.
    let third = UnixStream::connect(&port).unwrap();
    assert!(closed_by_monitor(&silent[1]));
    let rest = mon.stop();
    assert!(rest.is_empty(), "{:?}", rest);
    assert!(
        closed_by_monitor(&third),
        "every connection closes at the stop"
    );
    assert!(!port.exists(), "the socket file goes at the stop");
}

#[test]
fn monitor_reports_a_peer_without_advertise_and_one_sending_garbage() {
    let dir = TempDir::new("dsipc-mio-monitor-bad").unwrap();
    let port = dir.join("p.sock");
    let options = MonitorOptions::new(Duration::from_millis(200));
    let mon = Running::start(&port, options);

    let silent = UnixStream::connect(&port).unwrap();
    match mon.next() {
        MonitorReport::NoAdvertise { timeout } => assert_eq!(timeout, Duration::from_millis(200)),
        other => panic!("{:?}", other),
    }
    assert!(closed_by_monitor(&silent));

    let mut garbage = UnixStream::connect(&port).unwrap();
    garbage.write_all(&[0x5a; 34]).unwrap();
    match mon.next() {
        MonitorReport::PeerDropped {
            error: Error::Protocol(_),
        } => {}
        other => panic!("{:?}", other),
    }
    assert!(closed_by_monitor(&garbage));
    assert!(mon.stop().is_empty());
}
