//! The trigger engine, sans-IO: it is told about processes, counter and meter samples,
//! ASP.NET request events and the passing of time (instants on the caller's clock, as a
//! `Duration` since an origin the caller chooses), and says which rule fires for which
//! process and how each rule's state changes. It opens no session and reads no clock: the
//! caller runs the actions and reports their completion.

use std::collections::BTreeMap;
use std::time::Duration;

use super::filter::{matches_all, ProcessInfo};
use super::pipeline::{Limiter, Outcome, Pipeline, TriggerState};
use super::rule::{Limits, RuleSet};
use super::state::{
    CollectionRuleDescription, CollectionRuleDetailedDescription, CollectionRuleState, FinishReason,
};
use super::trigger::TriggerKind;

/// dotnet-monitor's default counter interval (`GlobalCounter:IntervalSeconds`): 5 s.
pub const DEFAULT_COUNTER_INTERVAL: Duration = Duration::from_secs(5);

/// The engine's settings (dotnet-monitor's `GlobalCounter` options).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EngineOptions {
    /// The interval counters and meters are requested at.
    pub counter_interval: Duration,
    /// Per-provider intervals (`GlobalCounter:Providers:NAME:IntervalSeconds`), by provider
    /// name (compared without case).
    pub provider_intervals: Vec<(String, Duration)>,
}

impl Default for EngineOptions {
    fn default() -> EngineOptions {
        EngineOptions {
            counter_interval: DEFAULT_COUNTER_INTERVAL,
            provider_intervals: Vec::new(),
        }
    }
}

impl EngineOptions {
    /// The interval of `provider`'s counters.
    pub fn interval_for(&self, provider: &str) -> Duration {
        self.provider_intervals
            .iter()
            .find(|(p, _)| p.eq_ignore_ascii_case(provider))
            .map_or(self.counter_interval, |(_, i)| *i)
    }
}

/// An EventCounter sample.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CounterSample<'a> {
    /// The EventSource.
    pub provider: &'a str,
    /// The counter.
    pub counter: &'a str,
    /// Its value (mean or increment, as the counter publishes it).
    pub value: f64,
    /// The interval the sample covers (its `IntervalSec`).
    pub interval: Duration,
    /// When it was taken.
    pub at: Duration,
}

/// The value of a meter sample.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum MeterValue<'a> {
    /// A gauge's value, a counter's rate or an up-down counter's value.
    Value(f64),
    /// A histogram's published quantiles, as (quantile in 0..=1, value).
    Quantiles(&'a [(f64, f64)]),
}

/// A System.Diagnostics.Metrics sample.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct MeterSample<'a> {
    /// The meter.
    pub meter: &'a str,
    /// The instrument.
    pub instrument: &'a str,
    /// Its value.
    pub value: MeterValue<'a>,
    /// The interval the sample covers.
    pub interval: Duration,
    /// When it was taken.
    pub at: Duration,
}

/// A Microsoft.AspNetCore.Hosting request event: the `Activity1/Start` and `Activity1/Stop`
/// events of Microsoft-Diagnostics-DiagnosticSource (its `HttpRequestIn` filter, as
/// dotnet/diagnostics' HttpRequestSourceConfiguration), whose arguments carry `ActivityId`,
/// `Path`, and on the stop `StatusCode` and `ActivityDuration` (in 100 ns ticks).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AspNetEvent<'a> {
    /// A request started.
    RequestStart {
        /// The activity's id.
        activity_id: &'a str,
        /// The request's path.
        path: &'a str,
        /// When.
        at: Duration,
    },
    /// A request stopped.
    RequestStop {
        /// The activity's id.
        activity_id: &'a str,
        /// The request's path.
        path: &'a str,
        /// How long it took.
        duration: Duration,
        /// The response's status code.
        status_code: u16,
        /// When.
        at: Duration,
    },
}

/// What the engine tells its caller.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    /// Run the rule's actions on the process, then call [`Engine::actions_completed`].
    Fire {
        /// The process.
        pid: u32,
        /// The rule.
        rule: String,
        /// When its trigger was satisfied.
        at: Duration,
    },
    /// The trigger was satisfied but the rule's limits held the actions back.
    Throttled {
        /// The process.
        pid: u32,
        /// The rule.
        rule: String,
    },
    /// The rule's state on the process changed.
    StateChanged {
        /// The process.
        pid: u32,
        /// The rule.
        rule: String,
        /// The new state.
        state: CollectionRuleState,
        /// dotnet-monitor's reason text.
        reason: String,
    },
}

/// An EventCounter provider a process's rules need, and which of its counters.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CounterRequest {
    /// The EventSource.
    pub provider: String,
    /// Its counters the triggers read.
    pub counters: Vec<String>,
    /// The interval to request.
    pub interval: Duration,
}

/// A meter a process's rules need, and which of its instruments.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MeterRequest {
    /// The meter.
    pub meter: String,
    /// Its instruments the triggers read.
    pub instruments: Vec<String>,
}

/// What one counters session of a process must collect for all its rules together.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SessionPlan {
    /// EventCounter providers.
    pub counters: Vec<CounterRequest>,
    /// Meters (System.Diagnostics.Metrics), at `meter_interval`.
    pub meters: Vec<MeterRequest>,
    /// The interval of the meters.
    pub meter_interval: Duration,
    /// Whether request start/stop events are needed (see [`AspNetEvent`]); the engine's
    /// [`Engine::tick`] stands for the hosting counters dotnet-monitor adds as a heartbeat.
    pub aspnet_requests: bool,
}

impl SessionPlan {
    /// Whether the process needs no session at all.
    pub fn is_empty(&self) -> bool {
        self.counters.is_empty() && self.meters.is_empty() && !self.aspnet_requests
    }
}

/// The collection rules of every process.
#[derive(Debug, Clone)]
pub struct Engine {
    rules: RuleSet,
    options: EngineOptions,
    processes: BTreeMap<u32, Vec<Pipeline>>,
    /// The runtime instance cookie of each process, to tell a process seen again from a
    /// new one that reuses its pid.
    runtime_ids: BTreeMap<u32, String>,
}

fn push_unique(list: &mut Vec<String>, name: &str) {
    if !list.iter().any(|n| n.eq_ignore_ascii_case(name)) {
        list.push(name.to_string());
    }
}

impl Engine {
    /// An engine for these rules.
    pub fn new(rules: RuleSet, options: EngineOptions) -> Engine {
        Engine {
            rules,
            options,
            processes: BTreeMap::new(),
            runtime_ids: BTreeMap::new(),
        }
    }

    /// The rules.
    pub fn rules(&self) -> &RuleSet {
        &self.rules
    }

    /// A process appeared at `now`: the rules whose filters it passes apply to it (a rule
    /// that cannot run is reported on every process, Finished with its error); Startup
    /// triggers fire. The same runtime (pid and runtime instance cookie) seen again keeps
    /// its rules' state; a new runtime on a known pid replaces the old one.
    pub fn add_process(&mut self, process: &ProcessInfo, now: Duration) -> Vec<Event> {
        let mut events = Vec::new();
        if self.runtime_ids.get(&process.pid) == Some(&process.runtime_id) {
            return events;
        }
        self.runtime_ids
            .insert(process.pid, process.runtime_id.clone());
        let mut pipelines = Vec::new();
        for entry in &self.rules.entries {
            match &entry.rule {
                Ok(rule) => {
                    if !matches_all(&rule.filters, process) {
                        continue;
                    }
                    let interval = match &rule.trigger.kind {
                        TriggerKind::EventCounter(t) => self.options.interval_for(&t.provider_name),
                        _ => self.options.counter_interval,
                    };
                    let mut pipeline = Pipeline {
                        name: entry.name.clone(),
                        trigger: Some(TriggerState::new(&rule.trigger.kind, interval)),
                        rule: Some(rule.clone()),
                        limiter: Limiter::new(rule.limits, now),
                        counter_interval: interval,
                    };
                    if matches!(rule.trigger.kind, TriggerKind::Startup) {
                        let outcome = pipeline.satisfied(now);
                        report(
                            process.pid,
                            &pipeline,
                            CollectionRuleState::Running,
                            outcome,
                            now,
                            &mut events,
                        );
                    }
                    pipelines.push(pipeline);
                }
                Err(error) => {
                    let mut limiter = Limiter::new(Limits::default(), now);
                    limiter.finished(FinishReason::Failure(error.to_string()));
                    pipelines.push(Pipeline {
                        name: entry.name.clone(),
                        rule: None,
                        trigger: None,
                        limiter,
                        counter_interval: self.options.counter_interval,
                    });
                }
            }
        }
        self.processes.insert(process.pid, pipelines);
        events
    }

    /// A process exited: its rules are dropped with it.
    pub fn remove_process(&mut self, pid: u32) {
        self.processes.remove(&pid);
        self.runtime_ids.remove(&pid);
    }

    /// The processes the engine follows.
    pub fn processes(&self) -> impl Iterator<Item = u32> + '_ {
        self.processes.keys().copied()
    }

    /// Runs `f` on each listening pipeline of `pid` (after expiring its RuleDuration at
    /// `at`); `f` says whether the trigger is satisfied.
    fn feed<F>(&mut self, pid: u32, at: Duration, mut f: F) -> Vec<Event>
    where
        F: FnMut(&TriggerKind, &mut TriggerState, Duration) -> bool,
    {
        let mut events = Vec::new();
        let pipelines = match self.processes.get_mut(&pid) {
            Some(p) => p,
            None => return events,
        };
        for p in pipelines.iter_mut() {
            expire(pid, p, at, &mut events);
            if !p.listening() {
                continue;
            }
            let before = p.limiter.state;
            let satisfied = match (p.rule.as_ref(), p.trigger.as_mut()) {
                (Some(rule), Some(trigger)) => f(&rule.trigger.kind, trigger, p.counter_interval),
                _ => false,
            };
            if satisfied {
                let outcome = p.satisfied(at);
                report(pid, p, before, outcome, at, &mut events);
            }
        }
        events
    }

    /// An EventCounter sample of process `pid`.
    pub fn counter_sample(&mut self, pid: u32, sample: &CounterSample<'_>) -> Vec<Event> {
        self.feed(pid, sample.at, |kind, trigger, _| match kind {
            TriggerKind::EventCounter(t)
                if t.provider_name.eq_ignore_ascii_case(sample.provider)
                    && t.counter_name.eq_ignore_ascii_case(sample.counter) =>
            {
                trigger.held_sample(sample.at, sample.interval, &t.threshold, Some(sample.value))
            }
            _ => false,
        })
    }

    /// A meter sample of process `pid`. A histogram trigger compares its
    /// `HistogramPercentile` (a quantile q is percentile ⌊100·q⌋, as dotnet-monitor); a
    /// sample of the other kind, or without that percentile, fails the threshold.
    pub fn meter_sample(&mut self, pid: u32, sample: &MeterSample<'_>) -> Vec<Event> {
        self.feed(pid, sample.at, |kind, trigger, _| match kind {
            TriggerKind::EventMeter(t)
                if t.meter_name.eq_ignore_ascii_case(sample.meter)
                    && t.instrument_name.eq_ignore_ascii_case(sample.instrument) =>
            {
                let value = match (t.histogram_percentile, sample.value) {
                    (None, MeterValue::Value(v)) => Some(v),
                    (Some(p), MeterValue::Quantiles(q)) => q
                        .iter()
                        .find(|(quantile, _)| (100.0 * quantile) as i64 == i64::from(p))
                        .map(|(_, v)| *v),
                    _ => None,
                };
                trigger.held_sample(sample.at, sample.interval, &t.threshold, value)
            }
            _ => false,
        })
    }

    /// A request event of process `pid`.
    pub fn aspnet_event(&mut self, pid: u32, event: &AspNetEvent<'_>) -> Vec<Event> {
        let at = match *event {
            AspNetEvent::RequestStart { at, .. } | AspNetEvent::RequestStop { at, .. } => at,
        };
        self.feed(pid, at, |kind, trigger, _| match *event {
            AspNetEvent::RequestStart {
                activity_id, path, ..
            } => trigger.request_start(kind, activity_id, path, at),
            AspNetEvent::RequestStop {
                activity_id,
                path,
                duration,
                status_code,
                ..
            } => trigger.request_stop(kind, activity_id, path, duration, status_code, at),
        })
    }

    /// Time passed to `now` on every process: RuleDuration limits end rules, throttled rules
    /// whose window has room run again, and AspNetRequestDuration counts requests still
    /// running past its threshold. Call it at least once per counter interval.
    pub fn tick(&mut self, now: Duration) -> Vec<Event> {
        let pids: Vec<u32> = self.processes.keys().copied().collect();
        let mut events = Vec::new();
        for pid in pids {
            if let Some(pipelines) = self.processes.get_mut(&pid) {
                for p in pipelines.iter_mut() {
                    let before = p.limiter.state;
                    if p.limiter.state == CollectionRuleState::Throttled {
                        p.limiter.check_throttling(now);
                        changed(pid, p, before, &mut events);
                    }
                }
            }
            events.extend(self.feed(pid, now, |kind, trigger, _| trigger.heartbeat(kind, now)));
        }
        events
    }

    /// The actions that rule `rule` ran on `pid` finished at `now` (succeeded or not: a
    /// failed action does not stop the rule, as in dotnet-monitor).
    pub fn actions_completed(&mut self, pid: u32, rule: &str, now: Duration) -> Vec<Event> {
        let mut events = Vec::new();
        if let Some(p) = self
            .processes
            .get_mut(&pid)
            .and_then(|ps| ps.iter_mut().find(|p| p.name == rule))
        {
            let before = p.limiter.state;
            p.completed(now);
            changed(pid, p, before, &mut events);
        }
        events
    }

    /// `GET /collectionrules` for `pid` at `now`: each rule's state, by rule name.
    pub fn descriptions(
        &self,
        pid: u32,
        now: Duration,
    ) -> Option<BTreeMap<String, CollectionRuleDescription>> {
        self.processes.get(&pid).map(|ps| {
            ps.iter()
                .map(|p| (p.name.clone(), p.limiter.describe(now)))
                .collect()
        })
    }

    /// `GET /collectionrules/{name}` for `pid` at `now` (`None`: no such process or rule).
    pub fn detailed_description(
        &self,
        pid: u32,
        rule: &str,
        now: Duration,
    ) -> Option<CollectionRuleDetailedDescription> {
        self.processes
            .get(&pid)?
            .iter()
            .find(|p| p.name == rule)
            .map(|p| p.limiter.describe_detailed(now))
    }

    /// What the one counters session of `pid` must collect so that every rule still
    /// listening on it can be answered (EventCounter and shortcut triggers by provider, with
    /// their counters and interval; EventMeter triggers by meter; the ASP.NET triggers'
    /// request events).
    pub fn session_plan(&self, pid: u32) -> SessionPlan {
        let mut plan = SessionPlan {
            meter_interval: self.options.counter_interval,
            ..SessionPlan::default()
        };
        let pipelines = match self.processes.get(&pid) {
            Some(p) => p,
            None => return plan,
        };
        for p in pipelines {
            if p.limiter.state == CollectionRuleState::Finished {
                continue;
            }
            match p.kind() {
                Some(TriggerKind::EventCounter(t)) => {
                    match plan
                        .counters
                        .iter_mut()
                        .find(|c| c.provider.eq_ignore_ascii_case(&t.provider_name))
                    {
                        Some(c) => push_unique(&mut c.counters, &t.counter_name),
                        None => plan.counters.push(CounterRequest {
                            provider: t.provider_name.clone(),
                            counters: vec![t.counter_name.clone()],
                            interval: self.options.interval_for(&t.provider_name),
                        }),
                    }
                }
                Some(TriggerKind::EventMeter(t)) => {
                    match plan
                        .meters
                        .iter_mut()
                        .find(|m| m.meter.eq_ignore_ascii_case(&t.meter_name))
                    {
                        Some(m) => push_unique(&mut m.instruments, &t.instrument_name),
                        None => plan.meters.push(MeterRequest {
                            meter: t.meter_name.clone(),
                            instruments: vec![t.instrument_name.clone()],
                        }),
                    }
                }
                Some(TriggerKind::AspNetRequestCount(_))
                | Some(TriggerKind::AspNetRequestDuration(_))
                | Some(TriggerKind::AspNetResponseStatus(_)) => plan.aspnet_requests = true,
                Some(TriggerKind::Startup) | None => {}
            }
        }
        plan
    }
}

/// Ends the rule at `at` if its RuleDuration passed (a rule running actions finishes when
/// they complete, as dotnet-monitor lets them end gracefully).
fn expire(pid: u32, p: &mut Pipeline, at: Duration, events: &mut Vec<Event>) {
    if p.listening() && p.limiter.duration_passed(at) {
        let before = p.limiter.state;
        p.limiter.finished(FinishReason::RuleDurationReached);
        changed(pid, p, before, events);
    }
}

fn changed(pid: u32, p: &Pipeline, before: CollectionRuleState, events: &mut Vec<Event>) {
    if p.limiter.state != before {
        events.push(Event::StateChanged {
            pid,
            rule: p.name.clone(),
            state: p.limiter.state,
            reason: p.limiter.reason.clone(),
        });
    }
}

fn report(
    pid: u32,
    p: &Pipeline,
    before: CollectionRuleState,
    outcome: Outcome,
    at: Duration,
    events: &mut Vec<Event>,
) {
    changed(pid, p, before, events);
    match outcome {
        Outcome::Fire => events.push(Event::Fire {
            pid,
            rule: p.name.clone(),
            at,
        }),
        Outcome::Throttled => events.push(Event::Throttled {
            pid,
            rule: p.name.clone(),
        }),
    }
}
