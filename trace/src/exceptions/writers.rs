//! dotnet-monitor's `/exceptions` output formats and its filters (`ExceptionsConfiguration`).

use std::time::{SystemTime, UNIX_EPOCH};

use serde::Serialize;

use super::ThrownException;
use crate::format::{civil, push_json};
use crate::{StackFrame, NATIVE_FRAMES};

/// dotnet-monitor's `/exceptions` formats.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ExceptionFormat {
    /// `application/x-ndjson`: an `ExceptionInstance` JSON object per line.
    NdJson,
    /// `application/json-seq` (RFC 7464): each object after a 0x1E, ended by a newline.
    JsonSeq,
    /// `text/plain`: as .NET prints an unhandled exception, after a
    /// `First chance exception at {time}` line.
    Text,
}

impl ExceptionFormat {
    /// Its content type.
    pub fn content_type(self) -> &'static str {
        match self {
            ExceptionFormat::NdJson => "application/x-ndjson",
            ExceptionFormat::JsonSeq => "application/json-seq",
            ExceptionFormat::Text => "text/plain",
        }
    }

    /// The format dotnet-monitor's `ExceptionFormat` value `name` names (`PlainText`,
    /// `NewlineDelimitedJson`, `JsonSequence`; ignoring case, as its configuration binds
    /// enums), for the `CollectExceptions` action's `Format`.
    pub fn from_name(name: &str) -> Option<ExceptionFormat> {
        [
            ("PlainText", ExceptionFormat::Text),
            ("NewlineDelimitedJson", ExceptionFormat::NdJson),
            ("JsonSequence", ExceptionFormat::JsonSeq),
        ]
        .iter()
        .find(|(n, _)| n.eq_ignore_ascii_case(name.trim()))
        .map(|&(_, f)| f)
    }

    /// The extension dotnet-monitor gives its file (`{time}_{pid}.exceptions.{ext}`).
    pub fn extension(self) -> &'static str {
        match self {
            ExceptionFormat::Text => "txt",
            _ => "json",
        }
    }

    /// Appends exception `id` (its number in the process's history), thrown as `x` on a
    /// thread named `thread_name`, its stack named `frames`, as this format writes it.
    pub fn write(
        self,
        id: u64,
        x: &ThrownException,
        thread_name: &str,
        frames: &[StackFrame],
        out: &mut String,
    ) {
        match self {
            ExceptionFormat::NdJson => write_json(id, x, thread_name, frames, out),
            ExceptionFormat::JsonSeq => {
                out.push('\u{1e}');
                write_json(id, x, thread_name, frames, out);
            }
            ExceptionFormat::Text => write_text(x, frames, out),
        }
    }
}

/// `2023-07-13T21:45:11.8056355Z`: .NET's round-trip ("O") format of a UTC `DateTime`.
pub fn round_trip_utc(t: SystemTime) -> String {
    let (y, mo, d, h, mi, s) = civil(t);
    let ticks = t
        .duration_since(UNIX_EPOCH)
        .map(|d| d.subsec_nanos() / 100)
        .unwrap_or(0);
    format!(
        "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.{:07}Z",
        y, mo, d, h, mi, s, ticks
    )
}

/// dotnet-monitor's `ExceptionInstance`. `moduleName` (the module defining the exception's
/// type) is empty: the runtime's event names the type only.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Instance<'a> {
    id: u64,
    timestamp: String,
    type_name: &'a str,
    module_name: &'a str,
    message: &'a str,
    inner_exceptions: [u8; 0],
    stack: CallStack<'a>,
}

/// dotnet-monitor's `CallStack`.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct CallStack<'a> {
    thread_id: u64,
    thread_name: &'a str,
    frames: Vec<Frame>,
}

/// dotnet-monitor's `CallStackFrame`, as `/stacks` writes it here: parameter types as the
/// runtime's signature has them, the module's file name without extension, the nil MVID
/// (EventPipe's module records carry none).
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Frame {
    method_name: String,
    method_token: u32,
    parameter_types: Vec<String>,
    type_name: String,
    module_name: String,
    module_version_id: &'static str,
    hidden: bool,
}

const NIL_GUID: &str = "00000000-0000-0000-0000-000000000000";

fn frame(f: &StackFrame) -> Frame {
    match f {
        StackFrame::Method(m) => Frame {
            method_name: m.method.clone(),
            method_token: m.token,
            parameter_types: m.parameter_types(),
            type_name: m.type_name.clone(),
            module_name: m.module.clone().unwrap_or_default(),
            module_version_id: NIL_GUID,
            hidden: false,
        },
        StackFrame::Native => Frame {
            method_name: NATIVE_FRAMES.to_string(),
            method_token: 0,
            parameter_types: Vec::new(),
            type_name: String::new(),
            module_name: String::new(),
            module_version_id: NIL_GUID,
            hidden: false,
        },
    }
}

fn write_json(
    id: u64,
    x: &ThrownException,
    thread_name: &str,
    frames: &[StackFrame],
    out: &mut String,
) {
    push_json(
        out,
        &Instance {
            id,
            timestamp: round_trip_utc(x.timestamp),
            type_name: &x.type_name,
            module_name: "",
            message: &x.message,
            inner_exceptions: [],
            stack: CallStack {
                thread_id: x.thread_id,
                thread_name,
                frames: frames.iter().map(frame).collect(),
            },
        },
    );
    out.push('\n');
}

/// dotnet-monitor's text:
///
/// ```text
/// First chance exception at 2023-07-13T21:45:11.8056355Z
/// System.FormatException: The input string 'x' was not in a correct format.
///    at System.Number.ThrowFormatException(...)
///    at System.Int32.Parse(class System.String)
///
/// ```
fn write_text(x: &ThrownException, frames: &[StackFrame], out: &mut String) {
    out.push_str("First chance exception at ");
    out.push_str(&round_trip_utc(x.timestamp));
    out.push('\n');
    out.push_str(&x.type_name);
    if !x.message.is_empty() {
        out.push_str(": ");
        out.push_str(&x.message);
    }
    for f in frames {
        out.push_str("\n   at ");
        match f {
            StackFrame::Method(m) => {
                if !m.type_name.is_empty() {
                    out.push_str(&m.type_name);
                    out.push('.');
                }
                out.push_str(&m.method);
                out.push('(');
                out.push_str(&m.parameter_types().join(","));
                out.push(')');
            }
            StackFrame::Native => out.push_str(NATIVE_FRAMES),
        }
    }
    out.push_str("\n\n");
}

/// One of dotnet-monitor's exception filters: every field given must match (ordinal
/// comparison), the method, type and module against the top frame.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ExceptionFilter {
    /// `methodName`: the top frame's method.
    pub method_name: Option<String>,
    /// `exceptionType`: the exception's full type name.
    pub exception_type: Option<String>,
    /// `typeName`: the top frame's declaring type (full name).
    pub type_name: Option<String>,
    /// `moduleName`: the top frame's module (`System.Private.CoreLib.dll` or without the
    /// extension: frames here name modules without it).
    pub module_name: Option<String>,
}

/// dotnet-monitor's `ExceptionsConfiguration`: an exception is shown if it matches no
/// `exclude` filter and (when there are `include` filters) at least one `include` filter.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ExceptionsConfiguration {
    /// Filters of which one must match (none: every exception).
    pub include: Vec<ExceptionFilter>,
    /// Filters of which none may match.
    pub exclude: Vec<ExceptionFilter>,
}

/// A filter's field given (empty counts as not given, as dotnet-monitor's
/// `string.IsNullOrEmpty`).
fn given(v: &Option<String>) -> Option<&str> {
    v.as_deref().filter(|s| !s.is_empty())
}

fn module_matches(filter: &str, module: &str) -> bool {
    filter == module
        || filter
            .strip_suffix(".dll")
            .or_else(|| filter.strip_suffix(".exe"))
            == Some(module)
}

impl ExceptionFilter {
    /// True if every field given matches `x` and its top frame. dotnet-monitor treats a
    /// stack without frames differently for its two lists: an include filter then checks the
    /// exception type only; an exclude filter too (`exclude` is true here for that list).
    fn matches(&self, x: &ThrownException, top: Option<&StackFrame>, exclude: bool) -> bool {
        let mut any = false;
        // The top frame's (method, module, class), as the JSON shows them: an unnamed run
        // is `[Native Frames]` with empty module and class.
        let names = match top {
            Some(StackFrame::Method(m)) => Some((
                m.method.as_str(),
                m.module.as_deref().unwrap_or(""),
                m.type_name.as_str(),
            )),
            Some(StackFrame::Native) => Some((NATIVE_FRAMES, "", "")),
            None => None,
        };
        if let Some((method, module, class)) = names {
            if let Some(v) = given(&self.method_name) {
                any = true;
                if v != method {
                    return false;
                }
            }
            if let Some(v) = given(&self.module_name) {
                any = true;
                if !module_matches(v, module) {
                    return false;
                }
            }
            if let Some(v) = given(&self.type_name) {
                any = true;
                if v != class {
                    return false;
                }
            }
        }
        if let Some(v) = given(&self.exception_type) {
            any = true;
            if v != x.type_name {
                return false;
            }
        }
        // An include filter with nothing to check includes; an exclude filter excludes
        // nothing.
        any || !exclude
    }
}

impl ExceptionsConfiguration {
    /// True if `x` (with its stack named `frames`) is shown.
    pub fn shows(&self, x: &ThrownException, frames: &[StackFrame]) -> bool {
        let top = frames.first();
        if self.exclude.iter().any(|f| f.matches(x, top, true)) {
            return false;
        }
        self.include.is_empty() || self.include.iter().any(|f| f.matches(x, top, false))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::MethodName;
    use std::time::Duration;

    fn thrown() -> ThrownException {
        ThrownException {
            timestamp: UNIX_EPOCH + Duration::from_nanos(1_689_284_711_805_635_500),
            thread_id: 4768,
            type_name: "System.InvalidOperationException".into(),
            message: "Operation is not valid.".into(),
            hresult: Some(0x8013_1509),
            flags: Some(16),
            ips: vec![1, 2, 3],
        }
    }

    fn frames() -> Vec<StackFrame> {
        vec![
            StackFrame::Method(MethodName {
                module: Some("App".into()),
                type_name: "App.Pages.Index".into(),
                method: "Get".into(),
                signature: "void  (class System.String,int32)".into(),
                token: 0x0600_0001,
            }),
            StackFrame::Native,
        ]
    }

    #[test]
    fn formats_by_dotnet_monitors_names() {
        assert_eq!(
            ExceptionFormat::from_name("newlinedelimitedjson"),
            Some(ExceptionFormat::NdJson)
        );
        assert_eq!(
            ExceptionFormat::from_name("PlainText"),
            Some(ExceptionFormat::Text)
        );
        assert_eq!(
            ExceptionFormat::from_name("JsonSequence"),
            Some(ExceptionFormat::JsonSeq)
        );
        assert_eq!(ExceptionFormat::from_name("Json"), None);
    }

    #[test]
    fn round_trip_format_has_seven_digits_and_z() {
        assert_eq!(
            round_trip_utc(thrown().timestamp),
            "2023-07-13T21:45:11.8056355Z"
        );
        assert_eq!(round_trip_utc(UNIX_EPOCH), "1970-01-01T00:00:00.0000000Z");
    }

    #[test]
    fn exception_instance_json_has_dotnet_monitors_shape() {
        let mut out = String::new();
        ExceptionFormat::NdJson.write(2, &thrown(), "main", &frames(), &mut out);
        assert_eq!(
            out,
            concat!(
                "{\"id\":2,\"timestamp\":\"2023-07-13T21:45:11.8056355Z\",",
                "\"typeName\":\"System.InvalidOperationException\",\"moduleName\":\"\",",
                "\"message\":\"Operation is not valid.\",\"innerExceptions\":[],",
                "\"stack\":{\"threadId\":4768,\"threadName\":\"main\",\"frames\":[",
                "{\"methodName\":\"Get\",\"methodToken\":100663297,",
                "\"parameterTypes\":[\"class System.String\",\"int32\"],",
                "\"typeName\":\"App.Pages.Index\",\"moduleName\":\"App\",",
                "\"moduleVersionId\":\"00000000-0000-0000-0000-000000000000\",\"hidden\":false},",
                "{\"methodName\":\"[Native Frames]\",\"methodToken\":0,\"parameterTypes\":[],",
                "\"typeName\":\"\",\"moduleName\":\"\",",
                "\"moduleVersionId\":\"00000000-0000-0000-0000-000000000000\",\"hidden\":false}",
                "]}}\n"
            )
        );
        let mut seq = String::new();
        ExceptionFormat::JsonSeq.write(2, &thrown(), "main", &frames(), &mut seq);
        assert_eq!(seq, format!("\u{1e}{}", out));
    }

    #[test]
    fn text_is_the_unhandled_exception_layout() {
        let mut out = String::new();
        ExceptionFormat::Text.write(2, &thrown(), "", &frames(), &mut out);
        assert_eq!(
            out,
            "First chance exception at 2023-07-13T21:45:11.8056355Z\n\
             System.InvalidOperationException: Operation is not valid.\n   \
             at App.Pages.Index.Get(class System.String,int32)\n   \
             at [Native Frames]\n\n"
        );
    }

    #[test]
    fn filters_follow_dotnet_monitors_include_and_exclude() {
        let (x, f) = (thrown(), frames());
        let by = |method: Option<&str>, ty: Option<&str>, module: Option<&str>| ExceptionFilter {
            method_name: method.map(str::to_string),
            exception_type: ty.map(str::to_string),
            type_name: None,
            module_name: module.map(str::to_string),
        };
        let none = ExceptionsConfiguration::default();
        assert!(none.shows(&x, &f));
        let include = |filters: Vec<ExceptionFilter>| ExceptionsConfiguration {
            include: filters,
            exclude: Vec::new(),
        };
        let exclude = |filters: Vec<ExceptionFilter>| ExceptionsConfiguration {
            include: Vec::new(),
            exclude: filters,
        };
        assert!(include(vec![by(Some("Get"), None, Some("App.dll"))]).shows(&x, &f));
        assert!(!include(vec![by(Some("Get"), Some("System.Exception"), None)]).shows(&x, &f));
        assert!(include(vec![
            by(Some("Other"), None, None),
            by(None, None, Some("App"))
        ])
        .shows(&x, &f));
        assert!(!exclude(vec![by(
            None,
            Some("System.InvalidOperationException"),
            None
        )])
        .shows(&x, &f));
        assert!(exclude(vec![by(Some("Get"), Some("System.Exception"), None)]).shows(&x, &f));
        // An empty filter includes everything and excludes nothing.
        assert!(include(vec![ExceptionFilter::default()]).shows(&x, &f));
        assert!(exclude(vec![ExceptionFilter::default()]).shows(&x, &f));
        // Without frames, only the type is checked; an unnamed top frame matches no method
        // or module.
        assert!(include(vec![by(Some("Get"), None, None)]).shows(&x, &[]));
        assert!(!include(vec![by(None, None, Some("App"))]).shows(&x, &f[1..]));
    }
}
