//! The states of a rule on a process and the shapes `/collectionrules` answers with
//! (dotnet-monitor's `CollectionRuleDescription` and `CollectionRuleDetailedDescription`).

use std::time::Duration;

use serde::{Serialize, Serializer};

use super::value::format_timespan;

/// The state of a rule on one process (dotnet-monitor's `CollectionRuleState`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum CollectionRuleState {
    /// Waiting for its trigger.
    Running,
    /// Its trigger fired and its actions are running.
    ActionExecuting,
    /// `ActionCount` was reached within `ActionCountSlidingWindowDuration`.
    Throttled,
    /// It will not fire again on this process.
    Finished,
}

/// Why a rule finished.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FinishReason {
    /// A Startup trigger runs its actions once.
    Startup,
    /// `ActionCount` was reached with no `ActionCountSlidingWindowDuration`.
    ActionCountReached,
    /// `RuleDuration` passed.
    RuleDurationReached,
    /// The rule cannot run (its configuration error, or a failure).
    Failure(String),
}

/// dotnet-monitor's `stateReason` texts.
pub mod reasons {
    /// Running.
    pub const RUNNING: &str =
        "This collection rule is active and waiting for its triggering conditions to be satisfied.";
    /// ActionExecuting.
    pub const EXECUTING_ACTIONS: &str = "This collection rule has had its triggering conditions satisfied and is currently executing its action list.";
    /// Throttled.
    pub const THROTTLED: &str = "This collection rule is temporarily throttled because the ActionCountLimit has been reached within the ActionCountSlidingWindowDuration.";
    /// Finished after a Startup trigger.
    pub const FINISHED_STARTUP: &str =
        "The collection rule will no longer trigger because the Startup trigger only executes once.";
    /// Finished at `ActionCount`.
    pub const FINISHED_ACTION_COUNT: &str =
        "The collection rule will no longer trigger because the ActionCount was reached.";
    /// Finished at `RuleDuration`.
    pub const FINISHED_RULE_DURATION: &str =
        "The collection rule will no longer trigger because the RuleDuration limit was reached.";
}

impl FinishReason {
    /// dotnet-monitor's `stateReason` for this finish.
    pub fn text(&self) -> String {
        match self {
            FinishReason::Startup => reasons::FINISHED_STARTUP.into(),
            FinishReason::ActionCountReached => reasons::FINISHED_ACTION_COUNT.into(),
            FinishReason::RuleDurationReached => reasons::FINISHED_RULE_DURATION.into(),
            FinishReason::Failure(message) => format!(
                "The collection rule will no longer trigger because a failure occurred with message: {}.",
                message
            ),
        }
    }
}

/// A rule's state on a process, with its reason (`GET /collectionrules`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct CollectionRuleDescription {
    /// The state.
    pub state: CollectionRuleState,
    /// Why, in words.
    #[serde(rename = "stateReason")]
    pub state_reason: Option<String>,
}

fn timespan<S: Serializer>(d: &Option<Duration>, s: S) -> Result<S::Ok, S::Error> {
    match d {
        Some(d) => s.serialize_str(&format_timespan(*d)),
        None => s.serialize_none(),
    }
}

/// A rule's state on a process in detail (`GET /collectionrules/{name}`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CollectionRuleDetailedDescription {
    /// The state.
    pub state: CollectionRuleState,
    /// Why, in words.
    pub state_reason: Option<String>,
    /// How many times the action list ran on this process.
    pub lifetime_occurrences: u32,
    /// How many of those are within the current `ActionCountSlidingWindowDuration`.
    pub sliding_window_occurrences: u32,
    /// `ActionCount`.
    pub action_count_limit: u32,
    /// `ActionCountSlidingWindowDuration`.
    #[serde(serialize_with = "timespan")]
    pub action_count_sliding_window_duration_limit: Option<Duration>,
    /// How long until the oldest run leaves the window (when the count is reached).
    #[serde(serialize_with = "timespan")]
    pub sliding_window_duration_countdown: Option<Duration>,
    /// How long until `RuleDuration` passes.
    #[serde(serialize_with = "timespan")]
    pub rule_finished_countdown: Option<Duration>,
}

/// A positive countdown, truncated to whole seconds as dotnet-monitor reports it; `None`
/// when nothing is left.
pub fn truncated_countdown(remaining: Option<Duration>) -> Option<Duration> {
    remaining
        .filter(|d| !d.is_zero())
        .map(|d| Duration::from_secs(d.as_secs()))
}
