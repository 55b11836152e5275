//! A rule's `Actions`: `Name`, `Type`, typed `Settings` and `WaitForCompletion`, with
//! dotnet-monitor's defaults and validation.

use std::collections::BTreeMap;
use std::time::Duration;

use dsipc_trace::exceptions::{ExceptionFilter, ExceptionsConfiguration};

use super::defaults::LoadOptions;
use super::value::{ErrorKind, Node, Result, RuleError};

/// The action types dotnet-monitor knows, as configuration names them.
pub const ACTION_TYPES: &[&str] = &[
    "CollectDump",
    "CollectExceptions",
    "CollectGCDump",
    "CollectLiveMetrics",
    "CollectLogs",
    "CollectStacks",
    "CollectTrace",
    "Execute",
    "GetEnvironmentVariable",
    "LoadProfiler",
    "SetEnvironmentVariable",
];

/// The default `Duration` of CollectTrace, CollectLogs and CollectLiveMetrics: 30 seconds.
pub const DEFAULT_DURATION: Duration = Duration::from_secs(30);
const MIN_DURATION: Duration = Duration::from_secs(1);
const MAX_DURATION: Duration = Duration::from_secs(86_400);
/// CollectTrace's default `BufferSizeMegabytes`.
pub const DEFAULT_BUFFER_SIZE_MB: u32 = 256;
/// The keywords of a trace provider that gives none (EventKeywords.All).
pub const ALL_KEYWORDS: u64 = u64::MAX;

/// The profiles of CollectTrace (dotnet-monitor's `TraceProfile` flags).
pub const TRACE_PROFILES: &[&str] = &["Cpu", "Http", "Logs", "Metrics", "GcCollect"];
/// EventPipe levels as dotnet-monitor's `EventLevel` names them.
pub const EVENT_LEVELS: &[&str] = &[
    "LogAlways",
    "Critical",
    "Error",
    "Warning",
    "Informational",
    "Verbose",
];
/// Dump types (dotnet-monitor's `DumpType`).
pub const DUMP_TYPES: &[&str] = &["Full", "Mini", "WithHeap", "Triage"];
/// Log levels (Microsoft.Extensions.Logging's `LogLevel`).
pub const LOG_LEVELS: &[&str] = &[
    "Trace",
    "Debug",
    "Information",
    "Warning",
    "Error",
    "Critical",
    "None",
];
/// Log and exception formats (dotnet-monitor's `LogFormat`, `ExceptionFormat`).
pub const LOG_FORMATS: &[&str] = &["NewlineDelimitedJson", "PlainText", "JsonSequence"];
/// Call stack formats (dotnet-monitor's `CallStackFormat`).
pub const STACK_FORMATS: &[&str] = &["Json", "PlainText", "Speedscope"];

/// One provider of CollectTrace's `Providers`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TraceProvider {
    /// The provider's name.
    pub name: String,
    /// Its keywords (default: all).
    pub keywords: u64,
    /// Its level (default `Verbose`).
    pub event_level: &'static str,
    /// Its arguments (FilterData).
    pub arguments: BTreeMap<String, String>,
}

/// CollectTrace's `StoppingEvent`: the trace stops at this event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoppingEvent {
    /// The event's provider (must be one of `Providers`).
    pub provider_name: String,
    /// The event's name.
    pub event_name: String,
    /// Payload fields the event must carry, with their values.
    pub payload_filter: BTreeMap<String, String>,
}

/// CollectTrace's settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CollectTrace {
    /// The profiles (`"Cpu,Http"`), or empty when `providers` is given.
    pub profile: Vec<&'static str>,
    /// Explicit providers, or empty when `profile` is given.
    pub providers: Vec<TraceProvider>,
    /// Whether rundown is requested (default true).
    pub request_rundown: bool,
    /// The session's buffer (1..=1024 MB, default 256).
    pub buffer_size_megabytes: u32,
    /// How long to trace (default 30 s).
    pub duration: Duration,
    /// The egress provider.
    pub egress: String,
    /// Stop at this event instead of after `duration`.
    pub stopping_event: Option<StoppingEvent>,
    /// The artifact's name, when given.
    pub artifact_name: Option<String>,
}

/// The settings every egressing action shares.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Egressed {
    /// The egress provider.
    pub egress: String,
    /// The artifact's name, when given.
    pub artifact_name: Option<String>,
}

/// A meter of CollectLiveMetrics's `Meters`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LiveMetricsMeter {
    /// The meter's name.
    pub meter_name: String,
    /// Its instruments (none: all).
    pub instrument_names: Option<Vec<String>>,
}

/// A provider of CollectLiveMetrics's `Providers`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LiveMetricsProvider {
    /// The EventSource's name.
    pub provider_name: String,
    /// Its counters (none: all).
    pub counter_names: Option<Vec<String>>,
}

/// An action's typed settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ActionSettings {
    /// A trace.
    CollectTrace(CollectTrace),
    /// A dump of `dump_type` (default `WithHeap`).
    CollectDump {
        /// Full, Mini, WithHeap or Triage.
        dump_type: &'static str,
        /// Where it goes.
        egress: Egressed,
    },
    /// A gcdump.
    CollectGCDump(Egressed),
    /// Call stacks in `format` (default `Json`).
    CollectStacks {
        /// Json, PlainText or Speedscope.
        format: &'static str,
        /// Where they go.
        egress: Egressed,
    },
    /// Logs.
    CollectLogs {
        /// The level of categories not in `filter_specs` (default `Warning`).
        default_level: &'static str,
        /// Per-category levels (a `None` level: the category's default).
        filter_specs: BTreeMap<String, Option<&'static str>>,
        /// Whether the app's own filters apply (default true).
        use_app_filters: bool,
        /// How long (default 30 s).
        duration: Duration,
        /// The format (default `PlainText`).
        format: &'static str,
        /// Where they go.
        egress: Egressed,
    },
    /// Live metrics.
    CollectLiveMetrics {
        /// Whether the default providers are included (default true).
        include_default_providers: bool,
        /// Extra EventCounter providers.
        providers: Vec<LiveMetricsProvider>,
        /// Extra meters.
        meters: Vec<LiveMetricsMeter>,
        /// How long (default 30 s).
        duration: Duration,
        /// Where they go.
        egress: Egressed,
    },
    /// The recent exceptions.
    CollectExceptions {
        /// The format (default `PlainText`).
        format: &'static str,
        /// `Filters`: the exceptions to keep (`Include`) and drop (`Exclude`), as the
        /// `/exceptions` history applies them (a filter's `TypeName` is the throwing
        /// method's declaring type: [`ExceptionFilter::type_name`]).
        filters: ExceptionsConfiguration,
        /// Where they go.
        egress: Egressed,
    },
    /// Runs a program.
    Execute {
        /// The program.
        path: String,
        /// Its arguments (may reference earlier actions' outputs).
        arguments: Option<String>,
        /// Whether a non-zero exit code is not a failure (default false).
        ignore_exit_code: bool,
    },
    /// Sets an environment variable in the target process.
    SetEnvironmentVariable {
        /// The variable.
        name: String,
        /// Its value.
        value: Option<String>,
    },
    /// Reads an environment variable of the target process (output `Value`).
    GetEnvironmentVariable {
        /// The variable.
        name: String,
    },
    /// Loads a profiler into the target process.
    LoadProfiler {
        /// The profiler's library.
        path: String,
        /// Its CLSID.
        clsid: String,
    },
}

/// One action of a rule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Action {
    /// The name later actions reference it by (`$(Actions.NAME.EgressPath)`).
    pub name: Option<String>,
    /// The `Type` as dotnet-monitor spells it.
    pub type_name: &'static str,
    /// Whether the next action waits for this one to finish (default false).
    pub wait_for_completion: bool,
    /// The settings.
    pub settings: ActionSettings,
}

fn invalid(node: &Node<'_>, message: String) -> RuleError {
    RuleError::new(node.path.clone(), ErrorKind::Invalid(message))
}

fn duration(s: &Node<'_>) -> Result<Duration> {
    Ok(s.child("Duration")
        .timespan(MIN_DURATION, MAX_DURATION)?
        .unwrap_or(DEFAULT_DURATION))
}

fn egressed(s: &Node<'_>, options: &LoadOptions<'_>) -> Result<Egressed> {
    let node = s.child("Egress");
    let egress = node.string()?.or_else(|| options.defaults.egress.clone());
    let egress = egress.ok_or_else(|| {
        invalid(
            &node,
            "An egress provider must be specified if there is no default egress provider.".into(),
        )
    })?;
    if let Some(known) = options.egress_providers {
        if !known.iter().any(|k| k.eq_ignore_ascii_case(&egress)) {
            return Err(invalid(
                &node,
                format!("Egress provider '{}' does not exist.", egress),
            ));
        }
    }
    Ok(Egressed {
        egress,
        artifact_name: s.child("ArtifactName").string()?,
    })
}

fn string_map(node: &Node<'_>) -> Result<BTreeMap<String, String>> {
    let mut map = BTreeMap::new();
    for (k, v) in node.entries()? {
        map.insert(k, v.string()?.unwrap_or_default());
    }
    Ok(map)
}

/// Keywords as an integer or a hex string (`"0xC"`), as dotnet-monitor's
/// IntegerOrHexString; absent: all keywords.
fn keywords(node: &Node<'_>) -> Result<u64> {
    let text = match node.string()? {
        None => return Ok(ALL_KEYWORDS),
        Some(t) => t,
    };
    let t = text.trim();
    let parsed = match t.strip_prefix("0x").or_else(|| t.strip_prefix("0X")) {
        Some(hex) => u64::from_str_radix(hex, 16).ok(),
        None => t.parse::<u64>().ok(),
    };
    parsed.ok_or_else(|| node.wrong("an integer or a hex string such as \"0xC\""))
}

fn collect_trace(s: &Node<'_>, options: &LoadOptions<'_>) -> Result<CollectTrace> {
    let mut profile = Vec::new();
    let profile_node = s.child("Profile");
    if let Some(text) = profile_node.string()? {
        for part in text.split(',') {
            let found = TRACE_PROFILES
                .iter()
                .find(|p| p.eq_ignore_ascii_case(part.trim()))
                .ok_or_else(|| {
                    RuleError::new(
                        profile_node.path.clone(),
                        ErrorKind::Unknown {
                            allowed: TRACE_PROFILES,
                        },
                    )
                })?;
            profile.push(*found);
        }
    }
    let mut providers = Vec::new();
    for p in s.child("Providers").list()? {
        let name_node = p.child("Name");
        let name = name_node.required_string()?;
        providers.push(TraceProvider {
            name,
            keywords: keywords(&p.child("Keywords"))?,
            event_level: p
                .child("EventLevel")
                .one_of(EVENT_LEVELS)?
                .unwrap_or("Verbose"),
            arguments: string_map(&p.child("Arguments"))?,
        });
    }
    let stopping_node = s.child("StoppingEvent");
    let stopping_event = if stopping_node.exists() {
        Some(StoppingEvent {
            provider_name: stopping_node.child("ProviderName").required_string()?,
            event_name: stopping_node.child("EventName").required_string()?,
            payload_filter: string_map(&stopping_node.child("PayloadFilter"))?,
        })
    } else {
        None
    };
    if !profile.is_empty() {
        if stopping_event.is_some() {
            return Err(invalid(
                s,
                "Both the Profile field and the StoppingEvent field cannot be specified.".into(),
            ));
        }
        if !providers.is_empty() {
            return Err(invalid(
                s,
                "Both the Profile field and the Providers field cannot be specified.".into(),
            ));
        }
    } else if providers.is_empty() {
        return Err(invalid(
            s,
            "The Profile field or the Providers field is required.".into(),
        ));
    }
    if let Some(stop) = &stopping_event {
        // Ordinal, as dotnet-monitor compares the provider names.
        if !providers.iter().any(|p| p.name == stop.provider_name) {
            return Err(invalid(
                &stopping_node,
                format!(
                    "The StoppingEvent field specified the provider '{}' but it was not found in the Providers field.",
                    stop.provider_name
                ),
            ));
        }
    }
    let egress = egressed(s, options)?;
    Ok(CollectTrace {
        profile,
        providers,
        request_rundown: s.child("RequestRundown").bool()?.unwrap_or(true),
        buffer_size_megabytes: s
            .child("BufferSizeMegabytes")
            .int(1, 1024)?
            .map_or(DEFAULT_BUFFER_SIZE_MB, |v| v as u32),
        duration: duration(s)?,
        egress: egress.egress,
        stopping_event,
        artifact_name: egress.artifact_name,
    })
}

fn exception_filters(node: &Node<'_>) -> Result<Vec<ExceptionFilter>> {
    let mut out = Vec::new();
    for f in node.list()? {
        out.push(ExceptionFilter {
            exception_type: f.child("ExceptionType").string()?,
            module_name: f.child("ModuleName").string()?,
            type_name: f.child("TypeName").string()?,
            method_name: f.child("MethodName").string()?,
        });
    }
    Ok(out)
}

fn is_guid(text: &str) -> bool {
    let t = text.trim().trim_start_matches('{').trim_end_matches('}');
    let groups: Vec<&str> = t.split('-').collect();
    let lengths = [8, 4, 4, 4, 12];
    groups.len() == 5
        && groups
            .iter()
            .zip(lengths.iter())
            .all(|(g, l)| g.len() == *l && g.bytes().all(|b| b.is_ascii_hexdigit()))
        && t.bytes().any(|b| b != b'0' && b != b'-')
}

impl Action {
    /// Reads one action (`Name`, `Type`, `Settings`, `WaitForCompletion`), with the
    /// defaults and the egress providers of `options`.
    pub fn parse(node: &Node<'_>, options: &LoadOptions<'_>) -> Result<Action> {
        if node.exists() && node.value.map_or(false, |v| !v.is_object()) {
            return Err(node.wrong("an action (Name, Type, Settings)"));
        }
        let type_node = node.child("Type");
        let type_name = type_node
            .one_of(ACTION_TYPES)?
            .ok_or_else(|| RuleError::new(type_node.path.clone(), ErrorKind::Missing))?;
        let s = node.child("Settings");
        let settings = match type_name {
            "CollectTrace" => ActionSettings::CollectTrace(collect_trace(&s, options)?),
            "CollectDump" => ActionSettings::CollectDump {
                dump_type: s.child("Type").one_of(DUMP_TYPES)?.unwrap_or("WithHeap"),
                egress: egressed(&s, options)?,
            },
            "CollectGCDump" => ActionSettings::CollectGCDump(egressed(&s, options)?),
            "CollectStacks" => ActionSettings::CollectStacks {
                format: s.child("Format").one_of(STACK_FORMATS)?.unwrap_or("Json"),
                egress: egressed(&s, options)?,
            },
            "CollectLogs" => {
                let mut filter_specs = BTreeMap::new();
                for (category, level) in s.child("FilterSpecs").entries()? {
                    filter_specs.insert(category, level.one_of(LOG_LEVELS)?);
                }
                ActionSettings::CollectLogs {
                    default_level: s
                        .child("DefaultLevel")
                        .one_of(LOG_LEVELS)?
                        .unwrap_or("Warning"),
                    filter_specs,
                    use_app_filters: s.child("UseAppFilters").bool()?.unwrap_or(true),
                    duration: duration(&s)?,
                    format: s
                        .child("Format")
                        .one_of(LOG_FORMATS)?
                        .unwrap_or("PlainText"),
                    egress: egressed(&s, options)?,
                }
            }
            "CollectLiveMetrics" => {
                let mut providers = Vec::new();
                for p in s.child("Providers").list()? {
                    providers.push(LiveMetricsProvider {
                        provider_name: p.child("ProviderName").required_string()?,
                        counter_names: p.child("CounterNames").strings()?,
                    });
                }
                let mut meters = Vec::new();
                for m in s.child("Meters").list()? {
                    meters.push(LiveMetricsMeter {
                        meter_name: m.child("MeterName").required_string()?,
                        instrument_names: m.child("InstrumentNames").strings()?,
                    });
                }
                ActionSettings::CollectLiveMetrics {
                    include_default_providers: s
                        .child("IncludeDefaultProviders")
                        .bool()?
                        .unwrap_or(true),
                    providers,
                    meters,
                    duration: duration(&s)?,
                    egress: egressed(&s, options)?,
                }
            }
            "CollectExceptions" => {
                let filters = s.child("Filters");
                ActionSettings::CollectExceptions {
                    format: s
                        .child("Format")
                        .one_of(LOG_FORMATS)?
                        .unwrap_or("PlainText"),
                    filters: ExceptionsConfiguration {
                        include: exception_filters(&filters.child("Include"))?,
                        exclude: exception_filters(&filters.child("Exclude"))?,
                    },
                    egress: egressed(&s, options)?,
                }
            }
            "Execute" => ActionSettings::Execute {
                path: s.child("Path").required_string()?,
                arguments: s.child("Arguments").string()?,
                ignore_exit_code: s.child("IgnoreExitCode").bool()?.unwrap_or(false),
            },
            "SetEnvironmentVariable" => ActionSettings::SetEnvironmentVariable {
                name: s.child("Name").required_string()?,
                value: s.child("Value").string()?,
            },
            "GetEnvironmentVariable" => ActionSettings::GetEnvironmentVariable {
                name: s.child("Name").required_string()?,
            },
            _ => {
                let clsid_node = s.child("Clsid");
                let clsid = clsid_node.required_string()?;
                if !is_guid(&clsid) {
                    return Err(invalid(
                        &clsid_node,
                        "The field Clsid must be a non-empty GUID.".into(),
                    ));
                }
                ActionSettings::LoadProfiler {
                    path: s.child("Path").required_string()?,
                    clsid,
                }
            }
        };
        Ok(Action {
            name: node.child("Name").string()?,
            type_name,
            wait_for_completion: node.child("WaitForCompletion").bool()?.unwrap_or(false),
            settings,
        })
    }

    /// The egress provider this action writes to, if it egresses.
    pub fn egress(&self) -> Option<&str> {
        match &self.settings {
            ActionSettings::CollectTrace(t) => Some(&t.egress),
            ActionSettings::CollectDump { egress, .. }
            | ActionSettings::CollectGCDump(egress)
            | ActionSettings::CollectStacks { egress, .. }
            | ActionSettings::CollectLogs { egress, .. }
            | ActionSettings::CollectLiveMetrics { egress, .. }
            | ActionSettings::CollectExceptions { egress, .. } => Some(&egress.egress),
            _ => None,
        }
    }
}
