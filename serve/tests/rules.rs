//! Collection rules running inside an embedded `Server`: a fake runtime (its recorded
//! counters stream played back) and a real .NET 8 runtime, the rules' artifacts landing in a
//! FileSystem egress folder, their states read from `/collectionrules`.
#![cfg(target_os = "linux")]

use std::path::PathBuf;
use std::time::Duration;

use dsipc_testkit::{HostOptions, HostedRuntime, StreamEnd, StreamSpec, TempDir};
use serde_json::{json, Value};

mod common;
use common::get;
use common::rules::{fake, json_at, landed, recorded_counters, serve, until, WAIT};

/// A stream that goes on until the session is stopped, 4 KiB every 2 ms.
fn endless() -> StreamSpec {
    StreamSpec {
        len: None,
        chunk: 4096,
        pause: Duration::from_millis(2),
        end_marker: true,
        content: None,
    }
}

/// A Startup rule fires once when the runtime is first seen: its CollectTrace lands in the
/// FileSystem egress folder under dotnet-monitor's name (`{timestamp}_{pid}.nettrace`), and
/// `/collectionrules` then says the rule Finished, as dotnet-monitor words it; a rule name
/// the process has not is 400 (dotnet-monitor's ArgumentException).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn startup_rule_collects_a_trace_into_a_file_system_egress_folder() {
    let dir = TempDir::new("dsipc-rules").unwrap();
    let out = TempDir::new("dsipc-rules-out").unwrap();
    let _rt = fake(&dir, endless());
    let rules = json!({
        "AtStartup": {
            "Trigger": { "Type": "Startup" },
            "Actions": [{
                "Type": "CollectTrace",
                "Settings": {
                    "Providers": [{ "Name": "Microsoft-Windows-DotNETRuntime", "Keywords": "0x1" }],
                    "Duration": "00:00:01",
                    "Egress": "files"
                }
            }]
        }
    });
    let (_server, addr) = serve(dir.path(), out.path(), rules, 5.0).await;
    let files = until("trace in the egress folder", || async {
        let f = landed(out.path(), ".nettrace");
        if f.is_empty() {
            None
        } else {
            Some(f)
        }
    })
    .await;
    assert_eq!(files.len(), 1, "{:?}", files);
    let name = files[0].file_name().unwrap().to_string_lossy().into_owned();
    assert!(
        name.ends_with(&format!("_{}.nettrace", std::process::id())),
        "{}",
        name
    );
    assert!(std::fs::metadata(&files[0]).unwrap().len() > 0);
    let all = until("the Startup rule Finished", || async {
        let all = json_at(addr, "/collectionrules").await;
        if all["AtStartup"]["state"] == "Finished" {
            Some(all)
        } else {
            None
        }
    })
    .await;
    assert_eq!(
        all["AtStartup"]["stateReason"],
        "The collection rule will no longer trigger because the Startup trigger only executes once.",
        "{}",
        all
    );
    let one = json_at(addr, "/collectionrules/AtStartup").await;
    assert_eq!(one["lifetimeOccurrences"], 1, "{}", one);
    assert_eq!(one["actionCountLimit"], 5, "{}", one);
    let (status, body) = get(addr, "/collectionrules/Nope").await;
    assert_eq!(status, 400, "{}", body);
    assert!(body.contains("Nope"), "{}", body);
}

/// Collection rules' actions do not follow the API's operation limits, as in dotnet-monitor
/// ("Collection Rules do not follow request limits"): four Startup rules collect four traces
/// at once (the API allows three), and while they run the API still starts one of its own.
/// Before, the fourth rule's CollectTrace failed with the API's 429 and only three landed.
/// (Each names its artifact: four traces of one process begun in the same millisecond
/// would otherwise share dotnet-monitor's name, and the FileSystem egress never replaces a
/// file.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rule_actions_do_not_follow_the_api_operation_limits() {
    let dir = TempDir::new("dsipc-rules").unwrap();
    let out = TempDir::new("dsipc-rules-out").unwrap();
    let _rt = fake(&dir, endless());
    let names = ["T1", "T2", "T3", "T4"];
    let mut rules = serde_json::Map::new();
    for name in names {
        rules.insert(
            name.to_string(),
            json!({
                "Trigger": { "Type": "Startup" },
                "Actions": [{
                    "Type": "CollectTrace",
                    "Settings": {
                        "Providers": [{ "Name": "Microsoft-Windows-DotNETRuntime", "Keywords": "0x1" }],
                        "Duration": "00:00:05",
                        "Egress": "files",
                        "ArtifactName": format!("{}.nettrace", name)
                    }
                }]
            }),
        );
    }
    let (_server, addr) = serve(dir.path(), out.path(), Value::Object(rules), 5.0).await;
    until("four rules collecting at once", || async {
        let all = json_at(addr, "/collectionrules").await;
        let executing = names
            .iter()
            .filter(|n| all[**n]["state"] == "ActionExecuting")
            .count();
        if executing == names.len() {
            Some(())
        } else {
            None
        }
    })
    .await;
    let (status, body) = get(
        addr,
        &format!("/trace?pid={}&durationSeconds=1", std::process::id()),
    )
    .await;
    assert_eq!(status, 200, "{}", body);
    let files = until("four traces in the egress folder", || async {
        let f = landed(out.path(), ".nettrace");
        if f.len() >= names.len() {
            Some(f)
        } else {
            None
        }
    })
    .await;
    assert_eq!(files.len(), names.len(), "{:?}", files);
}

/// An EventCounter trigger reads the runtime's one counters session (a recorded .NET 8
/// stream): `working-set` above 1 MB for a second fires the rule; its CollectTrace lands,
/// the Execute after it gets the trace's path through `$(Actions.a1.EgressPath)`, and
/// `ActionCount` 1 within a ten-minute window leaves the rule Throttled on
/// `/collectionrules/{name}`, with its counts.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn event_counter_rule_fires_on_a_recorded_stream_and_is_throttled_by_action_count() {
    let dir = TempDir::new("dsipc-rules").unwrap();
    let out = TempDir::new("dsipc-rules-out").unwrap();
    let marker = out.path().join("marker.txt");
    let _rt = fake(&dir, recorded_counters());
    let rules = json!({
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
            "Actions": [
                {
                    "Name": "a1",
                    "Type": "CollectTrace",
                    "Settings": {
                        "Providers": [{ "Name": "System.Runtime" }],
                        "Duration": "00:00:01",
                        "Egress": "files"
                    }
                },
                {
                    "Type": "Execute",
                    "Settings": {
                        "Path": "/bin/sh",
                        "Arguments": format!("-c \"echo $(Actions.a1.EgressPath) > {}\"", marker.display())
                    }
                }
            ],
            "Limits": { "ActionCount": 1, "ActionCountSlidingWindowDuration": "00:10:00" }
        }
    });
    let (_server, addr) = serve(dir.path(), out.path(), rules, 1.0).await;
    let written = until("the Execute action's marker", || async {
        std::fs::read_to_string(&marker)
            .ok()
            .filter(|t| t.ends_with('\n'))
    })
    .await;
    let trace = PathBuf::from(written.trim());
    assert_eq!(landed(out.path(), ".nettrace"), vec![trace.clone()]);
    assert!(std::fs::metadata(&trace).unwrap().len() > 0);
    let one = until("the rule Throttled", || async {
        let one = json_at(addr, "/collectionrules/BigWorkingSet").await;
        if one["state"] == "Throttled" {
            Some(one)
        } else {
            None
        }
    })
    .await;
    assert_eq!(one["lifetimeOccurrences"], 1, "{}", one);
    assert_eq!(one["slidingWindowOccurrences"], 1, "{}", one);
    assert_eq!(one["actionCountLimit"], 1, "{}", one);
    assert_eq!(
        one["actionCountSlidingWindowDurationLimit"], "00:10:00",
        "{}",
        one
    );
    assert!(one["slidingWindowDurationCountdown"].is_string(), "{}", one);
}

/// A rule that cannot run in serve (a LoadProfiler action, not run yet) is reported
/// Finished with why on every process; the other rules still run.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rule_that_cannot_run_is_reported_finished_with_its_reason() {
    let dir = TempDir::new("dsipc-rules").unwrap();
    let out = TempDir::new("dsipc-rules-out").unwrap();
    let _rt = fake(&dir, recorded_counters());
    let rules = json!({
        "Profiler": {
            "Trigger": { "Type": "Startup" },
            "Actions": [{
                "Type": "LoadProfiler",
                "Settings": {
                    "Path": "/nonexistent/profiler.so",
                    "Clsid": "8c9c2cb5-2e1f-4c2f-9d4b-6b3c6f0f0a11"
                }
            }]
        },
        "NoSuchEgress": {
            "Trigger": { "Type": "Startup" },
            "Actions": [{ "Type": "CollectGCDump", "Settings": { "Egress": "elsewhere" } }]
        }
    });
    let (_server, addr) = serve(dir.path(), out.path(), rules, 5.0).await;
    let all = until("the rules on the process", || async {
        let all = json_at(addr, "/collectionrules").await;
        if all.as_object().map_or(false, |m| m.len() == 2) {
            Some(all)
        } else {
            None
        }
    })
    .await;
    for (rule, needle) in [
        ("Profiler", "LoadProfiler action is not supported"),
        (
            "NoSuchEgress",
            "Egress provider 'elsewhere' does not exist.",
        ),
    ] {
        assert_eq!(all[rule]["state"], "Finished", "{}", all);
        let reason = all[rule]["stateReason"].as_str().unwrap();
        assert!(reason.contains(needle), "{}: {}", rule, reason);
    }
}

/// A real .NET 8 runtime spinning in Regex backtracking: a CPUUsage rule (over 1 % for
/// two seconds, counters every second) fires, and its CPU trace lands.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cpu_usage_rule_fires_on_a_busy_net8_runtime_and_its_trace_lands() {
    let dir = TempDir::new("dsipc-rules").unwrap();
    let out = TempDir::new("dsipc-rules-out").unwrap();
    let mut opts = HostOptions::net8(240).env("TMPDIR", dir.path().as_os_str());
    opts.args = vec!["--regex".into(), "--counters".into()];
    let mut host = HostedRuntime::spawn(&opts)
        .expect("a .NET 8 host (DSIPC_PYTHON, DSIPC_NET8_ROOT: see dsipc-runtimes.env)");
    let pid = host.wait_ready(Duration::from_secs(90)).expect("READY").pid;
    let rules = json!({
        "HighCpu": {
            "Filters": [{ "Key": "ProcessId", "Value": pid.to_string() }],
            "Trigger": {
                "Type": "CPUUsage",
                "Settings": { "GreaterThan": 1, "SlidingWindowDuration": "00:00:02" }
            },
            "Actions": [{
                "Type": "CollectTrace",
                "Settings": { "Profile": "Cpu", "Duration": "00:00:02", "Egress": "files" }
            }],
            "Limits": { "ActionCount": 1 }
        }
    });
    let (_server, addr) = serve(dir.path(), out.path(), rules, 1.0).await;
    let files = until("the CPU trace", || async {
        let f = landed(out.path(), ".nettrace");
        if f.is_empty() {
            None
        } else {
            Some(f)
        }
    })
    .await;
    assert!(
        files[0]
            .file_name()
            .unwrap()
            .to_string_lossy()
            .ends_with(&format!("_{}.nettrace", pid)),
        "{:?}",
        files
    );
    assert!(std::fs::metadata(&files[0]).unwrap().len() > 1000);
    let one = until("the rule Finished at its ActionCount", || async {
        let one = json_at(addr, &format!("/collectionrules/HighCpu?pid={}", pid)).await;
        if one["state"] == "Finished" {
            Some(one)
        } else {
            None
        }
    })
    .await;
    assert_eq!(one["lifetimeOccurrences"], 1, "{}", one);
    host.kill();
}

/// CollectTrace's StoppingEvent: a Startup rule's trace of System.Runtime (a recorded
/// stream played over about two seconds) with a five-minute Duration is stopped at the
/// first `EventCounters` event: the runtime gets StopTracing for it long before the stream
/// would end by itself. (The fake runtime cuts its recorded stream where the stop finds it,
/// mid-object, so the trace is not whole: this shows the stop, not the landing.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn collect_trace_stops_at_its_stopping_event() {
    let dir = TempDir::new("dsipc-rules").unwrap();
    let out = TempDir::new("dsipc-rules-out").unwrap();
    let spec = StreamSpec {
        pause: Duration::from_millis(50),
        ..recorded_counters()
    };
    let whole = spec.content.unwrap().len() as u64;
    let rt = fake(&dir, spec);
    let rules = json!({
        "UntilFirstCounters": {
            "Trigger": { "Type": "Startup" },
            "Actions": [{
                "Type": "CollectTrace",
                "Settings": {
                    "Providers": [{ "Name": "System.Runtime", "Arguments": { "EventCounterIntervalSec": "1" } }],
                    "StoppingEvent": { "ProviderName": "System.Runtime", "EventName": "EventCounters" },
                    "Duration": "00:05:00",
                    "Egress": "files"
                }
            }]
        }
    });
    let (_server, _addr) = serve(dir.path(), out.path(), rules, 5.0).await;
    let streams = tokio::task::spawn_blocking(move || rt.wait_streams(1, WAIT))
        .await
        .unwrap();
    assert_eq!(streams.len(), 1, "{:?}", streams);
    assert_eq!(streams[0].end, StreamEnd::Stopped, "{:?}", streams);
    assert!(streams[0].bytes < whole, "{:?} of {}", streams, whole);
}

/// StoppingEvent on a real .NET 8 runtime: a trace of System.Runtime with a five-minute
/// Duration stops at the runtime's first `EventCounters` event and lands whole (the runtime
/// ends a stopped session cleanly) long before its Duration.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn collect_trace_stopping_event_on_a_net8_runtime_lands_the_trace() {
    let dir = TempDir::new("dsipc-rules").unwrap();
    let out = TempDir::new("dsipc-rules-out").unwrap();
    let mut opts = HostOptions::net8(240).env("TMPDIR", dir.path().as_os_str());
    opts.args = vec!["--counters".into()];
    let mut host = HostedRuntime::spawn(&opts)
        .expect("a .NET 8 host (DSIPC_PYTHON, DSIPC_NET8_ROOT: see dsipc-runtimes.env)");
    let pid = host.wait_ready(Duration::from_secs(90)).expect("READY").pid;
    let rules = json!({
        "UntilFirstCounters": {
            "Filters": [{ "Key": "ProcessId", "Value": pid.to_string() }],
            "Trigger": { "Type": "Startup" },
            "Actions": [{
                "Type": "CollectTrace",
                "Settings": {
                    "Providers": [{ "Name": "System.Runtime", "Arguments": { "EventCounterIntervalSec": "1" } }],
                    "StoppingEvent": { "ProviderName": "System.Runtime", "EventName": "EventCounters" },
                    "Duration": "00:05:00",
                    "Egress": "files"
                }
            }]
        }
    });
    let (_server, _addr) = serve(dir.path(), out.path(), rules, 5.0).await;
    // Within WAIT (90 s): only a stopped trace lands before its five minutes.
    let files = until("the stopped trace", || async {
        let f = landed(out.path(), ".nettrace");
        if f.is_empty() {
            None
        } else {
            Some(f)
        }
    })
    .await;
    let bytes = std::fs::read(&files[0]).unwrap();
    assert!(
        bytes.ends_with(&[0x06, 0x01]),
        "not a whole nettrace stream"
    );
    host.kill();
}

/// A counters session the runtime ends while it is still listed (the fake runtime's
/// recorded stream runs out) starts again at the next look: the rule fires a second time on
/// the stream played again (its action outlasts the first stream, so the second firing
/// can only come from a new session).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_counters_session_the_runtime_ended_starts_again_at_the_next_look() {
    let dir = TempDir::new("dsipc-rules").unwrap();
    let out = TempDir::new("dsipc-rules-out").unwrap();
    let _rt = fake(&dir, recorded_counters());
    let rules = json!({
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
                "Type": "Execute",
                "Settings": { "Path": "/bin/sh", "Arguments": "-c \"sleep 2\"" }
            }],
            "Limits": { "ActionCount": 2 }
        }
    });
    let (_server, addr) = serve(dir.path(), out.path(), rules, 1.0).await;
    let one = until("a second firing", || async {
        // 400 until the rules follow the runtime (the rule is not on it yet).
        let (status, body) = get(addr, "/collectionrules/BigWorkingSet").await;
        let one: Value = serde_json::from_str(&body).ok()?;
        if status == 200 && one["lifetimeOccurrences"] == 2 {
            Some(one)
        } else {
            None
        }
    })
    .await;
    assert_eq!(one["actionCountLimit"], 2, "{}", one);
}

/// SetEnvironmentVariable and GetEnvironmentVariable are the runtime's IPC commands: a
/// Startup rule sets a variable, reads it back, and its Execute gets the value through
/// `$(Actions.get.Value)`. An action that fails (a variable the runtime does not have)
/// ends its rule's run, which still finishes as a Startup rule, and the API goes on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn environment_variable_actions_and_a_failing_action() {
    let dir = TempDir::new("dsipc-rules").unwrap();
    let out = TempDir::new("dsipc-rules-out").unwrap();
    let marker = out.path().join("value.txt");
    let rt = fake(&dir, recorded_counters());
    let rules = json!({
        "SetAndGet": {
            "Trigger": { "Type": "Startup" },
            "Actions": [
                {
                    "Type": "SetEnvironmentVariable",
                    "Settings": { "Name": "DSIPC_RULE_TEST", "Value": "from-the-rule" },
                    "WaitForCompletion": true
                },
                {
                    "Name": "get",
                    "Type": "GetEnvironmentVariable",
                    "Settings": { "Name": "DSIPC_RULE_TEST" }
                },
                {
                    "Type": "Execute",
                    "Settings": {
                        "Path": "/bin/sh",
                        "Arguments": format!("-c \"echo $(Actions.get.Value) > {}\"", marker.display())
                    }
                }
            ]
        },
        "Failing": {
            "Trigger": { "Type": "Startup" },
            "Actions": [{ "Type": "GetEnvironmentVariable", "Settings": { "Name": "DSIPC_NOT_SET_ANYWHERE" } }]
        }
    });
    let (_server, addr) = serve(dir.path(), out.path(), rules, 5.0).await;
    let written = until("the Execute action's marker", || async {
        std::fs::read_to_string(&marker)
            .ok()
            .filter(|t| t.ends_with('\n'))
    })
    .await;
    assert_eq!(written, "from-the-rule\n");
    assert!(rt
        .environment()
        .contains(&"DSIPC_RULE_TEST=from-the-rule".to_string()));
    let all = until("both rules Finished", || async {
        let all = json_at(addr, "/collectionrules").await;
        if all["SetAndGet"]["state"] == "Finished" && all["Failing"]["state"] == "Finished" {
            Some(all)
        } else {
            None
        }
    })
    .await;
    let failing = json_at(addr, "/collectionrules/Failing").await;
    assert_eq!(failing["lifetimeOccurrences"], 1, "{} {}", all, failing);
    assert_eq!(get(addr, "/processes").await.0, 200);
}

/// Every collecting action on a real .NET 8 runtime, run by one Startup rule through the
/// routes' own collections: stacks, a gcdump, a dump, logs and live metrics each land in
/// the egress folder under dotnet-monitor's names.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_collecting_action_lands_its_artifact_from_a_net8_runtime() {
    let dir = TempDir::new("dsipc-rules").unwrap();
    let out = TempDir::new("dsipc-rules-out").unwrap();
    let mut opts = HostOptions::net8(240).env("TMPDIR", dir.path().as_os_str());
    opts.args = vec!["--counters".into(), "--sleeping-thread".into()];
    let mut host = HostedRuntime::spawn(&opts)
        .expect("a .NET 8 host (DSIPC_PYTHON, DSIPC_NET8_ROOT: see dsipc-runtimes.env)");
    let pid = host.wait_ready(Duration::from_secs(90)).expect("READY").pid;
    let egress = json!({ "Egress": "files" });
    let with = |extra: Value| {
        let mut s = egress.clone();
        s.as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        s
    };
    let rules = json!({
        "Everything": {
            "Filters": [{ "Key": "ProcessId", "Value": pid.to_string() }],
            "Trigger": { "Type": "Startup" },
            "Actions": [
                { "Type": "CollectStacks", "Settings": with(json!({ "Format": "PlainText" })) },
                { "Type": "CollectGCDump", "Settings": egress },
                { "Type": "CollectDump", "Settings": with(json!({ "Type": "Mini" })) },
                { "Type": "CollectLogs", "Settings": with(json!({ "Duration": "00:00:01" })) },
                { "Type": "CollectLiveMetrics", "Settings": with(json!({ "Duration": "00:00:02" })) }
            ]
        }
    });
    let (_server, addr) = serve(dir.path(), out.path(), rules, 1.0).await;
    let suffix = format!("_{}", pid);
    for (what, ext) in [
        ("stacks", format!("{}.stacks.txt", suffix)),
        ("gcdump", format!("{}.gcdump", suffix)),
        ("logs", format!("{}.txt", suffix)),
        ("live metrics", format!("{}.metrics.json", suffix)),
    ] {
        let files = until(what, || async {
            let f = landed(out.path(), &ext);
            if f.is_empty() {
                None
            } else {
                Some(f)
            }
        })
        .await;
        assert_eq!(files.len(), 1, "{}: {:?}", what, files);
    }
    let dump = until("the dump", || async {
        std::fs::read_dir(out.path())
            .unwrap()
            .flatten()
            .map(|e| e.path())
            .find(|p| {
                p.file_name()
                    .unwrap()
                    .to_string_lossy()
                    .starts_with("core_")
            })
    })
    .await;
    assert!(std::fs::metadata(&dump).unwrap().len() > 1000);
    let metrics = landed(out.path(), ".metrics.json");
    let text = std::fs::read_to_string(&metrics[0]).unwrap();
    assert!(text.contains("\"provider\":\"System.Runtime\""), "{}", text);
    let one = until("the rule Finished", || async {
        let one = json_at(addr, &format!("/collectionrules/Everything?pid={}", pid)).await;
        if one["state"] == "Finished" {
            Some(one)
        } else {
            None
        }
    })
    .await;
    assert_eq!(one["lifetimeOccurrences"], 1, "{}", one);
    host.kill();
}
