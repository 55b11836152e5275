//! Collection rules running inside serve: the sans-IO engine of [`crate::rules`] fed from
//! the runtimes serve discovers, its firings run as actions.
//!
//! As dotnet-monitor's `CollectionRuleService`: [`follow`] looks for runtimes on the
//! schedule `/metrics` uses ([`crate::metrics::DISCOVERY_INTERVAL`]; in listen mode also at
//! once when a runtime connects or leaves). A runtime seen for the first time gets the rules
//! whose `Filters` it passes (Startup triggers fire then), and ONE counters session for all
//! its counter-based and AspNet request triggers together (the engine's [`session_plan`]:
//! its counters and meters, and the DiagnosticSource bridge's request events when an
//! AspNetRequestCount, AspNetRequestDuration or AspNetResponseStatus trigger needs them); a
//! runtime that is
//! gone drops its rules, its session and its running actions. [`tick`] tells the engine
//! that time passes (throttling windows, `RuleDuration`). A firing runs the rule's actions
//! ([`actions`]) on a task of its own: a failure is logged and the rule goes on, as
//! dotnet-monitor's pipeline does; neither blocks the API nor another rule.
//!
//! A runtime one of whose rules has a CollectExceptions action gets its `/exceptions`
//! history started when the rules first follow it (the action egresses that history).
//!
//! Not run (the rule is reported `Finished` with the reason on `/collectionrules`):
//! LoadProfiler.
//!
//! [`session_plan`]: crate::rules::Engine::session_plan

mod actions;
mod counters;
mod execute;
mod stopping;

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use tokio::task::JoinHandle;

use crate::api::Api;
use crate::procs::Runtime;
use crate::rules::{
    ActionSettings, CollectionRuleDescription, CollectionRuleDetailedDescription,
    CollectionRuleState, Engine, EngineOptions, ErrorKind, Event, LoadOptions, ProcessInfo, Rule,
    RuleDefaults, RuleError, RuleSet,
};
use crate::{Options, ServeError};

/// How often the engine is told that time passed: its throttling windows and
/// `RuleDuration` are in seconds, and it wants at least one tick per counter interval
/// (at least 1 s), so a second keeps every state on `/collectionrules` within a second of
/// the truth for a few microseconds of work per tracked process.
const TICK: Duration = Duration::from_secs(1);

/// The rules and their state on every runtime serve follows.
pub struct Rules {
    engine: Mutex<Engine>,
    /// The engine's clock: instants are durations since this.
    origin: Instant,
    tracked: Mutex<HashMap<u32, Tracked>>,
    /// Set when serve stops: nothing new is started.
    closed: AtomicBool,
}

/// A runtime the rules follow.
struct Tracked {
    /// Which runtime ([`Runtime::key`]).
    key: (u32, String),
    runtime: Runtime,
    info: ProcessInfo,
    /// Its counters session, when a trigger needs one.
    counters: Option<counters::Session>,
    /// Its running action lists.
    actions: Vec<JoinHandle<()>>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Why a rule that loads cannot run in dsipc serve (yet), as the error it is reported with.
fn unsupported(rule: &Rule) -> Option<RuleError> {
    for (i, a) in rule.actions.iter().enumerate() {
        if let ActionSettings::LoadProfiler { .. } = &a.settings {
            return Some(RuleError::new(
                format!("CollectionRules:{}:Actions:{}:Type", rule.name, i),
                ErrorKind::Invalid(format!(
                    "The {} action is not supported by dsipc serve yet.",
                    a.type_name
                )),
            ));
        }
    }
    None
}

impl Rules {
    /// The rules `options` configure (`None`: no `CollectionRules`). A section that is wrong
    /// as a whole is an error; a rule that cannot run is kept with its reason.
    pub(crate) fn load(options: &Options) -> Result<Option<Rules>, ServeError> {
        let section = match &options.collection_rules {
            None => return Ok(None),
            Some(s) => s,
        };
        let defaults = match &options.collection_rule_defaults {
            Some(d) => RuleDefaults::parse(d).map_err(ServeError::Configuration)?,
            None => RuleDefaults::default(),
        };
        let egress: Vec<String> = options.egress.iter().map(|e| e.name.clone()).collect();
        let load = LoadOptions {
            templates: options.collection_rule_templates.as_ref(),
            defaults,
            egress_providers: Some(&egress),
        };
        let mut set = RuleSet::load(section, &load).map_err(ServeError::Configuration)?;
        for entry in &mut set.entries {
            for key in &entry.unknown_keys {
                eprintln!(
                    "dsipc: serve: warning: {}: not a setting dsipc serve knows; ignored",
                    key
                );
            }
            let why = match &entry.rule {
                Ok(rule) => unsupported(rule),
                Err(_) => None,
            };
            if let Some(e) = why {
                entry.rule = Err(e);
            }
            if let Err(e) = &entry.rule {
                eprintln!(
                    "dsipc: serve: collection rule {} cannot run: {}",
                    entry.name, e
                );
            }
        }
        // The counters session's interval: as `/metrics` asks for it (at least the 0.1 s
        // the runtime takes, at most a day, past which no trigger could ever be held).
        let secs = options.counter_interval;
        let counter_interval = if secs.is_finite() && secs > 0.0 {
            Duration::from_secs_f64(secs.clamp(dsipc_trace::counters::MIN_INTERVAL_SECS, 86_400.0))
        } else {
            crate::rules::engine::DEFAULT_COUNTER_INTERVAL
        };
        let engine = Engine::new(
            set,
            EngineOptions {
                counter_interval,
                provider_intervals: Vec::new(),
            },
        );
        Ok(Some(Rules {
            engine: Mutex::new(engine),
            origin: Instant::now(),
            tracked: Mutex::new(HashMap::new()),
            closed: AtomicBool::new(false),
        }))
    }

    /// Now on the engine's clock.
    fn now(&self) -> Duration {
        self.origin.elapsed()
    }

    /// `GET /collectionrules` for `pid` (empty when the rules do not follow it yet).
    pub(crate) fn descriptions(
        &self,
        pid: u32,
    ) -> std::collections::BTreeMap<String, CollectionRuleDescription> {
        lock(&self.engine)
            .descriptions(pid, self.now())
            .unwrap_or_default()
    }

    /// `GET /collectionrules/{name}` for `pid` (`None`: no such rule on it).
    pub(crate) fn detailed_description(
        &self,
        pid: u32,
        rule: &str,
    ) -> Option<CollectionRuleDetailedDescription> {
        lock(&self.engine).detailed_description(pid, rule, self.now())
    }

    /// Follows the runtimes of a listing: the new ones get their rules (and session), the
    /// gone ones are dropped with theirs.
    fn observe(self: &Arc<Self>, api: &Arc<Api>, all: &[Runtime]) {
        let gone: Vec<u32> = lock(&self.tracked)
            .iter()
            .filter(|(_, t)| !all.iter().any(|r| r.key() == t.key))
            .map(|(pid, _)| *pid)
            .collect();
        for pid in gone {
            self.drop_process(pid);
        }
        for r in all {
            let known = lock(&self.tracked).contains_key(&r.pid);
            if !known {
                self.add_process(api, r);
            }
        }
        // Sessions no rule listens to any more (their rules finished) are stopped; one the
        // runtime ended while it is still listed starts again (one that could not start is
        // not retried: its failure was said once).
        let (idle, ended) = {
            let engine = lock(&self.engine);
            let mut tracked = lock(&self.tracked);
            let mut idle = Vec::new();
            let mut ended = Vec::new();
            for (pid, t) in tracked.iter_mut() {
                let plan = engine.session_plan(*pid);
                if t.counters.is_some() && plan.is_empty() {
                    idle.extend(t.counters.take());
                } else if t.counters.as_ref().map_or(false, |s| s.ended_after_start()) {
                    t.counters = None;
                    ended.push((t.runtime.clone(), plan));
                }
            }
            (idle, ended)
        };
        for s in idle {
            s.stop();
        }
        for (runtime, plan) in ended {
            let session = counters::Session::start(api, self, &runtime, &plan);
            match lock(&self.tracked).get_mut(&runtime.pid) {
                Some(t) => t.counters = session,
                None => {
                    if let Some(s) = session {
                        s.abort();
                    }
                }
            }
        }
    }

    fn add_process(self: &Arc<Self>, api: &Arc<Api>, r: &Runtime) {
        if self.closed.load(Ordering::SeqCst) {
            return;
        }
        let info = ProcessInfo {
            pid: r.pid,
            runtime_id: r.uid.clone(),
            name: r.name.clone(),
            command_line: r.info.command_line.clone(),
            entry_point_assembly: r.info.entrypoint_assembly.clone().filter(|s| !s.is_empty()),
        };
        let (events, plan) = {
            let mut engine = lock(&self.engine);
            let events = engine.add_process(&info, self.now());
            (events, engine.session_plan(r.pid))
        };
        let session = if plan.is_empty() {
            None
        } else {
            counters::Session::start(api, self, r, &plan)
        };
        if self.collects_exceptions(r.pid) {
            let (api2, runtime) = (Arc::clone(api), r.clone());
            tokio::spawn(async move {
                if let Err(e) = api2.exceptions.follow(&runtime).await {
                    eprintln!(
                        "dsipc: serve: pid {}: collection rules: exceptions: {}",
                        runtime.pid,
                        e.detail()
                    );
                }
            });
        }
        lock(&self.tracked).insert(
            r.pid,
            Tracked {
                key: r.key(),
                runtime: r.clone(),
                info,
                counters: session,
                actions: Vec::new(),
            },
        );
        self.dispatch(api, events);
    }

    /// Whether a rule on `pid` has a CollectExceptions action.
    fn collects_exceptions(&self, pid: u32) -> bool {
        let engine = lock(&self.engine);
        let names = engine.descriptions(pid, self.now()).unwrap_or_default();
        names.keys().any(|name| match engine.rules().get(name) {
            Some(entry) => entry.rule.as_ref().map_or(false, |rule| {
                rule.actions
                    .iter()
                    .any(|a| matches!(a.settings, ActionSettings::CollectExceptions { .. }))
            }),
            None => false,
        })
    }

    /// A runtime is gone: its rules, session and running actions go with it.
    fn drop_process(&self, pid: u32) {
        lock(&self.engine).remove_process(pid);
        if let Some(t) = lock(&self.tracked).remove(&pid) {
            if let Some(s) = t.counters {
                s.abort();
            }
            for a in t.actions {
                a.abort();
            }
        }
    }

    /// Acts on what the engine said: a firing runs the rule's actions on a task of its own.
    fn dispatch(self: &Arc<Self>, api: &Arc<Api>, events: Vec<Event>) {
        for e in events {
            match e {
                Event::Fire { pid, rule, .. } => self.fire(api, pid, &rule),
                // Said once as the rule enters the state, not at each held-back firing.
                Event::Throttled { .. } => {}
                Event::StateChanged {
                    pid,
                    rule,
                    state,
                    reason,
                } => {
                    if matches!(
                        state,
                        CollectionRuleState::Throttled | CollectionRuleState::Finished
                    ) {
                        eprintln!(
                            "dsipc: serve: pid {}: collection rule {}: {}",
                            pid, rule, reason
                        );
                    }
                }
            }
        }
    }

    fn fire(self: &Arc<Self>, api: &Arc<Api>, pid: u32, name: &str) {
        let rule = match lock(&self.engine).rules().get(name).map(|e| e.rule.clone()) {
            Some(Ok(rule)) => rule,
            _ => return,
        };
        let mut tracked = lock(&self.tracked);
        let t = match tracked.get_mut(&pid) {
            Some(t) => t,
            None => return,
        };
        if self.closed.load(Ordering::SeqCst) {
            return;
        }
        eprintln!(
            "dsipc: serve: pid {}: collection rule {}: triggered; running its actions",
            pid, name
        );
        let (runtime, info) = (t.runtime.clone(), t.info.clone());
        let (me, api2) = (Arc::clone(self), Arc::clone(api));
        let task = tokio::spawn(async move {
            let rule_name = rule.name.clone();
            if let Err(e) = actions::run(&api2, &runtime, info, &rule).await {
                eprintln!(
                    "dsipc: serve: pid {}: collection rule {}: {}",
                    pid,
                    rule_name,
                    dsipc_trace::format::clean(&e)
                );
            }
            let events = lock(&me.engine).actions_completed(pid, &rule_name, me.now());
            me.dispatch(&api2, events);
        });
        t.actions.retain(|a| !a.is_finished());
        t.actions.push(task);
    }

    /// A counter or meter sample of `pid`'s session.
    fn sample(self: &Arc<Self>, api: &Arc<Api>, pid: u32, s: &dsipc_trace::counters::Sample) {
        let events = counters::feed(&mut lock(&self.engine), pid, s, self.now());
        if !events.is_empty() {
            self.dispatch(api, events);
        }
    }

    /// A request start or stop of `pid`'s session.
    fn request(self: &Arc<Self>, api: &Arc<Api>, pid: u32, r: &dsipc_trace::aspnet::RequestEvent) {
        let events = counters::feed_request(&mut lock(&self.engine), pid, r, self.now());
        if !events.is_empty() {
            self.dispatch(api, events);
        }
    }

    /// Serve stops: every session and action task ends.
    fn shutdown(&self) {
        self.closed.store(true, Ordering::SeqCst);
        for (_, t) in lock(&self.tracked).drain() {
            if let Some(s) = t.counters {
                s.abort();
            }
            for a in t.actions {
                a.abort();
            }
        }
    }
}

/// Ends the rules' tasks when [`follow`] ends (serve dropped, its task aborted).
struct Shutdown(Arc<Rules>);

impl Drop for Shutdown {
    fn drop(&mut self) {
        self.0.shutdown();
    }
}

/// Runs discovery on `/metrics`' schedule and keeps the rules following every runtime.
/// Runs until aborted; its end ends every session and action it started.
pub(crate) async fn follow(api: Arc<Api>) {
    let rules = match &api.rules {
        Some(r) => Arc::clone(r),
        None => return,
    };
    let _shutdown = Shutdown(Arc::clone(&rules));
    let mut listing_failed = false;
    let mut connected: Vec<dsipc::wire::Guid> = Vec::new();
    loop {
        if let Some(pool) = &api.discovery.pool {
            connected = pool.runtimes().iter().map(|r| r.cookie).collect();
        }
        match api.discovery.list().await {
            Ok(all) => {
                listing_failed = false;
                rules.observe(&api, &all);
            }
            Err(e) => {
                if !listing_failed {
                    eprintln!(
                        "dsipc: serve: collection rules: cannot list the runtimes: {} (tried again every {} s)",
                        e.detail(),
                        crate::metrics::DISCOVERY_INTERVAL.as_secs()
                    );
                }
                listing_failed = true;
            }
        }
        match &api.discovery.pool {
            None => tokio::time::sleep(crate::metrics::DISCOVERY_INTERVAL).await,
            Some(pool) => {
                let _ = pool
                    .wait_until(crate::metrics::DISCOVERY_INTERVAL, |list| {
                        list.len() != connected.len()
                            || list.iter().any(|r| !connected.contains(&r.cookie))
                    })
                    .await;
            }
        }
    }
}

/// Tells the engine every [`TICK`] that time passed. Runs until aborted.
pub(crate) async fn tick(api: Arc<Api>) {
    let rules = match &api.rules {
        Some(r) => Arc::clone(r),
        None => return,
    };
    let mut every = tokio::time::interval(TICK);
    every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        every.tick().await;
        let events = lock(&rules.engine).tick(rules.now());
        rules.dispatch(&api, events);
    }
}
