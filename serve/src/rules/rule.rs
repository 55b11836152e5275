//! A collection rule as loaded: its filters, trigger, actions and limits, with `Templates`
//! resolved by name. A rule that cannot run is kept with its error, so that
//! `/collectionrules` can report it; the other rules of the set still run.

use std::cell::RefCell;
use std::collections::BTreeSet;
use std::time::Duration;

use serde_json::Value;

use super::action::Action;
use super::defaults::{
    LoadOptions, RuleDefaults, MAX_ACTION_WINDOW, MAX_RULE_DURATION, MIN_LIMIT_WINDOW,
};
use super::filter::ProcessFilter;
use super::trigger::Trigger;
use super::value::{join, unread_keys, ErrorKind, Node, Result, RuleError, Seen};

/// The `ActionCount` of a rule whose `Limits` give none.
pub const DEFAULT_ACTION_COUNT: u32 = 5;

/// A rule's `Limits`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// How many times the action list may run (within the window, if one is given; else
    /// in the rule's lifetime). Default 5.
    pub action_count: u32,
    /// The window `action_count` applies to; with it, the rule is throttled instead of
    /// finished when the count is reached.
    pub action_count_sliding_window: Option<Duration>,
    /// How long the rule watches a process after it was applied to it.
    pub rule_duration: Option<Duration>,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            action_count: DEFAULT_ACTION_COUNT,
            action_count_sliding_window: None,
            rule_duration: None,
        }
    }
}

impl Limits {
    /// Reads a `Limits` section (absent: `node` does not exist), with
    /// `CollectionRuleDefaults`.
    pub fn parse(node: &Node<'_>, defaults: &RuleDefaults) -> Result<Limits> {
        if node.exists() && node.value.map_or(false, |v| !v.is_object()) {
            return Err(node.wrong("a Limits section"));
        }
        Ok(Limits {
            action_count: node
                .child("ActionCount")
                .int(1, i64::from(i32::MAX))?
                .map(|v| v as u32)
                .or(defaults.action_count)
                .unwrap_or(DEFAULT_ACTION_COUNT),
            action_count_sliding_window: node
                .child("ActionCountSlidingWindowDuration")
                .timespan(MIN_LIMIT_WINDOW, MAX_ACTION_WINDOW)?
                .or(defaults.action_count_sliding_window),
            rule_duration: node
                .child("RuleDuration")
                .timespan(MIN_LIMIT_WINDOW, MAX_RULE_DURATION)?
                .or(defaults.rule_duration),
        })
    }
}

/// A collection rule that can run.
#[derive(Debug, Clone, PartialEq)]
pub struct Rule {
    /// The rule's name (its key under `CollectionRules`).
    pub name: String,
    /// Which processes it applies to (none: all).
    pub filters: Vec<ProcessFilter>,
    /// When it fires.
    pub trigger: Trigger,
    /// What it does, in order.
    pub actions: Vec<Action>,
    /// How often and how long.
    pub limits: Limits,
}

/// A rule of the configuration: runnable, or kept with the error that stops it.
#[derive(Debug, Clone, PartialEq)]
pub struct RuleEntry {
    /// The rule's name.
    pub name: String,
    /// The rule, or its first configuration error.
    pub rule: std::result::Result<Rule, RuleError>,
    /// The keys of a runnable rule (and of the templates it uses) that no setting reads:
    /// misspelt or misplaced keys, ignored as dotnet-monitor ignores them, to warn about.
    pub unknown_keys: Vec<String>,
}

/// Every rule of the configuration, in its order.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RuleSet {
    /// The rules.
    pub entries: Vec<RuleEntry>,
}

/// The `Templates` section (filters, triggers, actions and limits named for reuse), as one
/// rule reads it.
struct Templates<'a> {
    root: Option<&'a Value>,
    seen: &'a Seen,
    /// The templates the rule used, by key path.
    used: RefCell<Vec<(String, &'a Value)>>,
}

impl<'a> Templates<'a> {
    /// The template `name` of `kind` (`CollectionRuleTriggers`, ...), compared without case.
    fn find(&self, kind: &str, name: &str) -> Option<Node<'a>> {
        let root = Node::tracked(self.root, "Templates", self.seen);
        let node = root.child(kind).child(name.trim());
        match node.value {
            Some(value) if node.exists() => {
                self.used.borrow_mut().push((node.path.clone(), value));
                Some(node)
            }
            _ => None,
        }
    }

    /// `node` itself, or the template its text names.
    fn resolve(&self, node: Node<'a>, kind: &str) -> Result<Node<'a>> {
        match node.leaf_text() {
            Some(name) => self.find(kind, &name).ok_or_else(|| {
                RuleError::new(node.path.clone(), ErrorKind::TemplateNotFound(name))
            }),
            None => Ok(node),
        }
    }
}

fn parse_rule<'a>(
    name: &str,
    node: &Node<'a>,
    templates: &Templates<'a>,
    options: &LoadOptions<'_>,
) -> Result<Rule> {
    if node.value.map_or(true, |v| !v.is_object()) {
        return Err(node.wrong("a collection rule (Filters, Trigger, Actions, Limits)"));
    }
    let mut filters = Vec::new();
    for item in node.child("Filters").list()? {
        let item = templates.resolve(item, "CollectionRuleFilters")?;
        filters.push(ProcessFilter::parse(&item)?);
    }
    let trigger_node = node.child("Trigger");
    if !trigger_node.exists() {
        return Err(RuleError::new(trigger_node.path, ErrorKind::Missing));
    }
    let trigger = Trigger::parse(
        &templates.resolve(trigger_node, "CollectionRuleTriggers")?,
        &options.defaults,
    )?;
    let mut actions: Vec<Action> = Vec::new();
    let mut names = BTreeSet::new();
    for item in node.child("Actions").list()? {
        let path = item.path.clone();
        let item = templates.resolve(item, "CollectionRuleActions")?;
        let action = Action::parse(&item, options)?;
        if let Some(n) = &action.name {
            // Ordinal, as dotnet-monitor compares action names.
            if !names.insert(n.clone()) {
                return Err(RuleError::new(
                    join(&path, "Name"),
                    ErrorKind::Invalid(format!("Duplicate action name '{}'.", n)),
                ));
            }
        }
        actions.push(action);
    }
    let limits_node = node.child("Limits");
    let limits_node = if limits_node.exists() {
        templates.resolve(limits_node, "CollectionRuleLimits")?
    } else {
        limits_node
    };
    let limits = Limits::parse(&limits_node, &options.defaults)?;
    Ok(Rule {
        name: name.to_string(),
        filters,
        trigger,
        actions,
        limits,
    })
}

impl RuleSet {
    /// Loads the `CollectionRules` subtree, resolving names from `options.templates` and
    /// taking `options.defaults` where a rule gives no value. Only a `CollectionRules` that
    /// is not a section at all is an error of the whole set; a rule with a bad key is kept
    /// with its error.
    pub fn load(collection_rules: &Value, options: &LoadOptions<'_>) -> Result<RuleSet> {
        let root = Node::root(collection_rules, "CollectionRules");
        let mut entries = Vec::new();
        for (name, node) in root.entries()? {
            let seen = Seen::default();
            let templates = Templates {
                root: options.templates,
                seen: &seen,
                used: RefCell::new(Vec::new()),
            };
            let tracked = Node::tracked(node.value, &node.path, &seen);
            let rule = parse_rule(&name, &tracked, &templates, options);
            let mut unknown_keys = Vec::new();
            if rule.is_ok() {
                let seen = seen.borrow();
                if let Some(value) = node.value {
                    unread_keys(value, &node.path, &seen, &mut unknown_keys);
                }
                for (path, value) in templates.used.borrow().iter() {
                    let mut in_template = Vec::new();
                    unread_keys(value, path, &seen, &mut in_template);
                    for key in in_template {
                        if !unknown_keys.contains(&key) {
                            unknown_keys.push(key);
                        }
                    }
                }
            }
            entries.push(RuleEntry {
                name,
                rule,
                unknown_keys,
            });
        }
        Ok(RuleSet { entries })
    }

    /// The rule named `name` (compared without case, as configuration keys).
    pub fn get(&self, name: &str) -> Option<&RuleEntry> {
        self.entries
            .iter()
            .find(|e| e.name.eq_ignore_ascii_case(name))
    }
}
