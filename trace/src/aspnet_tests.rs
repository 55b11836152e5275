use std::time::Duration;

use super::*;
use crate::TraceDispatcher;

#[path = "../../tests/common/nettrace.rs"]
#[allow(dead_code)]
mod common;

use common::{diagnostic_source_payload, diagnostic_source_stream};

const HOSTING: &str = "Microsoft.AspNetCore";
const START: &str = "Microsoft.AspNetCore.Hosting.HttpRequestIn.Start";
const STOP: &str = "Microsoft.AspNetCore.Hosting.HttpRequestIn.Stop";

fn run(events: &[(u32, Vec<u8>)]) -> (Vec<RequestEvent>, RequestStats) {
    let bytes = diagnostic_source_stream(events);
    let mut d = TraceDispatcher::new();
    let mut sink = AspNetRequestSink::new();
    let mut out = Vec::new();
    // Small chunks: events split across feeds decode the same.
    for c in bytes.chunks(7) {
        d.feed(c, &mut sink).unwrap();
        out.extend(sink.drain());
    }
    d.finish(&mut sink).unwrap();
    out.extend(sink.drain());
    (out, sink.stats().clone())
}

fn start(id: &str, path: &str) -> (u32, Vec<u8>) {
    let args = [
        ("ActivityId", id),
        ("Path", path),
        ("ActivityStartTime", "638000000000000000"),
    ];
    (1, diagnostic_source_payload(HOSTING, START, &args))
}

fn stop(args: &[(&str, &str)]) -> (u32, Vec<u8>) {
    (2, diagnostic_source_payload(HOSTING, STOP, args))
}

fn parts(e: &RequestEvent) -> (&str, &str, Option<(u16, Duration)>) {
    match e {
        RequestEvent::Start {
            activity_id, path, ..
        } => (activity_id, path, None),
        RequestEvent::Stop {
            activity_id,
            path,
            status_code,
            duration,
            ..
        } => (activity_id, path, Some((*status_code, *duration))),
    }
}

#[test]
fn request_start_and_stop_decode_from_the_bridge_payload() {
    let id = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";
    let (out, stats) = run(&[
        start(id, "/api/values"),
        stop(&[
            ("ActivityId", id),
            ("Path", "/api/values"),
            ("StatusCode", "503"),
            ("ActivityDuration", "12345678"),
        ]),
    ]);
    assert_eq!(out.len(), 2, "{:?}", stats);
    assert_eq!(parts(&out[0]), (id, "/api/values", None));
    assert_eq!(
        parts(&out[1]),
        (
            id,
            "/api/values",
            Some((503, Duration::from_nanos(1_234_567_800)))
        )
    );
    assert_eq!((stats.requests, stats.malformed), (2, 0));
}

#[test]
fn argument_keys_match_without_case_and_unknown_keys_are_ignored() {
    let (out, stats) = run(&[stop(&[
        ("activityid", "|a.1."),
        ("PATH", "/x"),
        ("Method", "GET"),
        ("statusCode", "200"),
        ("activityDuration", "10"),
    ])]);
    assert_eq!(stats.malformed, 0, "{:?}", stats.last_error);
    assert_eq!(
        parts(&out[0]),
        ("|a.1.", "/x", Some((200, Duration::from_micros(1))))
    );
}

#[test]
fn other_listeners_and_bridge_events_are_not_requests() {
    let args = [("ActivityId", "1"), ("Path", "/")];
    let (out, stats) = run(&[
        (
            1,
            diagnostic_source_payload("HttpHandlerDiagnosticListener", START, &args),
        ),
        (3, diagnostic_source_payload(HOSTING, START, &args)),
    ]);
    assert!(out.is_empty(), "{:?}", out);
    assert_eq!((stats.requests, stats.malformed), (0, 0));
}

#[test]
fn a_stop_without_what_it_must_carry_is_skipped_with_its_reason() {
    let cases: [(&[(&str, &str)], RequestError); 5] = [
        (
            &[
                ("Path", "/"),
                ("StatusCode", "200"),
                ("ActivityDuration", "1"),
            ],
            RequestError::MissingArgument("ActivityId"),
        ),
        (
            &[("ActivityId", "a"), ("ActivityDuration", "1")],
            RequestError::MissingArgument("StatusCode"),
        ),
        (
            &[("ActivityId", "a"), ("StatusCode", "200")],
            RequestError::MissingArgument("ActivityDuration"),
        ),
        (
            &[
                ("ActivityId", "a"),
                ("StatusCode", "70000"),
                ("ActivityDuration", "1"),
            ],
            RequestError::BadArgument {
                argument: "StatusCode",
                value: "70000".into(),
            },
        ),
        (
            &[
                ("ActivityId", "a"),
                ("StatusCode", "200"),
                ("ActivityDuration", "-5"),
            ],
            RequestError::BadArgument {
                argument: "ActivityDuration",
                value: "-5".into(),
            },
        ),
    ];
    for (args, want) in cases.iter() {
        let (out, stats) = run(&[stop(args), start("ok", "/")]);
        // The bad event is skipped; the next one still decodes.
        assert_eq!(out.len(), 1, "{:?}", args);
        assert_eq!(stats.malformed, 1);
        assert_eq!(stats.last_error.as_ref(), Some(want));
    }
}

#[test]
fn a_truncated_payload_or_an_overlong_id_is_an_error_not_a_panic() {
    let (_, good) = start("abc", "/path");
    let mut events = Vec::new();
    for cut in 0..good.len() {
        events.push((1, good[..cut].to_vec()));
    }
    let long = "x".repeat(MAX_ACTIVITY_ID + 1);
    events.push(start(&long, "/"));
    let (out, stats) = run(&events);
    assert!(out.is_empty(), "{:?}", out);
    assert_eq!(stats.malformed, events.len() as u64);
    match stats.last_error {
        Some(RequestError::BadArgument { argument, value }) => {
            assert_eq!((argument, value.len()), ("ActivityId", 64))
        }
        other => panic!("{:?}", other),
    }
}

#[test]
fn the_provider_carries_the_filter_spec_quoted() {
    let p = provider();
    assert_eq!(p.name, "Microsoft-Diagnostics-DiagnosticSource");
    assert_eq!((p.keywords, p.level), (3, 5));
    let spec = p
        .arguments
        .strip_prefix("FilterAndPayloadSpecs=\"")
        .and_then(|s| s.strip_suffix('"'))
        .unwrap();
    assert_eq!(spec, FILTER_AND_PAYLOAD_SPECS);
    assert!(spec.contains("HttpRequestIn.Stop@Activity1Stop:-ActivityId=*Activity.Id;"));
    assert!(spec.contains("ActivityDuration=*Activity.Duration.Ticks"));
}
