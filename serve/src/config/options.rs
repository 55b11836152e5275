//! The merged configuration as what a [`Server`](crate::Server) runs with: [`resolve`]
//! maps a [`Loaded`] configuration to [`Options`], the API's and `/metrics`'s addresses and
//! the warnings worth saying, as `dotnet-monitor` acts on its own configuration.

use std::path::PathBuf;

use dsipc_trace::counters::CounterSet;

use super::{
    egress_providers, ConfigError, DiagnosticPortConnectionMode, Layer, Loaded, MetricsOptions,
    ProcessFilterKey, ProcessFilterType, Source, Warning,
};
use crate::{
    auth, parse_urls, Auth, DefaultFilter, ListenAddr, Options, DEFAULT_METRICS_URLS, DEFAULT_URLS,
};

/// dotnet-monitor's `GlobalCounter:IntervalSeconds` default.
const DEFAULT_INTERVAL: f64 = 5.0;

/// dotnet-monitor's defaults, the lowest source (its `config show` shows them): `urls`,
/// `DiagnosticPort:ConnectionMode`, `GlobalCounter:IntervalSeconds`, `Metrics:Enabled` and
/// `Metrics:Endpoints`.
pub fn defaults() -> Layer {
    let mut d = Layer::new();
    for (k, v) in [
        ("urls", DEFAULT_URLS),
        ("DiagnosticPort:ConnectionMode", "Connect"),
        ("GlobalCounter:IntervalSeconds", "5"),
        ("Metrics:Enabled", "True"),
        ("Metrics:Endpoints", DEFAULT_METRICS_URLS),
    ] {
        d.set(k, Some(v.to_string()), Source::Defaults);
    }
    d
}

/// What a configuration says to serve: [`resolve`]'s answer.
#[derive(Debug)]
#[non_exhaustive]
pub struct Resolved {
    /// The server's options: egress providers, default process, listen mode, dump folder,
    /// `/metrics` collection, collection rules, and [`Auth::Key`] when
    /// `Authentication:MonitorApiKey` has a hash ([`Auth::Unconfigured`] otherwise).
    /// `tmpdir` and `send_timeout` are left at their defaults.
    pub options: Options,
    /// `urls`: the API's addresses.
    pub urls: Vec<ListenAddr>,
    /// `Metrics:Endpoints`: `/metrics`'s own addresses (none when `Metrics:Enabled` is
    /// false).
    pub metrics_urls: Vec<ListenAddr>,
    /// Settings read and not acted on (beyond [`Loaded::warnings`]): for the caller to say.
    pub warnings: Vec<Warning>,
}

/// Maps the merged configuration to what serve runs with. An error names the key (and the
/// source that set it); nothing here reads a file or the environment.
///
/// ```
/// use dsipc_serve::config::{load, resolve, Sources};
/// let mut sources = Sources::default();
/// sources.defaults = dsipc_serve::config::defaults();
/// sources.environment = vec![("DotnetMonitor_Metrics__Enabled".into(), "false".into())];
/// let resolved = resolve(&load(&sources).unwrap()).unwrap();
/// assert!(!resolved.options.metrics);
/// assert!(resolved.metrics_urls.is_empty());
/// assert_eq!(resolved.urls[0].url, "http://localhost:52323");
/// ```
pub fn resolve(loaded: &Loaded) -> Result<Resolved, ConfigError> {
    let s = &loaded.settings;
    let mut warnings = Vec::new();
    let interval = s
        .global_counter
        .interval_seconds
        .or_else(|| s.metrics.update_interval_seconds.map(f64::from))
        .unwrap_or(DEFAULT_INTERVAL);
    if !(1.0..=86_400.0).contains(&interval) {
        return Err(invalid(
            loaded,
            "GlobalCounter:IntervalSeconds",
            format!("from 1 s to a day, not {}", interval),
        ));
    }
    for (name, o) in &s.egress.file_system {
        if o.intermediate_directory_path.is_some() {
            let key = format!("Egress:FileSystem:{}:IntermediateDirectoryPath", name);
            warnings.push(Warning {
                source: source(loaded, &key),
                key,
                message: "not used: serve writes each artifact under a temporary name in DirectoryPath and renames it when whole".into(),
            });
        }
    }
    let egress = egress_providers(&s.egress)?;
    // dotnet-monitor keeps the first of two providers of one name (FileSystem first here).
    for name in s
        .egress
        .azure_blob_storage
        .keys()
        .chain(s.egress.s3_storage.keys())
    {
        if let Some(fs) = s
            .egress
            .file_system
            .keys()
            .find(|f| f.eq_ignore_ascii_case(name))
        {
            warnings.push(said(format!(
                "egress provider {} is named twice: Egress:FileSystem:{} is the one used",
                name, fs
            )));
        }
    }
    if loaded.root.get("Kestrel").map_or(false, |k| k.exists()) {
        warnings.push(said(
            "Kestrel is not used: dsipc serve has no TLS (put a TLS proxy in front)".into(),
        ));
    }
    let mut default_process = Vec::new();
    for f in &s.default_process.filters {
        if let Some((key, value, ty)) = f.resolved() {
            let contains = ty == ProcessFilterType::Contains;
            default_process.push(match key {
                ProcessFilterKey::ProcessId => {
                    // Checked by the configuration's binding: a number.
                    DefaultFilter::ProcessId(value.trim().parse().unwrap_or(0))
                }
                ProcessFilterKey::ProcessName => DefaultFilter::ProcessName {
                    name: value.to_string(),
                    contains,
                },
                _ => DefaultFilter::CommandLine {
                    text: value.to_ascii_lowercase(),
                    contains,
                },
            });
        }
    }
    let mut options = Options::default();
    let dp = &s.diagnostic_port;
    if let (Some(DiagnosticPortConnectionMode::Listen), Some(path)) =
        (dp.connection_mode, &dp.endpoint_name)
    {
        options.max_runtimes = match dp.max_connections {
            None => None,
            Some(n) if n >= 1 => Some(n as usize),
            Some(n) => {
                return Err(invalid(
                    loaded,
                    "DiagnosticPort:MaxConnections",
                    format!("at least 1, not {}", n),
                ))
            }
        };
        options.diagnostic_port = Some(PathBuf::from(path));
    }
    if let Some(k) = &s.authentication.monitor_api_key {
        match &k.api_key_hash {
            Some(hash) => {
                let json = serde_json::json!({"MonitorApiKey": {
                    "ApiKeyHash": hash.expose(),
                    "ApiKeyHashType": k.api_key_hash_type.as_deref().unwrap_or(""),
                }});
                let v = auth::Verifier::parse_settings(&json.to_string()).map_err(|e| {
                    ConfigError::Invalid {
                        key: "Authentication:MonitorApiKey".into(),
                        source: source(loaded, "Authentication:MonitorApiKey:ApiKeyHash"),
                        message: e,
                    }
                })?;
                options.auth = Auth::Key(v);
            }
            None => warnings.push(Warning {
                key: "Authentication:MonitorApiKey".into(),
                source: source(loaded, "Authentication:MonitorApiKey"),
                message: "has no ApiKeyHash: serve verifies a key by its SHA-256 (dsipc serve generatekey writes ApiKeyHash and ApiKeyHashType), not a JWT's Subject and PublicKey".into(),
            }),
        }
    }
    options.metrics_counters = metrics_counters(loaded, &s.metrics)?;
    options.metrics = s.metrics.enabled.unwrap_or(true);
    options.counter_interval = interval;
    options.dump_temp_folder = s.storage.dump_temp_folder.as_ref().map(PathBuf::from);
    options.egress = egress;
    options.default_process = default_process;
    // dotnet-monitor's collection rules, their templates and defaults, as configured.
    options.collection_rules = s.collection_rules.as_ref().map(|r| r.to_json());
    options.collection_rule_templates = s.templates.as_ref().map(|r| r.to_json());
    options.collection_rule_defaults = s.collection_rule_defaults.as_ref().map(|r| r.to_json());
    let urls = addresses(loaded, "urls", s.urls.as_deref().unwrap_or(DEFAULT_URLS))?;
    // dotnet-monitor's `--no-metrics` (Metrics:Enabled false): no listener, no collection.
    let metrics_urls = if options.metrics {
        let list = s.metrics.endpoints.as_deref();
        addresses(
            loaded,
            "Metrics:Endpoints",
            list.unwrap_or(DEFAULT_METRICS_URLS),
        )?
    } else {
        Vec::new()
    };
    Ok(Resolved {
        options,
        urls,
        metrics_urls,
        warnings,
    })
}

/// A warning that says it all in its message.
fn said(message: String) -> Warning {
    Warning {
        key: String::new(),
        source: None,
        message,
    }
}

/// `key`'s list of URLs, parsed.
fn addresses(loaded: &Loaded, key: &str, list: &str) -> Result<Vec<ListenAddr>, ConfigError> {
    parse_urls(list).map_err(|why| invalid(loaded, key, why))
}

/// `key`'s value is wrong: the error names it and its source.
fn invalid(loaded: &Loaded, key: &str, message: String) -> ConfigError {
    ConfigError::Invalid {
        key: key.into(),
        source: source(loaded, key),
        message,
    }
}

/// What `/metrics` collects: serve's default (System.Runtime) unless
/// `Metrics:IncludeDefaultProviders` is false, and each of `Metrics:Providers` (with its
/// `CounterNames`) and `Metrics:Meters` (with its `InstrumentNames`).
fn metrics_counters(loaded: &Loaded, m: &MetricsOptions) -> Result<CounterSet, ConfigError> {
    let mut spec = Vec::new();
    if m.include_default_providers.unwrap_or(true) {
        spec.push("System.Runtime".to_string());
    }
    let named = m
        .providers
        .iter()
        .map(|p| {
            (
                "Providers",
                "ProviderName",
                &p.provider_name,
                &p.counter_names,
            )
        })
        .chain(
            m.meters
                .iter()
                .map(|p| ("Meters", "MeterName", &p.meter_name, &p.instrument_names)),
        );
    for (i, (list, field, name, counters)) in named.enumerate() {
        let index = if list == "Providers" {
            i
        } else {
            i - m.providers.len()
        };
        let key = format!("Metrics:{}:{}:{}", list, index, field);
        if !crate::valid_counter_name(name) {
            return Err(invalid(
                loaded,
                &key,
                "a name without '[', ']' or ','".into(),
            ));
        }
        if counters.iter().any(|c| !crate::valid_counter_name(c)) {
            return Err(invalid(
                loaded,
                &key,
                "its counter names must be names without '[', ']' or ','".into(),
            ));
        }
        spec.push(if counters.is_empty() {
            name.clone()
        } else {
            format!("{}[{}]", name, counters.join(","))
        });
    }
    if spec.is_empty() {
        return Err(ConfigError::Invalid {
            key: "Metrics".into(),
            source: None,
            message: "IncludeDefaultProviders is false and no Providers or Meters are named: nothing to collect".into(),
        });
    }
    CounterSet::parse(&spec.join(",")).map_err(|e| ConfigError::Invalid {
        key: "Metrics".into(),
        source: None,
        message: e.to_string(),
    })
}

/// Where a key's value came from, when it is a value.
fn source(loaded: &Loaded, key: &str) -> Option<Source> {
    loaded.root.get(key).and_then(|s| s.source()).cloned()
}

#[cfg(test)]
#[path = "options_tests.rs"]
mod tests;
