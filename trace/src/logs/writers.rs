//! Writers: dotnet-monitor's `/logs` output formats.

use std::time::SystemTime;

use serde::{Serialize, Serializer};

use super::{LogEntry, LogValues};
use crate::format::{civil, push_json};

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
    let (y, m, d, h, mi, s) = civil(t);
    format!("{:04}-{:02}-{:02} {:02}:{:02}:{:02}Z", y, m, d, h, mi, s)
}

/// One JSON object and its newline, as dotnet-monitor's StreamingLogger writes it.
fn write_json(e: &LogEntry, out: &mut String) {
    push_json(
        out,
        &JsonEntry {
            timestamp: universal_sortable(e.timestamp),
            log_level: e.level.name(),
            event_id: e.event_id,
            event_name: &e.event_name,
            category: &e.category,
            message: &e.message,
            exception: e.exception.as_deref(),
            state: State {
                message: &e.message,
                arguments: Members(&e.arguments),
            },
            scopes: e.scopes.iter().map(Members).collect(),
        },
    );
    out.push('\n');
}

/// dotnet-monitor's StreamingLogger's JSON object: `Exception` when one was logged, `State`
/// (`Message` and the arguments), `Scopes` when some are open (one object per scope,
/// outermost first).
#[derive(Serialize)]
#[serde(rename_all = "PascalCase")]
struct JsonEntry<'a> {
    timestamp: String,
    log_level: &'static str,
    event_id: i32,
    event_name: &'a str,
    category: &'a str,
    message: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    exception: Option<&'a str>,
    state: State<'a>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    scopes: Vec<Members<'a>>,
}

/// `State`: the message, then the arguments.
#[derive(Serialize)]
#[serde(rename_all = "PascalCase")]
struct State<'a> {
    message: &'a str,
    #[serde(flatten)]
    arguments: Members<'a>,
}

/// Arguments or a scope's values as one JSON object's members, in their order.
struct Members<'a>(&'a LogValues);

impl Serialize for Members<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_map(self.0.iter().map(|(k, v)| (k, v)))
    }
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
    use std::time::{Duration, UNIX_EPOCH};

    #[test]
    fn universal_sortable_times() {
        assert_eq!(universal_sortable(UNIX_EPOCH), "1970-01-01 00:00:00Z");
        let t = UNIX_EPOCH + Duration::from_millis(1_714_557_600_999);
        assert_eq!(universal_sortable(t), "2024-05-01 10:00:00Z");
        let t = UNIX_EPOCH + Duration::from_secs(951_782_400); // 2000-02-29
        assert_eq!(universal_sortable(t), "2000-02-29 00:00:00Z");
    }
}
