//! The model read from configuration: dotnet-monitor's documented examples
//! (documentation/collectionrules/collectionruleexamples.md, templates.md), the string and
//! indexed-object shapes environment variables and key-per-file give, and errors that name
//! their key.

use std::collections::BTreeMap;
use std::time::Duration;

use serde_json::{json, Value};

use super::action::ActionSettings;
use super::defaults::{LoadOptions, RuleDefaults};
use super::filter::{FilterKey, MatchType, ProcessInfo};
use super::outputs::{
    action_dependencies, output_names, prepare_settings, substitute_action_references,
    ActionResults, TokenContext,
};
use super::rule::{Rule, RuleSet, DEFAULT_ACTION_COUNT};
use super::trigger::{Threshold, TriggerKind};
use super::value::{ErrorKind, RuleError};

fn load(rules: Value) -> RuleSet {
    RuleSet::load(&rules, &LoadOptions::default()).unwrap()
}

fn with_templates(templates: &Value) -> LoadOptions<'_> {
    LoadOptions {
        templates: Some(templates),
        ..LoadOptions::default()
    }
}

fn only(rules: Value) -> Rule {
    let set = load(rules);
    assert_eq!(set.entries.len(), 1);
    set.entries[0].rule.clone().unwrap()
}

fn error(rules: Value) -> RuleError {
    let set = load(rules);
    set.entries[0].rule.clone().unwrap_err()
}

#[test]
fn startup_trigger_with_trace_providers_parses_as_documented() {
    let rule = only(json!({"AssemblyLoadTraceOnStartup": {
        "Trigger": {"Type": "Startup"},
        "Actions": [{"Type": "CollectTrace", "Settings": {
            "Providers": [{"Name": "Microsoft-Windows-DotNETRuntime", "EventLevel": "Informational", "Keywords": "0xC"}],
            "Duration": "00:00:15", "Egress": "artifacts"}}]}}));
    assert_eq!(rule.trigger.kind, TriggerKind::Startup);
    let trace = match &rule.actions[0].settings {
        ActionSettings::CollectTrace(t) => t,
        other => panic!("{:?}", other),
    };
    assert_eq!(trace.providers[0].keywords, 0xC);
    assert_eq!(trace.providers[0].event_level, "Informational");
    assert_eq!(trace.duration, Duration::from_secs(15));
    assert!(trace.request_rundown);
    assert_eq!(trace.buffer_size_megabytes, 256);
    assert_eq!(rule.limits.action_count, DEFAULT_ACTION_COUNT);
}

#[test]
fn event_counter_trigger_defaults_its_sliding_window_to_a_minute() {
    let rule = only(json!({"LargeGCHeapSize": {
        "Trigger": {"Type": "EventCounter", "Settings": {
            "ProviderName": "System.Runtime", "CounterName": "gc-heap-size", "GreaterThan": 10}},
        "Actions": [{"Type": "CollectGCDump", "Settings": {"Egress": "artifacts"}}]}}));
    match rule.trigger.kind {
        TriggerKind::EventCounter(t) => {
            assert_eq!(t.sliding_window, Duration::from_secs(60));
            assert_eq!(t.threshold.greater_than, Some(10.0));
        }
        other => panic!("{:?}", other),
    }
}

#[test]
fn event_counter_trigger_needs_greater_than_or_less_than() {
    let err = error(
        json!({"HighCpu": {"Trigger": {"Type": "EventCounter", "Settings": {
        "ProviderName": "System.Runtime", "CounterName": "cpu-usage"}}}}),
    );
    assert_eq!(err.path, "CollectionRules:HighCpu:Trigger:Settings");
    assert_eq!(
        err.kind,
        ErrorKind::Invalid("The GreaterThan field or the LessThan field is required.".into())
    );
    let err = error(
        json!({"HighCpu": {"Trigger": {"Type": "EventCounter", "Settings": {
        "ProviderName": "System.Runtime", "CounterName": "cpu-usage", "GreaterThan": 50, "LessThan": 40}}}}),
    );
    assert!(err.to_string().contains("must be less than"), "{}", err);
}

#[test]
fn errors_name_the_key_path() {
    let err = error(
        json!({"HighCpu": {"Trigger": {"Type": "EventCounter", "Settings": {
        "ProviderName": "System.Runtime", "CounterName": "cpu-usage", "GreaterThan": "lots"}}}}),
    );
    assert_eq!(
        err.path,
        "CollectionRules:HighCpu:Trigger:Settings:GreaterThan"
    );
    assert!(err
        .to_string()
        .starts_with("CollectionRules:HighCpu:Trigger:Settings:GreaterThan: "));
    let err = error(json!({"R": {"Trigger": {"Type": "Startup"},
        "Actions": [{"Type": "CollectDump", "Settings": {"Egress": "x"}},
                    {"Type": "CollectTrace", "Settings": {"Profile": "Cpu", "Egress": "x", "Duration": "2.00:00:00"}}]}}));
    assert_eq!(err.path, "CollectionRules:R:Actions:1:Settings:Duration");
    assert!(matches!(err.kind, ErrorKind::OutOfRange { .. }));
    let err = error(json!({"R": {"Trigger": {"Type": "Sometimes"}}}));
    assert_eq!(err.path, "CollectionRules:R:Trigger:Type");
    let err = error(json!({"R": {"Actions": []}}));
    assert_eq!(
        (err.path.as_str(), &err.kind),
        ("CollectionRules:R:Trigger", &ErrorKind::Missing)
    );
}

#[test]
fn a_bad_rule_is_kept_with_its_error_and_the_others_load() {
    let set = load(json!({
        "Good": {"Trigger": {"Type": "Startup"}},
        "Bad": {"Trigger": {"Type": "AspNetRequestCount", "Settings": {}}}
    }));
    assert!(set.get("good").unwrap().rule.is_ok());
    let err = set.get("Bad").unwrap().rule.clone().unwrap_err();
    assert_eq!(
        err.path,
        "CollectionRules:Bad:Trigger:Settings:RequestCount"
    );
    assert!(RuleSet::load(&json!("not a section"), &LoadOptions::default()).is_err());
}

#[test]
fn cpu_usage_shortcut_expands_to_system_runtime_counter() {
    let rule = only(json!({"R": {"Trigger": {"Type": "CPUUsage"}}}));
    match rule.trigger.kind {
        TriggerKind::EventCounter(t) => {
            assert_eq!(
                (t.provider_name.as_str(), t.counter_name.as_str()),
                ("System.Runtime", "cpu-usage")
            );
            assert_eq!(
                t.threshold,
                Threshold {
                    greater_than: Some(50.0),
                    less_than: None
                }
            );
            assert_eq!(t.sliding_window, Duration::from_secs(60));
        }
        other => panic!("{:?}", other),
    }
    assert_eq!(rule.trigger.type_name, "CPUUsage");
    // A LessThan alone drops the default GreaterThan, as dotnet-monitor's expansion.
    let rule =
        only(json!({"R": {"Trigger": {"Type": "GCHeapSize", "Settings": {"LessThan": "20"}}}}));
    match rule.trigger.kind {
        TriggerKind::EventCounter(t) => {
            assert_eq!(t.counter_name, "gc-heap-size");
            assert_eq!(
                t.threshold,
                Threshold {
                    greater_than: None,
                    less_than: Some(20.0)
                }
            );
        }
        other => panic!("{:?}", other),
    }
    let rule = only(json!({"R": {"Trigger": {"Type": "ThreadpoolQueueLength"}}}));
    match rule.trigger.kind {
        TriggerKind::EventCounter(t) => {
            assert_eq!(t.counter_name, "threadpool-queue-length");
            assert_eq!(t.threshold.greater_than, Some(200.0));
        }
        other => panic!("{:?}", other),
    }
    let err =
        error(json!({"R": {"Trigger": {"Type": "CPUUsage", "Settings": {"GreaterThan": 150}}}}));
    assert_eq!(err.path, "CollectionRules:R:Trigger:Settings:GreaterThan");
}

#[test]
fn event_meter_histogram_percentile_parses_from_a_string() {
    let rule = only(json!({"HighHistogramValues": {
        "Trigger": {"Type": "EventMeter", "Settings": {"MeterName": "MyCustomMeter",
            "InstrumentName": "MyCustomHistogram", "HistogramPercentile": "95", "GreaterThan": 175}},
        "Actions": [{"Type": "CollectLogs", "Settings": {"Egress": "artifacts",
            "DefaultLevel": "Warning", "UseAppFilters": false, "Duration": "00:00:30"}}]}}));
    match rule.trigger.kind {
        TriggerKind::EventMeter(t) => assert_eq!(t.histogram_percentile, Some(95)),
        other => panic!("{:?}", other),
    }
    match &rule.actions[0].settings {
        ActionSettings::CollectLogs {
            use_app_filters,
            default_level,
            format,
            ..
        } => {
            assert!(!use_app_filters);
            assert_eq!((*default_level, *format), ("Warning", "PlainText"));
        }
        other => panic!("{:?}", other),
    }
    let err = error(
        json!({"R": {"Trigger": {"Type": "EventMeter", "Settings": {"MeterName": "m",
        "InstrumentName": "i", "HistogramPercentile": 101, "GreaterThan": 1}}}}),
    );
    assert_eq!(
        err.path,
        "CollectionRules:R:Trigger:Settings:HistogramPercentile"
    );
}

#[test]
fn aspnet_triggers_parse_status_ranges_paths_and_limits() {
    let rule = only(json!({"BadResponseStatus": {
        "Trigger": {"Type": "AspNetResponseStatus", "Settings": {"ResponseCount": 5, "StatusCodes": ["400-499"]}},
        "Actions": [{"Type": "CollectExceptions", "Settings": {"Egress": "artifacts", "Format": "NewlineDelimitedJson"}}],
        "Limits": {"ActionCount": 3, "ActionCountSlidingWindowDuration": "00:30:00"}}}));
    match &rule.trigger.kind {
        TriggerKind::AspNetResponseStatus(t) => {
            assert_eq!(t.status_codes, vec![(400, 499)]);
            assert_eq!(t.response_count, 5);
        }
        other => panic!("{:?}", other),
    }
    assert_eq!(rule.limits.action_count, 3);
    assert_eq!(
        rule.limits.action_count_sliding_window,
        Some(Duration::from_secs(1800))
    );
    let rule = only(json!({"LongRequestDuration": {
        "Trigger": {"Type": "AspNetRequestDuration", "Settings": {"RequestCount": 5,
            "RequestDuration": "00:00:08", "SlidingWindowDuration": "00:02:00", "IncludePaths": ["/api/**/*"]}},
        "Actions": [{"Type": "CollectTrace", "Settings": {"Profile": "Http", "Egress": "artifacts", "Duration": "00:01:00"}}]}}));
    match &rule.trigger.kind {
        TriggerKind::AspNetRequestDuration(t) => {
            assert_eq!(t.request_duration, Duration::from_secs(8));
            assert_eq!(t.paths.include, Some(vec!["/api/**/*".to_string()]));
        }
        other => panic!("{:?}", other),
    }
    let rule = only(json!({"HighRequestCount": {
        "Filters": [{"Key": "ProcessId", "Value": "12345", "MatchType": "Exact"}],
        "Trigger": {"Type": "AspNetRequestCount", "Settings": {"RequestCount": 10, "SlidingWindowDuration": "00:01:00"}},
        "Limits": {"RuleDuration": "01:00:00"}}}));
    assert_eq!(rule.filters[0].key, FilterKey::ProcessId);
    assert_eq!(rule.filters[0].match_type, MatchType::Exact);
    assert_eq!(rule.limits.rule_duration, Some(Duration::from_secs(3600)));
    for bad in ["600", "40x", "499-400"] {
        let err = error(json!({"R": {"Trigger": {"Type": "AspNetResponseStatus",
            "Settings": {"ResponseCount": 1, "StatusCodes": [bad]}}}}));
        assert_eq!(
            err.path, "CollectionRules:R:Trigger:Settings:StatusCodes:0",
            "{}",
            bad
        );
    }
}

#[test]
fn environment_shaped_configuration_parses_like_json() {
    // What DotnetMonitor_CollectionRules__R__... variables give: strings and indexed objects.
    let rule = only(json!({"r": {
        "trigger": {"type": "aspnetresponsestatus", "settings": {"responsecount": "3", "statuscodes": {"0": "400"}}},
        "actions": {"0": {"name": "MyDump", "type": "CollectDump",
                          "settings": {"egress": "artifacts", "type": "mini"}, "waitforcompletion": "true"},
                    "1": {"type": "Execute", "settings": {"path": "devenv.exe", "arguments": "\"$(Actions.MyDump.EgressPath)\""}}}}}));
    assert_eq!(rule.actions.len(), 2);
    assert!(rule.actions[0].wait_for_completion);
    assert_eq!(
        rule.actions[0].settings,
        ActionSettings::CollectDump {
            dump_type: "Mini",
            egress: super::action::Egressed {
                egress: "artifacts".into(),
                artifact_name: None
            }
        }
    );
}

#[test]
fn collect_trace_profile_and_stopping_event_rules() {
    let trace = |settings: Value| {
        error(json!({"R": {"Trigger": {"Type": "Startup"},
        "Actions": [{"Type": "CollectTrace", "Settings": settings}]}}))
    };
    let err = trace(json!({"Egress": "e"}));
    assert_eq!(
        err.kind,
        ErrorKind::Invalid("The Profile field or the Providers field is required.".into())
    );
    let err = trace(json!({"Egress": "e", "Profile": "Cpu", "Providers": [{"Name": "P"}]}));
    assert!(
        err.to_string()
            .contains("Both the Profile field and the Providers field"),
        "{}",
        err
    );
    let err = trace(json!({"Egress": "e", "Providers": [{"Name": "P"}],
        "StoppingEvent": {"ProviderName": "Q", "EventName": "E"}}));
    assert_eq!(
        err.path,
        "CollectionRules:R:Actions:0:Settings:StoppingEvent"
    );
    let err = trace(json!({"Profile": "Cpu"}));
    assert_eq!(err.path, "CollectionRules:R:Actions:0:Settings:Egress");
    let ok = only(
        json!({"R": {"Trigger": {"Type": "Startup"}, "Actions": [{"Type": "CollectTrace",
        "Settings": {"Egress": "e", "Profile": "Cpu,Http", "BufferSizeMegabytes": "64", "RequestRundown": "false",
        "Providers": []}}]}}),
    );
    match &ok.actions[0].settings {
        ActionSettings::CollectTrace(t) => {
            assert_eq!(t.profile, vec!["Cpu", "Http"]);
            assert_eq!((t.buffer_size_megabytes, t.request_rundown), (64, false));
        }
        other => panic!("{:?}", other),
    }
}

#[test]
fn every_action_type_parses_with_dotnet_monitor_defaults() {
    let rule = only(json!({"R": {"Trigger": {"Type": "Startup"}, "Actions": [
        {"Type": "CollectDump", "Settings": {"Egress": "e"}},
        {"Type": "CollectGCDump", "Settings": {"Egress": "e", "ArtifactName": "a"}},
        {"Type": "CollectStacks", "Settings": {"Egress": "e"}},
        {"Type": "CollectLiveMetrics", "Settings": {"Egress": "e", "Meters": [{"MeterName": "M"}]}},
        {"Type": "CollectExceptions", "Settings": {"Egress": "e", "Filters": {"Include": [{"ExceptionType": "X", "TypeName": "T"}]}}},
        {"Type": "Execute", "Settings": {"Path": "/bin/true"}},
        {"Type": "SetEnvironmentVariable", "Settings": {"Name": "A", "Value": "1"}},
        {"Type": "GetEnvironmentVariable", "Settings": {"Name": "A"}},
        {"Type": "LoadProfiler", "Settings": {"Path": "p.so", "Clsid": "6e7d5f3a-1f2b-4c3d-8e9f-0a1b2c3d4e5f"}}
    ]}}));
    let types: Vec<&str> = rule.actions.iter().map(|a| a.type_name).collect();
    assert_eq!(types.len(), 9);
    assert!(matches!(
        rule.actions[0].settings,
        ActionSettings::CollectDump {
            dump_type: "WithHeap",
            ..
        }
    ));
    assert!(matches!(
        rule.actions[2].settings,
        ActionSettings::CollectStacks { format: "Json", .. }
    ));
    match &rule.actions[3].settings {
        ActionSettings::CollectLiveMetrics {
            include_default_providers,
            duration,
            meters,
            ..
        } => {
            assert!(include_default_providers);
            assert_eq!(*duration, Duration::from_secs(30));
            assert_eq!(meters[0].meter_name, "M");
        }
        other => panic!("{:?}", other),
    }
    match &rule.actions[4].settings {
        ActionSettings::CollectExceptions {
            format: "PlainText",
            filters,
            ..
        } => {
            // One filter type for the rules and the /exceptions history: TypeName is the
            // throwing method's class.
            let want = dsipc_trace::exceptions::ExceptionFilter {
                exception_type: Some("X".into()),
                type_name: Some("T".into()),
                ..Default::default()
            };
            assert_eq!(filters.include, vec![want]);
            assert!(filters.exclude.is_empty());
        }
        other => panic!("{:?}", other),
    }
    assert!(matches!(
        rule.actions[5].settings,
        ActionSettings::Execute {
            ignore_exit_code: false,
            ..
        }
    ));
    assert_eq!(rule.actions[0].egress(), Some("e"));
    assert_eq!(output_names("GetEnvironmentVariable"), ["Value"]);
    let err = error(json!({"R": {"Trigger": {"Type": "Startup"}, "Actions": [
        {"Name": "a", "Type": "GetEnvironmentVariable", "Settings": {"Name": "A"}},
        {"Name": "a", "Type": "GetEnvironmentVariable", "Settings": {"Name": "B"}}]}}));
    assert_eq!(err.path, "CollectionRules:R:Actions:1:Name");
    let err = RuleSet::load(
        &json!({"R": {"Trigger": {"Type": "Startup"},
        "Actions": [{"Type": "CollectDump", "Settings": {"Egress": "nowhere"}}]}}),
        &LoadOptions {
            egress_providers: Some(&["artifacts".to_string()]),
            ..LoadOptions::default()
        },
    )
    .unwrap()
    .entries[0]
        .rule
        .clone()
        .unwrap_err();
    assert!(
        err.to_string()
            .contains("Egress provider 'nowhere' does not exist."),
        "{}",
        err
    );
}

#[test]
fn templates_resolve_by_name_at_load() {
    let templates = json!({
        "CollectionRuleActions": {"CPUTrace": {"Type": "CollectTrace",
            "Settings": {"Egress": "artifacts", "SlidingWindowDuration": "00:00:15", "Profile": "Cpu"}}},
        "CollectionRuleTriggers": {"HighRequestCount": {"Type": "AspNetRequestCount",
            "Settings": {"RequestCount": 10, "SlidingWindowDuration": "00:01:00"}}},
        "CollectionRuleFilters": {"AppName": {"Key": "ProcessName", "Value": "MyProcessName", "MatchType": "Exact"}},
        "CollectionRuleLimits": {"ShortDuration": {"RuleDuration": "00:05:00"}}
    });
    let rules = json!({"R": {"Filters": ["AppName"], "Trigger": "HighRequestCount",
        "Actions": ["CPUTrace", {"Type": "CollectGCDump", "Settings": {"Egress": "artifacts"}}],
        "Limits": "ShortDuration"}});
    let set = RuleSet::load(&rules, &with_templates(&templates)).unwrap();
    let rule = set.entries[0].rule.clone().unwrap();
    assert_eq!(rule.filters[0].value, "MyProcessName");
    assert!(matches!(
        rule.trigger.kind,
        TriggerKind::AspNetRequestCount(_)
    ));
    assert_eq!(rule.actions[0].type_name, "CollectTrace");
    assert_eq!(rule.actions[1].type_name, "CollectGCDump");
    assert_eq!(rule.limits.rule_duration, Some(Duration::from_secs(300)));
    let missing = RuleSet::load(
        &json!({"R": {"Trigger": "Nope"}}),
        &with_templates(&templates),
    )
    .unwrap();
    let err = missing.entries[0].rule.clone().unwrap_err();
    assert_eq!(err.path, "CollectionRules:R:Trigger");
    assert_eq!(err.kind, ErrorKind::TemplateNotFound("Nope".into()));
    // An error inside a template names the template's key.
    let bad = json!({"CollectionRuleTriggers": {"T": {"Type": "EventCounter", "Settings": {}}}});
    let set = RuleSet::load(&json!({"R": {"Trigger": "T"}}), &with_templates(&bad)).unwrap();
    let err = set.entries[0].rule.clone().unwrap_err();
    assert_eq!(
        err.path,
        "Templates:CollectionRuleTriggers:T:Settings:ProviderName"
    );
}

fn action_results(pairs: &[(&str, &str, &str)]) -> ActionResults {
    let mut results: ActionResults = BTreeMap::new();
    for (action, output, value) in pairs {
        results
            .entry(action.to_string())
            .or_default()
            .insert(output.to_string(), value.to_string());
    }
    results
}

#[test]
fn action_output_references_substitute_earlier_actions_results() {
    let rule = only(json!({"R": {"Trigger": {"Type": "Startup"}, "Actions": [
        {"Name": "A", "Type": "CollectTrace", "Settings": {"Profile": "Cpu", "Egress": "AzureBlob"}},
        {"Name": "GetEnvAction", "Type": "GetEnvironmentVariable", "Settings": {"Name": "Azure_SASToken"}},
        {"Name": "B", "Type": "Execute", "Settings": {"Path": "azcopy",
            "Arguments": "$(Actions.A.EgressPath) https://c.blob.core.windows.net/t.nettrace?$(Actions.GetEnvAction.Value) $(actions.B.ExitCode) $(Actions.A.Nope) $(Actions.A"}}]}}));
    let results = action_results(&[
        ("A", "EgressPath", "/out/t.nettrace"),
        ("GetEnvAction", "Value", "sig=x"),
    ]);
    let ctx = TokenContext::default();
    match prepare_settings(&rule.actions, 2, &results, &ctx).unwrap() {
        ActionSettings::Execute { arguments, .. } => assert_eq!(
            arguments.unwrap(),
            "/out/t.nettrace https://c.blob.core.windows.net/t.nettrace?sig=x $(actions.B.ExitCode) $(Actions.A.Nope) $(Actions.A"
        ),
        other => panic!("{:?}", other),
    }
    // Only earlier actions are referenced; the prefix's case does not matter.
    assert_eq!(
        substitute_action_references("$(ACTIONS.A.EgressPath)", &rule.actions, 1, &results),
        "/out/t.nettrace"
    );
    assert_eq!(
        substitute_action_references("$(Actions.A.EgressPath)", &rule.actions, 0, &results),
        "$(Actions.A.EgressPath)"
    );
    assert!(prepare_settings(&rule.actions, 3, &results, &ctx).is_none());
    // B waits for A and GetEnvAction (referenced), whatever their WaitForCompletion.
    assert_eq!(action_dependencies(&rule.actions, 2), vec![0, 1]);
    assert!(action_dependencies(&rule.actions, 1).is_empty());
}

#[test]
fn process_tokens_substitute_in_string_settings() {
    let rule = only(json!({"R": {"Trigger": {"Type": "Startup"}, "Actions": [
        {"Type": "CollectDump", "Settings": {"Egress": "e", "ArtifactName": "$(Process.Name)-$(Process.ProcessId)-$(Monitor.UnixTime)"}},
        {"Type": "Execute", "Settings": {"Path": "run", "Arguments": "$(Process.RuntimeId) $(Monitor.HostName) $(Process.CommandLine)"}}]}}));
    let ctx = TokenContext {
        process: ProcessInfo {
            pid: 42,
            runtime_id: "rid".into(),
            name: "app".into(),
            command_line: "app --x".into(),
            entry_point_assembly: None,
        },
        host_name: "host".into(),
        unix_time: 1_700_000_000,
    };
    match prepare_settings(&rule.actions, 0, &ActionResults::new(), &ctx).unwrap() {
        ActionSettings::CollectDump { egress, .. } => {
            assert_eq!(egress.artifact_name.unwrap(), "app-42-1700000000")
        }
        other => panic!("{:?}", other),
    }
    match prepare_settings(&rule.actions, 1, &ActionResults::new(), &ctx).unwrap() {
        ActionSettings::Execute { arguments, .. } => {
            assert_eq!(arguments.unwrap(), "rid host app --x")
        }
        other => panic!("{:?}", other),
    }
}

#[test]
fn collection_rule_defaults_fill_what_rules_leave_out() {
    let defaults = RuleDefaults::parse(&json!({
        "Actions": {"Egress": "artifacts"},
        "Triggers": {"RequestCount": "7", "ResponseCount": 4, "SlidingWindowDuration": "00:00:20"},
        "Limits": {"ActionCount": 2, "RuleDuration": "00:10:00"}
    }))
    .unwrap();
    let options = LoadOptions {
        defaults,
        ..LoadOptions::default()
    };
    let rules = json!({
        "HighRequestCount": {"Trigger": {"Type": "AspNetRequestCount", "Settings": {"RequestCount": 10}},
            "Actions": [{"Type": "CollectDump"}, {"Type": "CollectGCDump", "Settings": {"Egress": "monitorBlob"}}],
            "Limits": {"ActionCount": 3}},
        "Status": {"Trigger": {"Type": "AspNetResponseStatus", "Settings": {"StatusCodes": ["500"]}}},
        "Count": {"Trigger": {"Type": "AspNetRequestCount"}}
    });
    let set = RuleSet::load(&rules, &options).unwrap();
    let high = set.get("HighRequestCount").unwrap().rule.clone().unwrap();
    assert_eq!(high.actions[0].egress(), Some("artifacts"));
    assert_eq!(high.actions[1].egress(), Some("monitorBlob"));
    assert_eq!(high.limits.action_count, 3);
    assert_eq!(high.limits.rule_duration, Some(Duration::from_secs(600)));
    match high.trigger.kind {
        TriggerKind::AspNetRequestCount(t) => {
            assert_eq!(t.request_count, 10);
            assert_eq!(t.sliding_window, Duration::from_secs(20));
        }
        other => panic!("{:?}", other),
    }
    let status = set.get("Status").unwrap().rule.clone().unwrap();
    assert_eq!(status.limits.action_count, 2);
    match status.trigger.kind {
        TriggerKind::AspNetResponseStatus(t) => assert_eq!(t.response_count, 4),
        other => panic!("{:?}", other),
    }
    match set.get("Count").unwrap().rule.clone().unwrap().trigger.kind {
        TriggerKind::AspNetRequestCount(t) => assert_eq!(t.request_count, 7),
        other => panic!("{:?}", other),
    }
    let err = RuleDefaults::parse(&json!({"Limits": {"ActionCount": 0}})).unwrap_err();
    assert_eq!(err.path, "CollectionRuleDefaults:Limits:ActionCount");
}

#[test]
fn unknown_keys_of_a_rule_and_its_templates_are_reported() {
    let templates = json!({"CollectionRuleActions": {"CPUTrace": {"Type": "CollectTrace",
        "Settings": {"Egress": "artifacts", "SlidingWindowDuration": "00:00:15", "Profile": "Cpu"}}}});
    let rules = json!({"R": {
        "Filters": [{"Key": "ProcessName", "Value": "x", "MatchTyp": "Exact"}],
        "Trigger": {"Type": "EventCounter", "Settings": {"ProviderName": "System.Runtime",
            "CounterName": "cpu-usage", "GreaterThan": 1, "SlidingWindow": "00:00:10"}},
        "Actions": ["CPUTrace", {"Type": "Execute", "Settings": {"Path": "p"}, "Wait": true}],
        "Limit": {"ActionCount": 1},
        "Limits": {"ActionCount": 2}
    }});
    let set = RuleSet::load(&rules, &with_templates(&templates)).unwrap();
    let entry = &set.entries[0];
    assert!(entry.rule.is_ok());
    assert_eq!(
        entry.unknown_keys,
        vec![
            "CollectionRules:R:Actions:1:Wait",
            "CollectionRules:R:Filters:0:MatchTyp",
            "CollectionRules:R:Limit",
            "CollectionRules:R:Trigger:Settings:SlidingWindow",
            "Templates:CollectionRuleActions:CPUTrace:Settings:SlidingWindowDuration",
        ]
    );
    // Maps of free keys (Arguments, FilterSpecs, PayloadFilter) are not unknown keys.
    let set = load(
        json!({"R": {"Trigger": {"Type": "Startup"}, "Actions": [{"Type": "CollectTrace",
        "Settings": {"Egress": "e", "Providers": [{"Name": "P", "Arguments": {"Any": "1"}}]}}]}}),
    );
    assert!(
        set.entries[0].unknown_keys.is_empty(),
        "{:?}",
        set.entries[0].unknown_keys
    );
}
