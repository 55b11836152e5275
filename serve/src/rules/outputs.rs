//! Action outputs and the tokens substituted into an action's settings before it runs:
//! `$(Actions.NAME.OUTPUT)` (an earlier action's output; dotnet-monitor substitutes these in
//! `Execute`'s `Arguments`, the one setting it marks as a dependency property) and
//! `$(Process.*)`/`$(Monitor.*)` (in every top-level string setting). Pure functions.

use std::collections::BTreeMap;

use super::action::{Action, ActionSettings, Egressed};
use super::filter::ProcessInfo;

/// The output of every egressing action: where the artifact went.
pub const EGRESS_PATH: &str = "EgressPath";
/// The output of `GetEnvironmentVariable`: the variable's value.
pub const VALUE: &str = "Value";
/// The output of `Execute`: the program's exit code.
pub const EXIT_CODE: &str = "ExitCode";

/// The outputs of the actions run so far, by action name, then output name.
pub type ActionResults = BTreeMap<String, BTreeMap<String, String>>;

/// The outputs an action of `type_name` produces.
pub fn output_names(type_name: &str) -> &'static [&'static str] {
    match type_name {
        "CollectDump" | "CollectExceptions" | "CollectGCDump" | "CollectLiveMetrics"
        | "CollectLogs" | "CollectStacks" | "CollectTrace" => &[EGRESS_PATH],
        "GetEnvironmentVariable" => &[VALUE],
        "Execute" => &[EXIT_CODE],
        _ => &[],
    }
}

/// What `$(Process.*)` and `$(Monitor.*)` stand for.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TokenContext {
    /// The target process.
    pub process: ProcessInfo,
    /// This host's name (`$(Monitor.HostName)`).
    pub host_name: String,
    /// Seconds since the Unix epoch when the action runs (`$(Monitor.UnixTime)`).
    pub unix_time: i64,
}

const ACTIONS_PREFIX: &str = "$(Actions.";

/// Finds `needle` in `hay` from `from`, ASCII case ignored (the prefix is ASCII).
fn find_ignore_case(hay: &str, needle: &str, from: usize) -> Option<usize> {
    let h = hay.as_bytes();
    let n = needle.as_bytes();
    if n.len() > h.len() {
        return None;
    }
    (from..=h.len() - n.len()).find(|&i| h[i..i + n.len()].eq_ignore_ascii_case(n))
}

/// A well-formed `$(Actions.NAME.OUTPUT)` reference of a text: its byte range (the `$`
/// to the `)` included), the action's name and the output's.
struct Reference<'t> {
    start: usize,
    end: usize,
    name: &'t str,
    output: &'t str,
}

/// The references of `text` that name an action before `index` (by its exact name), as
/// dotnet-monitor's dependency analyzer finds them: the prefix without case, the first `)`
/// after it closes the reference, exactly two non-empty parts.
fn references<'t>(text: &'t str, actions: &[Action], index: usize) -> Vec<Reference<'t>> {
    let mut found_refs = Vec::new();
    let mut search = 0;
    while let Some(found) = find_ignore_case(text, ACTIONS_PREFIX, search) {
        let suffix = match text[found..].find(')') {
            Some(s) => found + s,
            None => break,
        };
        search = suffix;
        let reference = &text[found + ACTIONS_PREFIX.len()..suffix];
        let mut parts = reference.split('.');
        let (name, output) = match (parts.next(), parts.next(), parts.next()) {
            (Some(n), Some(o), None) if !n.is_empty() && !o.is_empty() => (n, o),
            _ => continue,
        };
        if actions
            .iter()
            .take(index)
            .any(|a| a.name.as_deref() == Some(name))
        {
            found_refs.push(Reference {
                start: found,
                end: suffix + 1,
                name,
                output,
            });
        }
    }
    found_refs
}

/// Replaces the `$(Actions.NAME.OUTPUT)` references of `text` that name an action before
/// `index` (by its exact name) and an output it produced; any other reference stays as
/// written, as dotnet-monitor leaves it (and logs it).
pub fn substitute_action_references(
    text: &str,
    actions: &[Action],
    index: usize,
    results: &ActionResults,
) -> String {
    let mut out = String::with_capacity(text.len());
    let mut copied = 0;
    for r in references(text, actions, index) {
        if let Some(value) = results.get(r.name).and_then(|o| o.get(r.output)) {
            out.push_str(&text[copied..r.start]);
            out.push_str(value);
            copied = r.end;
        }
    }
    out.push_str(&text[copied..]);
    out
}

/// The earlier actions (indices, in reference order, each once) whose outputs action
/// `index` references: an executor waits for them to complete before starting it, even
/// when they do not `WaitForCompletion`, as dotnet-monitor's ActionListExecutor does.
pub fn action_dependencies(actions: &[Action], index: usize) -> Vec<usize> {
    let text = match actions.get(index).map(|a| &a.settings) {
        Some(ActionSettings::Execute {
            arguments: Some(a), ..
        }) => a,
        _ => return Vec::new(),
    };
    let mut out: Vec<usize> = Vec::new();
    for r in references(text, actions, index) {
        let earlier = actions[..index]
            .iter()
            .position(|a| a.name.as_deref() == Some(r.name));
        if let Some(i) = earlier {
            if !out.contains(&i) {
                out.push(i);
            }
        }
    }
    out
}

/// Replaces `$(Process.RuntimeId)`, `$(Process.ProcessId)`, `$(Process.Name)`,
/// `$(Process.CommandLine)`, `$(Monitor.HostName)` and `$(Monitor.UnixTime)` (exact case, as
/// dotnet-monitor's ordinal replacement).
pub fn substitute_process_tokens(text: &str, ctx: &TokenContext) -> String {
    text.replace("$(Process.RuntimeId)", &ctx.process.runtime_id)
        .replace("$(Process.ProcessId)", &ctx.process.pid.to_string())
        .replace("$(Process.Name)", &ctx.process.name)
        .replace("$(Process.CommandLine)", &ctx.process.command_line)
        .replace("$(Monitor.HostName)", &ctx.host_name)
        .replace("$(Monitor.UnixTime)", &ctx.unix_time.to_string())
}

fn tokens_in_egress(e: &Egressed, ctx: &TokenContext) -> Egressed {
    Egressed {
        egress: substitute_process_tokens(&e.egress, ctx),
        artifact_name: e
            .artifact_name
            .as_ref()
            .map(|a| substitute_process_tokens(a, ctx)),
    }
}

/// The settings action `index` of `actions` runs with, given the outputs of the actions
/// before it: action references first, then process tokens, as dotnet-monitor orders them.
pub fn prepare_settings(
    actions: &[Action],
    index: usize,
    results: &ActionResults,
    ctx: &TokenContext,
) -> Option<ActionSettings> {
    let action = actions.get(index)?;
    let t = |s: &str| substitute_process_tokens(s, ctx);
    let mut settings = action.settings.clone();
    match &mut settings {
        ActionSettings::Execute {
            path, arguments, ..
        } => {
            *path = t(path);
            if let Some(a) = arguments.as_mut() {
                *a = t(&substitute_action_references(a, actions, index, results));
            }
        }
        ActionSettings::SetEnvironmentVariable { name, value } => {
            *name = t(name);
            if let Some(v) = value.as_mut() {
                *v = t(v);
            }
        }
        ActionSettings::GetEnvironmentVariable { name } => *name = t(name),
        ActionSettings::LoadProfiler { path, clsid } => {
            *path = t(path);
            *clsid = t(clsid);
        }
        ActionSettings::CollectTrace(trace) => {
            trace.egress = t(&trace.egress);
            trace.artifact_name = trace.artifact_name.as_ref().map(|a| t(a));
        }
        ActionSettings::CollectDump { egress, .. }
        | ActionSettings::CollectGCDump(egress)
        | ActionSettings::CollectStacks { egress, .. }
        | ActionSettings::CollectLogs { egress, .. }
        | ActionSettings::CollectLiveMetrics { egress, .. }
        | ActionSettings::CollectExceptions { egress, .. } => {
            *egress = tokens_in_egress(egress, ctx);
        }
    }
    Some(settings)
}
