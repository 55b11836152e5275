//! `/metrics`: the default process's counters, collected by the CLI's one counters session
//! loop ([`crate::prom::spawn_session`]: a dsipc-tokio session, so connect and listen
//! mode alike, decoded by dsipc-trace) into the one Prometheus store and writer the other
//! commands use (dotnet-monitor's names).
//!
//! As dotnet-monitor's `MetricsService` (a background service, not a request, drives the
//! collection): [`follow`] runs discovery on its own schedule ([`DISCOVERY_INTERVAL`]; in
//! listen mode also at once when a runtime connects or leaves). When it finds a default
//! process the counters session starts; it runs until that runtime ends it (it exits) or
//! the runtime is no longer the default one (serve stops it), and its series go with it. A
//! scrape only renders the store. `--no-metrics` is dotnet-monitor's `Metrics:Enabled`
//! false: nothing is collected and `/metrics` is 400.

use std::sync::mpsc::{self, Receiver, TryRecvError};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use dsipc_tokio::StopHandle;
use dsipc_trace::counters::{CounterSet, CountersConfig};
use tokio::task::JoinHandle;

use super::procs::{Discovery, Runtime};
use crate::prom::Store;

/// Time the runtime has to start the session, or to answer its StopTracing.
const START_TIMEOUT: Duration = Duration::from_secs(10);

/// Time a stopped session has to drain to its end before its task is dropped: the runtime
/// flushes what it holds (at most its 10 MB buffer) within moments of StopTracing; past
/// this it is not answering, and dropping the connection ends the session on its side.
const STOP_WAIT: Duration = START_TIMEOUT;

/// How often discovery looks for the default process: dotnet-monitor's `MetricsService`
/// looks again 5 s after it found none (or its pipeline ended). A look lists the socket
/// folders (`--tmpdir`, else every process's TMPDIR read from `/proc`) and asks only the
/// runtimes it has not seen yet (ProcessInfo is cached; a silent socket is asked again
/// after [`super::procs::SILENT_RETRY_AFTER`]): that is all an idle serve does per
/// interval. In listen mode a runtime connecting or leaving wakes it at once; the
/// interval then only retries a session that ended.
pub const DISCOVERY_INTERVAL: Duration = Duration::from_secs(5);

/// dotnet-monitor's words for `/metrics` with metrics disabled.
pub const DISABLED: &str = "Metrics was not enabled.";

/// The series of the default process, and how to collect them.
pub struct Metrics {
    store: Arc<Mutex<Store>>,
    counters: CounterSet,
    interval: f64,
    enabled: bool,
}

fn lock(store: &Mutex<Store>) -> std::sync::MutexGuard<'_, Store> {
    store.lock().unwrap_or_else(|p| p.into_inner())
}

impl Metrics {
    /// Collecting `counters` every `interval` seconds (nothing at all unless `enabled`).
    pub fn new(counters: CounterSet, interval: f64, enabled: bool) -> Metrics {
        Metrics {
            store: Arc::new(Mutex::new(Store::default())),
            counters,
            interval,
            enabled,
        }
    }

    /// False with `--no-metrics`.
    pub fn enabled(&self) -> bool {
        self.enabled
    }

    /// The exposition of every series held (`None` when metrics are disabled).
    pub fn render(&self) -> Option<String> {
        if self.enabled {
            Some(lock(&self.store).render())
        } else {
            None
        }
    }

    /// Starts collecting `runtime`'s counters (a detached task).
    fn start(&self, runtime: &Runtime) -> Collecting {
        let pid = runtime.pid;
        let major = runtime.major_version();
        let config = CountersConfig::new(self.counters.clone(), self.interval, major);
        let (tx, started) = mpsc::channel();
        let task = crate::prom::spawn_session(
            runtime.client(START_TIMEOUT),
            pid,
            config,
            Arc::clone(&self.store),
            "dsipc: serve",
            Some(tx),
        );
        Collecting {
            key: runtime.key(),
            pid,
            started,
            stop: None,
            task,
        }
    }

    /// Stops `c`'s session (if it still runs) and drops its series.
    async fn stop(&self, mut c: Collecting) {
        if !c.task.is_finished() {
            c.poll_started();
            match &c.stop {
                Some(h) => {
                    // A failed stop ends the session's stream too.
                    let _ = h.stop().await;
                    if tokio::time::timeout(STOP_WAIT, &mut c.task).await.is_err() {
                        c.task.abort();
                    }
                }
                // Still starting: dropping its connection ends it.
                None => c.task.abort(),
            }
        }
        lock(&self.store).remove(c.pid);
    }
}

/// The session collecting the default process.
struct Collecting {
    /// Which runtime ([`Runtime::key`]).
    key: (u32, String),
    pid: u32,
    /// Hears whether the session started.
    started: Receiver<Result<StopHandle, dsipc_tokio::Error>>,
    /// Its stop handle, once it started.
    stop: Option<StopHandle>,
    task: JoinHandle<()>,
}

impl Collecting {
    /// Takes the start's outcome if it came: the start's error, if it failed.
    fn poll_started(&mut self) -> Option<dsipc_tokio::Error> {
        match self.started.try_recv() {
            Ok(Ok(h)) => {
                self.stop = Some(h);
                None
            }
            Ok(Err(e)) => Some(e),
            Err(TryRecvError::Empty) | Err(TryRecvError::Disconnected) => None,
        }
    }
}

/// Runs discovery every [`DISCOVERY_INTERVAL`] and keeps `metrics` collecting the default
/// process of `discovery` while there is one. Runs until aborted.
pub async fn follow(discovery: &Discovery, metrics: &Metrics) {
    let mut current: Option<Collecting> = None;
    // The runtime last announced on stderr, and the one whose start failure was told: a
    // session retried every interval is said once.
    let mut announced: Option<(u32, String)> = None;
    let mut failure_told: Option<(u32, String)> = None;
    let mut listing_failed = false;
    // Listen mode: the runtimes connected at the last look.
    let mut connected: Vec<dsipc::wire::Guid> = Vec::new();
    loop {
        if let Some(pool) = &discovery.pool {
            connected = pool.runtimes().iter().map(|r| r.cookie).collect();
        }
        match discovery.list().await {
            Ok(all) => {
                listing_failed = false;
                let default = discovery.default_of(&all).ok();
                // A session that ended is started again at the next look, not this one: a
                // runtime that just exited may still be listed (its socket and pid linger
                // until it is reaped), and dotnet-monitor too waits before trying again.
                let mut ended = false;
                if let Some(c) = current.as_mut() {
                    let finished = c.task.is_finished();
                    if let Some(e) = c.poll_started() {
                        if failure_told.as_ref() != Some(&c.key) {
                            eprintln!(
                                "dsipc: serve: pid {}: counters: {} (tried again while it is the default process)",
                                c.pid,
                                dsipc_trace::format::clean(&e.to_string())
                            );
                            failure_told = Some(c.key.clone());
                        }
                    }
                    if finished {
                        // It ended by itself (its runtime exited, or it could not start):
                        // its series went with it.
                        current = None;
                        ended = true;
                    } else if default.map(Runtime::key).as_ref() != Some(&c.key) {
                        let pid = c.pid;
                        let listed = all.iter().any(|r| r.key() == c.key);
                        if let Some(c) = current.take() {
                            metrics.stop(c).await;
                        }
                        eprintln!(
                            "dsipc: serve: pid {} {}: its series are dropped",
                            pid,
                            if listed {
                                "is no longer the default process"
                            } else {
                                "is gone"
                            }
                        );
                        announced = None;
                    }
                }
                if let (None, Some(r), false) = (&current, default, ended) {
                    let key = r.key();
                    if announced.as_ref() != Some(&key) {
                        eprintln!(
                            "dsipc: serve: default process pid {} ({}): collecting its counters every {} s for /metrics",
                            r.pid,
                            r.name,
                            metrics.interval
                        );
                        announced = Some(key);
                    }
                    current = Some(metrics.start(r));
                }
            }
            Err(e) => {
                // The current session, if any, goes on: its runtime ends it when it exits.
                if !listing_failed {
                    eprintln!(
                        "dsipc: serve: cannot look for the default process: {} (tried again every {} s)",
                        e.detail(),
                        DISCOVERY_INTERVAL.as_secs()
                    );
                }
                listing_failed = true;
            }
        }
        match &discovery.pool {
            None => tokio::time::sleep(DISCOVERY_INTERVAL).await,
            Some(pool) => {
                // Until a runtime connects or leaves, or the interval passed.
                let _ = pool
                    .wait_until(DISCOVERY_INTERVAL, |list| {
                        list.len() != connected.len()
                            || list.iter().any(|r| !connected.contains(&r.cookie))
                    })
                    .await;
            }
        }
    }
}
