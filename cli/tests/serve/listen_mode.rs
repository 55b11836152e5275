//! Listen mode (`--diagnostic-port PATH`): runtimes that connect to serve.

use std::time::{Duration, Instant};

use dsipc_testkit::{HostOptions, HostedRuntime, TempDir};

use super::{dsipc_report, save};
use crate::common::configure_python;
use crate::common::serve::{shapes, Serve};

/// Listen mode (`--diagnostic-port PATH`): a real .NET 8 runtime started with
/// `DOTNET_DiagnosticPorts=PATH,connect,nosuspend` connects to serve, which lists it and
/// answers every route through the runtime's reverse connections: ProcessInfo, a trace
/// stopped from a second connection, stacks, /metrics.
#[test]
fn serve_listen_mode_serves_runtimes_that_connect_to_it() {
    configure_python();
    let dir = TempDir::new("dsipc-sv").unwrap();
    let port = dir.path().join("port.sock");
    let serve = Serve::start(
        dir.path(),
        &[
            "--temp-apikey",
            "--counter-interval",
            "1",
            "--diagnostic-port",
            port.to_str().unwrap(),
        ],
    );
    let own = TempDir::new("dsipc-sv-own").unwrap();
    let mut opts = HostOptions::net8(240)
        .env("TMPDIR", own.path().as_os_str())
        .reverse_port(&port, false);
    opts.args
        .extend(["--sleeping-thread".to_string(), "--counters".to_string()]);
    let mut h = HostedRuntime::spawn(&opts).expect("spawn host");
    let pid = h
        .wait_ready(Duration::from_secs(90))
        .expect("host READY")
        .pid;

    let info = serve.get("/info").json();
    shapes::check(&info, &shapes::DOTNET_MONITOR_INFO, "/info");
    assert_eq!(info["diagnosticPortMode"], "Listen");
    assert_eq!(info["diagnosticPortName"].as_str(), port.to_str());
    // The runtime connects once its diagnostic server runs: wait for it to be listed.
    let deadline = Instant::now() + Duration::from_secs(30);
    let listed = loop {
        let l = serve.get("/processes").json();
        if l.as_array().map_or(false, |a| !a.is_empty()) {
            break l;
        }
        assert!(
            Instant::now() < deadline,
            "the runtime never connected: {}",
            l
        );
        std::thread::sleep(Duration::from_millis(100));
    };
    assert_eq!(listed[0]["pid"].as_u64(), Some(pid as u64), "{}", listed);
    assert_eq!(listed[0]["isDefault"], true);
    let p = serve.get("/process").json();
    assert_eq!(p["operatingSystem"], "linux");
    let env = serve.get("/env").json();
    assert_eq!(env["TMPDIR"].as_str(), own.path().to_str());

    let t = serve.get("/trace?profile=Cpu&durationSeconds=1");
    assert_eq!(t.status, 200, "{}", t.text());
    assert_eq!(t.curl, 0);
    let file = save(&t, serve.files.path(), "listen.nettrace");
    assert_eq!(dsipc_report(&file, &[]).code, Some(0));

    let st = serve.get_with("/stacks", &["-H", "Accept: text/plain"]);
    assert_eq!(st.status, 200, "{}", st.text());
    assert!(st.text().contains("Thread.Sleep"), "{}", st.text());

    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let m = serve.scrape();
        if m.text().contains("systemruntime_cpu_usage_ratio") {
            break;
        }
        assert!(Instant::now() < deadline, "no counters: {}", m.text());
        std::thread::sleep(Duration::from_millis(500));
    }
    h.kill();
    // Gone from the list once its connection closes.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let l = serve.get("/processes").json();
        if l.as_array().map_or(false, |a| a.is_empty()) {
            break;
        }
        assert!(Instant::now() < deadline, "still listed: {}", l);
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Listen mode resumes the runtimes that connect: a real .NET 8 runtime started as `serve
/// --help` says (`DOTNET_DiagnosticPorts=PATH,connect`, so suspended at startup until a
/// ResumeRuntime) runs managed code while serve runs, with no request made (the host prints
/// READY, which reads `Environment.Version`, only once the runtime runs), and is listed.
#[test]
fn serve_listen_mode_resumes_runtimes_suspended_at_startup() {
    configure_python();
    let dir = TempDir::new("dsipc-sv").unwrap();
    let port = dir.path().join("port.sock");
    let serve = Serve::start(
        dir.path(),
        &["--temp-apikey", "--diagnostic-port", port.to_str().unwrap()],
    );
    let own = TempDir::new("dsipc-sv-own").unwrap();
    let mut ports = port.as_os_str().to_os_string();
    ports.push(",connect");
    let opts = HostOptions::net8(240)
        .env("TMPDIR", own.path().as_os_str())
        .env("DOTNET_DiagnosticPorts", ports);
    let mut h = HostedRuntime::spawn(&opts).expect("spawn host");
    let ready = h.wait_ready(Duration::from_secs(90));
    assert!(
        ready.is_ok(),
        "the runtime never resumed: {:?}",
        ready.err()
    );
    let listed = serve.get("/processes").json();
    assert_eq!(
        listed[0]["pid"].as_u64(),
        Some(u64::from(ready.unwrap().pid)),
        "{}",
        listed
    );
}
