//! The trigger engine, driven by samples and instants only (no clock, no socket): sliding
//! windows that fire and that do not, shortcuts, histogram percentiles, the ASP.NET
//! triggers, limits (throttling, ActionCount, RuleDuration), Startup, the
//! `/collectionrules` shapes and the one-session plan.

use std::time::Duration;

use serde_json::{json, Value};

use super::defaults::LoadOptions;
use super::engine::{
    AspNetEvent, CounterSample, Engine, EngineOptions, Event, MeterSample, MeterValue,
};
use super::filter::ProcessInfo;
use super::rule::RuleSet;
use super::state::{reasons, CollectionRuleState};

const PID: u32 = 4242;

fn s(secs: u64) -> Duration {
    Duration::from_secs(secs)
}

fn process() -> ProcessInfo {
    ProcessInfo {
        pid: PID,
        runtime_id: "00000000-0000-0000-0000-000000000001".into(),
        name: "MyApp".into(),
        command_line: "dotnet MyApp.dll".into(),
        entry_point_assembly: Some("MyApp".into()),
    }
}

fn engine(rules: Value) -> Engine {
    let set = RuleSet::load(&rules, &LoadOptions::default()).unwrap();
    let mut engine = Engine::new(set, EngineOptions::default());
    engine.add_process(&process(), s(0));
    engine
}

fn cpu(engine: &mut Engine, value: f64, at: u64) -> Vec<Event> {
    engine.counter_sample(
        PID,
        &CounterSample {
            provider: "System.Runtime",
            counter: "cpu-usage",
            value,
            interval: s(5),
            at: s(at),
        },
    )
}

fn fired(events: &[Event]) -> bool {
    events.iter().any(|e| matches!(e, Event::Fire { .. }))
}

fn state(engine: &Engine, rule: &str, now: u64) -> CollectionRuleState {
    engine.descriptions(PID, s(now)).unwrap()[rule].state
}

fn high_cpu(limits: Value) -> Value {
    json!({"HighCpu": {"Trigger": {"Type": "EventCounter", "Settings": {
        "ProviderName": "System.Runtime", "CounterName": "cpu-usage", "GreaterThan": 60,
        "SlidingWindowDuration": "00:00:10"}},
        "Actions": [{"Type": "CollectTrace", "Settings": {"Profile": "Cpu", "Egress": "artifacts"}}],
        "Limits": limits}})
}

#[test]
fn event_counter_fires_when_the_threshold_holds_for_the_sliding_window() {
    let mut e = engine(high_cpu(json!({})));
    assert!(!fired(&cpu(&mut e, 70.0, 5)));
    let events = cpu(&mut e, 75.0, 10);
    assert_eq!(
        events,
        vec![
            Event::StateChanged {
                pid: PID,
                rule: "HighCpu".into(),
                state: CollectionRuleState::ActionExecuting,
                reason: reasons::EXECUTING_ACTIONS.into()
            },
            Event::Fire {
                pid: PID,
                rule: "HighCpu".into(),
                at: s(10)
            }
        ]
    );
    // While the actions run the trigger does not listen.
    assert!(!fired(&cpu(&mut e, 80.0, 15)));
    assert_eq!(
        state(&e, "HighCpu", 15),
        CollectionRuleState::ActionExecuting
    );
}

#[test]
fn event_counter_does_not_fire_when_a_sample_in_the_window_fails() {
    let mut e = engine(high_cpu(json!({})));
    assert!(!fired(&cpu(&mut e, 70.0, 5)));
    assert!(!fired(&cpu(&mut e, 50.0, 10)));
    assert!(!fired(&cpu(&mut e, 70.0, 15)));
    assert!(fired(&cpu(&mut e, 70.0, 20)));
    // A sample of another counter or provider is not this trigger's.
    let mut e = engine(high_cpu(json!({})));
    for at in [5, 10, 15] {
        let events = e.counter_sample(
            PID,
            &CounterSample {
                provider: "Other",
                counter: "cpu-usage",
                value: 99.0,
                interval: s(5),
                at: s(at),
            },
        );
        assert!(!fired(&events));
    }
}

#[test]
fn shortcut_triggers_fire_from_system_runtime_counters() {
    let mut e = engine(json!({"Heap": {"Trigger": {"Type": "GCHeapSize",
        "Settings": {"SlidingWindowDuration": "00:00:05"}}}}));
    let heap = |e: &mut Engine, v: f64, at: u64| {
        e.counter_sample(
            PID,
            &CounterSample {
                provider: "System.Runtime",
                counter: "gc-heap-size",
                value: v,
                interval: s(5),
                at: s(at),
            },
        )
    };
    assert!(!fired(&heap(&mut e, 9.0, 5)));
    assert!(fired(&heap(&mut e, 11.0, 10)));
}

#[test]
fn event_meter_histogram_percentile_is_compared() {
    let mut e = engine(
        json!({"Hist": {"Trigger": {"Type": "EventMeter", "Settings": {
        "MeterName": "MyMeter", "InstrumentName": "MyHistogram", "HistogramPercentile": 95,
        "GreaterThan": 175, "SlidingWindowDuration": "00:00:10"}}}}),
    );
    let hist = |e: &mut Engine, p95: f64, at: u64| {
        let q = [(0.5, 10.0), (0.95, p95), (0.99, 500.0)];
        e.meter_sample(
            PID,
            &MeterSample {
                meter: "MyMeter",
                instrument: "MyHistogram",
                value: MeterValue::Quantiles(&q),
                interval: s(5),
                at: s(at),
            },
        )
    };
    // p50 and p99 alone would not decide: only p95 is compared.
    assert!(!fired(&hist(&mut e, 100.0, 5)));
    assert!(!fired(&hist(&mut e, 200.0, 10)));
    assert!(fired(&hist(&mut e, 200.0, 15)));
    // A plain value does not satisfy a histogram trigger.
    let mut e2 = engine(
        json!({"Hist": {"Trigger": {"Type": "EventMeter", "Settings": {
        "MeterName": "MyMeter", "InstrumentName": "MyHistogram", "HistogramPercentile": 95,
        "GreaterThan": 175, "SlidingWindowDuration": "00:00:10"}}}}),
    );
    for at in [5, 10, 15] {
        let events = e2.meter_sample(
            PID,
            &MeterSample {
                meter: "MyMeter",
                instrument: "MyHistogram",
                value: MeterValue::Value(1000.0),
                interval: s(5),
                at: s(at),
            },
        );
        assert!(!fired(&events));
    }
}

#[test]
fn aspnet_request_count_fires_at_the_count_within_the_window() {
    let mut e = engine(
        json!({"Req": {"Trigger": {"Type": "AspNetRequestCount", "Settings": {
        "RequestCount": 3, "SlidingWindowDuration": "00:00:10", "ExcludePaths": ["/health"]}}}}),
    );
    let start = |e: &mut Engine, path: &str, at: u64| {
        e.aspnet_event(
            PID,
            &AspNetEvent::RequestStart {
                activity_id: "x",
                path,
                at: s(at),
            },
        )
    };
    assert!(!fired(&start(&mut e, "/a", 0)));
    assert!(!fired(&start(&mut e, "/health", 2)));
    assert!(!fired(&start(&mut e, "/b", 4)));
    // The first request left the window: still two.
    assert!(!fired(&start(&mut e, "/c", 12)));
    assert!(fired(&start(&mut e, "/d", 13)));
}

#[test]
fn aspnet_request_duration_counts_slow_and_still_running_requests() {
    let mut e = engine(
        json!({"Slow": {"Trigger": {"Type": "AspNetRequestDuration", "Settings": {
        "RequestCount": 2, "RequestDuration": "00:00:08", "IncludePaths": ["/api/**/*"]}}}}),
    );
    let start = |e: &mut Engine, id: &str, path: &str, at: u64| {
        e.aspnet_event(
            PID,
            &AspNetEvent::RequestStart {
                activity_id: id,
                path,
                at: s(at),
            },
        )
    };
    let stop = |e: &mut Engine, id: &str, path: &str, took: u64, at: u64| {
        e.aspnet_event(
            PID,
            &AspNetEvent::RequestStop {
                activity_id: id,
                path,
                duration: s(took),
                status_code: 200,
                at: s(at),
            },
        )
    };
    start(&mut e, "1", "/api/v/1", 0);
    start(&mut e, "2", "/api/v/2", 1);
    start(&mut e, "3", "/other", 1);
    assert!(!fired(&stop(&mut e, "1", "/api/v/1", 2, 2)));
    assert!(!fired(&stop(&mut e, "3", "/other", 30, 31)));
    // Request 2 is still running 9 s later: the heartbeat counts it once.
    assert!(!fired(&e.tick(s(10))));
    // Heartbeats are at least 9 s apart: request 5, slow by 18 s, is not counted yet.
    start(&mut e, "5", "/api/v/5", 10);
    assert!(!fired(&e.tick(s(18))));
    start(&mut e, "4", "/api/v/4", 11);
    assert!(fired(&stop(&mut e, "4", "/api/v/4", 9, 20)));
}

#[test]
fn aspnet_response_status_counts_matching_status_codes() {
    let mut e = engine(
        json!({"Bad": {"Trigger": {"Type": "AspNetResponseStatus", "Settings": {
        "ResponseCount": 2, "StatusCodes": ["400-499", "503"]}}}}),
    );
    let stop = |e: &mut Engine, code: u16, at: u64| {
        e.aspnet_event(
            PID,
            &AspNetEvent::RequestStop {
                activity_id: "a",
                path: "/",
                duration: s(0),
                status_code: code,
                at: s(at),
            },
        )
    };
    assert!(!fired(&stop(&mut e, 200, 1)));
    assert!(!fired(&stop(&mut e, 404, 2)));
    assert!(!fired(&stop(&mut e, 500, 3)));
    assert!(fired(&stop(&mut e, 503, 4)));
}

#[test]
fn startup_fires_once_then_finishes() {
    let set = RuleSet::load(
        &json!({"Start": {"Trigger": {"Type": "Startup"},
        "Actions": [{"Type": "CollectDump", "Settings": {"Egress": "e"}}]},
        "Other": {"Filters": [{"Key": "ProcessName", "Value": "someone-else"}],
        "Trigger": {"Type": "Startup"}}}),
        &LoadOptions::default(),
    )
    .unwrap();
    let mut e = Engine::new(set, EngineOptions::default());
    let events = e.add_process(&process(), s(0));
    let fires: Vec<&Event> = events
        .iter()
        .filter(|e| matches!(e, Event::Fire { .. }))
        .collect();
    assert_eq!(
        fires,
        vec![&Event::Fire {
            pid: PID,
            rule: "Start".into(),
            at: s(0)
        }]
    );
    let events = e.actions_completed(PID, "Start", s(3));
    assert_eq!(
        events,
        vec![Event::StateChanged {
            pid: PID,
            rule: "Start".into(),
            state: CollectionRuleState::Finished,
            reason: reasons::FINISHED_STARTUP.into()
        }]
    );
    let d = e.detailed_description(PID, "Start", s(4)).unwrap();
    assert_eq!((d.lifetime_occurrences, d.action_count_limit), (1, 5));
    assert!(!e.descriptions(PID, s(4)).unwrap().contains_key("Other"));
    // The same runtime seen again keeps its state; a new runtime on the pid starts afresh.
    assert!(e.add_process(&process(), s(5)).is_empty());
    assert_eq!(state(&e, "Start", 6), CollectionRuleState::Finished);
    let mut reused = process();
    reused.runtime_id = "00000000-0000-0000-0000-000000000002".into();
    assert!(fired(&e.add_process(&reused, s(7))));
}

#[test]
fn action_count_without_a_window_finishes_the_rule() {
    let mut e = engine(high_cpu(json!({"ActionCount": 2})));
    let mut t = 0;
    for round in 0..2 {
        t += 5;
        cpu(&mut e, 70.0, t);
        t += 5;
        assert!(fired(&cpu(&mut e, 70.0, t)), "round {}", round);
        e.actions_completed(PID, "HighCpu", s(t + 1));
    }
    let d = e.detailed_description(PID, "HighCpu", s(t + 2)).unwrap();
    assert_eq!(d.state, CollectionRuleState::Finished);
    assert_eq!(
        d.state_reason.as_deref(),
        Some(reasons::FINISHED_ACTION_COUNT)
    );
    assert_eq!(d.lifetime_occurrences, 2);
    assert!(!fired(&cpu(&mut e, 70.0, t + 5)));
    assert!(!fired(&cpu(&mut e, 70.0, t + 10)));
    assert!(e.session_plan(PID).is_empty());
}

#[test]
fn action_count_within_a_window_throttles_then_runs_again() {
    let mut e = engine(high_cpu(
        json!({"ActionCount": 1, "ActionCountSlidingWindowDuration": "00:01:00"}),
    ));
    cpu(&mut e, 70.0, 5);
    assert!(fired(&cpu(&mut e, 70.0, 10)));
    e.actions_completed(PID, "HighCpu", s(12));
    cpu(&mut e, 70.0, 15);
    let events = cpu(&mut e, 70.0, 20);
    assert!(!fired(&events));
    assert!(events.contains(&Event::Throttled {
        pid: PID,
        rule: "HighCpu".into()
    }));
    let d = e.detailed_description(PID, "HighCpu", s(30)).unwrap();
    assert_eq!(d.state, CollectionRuleState::Throttled);
    assert_eq!(
        (d.sliding_window_occurrences, d.lifetime_occurrences),
        (1, 1)
    );
    // The run at 10 s leaves the window at 70 s: 40 s to go at 30 s.
    assert_eq!(d.sliding_window_duration_countdown, Some(s(40)));
    // Reported at 71 s, the window has room again, before any tick says so.
    let d = e.detailed_description(PID, "HighCpu", s(71)).unwrap();
    assert_eq!(d.state, CollectionRuleState::Running);
    assert_eq!(
        (d.sliding_window_occurrences, d.lifetime_occurrences),
        (0, 1)
    );
    assert_eq!(state(&e, "HighCpu", 71), CollectionRuleState::Running);
    let events = e.tick(s(71));
    assert!(events.iter().any(|ev| matches!(
        ev,
        Event::StateChanged {
            state: CollectionRuleState::Running,
            ..
        }
    )));
    cpu(&mut e, 70.0, 75);
    assert!(fired(&cpu(&mut e, 70.0, 80)));
}

#[test]
fn rule_duration_finishes_the_rule() {
    let mut e = engine(high_cpu(json!({"RuleDuration": "00:00:30"})));
    let d = e.detailed_description(PID, "HighCpu", s(10)).unwrap();
    assert_eq!(d.rule_finished_countdown, Some(s(20)));
    // Countdowns are whole seconds, truncated.
    let d = e
        .detailed_description(PID, "HighCpu", Duration::from_millis(10_500))
        .unwrap();
    assert_eq!(d.rule_finished_countdown, Some(s(19)));
    let events = e.tick(s(30));
    assert_eq!(
        events,
        vec![Event::StateChanged {
            pid: PID,
            rule: "HighCpu".into(),
            state: CollectionRuleState::Finished,
            reason: reasons::FINISHED_RULE_DURATION.into()
        }]
    );
    assert!(!fired(&cpu(&mut e, 70.0, 35)));
    assert!(!fired(&cpu(&mut e, 70.0, 40)));
    let d = e.detailed_description(PID, "HighCpu", s(41)).unwrap();
    assert_eq!(d.rule_finished_countdown, None);
}

#[test]
fn collection_rule_shapes_serialize_with_dotnet_monitor_names() {
    let mut e = engine(high_cpu(
        json!({"ActionCount": 3, "ActionCountSlidingWindowDuration": "01:00:00",
        "RuleDuration": "1.00:00:00"}),
    ));
    let all = serde_json::to_value(e.descriptions(PID, s(1)).unwrap()).unwrap();
    assert_eq!(
        all,
        json!({"HighCpu": {"state": "Running", "stateReason": reasons::RUNNING}})
    );
    cpu(&mut e, 70.0, 5);
    cpu(&mut e, 70.0, 10);
    let one = serde_json::to_value(e.detailed_description(PID, "HighCpu", s(11)).unwrap()).unwrap();
    assert_eq!(
        one,
        json!({
            "state": "ActionExecuting",
            "stateReason": reasons::EXECUTING_ACTIONS,
            "lifetimeOccurrences": 1,
            "slidingWindowOccurrences": 1,
            "actionCountLimit": 3,
            "actionCountSlidingWindowDurationLimit": "01:00:00",
            "slidingWindowDurationCountdown": null,
            "ruleFinishedCountdown": "23:59:49"
        })
    );
}

#[test]
fn a_rule_that_cannot_run_is_reported_finished_with_its_error() {
    let mut e = engine(
        json!({"Broken": {"Trigger": {"Type": "EventCounter", "Settings": {
        "ProviderName": "System.Runtime", "CounterName": "cpu-usage"}}}}),
    );
    let d = e.descriptions(PID, s(1)).unwrap();
    assert_eq!(d["Broken"].state, CollectionRuleState::Finished);
    let reason = d["Broken"].state_reason.clone().unwrap();
    assert!(reason.starts_with("The collection rule will no longer trigger because a failure occurred with message: CollectionRules:Broken:Trigger:Settings: "), "{}", reason);
    assert!(!fired(&cpu(&mut e, 99.0, 5)));
}

#[test]
fn one_session_plan_covers_every_counter_rule_of_a_process() {
    let rules = json!({
        "Cpu": {"Trigger": {"Type": "CPUUsage"}},
        "Heap": {"Trigger": {"Type": "GCHeapSize"}},
        "Cpu2": {"Trigger": {"Type": "EventCounter", "Settings": {"ProviderName": "system.runtime",
            "CounterName": "cpu-usage", "LessThan": 1}}},
        "Custom": {"Trigger": {"Type": "EventCounter", "Settings": {"ProviderName": "MyEventSource",
            "CounterName": "my-counter", "GreaterThan": 1}}},
        "Meter": {"Trigger": {"Type": "EventMeter", "Settings": {"MeterName": "M", "InstrumentName": "I", "GreaterThan": 1}}},
        "Req": {"Trigger": {"Type": "AspNetRequestCount", "Settings": {"RequestCount": 1}}}
    });
    let set = RuleSet::load(&rules, &LoadOptions::default()).unwrap();
    let options = EngineOptions {
        counter_interval: s(2),
        provider_intervals: vec![("MyEventSource".into(), s(10))],
    };
    let mut e = Engine::new(set, options);
    e.add_process(&process(), s(0));
    let plan = e.session_plan(PID);
    assert_eq!(plan.counters.len(), 2);
    assert_eq!(plan.counters[0].provider, "System.Runtime");
    assert_eq!(plan.counters[0].counters, vec!["cpu-usage", "gc-heap-size"]);
    assert_eq!(plan.counters[0].interval, s(2));
    assert_eq!(
        (
            plan.counters[1].provider.as_str(),
            plan.counters[1].interval
        ),
        ("MyEventSource", s(10))
    );
    assert_eq!(plan.meters[0].instruments, vec!["I"]);
    assert_eq!(plan.meter_interval, s(2));
    assert!(plan.aspnet_requests);
    e.remove_process(PID);
    assert!(e.session_plan(PID).is_empty());
    assert!(e.descriptions(PID, s(1)).is_none());
}
