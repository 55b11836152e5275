//! The routes that answer from the runtime: processes, environment, info, metrics, traces,
//! stacks and gcdumps.

use std::time::{Duration, Instant, SystemTime};

use hyper::body::Incoming;
use hyper::{Request, Response, StatusCode};

use dsipc::payload::Provider;

use super::{
    artifact_name, json_ok, respond, Api, ApiError, ApiResult, Artifact, Params, COMMAND_TIMEOUT,
    GCDUMP_TIMEOUT, MAX_GCDUMPS, MAX_STACKS, MAX_TRACES,
};
use crate::http::{self, Body};
use crate::json;
use crate::providers::ProviderSpec;
use crate::serve::procs::Runtime;
use crate::serve::session;
impl Api {
    pub(super) async fn processes(&self) -> ApiResult {
        let all = self.discovery.list().await?;
        let default_pid = self.discovery.default_of(&all).ok().map(|r| r.pid);
        let mut body = String::from("[");
        for (i, r) in all.iter().enumerate() {
            if i > 0 {
                body.push(',');
            }
            let mut o = json::Object::new();
            o.number("pid", u64::from(r.pid));
            o.string("uid", &r.uid);
            o.string("name", &r.name);
            o.boolean("isDefault", Some(r.pid) == default_pid);
            body.push_str(&o.finish());
        }
        body.push(']');
        Ok(json_ok(body))
    }

    pub(super) async fn process(&self, params: &Params) -> ApiResult {
        let r = self.discovery.select(&params.selector()?).await?;
        let mut o = json::Object::new();
        o.number("pid", u64::from(r.pid));
        o.string("uid", &r.uid);
        o.string("name", &r.name);
        o.string("commandLine", &r.info.command_line);
        o.string("operatingSystem", &r.info.os.to_ascii_lowercase());
        o.string("processArchitecture", &r.info.arch.to_ascii_lowercase());
        o.opt_string(
            "managedEntryPointAssemblyName",
            r.info
                .entrypoint_assembly
                .as_deref()
                .filter(|s| !s.is_empty()),
        );
        Ok(json_ok(o.finish()))
    }

    pub(super) async fn env(&self, params: &Params) -> ApiResult {
        let r = self.discovery.select(&params.selector()?).await?;
        let vars = r.client(COMMAND_TIMEOUT).process_environment().await?;
        let mut o = json::Object::new();
        for v in &vars {
            let (name, value) = v.split_once('=').unwrap_or((v.as_str(), ""));
            o.string(name, value);
        }
        Ok(json_ok(o.finish()))
    }

    pub(super) fn info(&self) -> Response<Body> {
        let mut o = json::Object::new();
        o.string("version", &format!("dsipc {}", env!("CARGO_PKG_VERSION")));
        o.opt_string("runtimeVersion", None);
        match &self.discovery.pool {
            Some(pool) => {
                o.string("diagnosticPortMode", "Listen");
                o.string("diagnosticPortName", &pool.address().to_string_lossy());
            }
            None => {
                o.string("diagnosticPortMode", "Connect");
                o.opt_string("diagnosticPortName", None);
            }
        }
        let mut body = o.finish();
        body.pop();
        body.push_str(",\"capabilities\":[");
        for (i, (name, enabled)) in [
            ("exceptions", false),
            ("parameters", false),
            ("callstacks", true),
            ("metrics", true),
            ("http_egress", false),
        ]
        .iter()
        .enumerate()
        {
            if i > 0 {
                body.push(',');
            }
            let mut c = json::Object::new();
            c.string("name", name);
            c.boolean("enabled", *enabled);
            body.push_str(&c.finish());
        }
        body.push_str("]}");
        json_ok(body)
    }

    pub(super) async fn metrics(&self, _req: &Request<Incoming>) -> ApiResult {
        // What the store holds: the collection follows the default process on its own
        // (`metrics::follow`), a scrape neither discovers nor starts anything.
        let text = self
            .metrics
            .render()
            .ok_or_else(|| ApiError::bad_request(crate::serve::metrics::DISABLED))?;
        Ok(respond(
            StatusCode::OK,
            "text/plain; version=0.0.4; charset=utf-8",
            text,
        ))
    }

    pub(super) async fn trace(
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

    pub(super) async fn stacks(
        &self,
        runtime: &Runtime,
        format: StackFormat,
    ) -> Result<Artifact, ApiError> {
        let _permit = Api::permit(&self.stacks, "stacks", MAX_STACKS)?;
        let pid = runtime.pid;
        let client = runtime.client(COMMAND_TIMEOUT);
        let snapshot = crate::serve::collect::run(
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

    pub(super) async fn gcdump(&self, runtime: &Runtime) -> Result<Artifact, ApiError> {
        let _permit = Api::permit(&self.gcdumps, "gcdump", MAX_GCDUMPS)?;
        let pid = runtime.pid;
        let client = runtime.client(GCDUMP_TIMEOUT);
        let deadline = Instant::now() + GCDUMP_TIMEOUT;
        let now = SystemTime::now();
        crate::serve::collect::run(
            &client,
            crate::gcdump::TypeFlush::new(pid, GCDUMP_TIMEOUT),
            deadline,
        )
        .await?;
        let graph = crate::serve::collect::run(
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

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum StackFormat {
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
