//! A collection rule's reaction time (issue 26), on a fake runtime:
//!
//!     cargo bench -p dsipc-serve --bench rules
//!
//! Each firing: a fake .NET 8 runtime whose counters session plays a recorded stream at
//! once (its first `working-set` sample crosses the rule's threshold, `GreaterThan` 1 MB
//! held for the sample's own 1 s interval), an embedded `Server` with that EventCounter rule
//! and a CollectTrace action. The figure is the time from the counters session's
//! CollectTracing request reaching the runtime (the crossing sample follows within the
//! stream's first bytes) to the action's CollectTracing request reaching it: an upper
//! bound of "sample crossing the threshold → the action's session starting". Median, min
//! and max over 20 firings (target: at most one counter interval, 1 s here, plus 100 ms).
#![cfg(target_os = "linux")]

use std::path::Path;
use std::time::{Duration, Instant};

use dsipc_serve::{Auth, Egress, Options, Server};
use dsipc_testkit::{Config, StreamSpec, TempDir};
use serde_json::json;

const FIRINGS: usize = 20;

/// When each CollectTracing request reached the fake runtime, until `count` came or
/// `timeout` passed (the fake's condition variable wakes this at each request).
fn tracing_requests(
    rt: &dsipc_testkit::FakeRuntime,
    count: usize,
    timeout: Duration,
) -> Vec<Instant> {
    let deadline = Instant::now() + timeout;
    let mut seen = 0;
    let mut out = Vec::new();
    while out.len() < count && Instant::now() < deadline {
        let received =
            rt.wait_received(seen + 1, deadline.saturating_duration_since(Instant::now()));
        let now = Instant::now();
        for r in received.iter().skip(seen) {
            if format!("{:?}", r.command).contains("CollectTracing") {
                out.push(now);
            }
        }
        seen = received.len();
    }
    out
}

fn one_firing(capture: &'static [u8]) -> Duration {
    let dir = TempDir::new("dsipc-rules-bench").unwrap();
    let out = TempDir::new("dsipc-rules-bench-out").unwrap();
    let me = std::process::id();
    let rt = Config::new()
        .like_net8_0_4()
        .pid(u64::from(me))
        .key(dsipc_std::unix::start_key(me).expect("start key"))
        .listen_in(dir.path())
        .stream(StreamSpec::content(capture))
        .start()
        .expect("fake runtime");
    let tokio = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let server = tokio.block_on(async {
        let mut options = Options::default();
        options.auth = Auth::Off;
        options.tmpdir = Some(dir.path().to_path_buf());
        options.metrics = false;
        options.counter_interval = 1.0;
        options.egress = vec![Egress {
            name: "files".into(),
            target: dsipc_serve::EgressTarget::FileSystem(out.path().to_path_buf()),
        }];
        options.collection_rules = Some(json!({
            "BigWorkingSet": {
                "Trigger": {
                    "Type": "EventCounter",
                    "Settings": {
                        "ProviderName": "System.Runtime",
                        "CounterName": "working-set",
                        "GreaterThan": 1,
                        "SlidingWindowDuration": "00:00:01"
                    }
                },
                "Actions": [{
                    "Type": "CollectTrace",
                    "Settings": {
                        "Providers": [{ "Name": "System.Runtime" }],
                        "Duration": "00:00:01",
                        "Egress": "files"
                    }
                }],
                "Limits": { "ActionCount": 1 }
            }
        }));
        Server::new(options, 1).expect("server")
    });
    let times = tracing_requests(&rt, 2, Duration::from_secs(60));
    drop(server);
    drop(tokio);
    assert_eq!(times.len(), 2, "the rule did not fire within 60 s");
    times[1] - times[0]
}

fn main() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/data/counters/net8.0.4-system-runtime-and-meter.nettrace");
    let capture: &'static [u8] = Box::leak(std::fs::read(path).unwrap().into_boxed_slice());
    let mut runs: Vec<Duration> = (0..FIRINGS).map(|_| one_firing(capture)).collect();
    runs.sort();
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    println!(
        "rules: reaction time (counters session start -> action session start) over {} firings: median {:.1} ms, min {:.1} ms, max {:.1} ms (target <= 1100 ms)",
        FIRINGS,
        ms(runs[FIRINGS / 2]),
        ms(runs[0]),
        ms(runs[FIRINGS - 1])
    );
}
