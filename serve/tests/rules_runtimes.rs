//! Collection rules firing on real runtimes beyond .NET 8's CPUUsage (serve/tests/rules.rs):
//! CPUUsage on .NET Core 3.1 spinning in Regex backtracking, the gc-heap-size EventCounter
//! on .NET 8 and 3.1 holding objects, and an EventMeter on a .NET 8 meter's rate. Each
//! threshold is crossed only by what the runtime was made to do (the comments give the
//! idle figures), in an embedded `Server` whose artifacts land in a FileSystem egress
//! folder. .NET Core 3.1 has no System.Diagnostics.Metrics (it came in .NET 6), so no
//! EventMeter test runs on it. Tests poll the folder and `/collectionrules/{name}`, bounded.
#![cfg(target_os = "linux")]

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use dsipc_serve::{Auth, Egress, EgressTarget, Options, Server};
use dsipc_testkit::TempDir;
use serde_json::{json, Value};

mod common;
use common::get;
use common::rules::real_host as host;

/// How long a test waits for what it polls (a rule firing on a hosted
/// runtime allocating its held objects through pythonnet takes most of a minute on a
/// loaded machine).
const WAIT: Duration = Duration::from_secs(180);

/// An embedded server over the runtimes of `tmpdir`, counters every second, the rule
/// `name` (filtered to `pid`) with `trigger` and `actions`, egress `files` into `out`.
async fn serve(
    tmpdir: &Path,
    out: &Path,
    pid: u32,
    name: &str,
    trigger: Value,
    actions: Value,
) -> (Server, std::net::SocketAddr) {
    let mut options = Options::default();
    options.auth = Auth::Off;
    options.tmpdir = Some(tmpdir.to_path_buf());
    options.metrics = false;
    options.counter_interval = 1.0;
    options.egress = vec![Egress {
        name: "files".into(),
        target: EgressTarget::FileSystem(out.to_path_buf()),
    }];
    let mut rules = serde_json::Map::new();
    rules.insert(
        name.to_string(),
        json!({
            "Filters": [{ "Key": "ProcessId", "Value": pid.to_string() }],
            "Trigger": trigger,
            "Actions": actions,
            "Limits": { "ActionCount": 1 }
        }),
    );
    options.collection_rules = Some(Value::Object(rules));
    let mut server = Server::new(options, 1).expect("server");
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    server.serve_api(listener);
    (server, addr)
}

/// Polls until the artifact `_{pid}.{ext}` has landed in `out` and rule `name` has
/// Finished at its ActionCount of 1 (bounded by [`WAIT`]): the artifact's path.
async fn fired(addr: std::net::SocketAddr, out: &Path, name: &str, pid: u32, ext: &str) -> PathBuf {
    let deadline = Instant::now() + WAIT;
    let suffix = format!("_{}.{}", pid, ext);
    loop {
        let (status, body) = get(addr, &format!("/collectionrules/{}?pid={}", name, pid)).await;
        let state: Value = serde_json::from_str(&body).unwrap_or(Value::Null);
        let landed = std::fs::read_dir(out).ok().and_then(|d| {
            d.flatten()
                .map(|e| e.path())
                .find(|p| p.file_name().unwrap().to_string_lossy().ends_with(&suffix))
        });
        if let (200, Some(path)) = (status, &landed) {
            if state["state"] == "Finished" {
                assert_eq!(state["lifetimeOccurrences"], 1, "{}", body);
                assert!(
                    std::fs::metadata(path).unwrap().len() > 100,
                    "{}",
                    path.display()
                );
                return path.clone();
            }
        }
        assert!(
            Instant::now() < deadline,
            "rule {} did not fire and land its {} within {:?}: {} {}",
            name,
            ext,
            WAIT,
            status,
            body
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// A CPU trace of two seconds into `files`.
fn cpu_trace() -> Value {
    json!([{
        "Type": "CollectTrace",
        "Settings": { "Profile": "Cpu", "Duration": "00:00:02", "Egress": "files" }
    }])
}

/// CPUUsage on .NET Core 3.1: idle, its cpu-usage reads 0-2 (whole percents on 3.1); one
/// thread spinning in Regex backtracking lifts it past 3 for three seconds, and the CPU
/// trace lands.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cpu_usage_rule_fires_on_a_busy_netcore31_runtime() {
    let dir = TempDir::new("dsipc-rules-rt").unwrap();
    let out = TempDir::new("dsipc-rules-rt-out").unwrap();
    let (mut host, pid) = host(&dir, "netcore31", &["--regex", "--counters"]);
    let trigger = json!({
        "Type": "CPUUsage",
        "Settings": { "GreaterThan": 3, "SlidingWindowDuration": "00:00:03" }
    });
    let (_server, addr) = serve(dir.path(), out.path(), pid, "HighCpu", trigger, cpu_trace()).await;
    fired(addr, out.path(), "HighCpu", pid, "nettrace").await;
    host.kill();
}

/// The gc-heap-size EventCounter over 8 MB for two seconds: idle, a hosted runtime's heap
/// is 4-4.6 MB (3.1 and 8); holding 150,000 System.Version objects (4.8 MB, and their
/// list's 1.2 MB) lifts it past 8 MB, and the rule's gcdump lands.
async fn gc_heap_size_rule_fires_on_a_runtime_holding_objects(runtime: &str) {
    let dir = TempDir::new("dsipc-rules-rt").unwrap();
    let out = TempDir::new("dsipc-rules-rt-out").unwrap();
    let (mut host, pid) = host(&dir, runtime, &["--counters", "--hold", "150000"]);
    let trigger = json!({
        "Type": "EventCounter",
        "Settings": {
            "ProviderName": "System.Runtime",
            "CounterName": "gc-heap-size",
            "GreaterThan": 8,
            "SlidingWindowDuration": "00:00:02"
        }
    });
    let actions = json!([{ "Type": "CollectGCDump", "Settings": { "Egress": "files" } }]);
    let (_server, addr) = serve(dir.path(), out.path(), pid, "BigHeap", trigger, actions).await;
    fired(addr, out.path(), "BigHeap", pid, "gcdump").await;
    host.kill();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gc_heap_size_rule_fires_on_a_net8_runtime_holding_objects() {
    gc_heap_size_rule_fires_on_a_runtime_holding_objects("net8").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gc_heap_size_rule_fires_on_a_netcore31_runtime_holding_objects() {
    gc_heap_size_rule_fires_on_a_runtime_holding_objects("netcore31").await;
}

/// An EventMeter trigger on .NET 8: MyMeter's Counter<long> `requests` added to at 50 a
/// second reads as a rate of about 50 each second; over 20 for two seconds fires the rule
/// and its CPU trace lands. Without --meter-rate the meter does not exist.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn event_meter_rule_fires_on_a_net8_meter_rate() {
    let dir = TempDir::new("dsipc-rules-rt").unwrap();
    let out = TempDir::new("dsipc-rules-rt-out").unwrap();
    let (mut host, pid) = host(&dir, "net8", &["--counters", "--meter-rate", "50"]);
    let trigger = json!({
        "Type": "EventMeter",
        "Settings": {
            "MeterName": "MyMeter",
            "InstrumentName": "requests",
            "GreaterThan": 20,
            "SlidingWindowDuration": "00:00:02"
        }
    });
    let (_server, addr) = serve(
        dir.path(),
        out.path(),
        pid,
        "ManyRequests",
        trigger,
        cpu_trace(),
    )
    .await;
    fired(addr, out.path(), "ManyRequests", pid, "nettrace").await;
    host.kill();
}
