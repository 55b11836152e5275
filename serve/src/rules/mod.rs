//! dotnet-monitor's collection rules, without I/O: the configuration model (filters,
//! triggers, actions, limits, templates) read from the `CollectionRules` and `Templates`
//! subtrees, action output references, the trigger engine (samples and instants in, firings
//! and state changes out) and the `/collectionrules` shapes. Running the actions and
//! feeding the engine from a process's counters session are the caller's.

pub mod action;
pub mod defaults;
pub mod engine;
pub mod filter;
pub mod outputs;
mod pipeline;
pub mod rule;
pub mod state;
pub mod trigger;
pub mod value;
pub mod window;

#[cfg(test)]
mod tests_engine;
#[cfg(test)]
mod tests_parse;

pub use action::{Action, ActionSettings};
pub use defaults::{LoadOptions, RuleDefaults};
pub use engine::{
    AspNetEvent, CounterSample, Engine, EngineOptions, Event, MeterSample, MeterValue, SessionPlan,
};
pub use filter::{ProcessFilter, ProcessInfo};
pub use rule::{Limits, Rule, RuleEntry, RuleSet};
pub use state::{
    CollectionRuleDescription, CollectionRuleDetailedDescription, CollectionRuleState,
};
pub use trigger::{Trigger, TriggerKind};
pub use value::{ErrorKind, RuleError};
