//! `CollectionRuleDefaults`: values every rule takes when it gives none (the egress of its
//! actions, its trigger's counts and window, its limits), and what loading rules needs
//! besides the rules themselves.

use std::time::Duration;

use serde_json::Value;

use super::trigger::{MAX_SLIDING_WINDOW, MIN_SLIDING_WINDOW};
use super::value::{Node, Result};

/// `ActionCountSlidingWindowDuration`'s and `RuleDuration`'s smallest value: one second.
pub(crate) const MIN_LIMIT_WINDOW: Duration = Duration::from_secs(1);
/// `ActionCountSlidingWindowDuration`'s largest value: one day.
pub(crate) const MAX_ACTION_WINDOW: Duration = Duration::from_secs(86_400);
/// `RuleDuration`'s largest value: 365 days.
pub(crate) const MAX_RULE_DURATION: Duration = Duration::from_secs(365 * 86_400);

/// The `CollectionRuleDefaults` section.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RuleDefaults {
    /// `Actions:Egress`: the egress of actions that give none.
    pub egress: Option<String>,
    /// `Triggers:RequestCount` (AspNetRequestCount, AspNetRequestDuration).
    pub request_count: Option<u32>,
    /// `Triggers:ResponseCount` (AspNetResponseStatus).
    pub response_count: Option<u32>,
    /// `Triggers:SlidingWindowDuration` (every trigger with a window).
    pub sliding_window: Option<Duration>,
    /// `Limits:ActionCount`.
    pub action_count: Option<u32>,
    /// `Limits:ActionCountSlidingWindowDuration`.
    pub action_count_sliding_window: Option<Duration>,
    /// `Limits:RuleDuration`.
    pub rule_duration: Option<Duration>,
}

fn count(node: &Node<'_>) -> Result<Option<u32>> {
    Ok(node.int(1, i64::from(i32::MAX))?.map(|v| v as u32))
}

impl RuleDefaults {
    /// Reads the `CollectionRuleDefaults` subtree (an error here is one of the whole
    /// configuration: it names a key under `CollectionRuleDefaults`).
    pub fn parse(value: &Value) -> Result<RuleDefaults> {
        let root = Node::root(value, "CollectionRuleDefaults");
        let triggers = root.child("Triggers");
        let limits = root.child("Limits");
        Ok(RuleDefaults {
            egress: root.child("Actions").child("Egress").string()?,
            request_count: count(&triggers.child("RequestCount"))?,
            response_count: count(&triggers.child("ResponseCount"))?,
            sliding_window: triggers
                .child("SlidingWindowDuration")
                .timespan(MIN_SLIDING_WINDOW, MAX_SLIDING_WINDOW)?,
            action_count: count(&limits.child("ActionCount"))?,
            action_count_sliding_window: limits
                .child("ActionCountSlidingWindowDuration")
                .timespan(MIN_LIMIT_WINDOW, MAX_ACTION_WINDOW)?,
            rule_duration: limits
                .child("RuleDuration")
                .timespan(MIN_LIMIT_WINDOW, MAX_RULE_DURATION)?,
        })
    }
}

/// What loading the rules needs besides the `CollectionRules` subtree.
#[derive(Debug, Clone, Default)]
pub struct LoadOptions<'a> {
    /// The `Templates` subtree.
    pub templates: Option<&'a Value>,
    /// The `CollectionRuleDefaults` section, read.
    pub defaults: RuleDefaults,
    /// The configured egress providers' names: when given, every action's `Egress` must
    /// name one of them (dotnet-monitor's "Egress provider 'x' does not exist.").
    pub egress_providers: Option<&'a [String]>,
}
