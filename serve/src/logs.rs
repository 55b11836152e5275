//! `/logs`: a process's ILogger output, as dotnet-monitor's `GET /logs` and `POST /logs`
//! stream it.
//!
//! The session enables `Microsoft-Extensions-Logging` (LoggingEventSource) with its
//! FormattedMessage and JsonMessage keywords, at the EventPipe level of the asked `LogLevel`
//! and with a `FilterSpecs` argument built as dotnet-monitor's LoggingSourceConfiguration
//! builds it. `GET` without `level` collects at the application's own filters
//! (`FilterSpecs=UseAppFilters`, level Trace); with `level`, every category at that level
//! (app filters off). `POST` takes a LogsConfiguration
//! (`{"logLevel": ..., "filterSpecs": {"Category": "Level" | null}, "useAppFilters": bool}`).
//!
//! The stream is decoded as it comes ([`dsipc_trace::logs::LogDecoder`]) and each entry is
//! written at once in the format the `Accept` header picks (dotnet-monitor's order: an exact
//! `text/plain`, `application/x-ndjson`, `application/json-seq`, then the first a wildcard
//! covers, so `*/*` is text; no `Accept` or none of them is 406). The session runs
//! `durationSeconds` (default 30, -1 until the client goes away or the operation is
//! stopped), through [`session::stream`]: a bounded body channel,
//! memory flat.
//!
//! At most [`MAX_LOGS`] logs sessions run at once (dotnet-monitor's limit).

use std::io;

use bytes::Bytes;
use hyper::body::Incoming;
use hyper::{Method, Request, StatusCode};
use serde_json::Value;

use dsipc::payload::Provider;
use dsipc::wire::Text;
use dsipc_trace::logs::{self as tl, LogDecoder, LogFormat, LogLevel};

use super::api::{
    artifact_name, read_body, Api, ApiError, ApiResult, Artifact, Params, Requester,
    COMMAND_TIMEOUT,
};
use super::procs::Runtime;
use super::session::{self, Sink};
use dsipc::session::Outcome;

/// Logs sessions running at once (dotnet-monitor's default); one more is answered 429.
pub const MAX_LOGS: usize = 3;
/// Default `durationSeconds`.
pub const DEFAULT_LOGS_SECONDS: i64 = 30;
/// The session's circular buffer (dotnet-monitor's EventPipe pipelines' default).
const BUFFER_MB: u32 = 256;

/// What a request (or a CollectLogs action) asks to collect.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Settings {
    /// The level of categories `filter_specs` does not name.
    pub(crate) level: LogLevel,
    /// Per-category levels (`None`: the category's default).
    pub(crate) filter_specs: Vec<(String, Option<LogLevel>)>,
    /// Whether the application's own filters apply.
    pub(crate) use_app_filters: bool,
}

/// Answers `GET /logs` and `POST /logs`.
pub(super) async fn route(
    api: &Api,
    req: Request<Incoming>,
    params: &Params,
    host: &str,
) -> ApiResult {
    let egress = params.egress(&api.egress)?;
    let duration = params.duration(DEFAULT_LOGS_SECONDS)?;
    let selector = params.selector()?;
    let accept = req
        .headers()
        .get(hyper::header::ACCEPT)
        .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned());
    let settings = if req.method() == Method::POST {
        let body = read_body(req).await?;
        parse_configuration(&body)?
    } else {
        match params.get("level") {
            None => Settings {
                level: LogLevel::Trace,
                filter_specs: Vec::new(),
                use_app_filters: true,
            },
            Some(l) => Settings {
                level: LogLevel::parse(l).ok_or_else(|| {
                    ApiError::invalid("level", format!("The value '{}' is not valid.", l))
                })?,
                filter_specs: Vec::new(),
                use_app_filters: false,
            },
        }
    };
    if settings.level.event_level().is_none() {
        return Err(ApiError::bad_request(
            "LogLevel None is not supported as the default log level.",
        ));
    }
    let runtime = api.discovery.select(&selector).await?;
    let format = negotiate(accept.as_deref())
        .ok_or_else(|| ApiError::with_status(StatusCode::NOT_ACCEPTABLE, ""))?;
    let artifact = collect(api, &runtime, &settings, format, duration, Requester::Api).await?;
    api.deliver(artifact, &runtime, egress, params, host)
}

/// Starts a logs session on `runtime` for `settings`, its entries written in `format` for
/// `duration` (`None`: until stopped): the artifact `/logs` and CollectLogs send.
pub(crate) async fn collect(
    api: &Api,
    runtime: &Runtime,
    settings: &Settings,
    format: LogFormat,
    duration: Option<std::time::Duration>,
    by: Requester,
) -> Result<Artifact, ApiError> {
    let event_level = settings.level.event_level().ok_or_else(|| {
        ApiError::bad_request("LogLevel None is not supported as the default log level.")
    })?;
    let permit = Api::permit(&api.logs, "logs", MAX_LOGS, by)?;
    let args = provider_arguments(&tl::filter_specs(
        &settings.filter_specs,
        settings.use_app_filters,
    ));
    // The logging provider, then TplEventSource's TasksFlowActivityIds (scopes follow
    // activity ids across awaits), as dotnet-monitor's session has them.
    let mut providers = vec![Provider {
        keywords: tl::SESSION_KEYWORDS,
        log_level: event_level,
        provider_name: Text::Str(tl::PROVIDER),
        arguments: Text::Str(&args),
    }];
    providers.extend(
        tl::SESSION_PROVIDERS
            .iter()
            .map(|&(name, keywords, level)| Provider {
                keywords,
                log_level: level,
                provider_name: Text::Str(name),
                arguments: Text::Null,
            }),
    );
    let session = runtime
        .client(COMMAND_TIMEOUT)
        .collect_tracing(&providers, BUFFER_MB, false)
        .await?;
    let pid = runtime.pid;
    let (body, stop) = session::stream(
        session,
        duration,
        permit,
        api.send_timeout,
        pid,
        "logs",
        LogsSink::new(format, pid),
    );
    Ok(Artifact {
        name: artifact_name(pid, "txt"),
        content_type: format.content_type(),
        body,
        stop: Some(stop),
    })
}

/// The provider's argument string: `FilterSpecs=...`, the value quoted when it holds `;` or
/// `=` (as DiagnosticsClient's EventPipeProvider writes it).
fn provider_arguments(spec: &str) -> String {
    if spec.contains(';') || spec.contains('=') {
        format!("FilterSpecs=\"{}\"", spec)
    } else {
        format!("FilterSpecs={}", spec)
    }
}

/// dotnet-monitor's ComputeLogFormat: an exact media type first (text/plain,
/// application/x-ndjson, application/json-seq), then the first a wildcard covers; `None`
/// without an `Accept` header or when nothing matches.
fn negotiate(accept: Option<&str>) -> Option<LogFormat> {
    let offered = [LogFormat::Text, LogFormat::NdJson, LogFormat::JsonSeq];
    super::api::negotiate(accept, &offered.map(LogFormat::content_type)).map(|i| offered[i])
}

fn level_value(v: &Value, member: &str) -> Result<Option<LogLevel>, ApiError> {
    let bad = || {
        ApiError::invalid(
            member,
            format!(
                "The JSON value could not be converted to Microsoft.Extensions.Logging.LogLevel. Path: {}",
                member
            ),
        )
    };
    match v {
        Value::Null => Ok(None),
        Value::String(s) => LogLevel::parse(s).map(Some).ok_or_else(bad),
        Value::Number(n) => n
            .as_i64()
            .and_then(LogLevel::from_value)
            .map(Some)
            .ok_or_else(bad),
        _ => Err(bad()),
    }
}

/// A LogsConfiguration body; a member of the wrong type or value is a 400 naming it
/// (`$.logLevel`, `$.filterSpecs.Category`, `$.useAppFilters`). Defaults: level Trace, app
/// filters on, no filter specs.
fn parse_configuration(body: &[u8]) -> Result<Settings, ApiError> {
    if body.iter().all(|b| b.is_ascii_whitespace()) {
        return Err(ApiError::invalid(
            "",
            "A non-empty request body is required.",
        ));
    }
    let doc: Value = serde_json::from_slice(body)
        .map_err(|e| ApiError::invalid("$", format!("The request body is not JSON: {}", e)))?;
    let obj = doc.as_object().ok_or_else(|| {
        ApiError::invalid(
            "$",
            "The JSON value could not be converted to LogsConfiguration.",
        )
    })?;
    let mut settings = Settings {
        level: LogLevel::Trace,
        filter_specs: Vec::new(),
        use_app_filters: true,
    };
    for (k, v) in obj {
        // System.Text.Json's web defaults: member names match ignoring case.
        match k.to_ascii_lowercase().as_str() {
            "loglevel" => {
                let member = format!("$.{}", k);
                settings.level = level_value(v, &member)?
                    .ok_or_else(|| ApiError::invalid(&member, "The LogLevel field is required."))?;
            }
            "useappfilters" => match v {
                Value::Bool(b) => settings.use_app_filters = *b,
                _ => {
                    return Err(ApiError::invalid(
                        &format!("$.{}", k),
                        "The JSON value could not be converted to System.Boolean.",
                    ))
                }
            },
            "filterspecs" => match v {
                Value::Null => {}
                Value::Object(specs) => {
                    for (category, level) in specs {
                        let member = format!("$.{}.{}", k, category);
                        settings
                            .filter_specs
                            .push((category.clone(), level_value(level, &member)?));
                    }
                }
                _ => {
                    return Err(ApiError::invalid(
                        &format!("$.{}", k),
                        "The JSON value could not be converted to a dictionary of LogLevel.",
                    ))
                }
            },
            _ => {}
        }
    }
    Ok(settings)
}

/// Decodes the session's stream and writes each entry as it comes.
struct LogsSink {
    decoder: LogDecoder,
    format: LogFormat,
    error: Option<dsipc_trace::StreamError>,
    /// The runtime's pid (for the warning about dropped scopes).
    pid: u32,
    /// The warning about dropped scopes was printed (once per session).
    said_dropped: bool,
}

impl LogsSink {
    fn new(format: LogFormat, pid: u32) -> LogsSink {
        LogsSink {
            decoder: LogDecoder::new(),
            format,
            error: None,
            pid,
            said_dropped: false,
        }
    }

    /// Says once per session that scopes were dropped (their count is in the decoder).
    fn say_dropped(&mut self) {
        if !self.said_dropped && self.decoder.stats().scopes_dropped > 0 {
            self.said_dropped = true;
            eprintln!(
                "dsipc: serve: /logs of pid {}: scopes dropped (over {} open, {} deep or {} MiB held); entries logged in them lack them",
                self.pid,
                tl::MAX_OPEN_SCOPES,
                tl::MAX_SCOPE_DEPTH,
                tl::MAX_SCOPE_BYTES >> 20
            );
        }
    }
}

impl Sink for LogsSink {
    fn chunk(&mut self, data: Vec<u8>) -> Option<Bytes> {
        if self.error.is_some() {
            return None;
        }
        let mut out = String::new();
        let format = self.format;
        if let Err(e) = self
            .decoder
            .feed(&data, &mut |e| format.write(&e, &mut out))
        {
            self.error = Some(e);
        }
        self.say_dropped();
        if out.is_empty() {
            None
        } else {
            Some(Bytes::from(out))
        }
    }

    fn end(&mut self, _: &Outcome) -> Result<Option<Bytes>, io::Error> {
        let mut out = String::new();
        let format = self.format;
        let result = match self.error {
            Some(e) => Err(e),
            None => self.decoder.finish(&mut |e| format.write(&e, &mut out)),
        };
        self.say_dropped();
        match result {
            Ok(()) => Ok(if out.is_empty() {
                None
            } else {
                Some(Bytes::from(out))
            }),
            // A runtime that died or a stream that does not parse: the body is cut, never
            // ended as if whole.
            Err(e) if e.is_truncation() => Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                format!(
                    "the runtime ended the stream without its end-of-stream object (did it exit?): {}",
                    e
                ),
            )),
            Err(e) => Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("the logs session's stream: {}", e),
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accept_negotiation_as_dotnet_monitor() {
        assert_eq!(negotiate(None), None);
        assert_eq!(negotiate(Some("*/*")), Some(LogFormat::Text));
        assert_eq!(
            negotiate(Some("application/x-ndjson")),
            Some(LogFormat::NdJson)
        );
        assert_eq!(
            negotiate(Some("application/json-seq")),
            Some(LogFormat::JsonSeq)
        );
        assert_eq!(
            negotiate(Some("application/json-seq, text/plain;q=0.1")),
            Some(LogFormat::Text)
        );
        assert_eq!(negotiate(Some("application/*")), Some(LogFormat::NdJson));
        assert_eq!(negotiate(Some("image/png")), None);
        assert_eq!(negotiate(Some("")), None);
    }

    #[test]
    fn logs_configuration_bodies() {
        let s = parse_configuration(
            br#"{"filterSpecs":{"App.Worker":"Warning","Noisy":null},"logLevel":"Information","useAppFilters":false}"#,
        )
        .unwrap();
        assert_eq!(s.level, LogLevel::Information);
        assert!(!s.use_app_filters);
        assert_eq!(
            s.filter_specs,
            vec![
                ("App.Worker".to_string(), Some(LogLevel::Warning)),
                ("Noisy".to_string(), None)
            ]
        );
        assert_eq!(
            tl::filter_specs(&s.filter_specs, s.use_app_filters),
            "App.Worker:Warning;Noisy"
        );
        let d = parse_configuration(b"{}").unwrap();
        assert_eq!(d.level, LogLevel::Trace);
        assert!(d.use_app_filters);
        for (bad, member) in [
            (&br#"{"logLevel":"Loud"}"#[..], "$.logLevel"),
            (br#"{"filterSpecs":{"A":"x"}}"#, "$.filterSpecs.A"),
            (br#"{"filterSpecs":[]}"#, "$.filterSpecs"),
            (br#"{"useAppFilters":"yes"}"#, "$.useAppFilters"),
            (b"[1]", "$"),
            (b"{", "$"),
        ] {
            let e = parse_configuration(bad).unwrap_err();
            let body = format!("{:?}", e);
            assert!(body.contains(member), "{}: {}", member, body);
        }
        assert_eq!(
            provider_arguments("UseAppFilters;A:Warning"),
            "FilterSpecs=\"UseAppFilters;A:Warning\""
        );
        assert_eq!(provider_arguments(""), "FilterSpecs=");
    }
}
