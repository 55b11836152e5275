//! The decoder: events of the provider (and of TplEventSource's activity ids) into entries.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::SystemTime;

use dsipc::nettrace::{Event, Item, Value as V};
use dsipc::wire::Guid;

use super::json::{parse_object, JsonError};
use super::template::Template;
use super::{
    LogEntry, LogLevel, LogStats, LogValue, LogValues, Malformed, ACTIVITY_JSON_START,
    ACTIVITY_JSON_STOP, FORMATTED_MESSAGE, MAX_METADATA, MAX_OPEN_SCOPES, MAX_SCOPE_BYTES,
    MAX_SCOPE_DEPTH, MAX_STRING, MESSAGE_JSON, PROVIDER,
};
use crate::{EventInfo, StreamError, TraceContext, TraceDispatcher, TraceSink};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    FormattedMessage,
    MessageJson,
    ScopeStart,
    ScopeStop,
}

/// An open scope on a thread (events without activity ids).
#[derive(Debug)]
struct Scope {
    id: i64,
    values: LogValues,
    _charge: Charge,
}

/// A scope opened under an activity id: its values and the scope it branched from (kept
/// alive by its children after its own stop, as dotnet-monitor's tree keeps it).
#[derive(Debug)]
struct ActivityScope {
    values: LogValues,
    parent: Option<Arc<ActivityScope>>,
    /// Scopes on the chain, this one included.
    depth: usize,
    _charge: Charge,
}

/// A held scope's bytes, counted in the decoder's total until the scope is dropped (an
/// activity scope lives on while a child holds it, after its own stop).
#[derive(Debug)]
struct Charge {
    bytes: usize,
    total: Arc<AtomicUsize>,
}

impl Charge {
    /// Charges `bytes` to `total` if it stays within [`MAX_SCOPE_BYTES`].
    fn take(total: &Arc<AtomicUsize>, bytes: usize) -> Option<Charge> {
        let held = total.load(Ordering::Relaxed);
        if held.saturating_add(bytes) > MAX_SCOPE_BYTES {
            return None;
        }
        total.fetch_add(bytes, Ordering::Relaxed);
        Some(Charge {
            bytes,
            total: Arc::clone(total),
        })
    }
}

impl Drop for Charge {
    fn drop(&mut self) {
        self.total.fetch_sub(self.bytes, Ordering::Relaxed);
    }
}

/// The bytes a scope's values take: each member's slot, its name and its text.
fn scope_bytes(values: &LogValues) -> usize {
    std::mem::size_of::<ActivityScope>()
        + values
            .iter()
            .map(|(k, v)| {
                std::mem::size_of::<(String, LogValue)>()
                    + k.len()
                    + match v {
                        LogValue::String(s) => s.len(),
                        _ => 0,
                    }
            })
            .sum::<usize>()
}

/// Decodes a logging session's nettrace stream, fed in chunks of any size, into entries: a
/// [`TraceDispatcher`] feeding one [`LogSink`].
#[derive(Debug)]
pub struct LogDecoder {
    dispatcher: TraceDispatcher,
    sink: LogSink,
}

/// Log entries decoded from a stream's items, as one sink of a [`TraceDispatcher`] (beside
/// counters, a profile...): take them with [`drain`](Self::drain) after each feed. Each
/// event's fields are read through its record's layout, decoded once per metadata id.
/// Memory: the open scopes (bounded), the entries of the bytes fed since the last drain.
#[derive(Debug)]
pub struct LogSink {
    stats: LogStats,
    last_formatted: String,
    /// Open scopes by thread, innermost last (events without activity ids).
    scopes: HashMap<u64, Vec<Scope>>,
    open_scopes: usize,
    /// Open scopes by the activity id their start branched.
    activities: HashMap<Guid, Arc<ActivityScope>>,
    /// The bytes of the scopes held (at most [`MAX_SCOPE_BYTES`]).
    scope_bytes: Arc<AtomicUsize>,
    /// Entries ready to hand out.
    ready: Vec<LogEntry>,
}

impl Default for LogDecoder {
    fn default() -> Self {
        Self::new()
    }
}

impl Default for LogSink {
    fn default() -> Self {
        Self::new()
    }
}

impl LogSink {
    /// A sink waiting for the stream's first item.
    pub fn new() -> LogSink {
        LogSink {
            stats: LogStats::default(),
            last_formatted: String::new(),
            scopes: HashMap::new(),
            open_scopes: 0,
            activities: HashMap::new(),
            scope_bytes: Arc::new(AtomicUsize::new(0)),
            ready: Vec::new(),
        }
    }

    /// What was seen so far (`bytes` is counted by [`LogDecoder`] only).
    pub fn stats(&self) -> &LogStats {
        &self.stats
    }

    /// The bytes the scopes held take now (at most [`MAX_SCOPE_BYTES`]).
    pub fn scope_bytes(&self) -> usize {
        self.scope_bytes.load(Ordering::Relaxed)
    }

    /// Takes the entries ready, in order.
    pub fn drain(&mut self) -> std::vec::Drain<'_, LogEntry> {
        self.ready.drain(..)
    }
}

impl LogDecoder {
    /// A decoder waiting for the stream's first byte.
    pub fn new() -> LogDecoder {
        LogDecoder {
            dispatcher: TraceDispatcher::with_max_metadata(MAX_METADATA),
            sink: LogSink::new(),
        }
    }

    /// The bytes the scopes held take now (at most [`MAX_SCOPE_BYTES`]): their values'
    /// text and slots.
    pub fn scope_bytes(&self) -> usize {
        self.sink.scope_bytes()
    }

    /// What was seen so far.
    pub fn stats(&self) -> &LogStats {
        &self.sink.stats
    }

    /// Feeds the next stream bytes; entries go to `out` as soon as their block is whole. A
    /// stream that cannot be parsed is an error naming its offset (and later bytes are only
    /// counted); a malformed event is counted and skipped.
    pub fn feed(&mut self, data: &[u8], out: &mut dyn FnMut(LogEntry)) -> Result<(), StreamError> {
        self.sink.stats.bytes += data.len() as u64;
        let r = self.dispatcher.feed(data, &mut self.sink);
        for e in self.sink.drain() {
            out(e);
        }
        r
    }

    /// End of stream: `Ok` only if it ended with its end-of-stream object
    /// ([`StreamError::Truncated`] if it just stopped).
    pub fn finish(&mut self, out: &mut dyn FnMut(LogEntry)) -> Result<(), StreamError> {
        let r = self.dispatcher.finish(&mut self.sink);
        for e in self.sink.drain() {
            out(e);
        }
        r
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

impl TraceSink for LogSink {
    fn event(&mut self, e: &Event<'_>, info: Option<&EventInfo>, cx: &TraceContext<'_>) {
        self.stats.events += 1;
        let info = match info {
            Some(i) => i,
            None => return,
        };
        let kind = match kind_of(&info.meta.provider, info.meta.event_id) {
            Some(k) => k,
            None => return,
        };
        let fields = read_fields(info, e.payload, e.offset);
        let time = cx.time(e.timestamp);
        let at = Where {
            thread: e.thread_id,
            activity: cx.parser().activity_ids(),
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
                    self.ready.push(entry);
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

    fn item(&mut self, item: &Item<'_>, cx: &TraceContext<'_>) {
        if let Item::Metadata(m) = item {
            if !cx.metadata().contains(m.metadata_id) {
                self.stats.metadata_dropped += 1;
            }
        }
    }
}

impl LogSink {
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
            // A start that replaces a scope of the same activity frees that one first.
            if known {
                if let Some(old) = self.activities.remove(&activity) {
                    self.open_scopes -= 1;
                    drop(old);
                }
            }
            let charge = match Charge::take(&self.scope_bytes, scope_bytes(&values)) {
                Some(c) => c,
                None => {
                    self.stats.scopes_dropped += 1;
                    return Ok(());
                }
            };
            let scope = Arc::new(ActivityScope {
                values,
                parent,
                depth,
                _charge: charge,
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
        let charge = match Charge::take(&self.scope_bytes, scope_bytes(&values)) {
            Some(c) => c,
            None => {
                self.stats.scopes_dropped += 1;
                if stack.is_empty() {
                    self.scopes.remove(&at.thread);
                }
                return Ok(());
            }
        };
        stack.push(Scope {
            id,
            values,
            _charge: charge,
        });
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

/// Reads the fields of a logging event (by name, any order; top-level fields only): through
/// the record's layout, or with the core's walker for a layout with arrays.
fn read_fields(info: &EventInfo, payload: &[u8], offset: u64) -> Result<Fields, Malformed> {
    let bad = Malformed::Payload { offset };
    let layout = info.layout.as_ref().ok_or(bad.clone())?;
    let mut f = Fields::default();
    if layout.is_flat() {
        let mut first: Option<Malformed> = None;
        let read = layout.read(payload, |field, value| {
            if field.depth == 0 && first.is_none() {
                if let Err(m) = take(&mut f, &field.name, value, offset) {
                    first = Some(m);
                }
            }
        });
        // The first problem in payload order.
        return match (first, read) {
            (Some(m), _) => Err(m),
            (None, Err(_)) => Err(bad),
            (None, Ok(())) => Ok(f),
        };
    }
    let rec = info.meta.record().map_err(|_| bad.clone())?;
    for field in rec.fields.walk(payload) {
        let field = field.map_err(|_| bad.clone())?;
        let name: String = field.name.chars_lossy().collect();
        take(&mut f, &name, field.value, offset)?;
    }
    Ok(f)
}

/// Keeps the field `name` of value `value` if it is one the decoder reads.
fn take(f: &mut Fields, name: &str, value: V<'_>, offset: u64) -> Result<(), Malformed> {
    let text = |field_name: &'static str| -> Result<Option<String>, Malformed> {
        match value {
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
        match value {
            V::String(s) if s.as_bytes().len() <= 64 => {
                s.chars_lossy().collect::<String>().trim().parse().ok()
            }
            v => v.as_i64(),
        }
    };
    match name {
        "Level" => f.level = int(),
        "LoggerName" => f.logger = text("LoggerName")?,
        "EventId" => f.event_id = int(),
        "EventName" => f.event_name = text("EventName")?,
        "FormattedMessage" => f.formatted = text("FormattedMessage")?,
        "ExceptionJson" => f.exception_json = text("ExceptionJson")?,
        "ArgumentsJson" => f.arguments_json = text("ArgumentsJson")?,
        "ID" => f.id = int(),
        _ => {}
    }
    Ok(())
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
