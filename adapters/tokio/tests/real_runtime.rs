//! dsipc-tokio against a REAL .NET 8.0.4 runtime (CoreCLR hosted by
//! `tests/runtime/host.py`): ProcessInfo, the environment, a trace session stopped from a
//! second connection whose nettrace stream dsipc-trace parses to its end, a thousand
//! concurrent calls, nested activity ids, and the `top` example against a busy runtime.
//!
//! Needs `DSIPC_PYTHON` (scripts/setup-runtimes.sh, then source
//! target/dotnet-venv/dsipc-runtimes.env; scripts/test.sh does both): without it these
//! tests fail, they do not skip.
#![cfg(target_os = "linux")]

use std::path::PathBuf;
use std::process::Command;
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use dsipc::payload::Provider;
use dsipc_testkit::{HostOptions, HostedRuntime};
use dsipc_tokio::DiagnosticsClient;
use dsipc_trace::{LiveProfile, TraceStream};

const TIMEOUT: Duration = Duration::from_secs(10);

/// One real-runtime test at a time: each runtime load is about a second of CPU.
static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|p| p.into_inner())
}

/// A .NET 8 host, ready; its pid.
fn host(args: &[&str]) -> (HostedRuntime, u32) {
    if let Err(e) = dsipc_testkit::python() {
        panic!("{}", e);
    }
    let mut options = HostOptions::net8(120);
    options.args = args.iter().map(|a| a.to_string()).collect();
    let mut host = HostedRuntime::spawn(&options).expect("start the runtime host");
    let ready = host
        .wait_ready(Duration::from_secs(60))
        .expect("the runtime host is ready");
    assert_eq!(ready.runtime, "8.0.4");
    (host, ready.pid)
}

fn client(pid: u32) -> DiagnosticsClient {
    DiagnosticsClient::for_pid(pid)
        .expect("find the host's socket")
        .with_timeout(TIMEOUT)
}

/// Runs `fut` on a current-thread runtime (the tests hold the serial lock outside it).
fn block_on<F: std::future::Future>(fut: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(fut)
}

#[test]
fn net8_process_info_and_environment() {
    let _serial = serial();
    let (_host, pid) = host(&[]);
    block_on(process_info_and_environment(pid));
}

/// A thousand ProcessInfo calls at once on one tokio thread: the runtime accepts one
/// connection at a time from a backlog of 255, so most connects are refused with `EAGAIN`
/// at first; every call waits its turn and is answered.
#[test]
fn net8_answers_a_thousand_concurrent_process_info_calls() {
    let _serial = serial();
    let (_host, pid) = host(&[]);
    let client = client(pid).with_timeout(Duration::from_secs(60));
    let answered = block_on(async {
        let calls: Vec<_> = (0..1000)
            .map(|_| {
                let c = client.clone();
                tokio::spawn(async move { c.process_info_basic().await })
            })
            .collect();
        let mut answered = 0;
        for call in calls {
            let info = call.await.unwrap().expect("ProcessInfo");
            assert_eq!(info.pid, u64::from(pid));
            answered += 1;
        }
        answered
    });
    assert_eq!(answered, 1000);
}

async fn process_info_and_environment(pid: u32) {
    let client = client(pid);
    let info = client.process_info().await.unwrap();
    assert_eq!(info.command, dsipc::wire::Command::ProcessInfo3);
    assert_eq!(info.pid, u64::from(pid));
    assert_eq!(info.clr_version.as_deref(), Some("8.0.4"));
    assert_eq!(info.os, "Linux");
    let basic = client.process_info_basic().await.unwrap();
    assert_eq!(basic.cookie, info.cookie);

    client
        .set_environment_variable("DSIPC_TOKIO_TEST", Some("yes"))
        .await
        .unwrap();
    let vars = client.process_environment().await.unwrap();
    assert!(
        vars.iter().any(|v| v == "DSIPC_TOKIO_TEST=yes"),
        "{} variables",
        vars.len()
    );
}

#[test]
fn net8_trace_stopped_from_a_second_connection_parses_to_its_end() {
    let _serial = serial();
    let (_host, pid) = host(&["--busy"]);
    block_on(trace_stopped_from_a_second_connection(pid));
}

async fn trace_stopped_from_a_second_connection(pid: u32) {
    let client = client(pid);
    // GC and exception events at Informational, with rundown.
    let providers = [Provider::new("Microsoft-Windows-DotNETRuntime", 0x8001, 4)];
    let mut session = client.collect_tracing(&providers, 64, true).await.unwrap();
    let stop = session.stop_handle();
    // Stop at once, from a second connection, while this task reads to the end; the
    // runtime answers the stop only after it flushed the session (rundown included).
    let collect = async {
        let mut stream = Vec::new();
        while let Some(chunk) = session.next_chunk().await {
            stream.extend_from_slice(&chunk?);
        }
        Ok::<_, dsipc_tokio::Error>(stream)
    };
    let (stopped, stream) = tokio::join!(stop.stop(), collect);
    stopped.unwrap();
    let stream = stream.unwrap();
    assert!(stop.is_answered());
    // The session layer followed the stream's framing: whole, after our stop.
    assert!(
        matches!(
            session.outcome(),
            Some(dsipc::session::Outcome::Stopped { bytes }) if bytes == stream.len() as u64
        ),
        "{:?}",
        session.outcome()
    );
    assert!(
        stream.starts_with(b"Nettrace"),
        "stream starts with {:?}",
        &stream[..stream.len().min(16)]
    );
    assert_eq!(session.bytes_received(), stream.len() as u64);
    // The whole stream parses, through its end-of-stream object.
    let mut trace = TraceStream::new();
    let mut items = 0u64;
    trace.feed(&stream, |_| items += 1).unwrap();
    trace.finish(|_| items += 1).unwrap();
    assert!(trace.is_done());
    assert!(items > 0);
    // And as a live profile: events arrived (the rundown's, at least).
    let mut live = LiveProfile::new();
    live.feed(&stream).unwrap();
    live.finish().unwrap();
    assert!(live.counts().events > 0);
}

/// A session with TplEventSource's TasksFlowActivityIds on: the runtime gives each Start
/// event a new activity id branched from the current one, and the stream driver hands each
/// event's ids on (`TraceStream::feed_with_parser`): the host's nested Request > Step
/// activities come out as a chain, as the logs decoder's scopes need them.
#[test]
fn net8_start_events_carry_nested_activity_ids() {
    let _serial = serial();
    let (_host, pid) = host(&["--activities"]);
    block_on(start_events_carry_nested_activity_ids(pid));
}

async fn start_events_carry_nested_activity_ids(pid: u32) {
    use dsipc::nettrace::Item;
    use dsipc::wire::Guid;
    let client = client(pid);
    let providers = [
        Provider::new("Dsipc-Activities", u64::MAX, 5),
        Provider::new(
            dsipc_trace::logs::TPL_PROVIDER,
            dsipc_trace::logs::TPL_TASKS_FLOW_ACTIVITY_IDS,
            4,
        ),
    ];
    let mut session = client.collect_tracing(&providers, 16, false).await.unwrap();
    let stop = session.stop_handle();
    let mut trace = TraceStream::new();
    let mut names: std::collections::HashMap<u32, String> = Default::default();
    // (event name, activity id, related activity id) of the host's events, in order.
    let mut seen: Vec<(String, Guid, Guid)> = Vec::new();
    let requests = |seen: &[(String, Guid, Guid)]| seen.iter().filter(|e| e.0 == "Request").count();
    while let Some(chunk) = session.next_chunk().await {
        let chunk = chunk.unwrap();
        trace
            .feed_with_parser(&chunk, |item, parser| match item {
                Item::Metadata(m) => {
                    if let Ok(r) = m.record() {
                        if r.provider_name.to_string() == "Dsipc-Activities" {
                            names.insert(r.metadata_id, r.event_name.to_string());
                        }
                    }
                }
                Item::Event(e) => {
                    if let Some(name) = names.get(&e.metadata_id) {
                        let (activity, related) = parser.activity_ids();
                        seen.push((name.clone(), activity, related));
                    }
                }
                _ => {}
            })
            .unwrap();
        // Enough whole cycles (a cycle has two Request events): stop the session.
        if requests(&seen) >= 8 && !stop.is_answered() {
            stop.stop().await.unwrap();
        }
    }
    // Whole cycles: Request(start) Step(start) Work Step(stop) Request(stop), from the first
    // whole one (the session may have started inside a cycle).
    let pattern = ["Request", "Step", "Work", "Step", "Request"];
    let first = (0..seen.len().saturating_sub(4))
        .find(|&i| (0..5).all(|k| seen[i + k].0 == pattern[k]))
        .unwrap_or_else(|| panic!("no whole cycle in {:?}", seen));
    let cycles: Vec<_> = seen[first..]
        .chunks_exact(5)
        .filter(|c| c.iter().map(|e| e.0.as_str()).collect::<Vec<_>>() == pattern)
        .collect();
    assert!(
        cycles.len() >= 3,
        "{} whole cycles in {:?}",
        cycles.len(),
        seen
    );
    let mut requests_seen = std::collections::HashSet::new();
    for c in cycles {
        let (request, step) = (c[0].1, c[1].1);
        assert_ne!(
            request,
            Guid::NIL,
            "a Start event has an activity id: {:?}",
            c
        );
        assert_ne!(step, Guid::NIL);
        assert_ne!(step, request);
        // The nested start branched from the request: its related id is the request's.
        assert_eq!(c[1].2, request, "{:?}", c);
        // Inside the step, the current activity is the step's; each stop carries the id of
        // the activity it ends.
        assert_eq!(c[2].1, step, "{:?}", c);
        assert_eq!(c[3].1, step, "{:?}", c);
        assert_eq!(c[4].1, request, "{:?}", c);
        // Every request is an activity of its own.
        assert!(requests_seen.insert(request));
    }
}

/// The `top` example, built by `cargo test` next to the test binaries.
fn top_example() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let dir = exe.parent().unwrap().parent().unwrap();
    let path = dir.join("examples").join("top");
    assert!(
        path.exists(),
        "{} is missing: run `cargo test -p dsipc-tokio` (it builds the examples)",
        path.display()
    );
    path
}

#[test]
fn top_rejects_bad_arguments_with_exit_2() {
    for args in [
        &[][..],
        &["12", "--seconds"][..],
        &["12", "--seconds", "-1"][..],
        &["12", "--top", "0"][..],
        &["nope"][..],
        &["12", "--frobnicate"][..],
        &["12", "13"][..],
    ] {
        let out = Command::new(top_example()).args(args).output().unwrap();
        assert_eq!(out.status.code(), Some(2), "{:?}", args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("usage: top PID"), "{:?}: {}", args, err);
        assert!(out.stdout.is_empty());
    }
}

#[test]
fn top_samples_a_busy_net8_runtime() {
    let _serial = serial();
    let (_host, pid) = host(&["--busy"]);
    let out = Command::new(top_example())
        .args([&pid.to_string(), "--seconds", "2", "--top", "5"])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{}{}", stdout, stderr);
    let mut lines = stdout.lines();
    let head = lines.next().unwrap();
    assert!(head.starts_with(&format!("pid {}: ", pid)), "{}", head);
    assert!(head.contains(" samples in 2.0 s"), "{}", head);
    let rows: Vec<&str> = lines.skip(1).collect();
    assert!(
        !rows.is_empty() && rows.len() <= 5,
        "expected 1 to 5 methods:\n{}",
        stdout
    );
    // Rows are ranked 1.. and name managed methods (`Module!Type.Method(...)`).
    assert!(rows[0].trim_start().starts_with("1 "), "{}", rows[0]);
    assert!(rows.iter().any(|r| r.contains('!')), "{}", stdout);
}
