//! ASP.NET Core requests as dotnet-monitor's AspNet triggers see them: the
//! `Microsoft.AspNetCore.Hosting.HttpRequestIn` activity's start and stop, forwarded by the
//! runtime's DiagnosticSource bridge (the `Microsoft-Diagnostics-DiagnosticSource`
//! EventSource) as its `Activity1Start` / `Activity1Stop` events when a session asks for them
//! with [`FILTER_AND_PAYLOAD_SPECS`] (dotnet/diagnostics' AspNetTriggerSourceConfiguration).
//!
//! Each event's payload is `SourceName`, `EventName` and `Arguments`, an array of
//! `{Key, Value}` string pairs the filter spec chose: `ActivityId` (the activity's id),
//! `Path` (the request path), and on the stop `StatusCode` (decimal) and `ActivityDuration`
//! (the activity's duration in 100 ns ticks, decimal). [`AspNetRequestSink`] turns them into
//! [`RequestEvent`]s; a payload that lacks what it must carry is a [`RequestError`] and the
//! event is skipped. .NET 5+ describes these fields in the events' EventPipe metadata;
//! .NET Core 3.x describes none (its metadata generator cannot describe the array of
//! pairs), so a record without field descriptions is read by the layout the bridge writes:
//! NUL-terminated UTF-16 `SourceName` and `EventName`, a `u16` count, then that many
//! `Key`, `Value` strings (tests/data/aspnet has a real capture of each).

use std::time::{Duration, SystemTime};

use dsipc::nettrace::{Event, Item, TraceStr, Value};

use crate::counters::{arguments, CounterProvider};
use crate::heap::bulk::Reader;
use crate::{EventInfo, StreamError, TraceContext, TraceSink};

/// The EventSource that forwards DiagnosticSource (DiagnosticListener) events.
pub const DIAGNOSTIC_SOURCE_PROVIDER: &str = "Microsoft-Diagnostics-DiagnosticSource";
/// Its `Messages` keyword (diagnostic messages about the bridge itself).
pub const KEYWORD_MESSAGES: u64 = 0x1;
/// Its `Events` keyword (the forwarded events, `Activity1Start` / `Activity1Stop` among them).
pub const KEYWORD_EVENTS: u64 = 0x2;
/// Verbose: the level dotnet-monitor asks for.
pub const LEVEL: u32 = 5;
/// The DiagnosticListener ASP.NET Core's hosting layer writes to.
pub const SOURCE_NAME: &str = "Microsoft.AspNetCore";

/// The `FilterAndPayloadSpecs` argument: the hosting layer's `HttpRequestIn.Start` as
/// `Activity1Start` with the activity id, the path and the start time; its `HttpRequestIn.Stop`
/// as `Activity1Stop` with the activity id, the path, the status code and the duration in
/// ticks (one spec per line, `source/event@bridge-event:-transforms`).
pub const FILTER_AND_PAYLOAD_SPECS: &str = concat!(
    "Microsoft.AspNetCore/Microsoft.AspNetCore.Hosting.HttpRequestIn.Start@Activity1Start:-",
    "ActivityId=*Activity.Id;Request.Path;ActivityStartTime=*Activity.StartTimeUtc.Ticks\r\n",
    "Microsoft.AspNetCore/Microsoft.AspNetCore.Hosting.HttpRequestIn.Stop@Activity1Stop:-",
    "ActivityId=*Activity.Id;Request.Path;Response.StatusCode;",
    "ActivityDuration=*Activity.Duration.Ticks\r\n",
);

/// Longest activity id taken, in bytes of UTF-8 (W3C ids are 55, hierarchical ids rarely
/// past a few hundred). A consumer keeps ids of running requests: this bounds each.
pub const MAX_ACTIVITY_ID: usize = 1024;

/// The provider a session enables to receive the request events.
pub fn provider() -> CounterProvider {
    CounterProvider {
        name: DIAGNOSTIC_SOURCE_PROVIDER.to_string(),
        keywords: KEYWORD_MESSAGES | KEYWORD_EVENTS,
        level: LEVEL,
        arguments: arguments(&[("FilterAndPayloadSpecs", FILTER_AND_PAYLOAD_SPECS)]),
    }
}

/// A request's start or stop.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RequestEvent {
    /// A request started.
    Start {
        /// Its activity's id (pairs it with its stop).
        activity_id: String,
        /// The request's path.
        path: String,
        /// The event's time on the trace's clock.
        time: SystemTime,
    },
    /// A request stopped.
    Stop {
        /// Its activity's id.
        activity_id: String,
        /// The request's path.
        path: String,
        /// The response's status code.
        status_code: u16,
        /// How long the request took (the activity's duration).
        duration: Duration,
        /// The event's time on the trace's clock.
        time: SystemTime,
    },
}

/// Why a request event was skipped.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum RequestError {
    /// The payload does not match its metadata's field descriptions (or has no
    /// `Arguments` array of `{Key, Value}` strings).
    Payload,
    /// An argument the event must carry is missing.
    MissingArgument(&'static str),
    /// An argument is not what it must be (a number that does not parse, an id too long).
    BadArgument {
        /// The argument.
        argument: &'static str,
        /// Its value (at most 64 bytes of it).
        value: String,
    },
}

impl std::fmt::Display for RequestError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RequestError::Payload => {
                write!(f, "a request event's payload does not match its metadata")
            }
            RequestError::MissingArgument(a) => {
                write!(f, "a request event lacks its {} argument", a)
            }
            RequestError::BadArgument { argument, value } => {
                write!(
                    f,
                    "a request event's {} is not valid: {:?}",
                    argument, value
                )
            }
        }
    }
}

impl std::error::Error for RequestError {}

/// Which bridge event a record is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Start,
    Stop,
}

/// `Activity1Start` (id 4) or `Activity1Stop` (id 5) of the bridge: by name as the runtime
/// writes it (or as TraceEvent spells it), by id when the record has no name.
fn kind_of(info: &EventInfo) -> Option<Kind> {
    if info.meta.provider != DIAGNOSTIC_SOURCE_PROVIDER {
        return None;
    }
    match (info.meta.name.as_str(), info.meta.event_id) {
        ("Activity1Start", _) | ("Activity1/Start", _) | ("", 4) => Some(Kind::Start),
        ("Activity1Stop", _) | ("Activity1/Stop", _) | ("", 5) => Some(Kind::Stop),
        _ => None,
    }
}

/// The arguments a trigger reads, as found.
#[derive(Default)]
struct Arguments {
    activity_id: Option<String>,
    path: Option<String>,
    status_code: Option<String>,
    duration: Option<String>,
}

impl Arguments {
    /// Keeps `value` when `key` is an argument a trigger reads (any case).
    fn take(&mut self, key: TraceStr<'_>, value: TraceStr<'_>) {
        let key = crate::metadata::lossy(key);
        let slot = if key.eq_ignore_ascii_case("ActivityId") {
            &mut self.activity_id
        } else if key.eq_ignore_ascii_case("Path") {
            &mut self.path
        } else if key.eq_ignore_ascii_case("StatusCode") {
            &mut self.status_code
        } else if key.eq_ignore_ascii_case("ActivityDuration") {
            &mut self.duration
        } else {
            return;
        };
        *slot = Some(crate::metadata::lossy(value));
    }
}

/// `value` cut to 64 bytes (on a char boundary), for an error.
fn excerpt(value: &str) -> String {
    let mut end = value.len().min(64);
    while !value.is_char_boundary(end) {
        end -= 1;
    }
    value[..end].to_string()
}

/// Decodes one event of `info`'s record: `Ok(None)` when it is not a request event of the
/// hosting layer (another provider, event or DiagnosticListener).
pub fn decode(
    info: &EventInfo,
    payload: &[u8],
    time: SystemTime,
) -> Result<Option<RequestEvent>, RequestError> {
    let kind = match kind_of(info) {
        Some(k) => k,
        None => return Ok(None),
    };
    let record = info.meta.record().map_err(|_| RequestError::Payload)?;
    let mut source_ok = false;
    let mut args = Arguments::default();
    let mut saw_arguments = false;
    if record.fields.is_empty() && !record.fields_malformed {
        // .NET Core 3.x describes no fields of these events (its EventPipe metadata
        // generator cannot describe the array of pairs): read the layout the bridge writes.
        let mut r = Reader::new(payload, 8);
        let err = |_| RequestError::Payload;
        source_ok = TraceStr::utf16(r.utf16z().map_err(err)?).eq_str(SOURCE_NAME);
        r.utf16z().map_err(err)?; // EventName
        for _ in 0..r.u16().map_err(err)? {
            let key = TraceStr::utf16(r.utf16z().map_err(err)?);
            let value = TraceStr::utf16(r.utf16z().map_err(err)?);
            args.take(key, value);
        }
        saw_arguments = true;
    }
    for field in record.fields.walk(payload) {
        let field = field.map_err(|_| RequestError::Payload)?;
        if field.name.eq_str("SourceName") {
            source_ok = field
                .value
                .as_str()
                .map_or(false, |s| s.eq_str(SOURCE_NAME));
        } else if field.name.eq_str("Arguments") {
            let array = match field.value {
                Value::Array(a) => a,
                _ => return Err(RequestError::Payload),
            };
            saw_arguments = true;
            for element in array.iter() {
                let object = match element.map_err(|_| RequestError::Payload)? {
                    Value::Object(o) => o,
                    _ => return Err(RequestError::Payload),
                };
                let key = object.get("Key").map_err(|_| RequestError::Payload)?;
                let value = object.get("Value").map_err(|_| RequestError::Payload)?;
                match (key.and_then(|k| k.as_str()), value) {
                    (Some(k), Some(Value::String(v))) => args.take(k, v),
                    _ => return Err(RequestError::Payload),
                }
            }
        }
    }
    if !source_ok {
        return Ok(None);
    }
    if !saw_arguments {
        return Err(RequestError::Payload);
    }
    let activity_id = args
        .activity_id
        .ok_or(RequestError::MissingArgument("ActivityId"))?;
    if activity_id.len() > MAX_ACTIVITY_ID {
        return Err(RequestError::BadArgument {
            argument: "ActivityId",
            value: excerpt(&activity_id),
        });
    }
    // A request without a path is matched as the empty path, as dotnet-monitor does.
    let path = args.path.unwrap_or_default();
    match kind {
        Kind::Start => Ok(Some(RequestEvent::Start {
            activity_id,
            path,
            time,
        })),
        Kind::Stop => {
            let status = args
                .status_code
                .ok_or(RequestError::MissingArgument("StatusCode"))?;
            let status_code =
                status
                    .trim()
                    .parse::<u16>()
                    .map_err(|_| RequestError::BadArgument {
                        argument: "StatusCode",
                        value: excerpt(&status),
                    })?;
            let ticks = args
                .duration
                .ok_or(RequestError::MissingArgument("ActivityDuration"))?;
            let duration = ticks
                .trim()
                .parse::<u64>()
                .map(|t| Duration::new(t / 10_000_000, (t % 10_000_000) as u32 * 100))
                .map_err(|_| RequestError::BadArgument {
                    argument: "ActivityDuration",
                    value: excerpt(&ticks),
                })?;
            Ok(Some(RequestEvent::Stop {
                activity_id,
                path,
                status_code,
                duration,
                time,
            }))
        }
    }
}

/// What an [`AspNetRequestSink`] saw.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RequestStats {
    /// Request events handed out.
    pub requests: u64,
    /// Request events skipped (see [`last_error`](Self::last_error)).
    pub malformed: u64,
    /// The last reason an event was skipped.
    pub last_error: Option<RequestError>,
    /// The stream could not be parsed past this error.
    pub stream_error: Option<String>,
}

/// The request events of a stream as one sink of a [`TraceDispatcher`](crate::TraceDispatcher)
/// (beside a counters sink, say), ready to be taken with [`drain`](Self::drain) after each
/// feed. Memory: the events of the bytes fed since the last drain.
#[derive(Debug, Default)]
pub struct AspNetRequestSink {
    ready: Vec<RequestEvent>,
    stats: RequestStats,
}

impl AspNetRequestSink {
    /// An empty sink.
    pub fn new() -> AspNetRequestSink {
        AspNetRequestSink::default()
    }

    /// What was seen so far.
    pub fn stats(&self) -> &RequestStats {
        &self.stats
    }

    /// Takes the request events ready, in stream order.
    pub fn drain(&mut self) -> std::vec::Drain<'_, RequestEvent> {
        self.ready.drain(..)
    }
}

impl TraceSink for AspNetRequestSink {
    fn event(&mut self, e: &Event<'_>, info: Option<&EventInfo>, cx: &TraceContext<'_>) {
        let info = match info {
            Some(i) => i,
            None => return,
        };
        match decode(info, e.payload, cx.time(e.timestamp)) {
            Ok(Some(r)) => {
                self.stats.requests += 1;
                self.ready.push(r);
            }
            Ok(None) => {}
            Err(err) => {
                self.stats.malformed += 1;
                self.stats.last_error = Some(err);
            }
        }
    }

    fn item(&mut self, _: &Item<'_>, _: &TraceContext<'_>) {}

    fn end(&mut self, end: &Result<(), StreamError>, _: &TraceContext<'_>) {
        if let Err(e) = end {
            if !e.is_truncation() && self.stats.stream_error.is_none() {
                self.stats.stream_error = Some(e.to_string());
            }
        }
    }
}

#[cfg(test)]
#[path = "aspnet_tests.rs"]
mod tests;
