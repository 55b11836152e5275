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

/// A real capture of the bridge (tests/data/aspnet): the payloads and the metadata field
/// counts of its `Activity1Start` / `Activity1Stop` records, beside what
/// [`AspNetRequestSink`] decoded from the same bytes.
#[derive(Default)]
struct Capture {
    starts: Vec<Vec<u8>>,
    stops: Vec<Vec<u8>>,
    field_counts: Vec<usize>,
    stop_info: Option<EventInfo>,
    sink: AspNetRequestSink,
    out: Vec<RequestEvent>,
}

impl TraceSink for Capture {
    fn event(&mut self, e: &Event<'_>, info: Option<&EventInfo>, cx: &TraceContext<'_>) {
        if let Some(i) = info {
            let raw = match kind_of(i) {
                Some(Kind::Start) => Some(&mut self.starts),
                Some(Kind::Stop) => Some(&mut self.stops),
                None => None,
            };
            if kind_of(i) == Some(Kind::Stop) && self.stop_info.is_none() {
                self.stop_info = Some(i.clone());
            }
            if let Some(raw) = raw {
                raw.push(e.payload.to_vec());
                self.field_counts
                    .push(i.meta.record().map_or(0, |r| r.fields.len()));
            }
        }
        self.sink.event(e, info, cx);
        self.out.extend(self.sink.drain());
    }

    fn item(&mut self, _: &Item<'_>, _: &TraceContext<'_>) {}

    fn end(&mut self, end: &Result<(), StreamError>, cx: &TraceContext<'_>) {
        self.sink.end(end, cx);
    }
}

fn capture(file: &str) -> Capture {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/data/aspnet")
        .join(file);
    let bytes = std::fs::read(&path).unwrap();
    let mut d = TraceDispatcher::new();
    let mut c = Capture::default();
    d.feed(&bytes, &mut c).unwrap();
    d.finish(&mut c).unwrap();
    c
}

/// A real capture of the bridge fed by tests/runtime/host.py --aspnet-requests (503s of
/// about 30 ms on /api/values): every start and stop decodes, each stop pairs with the
/// start before it, its metadata describes `fields` fields, ids are of `id_format`, and
/// each payload is byte for byte what `diagnostic_source_payload` (the hand-built streams
/// of the other tests) makes of the values decoded, arguments in the filter spec's order.
fn real_capture_decodes(file: &str, fields: usize, id_format: fn(&str) -> bool) {
    let c = capture(file);
    assert!(!c.stops.is_empty(), "{:?}", c.sink.stats());
    assert_eq!(c.sink.stats().malformed, 0, "{:?}", c.sink.stats());
    assert_eq!(c.out.len(), c.starts.len() + c.stops.len());
    assert!(
        c.field_counts.iter().all(|&n| n == fields),
        "{:?}",
        c.field_counts
    );
    let mut starts = c.starts.iter();
    let mut stops = c.stops.iter();
    let mut open: Option<String> = None;
    for e in &c.out {
        match e {
            RequestEvent::Start {
                activity_id, path, ..
            } => {
                assert!(id_format(activity_id), "{}", activity_id);
                assert_eq!(path, "/api/values");
                let raw = starts.next().unwrap();
                // The start time (ticks since 0001) is not decoded: read it from the bytes
                // after the two arguments that are, then build the whole payload.
                let two = diagnostic_source_payload(
                    HOSTING,
                    START,
                    &[("ActivityId", activity_id), ("Path", path)],
                );
                let tail: Vec<u16> = raw[two.len()..]
                    .chunks(2)
                    .map(|b| u16::from_le_bytes([b[0], b[1]]))
                    .collect();
                let tail = String::from_utf16(&tail).unwrap();
                let parts: Vec<&str> = tail.split('\0').collect();
                assert_eq!(parts.len(), 3, "{:?}", parts);
                assert_eq!((parts[0], parts[2]), ("ActivityStartTime", ""));
                // 2026 is about 6.39e17 ticks after 0001-01-01.
                let ticks: u64 = parts[1].parse().unwrap();
                assert!(ticks > 630_000_000_000_000_000, "{}", ticks);
                let built = diagnostic_source_payload(
                    HOSTING,
                    START,
                    &[
                        ("ActivityId", activity_id),
                        ("Path", path),
                        ("ActivityStartTime", parts[1]),
                    ],
                );
                assert_eq!(raw, &built);
                open = Some(activity_id.clone());
            }
            RequestEvent::Stop {
                activity_id,
                path,
                status_code,
                duration,
                ..
            } => {
                assert_eq!(open.take().as_ref(), Some(activity_id));
                assert_eq!(*status_code, 503);
                assert!(*duration >= Duration::from_millis(30), "{:?}", duration);
                assert!(*duration < Duration::from_secs(10), "{:?}", duration);
                let ticks = (duration.as_nanos() / 100).to_string();
                let built = diagnostic_source_payload(
                    HOSTING,
                    STOP,
                    &[
                        ("ActivityId", activity_id),
                        ("Path", path),
                        ("StatusCode", "503"),
                        ("ActivityDuration", &ticks),
                    ],
                );
                assert_eq!(stops.next().unwrap(), &built);
            }
        }
    }
}

/// .NET 8.0.4's bridge: SourceName, EventName and Arguments described in the metadata;
/// W3C ids (00-<32 hex trace id>-<16 hex span id>-<2 hex flags>).
#[test]
fn a_real_net8_bridge_capture_decodes_and_matches_the_hand_built_payloads() {
    real_capture_decodes("net8.0.4-httprequestin.nettrace", 3, |id| {
        id.len() == 55 && id.starts_with("00-")
    });
}

/// .NET Core 3.1.23's bridge forwards the same events with the same payload layout, but
/// its EventPipe metadata describes no fields for them (its metadata generator cannot
/// describe the array of pairs): they decode by the layout the bridge writes.
/// Hierarchical ids (`|<8 hex>-<16 hex>.`).
#[test]
fn a_real_netcore31_bridge_capture_without_field_descriptions_decodes_by_its_layout() {
    real_capture_decodes("netcore3.1.23-httprequestin.nettrace", 0, |id| {
        id.starts_with('|') && id.ends_with('.')
    });
}

/// A bridge record without field descriptions (as .NET Core 3.x writes them) whose payload
/// is cut anywhere, or claims more pairs than it carries, is a `Payload` error, never a
/// panic.
#[test]
fn a_cut_payload_without_field_descriptions_is_an_error_not_a_panic() {
    let full = diagnostic_source_payload(
        HOSTING,
        STOP,
        &[
            ("ActivityId", "|a."),
            ("StatusCode", "500"),
            ("ActivityDuration", "1"),
        ],
    );
    let mut c = capture("netcore3.1.23-httprequestin.nettrace");
    // The record of a real 3.1 stop (no fields), fed payloads of our own.
    let info = c.stop_info.take().unwrap();
    let t = std::time::UNIX_EPOCH;
    assert!(matches!(
        decode(&info, &full, t),
        Ok(Some(RequestEvent::Stop { .. }))
    ));
    for cut in 0..full.len() {
        assert_eq!(
            decode(&info, &full[..cut], t),
            Err(RequestError::Payload),
            "{}",
            cut
        );
    }
}
