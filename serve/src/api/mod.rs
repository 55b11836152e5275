//! dotnet-monitor's routes: request in, response out.
//!
//! Each route reads its query (`pid`/`uid`/`name`, `durationSeconds`, ...), finds the
//! runtime ([`procs`](crate::procs)), and answers with dotnet-monitor's content types and JSON shapes.
//! Errors are `application/problem+json` (ValidationProblemDetails for 400). Artifacts
//! stream: a trace is sent as the runtime writes it (a chunked body; a client that goes away
//! stops the session), a dump is read from serve's storage folder and deleted once sent.

mod error;
mod query;
mod router;
mod routes;
mod rules;

pub use error::ApiError;
pub(super) use error::ApiResult;
pub use query::{query, Params};
pub(crate) use routes::StackFormat;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use bytes::Bytes;
use hyper::body::Incoming;
use hyper::header::{HeaderValue, ALLOW, CONTENT_DISPOSITION, CONTENT_TYPE, WWW_AUTHENTICATE};
use hyper::{Method, Request, Response, StatusCode};
use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore};

use super::auth::Verifier;
use super::metrics::Metrics;
use super::operations::{Egress, Operations, ProcessRef};
use super::procs::{Discovery, Runtime};
use crate::http::{self, Body};

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
    /// Every process's first-chance exceptions (`/exceptions`, `CollectExceptions`).
    pub exceptions: crate::exceptions::Exceptions,
    /// How long a streamed answer waits for its reader to take a chunk (`--send-timeout`).
    pub send_timeout: Duration,
    /// Seconds between two counter publications (`/metrics`, `/livemetrics`).
    pub counter_interval: f64,
    /// The collection rules and their state on each process (`None`: none configured).
    pub rules: Option<Arc<crate::collection::Rules>>,
}

/// Who asks for an operation. The API's requests are held to dotnet-monitor's per-kind
/// limits ([`MAX_TRACES`]...: one more is answered 429); a collection rule's actions are not,
/// as in dotnet-monitor ("Collection Rules do not follow request limits"): a rule is bounded
/// by its own limits (one execution at a time on each process, its ActionCount).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Requester {
    /// A request to the HTTP API.
    Api,
    /// A collection rule's action.
    Rule,
}

/// A place taken among an operation kind's limit until dropped (none for a rule's action).
pub type Permit = Option<OwnedSemaphorePermit>;

impl Api {
    pub(super) fn permit(
        sem: &Arc<Semaphore>,
        kind: &str,
        limit: usize,
        by: Requester,
    ) -> Result<Permit, ApiError> {
        match by {
            Requester::Rule => Ok(None),
            Requester::Api => Arc::clone(sem)
                .try_acquire_owned()
                .map(Some)
                .map_err(|_| ApiError::too_many(kind, limit)),
        }
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
            (_, "/metrics") => not_routed("/metrics"),
            _ => not_found(),
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
            .start(
                egress,
                &a.name,
                a.content_type,
                a.body,
                process,
                params.tags(),
                a.stop,
            )
            .map_err(ApiError::internal)?;
        let mut r = Response::new(http::full(Bytes::new()));
        *r.status_mut() = StatusCode::ACCEPTED;
        if let Ok(v) = HeaderValue::from_str(&format!("http://{}/operations/{}", host, op.id())) {
            r.headers_mut().insert(hyper::header::LOCATION, v);
        }
        Ok(r)
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

/// dotnet-monitor's artifact time stamp: `yyyyMMdd_HHmmss_fff`, UTC.
pub(super) fn timestamp() -> String {
    let now = SystemTime::now();
    let ms = now
        .duration_since(SystemTime::UNIX_EPOCH)
        .map(|d| d.subsec_millis())
        .unwrap_or(0);
    format!("{}_{:03}", dsipc_trace::format::stamp(now), ms)
}

/// `{timestamp}_{pid}.{ext}`, dotnet-monitor's name for traces, gcdumps and stacks.
pub(super) fn artifact_name(pid: u32, ext: &str) -> String {
    format!("{}_{}.{}", timestamp(), pid, ext)
}

/// The first of `offered` (content types, in the route's order of preference) that an
/// `Accept` header asks for, as dotnet-monitor's routes negotiate: an exact match first,
/// then the first a wildcard (`*/*`, `text/*`) covers; parameters (`;q=`) are ignored.
/// `None` without an `Accept` header or when none is asked for.
pub(super) fn negotiate(accept: Option<&str>, offered: &[&str]) -> Option<usize> {
    let media: Vec<String> = accept?
        .split(',')
        .map(|m| {
            m.split(';')
                .next()
                .unwrap_or("")
                .trim()
                .to_ascii_lowercase()
        })
        .filter(|m| !m.is_empty())
        .collect();
    if let Some(i) = offered.iter().position(|f| media.iter().any(|m| m == f)) {
        return Some(i);
    }
    offered.iter().position(|f| {
        let kind = f.split('/').next().unwrap_or("");
        media
            .iter()
            .any(|m| m == "*/*" || *m == format!("{}/*", kind))
    })
}

fn not_found() -> Response<Body> {
    let mut r = Response::new(http::full(Bytes::new()));
    *r.status_mut() = StatusCode::NOT_FOUND;
    r
}

/// The methods dotnet-monitor has a route for at `path`, as an `Allow` header's value
/// (`None`: no route at that path).
fn allowed_methods(path: &str) -> Option<&'static str> {
    match path {
        "/processes" | "/process" | "/env" | "/info" | "/stacks" | "/gcdump" | "/dump"
        | "/operations" | "/collectionrules" | "/metrics" => Some("GET"),
        "/trace" | "/logs" | "/livemetrics" | "/exceptions" => Some("GET, POST"),
        "/parameters" => Some("POST"),
        p if p.starts_with("/operations/") => Some("GET, DELETE"),
        p if p.starts_with("/collectionrules/") => Some("GET"),
        _ => None,
    }
}

/// The answer to a request no route takes: 405 with the path's `Allow` where the path has
/// routes for other methods (as ASP.NET's routing answers), else 404.
fn not_routed(path: &str) -> Response<Body> {
    match allowed_methods(path) {
        None => not_found(),
        Some(allow) => {
            let mut r = Response::new(http::full(Bytes::new()));
            *r.status_mut() = StatusCode::METHOD_NOT_ALLOWED;
            r.headers_mut()
                .insert(ALLOW, HeaderValue::from_static(allow));
            r
        }
    }
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
