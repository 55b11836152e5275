//! The ASP.NET request triggers (AspNetRequestCount, AspNetRequestDuration,
//! AspNetResponseStatus) on a fake runtime that plays a stream of the DiagnosticSource
//! bridge's request events (built to the runtime's layouts: `Activity1Start` /
//! `Activity1Stop`, `SourceName`, `EventName`, `Arguments`): a rule whose threshold the
//! requests cross fires and its Execute action runs; a rule beside it whose threshold they do
//! not cross is still Running; both read ONE session, which enables the bridge with
//! dotnet-monitor's request filter.
#![cfg(target_os = "linux")]

use dsipc::AnyRequest;
use dsipc_testkit::{StreamSpec, TempDir};
use serde_json::{json, Value};

mod common;
use common::rules::{fake, json_at, serve, until};

#[path = "../../tests/common/nettrace.rs"]
#[allow(dead_code)]
mod nettrace;

use nettrace::{diagnostic_source_payload, diagnostic_source_stream};

const HOSTING: &str = "Microsoft.AspNetCore";

/// `Activity1Start` of request `id` on `path`.
fn start(id: &str, path: &str) -> (u32, Vec<u8>) {
    let args = [
        ("ActivityId", id),
        ("Path", path),
        ("ActivityStartTime", "1"),
    ];
    let name = "Microsoft.AspNetCore.Hosting.HttpRequestIn.Start";
    (1, diagnostic_source_payload(HOSTING, name, &args))
}

/// `Activity1Stop` of request `id` on `path`: `status`, after `ticks` (100 ns).
fn stop(id: &str, path: &str, status: &str, ticks: &str) -> (u32, Vec<u8>) {
    let args = [
        ("ActivityId", id),
        ("Path", path),
        ("StatusCode", status),
        ("ActivityDuration", ticks),
    ];
    let name = "Microsoft.AspNetCore.Hosting.HttpRequestIn.Stop";
    (2, diagnostic_source_payload(HOSTING, name, &args))
}

/// A rule of `trigger` whose Execute action writes `marker`.
fn rule(trigger: Value, marker: &std::path::Path) -> Value {
    json!({
        "Trigger": trigger,
        "Actions": [{
            "Type": "Execute",
            "Settings": {
                "Path": "/bin/sh",
                "Arguments": format!("-c \"echo fired > {}\"", marker.display())
            }
        }],
        "Limits": { "ActionCount": 1, "ActionCountSlidingWindowDuration": "00:10:00" }
    })
}

/// Plays `events` to rules `fires` (whose threshold they cross) and `holds` (whose they do
/// not), both of `kind` with the settings given: `fires` runs its action and is counted on
/// `/collectionrules/{name}`; `holds` has not triggered; the one session the runtime got
/// enables the DiagnosticSource bridge with the request filter.
async fn fires_past_its_threshold(
    kind: &str,
    events: &[(u32, Vec<u8>)],
    fires: Value,
    holds: Value,
) {
    let dir = TempDir::new("dsipc-aspnet").unwrap();
    let out = TempDir::new("dsipc-aspnet-out").unwrap();
    let data: &'static [u8] = Box::leak(diagnostic_source_stream(events).into_boxed_slice());
    let rt = fake(&dir, StreamSpec::content(data));
    let (fired, held) = (out.path().join("fired"), out.path().join("held"));
    let rules = json!({
        "Fires": rule(json!({ "Type": kind, "Settings": fires }), &fired),
        "Holds": rule(json!({ "Type": kind, "Settings": holds }), &held),
    });
    let (_server, addr) = serve(dir.path(), out.path(), rules, 1.0).await;
    until("the rule's Execute action", || async {
        std::fs::read_to_string(&fired)
            .ok()
            .filter(|t| t == "fired\n")
    })
    .await;
    // The event that fired it was the last the other rule needed to see: it has its state.
    let one = json_at(addr, "/collectionrules/Fires").await;
    assert_eq!(one["lifetimeOccurrences"], 1, "{}", one);
    let other = json_at(addr, "/collectionrules/Holds").await;
    assert_eq!(other["state"], "Running", "{}", other);
    assert_eq!(other["lifetimeOccurrences"], 0, "{}", other);
    assert!(!held.exists());
    until("the rule Throttled after its one action", || async {
        let one = json_at(addr, "/collectionrules/Fires").await;
        Some(()).filter(|_| one["state"] == "Throttled")
    })
    .await;

    // The rules' session: the first the runtime got (a replay of the ended stream may add
    // more), the bridge alone (no counter trigger).
    let sessions: Vec<Vec<(String, u64, u32, String)>> = rt
        .received()
        .iter()
        .filter_map(|r| match r.request()? {
            AnyRequest::CollectTracing2(c) => Some(
                c.providers
                    .iter()
                    .map(|p| {
                        (
                            p.provider_name.to_string(),
                            p.keywords,
                            p.log_level,
                            p.arguments.to_string(),
                        )
                    })
                    .collect(),
            ),
            _ => None,
        })
        .collect();
    assert!(!sessions.is_empty());
    let providers = &sessions[0];
    assert_eq!(providers.len(), 1, "{:?}", providers);
    let (name, keywords, level, args) = &providers[0];
    assert_eq!(name, "Microsoft-Diagnostics-DiagnosticSource");
    assert_eq!((*keywords, *level), (3, 5));
    assert!(args.starts_with("FilterAndPayloadSpecs=\""), "{}", args);
    for needle in [
        "Microsoft.AspNetCore/Microsoft.AspNetCore.Hosting.HttpRequestIn.Start@Activity1Start:-\
         ActivityId=*Activity.Id;Request.Path;",
        "Microsoft.AspNetCore/Microsoft.AspNetCore.Hosting.HttpRequestIn.Stop@Activity1Stop:-\
         ActivityId=*Activity.Id;Request.Path;Response.StatusCode;\
         ActivityDuration=*Activity.Duration.Ticks",
    ] {
        assert!(args.contains(needle), "{}", args);
    }
}

/// Three requests within the minute: `RequestCount` 3 fires, 4 does not.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn aspnet_request_count_fires_when_the_requests_reach_the_count() {
    let events = [
        start("r1", "/a"),
        stop("r1", "/a", "200", "10"),
        start("r2", "/b"),
        stop("r2", "/b", "200", "10"),
        start("r3", "/a"),
        stop("r3", "/a", "200", "10"),
    ];
    let window = "00:01:00";
    fires_past_its_threshold(
        "AspNetRequestCount",
        &events,
        json!({ "RequestCount": 3, "SlidingWindowDuration": window }),
        json!({ "RequestCount": 4, "SlidingWindowDuration": window }),
    )
    .await;
}

/// A request of 2 s among fast ones: `RequestDuration` 1 s fires, 5 s does not.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn aspnet_request_duration_fires_on_a_request_slower_than_its_duration() {
    let events = [
        start("fast", "/a"),
        stop("fast", "/a", "200", "5000000"),
        start("slow", "/a"),
        stop("slow", "/a", "200", "20000000"),
    ];
    fires_past_its_threshold(
        "AspNetRequestDuration",
        &events,
        json!({ "RequestCount": 1, "RequestDuration": "00:00:01" }),
        json!({ "RequestCount": 1, "RequestDuration": "00:00:05" }),
    )
    .await;
}

/// Responses 200, 503, 404, 500: two in 500-599 fire `ResponseCount` 2 of them; one 404
/// does not fire `ResponseCount` 2 of 404.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn aspnet_response_status_fires_on_status_codes_in_its_range() {
    let mut events = Vec::new();
    for (id, status) in [("a", "200"), ("b", "503"), ("c", "404"), ("d", "500")] {
        events.push(start(id, "/x"));
        events.push(stop(id, "/x", status, "10"));
    }
    fires_past_its_threshold(
        "AspNetResponseStatus",
        &events,
        json!({ "StatusCodes": ["500-599"], "ResponseCount": 2 }),
        json!({ "StatusCodes": ["404"], "ResponseCount": 2 }),
    )
    .await;
}
