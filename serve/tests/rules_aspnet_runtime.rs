//! The ASP.NET request triggers (AspNetRequestCount, AspNetResponseStatus,
//! AspNetRequestDuration) on real .NET 8 and .NET Core 3.1 runtimes whose requests come
//! through their own DiagnosticSource bridge: tests/runtime/host.py --aspnet-requests plays
//! ASP.NET Core's hosting layer (a DiagnosticListener `Microsoft.AspNetCore` starting and
//! stopping the `HttpRequestIn` activity with a context whose Request.Path and
//! Response.StatusCode the bridge reads by reflection), so everything from the runtime's
//! bridge, with dotnet-monitor's filter spec, to the rule's action is real. Slow 500s fire
//! all three rules; fast 200s fire only the request count, and the status and duration
//! rules, which read the same session's same requests, are still Running when it fires.
//! (.NET Core 3.1's bridge describes none of the events' fields in its EventPipe metadata;
//! the decoder reads them by their layout, see trace/src/aspnet.rs.)
#![cfg(target_os = "linux")]

use std::path::Path;

use dsipc_testkit::TempDir;
use serde_json::{json, Value};

mod common;
use common::rules::{json_at, real_host, serve, until};

/// A rule of `trigger` whose Execute action writes its name into `out/name`.
fn rule(name: &str, kind: &str, settings: Value, out: &Path) -> Value {
    json!({
        "Trigger": { "Type": kind, "Settings": settings },
        "Actions": [{
            "Type": "Execute",
            "Settings": {
                "Path": "/bin/sh",
                "Arguments": format!("-c \"echo {} > {}\"", name, out.join(name).display())
            }
        }],
        "Limits": { "ActionCount": 1, "ActionCountSlidingWindowDuration": "00:10:00" }
    })
}

/// The three rules: `Count` after `count` requests within the minute; `Errors` after three
/// responses in 500-599; `Slow` after three requests slower than one second.
fn rules(count: u32, out: &Path) -> Value {
    json!({
        "Count": rule("Count", "AspNetRequestCount",
            json!({ "RequestCount": count, "SlidingWindowDuration": "00:01:00" }), out),
        "Errors": rule("Errors", "AspNetResponseStatus",
            json!({ "StatusCodes": ["500-599"], "ResponseCount": 3 }), out),
        "Slow": rule("Slow", "AspNetRequestDuration",
            json!({ "RequestCount": 3, "RequestDuration": "00:00:01" }), out),
    })
}

/// Polls until rule `name`'s action has run (its marker holds its name) and
/// `/collectionrules/{name}` counts the firing.
async fn fired(addr: std::net::SocketAddr, out: &Path, name: &str) {
    let marker = out.join(name);
    until(&format!("rule {}'s Execute action", name), || async {
        std::fs::read_to_string(&marker)
            .ok()
            .filter(|t| t.trim() == name)
    })
    .await;
    let state = json_at(addr, &format!("/collectionrules/{}", name)).await;
    assert_eq!(state["lifetimeOccurrences"], 1, "{}", state);
}

/// Requests of 1.2 s answered 500, two a second, on `runtime`: all three rules fire.
async fn aspnet_rules_fire_on_slow_500_requests(runtime: &str) {
    let dir = TempDir::new("dsipc-aspnet-rt").unwrap();
    let out = TempDir::new("dsipc-aspnet-rt-out").unwrap();
    let (mut host, _) = real_host(
        &dir,
        runtime,
        &[
            "--aspnet-requests",
            "2",
            "--aspnet-status",
            "500",
            "--aspnet-request-ms",
            "1200",
        ],
    );
    let (_server, addr) = serve(dir.path(), out.path(), rules(3, out.path()), 1.0).await;
    for name in ["Count", "Errors", "Slow"] {
        fired(addr, out.path(), name).await;
    }
    host.kill();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn aspnet_rules_fire_on_a_net8_runtimes_slow_500_requests() {
    aspnet_rules_fire_on_slow_500_requests("net8").await;
}

/// .NET Core 3.1's bridge describes no fields of its events: the decoder reads them by
/// their layout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn aspnet_rules_fire_on_a_netcore31_runtimes_slow_500_requests() {
    aspnet_rules_fire_on_slow_500_requests("netcore31").await;
}

/// Fast requests answered 200, twenty a second, on `runtime`: `Count` fires at 30
/// requests; `Errors` and `Slow`, which saw the same 30 requests on the same session, have
/// not triggered.
async fn aspnet_status_and_duration_rules_hold_on_fast_200_requests(runtime: &str) {
    let dir = TempDir::new("dsipc-aspnet-rt").unwrap();
    let out = TempDir::new("dsipc-aspnet-rt-out").unwrap();
    let (mut host, _) = real_host(&dir, runtime, &["--aspnet-requests", "20"]);
    let (_server, addr) = serve(dir.path(), out.path(), rules(30, out.path()), 1.0).await;
    fired(addr, out.path(), "Count").await;
    for name in ["Errors", "Slow"] {
        let state = json_at(addr, &format!("/collectionrules/{}", name)).await;
        assert_eq!(state["state"], "Running", "{}", state);
        assert_eq!(state["lifetimeOccurrences"], 0, "{}", state);
        assert!(!out.path().join(name).exists(), "{} fired", name);
    }
    host.kill();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn aspnet_status_and_duration_rules_hold_on_a_net8_runtimes_fast_200_requests() {
    aspnet_status_and_duration_rules_hold_on_fast_200_requests("net8").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn aspnet_status_and_duration_rules_hold_on_a_netcore31_runtimes_fast_200_requests() {
    aspnet_status_and_duration_rules_hold_on_fast_200_requests("netcore31").await;
}

/// The same rules on a .NET 8 runtime without requests: a rule beside them on the runtime's
/// gc-heap-size (always above 1 MB) fires, by then the request rules' session has been
/// running as long, and they are all still Running.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn aspnet_rules_hold_on_a_net8_runtime_without_requests() {
    let dir = TempDir::new("dsipc-aspnet-rt").unwrap();
    let out = TempDir::new("dsipc-aspnet-rt-out").unwrap();
    let (mut host, _) = real_host(&dir, "net8", &["--counters"]);
    let mut all = rules(1, out.path());
    all["Heap"] = rule(
        "Heap",
        "EventCounter",
        json!({
            "ProviderName": "System.Runtime",
            "CounterName": "gc-heap-size",
            "GreaterThan": 1,
            "SlidingWindowDuration": "00:00:03"
        }),
        out.path(),
    );
    let (_server, addr) = serve(dir.path(), out.path(), all, 1.0).await;
    fired(addr, out.path(), "Heap").await;
    for name in ["Count", "Errors", "Slow"] {
        let state = json_at(addr, &format!("/collectionrules/{}", name)).await;
        assert_eq!(state["state"], "Running", "{}", state);
        assert_eq!(state["lifetimeOccurrences"], 0, "{}", state);
        assert!(!out.path().join(name).exists(), "{} fired", name);
    }
    host.kill();
}
