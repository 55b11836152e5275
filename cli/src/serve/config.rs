//! `dsipc serve`'s configuration: dotnet-monitor's sources (dsipc-serve's `config`
//! module) under serve's flags, which win; and `serve config show`.

use std::path::PathBuf;

use dsipc_serve::config::{
    self, ConfigError, DiagnosticPortConnectionMode, Layer, Loaded, MetricsOptions,
    ProcessFilterKey, ProcessFilterType, ShowLevel, Source, Sources,
};
use dsipc_trace::counters::CounterSet;

use crate::args::{self, Parsed};
use crate::{print_out, CliError, CliResult};

use dsipc_serve::{auth, DefaultFilter, Egress, EgressTarget, DEFAULT_METRICS_URLS, DEFAULT_URLS};

/// dotnet-monitor's GlobalCounter:IntervalSeconds default.
const DEFAULT_INTERVAL: f64 = 5.0;

/// What serve runs with, the configuration and its flags merged.
pub struct Resolved {
    /// The merged configuration (the collection rules are its `CollectionRules`,
    /// `Templates` and `CollectionRuleDefaults`).
    pub loaded: Loaded,
    /// `urls`.
    pub urls: String,
    /// `Metrics:Enabled`.
    pub metrics_enabled: bool,
    /// `Metrics:Endpoints`.
    pub metrics_urls: String,
    /// `Metrics:IncludeDefaultProviders`, `Providers` and `Meters`: what `/metrics` collects.
    pub metrics_counters: CounterSet,
    /// `GlobalCounter:IntervalSeconds` (or dotnet-monitor 6's `Metrics:UpdateIntervalSeconds`).
    pub counter_interval: f64,
    /// `Storage:DumpTempFolder`.
    pub dump_temp_folder: Option<PathBuf>,
    /// `Egress:FileSystem` providers.
    pub egress: Vec<Egress>,
    /// `DefaultProcess:Filters` (every one must match).
    pub default_filter: Vec<DefaultFilter>,
    /// `DiagnosticPort` in listen mode: its path, and `MaxConnections`.
    pub listen: Option<(PathBuf, Option<usize>)>,
    /// `Authentication:MonitorApiKey`'s hash, when configured.
    pub api_key: Option<auth::Verifier>,
}

/// A configuration error: exit status 2, the key named.
fn bad(e: ConfigError) -> CliError {
    CliError::Usage(format!("configuration: {}", e))
}

/// dotnet-monitor's defaults (its `config show` shows them), then the sources, then
/// serve's flags.
pub fn load(p: &Parsed) -> Result<Loaded, CliError> {
    let mut sources = Sources::dotnet_monitor();
    sources.configuration_file = p.value_path("--configuration-file-path")?;
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
    sources.defaults = d;
    let mut cl = Layer::new();
    let flag = |f: &str| Source::CommandLine(f.to_string());
    for f in ["--urls", "-u"] {
        if let Some(u) = p.value_text(f)? {
            cl.set("urls", Some(u.to_string()), flag(f));
        }
    }
    for f in ["--metricUrls", "--metrics-urls"] {
        if let Some(u) = p.value_text(f)? {
            cl.set("Metrics:Endpoints", Some(u.to_string()), flag(f));
        }
    }
    if p.flag("--no-metrics") {
        cl.set(
            "Metrics:Enabled",
            Some("False".into()),
            flag("--no-metrics"),
        );
    }
    if let Some(v) = p.value_os("--counter-interval") {
        let secs = args::duration("--counter-interval", v)?.as_secs_f64();
        cl.set(
            "GlobalCounter:IntervalSeconds",
            Some(secs.to_string()),
            flag("--counter-interval"),
        );
    }
    if let Some(d) = p.value_text("--dump-temp-folder")? {
        cl.set(
            "Storage:DumpTempFolder",
            Some(d.to_string()),
            flag("--dump-temp-folder"),
        );
    }
    if let Some(d) = p.value_text("--diagnostic-port")? {
        sources.command_line_replaces.push("DiagnosticPort".into());
        cl.set(
            "DiagnosticPort:ConnectionMode",
            Some("Listen".into()),
            flag("--diagnostic-port"),
        );
        cl.set(
            "DiagnosticPort:EndpointName",
            Some(d.to_string()),
            flag("--diagnostic-port"),
        );
    }
    if let Some(list) = p.value_text("--egress")? {
        for e in dsipc_serve::parse_egress(list).map_err(CliError::Usage)? {
            if let EgressTarget::FileSystem(dir) = &e.target {
                cl.set(
                    format!("Egress:FileSystem:{}:DirectoryPath", e.name),
                    Some(dir.to_string_lossy().into_owned()),
                    flag("--egress"),
                );
            }
        }
    }
    if let Some(f) = p.value_text("--default-process")? {
        // Checked as the flag's own syntax; it replaces every configured filter.
        DefaultFilter::parse(f).map_err(CliError::Usage)?;
        let (k, v) = f.split_once('=').unwrap_or((f, ""));
        let key = match k.trim().to_ascii_lowercase().as_str() {
            "processid" | "pid" => "ProcessId",
            "processname" | "name" => "ProcessName",
            _ => "CommandLine",
        };
        sources.command_line_replaces.push("DefaultProcess".into());
        let src = flag("--default-process");
        cl.set(
            "DefaultProcess:Filters:0:Key",
            Some(key.into()),
            src.clone(),
        );
        cl.set(
            "DefaultProcess:Filters:0:Value",
            Some(v.into()),
            src.clone(),
        );
        // The flag's CommandLine has always been a substring.
        let ty = if key == "CommandLine" {
            "Contains"
        } else {
            "Exact"
        };
        cl.set("DefaultProcess:Filters:0:MatchType", Some(ty.into()), src);
    }
    sources.command_line = cl;
    config::load(&sources).map_err(bad)
}

/// Loads, says the warnings on stderr, and resolves what serve acts on.
pub fn resolve(p: &Parsed) -> Result<Resolved, CliError> {
    let loaded = load(p)?;
    for w in &loaded.warnings {
        eprintln!("dsipc: configuration: WARNING: {}", w);
    }
    let s = &loaded.settings;
    let interval = s
        .global_counter
        .interval_seconds
        .or_else(|| s.metrics.update_interval_seconds.map(f64::from))
        .unwrap_or(DEFAULT_INTERVAL);
    if !(1.0..=86_400.0).contains(&interval) {
        return Err(CliError::Usage(format!(
            "configuration: GlobalCounter:IntervalSeconds (from {}): from 1 s to a day, not {}",
            source_of(&loaded, "GlobalCounter:IntervalSeconds"),
            interval
        )));
    }
    for (name, o) in &s.egress.file_system {
        if o.intermediate_directory_path.is_some() {
            eprintln!("dsipc: configuration: WARNING: Egress:FileSystem:{}:IntermediateDirectoryPath is not used: serve writes each artifact under a temporary name in DirectoryPath and renames it when whole", name);
        }
    }
    let egress = config::egress_providers(&s.egress).map_err(bad)?;
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
            eprintln!("dsipc: configuration: WARNING: egress provider {} is named twice: Egress:FileSystem:{} is the one used", name, fs);
        }
    }
    if loaded.root.get("Kestrel").map_or(false, |k| k.exists()) {
        eprintln!("dsipc: configuration: WARNING: Kestrel is not used: dsipc serve has no TLS (put a TLS proxy in front)");
    }
    let mut default_filter = Vec::new();
    for f in &s.default_process.filters {
        if let Some((key, value, ty)) = f.resolved() {
            let contains = ty == ProcessFilterType::Contains;
            default_filter.push(match key {
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
    let dp = &s.diagnostic_port;
    let listen = match (dp.connection_mode, &dp.endpoint_name) {
        (Some(DiagnosticPortConnectionMode::Listen), Some(path)) => {
            let max = match dp.max_connections {
                None => None,
                Some(n) if n >= 1 => Some(n as usize),
                Some(n) => {
                    return Err(CliError::Usage(format!(
                        "configuration: DiagnosticPort:MaxConnections: at least 1, not {}",
                        n
                    )))
                }
            };
            Some((PathBuf::from(path), max))
        }
        _ => None,
    };
    let api_key = match &s.authentication.monitor_api_key {
        Some(k) => match &k.api_key_hash {
            Some(hash) => {
                let json = serde_json::json!({"MonitorApiKey": {
                    "ApiKeyHash": hash.expose(),
                    "ApiKeyHashType": k.api_key_hash_type.as_deref().unwrap_or(""),
                }});
                let v = auth::Verifier::parse_settings(&json.to_string()).map_err(|e| {
                    CliError::Usage(format!(
                        "configuration: Authentication:MonitorApiKey (from {}): {}",
                        source_of(&loaded, "Authentication:MonitorApiKey:ApiKeyHash"),
                        e
                    ))
                })?;
                Some(v)
            }
            None => {
                eprintln!("dsipc: configuration: WARNING: Authentication:MonitorApiKey has no ApiKeyHash: serve verifies a key by its SHA-256 (dsipc serve generatekey writes ApiKeyHash and ApiKeyHashType), not a JWT's Subject and PublicKey");
                None
            }
        },
        None => None,
    };
    let metrics_counters = metrics_counters(&s.metrics).map_err(CliError::Usage)?;
    Ok(Resolved {
        metrics_counters,
        urls: s.urls.clone().unwrap_or_else(|| DEFAULT_URLS.into()),
        metrics_enabled: s.metrics.enabled.unwrap_or(true),
        metrics_urls: s
            .metrics
            .endpoints
            .clone()
            .unwrap_or_else(|| DEFAULT_METRICS_URLS.into()),
        counter_interval: interval,
        dump_temp_folder: s.storage.dump_temp_folder.as_ref().map(PathBuf::from),
        egress,
        default_filter,
        listen,
        api_key,
        loaded,
    })
}

/// What `/metrics` collects: serve's default (System.Runtime) unless
/// `Metrics:IncludeDefaultProviders` is false, and each of `Metrics:Providers` (with its
/// `CounterNames`) and `Metrics:Meters` (with its `InstrumentNames`).
fn metrics_counters(m: &MetricsOptions) -> Result<CounterSet, String> {
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
        let bad = |what: &str| {
            format!(
                "configuration: Metrics:{}:{}:{}: {}",
                list, index, field, what
            )
        };
        if !dsipc_serve::valid_counter_name(name) {
            return Err(bad("a name without '[', ']' or ','"));
        }
        if counters.iter().any(|c| !dsipc_serve::valid_counter_name(c)) {
            return Err(bad(
                "its counter names must be names without '[', ']' or ','",
            ));
        }
        spec.push(if counters.is_empty() {
            name.clone()
        } else {
            format!("{}[{}]", name, counters.join(","))
        });
    }
    if spec.is_empty() {
        return Err(
            "configuration: Metrics: IncludeDefaultProviders is false and no Providers or Meters are named: nothing to collect"
                .into(),
        );
    }
    CounterSet::parse(&spec.join(",")).map_err(|e| format!("configuration: Metrics: {}", e))
}

/// Where a key's value came from, for a message.
fn source_of(loaded: &Loaded, key: &str) -> String {
    loaded
        .root
        .get(key)
        .and_then(|s| s.source())
        .map_or_else(|| "the configuration".into(), |s| s.to_string())
}

/// `serve config show [--configuration-file-path FILE] [--level Redacted|Full]
/// [--show-sources]`: the merged configuration, secrets redacted.
pub fn show(p: &Parsed) -> CliResult {
    let level = match p.value_lower("--level")?.as_deref() {
        None | Some("redacted") => ShowLevel::Redacted,
        Some("full") => ShowLevel::Full,
        Some(other) => {
            return Err(CliError::Usage(format!(
                "--level {:?}: Redacted or Full",
                other
            )))
        }
    };
    let loaded = load(p)?;
    for w in &loaded.warnings {
        eprintln!("dsipc: configuration: WARNING: {}", w);
    }
    print_out(&config::show(&loaded.root, level, p.flag("--show-sources")))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn metrics(json: &str) -> Result<CounterSet, String> {
        let doc: serde_json::Value = serde_json::from_str(json).unwrap();
        let layer = config::json_layer(&doc, Source::Defaults, std::path::Path::new("t")).unwrap();
        let mut merged = config::Merged::new();
        merged.add(&layer);
        let settings = config::bind_settings(&merged.tree(), &mut Vec::new()).unwrap();
        metrics_counters(&settings.metrics)
    }

    #[test]
    fn metrics_providers_and_meters_from_the_configuration_are_collected() {
        assert_eq!(metrics("{}").unwrap(), CounterSet::default());
        let set = metrics(
            r#"{"Metrics": {"IncludeDefaultProviders": false,
                "Providers": [{"ProviderName": "Microsoft-AspNetCore-Server-Kestrel",
                               "CounterNames": ["connections-per-second"]}],
                "Meters": [{"MeterName": "MyApp"}]}}"#,
        )
        .unwrap();
        let names: Vec<(&str, Option<Vec<String>>)> = set
            .providers()
            .iter()
            .map(|p| (p.name.as_str(), p.counters.clone()))
            .collect();
        assert_eq!(
            names,
            [
                (
                    "Microsoft-AspNetCore-Server-Kestrel",
                    Some(vec!["connections-per-second".to_string()])
                ),
                ("MyApp", None)
            ]
        );
        let e = metrics(r#"{"Metrics": {"Meters": [{"MeterName": "a,b"}]}}"#).unwrap_err();
        assert!(e.contains("Metrics:Meters:0:MeterName"), "{}", e);
        let e = metrics(r#"{"Metrics": {"IncludeDefaultProviders": "False"}}"#).unwrap_err();
        assert!(e.contains("nothing to collect"), "{}", e);
    }
}
