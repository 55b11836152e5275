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
//! [`MAX_OPEN_SCOPES`] scopes are held, [`MAX_SCOPE_DEPTH`] per thread, [`MAX_SCOPE_BYTES`]
//! in all, and [`MAX_METADATA`] metadata records.
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

use std::fmt;
use std::time::SystemTime;

mod decoder;
mod json;
mod template;
mod writers;

pub use decoder::{LogDecoder, LogSink};
pub use writers::{universal_sortable, LogFormat};

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
/// Most bytes the scopes held take at once (their values, as [`LogDecoder::scope_bytes`]
/// counts them): 16 MiB. Real scopes hold a few short values (a request id, a path: well
/// under 1 KiB), so [`MAX_OPEN_SCOPES`] of them fit (at 1.6 KiB each); without it a runtime
/// could make a decoder hold [`MAX_OPEN_SCOPES`] scopes of [`MAX_STRING`] each (10 GB). A
/// scope that does not fit is dropped and counted, like one past the other two limits.
pub const MAX_SCOPE_BYTES: usize = 16 << 20;
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

impl serde::Serialize for LogValue {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            LogValue::String(v) => s.serialize_str(v),
            LogValue::Number(n) => s.serialize_i64(*n),
            LogValue::Bool(b) => s.serialize_bool(*b),
            LogValue::Null => s.serialize_unit(),
        }
    }
}

impl LogValue {
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
    /// Scopes not held (past [`MAX_OPEN_SCOPES`], [`MAX_SCOPE_DEPTH`] or
    /// [`MAX_SCOPE_BYTES`]).
    pub scopes_dropped: u64,
    /// Metadata records dropped over [`MAX_METADATA`].
    pub metadata_dropped: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

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
}
