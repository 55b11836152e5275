//! `GET /livemetrics` and `POST /livemetrics`: a process's counters for a while, as
//! dotnet-monitor streams them: `application/json-seq` (RFC 7464), one `Metric` record per
//! value (`timestamp`, `provider`, `name`, `displayName`, `unit`, `counterType` (`Rate` or
//! `Metric`), `tags`, `value`).
//!
//! GET collects dotnet-monitor's default providers (`System.Runtime`,
//! `Microsoft.AspNetCore.Hosting`, `Grpc.AspNetCore.Server`); POST takes an
//! `EventMetricsConfiguration` (`includeDefaultProviders`, `providers[{providerName,
//! counterNames}]`, `meters[{meterName, instrumentNames}]`). The session is decoded by
//! dsipc-trace's counters decoder as it arrives.

use std::io;

use bytes::Bytes;
use hyper::body::Incoming;
use hyper::{Method, Request};
use serde_json::Value;

use dsipc_trace::counters::{CounterEvent, CounterSet, CountersConfig, Decoder, Sample};

use super::api::{
    artifact_name, json_object, member, read_body, Api, ApiError, ApiResult, Artifact, Params,
    Requester,
};
use super::models::Metric;
use super::procs::Runtime;
use super::session::{self, Sink};
use crate::json;
use dsipc::session::Outcome;

/// dotnet-monitor's default counter providers.
pub(crate) const DEFAULT_PROVIDERS: [&str; 3] = [
    "System.Runtime",
    "Microsoft.AspNetCore.Hosting",
    "Grpc.AspNetCore.Server",
];

/// The most providers and meters a configuration may name.
const MAX_NAMED: usize = 100;

/// Answers `GET /livemetrics` and `POST /livemetrics`.
pub(super) async fn route(
    api: &Api,
    req: Request<Incoming>,
    params: &Params,
    host: &str,
) -> ApiResult {
    let egress = params.egress(&api.egress)?;
    let duration = params.duration(super::api::DEFAULT_TRACE_SECONDS)?;
    let selector = params.selector()?;
    let counters = if req.method() == Method::POST {
        let body = read_body(req).await?;
        configuration(&body)?
    } else {
        CounterSet::parse(&DEFAULT_PROVIDERS.join(","))
            .map_err(|e| ApiError::internal(e.to_string()))?
    };
    let runtime = api.discovery.select(&selector).await?;
    let artifact = collect(api, &runtime, counters, duration, Requester::Api).await?;
    api.deliver(artifact, &runtime, egress, params, host)
}

/// Starts a counters session on `runtime` for `counters`, its samples written as
/// dotnet-monitor's `Metric` records for `duration` (`None`: until stopped): the artifact
/// `/livemetrics` and CollectLiveMetrics send.
pub(crate) async fn collect(
    api: &Api,
    runtime: &Runtime,
    counters: CounterSet,
    duration: Option<std::time::Duration>,
    by: Requester,
) -> Result<Artifact, ApiError> {
    let permit = Api::permit(
        &api.live_metrics,
        "livemetrics",
        super::api::MAX_LIVE_METRICS,
        by,
    )?;
    let client = runtime.client(super::api::COMMAND_TIMEOUT);
    let major = runtime.major_version();
    let config = CountersConfig::new(counters, api.counter_interval, major);
    let owned = config.providers();
    let providers: Vec<_> = owned.iter().map(|p| p.as_provider()).collect();
    let session = client.collect_tracing(&providers, 16, false).await?;
    let (body, stop) = session::stream(
        session,
        duration,
        permit,
        api.send_timeout,
        runtime.pid,
        "livemetrics",
        Metrics {
            decoder: Decoder::new(&config),
        },
    );
    Ok(Artifact {
        name: artifact_name(runtime.pid, "metrics.json"),
        content_type: "application/json-seq",
        body,
        stop: Some(stop),
    })
}

/// The counters an EventMetricsConfiguration names.
fn configuration(body: &[u8]) -> Result<CounterSet, ApiError> {
    let obj = &json_object(body, "EventMetricsConfiguration")?;
    let member = |name: &str| member(obj, name);
    let mut spec: Vec<String> = Vec::new();
    match member("includeDefaultProviders") {
        None | Some(Value::Null) | Some(Value::Bool(true)) => {
            spec.extend(DEFAULT_PROVIDERS.iter().map(|p| p.to_string()))
        }
        Some(Value::Bool(false)) => {}
        Some(_) => {
            return Err(ApiError::invalid(
                "IncludeDefaultProviders",
                "IncludeDefaultProviders must be true or false.",
            ))
        }
    }
    for (list, name_key, names_key) in [
        ("providers", "providerName", "counterNames"),
        ("meters", "meterName", "instrumentNames"),
    ] {
        let items = match member(list) {
            None | Some(Value::Null) => continue,
            Some(Value::Array(a)) if a.len() <= MAX_NAMED => a,
            Some(Value::Array(_)) => {
                return Err(ApiError::invalid(
                    list,
                    format!("At most {} entries.", MAX_NAMED),
                ))
            }
            Some(_) => {
                return Err(ApiError::invalid(
                    list,
                    format!("{} must be an array.", list),
                ))
            }
        };
        for (i, item) in items.iter().enumerate() {
            let at = |m: &str| format!("{}[{}].{}", list, i, m);
            let get = |k: &str| {
                item.as_object().and_then(|o| {
                    o.iter()
                        .find(|(key, _)| key.eq_ignore_ascii_case(k))
                        .map(|(_, v)| v)
                })
            };
            let name = match get(name_key) {
                Some(Value::String(s)) if valid_name(s) => s.clone(),
                _ => {
                    return Err(ApiError::invalid(
                        &at(name_key),
                        format!(
                            "The {} field is required (a name without '[', ']' or ',').",
                            name_key
                        ),
                    ))
                }
            };
            let mut entry = name;
            match get(names_key) {
                None | Some(Value::Null) => {}
                Some(Value::Array(names)) if !names.is_empty() && names.len() <= 1000 => {
                    let mut parts = Vec::new();
                    for n in names {
                        match n.as_str() {
                            Some(s) if valid_name(s) => parts.push(s.to_string()),
                            _ => {
                                return Err(ApiError::invalid(
                                    &at(names_key),
                                    "Names must be strings without '[', ']' or ','.",
                                ))
                            }
                        }
                    }
                    entry = format!("{}[{}]", entry, parts.join(","));
                }
                Some(Value::Array(_)) => {}
                Some(_) => {
                    return Err(ApiError::invalid(
                        &at(names_key),
                        format!("{} must be an array.", names_key),
                    ))
                }
            }
            spec.push(entry);
        }
    }
    if spec.is_empty() {
        return Err(ApiError::invalid(
            "Providers",
            "No provider or meter to collect: name one, or include the default providers.",
        ));
    }
    CounterSet::parse(&spec.join(",")).map_err(|e| ApiError::invalid("Providers", e.to_string()))
}

/// Whether `s` can name a counter provider, meter or counter (not empty, at most 1,024
/// bytes, no `[`, `]` or `,`, which the counters syntax uses).
pub fn valid_name(s: &str) -> bool {
    !s.is_empty() && s.len() <= 1024 && !s.contains(['[', ']', ','])
}

/// The sink: counter samples as json-seq Metric records.
struct Metrics {
    decoder: Decoder,
}

impl Metrics {
    fn records(&mut self, feed: Option<&[u8]>) -> Option<Bytes> {
        let mut out = String::new();
        let mut each = |ev: CounterEvent| {
            if let CounterEvent::Sample(s) = ev {
                out.push('\u{1e}');
                out.push_str(&metric_json(&s));
                out.push('\n');
            }
        };
        match feed {
            Some(data) => self.decoder.feed(data, &mut each),
            None => self.decoder.finish(&mut each),
        }
        if out.is_empty() {
            None
        } else {
            Some(Bytes::from(out))
        }
    }
}

impl Sink for Metrics {
    fn chunk(&mut self, data: Vec<u8>) -> Option<Bytes> {
        self.records(Some(&data))
    }

    fn end(&mut self, _: &Outcome) -> Result<Option<Bytes>, io::Error> {
        Ok(self.records(None))
    }
}

/// One dotnet-monitor `Metric` record.
fn metric_json(s: &Sample) -> String {
    let mut tags: Vec<String> = s.tags.iter().map(|(k, v)| format!("{}={}", k, v)).collect();
    if let dsipc_trace::counters::CounterKind::Percentile(q) = s.kind {
        tags.push(format!("Percentile={}", q * 100.0));
    }
    json::to_string(&Metric {
        timestamp: timestamp(s.timestamp),
        provider: &s.provider,
        name: &s.name,
        display_name: &s.display_name,
        unit: &s.unit,
        counter_type: s.kind.dotnet_counters_type(),
        tags: tags.join(","),
        value: s.value,
    })
}

/// `2021-08-31T16:58:39.7514031+00:00` (.NET's round-trip format, UTC).
fn timestamp(t: std::time::SystemTime) -> String {
    let (y, mo, d, h, mi, s) = dsipc_trace::format::civil(t);
    let ticks = t
        .duration_since(std::time::SystemTime::UNIX_EPOCH)
        .map(|d| d.subsec_nanos() / 100)
        .unwrap_or(0);
    format!(
        "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.{:07}+00:00",
        y, mo, d, h, mi, s, ticks
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn event_metrics_configurations_name_counters_and_meters() {
        let set = configuration(
            br#"{"includeDefaultProviders":false,"providers":[{"providerName":"System.Runtime","counterNames":["cpu-usage"]}],"meters":[{"meterName":"MyMeter"}]}"#,
        )
        .unwrap();
        let names: Vec<&str> = set.providers().iter().map(|p| p.name.as_str()).collect();
        assert_eq!(names, ["System.Runtime", "MyMeter"]);
        let defaults = configuration(b"{}").unwrap();
        assert_eq!(defaults.providers().len(), 3);
        for bad in [
            &b"[]"[..],
            br#"{"includeDefaultProviders":false}"#,
            br#"{"providers":[{"providerName":"a,b"}]}"#,
            br#"{"providers":[{}]}"#,
            br#"{"meters":[{"meterName":"m","instrumentNames":[1]}]}"#,
            br#"{"includeDefaultProviders":"yes"}"#,
        ] {
            assert!(
                configuration(bad).is_err(),
                "{}",
                String::from_utf8_lossy(bad)
            );
        }
    }

    #[test]
    fn metric_records_are_dotnet_monitors() {
        let s = Sample {
            timestamp: std::time::UNIX_EPOCH + std::time::Duration::new(1_630_429_119, 751_403_100),
            provider: "System.Runtime".into(),
            name: "cpu-usage".into(),
            display_name: "CPU Usage".into(),
            unit: "%".into(),
            kind: dsipc_trace::counters::CounterKind::Mean,
            value: 3.0,
            tags: vec![],
            interval_secs: 5.0,
            source: dsipc_trace::counters::Source::EventCounter,
        };
        assert_eq!(
            metric_json(&s),
            r#"{"timestamp":"2021-08-31T16:58:39.7514031+00:00","provider":"System.Runtime","name":"cpu-usage","displayName":"CPU Usage","unit":"%","counterType":"Metric","tags":"","value":3}"#
        );
    }
}
