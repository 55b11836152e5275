//! A test-only builder of nettrace (V5) streams holding `Microsoft-Extensions-Logging`
//! events as the runtime's LoggingEventSource writes them (field names, order and types
//! from its source: FormattedMessage 1, MessageJson 5, ActivityJsonStart 6, ActivityJsonStop
//! 7; every field an Int32 or a String). Shared by dsipc-trace's and the CLI's tests.

#![allow(dead_code)]

#[path = "../../../tests/common/nettrace.rs"]
mod nettrace;

use nettrace::{event_block_content, utf16z, v4_metadata, Compressor, Header, V4Writer};

pub const PROVIDER: &str = "Microsoft-Extensions-Logging";
/// Metadata ids used by the builder.
pub const FORMATTED: u32 = 1;
pub const MESSAGE_JSON: u32 = 2;
pub const SCOPE_START: u32 = 3;
pub const SCOPE_STOP: u32 = 4;
/// An event of another provider.
pub const OTHER: u32 = 5;

const INT32: u32 = 9;
const STRING: u32 = 18;

/// A payload field.
pub enum F<'a> {
    I(i32),
    S(&'a str),
}

/// Appends fields as the runtime writes them.
pub fn payload(fields: &[F<'_>]) -> Vec<u8> {
    let mut p = Vec::new();
    for f in fields {
        match f {
            F::I(v) => p.extend_from_slice(&v.to_le_bytes()),
            F::S(s) => utf16z(&mut p, s),
        }
    }
    p
}

fn descriptions(fields: &[(u32, &str)]) -> Vec<u8> {
    let mut f = Vec::new();
    f.extend_from_slice(&(fields.len() as u32).to_le_bytes());
    for (ty, name) in fields {
        f.extend_from_slice(&ty.to_le_bytes());
        utf16z(&mut f, name);
    }
    f
}

/// (activity id, related activity id) of an event.
pub type Activity = ([u8; 16], [u8; 16]);

/// A stream under construction.
pub struct LogTrace {
    /// (metadata id, thread, payload, activity ids).
    events: Vec<(u32, u64, Vec<u8>, Activity)>,
    /// The activity ids the next events are written with (nil: none).
    pub activity: Activity,
    /// Events per block.
    pub per_block: usize,
}

impl Default for LogTrace {
    fn default() -> Self {
        LogTrace::new()
    }
}

impl LogTrace {
    pub fn new() -> LogTrace {
        LogTrace {
            events: Vec::new(),
            activity: ([0; 16], [0; 16]),
            per_block: 50,
        }
    }

    /// An `ILogger.Log` call: its FormattedMessage then its MessageJson event.
    #[allow(clippy::too_many_arguments)]
    pub fn log(
        &mut self,
        thread: u64,
        level: i32,
        category: &str,
        event_id: i32,
        event_name: &str,
        formatted: &str,
        arguments_json: &str,
        exception_json: &str,
    ) {
        self.raw(
            FORMATTED,
            thread,
            payload(&[
                F::I(level),
                F::I(1),
                F::S(category),
                F::I(event_id),
                F::S(event_name),
                F::S(formatted),
                F::S(""),
                F::S(""),
                F::S("00"),
            ]),
        );
        self.raw(
            MESSAGE_JSON,
            thread,
            payload(&[
                F::I(level),
                F::I(1),
                F::S(category),
                F::I(event_id),
                F::S(event_name),
                F::S(exception_json),
                F::S(arguments_json),
                F::S(formatted),
                F::S(""),
                F::S(""),
                F::S("00"),
            ]),
        );
    }

    /// `BeginScope`: ActivityJsonStart.
    pub fn scope_start(&mut self, thread: u64, id: i32, category: &str, arguments_json: &str) {
        self.raw(
            SCOPE_START,
            thread,
            payload(&[F::I(id), F::I(1), F::S(category), F::S(arguments_json)]),
        );
    }

    /// The scope's disposal: ActivityJsonStop.
    pub fn scope_stop(&mut self, thread: u64, id: i32, category: &str) {
        self.raw(
            SCOPE_STOP,
            thread,
            payload(&[F::I(id), F::I(1), F::S(category)]),
        );
    }

    /// Any event.
    pub fn raw(&mut self, metadata_id: u32, thread: u64, payload: Vec<u8>) {
        self.events
            .push((metadata_id, thread, payload, self.activity));
    }

    /// The whole stream: the metadata block, event blocks, the end of stream. Event `k` is
    /// at trace time sync + k seconds (the writer's sync time: 2024-05-22 10:11:12.500 UTC).
    pub fn bytes(&self) -> Vec<u8> {
        let mut w = V4Writer::new(8, 4242);
        let mut blobs = Vec::new();
        let mut c = Compressor::default();
        let common = [
            (INT32, "Level"),
            (INT32, "FactoryID"),
            (STRING, "LoggerName"),
            (INT32, "EventId"),
            (STRING, "EventName"),
        ];
        let activity = [
            (STRING, "ActivityTraceId"),
            (STRING, "ActivitySpanId"),
            (STRING, "ActivityTraceFlags"),
        ];
        let mut formatted = common.to_vec();
        formatted.push((STRING, "FormattedMessage"));
        formatted.extend_from_slice(&activity);
        let mut json = common.to_vec();
        json.extend_from_slice(&[
            (STRING, "ExceptionJson"),
            (STRING, "ArgumentsJson"),
            (STRING, "FormattedMessage"),
        ]);
        json.extend_from_slice(&activity);
        let start = [
            (INT32, "ID"),
            (INT32, "FactoryID"),
            (STRING, "LoggerName"),
            (STRING, "ArgumentsJson"),
        ];
        let stop = [(INT32, "ID"), (INT32, "FactoryID"), (STRING, "LoggerName")];
        let other = [(STRING, "Message")];
        for (id, provider, event_id, name, fields) in [
            (FORMATTED, PROVIDER, 1, "FormattedMessage", &formatted[..]),
            (MESSAGE_JSON, PROVIDER, 5, "MessageJson", &json[..]),
            (SCOPE_START, PROVIDER, 6, "ActivityJsonStart", &start[..]),
            (SCOPE_STOP, PROVIDER, 7, "ActivityJsonStop", &stop[..]),
            (OTHER, "My-Other-Source", 1, "FormattedMessage", &other[..]),
        ] {
            let m = v4_metadata(
                id,
                provider,
                event_id,
                name,
                2,
                Some(&descriptions(fields)),
                &[],
            );
            c.blob(&mut blobs, &Header::default(), &m, false);
        }
        w.block("MetadataBlock", &event_block_content(1, 0, 0, &blobs));
        let mut seq = 0u32;
        for chunk in self.events.chunks(self.per_block.max(1)) {
            let mut blobs = Vec::new();
            let mut c = Compressor::default();
            for (id, thread, payload, (activity, related)) in chunk {
                seq += 1;
                let h = Header {
                    metadata_id: *id,
                    sequence_number: seq,
                    capture_thread: *thread,
                    thread: *thread,
                    timestamp: 1_000_000 + i64::from(seq) * 10_000_000,
                    activity_id: *activity,
                    related_activity_id: *related,
                    ..Header::default()
                };
                c.blob(&mut blobs, &h, payload, false);
            }
            w.block("EventBlock", &event_block_content(1, 0, 0, &blobs));
        }
        w.end()
    }
}

/// An activity id for tests: `n` in its first byte.
pub fn activity(n: u8) -> [u8; 16] {
    let mut a = [0u8; 16];
    a[0] = n;
    a[15] = 0xA5;
    a
}

/// A sample session: two entries (one with a format and arguments inside two scopes, one
/// with an exception and no format), a scope closed, an event of another provider.
pub fn sample() -> LogTrace {
    let mut t = LogTrace::new();
    t.raw(OTHER, 7, payload(&[F::S("not a log")]));
    t.scope_start(7, 1, "App.Worker", r#"{"RequestId":"r-1","Attempt":2}"#);
    t.scope_start(7, 2, "App.Worker", r#"{"Path":"/a","Ok":true}"#);
    t.log(
        7,
        2,
        "App.Worker",
        42,
        "Processing",
        "Processing request 353f in 12 ms",
        r#"{"Id":"353f","Elapsed":"12","{OriginalFormat}":"Processing request {Id} in {Elapsed} ms"}"#,
        "{}",
    );
    t.scope_stop(7, 2, "App.Worker");
    t.scope_stop(7, 1, "App.Worker");
    t.log(
        9,
        4,
        "App.Db",
        0,
        "",
        "It failed \"badly\"",
        r#"{"Table":"users","Rows":3}"#,
        r#"{"TypeName":"System.InvalidOperationException","Message":"boom","HResult":"-2146233079","VerboseMessage":"System.InvalidOperationException: boom\n   at App.Db.Run()"}"#,
    );
    t
}
