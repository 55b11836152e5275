//! ILogger output collected through EventPipe from the `Microsoft-Extensions-Logging`
//! provider (the runtime's `LoggingEventSource`), decoded into [`LogEntry`] values as
//! dotnet-monitor's `/logs` builds them, and written as its three formats (newline-delimited
//! JSON, JSON sequences, plain text).
//!
//! The session asks for the provider's `FormattedMessage` and `JsonMessage` keywords
//! ([`SESSION_KEYWORDS`]); per `ILogger.Log` call the runtime writes a `FormattedMessage`
//! event then a `MessageJson` event, and per `BeginScope` an `ActivityJsonStart` (its
//! `ArgumentsJson` is the scope's state) and on its disposal an `ActivityJsonStop`. An entry
//! comes out per `MessageJson` event:
//!
//! - its arguments are the `ArgumentsJson` object; with an `{OriginalFormat}` member the
//!   arguments are the format's holes in order, each with its value, then
//!   `{OriginalFormat}`, and the message is the format filled in (as `LogValuesFormatter`
//!   does); without one, the members as they are and the message of the `FormattedMessage`
//!   event before it;
//! - its exception is the `ExceptionJson`'s `VerboseMessage` (`{}`: none);
//! - its scopes, outermost first, follow activity ids as dotnet-monitor's do: the session
//!   also turns on TplEventSource's `TasksFlowActivityIds` ([`SESSION_PROVIDERS`]), so each
//!   `ActivityJsonStart` branches a new activity id whose related id is the enclosing scope's,
//!   and an entry logged in a scope (after any number of `await`s, on any thread) carries the
//!   innermost scope's activity id. The entry's scopes are that scope and its ancestors (found
//!   by its activity id, else its related id); a scope is forgotten at its
//!   `ActivityJsonStop` (by activity id). Events without activity ids (V6 streams carry them
//!   in label lists, which this decoder does not read; a session without the TPL keyword)
//!   fall back to the scopes open on the logging thread.
//!
//! Bounds: a string field longer than [`MAX_STRING`], an argument list or scope larger than
//! [`MAX_ARGUMENTS`] members, JSON nested deeper than [`MAX_JSON_DEPTH`] is malformed (the
//! event is counted in [`LogStats::malformed`] and skipped, never a panic); at most
//! [`MAX_OPEN_SCOPES`] scopes are held, [`MAX_SCOPE_DEPTH`] per thread, and
//! [`MAX_METADATA`] metadata records.
//!
//! ```
//! use dsipc_trace::logs::{LogDecoder, LogFormat};
//!
//! # fn chunks() -> Vec<Vec<u8>> { Vec::new() }
//! let mut decoder = LogDecoder::new();
//! let mut text = String::new();
//! for chunk in chunks() {
//!     if let Err(e) = decoder.feed(&chunk, &mut |entry| LogFormat::NdJson.write(&entry, &mut text)) {
//!         eprintln!("{}", e);
//!         break;
//!     }
//! }
//! let _ = decoder.finish(&mut |entry| LogFormat::NdJson.write(&entry, &mut text));
//! ```

use crate::TraceClock;
use std::collections::HashMap;
use std::fmt;
use std::time::{SystemTime, UNIX_EPOCH};

use std::sync::Arc;

use dsipc::nettrace::{Format, Item, MetadataRecord, NettraceParser, Value as V};
use dsipc::wire::Guid;

use crate::format::push_json_string;
use crate::{MetadataTable, StreamError, TraceStream};

/// The provider's name.
pub const PROVIDER: &str = "Microsoft-Extensions-Logging";
/// Keyword: events about the event source itself.
pub const KEYWORD_META: u64 = 1;
/// Keyword: `Message` events (arguments as key-value pairs).
pub const KEYWORD_MESSAGE: u64 = 2;
/// Keyword: `FormattedMessage` events (the message as text).
pub const KEYWORD_FORMATTED_MESSAGE: u64 = 4;
/// Keyword: `MessageJson` events (arguments as JSON) and the JSON scope events.
pub const KEYWORD_JSON_MESSAGE: u64 = 8;
/// The keywords dotnet-monitor's `/logs` session enables (FormattedMessage | JsonMessage).
pub const SESSION_KEYWORDS: u64 = KEYWORD_FORMATTED_MESSAGE | KEYWORD_JSON_MESSAGE;
/// The runtime's task library event source: its [`TPL_TASKS_FLOW_ACTIVITY_IDS`] keyword makes
/// the runtime give every Start event a new activity id that flows across `await`s.
pub const TPL_PROVIDER: &str = "System.Threading.Tasks.TplEventSource";
/// TplEventSource's `TasksFlowActivityIds` keyword (no events of its own).
pub const TPL_TASKS_FLOW_ACTIVITY_IDS: u64 = 0x80;
/// The session's providers besides the logging provider itself (whose level and filter specs
/// come from the request): `(name, keywords, level)`. TplEventSource at Informational, the
/// level the runtime's activity tracker asks for.
pub const SESSION_PROVIDERS: [(&str, u64, u32); 1] =
    [(TPL_PROVIDER, TPL_TASKS_FLOW_ACTIVITY_IDS, 4)];

/// Longest string field taken, in UTF-16 code units (a message, an exception's text).
pub const MAX_STRING: usize = 1 << 20;
/// Most members of an argument list or a scope.
pub const MAX_ARGUMENTS: usize = 1024;
/// Deepest JSON nesting read in `ArgumentsJson` and `ExceptionJson`.
pub const MAX_JSON_DEPTH: usize = 32;
/// Most scopes held open at once (all activities and threads; dotnet-monitor's scope limit).
pub const MAX_OPEN_SCOPES: usize = 10_000;
/// Most scopes one entry can be in (nested on one activity chain or one thread).
pub const MAX_SCOPE_DEPTH: usize = 64;
/// Most distinct metadata records kept.
pub const MAX_METADATA: usize = 4096;

const FORMATTED_MESSAGE: u32 = 1;
const MESSAGE_JSON: u32 = 5;
const ACTIVITY_JSON_START: u32 = 6;
const ACTIVITY_JSON_STOP: u32 = 7;

/// An `ILogger` level (`Microsoft.Extensions.Logging.LogLevel`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum LogLevel {
    /// 0.
    Trace,
    /// 1.
    Debug,
    /// 2.
    Information,
    /// 3.
    Warning,
    /// 4.
    Error,
    /// 5.
    Critical,
    /// 6: nothing is logged.
    None,
}

impl LogLevel {
    /// Every level, in order.
    pub const ALL: [LogLevel; 7] = [
        LogLevel::Trace,
        LogLevel::Debug,
        LogLevel::Information,
        LogLevel::Warning,
        LogLevel::Error,
        LogLevel::Critical,
        LogLevel::None,
    ];

    /// The level of value `v` (0 to 6).
    pub fn from_value(v: i64) -> Option<LogLevel> {
        usize::try_from(v)
            .ok()
            .and_then(|i| LogLevel::ALL.get(i).copied())
    }

    /// Its name (`Information`).
    pub fn name(self) -> &'static str {
        match self {
            LogLevel::Trace => "Trace",
            LogLevel::Debug => "Debug",
            LogLevel::Information => "Information",
            LogLevel::Warning => "Warning",
            LogLevel::Error => "Error",
            LogLevel::Critical => "Critical",
            LogLevel::None => "None",
        }
    }

    /// A level by name, ignoring case, or by number, as ASP.NET binds an enum.
    pub fn parse(s: &str) -> Option<LogLevel> {
        let s = s.trim();
        if let Some(l) = LogLevel::ALL
            .iter()
            .find(|l| l.name().eq_ignore_ascii_case(s))
        {
            return Some(*l);
        }
        s.parse::<i64>().ok().and_then(LogLevel::from_value)
    }

    /// The console formatter's four letters (`info`); `None` has none.
    pub fn short(self) -> &'static str {
        match self {
            LogLevel::Trace => "trce",
            LogLevel::Debug => "dbug",
            LogLevel::Information => "info",
            LogLevel::Warning => "warn",
            LogLevel::Error => "fail",
            LogLevel::Critical => "crit",
            LogLevel::None => "none",
        }
    }

    /// The EventPipe level a session at this level enables (Trace: LogAlways 0, Debug:
    /// Verbose 5, ... Critical: 1); `None` for `None`, which dotnet-monitor refuses as a
    /// session's level.
    pub fn event_level(self) -> Option<u32> {
        match self {
            LogLevel::Trace => Some(0),
            LogLevel::Debug => Some(5),
            LogLevel::Information => Some(4),
            LogLevel::Warning => Some(3),
            LogLevel::Error => Some(2),
            LogLevel::Critical => Some(1),
            LogLevel::None => None,
        }
    }
}

impl fmt::Display for LogLevel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The provider's `FilterSpecs` argument for a session, as dotnet-monitor's
/// LoggingSourceConfiguration builds it: `UseAppFilters` first when asked, then
/// `Category:Level` (or `Category` alone: the session's level) per spec, `;`-separated;
/// empty (every category at the session's level) without either.
pub fn filter_specs(specs: &[(String, Option<LogLevel>)], use_app_filters: bool) -> String {
    let mut out = String::new();
    if use_app_filters {
        out.push_str("UseAppFilters");
    }
    for (category, level) in specs {
        if category.is_empty() {
            continue;
        }
        if !out.is_empty() {
            out.push(';');
        }
        out.push_str(category);
        if let Some(l) = level {
            out.push(':');
            out.push_str(l.name());
        }
    }
    out
}

/// A value of an argument or a scope member.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LogValue {
    /// Text.
    String(String),
    /// An integer.
    Number(i64),
    /// `true` or `false`.
    Bool(bool),
    /// No value.
    Null,
}

impl LogValue {
    fn push_json(&self, out: &mut String) {
        match self {
            LogValue::String(s) => push_json_string(out, s),
            LogValue::Number(n) => out.push_str(&n.to_string()),
            LogValue::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
            LogValue::Null => out.push_str("null"),
        }
    }

    /// As .NET's `TextWriter.Write(object)` prints it (`True`, empty for null).
    fn push_text(&self, out: &mut String) {
        match self {
            LogValue::String(s) => out.push_str(s),
            LogValue::Number(n) => out.push_str(&n.to_string()),
            LogValue::Bool(b) => out.push_str(if *b { "True" } else { "False" }),
            LogValue::Null => {}
        }
    }
}

/// Key-value pairs in their order (arguments, a scope's members).
pub type LogValues = Vec<(String, LogValue)>;

/// One `ILogger.Log` call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogEntry {
    /// When it was logged (the event's time on the trace's clock, in UTC).
    pub timestamp: SystemTime,
    /// Its level.
    pub level: LogLevel,
    /// The logger's category (`LoggerName`).
    pub category: String,
    /// The event id's number.
    pub event_id: i32,
    /// The event id's name (empty: none).
    pub event_name: String,
    /// The message, formatted.
    pub message: String,
    /// The exception logged with it, as its `ToString()`.
    pub exception: Option<String>,
    /// The scopes it was logged in, outermost first.
    pub scopes: Vec<LogValues>,
    /// Its arguments (with `{OriginalFormat}` last when it had a format).
    pub arguments: LogValues,
}

/// Why an event of the provider was skipped.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Malformed {
    /// The payload does not match its metadata's field descriptions.
    Payload {
        /// Stream offset of the event.
        offset: u64,
    },
    /// A field the event must carry is missing or of another type.
    MissingField {
        /// Stream offset of the event.
        offset: u64,
        /// The field.
        field: &'static str,
    },
    /// A string field is longer than [`MAX_STRING`].
    TooLong {
        /// Stream offset of the event.
        offset: u64,
        /// The field.
        field: &'static str,
        /// Its length in UTF-16 code units.
        len: usize,
    },
    /// A JSON field does not parse (or nests deeper than [`MAX_JSON_DEPTH`]).
    Json {
        /// Stream offset of the event.
        offset: u64,
        /// The field.
        field: &'static str,
        /// Character offset in the field where parsing failed.
        at: usize,
    },
    /// An argument list or scope holds more than [`MAX_ARGUMENTS`] members.
    TooManyArguments {
        /// Stream offset of the event.
        offset: u64,
    },
    /// The level is not one of LogLevel's values.
    Level {
        /// Stream offset of the event.
        offset: u64,
        /// The value.
        value: i64,
    },
}

impl fmt::Display for Malformed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Malformed::Payload { offset } => write!(
                f,
                "logging event at offset {}: the payload does not match its metadata",
                offset
            ),
            Malformed::MissingField { offset, field } => write!(
                f,
                "logging event at offset {}: no usable field {}",
                offset, field
            ),
            Malformed::TooLong { offset, field, len } => write!(
                f,
                "logging event at offset {}: field {} holds {} UTF-16 units, more than the {} accepted",
                offset, field, len, MAX_STRING
            ),
            Malformed::Json { offset, field, at } => write!(
                f,
                "logging event at offset {}: field {} is not a JSON object (at character {})",
                offset, field, at
            ),
            Malformed::TooManyArguments { offset } => write!(
                f,
                "logging event at offset {}: more than {} arguments",
                offset, MAX_ARGUMENTS
            ),
            Malformed::Level { offset, value } => write!(
                f,
                "logging event at offset {}: level {} is not a LogLevel",
                offset, value
            ),
        }
    }
}

impl std::error::Error for Malformed {}

/// What the decoder saw.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LogStats {
    /// Stream bytes fed.
    pub bytes: u64,
    /// Events decoded (any provider).
    pub events: u64,
    /// Entries handed out.
    pub entries: u64,
    /// Events of the provider skipped as malformed.
    pub malformed: u64,
    /// The last of them.
    pub last_malformed: Option<Malformed>,
    /// Scopes not held (past [`MAX_OPEN_SCOPES`] or [`MAX_SCOPE_DEPTH`]).
    pub scopes_dropped: u64,
    /// Metadata records dropped over [`MAX_METADATA`].
    pub metadata_dropped: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    FormattedMessage,
    MessageJson,
    ScopeStart,
    ScopeStop,
}

#[derive(Debug)]
struct Meta {
    kind: Option<Kind>,
    raw: Vec<u8>,
    format: Format,
}

/// An open scope on a thread (events without activity ids).
#[derive(Debug)]
struct Scope {
    id: i64,
    values: LogValues,
}

/// A scope opened under an activity id: its values and the scope it branched from (kept
/// alive by its children after its own stop, as dotnet-monitor's tree keeps it).
#[derive(Debug)]
struct ActivityScope {
    values: LogValues,
    parent: Option<Arc<ActivityScope>>,
    /// Scopes on the chain, this one included.
    depth: usize,
}

/// Decodes a logging session's nettrace stream, fed in chunks of any size, into entries.
#[derive(Debug)]
pub struct LogDecoder {
    stream: TraceStream,
    state: State,
}

#[derive(Debug)]
struct State {
    metadata: MetadataTable<Meta>,
    clock: Option<TraceClock>,
    stats: LogStats,
    last_formatted: String,
    /// Open scopes by thread, innermost last (events without activity ids).
    scopes: HashMap<u64, Vec<Scope>>,
    open_scopes: usize,
    /// Open scopes by the activity id their start branched.
    activities: HashMap<Guid, Arc<ActivityScope>>,
}

impl Default for LogDecoder {
    fn default() -> Self {
        Self::new()
    }
}

impl LogDecoder {
    /// A decoder waiting for the stream's first byte.
    pub fn new() -> LogDecoder {
        LogDecoder {
            stream: TraceStream::new(),
            state: State {
                metadata: MetadataTable::new(),
                clock: None,
                stats: LogStats::default(),
                last_formatted: String::new(),
                scopes: HashMap::new(),
                open_scopes: 0,
                activities: HashMap::new(),
            },
        }
    }

    /// What was seen so far.
    pub fn stats(&self) -> &LogStats {
        &self.state.stats
    }

    /// Feeds the next stream bytes; entries go to `out` as soon as their block is whole. A
    /// stream that cannot be parsed is an error naming its offset (and later bytes are only
    /// counted); a malformed event is counted and skipped.
    pub fn feed(&mut self, data: &[u8], out: &mut dyn FnMut(LogEntry)) -> Result<(), StreamError> {
        self.state.stats.bytes += data.len() as u64;
        let state = &mut self.state;
        self.stream
            .feed_with_parser(data, |item, parser| state.item(item, parser, out))
    }

    /// End of stream: `Ok` only if it ended with its end-of-stream object
    /// ([`StreamError::Truncated`] if it just stopped).
    pub fn finish(&mut self, out: &mut dyn FnMut(LogEntry)) -> Result<(), StreamError> {
        let state = &mut self.state;
        self.stream
            .finish_with_parser(|item, parser| state.item(item, parser, out))
    }
}

/// Where an event was written: its thread, its (activity, related activity) ids, its offset.
struct Where {
    thread: u64,
    activity: (Guid, Guid),
    offset: u64,
}

/// The fields of a logging event this decoder reads.
#[derive(Default)]
struct Fields {
    level: Option<i64>,
    logger: Option<String>,
    event_id: Option<i64>,
    event_name: Option<String>,
    formatted: Option<String>,
    exception_json: Option<String>,
    arguments_json: Option<String>,
    id: Option<i64>,
}

fn kind_of(provider: &str, event_id: u32) -> Option<Kind> {
    if provider != PROVIDER {
        return None;
    }
    match event_id {
        FORMATTED_MESSAGE => Some(Kind::FormattedMessage),
        MESSAGE_JSON => Some(Kind::MessageJson),
        ACTIVITY_JSON_START => Some(Kind::ScopeStart),
        ACTIVITY_JSON_STOP => Some(Kind::ScopeStop),
        _ => None,
    }
}

impl State {
    fn item(&mut self, item: &Item<'_>, parser: &NettraceParser, out: &mut dyn FnMut(LogEntry)) {
        match item {
            Item::Trace(h) => self.clock = Some(TraceClock::new(h)),
            Item::Metadata(m) => {
                if let Ok(m) = m.record() {
                    self.on_metadata(&m);
                }
            }
            Item::Event(e) => {
                self.stats.events += 1;
                let (kind, fields) = match self.metadata.get(e.metadata_id) {
                    Some(Meta {
                        kind: Some(kind),
                        raw,
                        format,
                    }) => (*kind, read_fields(raw, *format, e.payload, e.offset)),
                    _ => return,
                };
                let time = match &self.clock {
                    Some(c) => c.time(e.timestamp),
                    None => UNIX_EPOCH,
                };
                let at = Where {
                    thread: e.thread_id,
                    activity: parser.activity_ids(),
                    offset: e.offset,
                };
                let result = fields.and_then(|f| match kind {
                    Kind::FormattedMessage => {
                        self.on_formatted(f);
                        Ok(())
                    }
                    Kind::MessageJson => {
                        let entry = self.on_message_json(f, time, &at)?;
                        if let Some(entry) = entry {
                            self.stats.entries += 1;
                            out(entry);
                        }
                        Ok(())
                    }
                    Kind::ScopeStart => self.on_scope_start(f, &at),
                    Kind::ScopeStop => {
                        self.on_scope_stop(f, &at);
                        Ok(())
                    }
                });
                if let Err(m) = result {
                    self.stats.malformed += 1;
                    self.stats.last_malformed = Some(m);
                }
            }
            _ => {}
        }
    }

    fn on_metadata(&mut self, m: &MetadataRecord<'_>) {
        let id = m.metadata_id;
        if !self.metadata.has_room_for(id, MAX_METADATA) {
            self.stats.metadata_dropped += 1;
            return;
        }
        let provider: String = m.provider_name.chars_lossy().collect();
        let kind = kind_of(&provider, m.event_id);
        self.metadata.insert(
            id,
            Meta {
                kind,
                raw: if kind.is_some() {
                    m.raw.to_vec()
                } else {
                    Vec::new()
                },
                format: m.format,
            },
        );
    }

    fn on_formatted(&mut self, f: Fields) {
        // dotnet-monitor: an empty message takes the event name's place.
        let message = match f.formatted {
            Some(m) if !m.is_empty() => m,
            _ => f.event_name.unwrap_or_default(),
        };
        self.last_formatted = message;
    }

    fn on_message_json(
        &mut self,
        f: Fields,
        time: SystemTime,
        at: &Where,
    ) -> Result<Option<LogEntry>, Malformed> {
        let offset = at.offset;
        let level_value = f.level.ok_or(Malformed::MissingField {
            offset,
            field: "Level",
        })?;
        let level = LogLevel::from_value(level_value).ok_or(Malformed::Level {
            offset,
            value: level_value,
        })?;
        let category = f.logger.ok_or(Malformed::MissingField {
            offset,
            field: "LoggerName",
        })?;
        let mut event_name = f.event_name.unwrap_or_default();
        let mut exception_json = f.exception_json.unwrap_or_default();
        let mut arguments_json = f.arguments_json.unwrap_or_default();
        // dotnet-monitor: "a bug that causes some of the columns to get mixed up" (runtimes
        // whose MessageJson has no EventName).
        if event_name.starts_with('{') {
            arguments_json = std::mem::take(&mut exception_json);
            exception_json = std::mem::take(&mut event_name);
        }
        if arguments_json.is_empty() {
            return Ok(None);
        }
        let args = parse_object(&arguments_json).map_err(|at| match at {
            JsonError::TooMany => Malformed::TooManyArguments { offset },
            JsonError::At(at) => Malformed::Json {
                offset,
                field: "ArgumentsJson",
                at,
            },
        })?;
        let exception = if exception_json.is_empty() || exception_json == "{}" {
            None
        } else {
            let e = parse_object(&exception_json).map_err(|at| Malformed::Json {
                offset,
                field: "ExceptionJson",
                at: match at {
                    JsonError::At(a) => a,
                    JsonError::TooMany => 0,
                },
            })?;
            Some(exception_text(&e))
        };
        let format = args.iter().find_map(|(k, v)| {
            if k == "{OriginalFormat}" {
                Some(match v {
                    LogValue::String(s) => s.clone(),
                    _ => "[null]".to_string(),
                })
            } else {
                None
            }
        });
        let (message, arguments) = match format {
            Some(format) => {
                let template = Template::parse(&format);
                if template.names.is_empty() {
                    (
                        format.clone(),
                        vec![("{OriginalFormat}".into(), LogValue::String(format))],
                    )
                } else {
                    let values: Vec<Option<String>> = template
                        .names
                        .iter()
                        .map(|n| {
                            args.iter()
                                .find(|(k, _)| k == n)
                                .and_then(|(_, v)| match v {
                                    LogValue::String(s) => Some(s.clone()),
                                    LogValue::Number(n) => Some(n.to_string()),
                                    LogValue::Bool(b) => {
                                        Some(if *b { "True" } else { "False" }.into())
                                    }
                                    LogValue::Null => None,
                                })
                        })
                        .collect();
                    let message = template.format(&values);
                    let mut arguments: LogValues = template
                        .names
                        .iter()
                        .zip(values)
                        .map(|(n, v)| (n.clone(), v.map_or(LogValue::Null, LogValue::String)))
                        .collect();
                    arguments.push(("{OriginalFormat}".into(), LogValue::String(format)));
                    (message, arguments)
                }
            }
            None => {
                let message = match f.formatted {
                    Some(m) if !m.is_empty() => m,
                    _ => self.last_formatted.clone(),
                };
                (message, args)
            }
        };
        let scopes = self.scopes_of(at);
        Ok(Some(LogEntry {
            timestamp: time,
            level,
            category,
            event_id: f.event_id.and_then(|i| i32::try_from(i).ok()).unwrap_or(0),
            event_name,
            message,
            exception,
            scopes,
            arguments,
        }))
    }

    /// The scopes an entry logged at `at` is in, outermost first.
    fn scopes_of(&self, at: &Where) -> Vec<LogValues> {
        let (activity, related) = at.activity;
        if activity != Guid::NIL {
            // dotnet-monitor: the innermost scope by the entry's activity id, else by its
            // related id (an activity branched by a start this session did not see).
            let found = self
                .activities
                .get(&activity)
                .or_else(|| self.activities.get(&related));
            let mut scopes = Vec::new();
            let mut node = found;
            while let Some(n) = node {
                scopes.push(n.values.clone());
                node = n.parent.as_ref();
            }
            scopes.reverse();
            return scopes;
        }
        self.scopes
            .get(&at.thread)
            .map(|s| s.iter().map(|s| s.values.clone()).collect())
            .unwrap_or_default()
    }

    fn on_scope_start(&mut self, f: Fields, at: &Where) -> Result<(), Malformed> {
        let offset = at.offset;
        let id = f.id.ok_or(Malformed::MissingField {
            offset,
            field: "ID",
        })?;
        let json = f.arguments_json.unwrap_or_default();
        let values = if json.is_empty() {
            Vec::new()
        } else {
            parse_object(&json).map_err(|e| match e {
                JsonError::TooMany => Malformed::TooManyArguments { offset },
                JsonError::At(at) => Malformed::Json {
                    offset,
                    field: "ArgumentsJson",
                    at,
                },
            })?
        };
        let (activity, related) = at.activity;
        if activity != Guid::NIL {
            let parent = self.activities.get(&related).cloned();
            let depth = parent.as_ref().map_or(0, |p| p.depth) + 1;
            let known = self.activities.contains_key(&activity);
            if depth > MAX_SCOPE_DEPTH || (!known && self.open_scopes >= MAX_OPEN_SCOPES) {
                self.stats.scopes_dropped += 1;
                return Ok(());
            }
            let scope = Arc::new(ActivityScope {
                values,
                parent,
                depth,
            });
            if self.activities.insert(activity, scope).is_none() {
                self.open_scopes += 1;
            }
            return Ok(());
        }
        let stack = self.scopes.entry(at.thread).or_default();
        if self.open_scopes >= MAX_OPEN_SCOPES || stack.len() >= MAX_SCOPE_DEPTH {
            self.stats.scopes_dropped += 1;
            if stack.is_empty() {
                self.scopes.remove(&at.thread);
            }
            return Ok(());
        }
        stack.push(Scope { id, values });
        self.open_scopes += 1;
        Ok(())
    }

    fn on_scope_stop(&mut self, f: Fields, at: &Where) {
        let (activity, _) = at.activity;
        if activity != Guid::NIL {
            // A stop whose start came before the session finds nothing, as in dotnet-monitor.
            if self.activities.remove(&activity).is_some() {
                self.open_scopes -= 1;
            }
            return;
        }
        let id = match f.id {
            Some(id) => id,
            None => return,
        };
        // On its own thread first; a scope that moved (await) is looked for everywhere.
        if self.remove_scope(at.thread, id) {
            return;
        }
        let threads: Vec<u64> = self.scopes.keys().copied().collect();
        for t in threads {
            if self.remove_scope(t, id) {
                return;
            }
        }
    }

    fn remove_scope(&mut self, thread: u64, id: i64) -> bool {
        let stack = match self.scopes.get_mut(&thread) {
            Some(s) => s,
            None => return false,
        };
        let pos = match stack.iter().rposition(|s| s.id == id) {
            Some(p) => p,
            None => return false,
        };
        stack.remove(pos);
        self.open_scopes -= 1;
        if stack.is_empty() {
            self.scopes.remove(&thread);
        }
        true
    }
}

/// Reads the fields of a logging event (by name, any order).
fn read_fields(
    raw: &[u8],
    format: Format,
    payload: &[u8],
    offset: u64,
) -> Result<Fields, Malformed> {
    let rec = match MetadataRecord::parse(raw, format, 0) {
        Ok(r) if !r.fields_malformed => r,
        _ => return Err(Malformed::Payload { offset }),
    };
    let mut f = Fields::default();
    for field in rec.fields.walk(payload) {
        let field = field.map_err(|_| Malformed::Payload { offset })?;
        let name = field.name;
        let text = |field_name: &'static str| -> Result<Option<String>, Malformed> {
            match field.value {
                V::String(s) => {
                    let units = s.as_bytes().len() / 2;
                    if units > MAX_STRING {
                        return Err(Malformed::TooLong {
                            offset,
                            field: field_name,
                            len: units,
                        });
                    }
                    Ok(Some(s.chars_lossy().collect()))
                }
                _ => Ok(None),
            }
        };
        let int = || -> Option<i64> {
            match field.value {
                V::String(s) if s.as_bytes().len() <= 64 => {
                    s.chars_lossy().collect::<String>().trim().parse().ok()
                }
                v => v.as_i64(),
            }
        };
        if name.eq_str("Level") {
            f.level = int();
        } else if name.eq_str("LoggerName") {
            f.logger = text("LoggerName")?;
        } else if name.eq_str("EventId") {
            f.event_id = int();
        } else if name.eq_str("EventName") {
            f.event_name = text("EventName")?;
        } else if name.eq_str("FormattedMessage") {
            f.formatted = text("FormattedMessage")?;
        } else if name.eq_str("ExceptionJson") {
            f.exception_json = text("ExceptionJson")?;
        } else if name.eq_str("ArgumentsJson") {
            f.arguments_json = text("ArgumentsJson")?;
        } else if name.eq_str("ID") {
            f.id = int();
        }
    }
    Ok(f)
}

/// An exception's text as dotnet-monitor's LoggerException prints it: its
/// `VerboseMessage` (the exception's `ToString()`), else type and message.
fn exception_text(e: &LogValues) -> String {
    let get = |k: &str| {
        e.iter().find_map(|(n, v)| match v {
            LogValue::String(s) if n == k => Some(s.clone()),
            _ => None,
        })
    };
    if let Some(v) = get("VerboseMessage") {
        return v;
    }
    match (get("TypeName"), get("Message")) {
        (Some(t), Some(m)) => format!("{}: {}", t, m),
        (Some(t), None) => t,
        (None, Some(m)) => m,
        (None, None) => String::new(),
    }
}

// ---------------------------------------------------------------------------------------
// Message formats: LogValuesFormatter.

#[derive(Debug)]
enum Segment {
    Text(String),
    Hole { index: usize, align: i64 },
}

/// A message format (`"Request {Id} took {Elapsed,8} ms"`) as LogValuesFormatter reads it:
/// holes are named, `{{` and `}}` are literal braces.
#[derive(Debug)]
struct Template {
    names: Vec<String>,
    segments: Vec<Segment>,
}

/// LogValuesFormatter.FindBraceIndex: the first unescaped `brace` from `start`.
fn find_brace(f: &[char], brace: char, start: usize, end: usize) -> usize {
    let mut index = end;
    let mut count = 0usize;
    let mut i = start;
    while i < end {
        if count > 0 && f[i] != brace {
            if count % 2 == 0 {
                count = 0;
                index = end;
            } else {
                break;
            }
        } else if f[i] == brace {
            if brace == '}' {
                if count == 0 {
                    index = i;
                }
            } else {
                index = i;
            }
            count += 1;
        }
        i += 1;
    }
    index
}

/// Literal text of a composite format: `{{` and `}}` are one brace.
fn unescape(s: &[char], out: &mut String) {
    let mut i = 0;
    while i < s.len() {
        let c = s[i];
        if (c == '{' || c == '}') && s.get(i + 1) == Some(&c) {
            i += 1;
        }
        out.push(c);
        i += 1;
    }
}

impl Template {
    fn parse(format: &str) -> Template {
        let f: Vec<char> = format.chars().collect();
        let end = f.len();
        let mut names = Vec::new();
        let mut segments = Vec::new();
        let mut scan = 0;
        while scan < end {
            let open = find_brace(&f, '{', scan, end);
            if scan == 0 && open == end {
                break;
            }
            let close = find_brace(&f, '}', open, end);
            if close == end {
                let mut t = String::new();
                unescape(&f[scan..end], &mut t);
                segments.push(Segment::Text(t));
                scan = end;
            } else {
                let mut t = String::new();
                unescape(&f[scan..open], &mut t);
                segments.push(Segment::Text(t));
                let delim = (open..close)
                    .find(|&i| f[i] == ',' || f[i] == ':')
                    .unwrap_or(close);
                names.push(f[open + 1..delim].iter().collect());
                let mut align = 0i64;
                if delim < close && f[delim] == ',' {
                    let spec: String = f[delim + 1..close]
                        .iter()
                        .take_while(|&&c| c != ':')
                        .collect();
                    align = spec.trim().parse::<i64>().unwrap_or(0).clamp(-4096, 4096);
                }
                segments.push(Segment::Hole {
                    index: names.len() - 1,
                    align,
                });
                scan = close + 1;
            }
        }
        Template { names, segments }
    }

    /// The format filled in with `values` (one per hole; `None` prints `(null)`).
    fn format(&self, values: &[Option<String>]) -> String {
        let mut out = String::new();
        for s in &self.segments {
            match s {
                Segment::Text(t) => out.push_str(t),
                Segment::Hole { index, align } => {
                    let v = values
                        .get(*index)
                        .and_then(|v| v.as_deref())
                        .unwrap_or("(null)");
                    let width = align.unsigned_abs() as usize;
                    let len = v.chars().count();
                    let pad = width.saturating_sub(len);
                    if *align > 0 {
                        out.extend(std::iter::repeat(' ').take(pad));
                        out.push_str(v);
                    } else {
                        out.push_str(v);
                        out.extend(std::iter::repeat(' ').take(pad));
                    }
                }
            }
        }
        out
    }
}

// ---------------------------------------------------------------------------------------
// JSON: the flat objects LoggingEventSource writes (ArgumentsJson, ExceptionJson).

enum JsonError {
    /// Malformed at this character offset.
    At(usize),
    /// More than MAX_ARGUMENTS members.
    TooMany,
}

struct Json<'a> {
    s: &'a [char],
    i: usize,
}

/// A JSON object's members as LogObject keeps them: strings, integers, booleans and nulls;
/// nested objects and arrays are skipped (bounded by [`MAX_JSON_DEPTH`]).
fn parse_object(text: &str) -> Result<LogValues, JsonError> {
    let chars: Vec<char> = text.chars().collect();
    let mut p = Json { s: &chars, i: 0 };
    p.ws();
    let mut out = Vec::new();
    p.expect('{')?;
    p.ws();
    if p.peek() == Some('}') {
        p.i += 1;
    } else {
        loop {
            p.ws();
            let key = p.string()?;
            p.ws();
            p.expect(':')?;
            p.ws();
            if let Some(v) = p.value(1)? {
                if out.len() >= MAX_ARGUMENTS {
                    return Err(JsonError::TooMany);
                }
                out.push((key, v));
            }
            p.ws();
            match p.next() {
                Some(',') => continue,
                Some('}') => break,
                _ => return Err(JsonError::At(p.i)),
            }
        }
    }
    p.ws();
    if p.i != chars.len() {
        return Err(JsonError::At(p.i));
    }
    Ok(out)
}

impl<'a> Json<'a> {
    fn peek(&self) -> Option<char> {
        self.s.get(self.i).copied()
    }

    fn next(&mut self) -> Option<char> {
        let c = self.peek();
        if c.is_some() {
            self.i += 1;
        }
        c
    }

    fn ws(&mut self) {
        while matches!(self.peek(), Some(' ' | '\t' | '\n' | '\r')) {
            self.i += 1;
        }
    }

    fn expect(&mut self, c: char) -> Result<(), JsonError> {
        if self.next() == Some(c) {
            Ok(())
        } else {
            Err(JsonError::At(self.i))
        }
    }

    fn hex4(&mut self) -> Result<u32, JsonError> {
        let mut v = 0u32;
        for _ in 0..4 {
            let d = self
                .next()
                .and_then(|c| c.to_digit(16))
                .ok_or(JsonError::At(self.i))?;
            v = v * 16 + d;
        }
        Ok(v)
    }

    fn string(&mut self) -> Result<String, JsonError> {
        self.expect('"')?;
        let mut out = String::new();
        loop {
            let c = self.next().ok_or(JsonError::At(self.i))?;
            match c {
                '"' => return Ok(out),
                '\\' => {
                    let e = self.next().ok_or(JsonError::At(self.i))?;
                    match e {
                        '"' => out.push('"'),
                        '\\' => out.push('\\'),
                        '/' => out.push('/'),
                        'b' => out.push('\u{8}'),
                        'f' => out.push('\u{c}'),
                        'n' => out.push('\n'),
                        'r' => out.push('\r'),
                        't' => out.push('\t'),
                        'u' => {
                            let u = self.hex4()?;
                            if (0xD800..0xDC00).contains(&u)
                                && self.peek() == Some('\\')
                                && self.s.get(self.i + 1) == Some(&'u')
                            {
                                let save = self.i;
                                self.i += 2;
                                let lo = self.hex4()?;
                                if (0xDC00..0xE000).contains(&lo) {
                                    let cp = 0x10000 + ((u - 0xD800) << 10) + (lo - 0xDC00);
                                    out.push(char::from_u32(cp).unwrap_or('\u{FFFD}'));
                                    continue;
                                }
                                self.i = save;
                            }
                            out.push(char::from_u32(u).unwrap_or('\u{FFFD}'));
                        }
                        _ => return Err(JsonError::At(self.i - 1)),
                    }
                }
                c if (c as u32) < 0x20 => return Err(JsonError::At(self.i - 1)),
                c => out.push(c),
            }
        }
    }

    fn literal(&mut self, word: &str) -> Result<(), JsonError> {
        for w in word.chars() {
            if self.next() != Some(w) {
                return Err(JsonError::At(self.i));
            }
        }
        Ok(())
    }

    /// A value: `None` for the objects and arrays LogObject skips.
    fn value(&mut self, depth: usize) -> Result<Option<LogValue>, JsonError> {
        match self.peek() {
            Some('"') => Ok(Some(LogValue::String(self.string()?))),
            Some('t') => self.literal("true").map(|_| Some(LogValue::Bool(true))),
            Some('f') => self.literal("false").map(|_| Some(LogValue::Bool(false))),
            Some('n') => self.literal("null").map(|_| Some(LogValue::Null)),
            Some('{') | Some('[') => {
                self.skip(depth)?;
                Ok(None)
            }
            Some(c) if c == '-' || c.is_ascii_digit() => {
                let start = self.i;
                while matches!(self.peek(), Some(c) if c == '-' || c == '+' || c == '.' || c == 'e' || c == 'E' || c.is_ascii_digit())
                {
                    self.i += 1;
                }
                let text: String = self.s[start..self.i].iter().collect();
                match text.parse::<i64>() {
                    Ok(n) => Ok(Some(LogValue::Number(n))),
                    Err(_) if text.parse::<f64>().is_ok() => Ok(Some(LogValue::String(text))),
                    Err(_) => Err(JsonError::At(start)),
                }
            }
            _ => Err(JsonError::At(self.i)),
        }
    }

    /// Skips a nested object or array.
    fn skip(&mut self, depth: usize) -> Result<(), JsonError> {
        if depth >= MAX_JSON_DEPTH {
            return Err(JsonError::At(self.i));
        }
        let close = if self.next() == Some('{') { '}' } else { ']' };
        self.ws();
        if self.peek() == Some(close) {
            self.i += 1;
            return Ok(());
        }
        loop {
            self.ws();
            if close == '}' {
                self.string()?;
                self.ws();
                self.expect(':')?;
                self.ws();
            }
            self.value(depth + 1)?;
            self.ws();
            match self.next() {
                Some(',') => continue,
                Some(c) if c == close => return Ok(()),
                _ => return Err(JsonError::At(self.i)),
            }
        }
    }
}

// ---------------------------------------------------------------------------------------
// Writers.

/// dotnet-monitor's `/logs` output formats.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum LogFormat {
    /// `application/x-ndjson`: a JSON object per line.
    NdJson,
    /// `application/json-seq` (RFC 7464): each object after a 0x1E, ended by a newline.
    JsonSeq,
    /// `text/plain`: as the simple console formatter writes, with a time stamp and the event
    /// name.
    Text,
}

impl LogFormat {
    /// Its content type.
    pub fn content_type(self) -> &'static str {
        match self {
            LogFormat::NdJson => "application/x-ndjson",
            LogFormat::JsonSeq => "application/json-seq",
            LogFormat::Text => "text/plain",
        }
    }

    /// Appends `entry` as this format writes it.
    pub fn write(self, entry: &LogEntry, out: &mut String) {
        match self {
            LogFormat::NdJson => write_json(entry, out),
            LogFormat::JsonSeq => {
                out.push('\u{1e}');
                write_json(entry, out);
            }
            LogFormat::Text => write_text(entry, out),
        }
    }
}

/// `yyyy-MM-dd HH:mm:ssZ` (.NET's "u" format) of `t`, UTC.
pub fn universal_sortable(t: SystemTime) -> String {
    let secs = match t.duration_since(UNIX_EPOCH) {
        Ok(d) => d.as_secs() as i64,
        Err(e) => -(e.duration().as_secs() as i64) - i64::from(e.duration().subsec_nanos() > 0),
    };
    let days = secs.div_euclid(86_400);
    let rem = secs.rem_euclid(86_400);
    // Howard Hinnant's civil_from_days.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{:04}-{:02}-{:02} {:02}:{:02}:{:02}Z",
        y,
        m,
        d,
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

/// One JSON object and its newline, as dotnet-monitor's StreamingLogger writes it:
/// `Timestamp`, `LogLevel`, `EventId`, `EventName`, `Category`, `Message`, `Exception`
/// (when one was logged), `State` (`Message` and the arguments), `Scopes` (when some are
/// open: one object per scope, outermost first).
fn write_json(e: &LogEntry, out: &mut String) {
    out.push_str("{\"Timestamp\":");
    push_json_string(out, &universal_sortable(e.timestamp));
    out.push_str(",\"LogLevel\":");
    push_json_string(out, e.level.name());
    out.push_str(",\"EventId\":");
    out.push_str(&e.event_id.to_string());
    out.push_str(",\"EventName\":");
    push_json_string(out, &e.event_name);
    out.push_str(",\"Category\":");
    push_json_string(out, &e.category);
    out.push_str(",\"Message\":");
    push_json_string(out, &e.message);
    if let Some(x) = &e.exception {
        out.push_str(",\"Exception\":");
        push_json_string(out, x);
    }
    out.push_str(",\"State\":{\"Message\":");
    push_json_string(out, &e.message);
    for (k, v) in &e.arguments {
        out.push(',');
        push_json_string(out, k);
        out.push(':');
        v.push_json(out);
    }
    out.push('}');
    if !e.scopes.is_empty() {
        out.push_str(",\"Scopes\":[");
        for (i, scope) in e.scopes.iter().enumerate() {
            if i > 0 {
                out.push(',');
            }
            out.push('{');
            for (j, (k, v)) in scope.iter().enumerate() {
                if j > 0 {
                    out.push(',');
                }
                push_json_string(out, k);
                out.push(':');
                v.push_json(out);
            }
            out.push('}');
        }
        out.push(']');
    }
    out.push_str("}\n");
}

/// The padding of every line after the first (`info: ` is 6 wide).
const PADDING: &str = "      ";

/// dotnet-monitor's plain text (the simple console formatter's layout):
///
/// ```text
/// 2024-05-01 10:00:00Z info: Category[EventId][EventName]
///       => k:v, k2:v2 => k3:v3
///       Message
///       Exception, each line padded
/// ```
fn write_text(e: &LogEntry, out: &mut String) {
    out.push_str(&universal_sortable(e.timestamp));
    out.push(' ');
    out.push_str(e.level.short());
    out.push_str(": ");
    out.push_str(&e.category);
    out.push('[');
    out.push_str(&e.event_id.to_string());
    out.push(']');
    if !e.event_name.is_empty() {
        out.push('[');
        out.push_str(&e.event_name);
        out.push(']');
    }
    out.push('\n');
    if !e.scopes.is_empty() {
        out.push_str(PADDING);
        for (i, scope) in e.scopes.iter().enumerate() {
            if i > 0 {
                out.push(' ');
            }
            out.push_str("=> ");
            for (j, (k, v)) in scope.iter().enumerate() {
                if j > 0 {
                    out.push_str(", ");
                }
                out.push_str(k);
                out.push(':');
                v.push_text(out);
            }
        }
        out.push('\n');
    }
    out.push_str(PADDING);
    out.push_str(&e.message);
    out.push('\n');
    if let Some(x) = &e.exception {
        out.push_str(PADDING);
        let x = x.replace("\r\n", "\n");
        out.push_str(&x.replace('\n', &format!("\n{}", PADDING)));
        out.push('\n');
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn templates_as_log_values_formatter() {
        let t = Template::parse("Request {Id} took {Elapsed,6} ms {{literal}}");
        assert_eq!(t.names, vec!["Id", "Elapsed"]);
        assert_eq!(
            t.format(&[Some("7".into()), Some("12".into())]),
            "Request 7 took     12 ms {literal}"
        );
        assert_eq!(
            t.format(&[None, Some("1".into())]),
            "Request (null) took      1 ms {literal}"
        );
        let t = Template::parse("{A,-4}|{B:x}");
        assert_eq!(t.names, vec!["A", "B"]);
        assert_eq!(t.format(&[Some("a".into()), Some("b".into())]), "a   |b");
        assert!(Template::parse("no holes {{ here").names.is_empty());
        assert!(Template::parse("").names.is_empty());
    }

    #[test]
    fn flat_json_objects() {
        let v = match parse_object(
            r#" {"a":"x\"\u00e9\ud83d\ude00","n":-12,"f":1.5,"b":true,"z":null,"o":{"p":[1,{}]},"l":[]} "#,
        ) {
            Ok(v) => v,
            Err(_) => panic!("parse"),
        };
        assert_eq!(
            v,
            vec![
                ("a".into(), LogValue::String("x\"é😀".into())),
                ("n".into(), LogValue::Number(-12)),
                ("f".into(), LogValue::String("1.5".into())),
                ("b".into(), LogValue::Bool(true)),
                ("z".into(), LogValue::Null),
            ]
        );
        for bad in ["", "{", "{\"a\"}", "{\"a\":}", "[1]", "{} x", "{\"a\":tru}"] {
            assert!(parse_object(bad).is_err(), "{}", bad);
        }
        let deep = format!("{{\"a\":{}{}}}", "[".repeat(100), "]".repeat(100));
        assert!(matches!(parse_object(&deep), Err(JsonError::At(_))));
        let many = format!(
            "{{{}}}",
            (0..=MAX_ARGUMENTS)
                .map(|i| format!("\"k{}\":\"v\"", i))
                .collect::<Vec<_>>()
                .join(",")
        );
        assert!(matches!(parse_object(&many), Err(JsonError::TooMany)));
    }

    #[test]
    fn levels_and_filter_specs() {
        assert_eq!(LogLevel::parse("warning"), Some(LogLevel::Warning));
        assert_eq!(LogLevel::parse("2"), Some(LogLevel::Information));
        assert_eq!(LogLevel::parse("7"), None);
        assert_eq!(LogLevel::parse("Verbose"), None);
        assert_eq!(LogLevel::Trace.event_level(), Some(0));
        assert_eq!(LogLevel::None.event_level(), None);
        assert_eq!(filter_specs(&[], true), "UseAppFilters");
        assert_eq!(filter_specs(&[], false), "");
        assert_eq!(
            filter_specs(
                &[
                    ("App.*".into(), Some(LogLevel::Warning)),
                    ("".into(), None),
                    ("Other".into(), None)
                ],
                true
            ),
            "UseAppFilters;App.*:Warning;Other"
        );
        assert_eq!(
            filter_specs(&[("A".into(), Some(LogLevel::Error))], false),
            "A:Error"
        );
    }

    #[test]
    fn universal_sortable_times() {
        assert_eq!(universal_sortable(UNIX_EPOCH), "1970-01-01 00:00:00Z");
        let t = UNIX_EPOCH + Duration::from_millis(1_714_557_600_999);
        assert_eq!(universal_sortable(t), "2024-05-01 10:00:00Z");
        let t = UNIX_EPOCH + Duration::from_secs(951_782_400); // 2000-02-29
        assert_eq!(universal_sortable(t), "2000-02-29 00:00:00Z");
    }
}
