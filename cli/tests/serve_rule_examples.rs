//! dotnet-monitor's collection rule examples (dotnet/dotnet-monitor,
//! documentation/collectionrules/collectionruleexamples.md) in a settings.json handed to
//! `dsipc serve --configuration-file-path`, as a dotnet-monitor user would copy theirs:
//! the rules as written there (only the process filter adapted to the test's runtime), the
//! `artifacts` egress provider a FileSystem folder, against a real .NET 8 runtime made to
//! cross each example's threshold. Each artifact lands under dotnet-monitor's file name,
//! `{yyyyMMdd_HHmmss_fff}_{pid}.{ext}` (UTC). Tests synchronise on the egress folder and on
//! `/collectionrules`, bounded.
//!
//! The document's other examples are not here: BadResponseStatus, HighRequestCount,
//! LongRequestDuration and CollectDumpAndExecute fire on ASP.NET requests
//! (AspNetResponseStatus, AspNetRequestCount, AspNetRequestDuration triggers), which the
//! runtimes here cannot serve: the PyPI runtime wheels hold no ASP.NET Core shared framework,
//! so no Microsoft.AspNetCore.Hosting events are ever written. (CollectDumpAndExecute's
//! Execute also opens Visual Studio on Windows.)
#![cfg(target_os = "linux")]

mod common;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use common::configure_python;
use common::serve::Serve;
use dsipc_testkit::{HostOptions, HostedRuntime, TempDir};
use serde_json::{json, Value};

/// How long a test waits for an artifact: LargeGCHeapSize's default sliding window is a
/// minute of samples and dotnet-monitor's (and serve's) counters come every 5 s; the CPU
/// trace runs 30 s after a 10 s window. Room for a loaded machine.
const WAIT: Duration = Duration::from_secs(300);

/// The documented examples this machine can run, as written
/// (tests/data/dotnet-monitor/collectionruleexamples.json: AssemblyLoadTraceOnStartup,
/// LargeGCHeapSize, HighCpuUsage), in one settings.json with `artifacts` a FileSystem
/// folder; HighCpuUsage's ProcessName filter `MyProcessName` made `process_name`.
fn settings(artifacts: &Path, process_name: &str) -> Value {
    let path = common::repo_root().join("tests/data/dotnet-monitor/collectionruleexamples.json");
    let mut doc: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let filter = &mut doc["CollectionRules"]["HighCpuUsage"]["Filters"][0];
    assert_eq!(filter["Value"], "MyProcessName");
    filter["Value"] = json!(process_name);
    doc["Egress"] = json!({ "FileSystem": { "artifacts": { "DirectoryPath": artifacts } } });
    doc
}

/// A real .NET 8 runtime alone in its own TMPDIR with `args`, and `env`.
fn runtime(args: &[&str], env: &[(&str, &str)]) -> (HostedRuntime, u32, TempDir) {
    configure_python();
    let dir = TempDir::new("dsipc-examples").unwrap();
    let mut opts = HostOptions::net8(600).env("TMPDIR", dir.path().as_os_str());
    for (k, v) in env {
        opts = opts.env(k, v);
    }
    opts.args = args.iter().map(|a| a.to_string()).collect();
    let mut host = HostedRuntime::spawn(&opts).expect("a .NET 8 host (scripts/setup-runtimes.sh)");
    let pid = host
        .wait_ready(Duration::from_secs(120))
        .expect("READY")
        .pid;
    (host, pid, dir)
}

/// The name dotnet-monitor (and serve) give the hosted runtime's process: its program's
/// file name (the runtime reports /proc/self/exe's target as its command line's program).
fn process_name(pid: u32) -> String {
    let exe = std::fs::read_link(format!("/proc/{}/exe", pid)).unwrap();
    exe.file_name().unwrap().to_string_lossy().into_owned()
}

/// `dsipc serve --configuration-file-path` with `settings`, over the runtimes of `tmpdir`.
fn serve(tmpdir: &Path, out: &TempDir, settings: &Value) -> Serve {
    let file = out.path().join("settings.json");
    std::fs::write(&file, settings.to_string()).unwrap();
    Serve::start(
        tmpdir,
        &[
            "--temp-apikey",
            "--configuration-file-path",
            file.to_str().unwrap(),
        ],
    )
}

/// Polls the egress folder until `count` artifacts named `{stamp}_{pid}.{ext}` have landed,
/// bounded by [`WAIT`]: their paths.
fn await_artifacts(
    folder: &Path,
    pid: u32,
    ext: &str,
    count: usize,
    serve: &Serve,
) -> Vec<PathBuf> {
    let deadline = Instant::now() + WAIT;
    loop {
        let names: Vec<String> = std::fs::read_dir(folder)
            .map(|d| {
                d.flatten()
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .collect()
            })
            .unwrap_or_default();
        let found: Vec<PathBuf> = names
            .iter()
            .filter(|n| dsipc_testkit::is_artifact_name(n, pid, ext))
            .map(|n| folder.join(n))
            .collect();
        if found.len() >= count {
            return found;
        }
        assert!(
            Instant::now() < deadline,
            "not {} {{stamp}}_{}.{} in {:?} within {:?}: {}",
            count,
            pid,
            ext,
            names,
            WAIT,
            serve.get("/collectionrules").text()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// AssemblyLoadTraceOnStartup and LargeGCHeapSize on a runtime holding 400,000
/// System.Version objects (about 16 MB of heap; without them it has about 4.6 MB, under the
/// example's 10 MB): the startup trace and, after a minute over 10 MB, the gcdump land under
/// dotnet-monitor's names; HighCpuUsage, filtered to this process, stays Running (the
/// runtime is idle).
#[test]
fn dotnet_monitor_rule_examples_startup_trace_and_large_gc_heap_gcdump() {
    let (mut host, pid, dir) = runtime(&["--counters", "--hold", "400000"], &[]);
    let out = TempDir::new("dsipc-examples-out").unwrap();
    let artifacts = out.path().join("artifacts");
    let serve = serve(dir.path(), &out, &settings(&artifacts, &process_name(pid)));
    let process = serve.get(&format!("/process?pid={}", pid)).json();
    assert_eq!(process["name"], process_name(pid), "{}", process);

    let trace = await_artifacts(&artifacts, pid, "nettrace", 1, &serve);
    let bytes = std::fs::read(&trace[0]).unwrap();
    assert!(bytes.starts_with(b"Nettrace"), "{}", trace[0].display());
    let gcdump = await_artifacts(&artifacts, pid, "gcdump", 1, &serve);
    assert!(std::fs::metadata(&gcdump[0]).unwrap().len() > 1000);

    let rules = serve.get(&format!("/collectionrules?pid={}", pid)).json();
    assert_eq!(
        rules["AssemblyLoadTraceOnStartup"]["state"], "Finished",
        "{}",
        rules
    );
    assert_eq!(rules["HighCpuUsage"]["state"], "Running", "{}", rules);
    let large = serve
        .get(&format!("/collectionrules/LargeGCHeapSize?pid={}", pid))
        .json();
    assert!(
        large["lifetimeOccurrences"].as_u64() >= Some(1),
        "{}",
        large
    );
    // The example's default ActionCount limit (5), as dotnet-monitor reports it.
    assert_eq!(large["actionCountLimit"], 5, "{}", large);
    host.kill();
}

/// HighCpuUsage on a runtime spinning in Regex backtracking: cpu-usage over 60 % for ten
/// seconds collects a Cpu trace of the default 30 s. .NET 8's cpu-usage is the process's
/// share of all the processors it may use, so on a machine of two cores one spinning thread
/// makes at most 50 %: the runtime gets DOTNET_PROCESSOR_COUNT=1 (its processor count, which
/// the counter divides by), and then crosses 60 % only while it gets most of a core.
///
/// Ignored: on this project's machines (two cores shared by several builds, load 10 and up)
/// the spinning thread gets 30-45 % of a core, and the example's 60 % for ten seconds is
/// crossed only now and then (once in two runs while this was written). On an idle machine:
/// `cargo test -p dsipc-cli --test serve_rule_examples -- --ignored`.
#[test]
#[ignore = "needs 60 % of a core for 10 s: an idle machine"]
fn dotnet_monitor_rule_example_high_cpu_usage_collects_a_cpu_trace() {
    let (mut host, pid, dir) = runtime(
        &["--counters", "--regex"],
        &[("DOTNET_PROCESSOR_COUNT", "1")],
    );
    let out = TempDir::new("dsipc-examples-out").unwrap();
    let artifacts = out.path().join("artifacts");
    let serve = serve(dir.path(), &out, &settings(&artifacts, &process_name(pid)));
    // The startup trace (15 s) and the CPU trace (30 s, after the ten-second window).
    let traces = await_artifacts(&artifacts, pid, "nettrace", 2, &serve);
    assert_eq!(traces.len(), 2, "{:?}", traces);
    let one = serve
        .get(&format!("/collectionrules/HighCpuUsage?pid={}", pid))
        .json();
    assert!(one["lifetimeOccurrences"].as_u64() >= Some(1), "{}", one);
    for t in &traces {
        assert!(
            std::fs::read(t).unwrap().starts_with(b"Nettrace"),
            "{}",
            t.display()
        );
    }
    host.kill();
}
