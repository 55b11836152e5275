//! The router: each method and path to its route.

use bytes::Bytes;
use hyper::body::Incoming;
use hyper::{Method, Request, Response, StatusCode};

use dsipc::payload::DumpType;

use super::error::unknown_operation;
use super::query::dump_type;
use super::routes::StackFormat;
use super::{
    json_ok, not_routed, query, read_body, Api, ApiError, ApiResult, Params, Requester,
    DEFAULT_TRACE_SECONDS,
};
use crate::http;
use crate::operations::{DeleteError, Operation};
use crate::profiles::{self, TraceProfile};
impl Api {
    pub(super) async fn route(&self, req: Request<Incoming>) -> ApiResult {
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
                let config = profiles::EventPipeConfiguration {
                    providers: specs,
                    request_rundown: profile.wants_rundown(),
                    buffer_mb: 256,
                };
                let a = self
                    .trace(&runtime, config, duration, Requester::Api)
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
                    .trace(&runtime, config, duration, Requester::Api)
                    .await?;
                self.deliver(a, &runtime, egress, &params, &host)
            }
            (&Method::GET, "/stacks") => {
                let egress = params.egress(&self.egress)?;
                let format = StackFormat::from_accept(&req)?;
                let runtime = self.discovery.select(&params.selector()?).await?;
                let a = self.stacks(&runtime, format, Requester::Api).await?;
                self.deliver(a, &runtime, egress, &params, &host)
            }
            (&Method::GET, "/gcdump") => {
                let egress = params.egress(&self.egress)?;
                let runtime = self.discovery.select(&params.selector()?).await?;
                let a = self.gcdump(&runtime, Requester::Api).await?;
                self.deliver(a, &runtime, egress, &params, &host)
            }
            (&Method::GET, "/dump") => {
                let egress = params.egress(&self.egress)?;
                let kind = match params.get("type") {
                    None => DumpType::WithHeap,
                    Some(t) => dump_type(t)?,
                };
                let runtime = self.discovery.select(&params.selector()?).await?;
                let a = self.dump(&runtime, kind, Requester::Api).await?;
                self.deliver(a, &runtime, egress, &params, &host)
            }
            (&Method::GET, "/operations") => {
                // dotnet-monitor binds any int32 pid here and filters by it: one that no
                // process can have (0, negative) lists nothing rather than being a 400.
                let ops = match params.nullable_int("pid")? {
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
                Ok(json_ok(Operation::summaries_json(&ops)))
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
                crate::logs::route(self, req, &params, &host).await
            }
            (&Method::GET, "/livemetrics") | (&Method::POST, "/livemetrics") => {
                crate::livemetrics::route(self, req, &params, &host).await
            }
            (&Method::GET, "/exceptions") | (&Method::POST, "/exceptions") => {
                crate::exceptions::route(self, req, &params, &host).await
            }
            (&Method::GET, "/collectionrules") => self.collection_rules(None, &params).await,
            (&Method::GET, p) if p.starts_with("/collectionrules/") => {
                let name = super::query::decode(&p["/collectionrules/".len()..])?;
                self.collection_rules(Some(&name), &params).await
            }
            (_, "/parameters") => Err(ApiError {
                status: StatusCode::NOT_IMPLEMENTED,
                detail: format!("{} is not implemented by dsipc serve yet.", path),
                errors: Vec::new(),
            }),
            _ => Ok(not_routed(&path)),
        }
    }
}
