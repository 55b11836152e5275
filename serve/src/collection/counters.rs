//! The one counters session of a runtime the rules follow: every EventCounter, shortcut
//! and EventMeter trigger of its rules read from it (dsipc-recipes' [`AsyncCounterRun`], the
//! session loop `/metrics` runs too), each sample handed to the engine as it is decoded.
//! When an AspNet trigger needs requests, the same session also enables the DiagnosticSource
//! bridge with dotnet-monitor's request filter ([`dsipc_trace::aspnet`]), and each request
//! start and stop decoded from the same parse goes to the engine too.
//!
//! It is separate from the default process's `/metrics` session this round (a runtime that
//! is both the default process and followed by counter rules has two counters sessions).

use std::sync::{Arc, Mutex};
use std::time::Duration;

use dsipc_recipes::counters::AsyncCounterRun;
use dsipc_tokio::StopHandle;
use dsipc_trace::aspnet::{AspNetRequestSink, RequestEvent};
use dsipc_trace::counters::{
    CounterEvent, CounterKind, CounterSet, CountersConfig, Sample, Source,
};
use dsipc_trace::format::clean;
use dsipc_trace::{EventInfo, TraceContext, TraceSink};
use tokio::task::JoinHandle;

use super::{lock, Rules};
use crate::api::Api;
use crate::procs::Runtime;
use crate::rules::{
    AspNetEvent, CounterSample, Engine, Event, MeterSample, MeterValue, SessionPlan, TriggerKind,
};

/// Time the runtime has to start the session, or to answer its StopTracing (as `/metrics`'
/// session).
const START_TIMEOUT: Duration = Duration::from_secs(10);

/// Time a stopped session has to drain before its task is dropped (the runtime flushes at
/// once; past this it is not answering, and dropping the connection ends the session).
const STOP_WAIT: Duration = START_TIMEOUT;

/// A runtime's counters session for its rules.
pub(super) struct Session {
    stop: Arc<Mutex<Option<StopHandle>>>,
    task: JoinHandle<()>,
}

/// `Provider[a,b]` of a counter list, or `None` when a name cannot be written in one (the
/// list's own separators in it).
fn entry(provider: &str, names: &[String]) -> Option<String> {
    let bad = |s: &str| s.is_empty() || s.contains(&['[', ']', ','][..]);
    if bad(provider) || names.iter().any(|n| bad(n)) {
        return None;
    }
    Some(format!("{}[{}]", provider, names.join(",")))
}

impl Session {
    /// Starts the session `plan` asks of `runtime` (a detached task feeding `rules`).
    pub(super) fn start(
        api: &Arc<Api>,
        rules: &Arc<Rules>,
        runtime: &Runtime,
        plan: &SessionPlan,
    ) -> Option<Session> {
        let pid = runtime.pid;
        let mut parts = Vec::new();
        let mut interval = plan.meter_interval;
        for c in &plan.counters {
            interval = interval.min(c.interval);
            match entry(&c.provider, &c.counters) {
                Some(e) => parts.push(e),
                None => eprintln!(
                    "dsipc: serve: pid {}: collection rules: the counters of {:?} cannot be asked for",
                    pid, c.provider
                ),
            }
        }
        for m in &plan.meters {
            match entry(&m.meter, &m.instruments) {
                Some(e) => parts.push(e),
                None => eprintln!(
                    "dsipc: serve: pid {}: collection rules: the instruments of {:?} cannot be asked for",
                    pid, m.meter
                ),
            }
        }
        if parts.is_empty() && !plan.aspnet_requests {
            return None;
        }
        let set = if parts.is_empty() {
            CounterSet::empty()
        } else {
            match CounterSet::parse(&parts.join(",")) {
                Ok(s) => s,
                Err(e) => {
                    eprintln!("dsipc: serve: pid {}: collection rules: {}", pid, e);
                    return None;
                }
            }
        };
        let mut config = CountersConfig::new(set, interval.as_secs_f64(), runtime.major_version());
        if plan.meters.is_empty() && plan.counters.is_empty() {
            // Requests alone: no Metrics session to ask for.
            config.metrics = None;
        }
        let extra = if plan.aspnet_requests {
            vec![dsipc_trace::aspnet::provider()]
        } else {
            Vec::new()
        };
        let client = runtime.client(START_TIMEOUT);
        let stop = Arc::new(Mutex::new(None));
        let stop_slot = Arc::clone(&stop);
        let (api, rules) = (Arc::clone(api), Arc::clone(rules));
        let task = tokio::spawn(async move {
            let run = match AsyncCounterRun::start_with(&client, &config, &extra).await {
                Ok(run) => run,
                Err(e) => {
                    eprintln!(
                        "dsipc: serve: pid {}: collection rules: counters: {}",
                        pid,
                        clean(&e.to_string())
                    );
                    return;
                }
            };
            *lock(&stop_slot) = Some(run.stop_handle());
            let mut requests = Requests {
                sink: AspNetRequestSink::new(),
                rules: Arc::clone(&rules),
                api: Arc::clone(&api),
                pid,
            };
            let end = run
                .run_with(
                    &mut |ev| match ev {
                        CounterEvent::Sample(s) => rules.sample(&api, pid, &s),
                        CounterEvent::Notice(n) => eprintln!(
                            "dsipc: serve: pid {}: collection rules: {}",
                            pid,
                            clean(&n.to_string())
                        ),
                    },
                    &mut requests,
                )
                .await;
            let stats = requests.sink.stats();
            if stats.malformed > 0 {
                eprintln!(
                    "dsipc: serve: pid {}: collection rules: skipped {} request event(s){}",
                    pid,
                    stats.malformed,
                    stats
                        .last_error
                        .as_ref()
                        .map(|e| format!(" (the last: {})", e))
                        .unwrap_or_default()
                );
            }
            for p in end.problems() {
                eprintln!("dsipc: serve: pid {}: collection rules: {}", pid, p);
            }
        });
        Some(Session { stop, task })
    }

    /// Asks the runtime to end the session (bounded), on a task of its own.
    pub(super) fn stop(self) {
        let handle = lock(&self.stop).take();
        match handle {
            None => self.task.abort(),
            Some(h) => {
                let mut task = self.task;
                tokio::spawn(async move {
                    let _ = h.stop().await;
                    if tokio::time::timeout(STOP_WAIT, &mut task).await.is_err() {
                        task.abort();
                    }
                });
            }
        }
    }

    /// Whether the session started and then ended by itself (the runtime ended it; when it
    /// is still listed, the session is started again at the next look, as `/metrics` does).
    pub(super) fn ended_after_start(&self) -> bool {
        self.task.is_finished() && lock(&self.stop).is_some()
    }

    /// Ends the session at once (its runtime is gone, or serve stops).
    pub(super) fn abort(self) {
        self.task.abort();
    }
}

/// The request events of a session, each handed to the engine as it is decoded.
struct Requests {
    sink: AspNetRequestSink,
    rules: Arc<Rules>,
    api: Arc<Api>,
    pid: u32,
}

impl TraceSink for Requests {
    fn event(
        &mut self,
        e: &dsipc::nettrace::Event<'_>,
        info: Option<&EventInfo>,
        cx: &TraceContext<'_>,
    ) {
        self.sink.event(e, info, cx);
        for r in self.sink.drain() {
            self.rules.request(&self.api, self.pid, &r);
        }
    }

    fn end(&mut self, end: &Result<(), dsipc_trace::StreamError>, cx: &TraceContext<'_>) {
        self.sink.end(end, cx);
    }
}

/// Hands request event `r` of `pid` to `engine` at `at` (when it arrived: the engine's
/// clock, which its heartbeat measures running requests against).
pub(super) fn feed_request(
    engine: &mut Engine,
    pid: u32,
    r: &RequestEvent,
    at: Duration,
) -> Vec<Event> {
    let event = match r {
        RequestEvent::Start {
            activity_id, path, ..
        } => AspNetEvent::RequestStart {
            activity_id,
            path,
            at,
        },
        RequestEvent::Stop {
            activity_id,
            path,
            status_code,
            duration,
            ..
        } => AspNetEvent::RequestStop {
            activity_id,
            path,
            duration: *duration,
            status_code: *status_code,
            at,
        },
    };
    engine.aspnet_event(pid, &event)
}

/// Whether some EventMeter trigger reads percentile `q` of `meter`'s `instrument`: the
/// decoder gives a histogram's percentiles one sample each, and a percentile no trigger
/// reads must not reach the engine (it would fail the threshold of the one that does).
fn wanted_percentile(engine: &Engine, meter: &str, instrument: &str, q: f64) -> bool {
    engine.rules().entries.iter().any(|e| match &e.rule {
        Ok(rule) => match &rule.trigger.kind {
            TriggerKind::EventMeter(t) => {
                t.meter_name.eq_ignore_ascii_case(meter)
                    && t.instrument_name.eq_ignore_ascii_case(instrument)
                    && t.histogram_percentile.map(i64::from) == Some((100.0 * q) as i64)
            }
            _ => false,
        },
        Err(_) => false,
    })
}

/// Hands sample `s` of `pid` to `engine` at `at`.
pub(super) fn feed(engine: &mut Engine, pid: u32, s: &Sample, at: Duration) -> Vec<Event> {
    // The runtime's own number: a day at most (longer than any window a trigger holds,
    // and inside what a Duration takes); not a positive number, none.
    let interval = if s.interval_secs.is_finite() && s.interval_secs > 0.0 {
        Duration::from_secs_f64(s.interval_secs.min(86_400.0))
    } else {
        Duration::ZERO
    };
    match (s.source, s.kind) {
        (Source::EventCounter, _) => engine.counter_sample(
            pid,
            &CounterSample {
                provider: &s.provider,
                counter: &s.name,
                value: s.value,
                interval,
                at,
            },
        ),
        (Source::Meter, CounterKind::Percentile(q)) => {
            if !wanted_percentile(engine, &s.provider, &s.name, q) {
                return Vec::new();
            }
            let quantiles = [(q, s.value)];
            engine.meter_sample(
                pid,
                &MeterSample {
                    meter: &s.provider,
                    instrument: &s.name,
                    value: MeterValue::Quantiles(&quantiles),
                    interval,
                    at,
                },
            )
        }
        (Source::Meter, _) => engine.meter_sample(
            pid,
            &MeterSample {
                meter: &s.provider,
                instrument: &s.name,
                value: MeterValue::Value(s.value),
                interval,
                at,
            },
        ),
    }
}
