//! One rule on one process: its trigger's state and its limits, as dotnet-monitor's
//! `CollectionRulePipeline` and `CollectionRulePipelineState` run them, without I/O. Time
//! is the instant the caller passes.

use std::collections::{BTreeMap, VecDeque};
use std::time::Duration;

use super::rule::{Limits, Rule};
use super::state::{
    reasons, truncated_countdown, CollectionRuleDescription, CollectionRuleDetailedDescription,
    CollectionRuleState, FinishReason,
};
use super::trigger::{Threshold, TriggerKind};
use super::window::{GlobMatcher, HeldCondition, SlidingWindow};

/// AspNetRequestDuration looks for requests still running at most this often (dotnet's
/// `HeartbeatIntervalSeconds`, 9 s against a 10 s hosting counter interval).
const HEARTBEAT_INTERVAL: Duration = Duration::from_secs(9);

/// The most requests an AspNetRequestDuration trigger follows at once. A request is
/// followed from its start until its stop or until it is older than `RequestDuration`
/// (at most an hour); an entry is its activity id (tens of bytes), so 65,536 entries are a
/// few MB. Requests starting beyond it are not followed (their stop is then ignored, as a
/// request the heartbeat already counted).
const MAX_FOLLOWED_REQUESTS: usize = 65_536;

/// The live state of a trigger; a new one replaces it each time the trigger fires, as
/// dotnet-monitor creates a new trigger for each wait.
#[derive(Debug, Clone)]
pub(crate) enum TriggerState {
    Startup,
    Held {
        condition: HeldCondition,
    },
    Count {
        window: SlidingWindow,
        paths: GlobMatcher,
    },
    Duration {
        window: SlidingWindow,
        paths: GlobMatcher,
        requests: BTreeMap<String, Duration>,
        last_heartbeat: Option<Duration>,
    },
    Status {
        window: SlidingWindow,
        paths: GlobMatcher,
    },
}

impl TriggerState {
    pub(crate) fn new(kind: &TriggerKind, counter_interval: Duration) -> TriggerState {
        let glob = |p: &super::trigger::PathFilters| {
            GlobMatcher::new(p.include.as_deref(), p.exclude.as_deref())
        };
        match kind {
            TriggerKind::Startup => TriggerState::Startup,
            TriggerKind::EventCounter(t) => TriggerState::Held {
                condition: HeldCondition::new(counter_interval, t.sliding_window),
            },
            TriggerKind::EventMeter(t) => TriggerState::Held {
                condition: HeldCondition::new(counter_interval, t.sliding_window),
            },
            TriggerKind::AspNetRequestCount(t) => TriggerState::Count {
                window: SlidingWindow::new(t.sliding_window),
                paths: glob(&t.paths),
            },
            TriggerKind::AspNetRequestDuration(t) => TriggerState::Duration {
                window: SlidingWindow::new(t.sliding_window),
                paths: glob(&t.paths),
                requests: BTreeMap::new(),
                last_heartbeat: None,
            },
            TriggerKind::AspNetResponseStatus(t) => TriggerState::Status {
                window: SlidingWindow::new(t.sliding_window),
                paths: glob(&t.paths),
            },
        }
    }

    /// A counter or meter value; whether the held condition is now satisfied.
    pub(crate) fn held_sample(
        &mut self,
        at: Duration,
        interval: Duration,
        threshold: &Threshold,
        value: Option<f64>,
    ) -> bool {
        match self {
            TriggerState::Held { condition } => {
                let passes = value.map_or(false, |v| threshold.passes(v));
                condition.sample(at, interval, passes)
            }
            _ => false,
        }
    }

    /// A request started.
    pub(crate) fn request_start(
        &mut self,
        kind: &TriggerKind,
        activity_id: &str,
        path: &str,
        at: Duration,
    ) -> bool {
        match (self, kind) {
            (TriggerState::Count { window, paths }, TriggerKind::AspNetRequestCount(t)) => {
                if !paths.is_match(path) {
                    return false;
                }
                window.add(at);
                window.count() >= u64::from(t.request_count)
            }
            (
                TriggerState::Duration {
                    paths, requests, ..
                },
                TriggerKind::AspNetRequestDuration(_),
            ) => {
                if paths.is_match(path) && requests.len() < MAX_FOLLOWED_REQUESTS {
                    requests.insert(activity_id.to_string(), at);
                }
                false
            }
            _ => false,
        }
    }

    /// A request stopped.
    pub(crate) fn request_stop(
        &mut self,
        kind: &TriggerKind,
        activity_id: &str,
        path: &str,
        duration: Duration,
        status_code: u16,
        at: Duration,
    ) -> bool {
        match (self, kind) {
            (
                TriggerState::Duration {
                    window,
                    paths,
                    requests,
                    ..
                },
                TriggerKind::AspNetRequestDuration(t),
            ) => {
                if !paths.is_match(path) || requests.remove(activity_id).is_none() {
                    // Not followed, or already counted as slow by a heartbeat.
                    return false;
                }
                if duration >= t.request_duration {
                    window.add(at);
                }
                window.count() >= u64::from(t.request_count)
            }
            (TriggerState::Status { window, paths }, TriggerKind::AspNetResponseStatus(t)) => {
                if !paths.is_match(path) {
                    return false;
                }
                if t.status_codes
                    .iter()
                    .any(|(min, max)| (*min..=*max).contains(&status_code))
                {
                    window.add(at);
                }
                window.count() >= u64::from(t.response_count)
            }
            _ => false,
        }
    }

    /// Time passed: AspNetRequestDuration counts the requests still running past the
    /// threshold (once each).
    pub(crate) fn heartbeat(&mut self, kind: &TriggerKind, at: Duration) -> bool {
        match (self, kind) {
            (
                TriggerState::Duration {
                    window,
                    requests,
                    last_heartbeat,
                    ..
                },
                TriggerKind::AspNetRequestDuration(t),
            ) => {
                if let Some(last) = *last_heartbeat {
                    if at.saturating_sub(last) <= HEARTBEAT_INTERVAL {
                        return false;
                    }
                }
                *last_heartbeat = Some(at);
                let slow: Vec<String> = requests
                    .iter()
                    .filter(|(_, start)| at.saturating_sub(**start) >= t.request_duration)
                    .map(|(id, _)| id.clone())
                    .collect();
                for id in slow {
                    window.add(at);
                    requests.remove(&id);
                }
                window.count() >= u64::from(t.request_count)
            }
            _ => false,
        }
    }
}

/// What a pipeline tells its caller.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Outcome {
    /// The trigger fired and the actions must run.
    Fire,
    /// The trigger fired but the limits held the actions back.
    Throttled,
}

/// The limits and state of a rule on one process (dotnet-monitor's
/// `CollectionRulePipelineState`).
#[derive(Debug, Clone)]
pub(crate) struct Limiter {
    pub(crate) limits: Limits,
    pub(crate) started: Duration,
    /// Runs within the window (all runs without a window); never more than
    /// `action_count`, since a run is only admitted below it.
    pub(crate) executions: VecDeque<Duration>,
    pub(crate) lifetime: u32,
    pub(crate) state: CollectionRuleState,
    pub(crate) reason: String,
}

impl Limiter {
    pub(crate) fn new(limits: Limits, started: Duration) -> Limiter {
        Limiter {
            limits,
            started,
            executions: VecDeque::new(),
            lifetime: 0,
            state: CollectionRuleState::Running,
            reason: reasons::RUNNING.into(),
        }
    }

    pub(crate) fn finished(&mut self, reason: FinishReason) {
        self.state = CollectionRuleState::Finished;
        self.reason = reason.text();
    }

    fn set(&mut self, state: CollectionRuleState, reason: &str) {
        self.state = state;
        self.reason = reason.into();
    }

    /// Drops the runs older than the window, then says whether the rule is throttled (and
    /// enters or leaves the Throttled state accordingly).
    pub(crate) fn check_throttling(&mut self, now: Duration) -> bool {
        let window = match self.limits.action_count_sliding_window {
            Some(w) => w,
            None => return false,
        };
        while let Some(&first) = self.executions.front() {
            if first + window < now {
                self.executions.pop_front();
            } else {
                break;
            }
        }
        let throttled = self.executions.len() as u64 >= u64::from(self.limits.action_count);
        if self.state != CollectionRuleState::Finished {
            if throttled {
                self.set(CollectionRuleState::Throttled, reasons::THROTTLED);
            } else if self.state == CollectionRuleState::Throttled {
                self.set(CollectionRuleState::Running, reasons::RUNNING);
            }
        }
        throttled
    }

    /// The trigger fired at `now`: run the actions, or hold them back.
    pub(crate) fn begin(&mut self, now: Duration) -> Outcome {
        if self.check_throttling(now) {
            return Outcome::Throttled;
        }
        self.executions.push_back(now);
        self.lifetime = self.lifetime.saturating_add(1);
        self.set(
            CollectionRuleState::ActionExecuting,
            reasons::EXECUTING_ACTIONS,
        );
        Outcome::Fire
    }

    /// The actions finished at `now`; whether the rule is now finished.
    pub(crate) fn complete(&mut self, now: Duration, startup: bool) -> bool {
        self.set(CollectionRuleState::Running, reasons::RUNNING);
        if self.limits.action_count_sliding_window.is_none()
            && self.executions.len() as u64 >= u64::from(self.limits.action_count)
        {
            self.finished(FinishReason::ActionCountReached);
        } else if self.duration_passed(now) {
            self.finished(FinishReason::RuleDurationReached);
        } else if startup {
            self.finished(FinishReason::Startup);
        }
        self.state == CollectionRuleState::Finished
    }

    pub(crate) fn duration_passed(&self, now: Duration) -> bool {
        self.limits
            .rule_duration
            .map_or(false, |d| now >= self.started + d)
    }

    /// The state as `/collectionrules` reports it at `now` (on a copy, re-checking the
    /// throttling as dotnet-monitor's `GetPipelineState`).
    pub(crate) fn describe(&self, now: Duration) -> CollectionRuleDescription {
        let mut copy = self.clone();
        copy.check_throttling(now);
        CollectionRuleDescription {
            state: copy.state,
            state_reason: Some(copy.reason),
        }
    }

    /// The detailed state at `now`.
    pub(crate) fn describe_detailed(&self, now: Duration) -> CollectionRuleDetailedDescription {
        let mut copy = self.clone();
        copy.check_throttling(now);
        let finished = copy.state == CollectionRuleState::Finished;
        let window = copy.limits.action_count_sliding_window;
        let sliding_countdown = match (window, copy.executions.front()) {
            (Some(w), Some(&oldest))
                if !finished
                    && copy.executions.len() as u64 >= u64::from(copy.limits.action_count) =>
            {
                truncated_countdown((oldest + w).checked_sub(now))
            }
            _ => None,
        };
        let rule_countdown = match copy.limits.rule_duration {
            Some(d) if !finished => truncated_countdown((copy.started + d).checked_sub(now)),
            _ => None,
        };
        CollectionRuleDetailedDescription {
            state: copy.state,
            state_reason: Some(copy.reason),
            lifetime_occurrences: copy.lifetime,
            sliding_window_occurrences: copy.executions.len() as u32,
            action_count_limit: copy.limits.action_count,
            action_count_sliding_window_duration_limit: window,
            sliding_window_duration_countdown: sliding_countdown,
            rule_finished_countdown: rule_countdown,
        }
    }
}

/// A rule applied to a process.
#[derive(Debug, Clone)]
pub(crate) struct Pipeline {
    pub(crate) name: String,
    /// The rule, or `None` for a rule that cannot run (its limiter says why).
    pub(crate) rule: Option<Rule>,
    pub(crate) trigger: Option<TriggerState>,
    pub(crate) limiter: Limiter,
    pub(crate) counter_interval: Duration,
}

impl Pipeline {
    /// Whether the trigger is listening (not while actions run, not when finished).
    pub(crate) fn listening(&self) -> bool {
        matches!(
            self.limiter.state,
            CollectionRuleState::Running | CollectionRuleState::Throttled
        )
    }

    pub(crate) fn kind(&self) -> Option<&TriggerKind> {
        self.rule.as_ref().map(|r| &r.trigger.kind)
    }

    /// The trigger was satisfied at `at`.
    pub(crate) fn satisfied(&mut self, at: Duration) -> Outcome {
        let outcome = self.limiter.begin(at);
        if let (Outcome::Throttled, Some(rule)) = (&outcome, &self.rule) {
            // A new trigger waits again; a Startup rule is done either way.
            if matches!(rule.trigger.kind, TriggerKind::Startup) {
                self.limiter.finished(FinishReason::Startup);
            } else {
                self.trigger = Some(TriggerState::new(&rule.trigger.kind, self.counter_interval));
            }
        }
        outcome
    }

    /// The actions completed at `now`.
    pub(crate) fn completed(&mut self, now: Duration) {
        if self.limiter.state != CollectionRuleState::ActionExecuting {
            return;
        }
        let rule = match &self.rule {
            Some(r) => r,
            None => return,
        };
        let startup = matches!(rule.trigger.kind, TriggerKind::Startup);
        if !self.limiter.complete(now, startup) {
            self.trigger = Some(TriggerState::new(&rule.trigger.kind, self.counter_interval));
        }
    }
}
