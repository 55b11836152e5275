//! `/exceptions`: a process's first-chance exceptions, as dotnet-monitor's `GET /exceptions`
//! and `POST /exceptions` answer them, without its in-process startup hook.
//!
//! **Collection.** The first time a process is asked for (a request, or the
//! `CollectExceptions` action through [`Exceptions::collect`]), serve starts one EventPipe
//! session on it with `Microsoft-Windows-DotNETRuntime`'s Exception, JIT and Loader keywords
//! at Verbose ([`dsipc_trace::exceptions::SESSION_KEYWORDS`]), and keeps it open while the
//! process lives: each `ExceptionThrown` event is decoded as it comes and kept with the
//! throwing thread's stack addresses. Started on first ask rather than at discovery: a
//! session costs every runtime a buffer and the stacks of every exception it throws, which
//! no runtime should pay for a history nobody reads (dotnet-monitor too collects only where
//! its in-process feature is turned on); the first answer holds what was thrown since. One
//! session per runtime instance (pid and cookie); it ends when the runtime does (its stream
//! ends), and its history goes with it.
//!
//! **Naming frames.** Methods jitted while the session runs are named by its own
//! `Method/LoadVerbose` events. Methods that had code before (jitted earlier; ReadyToRun
//! code, most of the framework) are named by a rundown: a second, short session with
//! rundown, started once the long one runs (so that between them every method is named) and
//! stopped at once. ReadyToRun methods first run after that rundown have no load event of
//! their own, so an answer holding exceptions with unnamed frames, thrown after the last
//! rundown started, runs another rundown first (at most one at a time per process, and one
//! per [`RUNDOWN_INTERVAL`]: frames first run since may stay `[Native Frames]` until the
//! next). Stubs (IL stubs, reflection's invoke stubs) have no method record at all and
//! stay unnamed. Frames are named when an answer is written, so a
//! later rundown names the frames of exceptions kept before it.
//!
//! **History.** The last [`TOP_LEVEL_LIMIT`] exceptions per process (dotnet-monitor's
//! `Exceptions:TopLevelLimit` default), numbered from 1 in the order thrown; older ones are
//! dropped. Each is its type, message, thread, time and at most
//! [`dsipc_trace::exceptions::MAX_FRAMES`] addresses, so a history stays under a few
//! hundred KiB; the symbol table behind it is bounded by
//! [`dsipc_trace::exceptions::MAX_METHODS`].
//!
//! **Answers.** The format is the `Accept` header's, in dotnet-monitor's order: an exact
//! `text/plain`, `application/x-ndjson`, `application/json-seq`, then the first a wildcard
//! covers; with no `Accept`, or none of them, `text/plain` (dotnet-monitor's default for this
//! route: never 406). `POST` takes an `ExceptionsConfiguration` (`include`/`exclude` lists
//! of `{exceptionType, moduleName, typeName, methodName}`), applied to the top frame.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use bytes::Bytes;
use hyper::body::Incoming;
use hyper::{Method, Request};
use serde_json::Value;

use dsipc::payload::Provider;
use dsipc::wire::Text;
use dsipc_trace::exceptions::{
    ExceptionDecoder, ExceptionFilter, ExceptionFormat, ExceptionsConfiguration, ThrownException,
    SESSION_KEYWORDS, SESSION_LEVEL,
};

use super::api::{
    json_object, member, negotiate, read_body, timestamp, Api, ApiError, ApiResult, Artifact,
    Params, COMMAND_TIMEOUT,
};
use super::procs::Runtime;

/// Exceptions kept per process: dotnet-monitor's `Exceptions:TopLevelLimit` default (20).
pub const TOP_LEVEL_LIMIT: usize = 20;
/// The exceptions session's circular buffer: 16 MiB. Its events are rare (exceptions, and
/// method loads mostly at startup), each under a few KiB with its stack: this absorbs a
/// burst of thousands of throws while serve is slow to read, at a sixteenth of dotnet-monitor's
/// trace default.
const BUFFER_MB: u32 = 16;
/// The rundown session's buffer: a rundown writes one record per loaded method (a few MiB
/// for a large application), and EventPipe drops what overflows, so 64 MiB.
const RUNDOWN_BUFFER_MB: u32 = 64;
/// Least time between two rundowns asked by answers: a rundown costs the runtime a walk over
/// every loaded method (for a large application a few MiB of events and a few hundred ms of
/// one core), so a client asking in a loop costs it a few percent of a core at most; and in
/// a process that has run a while, code first run in the last 10 s (whose ReadyToRun
/// frames only a rundown names) is rare.
const RUNDOWN_INTERVAL: std::time::Duration = std::time::Duration::from_secs(10);
/// Most filters in one `include` or `exclude` list (a request body is at most 64 KiB
/// anyway; each filter is checked against every exception kept).
const MAX_FILTERS: usize = 256;

/// An answer of `/exceptions` ready to send or egress: what [`Exceptions::collect`] gives
/// (the `CollectExceptions` action's artifact).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExceptionsArtifact {
    /// dotnet-monitor's file name: `{yyyyMMdd_HHmmss_fff}_{pid}.exceptions.{txt|json}`.
    pub file_name: String,
    /// Its content type (the format's).
    pub content_type: &'static str,
    /// The exceptions kept, oldest first, in the format.
    pub body: String,
}

impl ExceptionsArtifact {
    /// The artifact to answer or egress.
    pub(crate) fn into_artifact(self) -> Artifact {
        Artifact {
            name: self.file_name,
            content_type: self.content_type,
            body: crate::http::full(Bytes::from(self.body)),
            stop: None,
        }
    }
}

/// One process's history and the decoder naming its frames.
struct History {
    decoder: ExceptionDecoder,
    /// (number, when serve received it, the exception), oldest first.
    kept: VecDeque<(u64, Instant, ThrownException)>,
    next_id: u64,
    /// When the latest rundown started, if one did.
    rundown_started: Option<Instant>,
    /// When the latest rundown asked by an answer started (what [`RUNDOWN_INTERVAL`]
    /// counts from; the first rundown, at the session's start, is not one).
    asked_rundown_started: Option<Instant>,
    ended: bool,
}

/// The collector of one runtime instance.
struct Collector {
    history: Mutex<History>,
    /// One rundown at a time.
    rundown: tokio::sync::Mutex<()>,
    task: Mutex<Option<tokio::task::JoinHandle<()>>>,
}

impl Drop for Collector {
    fn drop(&mut self) {
        if let Ok(mut t) = self.task.lock() {
            if let Some(t) = t.take() {
                t.abort();
            }
        }
    }
}

/// Every process's exceptions session and history (one per runtime instance).
#[derive(Default)]
pub struct Exceptions {
    collectors: tokio::sync::Mutex<HashMap<(u32, String), Arc<Collector>>>,
}

fn lock(c: &Collector) -> std::sync::MutexGuard<'_, History> {
    // A panic while holding the lock leaves a history that is still consistent (every
    // update is one push or one flag): keep using it.
    c.history.lock().unwrap_or_else(|p| p.into_inner())
}

impl Exceptions {
    /// The exceptions `runtime` threw since its session started (started now if none
    /// runs), filtered by `config`, in `format`: the `CollectExceptions` action's artifact.
    pub async fn collect(
        &self,
        runtime: &Runtime,
        format: ExceptionFormat,
        config: &ExceptionsConfiguration,
    ) -> Result<ExceptionsArtifact, ApiError> {
        let collector = self.collector(runtime).await?;
        if needs_rundown(&collector) {
            rundown(&collector, runtime, true).await;
        }
        let pid = runtime.pid;
        let mut h = lock(&collector);
        let h = &mut *h;
        let mut body = String::new();
        for (id, _, x) in &h.kept {
            let frames = h.decoder.resolve(&x.ips);
            if !config.shows(x, &frames) {
                continue;
            }
            let thread = dsipc_recipes::stack::thread_name(pid, x.thread_id);
            format.write(*id, x, &thread, &frames, &mut body);
        }
        Ok(ExceptionsArtifact {
            file_name: format!("{}_{}.exceptions.{}", timestamp(), pid, format.extension()),
            content_type: format.content_type(),
            body,
        })
    }

    /// Starts keeping `runtime`'s exceptions now if no session keeps them yet (the history
    /// a later `collect` gives then starts here: the collection rules call it when they
    /// first follow a process one of whose rules has a CollectExceptions action, as
    /// dotnet-monitor's history runs from the process's start).
    pub async fn follow(&self, runtime: &Runtime) -> Result<(), ApiError> {
        self.collector(runtime).await.map(|_| ())
    }

    /// The running collector of `runtime`, started if there is none. Collectors of runtimes
    /// whose session ended are dropped here.
    async fn collector(&self, runtime: &Runtime) -> Result<Arc<Collector>, ApiError> {
        let mut all = self.collectors.lock().await;
        all.retain(|_, c| !lock(c).ended);
        let key = (runtime.pid, runtime.uid.clone());
        if let Some(c) = all.get(&key) {
            return Ok(Arc::clone(c));
        }
        let providers = [Provider {
            keywords: SESSION_KEYWORDS,
            log_level: SESSION_LEVEL,
            provider_name: Text::Str(RUNTIME_PROVIDER),
            arguments: Text::Null,
        }];
        let mut session = runtime
            .client(COMMAND_TIMEOUT)
            .collect_tracing(&providers, BUFFER_MB, false)
            .await?;
        let collector = Arc::new(Collector {
            history: Mutex::new(History {
                decoder: ExceptionDecoder::new(),
                kept: VecDeque::new(),
                next_id: 1,
                rundown_started: None,
                asked_rundown_started: None,
                ended: false,
            }),
            rundown: tokio::sync::Mutex::new(()),
            task: Mutex::new(None),
        });
        let weak = Arc::downgrade(&collector);
        let pid = runtime.pid;
        let rt = runtime.clone();
        let task = tokio::spawn(async move {
            // The first rundown, beside the session (which already names what is jitted
            // from now on).
            if let Some(c) = weak.upgrade() {
                rundown(&c, &rt, false).await;
            }
            loop {
                let chunk = session.next_chunk().await;
                let c = match weak.upgrade() {
                    Some(c) => c,
                    None => return,
                };
                let mut h = lock(&c);
                let h = &mut *h;
                let (decoder, kept, next_id) = (&mut h.decoder, &mut h.kept, &mut h.next_id);
                let mut keep = |x: ThrownException| {
                    if kept.len() >= TOP_LEVEL_LIMIT {
                        kept.pop_front();
                    }
                    kept.push_back((*next_id, Instant::now(), x));
                    *next_id += 1;
                };
                let result = match chunk {
                    Some(Ok(data)) => match decoder.feed(&data, &mut keep) {
                        Ok(()) => continue,
                        Err(e) => Err(e.to_string()),
                    },
                    Some(Err(e)) => Err(e.to_string()),
                    // A runtime that exits cuts its stream: that is how this session ends.
                    None => match decoder.finish(&mut keep) {
                        Err(e) if !e.is_truncation() => Err(e.to_string()),
                        _ => Ok(()),
                    },
                };
                if let Err(e) = result {
                    eprintln!(
                        "dsipc: serve: pid {}: exceptions: {}",
                        pid,
                        dsipc_trace::format::clean(&e)
                    );
                }
                // The runtime is gone (or its stream unusable): the history goes with it.
                h.ended = true;
                h.kept.clear();
                return;
            }
        });
        *collector.task.lock().unwrap_or_else(|p| p.into_inner()) = Some(task);
        all.insert(key, Arc::clone(&collector));
        Ok(collector)
    }
}

/// `Microsoft-Windows-DotNETRuntime`.
const RUNTIME_PROVIDER: &str = "Microsoft-Windows-DotNETRuntime";

/// True if an exception kept has unnamed frames and was received after the latest rundown
/// started (an earlier one would not name them either), and the latest rundown asked by an
/// answer started at least [`RUNDOWN_INTERVAL`] ago (the first rundown, at the session's
/// start, does not count: code first run after it, such as ReadyToRun methods run by the
/// first exceptions, would otherwise stay unnamed for up to the interval).
fn needs_rundown(c: &Collector) -> bool {
    let mut h = lock(c);
    let h = &mut *h;
    if h.asked_rundown_started
        .map_or(false, |s| s.elapsed() < RUNDOWN_INTERVAL)
    {
        return false;
    }
    let since = h.rundown_started;
    let (decoder, kept) = (&mut h.decoder, &h.kept);
    kept.iter().any(|(_, at, x)| {
        since.map_or(true, |s| *at > s) && !x.ips.is_empty() && !decoder.is_resolved(&x.ips)
    })
}

/// Runs a rundown session on `runtime` (started and stopped at once) and feeds its method
/// records to `c`'s decoder; at most one at a time, within [`COMMAND_TIMEOUT`] twice (start,
/// then the rundown's stream). A rundown that fails leaves frames unnamed and is logged.
/// `asked`: by an answer (what [`RUNDOWN_INTERVAL`] spaces).
async fn rundown(c: &Collector, runtime: &Runtime, asked: bool) {
    let _one = c.rundown.lock().await;
    {
        let mut h = lock(c);
        let now = Instant::now();
        h.rundown_started = Some(now);
        if asked {
            h.asked_rundown_started = Some(now);
        }
    }
    // A provider is required; keyword 0 asks for nothing but the rundown at the stop.
    let providers = [Provider {
        keywords: 0,
        log_level: 4,
        provider_name: Text::Str(RUNTIME_PROVIDER),
        arguments: Text::Null,
    }];
    let run = async {
        let mut session = runtime
            .client(COMMAND_TIMEOUT)
            .collect_tracing(&providers, RUNDOWN_BUFFER_MB, true)
            .await
            .map_err(|e| e.to_string())?;
        let stop = session.stop_handle();
        let stopping = tokio::spawn(async move { stop.stop().await });
        while let Some(chunk) = session.next_chunk().await {
            let data = chunk.map_err(|e| e.to_string())?;
            lock(c)
                .decoder
                .feed_symbols(&data)
                .map_err(|e| e.to_string())?;
        }
        let _ = stopping.await;
        lock(c).decoder.finish_symbols().map_err(|e| e.to_string())
    };
    let outcome = tokio::time::timeout(COMMAND_TIMEOUT * 2, run).await;
    let failure = match outcome {
        Ok(Ok(())) => return,
        Ok(Err(e)) => e,
        Err(_) => format!(
            "no whole rundown within {} s",
            (COMMAND_TIMEOUT * 2).as_secs()
        ),
    };
    // A half-fed rundown stream must not be continued by the next one.
    let _ = lock(c).decoder.finish_symbols();
    eprintln!(
        "dsipc: serve: pid {}: exceptions: rundown: {}",
        runtime.pid,
        dsipc_trace::format::clean(&failure)
    );
}

/// Answers `GET /exceptions` and `POST /exceptions`.
pub(super) async fn route(
    api: &Api,
    req: Request<Incoming>,
    params: &Params,
    host: &str,
) -> ApiResult {
    let egress = params.egress(&api.egress)?;
    let selector = params.selector()?;
    let accept = req
        .headers()
        .get(hyper::header::ACCEPT)
        .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned());
    let config = if req.method() == Method::POST {
        let body = read_body(req).await?;
        parse_configuration(&body)?
    } else {
        ExceptionsConfiguration::default()
    };
    let offered = [
        ExceptionFormat::Text,
        ExceptionFormat::NdJson,
        ExceptionFormat::JsonSeq,
    ];
    let types = offered.map(ExceptionFormat::content_type);
    let format = negotiate(accept.as_deref(), &types)
        .map(|i| offered[i])
        .unwrap_or(ExceptionFormat::Text);
    let runtime = api.discovery.select(&selector).await?;
    let a = api.exceptions.collect(&runtime, format, &config).await?;
    api.deliver(a.into_artifact(), &runtime, egress, params, host)
}

/// An `ExceptionsConfiguration` body: `include` and `exclude`, each a list (or null) of
/// filters whose members are strings or null; member names ignore case, as ASP.NET binds
/// them. (Also the `CollectExceptions` action's `Filters`, given as JSON.)
pub(crate) fn parse_configuration(body: &[u8]) -> Result<ExceptionsConfiguration, ApiError> {
    let obj = json_object(body, "ExceptionsConfiguration")?;
    let list = |name: &str| -> Result<Vec<ExceptionFilter>, ApiError> {
        let items = match member(&obj, name) {
            None | Some(Value::Null) => return Ok(Vec::new()),
            Some(Value::Array(a)) => a,
            Some(_) => {
                return Err(ApiError::invalid(
                    name,
                    format!("The {} field must be a list of filters.", name),
                ))
            }
        };
        if items.len() > MAX_FILTERS {
            return Err(ApiError::invalid(
                name,
                format!("At most {} filters are accepted.", MAX_FILTERS),
            ));
        }
        items
            .iter()
            .enumerate()
            .map(|(i, item)| {
                let f = match item {
                    Value::Object(f) => f,
                    _ => {
                        return Err(ApiError::invalid(
                            &format!("{}[{}]", name, i),
                            "A filter must be an object.",
                        ))
                    }
                };
                let field = |field: &str| -> Result<Option<String>, ApiError> {
                    match member(f, field) {
                        None | Some(Value::Null) => Ok(None),
                        Some(Value::String(s)) => Ok(Some(s.clone())),
                        Some(_) => Err(ApiError::invalid(
                            &format!("{}[{}].{}", name, i, field),
                            format!("The {} field must be a string.", field),
                        )),
                    }
                };
                Ok(ExceptionFilter {
                    method_name: field("methodName")?,
                    exception_type: field("exceptionType")?,
                    type_name: field("typeName")?,
                    module_name: field("moduleName")?,
                })
            })
            .collect()
    };
    Ok(ExceptionsConfiguration {
        include: list("include")?,
        exclude: list("exclude")?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn configuration_takes_dotnet_monitors_exception_filter_members() {
        // openapi.json's ExceptionFilter: exceptionType, moduleName, typeName, methodName.
        let c = parse_configuration(
            br#"{"exclude":[{"exceptionType":"System.FormatException","moduleName":"System.Private.CoreLib","typeName":"System.Number","methodName":"ThrowFormatException"}]}"#,
        )
        .unwrap();
        let want = ExceptionFilter {
            exception_type: Some("System.FormatException".into()),
            module_name: Some("System.Private.CoreLib".into()),
            type_name: Some("System.Number".into()),
            method_name: Some("ThrowFormatException".into()),
        };
        assert_eq!(c.exclude, vec![want]);
    }

    #[test]
    fn configuration_binds_as_aspnet_does_and_refuses_wrong_types() {
        let c = parse_configuration(
            br#"{"Include":[{"methodName":"Get","exceptionType":null}],"exclude":null}"#,
        )
        .unwrap();
        assert_eq!(c.include.len(), 1);
        assert_eq!(c.include[0].method_name.as_deref(), Some("Get"));
        assert_eq!(c.include[0].exception_type, None);
        assert!(c.exclude.is_empty());
        assert!(parse_configuration(b"{}").unwrap().include.is_empty());
        for bad in [
            &br#"{"include":{}}"#[..],
            br#"{"include":[1]}"#,
            br#"{"exclude":[{"typeName":3}]}"#,
            b"[]",
            b"not json",
        ] {
            let e = parse_configuration(bad).unwrap_err();
            assert_eq!(
                e.response().status(),
                hyper::StatusCode::BAD_REQUEST,
                "{:?}",
                bad
            );
        }
    }
}
