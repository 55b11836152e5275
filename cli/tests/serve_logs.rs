//! `dsipc serve`'s `/logs`, end to end with curl: the fake runtime serving a synthetic
//! `Microsoft-Extensions-Logging` session (built to LoggingEventSource's event layouts; the
//! .NET hosts here have no ILogger), in each format dotnet-monitor offers, and a real .NET 8
//! runtime whose session runs its duration and ends.
#![cfg(target_os = "linux")]

mod common;

#[path = "../../trace/tests/common_logs/mod.rs"]
mod common_logs;

use std::time::Duration;

use common::configure_python;
use common::serve::{Answered, Serve};
use dsipc::Command as Cmd;
use dsipc_testkit::{Config, FakeRuntime, HostOptions, HostedRuntime, StreamSpec, TempDir};
use serde_json::Value;

/// `args` then the path on `serve`'s API, with its key; curl must succeed.
fn curl(serve: &Serve, path: &str, args: &[&str]) -> Answered {
    let a = serve.get_with(path, args);
    assert_eq!(a.curl, 0, "curl exit {} for {}", a.curl, path);
    a
}

/// A fake runtime, listed by discovery, streaming `bytes`.
fn fake(dir: &TempDir, bytes: &'static [u8]) -> FakeRuntime {
    common::serve::fake(
        dir,
        Config::new()
            .like_net8_0_4()
            .stream(StreamSpec::content(bytes)),
    )
}

fn utf16(s: &str) -> Vec<u8> {
    s.encode_utf16().flat_map(|u| u.to_le_bytes()).collect()
}

fn contains(hay: &[u8], needle: &[u8]) -> bool {
    hay.windows(needle.len()).any(|w| w == needle)
}

/// The provider arguments of each CollectTracing request the runtime got, in order.
fn collect_requests(rt: &FakeRuntime) -> Vec<Vec<u8>> {
    rt.received()
        .into_iter()
        .filter(|r| {
            matches!(
                r.command,
                Some(Cmd::CollectTracing2) | Some(Cmd::CollectTracing)
            )
        })
        .map(|r| r.bytes)
        .collect()
}

#[test]
fn serve_logs_streams_entries_in_each_format_from_the_fake_runtime() {
    let trace: &'static [u8] = Box::leak(common_logs::sample().bytes().into_boxed_slice());
    let dir = TempDir::new("dsipc-svl").unwrap();
    let rt = fake(&dir, trace);
    // No /metrics collection: the runtime's requests are counted below.
    let serve = Serve::start(dir.path(), &["--temp-apikey", "--no-metrics"]);

    // ndjson: one LogEntry per line.
    let nd = curl(
        &serve,
        "/logs?durationSeconds=30",
        &["-H", "Accept: application/x-ndjson"],
    );
    assert_eq!(nd.status, 200, "{}", nd.text());
    assert_eq!(
        nd.header("content-type").as_deref(),
        Some("application/x-ndjson")
    );
    let cd = nd.header("content-disposition").unwrap_or_default();
    assert!(
        cd.contains(&format!("_{}.txt", std::process::id())),
        "{}",
        cd
    );
    let text = nd.text();
    let lines: Vec<Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{}: {}", e, l)))
        .collect();
    assert_eq!(lines.len(), 2, "{}", text);
    let a = &lines[0];
    assert_eq!(a["LogLevel"], "Information");
    assert_eq!(a["Category"], "App.Worker");
    assert_eq!(a["EventId"], 42);
    assert_eq!(a["EventName"], "Processing");
    assert_eq!(a["Message"], "Processing request 353f in 12 ms");
    assert_eq!(a["Timestamp"], "2024-05-22 10:11:17Z");
    assert_eq!(a["State"]["Id"], "353f");
    assert_eq!(
        a["State"]["{OriginalFormat}"],
        "Processing request {Id} in {Elapsed} ms"
    );
    assert_eq!(a["Scopes"][0]["RequestId"], "r-1");
    assert_eq!(a["Scopes"][1]["Ok"], true);
    assert!(a.get("Exception").is_none());
    let b = &lines[1];
    assert_eq!(b["LogLevel"], "Error");
    assert!(b["Exception"]
        .as_str()
        .unwrap()
        .starts_with("System.InvalidOperationException: boom"));
    assert!(b.get("Scopes").is_none());

    // The session asked for: the provider, FormattedMessage|JsonMessage, the app's filters;
    // and TplEventSource's TasksFlowActivityIds (0x80) at Informational, for the scopes.
    let reqs = collect_requests(&rt);
    assert_eq!(reqs.len(), 1);
    assert!(contains(&reqs[0], &utf16("Microsoft-Extensions-Logging")));
    assert!(contains(&reqs[0], &0xCu64.to_le_bytes()));
    assert!(contains(&reqs[0], &utf16("FilterSpecs=UseAppFilters\0")));
    let mut tpl = 0x80u64.to_le_bytes().to_vec();
    tpl.extend_from_slice(&4u32.to_le_bytes());
    tpl.extend_from_slice(&(38u32).to_le_bytes());
    tpl.extend_from_slice(&utf16("System.Threading.Tasks.TplEventSource\0"));
    assert!(contains(&reqs[0], &tpl), "TplEventSource 0x80 at level 4");

    // json-seq: the same records, each after 0x1E.
    let seq = curl(&serve, "/logs", &["-H", "Accept: application/json-seq"]);
    assert_eq!(seq.status, 200);
    assert_eq!(
        seq.header("content-type").as_deref(),
        Some("application/json-seq")
    );
    let want: String = text.lines().map(|l| format!("\u{1e}{}\n", l)).collect();
    assert_eq!(seq.text(), want);

    // curl's */*: text, as dotnet-monitor picks it.
    let t = curl(&serve, "/logs?level=Warning", &[]);
    assert_eq!(t.status, 200, "{}", t.text());
    assert_eq!(t.header("content-type").as_deref(), Some("text/plain"));
    assert!(
        t.text().starts_with(
            "2024-05-22 10:11:17Z info: App.Worker[42][Processing]\n      => RequestId:r-1, Attempt:2 => Path:/a, Ok:True\n      Processing request 353f in 12 ms\n"
        ),
        "{}",
        t.text()
    );
    // level=Warning: every category at Warning (EventPipe level 3), app filters off.
    let reqs = collect_requests(&rt);
    assert!(
        contains(&reqs[2], &utf16("FilterSpecs=\0")),
        "app filters off"
    );

    // POST with a LogsConfiguration.
    let p = curl(
        &serve,
        "/logs?durationSeconds=5",
        &[
            "-X",
            "POST",
            "-H",
            "Content-Type: application/json",
            "-H",
            "Accept: application/x-ndjson",
            "--data-binary",
            r#"{"filterSpecs":{"App.Worker":"Warning","Noisy":null},"logLevel":"Information","useAppFilters":true}"#,
        ],
    );
    assert_eq!(p.status, 200, "{}", p.text());
    assert_eq!(p.text(), text);
    let reqs = collect_requests(&rt);
    assert!(
        contains(
            &reqs[3],
            &utf16("FilterSpecs=\"UseAppFilters;App.Worker:Warning;Noisy\"\0")
        ),
        "{:?}",
        String::from_utf8_lossy(&reqs[3])
    );

    // Refusals: 406 without a body, 400 naming the parameter or member.
    let n = curl(&serve, "/logs", &["-H", "Accept: image/png"]);
    assert_eq!(n.status, 406);
    assert!(n.body.is_empty());
    let bad = curl(&serve, "/logs?level=Loud", &["-H", "Accept: text/plain"]);
    assert_eq!(bad.status, 400);
    let doc: Value = serde_json::from_slice(&bad.body).unwrap();
    assert_eq!(doc["errors"]["level"][0], "The value 'Loud' is not valid.");
    let none = curl(&serve, "/logs?level=None", &["-H", "Accept: text/plain"]);
    assert_eq!(none.status, 400);
    let bad = curl(
        &serve,
        "/logs",
        &[
            "-X",
            "POST",
            "-H",
            "Content-Type: application/json",
            "--data-binary",
            r#"{"logLevel":"Loud"}"#,
        ],
    );
    assert_eq!(bad.status, 400);
    assert!(bad.text().contains("$.logLevel"), "{}", bad.text());
    // None of the refusals started a session.
    assert_eq!(collect_requests(&rt).len(), 4);
}

#[test]
fn serve_logs_against_real_net8_runs_its_duration_and_ends() {
    configure_python();
    let dir = TempDir::new("dsipc-svl").unwrap();
    let opts = HostOptions::net8(240).env("TMPDIR", dir.path().as_os_str());
    let mut host = HostedRuntime::spawn(&opts).expect("spawn host");
    host.wait_ready(Duration::from_secs(90))
        .expect("host READY");
    let serve = Serve::start(dir.path(), &["--temp-apikey"]);
    let started = std::time::Instant::now();
    let a = curl(
        &serve,
        "/logs?durationSeconds=1",
        &["-H", "Accept: application/x-ndjson"],
    );
    assert_eq!(a.status, 200, "{}", a.text());
    assert_eq!(
        a.header("content-type").as_deref(),
        Some("application/x-ndjson")
    );
    // No ILogger in the host: nothing, or valid entries.
    for l in a.text().lines() {
        let v: Value = serde_json::from_str(l).unwrap();
        assert!(v["LogLevel"].is_string());
    }
    assert!(started.elapsed() < Duration::from_secs(30));
}

/// A runtime that opens scopes holding a megabyte each and never ends them: the session's
/// decoder holds at most MAX_SCOPE_BYTES of them, serve says so once (on stderr), and the
/// entry after them still comes.
#[test]
fn serve_logs_says_once_that_scopes_over_the_byte_budget_are_dropped() {
    let big = format!(r#"{{"S":"{}"}}"#, "x".repeat(1_000_000));
    let mut t = common_logs::LogTrace::new();
    t.per_block = 4;
    for i in 0..(dsipc_trace::logs::MAX_SCOPE_BYTES / 1_000_000 + 3) {
        t.scope_start(i as u64 + 1, i as i32, "C", &big);
    }
    t.log(
        1,
        2,
        "C",
        7,
        "",
        "after",
        r#"{"{OriginalFormat}":"after"}"#,
        "{}",
    );
    let trace: &'static [u8] = Box::leak(t.bytes().into_boxed_slice());
    let dir = TempDir::new("dsipc-svl").unwrap();
    let _rt = fake(&dir, trace);
    let mut serve = Serve::start(dir.path(), &["--temp-apikey"]);
    let nd = curl(
        &serve,
        "/logs?durationSeconds=30",
        &["-H", "Accept: application/x-ndjson"],
    );
    assert_eq!(nd.status, 200, "{}", nd.text());
    assert!(nd.text().contains("\"after\""), "{}", nd.text());
    // Said once: up to serve's last line, one warning for the session.
    serve.live.signal(libc::SIGINT);
    serve
        .live
        .stderr_line("serve: stopping", Duration::from_secs(30));
    let said = serve
        .live
        .stderr_lines()
        .iter()
        .filter(|l| l.contains("scopes dropped"))
        .count();
    assert_eq!(said, 1, "{:?}", serve.live.stderr_lines());
}
