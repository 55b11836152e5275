//! `dsipc serve`'s configuration: dotnet-monitor's sources (dsipc-serve's `config`
//! module) under serve's flags, which win; and `serve config show`.

use dsipc_serve::config::{self, ConfigError, Loaded, Resolved, ShowLevel, Sources};

use crate::args::{self, Parsed};
use crate::{print_out, CliError, CliResult};

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
    // dsipc-serve maps each flag to its keys, in the command line's layer.
    let mut set = |flag: &str, value: Option<&str>| {
        sources
            .set_flag(flag, value)
            .map_err(|e| CliError::Usage(e.to_string()))
    };
    for f in ["--urls", "-u", "--metricUrls", "--metrics-urls"] {
        if let Some(u) = p.value_text(f)? {
            set(f, Some(u))?;
        }
    }
    if p.flag("--no-metrics") {
        set("--no-metrics", None)?;
    }
    if let Some(v) = p.value_os("--counter-interval") {
        let secs = args::duration("--counter-interval", v)?.as_secs_f64();
        set("--counter-interval", Some(&secs.to_string()))?;
    }
    for f in [
        "--dump-temp-folder",
        "--diagnostic-port",
        "--egress",
        "--default-process",
    ] {
        if let Some(v) = p.value_text(f)? {
            set(f, Some(v))?;
        }
    }
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
