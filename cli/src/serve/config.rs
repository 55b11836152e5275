//! `dsipc serve`'s configuration: dotnet-monitor's sources (dsipc-serve's `config`
//! module) under serve's flags, which win; and `serve config show`.

use dsipc_serve::config::{self, ConfigError, Layer, Loaded, Resolved, ShowLevel, Source, Sources};

use crate::args::{self, Parsed};
use crate::{print_out, CliError, CliResult};

use dsipc_serve::{DefaultFilter, EgressTarget};

/// A configuration error: exit status 2, the key named.
fn bad(e: ConfigError) -> CliError {
    CliError::Usage(format!("configuration: {}", e))
}

/// Says a configuration warning on stderr.
fn warn(w: &config::Warning) {
    eprintln!("dsipc: configuration: WARNING: {}", w);
}

/// dotnet-monitor's defaults (its `config show` shows them), then the sources, then
/// serve's flags.
pub fn load(p: &Parsed) -> Result<Loaded, CliError> {
    let mut sources = Sources::dotnet_monitor();
    sources.configuration_file = p.value_path("--configuration-file-path")?;
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

/// Loads, resolves what serve acts on (dsipc-serve's mapping) and says the warnings on
/// stderr.
pub fn resolve(p: &Parsed) -> Result<Resolved, CliError> {
    let loaded = load(p)?;
    loaded.warnings.iter().for_each(warn);
    let resolved = config::resolve(&loaded).map_err(bad)?;
    resolved.warnings.iter().for_each(warn);
    Ok(resolved)
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
    loaded.warnings.iter().for_each(warn);
    print_out(&config::show(&loaded.root, level, p.flag("--show-sources")))
}
