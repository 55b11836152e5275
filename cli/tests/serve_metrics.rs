//! `dsipc serve`'s `/metrics` lifecycle against a real .NET 8.0.4 runtime (hosted with its
//! own TMPDIR, so it is the default process there; needs `scripts/setup-runtimes.sh`): the
//! default process's counters are collected from when serve's own discovery finds it, not
//! from a scrape, and they go when it exits or stops being the default process. Tests
//! synchronise on serve's stderr lines and on `/metrics`' answers.
#![cfg(target_os = "linux")]

mod common;

use std::time::{Duration, Instant};

use common::configure_python;
use common::serve::{fake, Serve};
use dsipc::Command as Cmd;
use dsipc_testkit::{Config, HostOptions, HostedRuntime, TempDir};

/// `--counter-interval`: the smallest with which the promise can hold. A provider's first
/// EventCounter samples are held a second for Meter data of the same name (dotnet-counters'
/// BufferDelaySecs), so they show one interval and a second after the session starts: at
/// 1 s that is the two-interval mark itself, at 2 s a second before it.
const INTERVAL: Duration = Duration::from_secs(2);
const INTERVAL_ARG: &str = "2";

/// Bound on serve noticing a runtime come or go (its discovery looks every 5 s), with room
/// for a loaded machine.
const NOTICE: Duration = Duration::from_secs(60);

/// A real .NET 8 runtime publishing System.Runtime counters, alone in its own TMPDIR.
fn counting_runtime() -> (HostedRuntime, u32, TempDir) {
    configure_python();
    let dir = TempDir::new("dsipc-svm").unwrap();
    let mut opts = HostOptions::net8(240).env("TMPDIR", dir.path().as_os_str());
    opts.args.push("--counters".to_string());
    let mut h = HostedRuntime::spawn(&opts).expect("spawn host");
    let ready = h.wait_ready(Duration::from_secs(90)).expect("host READY");
    (h, ready.pid, dir)
}

/// serve on `dir`, no key, counters every [`INTERVAL`], then `extra`.
fn serve(dir: &TempDir, extra: &[&str]) -> Serve {
    let mut args = vec!["--no-auth", "--counter-interval", INTERVAL_ARG];
    args.extend_from_slice(extra);
    Serve::start(dir.path(), &args)
}

/// serve's line saying it found `pid` as the default process and collects it.
fn found(pid: u32) -> String {
    format!("default process pid {} ", pid)
}

/// `pid`'s CPU series as `/metrics` renders it.
fn cpu_series(pid: u32) -> String {
    format!("systemruntime_cpu_usage_ratio{{pid=\"{}\"}}", pid)
}

/// Scrapes until `pid`'s CPU series is there (bounded by [`NOTICE`]).
fn scrape_until_cpu(serve: &Serve, pid: u32) {
    let deadline = Instant::now() + NOTICE;
    loop {
        let m = serve.scrape();
        assert_eq!(m.status, 200, "{}", m.text());
        if m.text().contains(&cpu_series(pid)) {
            return;
        }
        assert!(Instant::now() < deadline, "no counters: {}", m.text());
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// The collection starts when serve discovers the default process: a first scrape, made two
/// counter intervals after serve said it found the runtime, already holds its CPU series
/// (before, the first scrape started the collection and was always empty). When the runtime
/// exits its series go.
#[test]
fn serve_metrics_first_scrape_holds_the_counters_of_the_discovered_default_process() {
    let (mut host, pid, dir) = counting_runtime();
    let mut serve = serve(&dir, &[]);
    serve.live.stderr_line(&found(pid), NOTICE);
    // The scenario under test is a time: the first scrape two intervals after discovery
    // (the runtime publishes an interval after the session starts; held a second, see
    // INTERVAL).
    std::thread::sleep(2 * INTERVAL);
    let first = serve.scrape();
    assert_eq!(first.status, 200, "{}", first.text());
    let text = first.text();
    assert!(text.contains(&cpu_series(pid)), "first scrape: {}", text);
    common::promtool_check(&text);

    host.kill();
    serve.live.stderr_line(
        &format!("pid {}: runtime exited; its series are dropped", pid),
        NOTICE,
    );
    let after = serve.scrape();
    assert_eq!(after.status, 200);
    assert!(
        !after.text().contains("systemruntime_"),
        "series left after the runtime exited: {}",
        after.text()
    );
    common::promtool_check(&after.text());
}

/// A second runtime joining leaves no default process (dotnet-monitor's rule): the first
/// one's series go while it still runs, and the newcomer is not collected; alone again, it
/// is collected again. With `--default-process` naming it, it stays the default.
#[test]
fn serve_metrics_follow_the_default_process_as_runtimes_come_and_go() {
    let (mut host, pid, dir) = counting_runtime();
    let mut serve = serve(&dir, &[]);
    serve.live.stderr_line(&found(pid), NOTICE);
    scrape_until_cpu(&serve, pid);

    let other = fake(&dir, Config::new().like_net8_0_4());
    serve.live.stderr_line(
        &format!("pid {} is no longer the default process", pid),
        NOTICE,
    );
    let m = serve.scrape();
    assert!(!m.text().contains("systemruntime_"), "{}", m.text());
    assert!(host.is_running(), "the runtime exited");
    assert!(
        !other
            .received()
            .iter()
            .any(|r| matches!(r.command, Some(Cmd::CollectTracing2))),
        "a runtime that is not the default was collected: {:?}",
        other.received()
    );

    // dotnet-monitor's DefaultProcess filter: the runtime is the default with the other there.
    let mut chosen = serve_with_filter(&dir, pid);
    chosen.live.stderr_line(&found(pid), NOTICE);
    scrape_until_cpu(&chosen, pid);

    drop(other);
    serve.live.stderr_line(&found(pid), NOTICE);
    scrape_until_cpu(&serve, pid);
}

fn serve_with_filter(dir: &TempDir, pid: u32) -> Serve {
    let filter = format!("ProcessId={}", pid);
    serve(dir, &["--default-process", &filter])
}

/// `--no-metrics` is dotnet-monitor's `Metrics:Enabled` false: the default process is not
/// collected, and `/metrics` (on the API's URLs) is 400 with dotnet-monitor's words.
#[test]
fn serve_metrics_disabled_collect_nothing_and_answer_400() {
    let dir = TempDir::new("dsipc-svm").unwrap();
    let rt = fake(&dir, Config::new().like_net8_0_4());
    let serve = Serve::start(dir.path(), &["--no-auth", "--no-metrics"]);
    let list = serve.get("/processes").json();
    assert_eq!(list[0]["isDefault"], true, "{}", list);
    serve
        .get("/metrics")
        .assert_problem(400, "Metrics was not enabled.");
    assert!(
        !rt.received()
            .iter()
            .any(|r| matches!(r.command, Some(Cmd::CollectTracing2))),
        "collected with --no-metrics: {:?}",
        rt.received()
    );
}

/// Listen mode: a runtime that connects to serve's diagnostic port is found at once (no
/// wait for the next look) and collected over its reverse connections; the first scrape two
/// intervals later holds its counters, and they go when it exits.
#[test]
fn serve_metrics_in_listen_mode_start_when_the_runtime_connects() {
    configure_python();
    let dir = TempDir::new("dsipc-svm").unwrap();
    let port = dir.path().join("port.sock");
    let mut serve = serve(&dir, &["--diagnostic-port", port.to_str().unwrap()]);
    let own = TempDir::new("dsipc-svm-own").unwrap();
    let mut opts = HostOptions::net8(240)
        .env("TMPDIR", own.path().as_os_str())
        .reverse_port(&port, false);
    opts.args.push("--counters".to_string());
    let mut host = HostedRuntime::spawn(&opts).expect("spawn host");
    let pid = host
        .wait_ready(Duration::from_secs(90))
        .expect("host READY")
        .pid;
    serve.live.stderr_line(&found(pid), NOTICE);
    std::thread::sleep(2 * INTERVAL);
    let first = serve.scrape();
    assert!(first.text().contains(&cpu_series(pid)), "{}", first.text());

    host.kill();
    // Its session ends, or serve sees it leave the port first and stops it.
    let line = serve.live.stderr_line("its series are dropped", NOTICE);
    assert!(line.contains(&format!("pid {}", pid)), "{}", line);
    assert!(!serve.scrape().text().contains("systemruntime_"));
}
