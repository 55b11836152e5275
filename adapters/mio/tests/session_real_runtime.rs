//! [`Control::call`] and [`Control::trace`] against real runtimes (.NET 8.0.4 and .NET
//! Core 3.1.23, hosted by `tests/runtime/host.py`): ProcessInfo with the session layer's
//! fallback, and a SampleProfiler session stopped from a second connection in the same
//! loop, ending whole.
//!
//! Needs `DSIPC_PYTHON` (scripts/setup-runtimes.sh, then source
//! target/dotnet-venv/dsipc-runtimes.env): without it each test prints a `SKIPPED` line
//! naming itself and passes.

use std::io::Write;
use std::path::PathBuf;
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use dsipc::payload::Provider;
use dsipc::session::{Ask, Outcome, ProcessInfo, SessionError, TraceConfig};
use dsipc::{ClientEvent, Command};
use dsipc_mio::{CallId, Control, Error, Event, Handler, Reactor, TraceId};
use dsipc_testkit::{HostOptions, HostedRuntime};

const TIMEOUT: Duration = Duration::from_secs(10);

/// One real-runtime test at a time: each runtime load is about a second of CPU.
static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|p| p.into_inner())
}

/// A busy hosted runtime (`net8` or `netcore31`), ready, and its diagnostic socket; `None`
/// (after a `SKIPPED` line on stderr) when the runtimes are not installed.
fn host(runtime: &str) -> Option<(HostedRuntime, u32, PathBuf)> {
    if let Err(e) = dsipc_testkit::python() {
        let test = std::thread::current()
            .name()
            .unwrap_or("a test")
            .to_string();
        let line = format!("SKIPPED {}: {}\n", test, e);
        let _ = std::io::stderr().write_all(line.as_bytes());
        return None;
    }
    let mut options = HostOptions::net8(120);
    options.runtime = runtime.to_string();
    options.args = vec!["--busy".to_string()];
    let mut host = HostedRuntime::spawn(&options).expect("start the runtime host");
    let ready = host
        .wait_ready(Duration::from_secs(60))
        .expect("the runtime host is ready");
    let path =
        dsipc_platform::discovery::find_socket(ready.pid, None).expect("the runtime's socket");
    Some((host, ready.pid, path))
}

#[derive(Default)]
struct Seen {
    info: Option<ProcessInfo>,
    call_done: Option<Result<(), Error>>,
    started: Option<u64>,
    data: Vec<u8>,
    trace_done: Option<Result<Outcome, Error>>,
}

impl Handler for Seen {
    fn on_event(&mut self, _: &mut Control, event: Event<'_>) {
        match event {
            Event::Call {
                command,
                event: ClientEvent::Reply(r),
                ..
            } => self.info = ProcessInfo::from_reply(command, &r),
            Event::CallDone { result, .. } => self.call_done = Some(result),
            Event::TraceStarted { session_id, .. } => self.started = Some(session_id),
            Event::TraceData { data, .. } => self.data.extend_from_slice(data),
            Event::TraceDone { result, .. } => self.trace_done = Some(result),
            _ => {}
        }
    }
}

/// Polls until `done` or `until`; panics at `deadline`.
fn run(
    reactor: &mut Reactor,
    seen: &mut Seen,
    until: Option<Instant>,
    what: &str,
    done: impl Fn(&Seen) -> bool,
) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while !done(seen) {
        let now = Instant::now();
        if until.is_some_and(|u| now >= u) {
            return;
        }
        assert!(now < deadline, "timed out waiting for {}", what);
        let end = until.map_or(deadline, |u| u.min(deadline));
        reactor.poll(Some(end - now), seen).unwrap();
    }
}

fn process_info(reactor: &mut Reactor, path: &PathBuf) -> (CallId, Seen) {
    let id = reactor
        .control()
        .call(path, Ask::ProcessInfo, TIMEOUT)
        .unwrap();
    let mut seen = Seen::default();
    run(reactor, &mut seen, None, "ProcessInfo", |s| {
        s.call_done.is_some()
    });
    (id, seen)
}

/// A SampleProfiler session stopped with `stop_trace` after two seconds of stream.
fn sample_for_two_seconds(reactor: &mut Reactor, path: &PathBuf) -> (TraceId, Seen) {
    let providers = [Provider::new("Microsoft-DotNETCore-SampleProfiler", 0, 5)];
    let id = reactor
        .control()
        .trace(path, TraceConfig::new(&providers), TIMEOUT)
        .unwrap();
    let mut seen = Seen::default();
    run(reactor, &mut seen, None, "the session's start", |s| {
        s.started.is_some() || s.trace_done.is_some()
    });
    assert!(seen.trace_done.is_none(), "{:?}", seen.trace_done);
    let until = Instant::now() + Duration::from_secs(2);
    run(reactor, &mut seen, Some(until), "two seconds", |s| {
        s.trace_done.is_some()
    });
    assert!(seen.trace_done.is_none(), "{:?}", seen.trace_done);
    reactor.control().stop_trace(id).unwrap();
    let t = Instant::now();
    run(reactor, &mut seen, None, "the session's end", |s| {
        s.trace_done.is_some()
    });
    eprintln!(
        "session {:#x}: {} bytes, ended {:.3} s after the stop",
        seen.started.unwrap_or(0),
        seen.data.len(),
        t.elapsed().as_secs_f64()
    );
    match seen.trace_done.as_ref().unwrap() {
        Ok(Outcome::Stopped { bytes }) => assert_eq!(*bytes, seen.data.len() as u64),
        other => panic!("{:?}", other),
    }
    assert!(seen.data.starts_with(b"Nettrace"), "{:?}", &seen.data[..8]);
    assert!(seen.data.len() > 1_000, "{} bytes", seen.data.len());
    (id, seen)
}

#[test]
fn net8_process_info_call_and_stopped_sample_profiler_trace() {
    let _serial = serial();
    let (_host, pid, path) = match host("net8") {
        Some(h) => h,
        None => return,
    };
    let mut reactor = Reactor::new().unwrap();
    let (_, seen) = process_info(&mut reactor, &path);
    assert!(
        seen.call_done.as_ref().unwrap().is_ok(),
        "{:?}",
        seen.call_done
    );
    let info = seen.info.unwrap();
    // .NET 8 knows the newest version: no fallback.
    assert_eq!(info.command, Command::ProcessInfo3);
    assert_eq!(info.pid, u64::from(pid));
    assert_eq!(info.clr_version.as_deref(), Some("8.0.4"));

    sample_for_two_seconds(&mut reactor, &path);
    assert_eq!(reactor.control().session_count(), 0);
    assert_eq!(reactor.control().connection_count(), 0);
}

#[test]
fn netcore31_process_info_call_is_not_supported_and_trace_is_stopped() {
    let _serial = serial();
    let (_host, _pid, path) = match host("netcore31") {
        Some(h) => h,
        None => return,
    };
    let mut reactor = Reactor::new().unwrap();
    // Core 3.1 answers UNKNOWN_COMMAND to every ProcessInfo version: all three were tried,
    // the error names the last.
    let (_, seen) = process_info(&mut reactor, &path);
    match seen.call_done.as_ref().unwrap() {
        Err(Error::Session(SessionError::NotSupported { command, .. })) => {
            assert_eq!(*command, Command::ProcessInfo)
        }
        other => panic!("{:?}", other),
    }
    assert!(seen.info.is_none());

    sample_for_two_seconds(&mut reactor, &path);
    assert_eq!(reactor.control().session_count(), 0);
    assert_eq!(reactor.control().connection_count(), 0);
}
