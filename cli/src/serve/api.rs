//! dotnet-monitor's routes: request in, response out.
//!
//! Each route reads its query (`pid`/`uid`/`name`, `durationSeconds`, ...), finds the
//! runtime ([`procs`]), and answers with dotnet-monitor's content types and JSON shapes.
//! Errors are `application/problem+json` (ValidationProblemDetails for 400). Artifacts
//! stream: a trace is sent as the runtime writes it (a chunked body; a client that goes away
//! stops the session), a dump is read from serve's storage folder and deleted once sent.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use bytes::Bytes;
use hyper::body::Incoming;
use hyper::header::{HeaderValue, CONTENT_DISPOSITION, CONTENT_TYPE, WWW_AUTHENTICATE};
use hyper::{Method, Request, Response, StatusCode};
use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore};

use dsipc::payload::{DumpType, Provider};

use super::auth::Verifier;
use super::metrics::Metrics;
use super::models::{
    DotnetMonitorInfo, Environment, Errors, MonitorCapability, ProblemDetails, ProcessIdentifier,
    ProcessInfo,
};
use super::operations::{DeleteError, Egress, Operations, ProcessRef};
use super::procs::{Discovery, Runtime, Selector};
use super::profiles::{self, TraceProfile};
use super::session;
use crate::http::{self, Body};
use crate::json;
use crate::providers::ProviderSpec;

/// Largest request body taken (an EventPipeConfiguration is a few hundred bytes).
pub const MAX_BODY: usize = 64 * 1024;
/// Operations of one kind running at once, dotnet-monitor's defaults; one more is
/// answered 429.
pub const MAX_TRACES: usize = 3;
/// See [`MAX_TRACES`].
pub const MAX_STACKS: usize = 3;
/// See [`MAX_TRACES`].
pub const MAX_DUMPS: usize = 1;
/// See [`MAX_TRACES`].
pub const MAX_LIVE_METRICS: usize = 3;
/// See [`MAX_TRACES`].
pub const MAX_GCDUMPS: usize = 1;
/// Time the runtime has to answer a command (a dump has [`DUMP_TIMEOUT`]).
pub const COMMAND_TIMEOUT: Duration = Duration::from_secs(10);
/// Time a heap snapshot may take (dotnet-gcdump's default timeout).
pub const GCDUMP_TIMEOUT: Duration = Duration::from_secs(30);
/// Time the runtime has to write a dump.
pub const DUMP_TIMEOUT: Duration = Duration::from_secs(120);
/// Default `durationSeconds` of `/trace` (dotnet-monitor's).
pub const DEFAULT_TRACE_SECONDS: i64 = 30;

/// An error answer: a status and a problem+json body.
#[derive(Debug)]
pub struct ApiError {
    status: StatusCode,
    detail: String,
    /// Per-parameter messages (ValidationProblemDetails' `errors`).
    errors: Vec<(String, String)>,
}

impl ApiError {
    /// A 400 with `detail`.
    pub fn bad_request(detail: impl Into<String>) -> ApiError {
        ApiError {
            status: StatusCode::BAD_REQUEST,
            detail: detail.into(),
            errors: Vec::new(),
        }
    }

    /// A 400 naming the parameter `field`.
    pub fn invalid(field: &str, message: impl Into<String>) -> ApiError {
        let message = message.into();
        ApiError {
            status: StatusCode::BAD_REQUEST,
            detail: message.clone(),
            errors: vec![(field.to_string(), message)],
        }
    }

    /// A response with `status` and `detail` (406 has no body).
    pub fn with_status(status: StatusCode, detail: impl Into<String>) -> ApiError {
        ApiError {
            status,
            detail: detail.into(),
            errors: Vec::new(),
        }
    }

    /// A 500: something on serve's side failed.
    pub fn internal(detail: impl Into<String>) -> ApiError {
        ApiError {
            status: StatusCode::INTERNAL_SERVER_ERROR,
            detail: detail.into(),
            errors: Vec::new(),
        }
    }

    fn too_many(kind: &str, limit: usize) -> ApiError {
        ApiError {
            status: StatusCode::TOO_MANY_REQUESTS,
            detail: format!(
                "Too many requests: {} {} operation{} running already.",
                limit,
                kind,
                if limit == 1 { " is" } else { "s are" }
            ),
            errors: Vec::new(),
        }
    }

    fn status_title(&self) -> &'static str {
        match self.status {
            StatusCode::BAD_REQUEST if !self.errors.is_empty() => {
                "One or more validation errors occurred."
            }
            StatusCode::BAD_REQUEST => "Bad Request",
            StatusCode::TOO_MANY_REQUESTS => "Too Many Requests",
            StatusCode::NOT_FOUND => "Not Found",
            StatusCode::NOT_IMPLEMENTED => "Not Implemented",
            StatusCode::REQUEST_TIMEOUT => "Request Timeout",
            _ => "Internal Server Error",
        }
    }

    /// The problem+json response (406 has no body, as dotnet-monitor's).
    pub fn response(&self) -> Response<Body> {
        if self.status == StatusCode::NOT_ACCEPTABLE {
            let mut r = Response::new(http::full(Bytes::new()));
            *r.status_mut() = self.status;
            return r;
        }
        let body = json::to_string(&ProblemDetails {
            kind: match self.status {
                StatusCode::BAD_REQUEST => "https://tools.ietf.org/html/rfc9110#section-15.5.1",
                StatusCode::TOO_MANY_REQUESTS => "https://tools.ietf.org/html/rfc6585#section-4",
                StatusCode::NOT_FOUND => "https://tools.ietf.org/html/rfc9110#section-15.5.5",
                StatusCode::REQUEST_TIMEOUT => "https://tools.ietf.org/html/rfc9110#section-15.5.9",
                _ => "https://tools.ietf.org/html/rfc9110#section-15.6.1",
            },
            title: self.status_title(),
            status: self.status.as_u16(),
            detail: &self.detail,
            errors: Errors(&self.errors),
        });
        respond(self.status, "application/problem+json", body)
    }
}

impl From<dsipc_tokio::Error> for ApiError {
    fn from(e: dsipc_tokio::Error) -> ApiError {
        // The runtime refused or failed: dotnet-monitor answers these 400 with the reason.
        ApiError::bad_request(e.to_string())
    }
}

impl From<crate::CliError> for ApiError {
    fn from(e: crate::CliError) -> ApiError {
        ApiError::bad_request(e.to_string())
    }
}

pub(super) type ApiResult = Result<Response<Body>, ApiError>;

/// A response with `status`, `content_type` and a whole body.
pub fn respond(
    status: StatusCode,
    content_type: &'static str,
    body: impl Into<Bytes>,
) -> Response<Body> {
    let mut r = Response::new(http::full(body));
    *r.status_mut() = status;
    r.headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static(content_type));
    r
}

fn json_ok(body: String) -> Response<Body> {
    respond(StatusCode::OK, "application/json; charset=utf-8", body)
}

/// An artifact's headers: octet stream (or `content_type`), attachment named `file`.
fn attachment(mut r: Response<Body>, content_type: &'static str, file: &str) -> Response<Body> {
    r.headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static(content_type));
    if let Ok(v) = HeaderValue::from_str(&format!("attachment; filename=\"{}\"", file)) {
        r.headers_mut().insert(CONTENT_DISPOSITION, v);
    }
    r
}

/// The query's parameters, percent-decoded (`+` is a space); the last of a repeated
/// name wins, as ASP.NET's binder takes a single value.
pub fn query(req: &Request<Incoming>) -> Result<Vec<(String, String)>, ApiError> {
    let q = match req.uri().query() {
        Some(q) => q,
        None => return Ok(Vec::new()),
    };
    let mut out = Vec::new();
    for pair in q.split('&').filter(|p| !p.is_empty()) {
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        out.push((decode(k)?, decode(v)?));
    }
    Ok(out)
}

fn decode(s: &str) -> Result<String, ApiError> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'+' => out.push(b' '),
            b'%' => {
                let hex = |c: u8| (c as char).to_digit(16);
                match (
                    b.get(i + 1).and_then(|&c| hex(c)),
                    b.get(i + 2).and_then(|&c| hex(c)),
                ) {
                    (Some(h), Some(l)) => out.push((h * 16 + l) as u8),
                    _ => {
                        return Err(ApiError::bad_request(
                            "The query holds a malformed percent escape.",
                        ))
                    }
                }
                i += 2;
            }
            c => out.push(c),
        }
        i += 1;
    }
    String::from_utf8(out).map_err(|_| ApiError::bad_request("The query is not UTF-8 text."))
}

/// A query's parameters by name (case-insensitive, as ASP.NET binds them).
pub struct Params(Vec<(String, String)>);

impl Params {
    pub(super) fn get(&self, name: &str) -> Option<&str> {
        self.0
            .iter()
            .rev()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// These parameters but `name`.
    fn without(&self, name: &str) -> Params {
        Params(
            self.0
                .iter()
                .filter(|(k, _)| !k.eq_ignore_ascii_case(name))
                .cloned()
                .collect(),
        )
    }

    pub(super) fn int(&self, name: &str) -> Result<Option<i64>, ApiError> {
        match self.get(name) {
            None => Ok(None),
            Some(v) => v
                .trim()
                .parse::<i32>()
                .map(|n| Some(i64::from(n)))
                .map_err(|_| ApiError::invalid(name, format!("The value '{}' is not valid.", v))),
        }
    }

    pub(super) fn selector(&self) -> Result<Selector, ApiError> {
        let pid = match self.int("pid")? {
            None => None,
            Some(p) if p > 0 => Some(p as u32),
            Some(p) => {
                return Err(ApiError::invalid(
                    "pid",
                    format!("The value '{}' is not valid.", p),
                ))
            }
        };
        let uid = match self.get("uid") {
            None => None,
            Some(u) if is_guid(u) => Some(u.to_ascii_lowercase()),
            Some(u) => {
                return Err(ApiError::invalid(
                    "uid",
                    format!("The value '{}' is not valid.", u),
                ))
            }
        };
        Ok(Selector {
            pid,
            uid,
            name: self.get("name").map(str::to_string),
        })
    }

    /// `durationSeconds`: -1 (until the client goes away) or 0 and up; `None` for -1.
    pub(super) fn duration(&self, default: i64) -> Result<Option<Duration>, ApiError> {
        let secs = self.int("durationSeconds")?.unwrap_or(default);
        match secs {
            -1 => Ok(None),
            s if s >= 0 => Ok(Some(Duration::from_secs(s as u64))),
            _ => Err(ApiError::invalid(
                "durationSeconds",
                "The field durationSeconds must be between -1 and 2147483647.",
            )),
        }
    }

    /// `egressProvider`: `None` to send the artifact in the response, else the provider.
    pub(super) fn egress<'a>(&self, egress: &'a [Egress]) -> Result<Option<&'a Egress>, ApiError> {
        match self.get("egressProvider") {
            None | Some("") => Ok(None),
            Some(p) => match egress.iter().find(|e| e.name == p) {
                Some(e) => Ok(Some(e)),
                None => Err(ApiError::invalid(
                    "egressProvider",
                    format!("Egress provider '{}' does not exist.", p),
                )),
            },
        }
    }

    /// `tags`: comma separated, each trimmed, empty ones dropped, each at most once.
    pub(super) fn tags(&self) -> Vec<String> {
        let mut out: Vec<String> = Vec::new();
        for t in self.get("tags").unwrap_or("").split(',').map(str::trim) {
            if !t.is_empty() && !out.iter().any(|o| o == t) {
                out.push(t.to_string());
            }
        }
        out
    }
}

fn is_guid(s: &str) -> bool {
    let b = s.as_bytes();
    b.len() == 36
        && b.iter().enumerate().all(|(i, &c)| match i {
            8 | 13 | 18 | 23 => c == b'-',
            _ => c.is_ascii_hexdigit(),
        })
}

/// What serve was started with.
pub struct Api {
    /// Where runtimes are found, and which is the default.
    pub discovery: Discovery,
    /// The API key's verifier; `None` with `--no-auth`.
    pub auth: Option<Verifier>,
    /// Where runtimes write dumps before they are sent (serve's own folder).
    pub dump_dir: PathBuf,
    /// `/metrics`: the default process's counters.
    pub metrics: Metrics,
    /// File-system egress providers (`--egress NAME=DIR`).
    pub egress: Vec<Egress>,
    /// Artifacts on their way to egress providers.
    pub operations: Operations,
    /// Running operations by kind.
    pub traces: Arc<Semaphore>,
    pub dumps: Arc<Semaphore>,
    pub gcdumps: Arc<Semaphore>,
    pub stacks: Arc<Semaphore>,
    pub live_metrics: Arc<Semaphore>,
    pub logs: Arc<Semaphore>,
    /// How long a streamed answer waits for its reader to take a chunk (`--send-timeout`).
    pub send_timeout: Duration,
    /// Seconds between two counter publications (`/metrics`, `/livemetrics`).
    pub counter_interval: f64,
}

impl Api {
    pub(super) fn permit(
        sem: &Arc<Semaphore>,
        kind: &str,
        limit: usize,
    ) -> Result<OwnedSemaphorePermit, ApiError> {
        Arc::clone(sem)
            .try_acquire_owned()
            .map_err(|_| ApiError::too_many(kind, limit))
    }

    fn authorized(&self, req: &Request<Incoming>) -> bool {
        match &self.auth {
            None => true,
            Some(v) => req
                .headers()
                .get(hyper::header::AUTHORIZATION)
                .map_or(false, |h| v.accepts(h.as_bytes())),
        }
    }

    /// The main listener: every route, behind the API key.
    pub async fn handle(self: Arc<Self>, req: Request<Incoming>) -> Response<Body> {
        // dotnet-monitor's MetricsController asks for no key: `/metrics` is open on every
        // address it listens on, the API's too (a Prometheus job may scrape either).
        if req.method() == Method::GET && req.uri().path() == "/metrics" {
            return self.handle_metrics(req).await;
        }
        if !self.authorized(&req) {
            let mut r = Response::new(http::full(Bytes::new()));
            *r.status_mut() = StatusCode::UNAUTHORIZED;
            r.headers_mut()
                .insert(WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
            return r;
        }
        match self.route(req).await {
            Ok(r) => r,
            Err(e) => e.response(),
        }
    }

    /// The metrics listener: `/metrics` only, without authentication (as dotnet-monitor).
    pub async fn handle_metrics(self: Arc<Self>, req: Request<Incoming>) -> Response<Body> {
        match (req.method(), req.uri().path()) {
            (&Method::GET, "/metrics") => match self.metrics(&req).await {
                Ok(r) => r,
                Err(e) => e.response(),
            },
            _ => not_found(),
        }
    }

    async fn route(&self, req: Request<Incoming>) -> ApiResult {
        let path = req.uri().path().to_string();
        let method = req.method().clone();
        let params = Params(query(&req)?);
        let host = req
            .headers()
            .get(hyper::header::HOST)
            .and_then(|h| h.to_str().ok())
            .unwrap_or("localhost")
            .to_string();
        match (&method, path.as_str()) {
            (&Method::GET, "/processes") => self.processes().await,
            (&Method::GET, "/process") => self.process(&params).await,
            (&Method::GET, "/env") => self.env(&params).await,
            (&Method::GET, "/info") => Ok(self.info()),
            (&Method::GET, "/trace") => {
                let egress = params.egress(&self.egress)?;
                let profile = match params.get("profile") {
                    Some(p) => {
                        TraceProfile::parse(p).map_err(|e| ApiError::invalid("profile", e))?
                    }
                    None => TraceProfile::default_set(),
                };
                let duration = params.duration(DEFAULT_TRACE_SECONDS)?;
                let interval =
                    match params.int("metricsIntervalSeconds")? {
                        None => 1,
                        Some(i) if i >= 1 => i as u32,
                        Some(_) => return Err(ApiError::invalid(
                            "metricsIntervalSeconds",
                            "The field metricsIntervalSeconds must be between 1 and 2147483647.",
                        )),
                    };
                let runtime = self.discovery.select(&params.selector()?).await?;
                let specs = profiles::providers(profile, interval);
                let a = self
                    .trace(&runtime, specs, profile.wants_rundown(), 256, duration)
                    .await?;
                self.deliver(a, &runtime, egress, &params, &host)
            }
            (&Method::POST, "/trace") => {
                let egress = params.egress(&self.egress)?;
                let duration = params.duration(DEFAULT_TRACE_SECONDS)?;
                let selector = params.selector()?;
                let body = read_body(req).await?;
                let config = profiles::EventPipeConfiguration::parse(&body)?;
                let runtime = self.discovery.select(&selector).await?;
                let a = self
                    .trace(
                        &runtime,
                        config.providers,
                        config.request_rundown,
                        config.buffer_mb,
                        duration,
                    )
                    .await?;
                self.deliver(a, &runtime, egress, &params, &host)
            }
            (&Method::GET, "/stacks") => {
                let egress = params.egress(&self.egress)?;
                let format = StackFormat::from_accept(&req)?;
                let runtime = self.discovery.select(&params.selector()?).await?;
                let a = self.stacks(&runtime, format).await?;
                self.deliver(a, &runtime, egress, &params, &host)
            }
            (&Method::GET, "/gcdump") => {
                let egress = params.egress(&self.egress)?;
                let runtime = self.discovery.select(&params.selector()?).await?;
                let a = self.gcdump(&runtime).await?;
                self.deliver(a, &runtime, egress, &params, &host)
            }
            (&Method::GET, "/dump") => {
                let egress = params.egress(&self.egress)?;
                let kind = match params.get("type") {
                    None => DumpType::WithHeap,
                    Some(t) => dump_type(t)?,
                };
                let runtime = self.discovery.select(&params.selector()?).await?;
                let a = self.dump(&runtime, kind).await?;
                self.deliver(a, &runtime, egress, &params, &host)
            }
            (&Method::GET, "/operations") => {
                // dotnet-monitor binds any int32 pid here and filters by it: one that no
                // process can have (0, negative) lists nothing rather than being a 400.
                let ops = match params.int("pid")? {
                    Some(p) if p <= 0 => {
                        params.without("pid").selector()?;
                        Vec::new()
                    }
                    _ => {
                        let sel = params.selector()?;
                        self.operations.list(
                            sel.pid,
                            sel.uid.as_deref(),
                            sel.name.as_deref(),
                            &params.tags(),
                        )
                    }
                };
                let mut body = String::from("[");
                for (i, o) in ops.iter().enumerate() {
                    if i > 0 {
                        body.push(',');
                    }
                    body.push_str(&o.summary_json());
                }
                body.push(']');
                Ok(json_ok(body))
            }
            (&Method::GET, p) if p.starts_with("/operations/") => {
                let id = &p["/operations/".len()..];
                let op = self
                    .operations
                    .get(id)
                    .ok_or_else(|| unknown_operation(id))?;
                let mut r = json_ok(op.status_json());
                if op.succeeded() {
                    *r.status_mut() = StatusCode::CREATED;
                }
                Ok(r)
            }
            (&Method::DELETE, p) if p.starts_with("/operations/") => {
                let id = &p["/operations/".len()..];
                let stop = match params.get("stop") {
                    None => false,
                    Some(v) if v.eq_ignore_ascii_case("true") => true,
                    Some(v) if v.eq_ignore_ascii_case("false") => false,
                    Some(v) => {
                        return Err(ApiError::invalid(
                            "stop",
                            format!("The value '{}' is not valid.", v),
                        ))
                    }
                };
                match self.operations.delete(id, stop) {
                    Ok(()) => {
                        let mut r = Response::new(http::full(Bytes::new()));
                        if stop {
                            *r.status_mut() = StatusCode::ACCEPTED;
                        }
                        Ok(r)
                    }
                    Err(DeleteError::Unknown) => Err(unknown_operation(id)),
                    Err(DeleteError::Finished) => Err(ApiError::bad_request(format!(
                        "Operation '{}' is not running.",
                        id
                    ))),
                    Err(DeleteError::Unstoppable) => Err(ApiError::bad_request(format!(
                        "Operation '{}' cannot be stopped; delete it without stop to cancel it.",
                        id
                    ))),
                }
            }
            (&Method::GET, "/logs") | (&Method::POST, "/logs") => {
                super::logs::route(self, req, &params, &host).await
            }
            (&Method::GET, "/livemetrics") | (&Method::POST, "/livemetrics") => {
                super::livemetrics::route(self, req, &params, &host).await
            }
            (_, "/exceptions") | (_, "/parameters") | (_, "/collectionrules") => Err(ApiError {
                status: StatusCode::NOT_IMPLEMENTED,
                detail: format!("{} is not implemented by dsipc serve yet.", path),
                errors: Vec::new(),
            }),
            _ if path.starts_with("/collectionrules/") => Err(ApiError {
                status: StatusCode::NOT_IMPLEMENTED,
                detail: format!("{} is not implemented by dsipc serve yet.", path),
                errors: Vec::new(),
            }),
            _ => Ok(not_found()),
        }
    }

    /// Sends `a` in the response, or to `egress` as an operation (202 with its Location).
    pub(super) fn deliver(
        &self,
        a: Artifact,
        runtime: &Runtime,
        egress: Option<&Egress>,
        params: &Params,
        host: &str,
    ) -> ApiResult {
        let egress = match egress {
            None => return Ok(attachment(Response::new(a.body), a.content_type, &a.name)),
            Some(e) => e,
        };
        let process = ProcessRef {
            pid: runtime.pid,
            uid: runtime.uid.clone(),
            name: runtime.name.clone(),
        };
        let op = self
            .operations
            .start(egress, &a.name, a.body, process, params.tags(), a.stop)
            .map_err(ApiError::internal)?;
        let mut r = Response::new(http::full(Bytes::new()));
        *r.status_mut() = StatusCode::ACCEPTED;
        if let Ok(v) = HeaderValue::from_str(&format!("http://{}/operations/{}", host, op.id())) {
            r.headers_mut().insert(hyper::header::LOCATION, v);
        }
        Ok(r)
    }

    async fn processes(&self) -> ApiResult {
        let all = self.discovery.list().await?;
        let default_pid = self.discovery.default_of(&all).ok().map(|r| r.pid);
        let list: Vec<ProcessIdentifier<'_>> = all
            .iter()
            .map(|r| ProcessIdentifier {
                pid: r.pid,
                uid: &r.uid,
                name: &r.name,
                is_default: Some(r.pid) == default_pid,
            })
            .collect();
        let body = json::to_string(&list);
        Ok(json_ok(body))
    }

    async fn process(&self, params: &Params) -> ApiResult {
        let r = self.discovery.select(&params.selector()?).await?;
        let body = json::to_string(&ProcessInfo {
            pid: r.pid,
            uid: &r.uid,
            name: &r.name,
            command_line: &r.info.command_line,
            operating_system: r.info.os.to_ascii_lowercase(),
            process_architecture: r.info.arch.to_ascii_lowercase(),
            managed_entry_point_assembly_name: r
                .info
                .entrypoint_assembly
                .as_deref()
                .filter(|s| !s.is_empty()),
        });
        Ok(json_ok(body))
    }

    async fn env(&self, params: &Params) -> ApiResult {
        let r = self.discovery.select(&params.selector()?).await?;
        let vars = r.client(COMMAND_TIMEOUT).process_environment().await?;
        Ok(json_ok(json::to_string(&Environment(&vars))))
    }

    fn info(&self) -> Response<Body> {
        let (mode, port) = match &self.discovery.pool {
            Some(pool) => (
                "Listen",
                Some(pool.address().to_string_lossy().into_owned()),
            ),
            None => ("Connect", None),
        };
        let capabilities = [
            ("exceptions", false),
            ("parameters", false),
            ("callstacks", true),
            ("metrics", true),
            ("http_egress", false),
        ]
        .map(|(name, enabled)| MonitorCapability { name, enabled });
        let body = json::to_string(&DotnetMonitorInfo {
            version: format!("dsipc {}", env!("CARGO_PKG_VERSION")),
            runtime_version: None,
            diagnostic_port_mode: mode,
            diagnostic_port_name: port,
            capabilities: &capabilities,
        });
        json_ok(body)
    }

    async fn metrics(&self, _req: &Request<Incoming>) -> ApiResult {
        // The default process's counters, started on the first scrape that finds it.
        let all = self.discovery.list().await?;
        if let Ok(r) = self.discovery.default_of(&all) {
            self.metrics.ensure(r);
        }
        Ok(respond(
            StatusCode::OK,
            "text/plain; version=0.0.4; charset=utf-8",
            self.metrics.render(),
        ))
    }

    async fn trace(
        &self,
        runtime: &Runtime,
        specs: Vec<ProviderSpec>,
        rundown: bool,
        buffer_mb: u32,
        duration: Option<Duration>,
    ) -> Result<Artifact, ApiError> {
        let permit = Api::permit(&self.traces, "trace", MAX_TRACES)?;
        let client = runtime.client(COMMAND_TIMEOUT);
        let providers: Vec<Provider<'_>> = specs.iter().map(ProviderSpec::as_provider).collect();
        let session = client
            .collect_tracing(&providers, buffer_mb, rundown)
            .await?;
        let pid = runtime.pid;
        let (body, stop) = session::stream(
            session,
            duration,
            permit,
            self.send_timeout,
            pid,
            "trace",
            session::Nettrace::default(),
        );
        Ok(Artifact {
            name: artifact_name(pid, "nettrace"),
            content_type: "application/octet-stream",
            body,
            stop: Some(stop),
        })
    }

    async fn stacks(&self, runtime: &Runtime, format: StackFormat) -> Result<Artifact, ApiError> {
        let _permit = Api::permit(&self.stacks, "stacks", MAX_STACKS)?;
        let pid = runtime.pid;
        let client = runtime.client(COMMAND_TIMEOUT);
        let snapshot = super::collect::run(
            &client,
            crate::stack::Sampling::new(pid, COMMAND_TIMEOUT),
            Instant::now() + COMMAND_TIMEOUT,
        )
        .await?;
        Ok(match format {
            StackFormat::Json => Artifact {
                name: artifact_name(pid, "stacks.json"),
                content_type: "application/json",
                body: http::full(crate::stack::json(&snapshot, &|tid| {
                    crate::stack::thread_name(pid, tid)
                })),
                stop: None,
            },
            StackFormat::Speedscope => {
                let name = artifact_name(pid, "stacks.json");
                let mut out = Vec::new();
                dsipc_trace::format::ProfileFormat::Speedscope
                    .write(
                        &snapshot.to_profile(),
                        dsipc_trace::format::Selection {
                            managed_only: false,
                        },
                        &dsipc_trace::format::ProfileMeta {
                            name: name.clone(),
                            process: None,
                            info: None,
                        },
                        &mut out,
                    )
                    .map_err(|e| ApiError::internal(e.to_string()))?;
                Artifact {
                    name,
                    content_type: "application/speedscope+json",
                    body: http::full(out),
                    stop: None,
                }
            }
            StackFormat::Text => Artifact {
                name: artifact_name(pid, "stacks.txt"),
                content_type: "text/plain",
                body: http::full(crate::stack::text(&snapshot)),
                stop: None,
            },
        })
    }

    async fn gcdump(&self, runtime: &Runtime) -> Result<Artifact, ApiError> {
        let _permit = Api::permit(&self.gcdumps, "gcdump", MAX_GCDUMPS)?;
        let pid = runtime.pid;
        let client = runtime.client(GCDUMP_TIMEOUT);
        let deadline = Instant::now() + GCDUMP_TIMEOUT;
        let now = SystemTime::now();
        super::collect::run(
            &client,
            crate::gcdump::TypeFlush::new(pid, GCDUMP_TIMEOUT),
            deadline,
        )
        .await?;
        let graph = super::collect::run(
            &client,
            crate::gcdump::HeapWalk::new(pid, GCDUMP_TIMEOUT),
            deadline,
        )
        .await?;
        // Writing a large graph takes a while: off the thread that answers requests.
        let bytes = tokio::task::spawn_blocking(move || -> Result<Vec<u8>, ApiError> {
            let mut out = Vec::new();
            dsipc_trace::heap::gcdump::write(&graph, &crate::gcdump::file_info(pid, now), &mut out)
                .map_err(|e| ApiError::internal(format!("writing the gcdump: {}", e)))?;
            Ok(out)
        })
        .await
        .map_err(|e| ApiError::internal(e.to_string()))??;
        Ok(Artifact {
            name: artifact_name(pid, "gcdump"),
            content_type: "application/octet-stream",
            body: http::full(bytes),
            stop: None,
        })
    }
}

/// An artifact on its way to the client or an egress provider.
pub(super) struct Artifact {
    /// Its file name (dotnet-monitor's).
    pub name: String,
    /// Its content type.
    pub content_type: &'static str,
    /// Its bytes, whole or streamed.
    pub body: Body,
    /// Ends its collection early keeping what came (`None`: not stoppable).
    pub stop: Option<Arc<Notify>>,
}

fn unknown_operation(id: &str) -> ApiError {
    ApiError::bad_request(format!("Operation id '{}' was not found.", id))
}

fn dump_type(t: &str) -> Result<DumpType, ApiError> {
    match t.to_ascii_lowercase().as_str() {
        "mini" => Ok(DumpType::Normal),
        "full" => Ok(DumpType::Full),
        "withheap" => Ok(DumpType::WithHeap),
        "triage" => Ok(DumpType::Triage),
        _ => Err(ApiError::invalid(
            "type",
            format!("The value '{}' is not valid.", t),
        )),
    }
}

/// dotnet-monitor's artifact time stamp: `yyyyMMdd_HHmmss_fff`, UTC.
pub(super) fn timestamp() -> String {
    let now = SystemTime::now();
    let (y, mo, d, h, mi, s) = crate::counters::output::civil(now);
    let ms = now
        .duration_since(SystemTime::UNIX_EPOCH)
        .map(|d| d.subsec_millis())
        .unwrap_or(0);
    format!(
        "{:04}{:02}{:02}_{:02}{:02}{:02}_{:03}",
        y, mo, d, h, mi, s, ms
    )
}

/// `{timestamp}_{pid}.{ext}`, dotnet-monitor's name for traces, gcdumps and stacks.
pub(super) fn artifact_name(pid: u32, ext: &str) -> String {
    format!("{}_{}.{}", timestamp(), pid, ext)
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum StackFormat {
    Json,
    Text,
    Speedscope,
}

impl StackFormat {
    /// dotnet-monitor's negotiation: an exact media type first (text/plain, then
    /// application/json, then application/speedscope+json), then a wildcard in the same
    /// order; no `Accept` is JSON.
    fn from_accept(req: &Request<Incoming>) -> Result<StackFormat, ApiError> {
        let accept = match req.headers().get(hyper::header::ACCEPT) {
            None => return Ok(StackFormat::Json),
            Some(v) => v.to_str().unwrap_or(""),
        };
        let media: Vec<String> = accept
            .split(',')
            .map(|m| {
                m.split(';')
                    .next()
                    .unwrap_or("")
                    .trim()
                    .to_ascii_lowercase()
            })
            .collect();
        let offered = [
            ("text/plain", StackFormat::Text),
            ("application/json", StackFormat::Json),
            ("application/speedscope+json", StackFormat::Speedscope),
        ];
        for (m, f) in offered {
            if media.iter().any(|x| x == m) {
                return Ok(f);
            }
        }
        for (m, f) in offered {
            let kind = m.split('/').next().unwrap_or("");
            if media
                .iter()
                .any(|x| x == "*/*" || *x == format!("{}/*", kind))
            {
                return Ok(f);
            }
        }
        Err(ApiError {
            status: StatusCode::NOT_ACCEPTABLE,
            detail: String::new(),
            errors: Vec::new(),
        })
    }
}

fn not_found() -> Response<Body> {
    let mut r = Response::new(http::full(Bytes::new()));
    *r.status_mut() = StatusCode::NOT_FOUND;
    r
}

/// A JSON request body that must be one object (`what`: its schema's name, for messages).
/// ASP.NET's binder takes member names ignoring case: see [`member`].
pub(super) fn json_object(
    body: &[u8],
    what: &str,
) -> Result<serde_json::Map<String, serde_json::Value>, ApiError> {
    let doc: serde_json::Value = serde_json::from_slice(body).map_err(|e| {
        ApiError::invalid(
            "$",
            format!(
                "The body is not JSON: {} (line {}, column {}).",
                e,
                e.line(),
                e.column()
            ),
        )
    })?;
    match doc {
        serde_json::Value::Object(o) => Ok(o),
        _ => Err(ApiError::invalid(
            "$",
            format!("The body must be a {} object.", what),
        )),
    }
}

/// `obj`'s member `name`, ignoring case.
pub(super) fn member<'a>(
    obj: &'a serde_json::Map<String, serde_json::Value>,
    name: &str,
) -> Option<&'a serde_json::Value> {
    obj.iter()
        .find(|(k, _)| k.eq_ignore_ascii_case(name))
        .map(|(_, v)| v)
}

/// The request body, at most [`MAX_BODY`] bytes, at Kestrel's minimum data rate
/// ([`http::read_body`]): 408 when it comes too slowly, 400 when it is too large.
pub(super) async fn read_body(req: Request<Incoming>) -> Result<Bytes, ApiError> {
    http::read_body(req, MAX_BODY).await.map_err(|e| {
        if e.is_timeout() {
            ApiError::with_status(StatusCode::REQUEST_TIMEOUT, e.to_string())
        } else {
            ApiError::bad_request(e.to_string())
        }
    })
}
