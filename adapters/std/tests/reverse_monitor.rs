//! dsipc-std's reverse-port monitor (`dsipc_std::reverse::monitor::run`, a thread per
//! connection) driven directly: runtimes (the core's advertising server machine) connect,
//! and the reports say what happened: a new runtime resumed, its reconnect held, a failed
//! resume (the runtime's HRESULT, typed) tried again at the next Advertise, the cap reached
//! (reported once) with the oldest held runtime let go, and the callback stopping the
//! monitor, which then closes what it held and removes its socket.
#![cfg(unix)]

#[path = "reverse_support/runtime_side.rs"]
mod runtime_side;
mod support;

use std::fs;
use std::io::Read;
use std::os::unix::net::UnixStream;
use std::sync::mpsc::{self, Receiver};
use std::thread;
use std::time::Duration;

use dsipc::payload::{ErrorReply, Response};
use dsipc::wire::{Advertise, Guid, Hresult};
use dsipc::Command;
use dsipc_std::reverse::monitor::{self, MonitorOptions, MonitorReport, ResumeOutcome, Shedding};
use dsipc_std::Error;
use runtime_side::{runtime_answering, runtime_connection};

const WAIT: Duration = Duration::from_secs(20);

fn adv(pid: u64) -> Advertise {
    Advertise {
        runtime_cookie: Guid::from_fields(pid as u32, 0x3e7, 0, [pid as u8; 8]),
        process_id: pid,
        future: 0,
    }
}

fn next(reports: &Receiver<MonitorReport>) -> MonitorReport {
    reports
        .recv_timeout(WAIT)
        .expect("a report from the monitor")
}

/// The next report, which must be runtime `pid`'s Advertise: its resume's outcome.
fn advertised(reports: &Receiver<MonitorReport>, pid: u64, reconnect: bool) -> ResumeOutcome {
    match next(reports) {
        MonitorReport::Advertised {
            pid: p,
            cookie,
            reconnect: r,
            resume,
        } => {
            assert_eq!((p, cookie, r), (pid, adv(pid).runtime_cookie, reconnect));
            resume
        }
        other => panic!("wanted pid {}'s Advertise: {:?}", pid, other),
    }
}

/// Waits (bounded) until the monitor closed `s`.
fn closed_by_monitor(s: &UnixStream) -> bool {
    s.set_read_timeout(Some(WAIT)).unwrap();
    matches!((&*s).read(&mut [0u8; 1]), Ok(0))
}

#[test]
fn monitor_threads_report_resumes_reconnects_a_failed_resume_and_the_cap_once() {
    let dir = support::temp_path("monitor");
    fs::create_dir_all(&dir).unwrap();
    let port = dir.join("p.sock");
    let mut options = MonitorOptions::new(WAIT);
    options.resume = true;
    options.max_connections = 2;
    let (tx, reports) = mpsc::channel();
    let address = port.clone();
    // The callback says stop after runtime 4's Advertise.
    let monitor = thread::spawn(move || {
        let mut report = |r: MonitorReport| {
            let last = matches!(r, MonitorReport::Advertised { pid: 4, .. });
            tx.send(r).is_ok() && !last
        };
        monitor::run(&address, &options, &|| false, &mut report)
    });
    match next(&reports) {
        MonitorReport::Listening { address } => assert_eq!(address, port),
        other => panic!("first report: {:?}", other),
    }

    // A new runtime is resumed; its reconnect is held, not resumed again.
    let (cmd, _) = runtime_connection(&port, adv(1), true);
    assert_eq!(cmd, Some(Command::ResumeRuntime));
    assert!(matches!(
        advertised(&reports, 1, false),
        ResumeOutcome::Resumed
    ));
    let (_, held1) = runtime_connection(&port, adv(1), false);
    assert!(matches!(
        advertised(&reports, 1, true),
        ResumeOutcome::NotAsked
    ));

    // A refused resume: the runtime's HRESULT, typed; the next Advertise tries again.
    let refused = Response::Error(ErrorReply::new(Hresult::E_FAIL));
    let (cmd, _) = runtime_answering(&port, adv(2), Some(&refused));
    assert_eq!(cmd, Some(Command::ResumeRuntime));
    match advertised(&reports, 2, false) {
        ResumeOutcome::Failed(Error::ErrorReply {
            command: Command::ResumeRuntime,
            hresult: Hresult::E_FAIL,
            ..
        }) => {}
        other => panic!("{:?}", other),
    }
    let (cmd, _) = runtime_connection(&port, adv(2), true);
    assert_eq!(cmd, Some(Command::ResumeRuntime));
    assert!(matches!(
        advertised(&reports, 2, true),
        ResumeOutcome::Resumed
    ));
    let (_, held2) = runtime_connection(&port, adv(2), false);
    assert!(matches!(
        advertised(&reports, 2, true),
        ResumeOutcome::NotAsked
    ));

    // Two held, cap 2: a new runtime lets the oldest held one go.
    let (cmd, _) = runtime_connection(&port, adv(3), true);
    assert_eq!(cmd, Some(Command::ResumeRuntime));
    match next(&reports) {
        MonitorReport::CapReached { cap, shedding } => {
            assert_eq!((cap, shedding), (2, Shedding::OldestHeld))
        }
        other => panic!("{:?}", other),
    }
    assert!(matches!(
        advertised(&reports, 3, false),
        ResumeOutcome::Resumed
    ));
    assert!(closed_by_monitor(&held1));
    let (_, held3) = runtime_connection(&port, adv(3), false);
    assert!(matches!(
        advertised(&reports, 3, true),
        ResumeOutcome::NotAsked
    ));
    // Again at the cap: the next oldest goes, and the cap is not reported again.
    let (cmd, _) = runtime_connection(&port, adv(4), true);
    assert_eq!(cmd, Some(Command::ResumeRuntime));
    assert!(matches!(
        advertised(&reports, 4, false),
        ResumeOutcome::Resumed
    ));
    assert!(closed_by_monitor(&held2));

    // The callback said stop: the monitor returns, closes what it held, removes its socket.
    monitor.join().unwrap().expect("the monitor ends cleanly");
    assert!(closed_by_monitor(&held3));
    assert!(!port.exists(), "the socket file goes at the stop");
    let rest: Vec<MonitorReport> = reports.try_iter().collect();
    assert!(rest.is_empty(), "{:?}", rest);
    let _ = fs::remove_dir_all(&dir);
}
