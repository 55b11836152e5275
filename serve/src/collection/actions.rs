//! A rule's action list, run as dotnet-monitor's `ActionListExecutor` runs it: in order,
//! each with its settings prepared from the outputs of the earlier ones; an action that
//! does not `WaitForCompletion` runs on while the next starts (one whose outputs a later
//! action references is waited for first); the list ends when every action has. The first
//! failure ends the list (what still runs is stopped) and is its error.
//!
//! The collections are the routes' own ([`Api::trace`], [`Api::dump`], the `/exceptions`
//! history of [`Exceptions`](crate::exceptions::Exceptions), ...): an artifact
//! goes to its `Egress` provider as an operation, under the name `?egressProvider=` gives
//! it (or `ArtifactName`), and its path is the action's `EgressPath`.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::SystemTime;

use dsipc::payload::DumpType;
use dsipc::session::providers::ProviderSpec;
use dsipc_trace::counters::CounterSet;
use dsipc_trace::exceptions::ExceptionFormat;
use dsipc_trace::logs::{LogFormat, LogLevel};
use tokio::task::JoinHandle;

use super::stopping::{StopSlot, Stopping};
use crate::api::{Api, ApiError, Artifact, Requester, StackFormat, COMMAND_TIMEOUT};
use crate::operations::ProcessRef;
use crate::procs::Runtime;
use crate::profiles::{self, EventPipeConfiguration, TraceProfile};
use crate::rules::action::{CollectTrace, Egressed, EVENT_LEVELS};
use crate::rules::outputs::{
    action_dependencies, prepare_settings, ActionResults, TokenContext, EGRESS_PATH, VALUE,
};
use crate::rules::{ActionSettings, ProcessInfo, Rule};

/// What one action produced, by output name.
pub(super) type Outputs = BTreeMap<String, String>;

/// The actions still running, stopped if the list ends first.
struct Running(Vec<Option<JoinHandle<Result<Outputs, String>>>>);

impl Drop for Running {
    fn drop(&mut self) {
        for t in self.0.iter().flatten() {
            t.abort();
        }
    }
}

/// Waits for action `i` if it still runs, keeping its outputs under its name.
async fn settle(
    i: usize,
    rule: &Rule,
    running: &mut Running,
    results: &mut ActionResults,
) -> Result<(), String> {
    let task = match running.0.get_mut(i).and_then(Option::take) {
        Some(t) => t,
        None => return Ok(()),
    };
    let outputs = task
        .await
        .map_err(|e| format!("action {} ended abnormally: {}", i, e))?
        .map_err(|e| named(rule, i, e))?;
    keep(rule, i, outputs, results);
    Ok(())
}

fn named(rule: &Rule, i: usize, e: String) -> String {
    let a = &rule.actions[i];
    match &a.name {
        Some(n) => format!("action {} ({}, {}) failed: {}", i, n, a.type_name, e),
        None => format!("action {} ({}) failed: {}", i, a.type_name, e),
    }
}

fn keep(rule: &Rule, i: usize, outputs: Outputs, results: &mut ActionResults) {
    if let Some(n) = &rule.actions[i].name {
        results.insert(n.clone(), outputs);
    }
}

/// This host's name (`$(Monitor.HostName)`).
fn host_name() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
        .or_else(|| std::env::var("HOSTNAME").ok())
        .or_else(|| std::env::var("COMPUTERNAME").ok())
        .unwrap_or_else(|| "localhost".into())
}

/// Runs `rule`'s actions on `runtime`.
pub(super) async fn run(
    api: &Arc<Api>,
    runtime: &Runtime,
    info: ProcessInfo,
    rule: &Rule,
) -> Result<(), String> {
    let ctx = TokenContext {
        process: info,
        host_name: host_name(),
        unix_time: SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .map(|d| d.as_secs() as i64)
            .unwrap_or(0),
    };
    let mut results = ActionResults::new();
    let mut running = Running(Vec::with_capacity(rule.actions.len()));
    for i in 0..rule.actions.len() {
        for d in action_dependencies(&rule.actions, i) {
            settle(d, rule, &mut running, &mut results).await?;
        }
        let settings = prepare_settings(&rule.actions, i, &results, &ctx)
            .ok_or_else(|| format!("action {} is missing", i))?;
        let action = execute(Arc::clone(api), runtime.clone(), settings);
        if rule.actions[i].wait_for_completion {
            let outputs = action.await.map_err(|e| named(rule, i, e))?;
            keep(rule, i, outputs, &mut results);
            running.0.push(None);
        } else {
            running.0.push(Some(tokio::spawn(action)));
        }
    }
    for i in 0..rule.actions.len() {
        settle(i, rule, &mut running, &mut results).await?;
    }
    Ok(())
}

fn api_error(e: ApiError) -> String {
    e.detail().to_string()
}

/// Runs one action with its prepared settings.
async fn execute(
    api: Arc<Api>,
    runtime: Runtime,
    settings: ActionSettings,
) -> Result<Outputs, String> {
    match settings {
        ActionSettings::CollectTrace(t) => {
            let a = trace(&api, &runtime, &t).await?;
            let e = Egressed {
                egress: t.egress,
                artifact_name: t.artifact_name,
            };
            egress(&api, &runtime, a, &e).await
        }
        ActionSettings::CollectDump {
            dump_type,
            egress: e,
        } => {
            let kind = match dump_type {
                "Full" => DumpType::Full,
                "Mini" => DumpType::Normal,
                "Triage" => DumpType::Triage,
                _ => DumpType::WithHeap,
            };
            let a = api
                .dump(&runtime, kind, Requester::Rule)
                .await
                .map_err(api_error)?;
            egress(&api, &runtime, a, &e).await
        }
        ActionSettings::CollectGCDump(e) => {
            let a = api
                .gcdump(&runtime, Requester::Rule)
                .await
                .map_err(api_error)?;
            egress(&api, &runtime, a, &e).await
        }
        ActionSettings::CollectStacks { format, egress: e } => {
            let format = match format {
                "PlainText" => StackFormat::Text,
                "Speedscope" => StackFormat::Speedscope,
                _ => StackFormat::Json,
            };
            let a = api
                .stacks(&runtime, format, Requester::Rule)
                .await
                .map_err(api_error)?;
            egress(&api, &runtime, a, &e).await
        }
        ActionSettings::CollectLogs {
            default_level,
            filter_specs,
            use_app_filters,
            duration,
            format,
            egress: e,
        } => {
            let level = |l: &str| LogLevel::parse(l).ok_or_else(|| format!("log level {}", l));
            let mut specs = Vec::with_capacity(filter_specs.len());
            for (category, l) in filter_specs {
                let l = match l {
                    Some(l) => Some(level(l)?),
                    None => None,
                };
                specs.push((category, l));
            }
            let settings = crate::logs::Settings {
                level: level(default_level)?,
                filter_specs: specs,
                use_app_filters,
            };
            let format = match format {
                "NewlineDelimitedJson" => LogFormat::NdJson,
                "JsonSequence" => LogFormat::JsonSeq,
                _ => LogFormat::Text,
            };
            let a = crate::logs::collect(
                &api,
                &runtime,
                &settings,
                format,
                Some(duration),
                Requester::Rule,
            )
            .await
            .map_err(api_error)?;
            egress(&api, &runtime, a, &e).await
        }
        ActionSettings::CollectLiveMetrics {
            include_default_providers,
            providers,
            meters,
            duration,
            egress: e,
        } => {
            let mut spec: Vec<String> = Vec::new();
            if include_default_providers {
                spec.extend(
                    crate::livemetrics::DEFAULT_PROVIDERS
                        .iter()
                        .map(|p| p.to_string()),
                );
            }
            let named = |name: &str, list: &Option<Vec<String>>| match list {
                Some(l) if !l.is_empty() => format!("{}[{}]", name, l.join(",")),
                _ => name.to_string(),
            };
            spec.extend(
                providers
                    .iter()
                    .map(|p| named(&p.provider_name, &p.counter_names)),
            );
            spec.extend(
                meters
                    .iter()
                    .map(|m| named(&m.meter_name, &m.instrument_names)),
            );
            if spec.is_empty() {
                return Err("no providers or meters to collect".into());
            }
            let set = CounterSet::parse(&spec.join(",")).map_err(|e| e.to_string())?;
            let a =
                crate::livemetrics::collect(&api, &runtime, set, Some(duration), Requester::Rule)
                    .await
                    .map_err(api_error)?;
            egress(&api, &runtime, a, &e).await
        }
        ActionSettings::Execute {
            path,
            arguments,
            ignore_exit_code,
        } => super::execute::run(&path, arguments.as_deref(), ignore_exit_code).await,
        ActionSettings::SetEnvironmentVariable { name, value } => {
            runtime
                .client(COMMAND_TIMEOUT)
                .set_environment_variable(&name, value.as_deref())
                .await
                .map_err(|e| e.to_string())?;
            Ok(Outputs::new())
        }
        ActionSettings::GetEnvironmentVariable { name } => {
            let vars = runtime
                .client(COMMAND_TIMEOUT)
                .process_environment()
                .await
                .map_err(|e| e.to_string())?;
            let prefix = format!("{}=", name);
            let value = vars
                .iter()
                .find_map(|v| v.strip_prefix(&prefix))
                .ok_or_else(|| {
                    format!(
                        "The environment variable '{}' is not set in the target process.",
                        name
                    )
                })?;
            let mut out = Outputs::new();
            out.insert(VALUE.into(), value.to_string());
            Ok(out)
        }
        ActionSettings::CollectExceptions {
            format,
            filters,
            egress: e,
        } => {
            // The history kept so far (since the rules first followed the process), as
            // dotnet-monitor's exceptions operation egresses its store.
            let format = ExceptionFormat::from_name(format).unwrap_or(ExceptionFormat::Text);
            let x = api
                .exceptions
                .collect(&runtime, format, &filters)
                .await
                .map_err(api_error)?;
            egress(&api, &runtime, x.into_artifact(), &e).await
        }
        ActionSettings::LoadProfiler { .. } => {
            Err("this action is not supported by dsipc serve yet".into())
        }
    }
}

/// A CollectTrace's session: its profiles, or its providers.
async fn trace(api: &Api, runtime: &Runtime, t: &CollectTrace) -> Result<Artifact, String> {
    let (specs, rundown) = if t.profile.is_empty() {
        let specs: Vec<ProviderSpec> = t
            .providers
            .iter()
            .map(|p| {
                let level = EVENT_LEVELS
                    .iter()
                    .position(|l| *l == p.event_level)
                    .unwrap_or(5) as u32;
                let args = if p.arguments.is_empty() {
                    None
                } else {
                    let pairs: Vec<(&str, &str)> = p
                        .arguments
                        .iter()
                        .map(|(k, v)| (k.as_str(), v.as_str()))
                        .collect();
                    Some(dsipc_trace::counters::arguments(&pairs))
                };
                ProviderSpec {
                    name: p.name.clone(),
                    keywords: p.keywords,
                    level,
                    args,
                }
            })
            .collect();
        (specs, t.request_rundown)
    } else {
        let profile = TraceProfile::parse(&t.profile.join(","))?;
        // The Metrics profile publishes at the counter interval, as dotnet-monitor's rules
        // use their GlobalCounter interval.
        let interval = api.counter_interval.max(1.0).min(f64::from(u32::MAX)) as u32;
        (
            profiles::providers(profile, interval),
            profile.wants_rundown(),
        )
    };
    let config = EventPipeConfiguration {
        providers: specs,
        request_rundown: rundown,
        buffer_mb: t.buffer_size_megabytes,
    };
    let duration = Some(t.duration);
    match &t.stopping_event {
        None => api
            .trace(runtime, config, duration, Requester::Rule)
            .await
            .map_err(api_error),
        Some(event) => {
            let slot = Arc::new(StopSlot::default());
            let sink = Stopping::new(event.clone(), Arc::clone(&slot));
            let a = api
                .trace_with(runtime, config, duration, sink, Requester::Rule)
                .await
                .map_err(api_error)?;
            if let Some(stop) = &a.stop {
                slot.set(Arc::clone(stop));
            }
            Ok(a)
        }
    }
}

/// Sends `a` to the egress provider `e` names and waits until it landed: its path.
async fn egress(
    api: &Api,
    runtime: &Runtime,
    a: Artifact,
    e: &Egressed,
) -> Result<Outputs, String> {
    let provider = api
        .egress
        .iter()
        .find(|p| p.name.eq_ignore_ascii_case(&e.egress))
        .ok_or_else(|| format!("Egress provider '{}' does not exist.", e.egress))?;
    let name = match &e.artifact_name {
        Some(n) if !n.is_empty() => n.clone(),
        _ => a.name.clone(),
    };
    if name.contains(&['/', '\\'][..]) || name == "." || name == ".." {
        return Err(format!("The artifact name '{}' is not a file name.", name));
    }
    let process = ProcessRef {
        pid: runtime.pid,
        uid: runtime.uid.clone(),
        name: runtime.name.clone(),
    };
    let op = api.operations.start(
        provider,
        &name,
        a.content_type,
        a.body,
        process,
        Vec::new(),
        a.stop,
    )?;
    let path = op.finished().await?;
    let mut out = Outputs::new();
    out.insert(EGRESS_PATH.into(), path);
    Ok(out)
}
