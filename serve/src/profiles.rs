//! What a trace collects: dotnet-monitor's `profile` values (`GET /trace`) and its
//! `EventPipeConfiguration` body (`POST /trace`), as providers to enable.
//!
//! The providers, keywords, levels and arguments of each profile are dotnet-monitor's
//! (its CpuProfileConfiguration, HttpRequestSourceConfiguration, LoggingSourceConfiguration,
//! MetricSourceConfiguration and GcCollectConfiguration); profiles given together are
//! merged (one entry per provider: keywords or'ed, the most verbose level).

use serde_json::Value;

use super::api::{json_object, member, ApiError};
use dsipc::session::providers::ProviderSpec;

const RUNTIME: &str = "Microsoft-Windows-DotNETRuntime";
const INFORMATIONAL: u32 = 4;
const VERBOSE: u32 = 5;

/// A set of trace profiles (a flags value, as dotnet-monitor's `TraceProfile`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TraceProfile(u8);

impl TraceProfile {
    pub const CPU: TraceProfile = TraceProfile(1);
    pub const HTTP: TraceProfile = TraceProfile(2);
    pub const LOGS: TraceProfile = TraceProfile(4);
    pub const METRICS: TraceProfile = TraceProfile(8);
    pub const GC_COLLECT: TraceProfile = TraceProfile(16);

    const NAMES: [(&'static str, TraceProfile); 5] = [
        ("Cpu", TraceProfile::CPU),
        ("Http", TraceProfile::HTTP),
        ("Logs", TraceProfile::LOGS),
        ("Metrics", TraceProfile::METRICS),
        ("GcCollect", TraceProfile::GC_COLLECT),
    ];

    /// dotnet-monitor's default: `Cpu,Http,Metrics`.
    pub fn default_set() -> TraceProfile {
        TraceProfile(Self::CPU.0 | Self::HTTP.0 | Self::METRICS.0)
    }

    /// `Cpu,Http` (names case-insensitive, comma separated, spaces allowed).
    pub fn parse(list: &str) -> Result<TraceProfile, String> {
        let mut bits = 0;
        for item in list.split(',') {
            let item = item.trim();
            match Self::NAMES
                .iter()
                .find(|(n, _)| n.eq_ignore_ascii_case(item))
            {
                Some((_, p)) => bits |= p.0,
                None => return Err(format!("The value '{}' is not valid.", list)),
            }
        }
        Ok(TraceProfile(bits))
    }

    fn has(self, p: TraceProfile) -> bool {
        self.0 & p.0 != 0
    }

    /// Whether the runtime is asked for rundown (Cpu and Http want method names).
    pub fn wants_rundown(self) -> bool {
        self.has(Self::CPU) || self.has(Self::HTTP)
    }
}

/// DiagnosticSource's filter for incoming ASP.NET Core requests and outgoing HttpClient
/// requests (the activities' start and stop with their main fields).
const HTTP_FILTER: &str = "\"Microsoft.AspNetCore/Microsoft.AspNetCore.Hosting.HttpRequestIn.Start@Activity1Start:-Request.Scheme;Request.Host;Request.PathBase;Request.QueryString;Request.Path;Request.Method;ActivityStartTime=*Activity.StartTimeUtc.Ticks;ActivityParentId=*Activity.ParentId;ActivityId=*Activity.Id;ActivitySpanId=*Activity.SpanId;ActivityTraceId=*Activity.TraceId;ActivityParentSpanId=*Activity.ParentSpanId;ActivityIdFormat=*Activity.IdFormat\r\nMicrosoft.AspNetCore/Microsoft.AspNetCore.Hosting.HttpRequestIn.Stop@Activity1Stop:-Response.StatusCode;ActivityDuration=*Activity.Duration.Ticks;ActivityId=*Activity.Id\r\nHttpHandlerDiagnosticListener/System.Net.Http.HttpRequestOut.Start@Activity2Start:-Request.RequestUri;Request.Method;Request.RequestUri.Host;Request.RequestUri.Port;ActivityStartTime=*Activity.StartTimeUtc.Ticks;ActivityId=*Activity.Id;ActivitySpanId=*Activity.SpanId;ActivityTraceId=*Activity.TraceId;ActivityParentSpanId=*Activity.ParentSpanId;ActivityIdFormat=*Activity.IdFormat\r\nHttpHandlerDiagnosticListener/System.Net.Http.HttpRequestOut.Stop@Activity2Stop:-ActivityDuration=*Activity.Duration.Ticks;ActivityId=*Activity.Id\"";

fn spec(name: &str, keywords: u64, level: u32, args: Option<String>) -> ProviderSpec {
    ProviderSpec {
        name: name.to_string(),
        keywords,
        level,
        args,
    }
}

/// The providers `profile` enables; Metrics publishes every `metrics_interval` seconds.
pub fn providers(profile: TraceProfile, metrics_interval: u32) -> Vec<ProviderSpec> {
    let mut out: Vec<ProviderSpec> = Vec::new();
    if profile.has(TraceProfile::CPU) {
        out.push(spec(
            "Microsoft-DotNETCore-SampleProfiler",
            0,
            INFORMATIONAL,
            None,
        ));
        out.push(spec(RUNTIME, 0x14_C14F_CCBD, INFORMATIONAL, None));
    }
    if profile.has(TraceProfile::HTTP) {
        out.push(spec(
            "Microsoft-Diagnostics-DiagnosticSource",
            0x3,
            VERBOSE,
            Some(format!("FilterAndPayloadSpecs={}", HTTP_FILTER)),
        ));
    }
    if profile.has(TraceProfile::LOGS) {
        // LogAlways (0): every level; FormattedMessage | JsonMessage.
        out.push(spec(
            "Microsoft-Extensions-Logging",
            0xC,
            0,
            Some("FilterSpecs=UseAppFilters".into()),
        ));
    }
    if profile.has(TraceProfile::METRICS) {
        for p in [
            "System.Runtime",
            "Microsoft.AspNetCore.Hosting",
            "Grpc.AspNetCore.Server",
        ] {
            out.push(spec(
                p,
                0,
                INFORMATIONAL,
                Some(format!("EventCounterIntervalSec={}", metrics_interval)),
            ));
        }
    }
    if profile.has(TraceProfile::GC_COLLECT) {
        out.push(spec(RUNTIME, 0x1, INFORMATIONAL, None));
        out.push(spec(
            "Microsoft-Windows-DotNETRuntimePrivate",
            0x1,
            INFORMATIONAL,
            None,
        ));
    }
    merge(out)
}

/// One entry per provider name: keywords or'ed, the most verbose level (LogAlways, 0,
/// counts as the most verbose), the first arguments.
fn merge(specs: Vec<ProviderSpec>) -> Vec<ProviderSpec> {
    let rank = |l: u32| if l == 0 { u32::MAX } else { l };
    let mut out: Vec<ProviderSpec> = Vec::new();
    for s in specs {
        match out.iter_mut().find(|o| o.name == s.name) {
            Some(o) => {
                o.keywords |= s.keywords;
                if rank(s.level) > rank(o.level) {
                    o.level = s.level;
                }
                if o.args.is_none() {
                    o.args = s.args;
                }
            }
            None => out.push(s),
        }
    }
    out
}

/// `POST /trace`'s body.
#[derive(Debug)]
pub struct EventPipeConfiguration {
    pub providers: Vec<ProviderSpec>,
    pub request_rundown: bool,
    pub buffer_mb: u32,
}

/// `"0x1F"` (hex) or `"31"` (decimal), as dotnet-monitor reads Keywords.
fn keywords(k: &str) -> Result<u64, String> {
    let k = k.trim();
    let parsed = match k.strip_prefix("0x").or_else(|| k.strip_prefix("0X")) {
        Some(hex) => u64::from_str_radix(hex, 16),
        None => k.parse::<u64>(),
    };
    parsed.map_err(|_| {
        format!(
            "The value '{}' is not valid keywords (\"0x...\" or decimal).",
            k
        )
    })
}

fn event_level(v: &Value) -> Result<u32, String> {
    const LEVELS: [&str; 6] = [
        "LogAlways",
        "Critical",
        "Error",
        "Warning",
        "Informational",
        "Verbose",
    ];
    match v {
        Value::Number(n) => match n.as_u64() {
            Some(l) if l <= 5 => Ok(l as u32),
            _ => Err(format!("The value '{}' is not a valid EventLevel.", n)),
        },
        Value::String(s) => LEVELS
            .iter()
            .position(|l| l.eq_ignore_ascii_case(s))
            .map(|l| l as u32)
            .ok_or_else(|| format!("The value '{}' is not a valid EventLevel.", s)),
        _ => Err("eventLevel must be a string or a number.".into()),
    }
}

impl EventPipeConfiguration {
    /// Parses and validates a body; errors name the member.
    pub fn parse(body: &[u8]) -> Result<EventPipeConfiguration, ApiError> {
        let obj = &json_object(body, "EventPipeConfiguration")?;
        let providers = match member(obj, "providers") {
            Some(Value::Array(a)) if !a.is_empty() => a,
            Some(Value::Array(_)) => return Err(ApiError::invalid(
                "Providers",
                "The field Providers must be a string or array type with a minimum length of '1'.",
            )),
            None | Some(Value::Null) => {
                return Err(ApiError::invalid(
                    "Providers",
                    "The Providers field is required.",
                ))
            }
            Some(_) => {
                return Err(ApiError::invalid(
                    "Providers",
                    "Providers must be an array.",
                ))
            }
        };
        if providers.len() > 1000 {
            return Err(ApiError::invalid("Providers", "At most 1000 providers."));
        }
        let mut specs = Vec::with_capacity(providers.len());
        for (i, p) in providers.iter().enumerate() {
            let at = |m: &str| format!("Providers[{}].{}", i, m);
            let p = p.as_object().ok_or_else(|| {
                ApiError::invalid(
                    &format!("Providers[{}]", i),
                    "A provider must be an object.",
                )
            })?;
            let name = match member(p, "name") {
                Some(Value::String(s)) if !s.is_empty() => s.clone(),
                _ => {
                    return Err(ApiError::invalid(
                        &at("Name"),
                        "The Name field is required.",
                    ))
                }
            };
            let keywords = match member(p, "keywords") {
                None | Some(Value::Null) => u64::MAX,
                Some(Value::String(k)) => {
                    keywords(k).map_err(|e| ApiError::invalid(&at("Keywords"), e))?
                }
                Some(_) => {
                    return Err(ApiError::invalid(
                        &at("Keywords"),
                        "Keywords must be a string (\"0x...\" or decimal).",
                    ))
                }
            };
            let level = match member(p, "eventLevel") {
                None | Some(Value::Null) => VERBOSE,
                Some(v) => event_level(v).map_err(|e| ApiError::invalid(&at("EventLevel"), e))?,
            };
            let args = match member(p, "arguments") {
                None | Some(Value::Null) => None,
                Some(Value::Object(a)) => {
                    let mut parts = Vec::new();
                    for (k, v) in a {
                        let v = v.as_str().ok_or_else(|| {
                            ApiError::invalid(&at("Arguments"), "Argument values must be strings.")
                        })?;
                        parts.push(format!("{}={}", k, v));
                    }
                    Some(parts.join(";"))
                }
                Some(_) => {
                    return Err(ApiError::invalid(
                        &at("Arguments"),
                        "Arguments must be an object of strings.",
                    ))
                }
            };
            specs.push(ProviderSpec {
                name,
                keywords,
                level,
                args,
            });
        }
        let request_rundown = match member(obj, "requestRundown") {
            None | Some(Value::Null) => true,
            Some(Value::Bool(b)) => *b,
            Some(_) => {
                return Err(ApiError::invalid(
                    "RequestRundown",
                    "RequestRundown must be true or false.",
                ))
            }
        };
        let buffer_mb = match member(obj, "bufferSizeInMB") {
            None | Some(Value::Null) => 256,
            Some(Value::Number(n)) => match n.as_u64() {
                Some(b) if (1..=1024).contains(&b) => b as u32,
                _ => {
                    return Err(ApiError::invalid(
                        "BufferSizeInMB",
                        "The field BufferSizeInMB must be between 1 and 1024.",
                    ))
                }
            },
            Some(_) => {
                return Err(ApiError::invalid(
                    "BufferSizeInMB",
                    "The field BufferSizeInMB must be between 1 and 1024.",
                ))
            }
        };
        Ok(EventPipeConfiguration {
            providers: specs,
            request_rundown,
            buffer_mb,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn trace_profiles_parse_and_merge_as_dotnet_monitor() {
        assert_eq!(TraceProfile::parse("cpu, GcCollect").unwrap().0, 17);
        assert!(TraceProfile::parse("Cpu,Nope").is_err());
        assert!(TraceProfile::parse("").is_err());
        let p = providers(TraceProfile::parse("Cpu,GcCollect").unwrap(), 1);
        let runtime: Vec<_> = p.iter().filter(|s| s.name == RUNTIME).collect();
        assert_eq!(runtime.len(), 1);
        assert_eq!(runtime[0].keywords, 0x14_C14F_CCBD | 1);
        let metrics = providers(TraceProfile::METRICS, 5);
        assert_eq!(
            metrics[0].args.as_deref(),
            Some("EventCounterIntervalSec=5")
        );
        assert!(TraceProfile::default_set().wants_rundown());
        assert!(!TraceProfile::METRICS.wants_rundown());
    }

    #[test]
    fn event_pipe_configuration_bodies_are_validated() {
        let c = EventPipeConfiguration::parse(
            br#"{"Providers":[{"name":"Microsoft-Windows-DotNETRuntime","keywords":"0x1","eventLevel":"Informational","arguments":{"a":"b"}}],"requestRundown":false,"bufferSizeInMB":64}"#,
        )
        .unwrap();
        assert_eq!(c.providers[0].keywords, 1);
        assert_eq!(c.providers[0].level, 4);
        assert_eq!(c.providers[0].args.as_deref(), Some("a=b"));
        assert!(!c.request_rundown);
        assert_eq!(c.buffer_mb, 64);
        for bad in [
            &b"not json"[..],
            b"[]",
            b"{}",
            br#"{"providers":[]}"#,
            br#"{"providers":[{"name":""}]}"#,
            br#"{"providers":[{"name":"x","keywords":"zz"}]}"#,
            br#"{"providers":[{"name":"x","eventLevel":"Loud"}]}"#,
            br#"{"providers":[{"name":"x"}],"bufferSizeInMB":0}"#,
            br#"{"providers":[{"name":"x"}],"bufferSizeInMB":4096}"#,
        ] {
            assert!(
                EventPipeConfiguration::parse(bad).is_err(),
                "{:?}",
                String::from_utf8_lossy(bad)
            );
        }
    }
}
