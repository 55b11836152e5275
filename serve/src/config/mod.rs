//! dotnet-monitor's configuration, as its users write it: a `settings.json`, environment
//! variables (`DotnetMonitor_Egress__FileSystem__out__DirectoryPath`) and key-per-file
//! folders (Kubernetes ConfigMaps and Secrets mounted as files), merged in dotnet-monitor's
//! order ([`Sources`]: a later source wins; keys are case-insensitive), read as a tree of
//! [`Section`]s that remembers which source set each value, and bound into typed
//! [`Settings`]. `CollectionRules` and `Templates` are handed on as raw sections.
//! [`resolve`] maps the result to what a [`Server`](crate::Server) runs with
//! ([`Options`](crate::Options) and the addresses to listen on), as `dsipc serve` does.
//!
//! ```
//! use dsipc_serve::config::{load, Sources};
//! let mut sources = Sources::default();
//! sources.environment = vec![
//!     ("DotnetMonitor_Egress__FileSystem__out__DirectoryPath".into(), "/artifacts".into()),
//!     ("DotnetMonitor_Metrics__Enabled".into(), "false".into()),
//! ];
//! let loaded = load(&sources).unwrap();
//! assert_eq!(loaded.settings.egress.file_system["out"].directory_path, "/artifacts");
//! assert_eq!(loaded.settings.metrics.enabled, Some(false));
//! ```

mod bind;
mod egress;
mod error;
mod flags;
mod options;
mod sections;
mod show;
mod sources;
mod timespan;
mod tree;

use std::ffi::OsString;
use std::path::PathBuf;

pub use crate::secret::{Secret, REDACTED};
pub use bind::bind;
pub use egress::egress_providers;
pub use error::{ConfigError, Warning};
pub use flags::FlagError;
pub use options::{defaults, resolve, Resolved};
pub use sections::*;
pub use show::{show, ShowLevel, NOT_PRESENT};
pub use sources::{
    environment, json_file, json_layer, key_per_file, shared_config_dir, user_settings_path,
    ENV_PREFIX, MAX_JSON_FILE, MAX_KEY_FILE, MAX_KEY_FILES, TOP_LEVEL,
};
pub use timespan::{TimeSpan, TimeSpanError};
pub use tree::{Layer, Merged, Section, Source, KEY_DELIMITER};

/// Every source, in dotnet-monitor's order, lowest precedence first. Files and folders
/// left `None` are not read.
#[derive(Clone, Debug, Default)]
pub struct Sources {
    /// dotnet-monitor's defaults (`urls`, `Metrics:Endpoints`...).
    pub defaults: Layer,
    /// The user settings file ([`user_settings_path`]); read if it exists.
    pub user_settings: Option<PathBuf>,
    /// The shared settings file (`/etc/dotnet-monitor/settings.json`); read if it exists.
    pub shared_settings: Option<PathBuf>,
    /// The key-per-file folder (`/etc/dotnet-monitor`); read if it exists.
    pub key_per_file: Option<PathBuf>,
    /// The environment: variables without a prefix naming a [`TOP_LEVEL`] section (below
    /// the files, as .NET's defaults read them), then those with `DotnetMonitor_` (above).
    pub environment: Vec<(OsString, OsString)>,
    /// `--configuration-file-path`: must exist; above every other file and variable.
    pub configuration_file: Option<PathBuf>,
    /// dsipc's own flags (`--urls`, `--egress`...): above everything (dotnet-monitor puts
    /// its command line lowest; dsipc's flags win, as a user typing one expects).
    pub command_line: Layer,
    /// Sections the command line replaces whole (`--default-process` replaces every
    /// configured filter, not only filter 0).
    pub command_line_replaces: Vec<String>,
}

impl Sources {
    /// dotnet-monitor's [`defaults`], its default locations and this process's environment.
    pub fn dotnet_monitor() -> Sources {
        let shared = shared_config_dir();
        Sources {
            defaults: defaults(),
            user_settings: user_settings_path(),
            shared_settings: shared.as_ref().map(|d| d.join("settings.json")),
            key_per_file: shared,
            environment: std::env::vars_os().collect(),
            ..Sources::default()
        }
    }
}

/// The merged configuration, bound.
#[derive(Clone, Debug)]
pub struct Loaded {
    /// The merged tree (every key, with its source).
    pub root: Section,
    /// The sections, typed.
    pub settings: Settings,
    /// Keys nothing reads, settings read but not acted on: for the caller to print.
    pub warnings: Vec<Warning>,
}

/// dotnet-monitor's sections, typed (absent ones are their defaults).
#[derive(Clone, Debug, Default)]
#[non_exhaustive]
pub struct Settings {
    /// `urls`: the API's URLs (`;`-separated).
    pub urls: Option<String>,
    /// `Egress`.
    pub egress: EgressOptions,
    /// `DefaultProcess`.
    pub default_process: DefaultProcessOptions,
    /// `Metrics`.
    pub metrics: MetricsOptions,
    /// `GlobalCounter`.
    pub global_counter: GlobalCounterOptions,
    /// `Authentication`.
    pub authentication: AuthenticationOptions,
    /// `Storage`.
    pub storage: StorageOptions,
    /// `DiagnosticPort` (the `"DiagnosticPort": "PATH"` shorthand resolved into Listen).
    pub diagnostic_port: DiagnosticPortOptions,
    /// `CollectionRules`, raw (bound by the rules module).
    pub collection_rules: Option<Section>,
    /// `Templates`, raw.
    pub templates: Option<Section>,
    /// `CollectionRuleDefaults`, raw.
    pub collection_rule_defaults: Option<Section>,
}

/// Top-level sections read but not bound here (no warning for them).
const PASSED_THROUGH: &[&str] = &[
    "Kestrel",
    "CorsConfiguration",
    "InProcessFeatures",
    "Logging",
];

/// Reads, merges and binds every source.
pub fn load(sources: &Sources) -> Result<Loaded, ConfigError> {
    let mut merged = Merged::new();
    let mut warnings = Vec::new();
    merged.add(&sources.defaults);
    merged.add(&environment(sources.environment.iter().cloned(), ""));
    for path in [&sources.user_settings, &sources.shared_settings]
        .iter()
        .copied()
        .flatten()
    {
        if path.is_file() {
            merged.add(&optional(json_file(path), &mut warnings)?);
        }
    }
    if let Some(dir) = &sources.key_per_file {
        merged.add(&optional(key_per_file(dir), &mut warnings)?);
    }
    merged.add(&environment(
        sources.environment.iter().cloned(),
        ENV_PREFIX,
    ));
    if let Some(path) = &sources.configuration_file {
        merged.add(&json_file(path)?);
    }
    for s in &sources.command_line_replaces {
        merged.remove_section(s);
    }
    merged.add(&sources.command_line);
    let root = merged.tree();
    let settings = bind_settings(&root, &mut warnings)?;
    Ok(Loaded {
        root,
        settings,
        warnings,
    })
}

/// A default location that cannot be read (a folder only root may open) is skipped with a
/// warning, as dotnet-monitor skips an unreadable settings file; what it holds must still
/// be right (bad JSON is an error).
fn optional(
    layer: Result<Layer, ConfigError>,
    warnings: &mut Vec<Warning>,
) -> Result<Layer, ConfigError> {
    match layer {
        Err(ConfigError::Read { path, error }) => {
            warnings.push(Warning {
                key: String::new(),
                source: None,
                message: format!("{} is skipped: {}", path.display(), error),
            });
            Ok(Layer::new())
        }
        other => other,
    }
}

/// Binds the typed sections of a merged tree.
pub fn bind_settings(root: &Section, warnings: &mut Vec<Warning>) -> Result<Settings, ConfigError> {
    let mut s = Settings::default();
    // A key with no value and nothing under it (`"Egress": {}`) is not there, as in .NET.
    for top in root.children().iter().filter(|t| t.exists()) {
        let key = top.key();
        let is = |name: &str| key.eq_ignore_ascii_case(name);
        if is("urls") {
            s.urls = bind(top, warnings)?;
        } else if is("Egress") {
            s.egress = bind(top, warnings)?;
            s.egress.check_names()?;
        } else if is("DefaultProcess") {
            s.default_process = bind(top, warnings)?;
            check_filters(&s.default_process, top)?;
        } else if is("Metrics") {
            s.metrics = bind(top, warnings)?;
        } else if is("GlobalCounter") {
            s.global_counter = bind(top, warnings)?;
        } else if is("Authentication") {
            s.authentication = bind(top, warnings)?;
        } else if is("Storage") {
            s.storage = bind(top, warnings)?;
        } else if is("DiagnosticPort") {
            s.diagnostic_port = diagnostic_port(top, warnings)?;
        } else if is("CollectionRules") {
            s.collection_rules = Some(top.clone());
        } else if is("Templates") {
            s.templates = Some(top.clone());
        } else if is("CollectionRuleDefaults") {
            s.collection_rule_defaults = Some(top.clone());
        } else if !PASSED_THROUGH.iter().any(|p| is(p)) {
            warnings.push(Warning {
                key: top.path().to_string(),
                source: top
                    .source()
                    .cloned()
                    .or_else(|| first_leaf(top).and_then(|l| l.source().cloned())),
                message: "unknown key: nothing reads it".into(),
            });
        }
    }
    Ok(s)
}

fn first_leaf(s: &Section) -> Option<&Section> {
    if s.children().is_empty() {
        Some(s)
    } else {
        s.children().iter().find_map(first_leaf)
    }
}

/// `"DiagnosticPort": "PATH"` is listen mode on PATH (and wins over the expanded form).
fn diagnostic_port(
    section: &Section,
    warnings: &mut Vec<Warning>,
) -> Result<DiagnosticPortOptions, ConfigError> {
    let mut o: DiagnosticPortOptions = if section.children().is_empty() {
        DiagnosticPortOptions::default()
    } else {
        bind(section, warnings)?
    };
    if let Some(path) = section.value().filter(|v| !v.is_empty()) {
        o.connection_mode = Some(DiagnosticPortConnectionMode::Listen);
        o.endpoint_name = Some(path.to_string());
    }
    if o.connection_mode == Some(DiagnosticPortConnectionMode::Listen)
        && o.endpoint_name.as_deref().map_or(true, str::is_empty)
    {
        return Err(ConfigError::Missing {
            key: format!("{}:EndpointName", section.path()),
        });
    }
    Ok(o)
}

/// Each filter has a value, and a process id is a number.
fn check_filters(o: &DefaultProcessOptions, section: &Section) -> Result<(), ConfigError> {
    for (i, f) in o.filters.iter().enumerate() {
        let key = format!("{}:Filters:{}", section.path(), i);
        match f.resolved() {
            None => {
                return Err(ConfigError::Missing {
                    key: key + ":Value",
                })
            }
            Some((ProcessFilterKey::ProcessId, v, _)) if v.trim().parse::<u32>().is_err() => {
                let leaf = section.get(&format!("Filters:{}", i));
                return Err(ConfigError::Invalid {
                    source: leaf.and_then(first_leaf).and_then(|l| l.source().cloned()),
                    key,
                    message: format!("the process id {:?} is not a number", v),
                });
            }
            Some(_) => {}
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests;
