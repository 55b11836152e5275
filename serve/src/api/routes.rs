//! The routes that answer from the runtime: processes, environment, info, metrics, traces,
//! stacks and gcdumps.

use std::time::{Duration, Instant, SystemTime};

use hyper::body::Incoming;
use hyper::{Request, Response, StatusCode};

use dsipc::payload::Provider;

use super::{
    artifact_name, json_ok, respond, Api, ApiError, ApiResult, Artifact, Params, Requester,
    COMMAND_TIMEOUT, GCDUMP_TIMEOUT, MAX_GCDUMPS, MAX_STACKS, MAX_TRACES,
};
use crate::http::{self, Body};
use dsipc_recipes::gcdump::{self, HeapWalk, TypeFlush};
use dsipc_recipes::stack::{self, Sampling};
use dsipc_recipes::{Collect, RecipeError};
use dsipc_tokio::DiagnosticsClient;

use crate::json;
use crate::models::{
    DotnetMonitorInfo, Environment, MonitorCapability, ProcessIdentifier, ProcessInfo,
};
use crate::procs::Runtime;
use crate::profiles::EventPipeConfiguration;
use crate::session;
use dsipc::session::providers::ProviderSpec;
impl Api {
    pub(super) async fn processes(&self) -> ApiResult {
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

    pub(super) async fn process(&self, params: &Params) -> ApiResult {
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

    pub(super) async fn env(&self, params: &Params) -> ApiResult {
        let r = self.discovery.select(&params.selector()?).await?;
        let vars = r.client(COMMAND_TIMEOUT).process_environment().await?;
        Ok(json_ok(json::to_string(&Environment(&vars))))
    }

    pub(super) fn info(&self) -> Response<Body> {
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

    pub(super) async fn metrics(&self, _req: &Request<Incoming>) -> ApiResult {
        // What the store holds: the collection follows the default process on its own
        // (`metrics::follow`), a scrape neither discovers nor starts anything.
        let text = self
            .metrics
            .render()
            .ok_or_else(|| ApiError::bad_request(crate::metrics::DISABLED))?;
        Ok(respond(
            StatusCode::OK,
            "text/plain; version=0.0.4; charset=utf-8",
            text,
        ))
    }

    /// A trace of `runtime` with `config` for `duration` (`None`: until stopped).
    pub(crate) async fn trace(
        &self,
        runtime: &Runtime,
        config: EventPipeConfiguration,
        duration: Option<Duration>,
        by: Requester,
    ) -> Result<Artifact, ApiError> {
        let sink = session::Nettrace;
        self.trace_with(runtime, config, duration, sink, by).await
    }

    /// [`Api::trace`] with the stream going through `sink` (CollectTrace's StoppingEvent
    /// reads it on the way).
    pub(crate) async fn trace_with<S: session::Sink>(
        &self,
        runtime: &Runtime,
        config: EventPipeConfiguration,
        duration: Option<Duration>,
        sink: S,
        by: Requester,
    ) -> Result<Artifact, ApiError> {
        let permit = Api::permit(&self.traces, "trace", MAX_TRACES, by)?;
        let client = runtime.client(COMMAND_TIMEOUT);
        let providers: Vec<Provider<'_>> = config
            .providers
            .iter()
            .map(ProviderSpec::as_provider)
            .collect();
        let session = client
            .collect_tracing(&providers, config.buffer_mb, config.request_rundown)
            .await?;
        let pid = runtime.pid;
        let (body, stop) = session::stream(
            session,
            duration,
            permit,
            self.send_timeout,
            pid,
            "trace",
            sink,
        );
        Ok(Artifact {
            name: artifact_name(pid, "nettrace"),
            content_type: "application/octet-stream",
            body,
            stop: Some(stop),
        })
    }

    pub(crate) async fn stacks(
        &self,
        runtime: &Runtime,
        format: StackFormat,
        by: Requester,
    ) -> Result<Artifact, ApiError> {
        let _permit = Api::permit(&self.stacks, "stacks", MAX_STACKS, by)?;
        let pid = runtime.pid;
        let client = runtime.client(COMMAND_TIMEOUT);
        let snapshot = collect(
            pid,
            &client,
            Sampling::new(pid, COMMAND_TIMEOUT),
            Instant::now() + COMMAND_TIMEOUT,
        )
        .await?;
        Ok(match format {
            StackFormat::Json => Artifact {
                name: artifact_name(pid, "stacks.json"),
                content_type: "application/json",
                body: http::full(stack::json(&snapshot, &|tid| stack::thread_name(pid, tid))),
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
                body: http::full(stack::text(&snapshot)),
                stop: None,
            },
        })
    }

    pub(crate) async fn gcdump(
        &self,
        runtime: &Runtime,
        by: Requester,
    ) -> Result<Artifact, ApiError> {
        let _permit = Api::permit(&self.gcdumps, "gcdump", MAX_GCDUMPS, by)?;
        let pid = runtime.pid;
        let client = runtime.client(GCDUMP_TIMEOUT);
        let deadline = Instant::now() + GCDUMP_TIMEOUT;
        let now = SystemTime::now();
        collect(pid, &client, TypeFlush::new(pid, GCDUMP_TIMEOUT), deadline).await?;
        let graph = collect(pid, &client, HeapWalk::new(pid, GCDUMP_TIMEOUT), deadline).await?;
        for w in gcdump::warnings(&graph) {
            eprintln!("dsipc: serve: pid {}: warning: {}", pid, w);
        }
        // Writing a large graph takes a while: off the thread that answers requests.
        let bytes = tokio::task::spawn_blocking(move || -> Result<Vec<u8>, ApiError> {
            let mut out = Vec::new();
            dsipc_trace::heap::gcdump::write(&graph, &gcdump::file_info(pid, now), &mut out)
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

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum StackFormat {
    Json,
    Text,
    Speedscope,
}

impl StackFormat {
    /// dotnet-monitor's negotiation: an exact media type first (text/plain, then
    /// application/json, then application/speedscope+json), then a wildcard in the same
    /// order; no `Accept` is JSON.
    pub(super) fn from_accept(req: &Request<Incoming>) -> Result<StackFormat, ApiError> {
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

/// Runs recipe `c` on `client` (runtime `pid`): a runtime that streams past the recipe's
/// bound is named in serve's log too (the answer tells only the client).
async fn collect<C: Collect>(
    pid: u32,
    client: &DiagnosticsClient,
    c: C,
    deadline: Instant,
) -> Result<C::Output, ApiError> {
    dsipc_recipes::run_async(client, c, deadline)
        .await
        .map_err(|e| {
            if let RecipeError::TooLarge { .. } = e {
                eprintln!("dsipc: serve: pid {}: {}", pid, e);
            }
            ApiError::from(e)
        })
}
